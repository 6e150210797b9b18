"""Validation rules a Plan must pass before it can compile.

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
    from flowrl.graph.plan import Plan


def validate(plan: "Plan") -> None:
    consumers = plan.consumers()
    for node in plan.nodes:
        _check_single_consumer(plan, node, consumers)
        if node.op == "duplicate":
            _check_duplicate_consumed(plan, node, consumers)
        elif node.op == "zip_with_source_actor":
            _check_zip_source(plan, node)
        elif node.op == "aggregate":
            _check_aggregate(plan, node)
        elif node.op == "concurrently" and node.params["weights"]:
            _check_duplicate_lag(plan, node)


def _check_single_consumer(plan, node, consumers) -> None:
    if node.stream != LOCAL:
        return
    for port in range(node.num_outputs):
        users = consumers.get((node, port), [])
        if len(users) > 1:
            names = ", ".join(repr(plan.ids[u]) for u in users)
            raise PlanError(
                f"LocalStream {plan.ids[node]!r} is consumed by {len(users)} operators "
                f"({names}); a local stream has one consumer: use "
                f".duplicate({len(users)}) to give each its own copy")


def _check_duplicate_consumed(plan, node, consumers) -> None:
    out = plan.output
    for port in range(node.num_outputs):
        if consumers.get((node, port)) or (out.node is node and out.port == port):
            continue
        raise PlanError(
            f"copy {port} of {plan.ids[node]!r} (duplicate({node.num_outputs})) is never "
            "consumed, so the other copies would stall on it; consume every copy "
            "(e.g. Concurrently([...])) or duplicate into fewer copies")


def _check_zip_source(plan, node) -> None:
    parent = node.inputs[0][0]
    while parent.op in ("for_each", "filter"):
        parent = parent.inputs[0][0]
    if parent.op not in ("gather_sync", "gather_async", "aggregator_input"):
        raise PlanError(
            f"zip_with_source_actor at {plan.ids[node]!r} must follow a gather "
            f"(gather_sync/gather_async) through one-to-one operators only, but "
            f"{plan.ids.get(parent, parent.base_id)!r} ({parent.op}) is in between; move "
            "zip_with_source_actor() directly after the gather")


def _check_aggregate(plan, node) -> None:
    from flowrl.graph.plan import collect

    entry = node.params["entry"]
    sub = collect(node.inputs[0][0], boundary=frozenset({entry}))
    if entry not in sub:
        raise PlanError(
            f"aggregate {plan.ids[node]!r}: the pipeline must build on the stream it is "
            "given (lambda s: s.combine(...)), but its result does not read from it")
    for n in sub:
        if n.kind == SOURCE:
            raise PlanError(
                f"aggregate {plan.ids[node]!r}: the pipeline reads another source "
                f"{plan.ids[n]!r}; an aggregator may only read its own group of shards")


def _check_duplicate_lag(plan, node) -> None:
    """Copies of one duplicate read by a strict round-robin must advance at one rate.

    Through rate-preserving operators (for_each, zip_with_source_actor) the copies
    advance by their weights each turn; unequal weights make the leader drift ahead
    without bound, and once it is ``max_lag`` ahead the round-robin waits forever.
    """
    weights = node.params["weights"]
    by_split: dict = {}
    for (parent, _port), w in zip(node.inputs, weights):
        while parent.op in ("for_each", "for_each_async", "zip_with_source_actor"):
            parent = parent.inputs[0][0]
        if parent.op == "duplicate":
            by_split.setdefault(parent, []).append(w)
    for split, ws in by_split.items():
        if len(ws) < 2:
            continue
        where = f"{plan.ids[node]!r} reads {len(ws)} copies of {plan.ids[split]!r}"
        if len(set(map(str, ws))) > 1 or any(w == "*" or w != int(w) for w in ws):
            raise ConfigError(
                f"{where} with weights {ws}: unequal, '*' or fractional weights make one "
                f"copy run ahead without bound until it is max_lag="
                f"{split.params['max_lag']} ahead and the strict round-robin waits forever; "
                "give the copies equal integer weights or use mode='async'")
        if ws[0] > split.params["max_lag"]:
            raise ConfigError(
                f"{where} taking {ws[0]} items per turn, more than its max_lag="
                f"{split.params['max_lag']}, so the strict round-robin would wait forever; "
                f"pass duplicate(..., max_lag={ws[0]}) or lower the weight")
