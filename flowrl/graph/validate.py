"""Validation rules a Plan must pass before it can compile, checked on ``plan.graph``.

Each rule raises :class:`~flowrl.errors.PlanError` or
:class:`~flowrl.errors.ConfigError` naming the node and saying how to fix it.
Parameter checks (``batch(0)``, unknown Concurrently modes, ...) already ran when
the operator was called; the rules here need the whole graph.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from flowrl.errors import ConfigError, PlanError
from flowrl.graph.node import LOCAL, SOURCE

if TYPE_CHECKING:
    import networkx as nx

    from flowrl.graph.plan import Plan


def validate(plan: "Plan") -> None:
    """Run every rule over ``plan.graph`` (in its topological insertion order)."""
    g = plan.graph
    for v, attrs in g.nodes(data=True):
        _check_single_consumer(g, v)
        op = attrs["op"]
        if op == "duplicate":
            _check_duplicate_consumed(plan, v)
        elif op == "zip_with_source_actor":
            _check_zip_source(g, v)
        elif op == "aggregate":
            _check_aggregate(g, v)
        elif op == "concurrently" and attrs["params"]["weights"]:
            _check_duplicate_lag(g, v)


def _parent(g: "nx.MultiDiGraph", v: str) -> str:
    """The node ``v``'s first input reads."""
    return next(u for u, _, index in g.in_edges(v, data="index") if index == 0)


def _users(g: "nx.MultiDiGraph", v: str, port: int) -> list[str]:
    return [w for _, w, p in g.out_edges(v, data="port") if p == port]


def _check_single_consumer(g, v) -> None:
    attrs = g.nodes[v]
    if attrs["stream"] != LOCAL:
        return
    for port in range(attrs["num_outputs"]):
        users = _users(g, v, port)
        if len(users) > 1:
            names = ", ".join(repr(u) for u in users)
            raise PlanError(
                f"LocalStream {v!r} is consumed by {len(users)} operators "
                f"({names}); a local stream has one consumer: use "
                f".duplicate({len(users)}) to give each its own copy")


def _check_duplicate_consumed(plan, v) -> None:
    out = plan.output
    copies = plan.graph.nodes[v]["num_outputs"]
    for port in range(copies):
        if _users(plan.graph, v, port) or (plan.output_id == v and out.port == port):
            continue
        raise PlanError(
            f"copy {port} of {v!r} (duplicate({copies})) is never "
            "consumed, so the other copies would stall on it; consume every copy "
            "(e.g. Concurrently([...])) or duplicate into fewer copies")


def _check_zip_source(g, v) -> None:
    parent = _parent(g, v)
    while g.nodes[parent]["op"] in ("for_each", "filter"):
        parent = _parent(g, parent)
    op = g.nodes[parent]["op"]
    if op not in ("gather_sync", "gather_async", "aggregator_input"):
        raise PlanError(
            f"zip_with_source_actor at {v!r} must follow a gather "
            f"(gather_sync/gather_async) through one-to-one operators only, but "
            f"{parent!r} ({op}) is in between; move "
            "zip_with_source_actor() directly after the gather")


def _check_aggregate(g, v) -> None:
    entry = g.nodes[v].get("entry")
    if entry is None:
        raise PlanError(
            f"aggregate {v!r}: the pipeline must build on the stream it is "
            "given (lambda s: s.combine(...)), but its result does not read from it")
    # the pipeline: everything upstream of the aggregate, not going past its input
    seen, stack = {entry}, [_parent(g, v)]
    while stack:
        u = stack.pop()
        if u in seen:
            continue
        seen.add(u)
        if g.nodes[u]["kind"] == SOURCE:
            raise PlanError(
                f"aggregate {v!r}: the pipeline reads another source "
                f"{u!r}; an aggregator may only read its own group of shards")
        stack.extend(g.predecessors(u))


def _check_duplicate_lag(g, v) -> None:
    """Copies of one duplicate read by a strict round-robin must advance at one rate.

    Through rate-preserving operators (for_each, zip_with_source_actor) the copies
    advance by their weights each turn; unequal weights make the leader drift ahead
    without bound, and once it is ``max_lag`` ahead the round-robin waits forever.
    """
    weights = g.nodes[v]["params"]["weights"]
    by_split: dict[str, list] = {}
    inputs = sorted(g.in_edges(v, data="index"), key=lambda e: e[2])
    for (parent, _, _), w in zip(inputs, weights):
        while g.nodes[parent]["op"] in ("for_each", "for_each_async", "zip_with_source_actor"):
            parent = _parent(g, parent)
        if g.nodes[parent]["op"] == "duplicate":
            by_split.setdefault(parent, []).append(w)
    for split, ws in by_split.items():
        if len(ws) < 2:
            continue
        max_lag = g.nodes[split]["params"]["max_lag"]
        where = f"{v!r} reads {len(ws)} copies of {split!r}"
        if len(set(map(str, ws))) > 1 or any(w == "*" or w != int(w) for w in ws):
            raise ConfigError(
                f"{where} with weights {ws}: unequal, '*' or fractional weights make one "
                f"copy run ahead without bound until it is max_lag="
                f"{max_lag} ahead and the strict round-robin waits forever; "
                "give the copies equal integer weights or use mode='async'")
        if ws[0] > max_lag:
            raise ConfigError(
                f"{where} taking {ws[0]} items per turn, more than its max_lag="
                f"{max_lag}, so the strict round-robin would wait forever; "
                f"pass duplicate(..., max_lag={ws[0]}) or lower the weight")
