"""DOT rendering of plans through pydot: byte-stable, clustered by placement.

Node ids are the plan's readable ids, everything is emitted in sorted order and
every id and label is quoted and escaped, so the same plan gives the same bytes
in every process. Async hand-offs (into ``gather_async``, aggregators and async
``Concurrently``) are dashed. With ``stats`` from ``Run.stats()`` each node shows
items/s, its share of busy time and its queue depth (and an operator's own
figures, ``extra``: the learner's policy lag, say), and each edge the rate of
items crossing it.
"""

from __future__ import annotations

import os
import shutil
from typing import TYPE_CHECKING, Any

import pydot

from flowrl.errors import ConfigError, FlowError

if TYPE_CHECKING:
    from flowrl.graph.plan import Plan

_CLUSTERS = (("driver", "driver", "#eef3fb"), ("shards", "shard hosts", "#eefaf0"),
             ("aggregators", "aggregators", "#fbf3e8"))
_SHAPES = {"source": "box", "transform": "ellipse", "gather": "invtrapezium",
           "union": "diamond", "split": "triangle", "sink": "box", "aggregate": "hexagon"}


def _q(text: str) -> str:
    return '"' + str(text).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def _stat_line(st: dict, total_busy: float) -> str:
    share = 100.0 * st.get("busy_s", 0.0) / total_busy if total_busy > 0 else 0.0
    line = f"{st.get('items_per_s', 0.0):.1f} items/s, {share:.0f}% busy"
    if st.get("max_queue_depth"):
        line += f", queue {st.get('queue_depth', 0)}/{st['max_queue_depth']}"
    for name, value in (st.get("extra") or {}).items():
        line += f"\n{name}: {value}"
    return line


def plan_to_dot(plan: "Plan", stats: dict[str, Any] | None = None) -> str:
    g = plan.graph
    dot = pydot.Dot(_q(plan.name), graph_type="digraph", rankdir="TB")
    dot.set_node_defaults(fontname="Helvetica", fontsize="10")
    dot.set_edge_defaults(fontname="Helvetica", fontsize="9")
    total_busy = sum(s.get("busy_s", 0.0) for s in (stats or {}).values())
    for placement, title, color in _CLUSTERS:
        members = sorted(n for n, a in g.nodes(data=True) if a["placement"] == placement)
        if not members:
            continue
        cluster = pydot.Cluster(placement, label=_q(title), style="filled", color=_q(color))
        for node_id in members:
            attrs = g.nodes[node_id]
            detail = attrs["label"] if attrs["label"] != node_id else attrs["detail"]
            label = node_id if detail == node_id else f"{node_id}\n{detail}"
            if attrs.get("num_shards"):
                label += f"\n[{attrs['num_shards']} shards]"
            if stats and node_id in stats:
                label += "\n" + _stat_line(stats[node_id], total_busy)
            cluster.add_node(pydot.Node(_q(node_id), label=_q(label),
                                        shape=_SHAPES.get(attrs["kind"], "ellipse")))
        dot.add_subgraph(cluster)
    for u, v, k, attrs in sorted(g.edges(keys=True, data=True)):
        edge_attrs = {}
        if attrs.get("asynchronous"):
            edge_attrs["style"] = "dashed"
        if stats and u in stats:
            edge_attrs["label"] = _q(f"{stats[u].get('items_per_s', 0.0):.1f}/s")
        dot.add_edge(pydot.Edge(_q(u), _q(v), **edge_attrs))
    return dot.to_string()


#: What :func:`plan_to_image` draws through Graphviz.
IMAGE_FORMATS = ("svg", "png")


def plan_to_image(plan: "Plan", fmt: str, stats: dict[str, Any] | None = None) -> bytes:
    """The plan drawn by Graphviz's ``dot`` as ``fmt`` (``"svg"`` or ``"png"``): the
    file's bytes, from :func:`plan_to_dot`'s text. FlowError naming what to install
    when Graphviz is missing."""
    if fmt not in IMAGE_FORMATS:
        raise ConfigError(f"unknown image format {fmt!r}; use one of {list(IMAGE_FORMATS)}, "
                          "or to_dot() for DOT text")
    if shutil.which("dot") is None:
        raise FlowError(f"drawing plan {plan.name!r} as {fmt} needs Graphviz's `dot` program, "
                        "which is not installed; install the graphviz package (apt-get install "
                        "graphviz, brew install graphviz or conda install graphviz), or write "
                        "a .dot file / use plan.to_dot()")
    (graph,) = pydot.graph_from_dot_data(plan_to_dot(plan, stats))
    return graph.create(format=fmt)


def render(plan: "Plan", path: str, stats: dict[str, Any] | None = None) -> str:
    """Write ``path`` (.dot text, or .svg/.png through Graphviz's ``dot``); returns it."""
    fmt = os.path.splitext(path)[1].lstrip(".").lower()
    if fmt not in ("dot", "gv", *IMAGE_FORMATS):
        raise ConfigError(f"render({path!r}): unknown format {fmt!r}; use a .dot, .svg or .png path")
    if fmt in ("dot", "gv"):
        with open(path, "w", encoding="utf-8") as f:
            f.write(plan_to_dot(plan, stats))
        return path
    data = plan_to_image(plan, fmt, stats)
    with open(path, "wb") as f:
        f.write(data)
    return path
