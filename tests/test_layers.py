"""flowrl's packages import each other in layers: tools/check_layers.py finds no
circle between them, and it does find one when there is one."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tools"))

import check_layers  # noqa: E402


def test_flowrl_has_no_import_circle_between_packages():
    out = subprocess.run([sys.executable, str(ROOT / "tools" / "check_layers.py")],
                         capture_output=True, text=True, cwd=ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "layer 0:" in out.stdout


def test_the_rl_layers_point_down():
    graph = check_layers.import_graph()
    for low, high in [("envs", "workers"), ("policies", "algorithms"), ("workers", "ops"),
                      ("workers", "evaluation"), ("ops", "algorithms"),
                      ("algorithms", "experiment"), ("algorithms", "evaluation"),
                      ("graph", "runtime")]:
        assert not graph.has_edge(low, high), graph.edges[low, high]["imports"]


def write(root: Path, name: str, text: str) -> None:
    path = root / name
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_a_circle_through_a_function_level_relative_import_fails(tmp_path):
    write(tmp_path, "flowrl/__init__.py", "")
    write(tmp_path, "flowrl/errors.py", "")
    write(tmp_path, "flowrl/low/__init__.py", "from flowrl.errors import x\n")
    write(tmp_path, "flowrl/low/part.py", "def f():\n    from ..high import g\n")
    write(tmp_path, "flowrl/high.py", "from .low import part\nfrom flowrl import errors\n")
    graph = check_layers.import_graph(tmp_path)
    assert sorted(graph.edges) == [("high", "errors"), ("high", "low"), ("low", "errors"),
                                   ("low", "high")]
    assert check_layers.circles(graph) == [["high", "low"]]
    text, failing = check_layers.report(graph)
    assert failing == [["high", "low"]]
    assert "low -> high: flowrl/low/part.py:2 flowrl.high.g" in text


def test_graph_and_runtime_importing_each_other_is_a_circle(tmp_path):
    write(tmp_path, "flowrl/graph/__init__.py", "from flowrl.runtime import run\n")
    write(tmp_path, "flowrl/runtime/__init__.py", "from flowrl.graph import Plan\n")
    graph = check_layers.import_graph(tmp_path)
    assert check_layers.report(graph)[1] == [["graph", "runtime"]]
