"""Check that flowrl's packages import each other in layers: no import circle.

A *unit* is a top-level piece of ``flowrl/``: a package (``flowrl/ops/``) or a
module (``flowrl/batch.py``); ``flowrl/__init__.py`` is the unit ``flowrl``. Every
import statement counts, at module level and inside functions alike, absolute and
relative. An edge ``a -> b`` means some module of ``a`` imports something of ``b``.

The script prints the unit graph in layers (each unit after everything it imports),
then every circle (a strongly connected component of more than one unit, with the
imports that close it), and exits 1 when a circle is left that ``EXEMPT`` does not
name.

    python tools/check_layers.py            # the check
    python tools/check_layers.py --edges    # also every import behind each edge

Standard library and networkx only.
"""

from __future__ import annotations

import argparse
import ast
import sys
from pathlib import Path

import networkx as nx

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "flowrl"

# Circles tolerated for now, each as the exact set of units it spans, with why. None is:
# the last one (graph <-> runtime) went when the compiler moved into the runtime.
EXEMPT: dict[frozenset[str], str] = {}


def module_name(path: Path, root: Path) -> str:
    """Dotted module name of ``path`` under ``root`` (``flowrl/ops/__init__.py`` ->
    ``flowrl.ops``)."""
    parts = list(path.relative_to(root).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path, module: str) -> list[tuple[str, int]]:
    """``(dotted name, line)`` of every import in ``path``; ``from a import b`` gives
    ``a.b`` (which may be a module or a name in ``a``)."""
    is_package = path.name == "__init__.py"
    tree = ast.parse(path.read_text(), str(path))
    found = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(alias.name, node.lineno) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                here = module.split(".")
                if not is_package:
                    here = here[:-1]
                base = ".".join(here[:len(here) - (node.level - 1)])
                prefix = f"{base}.{node.module}" if node.module else base
            else:
                prefix = node.module or ""
            found += [(f"{prefix}.{alias.name}", node.lineno) for alias in node.names]
    return found


def unit_of(name: str, units: set[str]) -> str | None:
    """The unit a dotted name belongs to, or None outside flowrl."""
    parts = name.split(".")
    if parts[0] != PACKAGE:
        return None
    if len(parts) > 1 and parts[1] in units:
        return parts[1]
    return PACKAGE


def import_graph(root: Path = ROOT) -> nx.DiGraph:
    """The unit graph; each edge's ``imports`` attribute lists ``(file, line, name)``."""
    files = sorted((root / PACKAGE).rglob("*.py"))
    units = {p.relative_to(root / PACKAGE).parts[0].removesuffix(".py") for p in files}
    units.discard("__init__")
    graph = nx.DiGraph()
    graph.add_nodes_from(units | {PACKAGE})
    for path in files:
        module = module_name(path, root)
        source = unit_of(module, units)
        for name, line in imported_modules(path, module):
            target = unit_of(name, units)
            if target is None or target == source:
                continue
            if not graph.has_edge(source, target):
                graph.add_edge(source, target, imports=[])
            graph.edges[source, target]["imports"].append(
                (str(path.relative_to(root)), line, name))
    return graph


def circles(graph: nx.DiGraph) -> list[list[str]]:
    """Strongly connected components of more than one unit, each sorted."""
    return sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)


def layers(graph: nx.DiGraph) -> list[list[str]]:
    """Units by layer, bottom first: a unit's layer is one above the highest unit it
    imports (a circle's units share one layer)."""
    condensed = nx.condensation(graph)
    level: dict[int, int] = {}
    for c in reversed(list(nx.topological_sort(condensed))):
        level[c] = 1 + max((level[d] for d in condensed.successors(c)), default=-1)
    out: list[list[str]] = [[] for _ in range(max(level.values(), default=-1) + 1)]
    for c, n in level.items():
        out[n] += condensed.nodes[c]["members"]
    return [sorted(units) for units in out]


def report(graph: nx.DiGraph, show_edges: bool = False) -> tuple[str, list[list[str]]]:
    """The printed report and the circles that no exemption covers."""
    lines = [f"{len(graph)} units, {graph.number_of_edges()} edges, "
             f"{len(layers(graph))} layers (bottom first):"]
    for n, units in enumerate(layers(graph)):
        lines.append(f"  layer {n}:")
        for unit in units:
            targets = sorted(graph.successors(unit))
            lines.append(f"    {unit} -> {', '.join(targets) if targets else '(nothing)'}")
            if show_edges:
                for target in targets:
                    for file, line, name in graph.edges[unit, target]["imports"]:
                        lines.append(f"        {file}:{line} {name}")
    found = circles(graph)
    failing = []
    lines.append(f"{len(found)} circle(s):")
    for circle in found:
        why = EXEMPT.get(frozenset(circle))
        if why is None:
            failing.append(circle)
        lines.append(f"  {' <-> '.join(circle)}" + (f"  [exempt: {why}]" if why else ""))
        members = set(circle)
        for a, b in sorted(graph.subgraph(members).edges):
            file, line, name = graph.edges[a, b]["imports"][0]
            more = len(graph.edges[a, b]["imports"]) - 1
            lines.append(f"    {a} -> {b}: {file}:{line} {name}"
                         + (f" (+{more} more)" if more else ""))
    return "\n".join(lines), failing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--edges", action="store_true",
                        help="list every import behind each edge")
    args = parser.parse_args(argv)
    text, failing = report(import_graph(), args.edges)
    print(text)
    if failing:
        print(f"FAIL: {len(failing)} import circle(s) between packages; "
              "move the code to the layer it belongs to", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
