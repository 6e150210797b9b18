"""MkDocs hook: page parts generated at build time from the repository, so they
cannot disagree with it.

- ``<!-- flowrl-help -->`` becomes the output of ``flowrl --help`` and of
  ``flowrl COMMAND --help`` for every subcommand it lists;
- ``<!-- tuned-examples ALGO -->`` becomes the list of ``tuned_examples/*.yaml``
  whose ``algo:`` is ALGO, each with its env, its stop criteria and its first
  comment line (or a sentence saying there is none yet).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[2]
HELP = "<!-- flowrl-help -->"
TUNED = re.compile(r"<!-- tuned-examples (\w+) -->")


def _help(*args: str) -> str:
    """What ``flowrl ARGS --help`` prints (at 100 columns), from ``flowrl.cli.main``."""
    if str(ROOT) not in sys.path:
        sys.path.insert(0, str(ROOT))  # this checkout's flowrl
    from flowrl.cli import main

    out, columns = io.StringIO(), os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = "100"
    try:
        with contextlib.redirect_stdout(out):
            main([*args, "--help"])
    except SystemExit:
        pass
    finally:
        if columns is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = columns
    return out.getvalue().rstrip()


def _help_sections() -> str:
    top = _help()
    commands = re.search(r"\{([\w,-]+)\}", top).group(1).split(",")
    parts = ["```text", top, "```"]
    for name in commands:
        parts += ["", f"### `flowrl {name}`", "", "```text", _help(name), "```"]
    return "\n".join(parts)


def _tuned_examples(algo: str) -> str:
    rows = []
    for path in sorted((ROOT / "tuned_examples").glob("*.yaml")):
        text = path.read_text()
        spec = yaml.safe_load(text)
        if not isinstance(spec, dict) or spec.get("algo") != algo:
            continue
        comment = next((ln.lstrip("# ").strip() for ln in text.splitlines()
                        if ln.startswith("#")), "")
        stop = ", ".join(f"`{k}` {v}" for k, v in (spec.get("stop") or {}).items())
        rows.append(f"- `tuned_examples/{path.name}` (`{spec.get('env')}`; stop: {stop})"
                    + (f": {comment}" if comment else ""))
    if not rows:
        return f"No tuned example for `{algo}` yet."
    return "Tuned examples (`flowrl train --config FILE`; `python -m pytest -m slow " \
           "tests/test_tuned_examples.py` checks that each reaches its goal):\n\n" + "\n".join(rows)


def on_page_markdown(markdown: str, **kwargs) -> str:
    if HELP in markdown:
        markdown = markdown.replace(HELP, _help_sections())
    return TUNED.sub(lambda m: _tuned_examples(m.group(1)), markdown)
