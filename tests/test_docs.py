"""The docs site builds without a warning and its Python examples run as written.

``mkdocs build --strict`` fails on a broken link or anchor, a ``:::`` reference to
a module or object that does not exist, and a docstring mkdocstrings cannot
render, so a rename in the code that leaves the docs behind fails here. The docs
dependencies come with the ``test`` extra (through ``flowrl[docs]``).

Every ```` ```python ```` block of a page runs here as written; ```` ```pycon ````
(doctest sessions) and ```` ```py ```` (fragments with a path the reader fills in)
are shown, not run.
"""

from __future__ import annotations

import os
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
PAGES_WITH_CODE = sorted(p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")
                         if "```python\n" in p.read_text())


@pytest.mark.timeout(300)
def test_mkdocs_build_strict_passes(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "mkdocs", "build", "--strict", "--quiet",
                           "-f", str(ROOT / "mkdocs.yml"), "-d", str(tmp_path / "site")],
                          cwd=ROOT, capture_output=True, text=True, timeout=280,
                          env={**os.environ, "NO_MKDOCS_2_WARNING": "1"})
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    site = tmp_path / "site"
    # the operator reference is generated from the docstrings, not left empty
    operators = (site / "reference" / "operators" / "index.html").read_text()
    assert 'id="flowrl.ops.rollout_ops.ConcatBatches"' in operators
    # the CLI page carries every subcommand's --help
    cli = (site / "cli" / "index.html").read_text()
    assert all(f"usage: flowrl {c}" in cli for c in ("train", "evaluate", "plan"))


def test_every_page_is_in_the_nav_or_left_out_on_purpose():
    nav = (ROOT / "mkdocs.yml").read_text()
    pages = {p.relative_to(DOCS).as_posix() for p in DOCS.rglob("*.md")}
    assert pages and all(page in nav for page in pages), sorted(p for p in pages if p not in nav)


def _code_blocks(page: str) -> list[str]:
    return re.findall(r"```python\n(.*?)```", (DOCS / page).read_text(), flags=re.S)


def _page_param(page: str):
    """A page whose examples import Ray (Ray Tune's) runs them in the suite's Ray session."""
    uses_ray = any(re.search(r"^\s*(from|import) ray\b", block, flags=re.M)
                   for block in _code_blocks(page))
    return pytest.param(page, marks=pytest.mark.ray) if uses_ray else page


@pytest.mark.timeout(300)
@pytest.mark.parametrize("page", [_page_param(p) for p in PAGES_WITH_CODE])
def test_python_examples_of_a_page_run(page, capsys, request):
    if request.node.get_closest_marker("ray"):
        request.getfixturevalue("ray_session")
    for block in _code_blocks(page):
        exec(compile(block, f"docs/{page}", "exec"), {})  # noqa: S102
    assert capsys.readouterr().out.strip(), f"docs/{page}'s examples printed nothing"


def test_where_the_docs_run_tensorboard_they_name_the_extra_that_installs_it():
    """flowrl writes TensorBoard files through tensorboardX; the TensorBoard app is
    not a dependency, so every paragraph of the README, the pages and the docstrings
    that says ``tensorboard --logdir`` names ``flowrl[tensorboard]``, an extra of
    pyproject.toml."""
    assert re.search(r'^tensorboard = \["tensorboard>=[0-9.]+"\]',
                     (ROOT / "pyproject.toml").read_text(), flags=re.M)
    files = [ROOT / "README.md", *sorted(DOCS.rglob("*.md")),
             *sorted((ROOT / "flowrl").rglob("*.py"))]
    said = []
    for path in files:
        for paragraph in re.split(r"\n\s*\n", path.read_text()):
            paragraph = re.sub(r"\s+", " ", paragraph)
            if "tensorboard --logdir" in paragraph:
                said.append((path.relative_to(ROOT).as_posix(),
                             "flowrl[tensorboard]" in paragraph))
    assert said and all(named for _, named in said), said


#: Docs speak to users: no project issue numbers and no test-file names (those go in
#: commits). Links to other projects' issues are fine.
INTERNAL = re.compile(r"\btests/\w|\btest_\w+\.py\b|\b[Ii]ssue\s*#?\d+|\b[Tt]he issue\b|"
                      r"\b[Ii]ssue's\b")


def _docstrings(path: pathlib.Path):
    import ast
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
            yield ast.get_docstring(node, clean=False) or ""


def test_pages_and_rendered_docstrings_name_no_issue_or_test_file():
    """The README, the pages and flowrl's docstrings (which the reference renders)."""
    found = set()
    for path in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        if INTERNAL.search(re.sub(r"\(https?://[^)]*\)", "", path.read_text())):
            found.add(path.relative_to(ROOT).as_posix())
    for path in (ROOT / "flowrl").rglob("*.py"):
        if any(INTERNAL.search(doc) for doc in _docstrings(path)):
            found.add(path.relative_to(ROOT).as_posix())
    assert not found, sorted(found)


def _doctest_fences():
    import importlib.util
    spec = importlib.util.spec_from_file_location("doctest_fences",
                                                  DOCS / "hooks" / "doctest_fences.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_docstrings_doctests_and_rest_tables_become_fenced_markdown():
    ext = _doctest_fences()
    doc = ("Squares.\n\n    >>> f(2)\n    4\n\nAfter.\n\n"
           "====  ====\nhook  when\n====  ====\na     b\n====  ====\nEnd.")
    assert ext.fence_tables(ext.fence_doctests(doc)) == (
        "Squares.\n\n    ```pycon\n    >>> f(2)\n    4\n    ```\n\nAfter.\n\n"
        "```text\n====  ====\nhook  when\n====  ====\na     b\n====  ====\n```\nEnd.")
    assert ext._ROLE.sub(ext._role, ":func:`~flowrl.ops.Replay` and :mod:`flowrl.ops`") == \
        "`Replay` and `flowrl.ops`"
