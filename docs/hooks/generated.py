"""MkDocs hook: ``<!-- flowrl-help -->`` in a page becomes the output of
``flowrl --help`` and of ``flowrl COMMAND --help`` for every subcommand it lists,
run at build time, so the CLI page cannot disagree with the command."""

from __future__ import annotations

import os
import re
import subprocess
import sys

MARKER = "<!-- flowrl-help -->"


def _help(*args: str) -> str:
    env = {**os.environ, "COLUMNS": "100", "NO_COLOR": "1"}
    proc = subprocess.run([sys.executable, "-m", "flowrl.cli", *args, "--help"],
                          capture_output=True, text=True, env=env, timeout=60, check=True)
    return proc.stdout.rstrip()


def _help_sections() -> str:
    top = _help()
    commands = re.search(r"\{([\w,-]+)\}", top).group(1).split(",")
    parts = ["```text", top, "```"]
    for name in commands:
        parts += ["", f"## `flowrl {name}`", "", "```text", _help(name), "```"]
    return "\n".join(parts)


def on_page_markdown(markdown: str, **kwargs) -> str:
    if MARKER not in markdown:
        return markdown
    return markdown.replace(MARKER, _help_sections())
