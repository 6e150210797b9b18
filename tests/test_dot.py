"""DOT output: golden text, byte-stable across processes, stats, rendering."""

from __future__ import annotations

import os
import pathlib
import subprocess
import sys

import pydot
import pytest

import flowrl
from flowrl import ConfigError, FlowError

import dot_plan

HERE = pathlib.Path(__file__).parent
GOLDEN = HERE / "golden" / "plan.dot"


def test_dot_matches_golden_file():
    assert dot_plan.build().to_dot() == GOLDEN.read_text()


@pytest.mark.parametrize("hash_seed", ["1", "12345"])
def test_dot_is_byte_stable_across_processes(hash_seed):
    # the checkout under test first, whatever flowrl the environment has installed
    env = dict(os.environ, PYTHONHASHSEED=hash_seed,
               PYTHONPATH=os.pathsep.join([str(HERE.parent), os.environ.get("PYTHONPATH", "")]))
    out = subprocess.run([sys.executable, str(HERE / "dot_plan.py")], env=env, cwd=HERE,
                         capture_output=True, text=True, check=True, timeout=60)
    assert out.stdout == GOLDEN.read_text()


def test_dot_parses_and_clusters_by_placement():
    (graph,) = pydot.graph_from_dot_data(dot_plan.build().to_dot())
    clusters = {sg.get_name(): {n.get_name().strip('"') for n in sg.get_nodes()}
                for sg in graph.get_subgraphs()}
    assert clusters["cluster_aggregators"] == {"tree", "tree/input", "tree/input.batch"}
    assert clusters["cluster_shards"] == {"rollouts", "postprocess", "replay"}
    assert "mix" in clusters["cluster_driver"]
    dashed = {(e.get_source().strip('"'), e.get_destination().strip('"'))
              for e in graph.get_edges() if e.get("style") == "dashed"}
    assert ("postprocess", "rollouts.gather_async") in dashed
    assert ("replay", "tree/input") in dashed
    assert ("rollouts", "postprocess") not in dashed


def test_labels_are_escaped():
    plan = flowrl.Plan(flowrl.from_iterable(lambda: [1], name='say "hi"\\now'))
    (graph,) = pydot.graph_from_dot_data(plan.to_dot())
    assert [n.get_name() for n in graph.get_subgraphs()[0].get_nodes()] == ['"say \\"hi\\"\\\\now"']


def test_dot_with_stats_shows_rates_share_and_queues():
    plan = dot_plan.build()
    with plan.compile() as run:
        run.take(50)
        stats = run.stats()
    text = plan.to_dot(stats)
    assert "items/s" in text and "% busy" in text
    assert "queue " in text  # gather_async keeps requests in flight
    assert '"train" -> "split" [label=' in text


def test_render_dot_text(tmp_path):
    path = dot_plan.build().render(str(tmp_path / "plan.dot"))
    assert pathlib.Path(path).read_text() == GOLDEN.read_text()


def test_render_without_graphviz_names_what_to_install(tmp_path, monkeypatch):
    monkeypatch.setattr("shutil.which", lambda name: None)
    with pytest.raises(FlowError, match=r"needs Graphviz's `dot` program.*install the graphviz"):
        dot_plan.build().render(str(tmp_path / "plan.svg"))


def test_render_rejects_unknown_format(tmp_path):
    with pytest.raises(ConfigError, match=r"unknown format 'pdfx'"):
        dot_plan.build().render(str(tmp_path / "plan.pdfx"))


@pytest.mark.skipif(__import__("shutil").which("dot") is None, reason="Graphviz not installed")
def test_render_svg_with_graphviz(tmp_path):
    path = dot_plan.build().render(str(tmp_path / "plan.svg"))
    assert pathlib.Path(path).read_text().lstrip().startswith(("<?xml", "<svg"))
