"""Griffe extension: flowrl's docstrings, written for ``help()`` and doctest, as Markdown.

flowrl's docstrings are plain prose with reST inline roles and doctest examples
(collected by pytest). Markdown would read a ``>>>`` line as a nested block quote
and show ``:func:`~flowrl.x.f``` with its role, so before rendering this extension

- wraps each doctest run (``>>>``/``...`` lines and the output after them, up to a
  blank line) in a ``pycon`` code fence, at the run's own indentation;
- wraps each reST simple table (three rule lines of ``=``) in a ``text`` fence,
  where Markdown would read a rule line as a heading underline;
- turns ``:role:`~a.b.c``` into ```c``` and ``:role:`a.b```` into ```a.b```.

Only the rendered text changes; the docstrings in the code stay as they are.
"""

from __future__ import annotations

import re

import griffe

_RULE = re.compile(r"^\s*=+( +=+)+\s*$")
_ROLE = re.compile(r":(?:py:)?(?:func|class|mod|meth|attr|data|exc|obj|const):`(~?)([^`]+)`")


def _role(match: re.Match) -> str:
    target = match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if match.group(1) else target}`"


def fence_doctests(text: str) -> str:
    """``text`` with every doctest run inside a ``pycon`` fence."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        stripped = line.lstrip()
        if not stripped.startswith(">>>"):
            out.append(line)
            i += 1
            continue
        indent = line[: len(line) - len(stripped)]
        out.append(f"{indent}```pycon")
        while i < len(lines) and lines[i].strip() and lines[i].startswith(indent):
            out.append(lines[i])
            i += 1
        out.append(f"{indent}```")
    return "\n".join(out)


def fence_tables(text: str) -> str:
    """``text`` with every reST simple table inside a ``text`` fence."""
    lines = text.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        if not _RULE.match(lines[i]):
            out.append(lines[i])
            i += 1
            continue
        indent = lines[i][: len(lines[i]) - len(lines[i].lstrip())]
        rules, j = 0, i
        while j < len(lines) and rules < 3:
            rules += bool(_RULE.match(lines[j]))
            j += 1
        out += [f"{indent}```text", *lines[i:j], f"{indent}```"]
        i = j
    return "\n".join(out)


class DoctestFences(griffe.Extension):
    """Rewrite each object's docstring for Markdown once it is loaded (the root
    package comes through ``on_package``, every other object through ``on_object``)."""

    def __init__(self) -> None:
        super().__init__()
        self._done: set[int] = set()

    def _rewrite(self, obj: griffe.Object) -> None:
        if obj.docstring is None or id(obj.docstring) in self._done:
            return
        self._done.add(id(obj.docstring))
        text = _ROLE.sub(_role, obj.docstring.value)
        obj.docstring.value = fence_tables(fence_doctests(text))

    def on_object(self, *, obj: griffe.Object, **kwargs) -> None:
        self._rewrite(obj)

    def on_package(self, *, pkg: griffe.Module, **kwargs) -> None:
        self._rewrite(pkg)
