"""Compiling a Plan: shard slots, fused stages, driver-side fusion, pickling checks.

The result is plain data (:class:`Compiled`) that any backend's runtime executes
(``runtime/stages.py`` turns each :class:`StageSpec` into the code that runs it):

- every consumer of a ParallelStream (a gather, or an aggregator's input) gets its
  list of :class:`ShardSlot`: which source shard it reads and the maximal chain of
  shard-local operators to fuse into one stage there (a :class:`StageSpec`);
- every aggregate node gets its round-robin groups of upstream slots;
- every run of driver-side one-to-one operators is fused into one call;
- with ``ships=True`` (Ray), everything shipped to an actor must pickle, checked
  per node so the error names it.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import cloudpickle

from flowrl.errors import PlanError
from flowrl.graph.node import LOCAL, MAP_OPS, SHARD_LOCAL_OPS, SOURCE, Node
from flowrl.graph.plan import Plan

GATHER_OPS = frozenset({"gather_sync", "batch_across_shards", "gather_async",
                        "aggregator_input"})
# Driver-side operators that can join a synchronous source in one FusedStage.
SYNC_DRIVER_OPS = frozenset({"for_each", "filter", "batch", "flatten", "combine", "shuffle"})


@dataclass(frozen=True)
class Step:
    """One operator of a fused stage: op name, node id, label and parameters."""

    op: str
    node_id: str
    label: str
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class StageSpec:
    """A chain of operators fused into one stage over shard ``shard_index`` of a source.

    ``shard_index`` offsets the seeds of seeded shuffles so shards differ but replay.
    """

    source_id: str
    source_label: str
    steps: tuple[Step, ...] = ()
    shard_index: int = 0

    def then(self, step: Step) -> "StageSpec":
        """This chain followed by ``step``."""
        return StageSpec(self.source_id, self.source_label, self.steps + (step,),
                         self.shard_index)


@dataclass(frozen=True)
class ShardSlot:
    """Shard ``index`` of ``source`` (a source or aggregate node) with its fused stage."""

    source: Node
    index: int
    stage: StageSpec


@dataclass
class Compiled:
    plan: Plan
    slots: dict[Node, list[ShardSlot]] = field(default_factory=dict)
    groups: dict[Node, list[list[ShardSlot]]] = field(default_factory=dict)
    chains: dict[Node, list[Node]] = field(default_factory=dict)  # tail -> fused map run
    segments: dict[Node, list[Node]] = field(default_factory=dict)  # tail -> [source, ops...]
    host_sources: list[Node] = field(default_factory=list)  # parallel sources, topo order


def _step(plan: Plan, node: Node) -> Step:
    return Step(node.op, plan.ids[node], node.label, dict(node.params))


def shard_slots(plan: Plan, node: Node) -> list[ShardSlot]:
    """The shards a consumer of ParallelStream ``node`` reads, in shard order."""
    if node.kind == SOURCE or node.op == "aggregate":
        return [ShardSlot(node, i, StageSpec(plan.ids[node], node.label, (), i))
                for i in range(node.num_shards)]
    if node.op == "union":
        return [s for parent, _ in node.inputs for s in shard_slots(plan, parent)]
    if node.op == "select_shards":
        upstream = shard_slots(plan, node.inputs[0][0])
        return [upstream[i] for i in node.params["indices"]]
    if node.op in SHARD_LOCAL_OPS:
        return [ShardSlot(s.source, s.index, s.stage.then(_step(plan, node)))
                for s in shard_slots(plan, node.inputs[0][0])]
    raise PlanError(f"{plan.ids[node]!r} ({node.op}) cannot feed a gather")


def compile_plan(plan: Plan, *, ships: bool = False) -> Compiled:
    out = Compiled(plan)
    fused = _sync_segments(plan, out)
    for node in plan.nodes:
        if node.op in GATHER_OPS and node not in plan.boundary:
            out.slots[node] = shard_slots(plan, node.inputs[0][0])
        if node.op == "aggregate":
            upstream = out.slots[node.params["entry"]]
            k = node.num_shards
            out.groups[node] = [upstream[j::k] for j in range(k)]
        if node.stream != LOCAL and (node.kind == SOURCE or node.op == "aggregate"):
            out.host_sources.append(node)
        if node.stream == LOCAL and node.op in MAP_OPS and node not in fused:
            # A local stream has one consumer (validated), so a map op extends the
            # fused run ending at its parent.
            parent = node.inputs[0][0]
            run = out.chains.pop(parent, []) if parent.op in MAP_OPS else []
            out.chains[node] = run + [node]
    if ships:
        check_picklable(out)
    return out


def is_sync_source(node: Node) -> bool:
    """A from_iterable whose factory is not an async generator function."""
    return node.op == "from_iterable" and not inspect.isasyncgenfunction(node.params["factory"])


def _sync_segments(plan: Plan, out: Compiled) -> set[Node]:
    """Fuse each synchronous from_iterable with the sync operators after it.

    The segment runs as one fused stage on the driver (the same code shards run),
    so a chain like for_each/filter/batch/flatten costs one generator stack per
    item instead of one async generator per operator. Returns the fused nodes.
    """
    consumers = plan.consumers()
    fused: set[Node] = set()
    for node in plan.nodes:
        if not is_sync_source(node) or node in plan.boundary:
            continue
        segment = [node]
        while True:
            users = consumers.get((segment[-1], 0), [])
            if len(users) != 1 or users[0].op not in SYNC_DRIVER_OPS:
                break
            segment.append(users[0])
        if len(segment) > 1:
            out.segments[segment[-1]] = segment
            fused.update(segment)
    return fused


def stage_for_segment(plan: Plan, segment: list[Node]) -> StageSpec:
    """The stage running a synchronous source segment (``shuffle`` as ``local_shuffle``)."""
    source, ops = segment[0], segment[1:]
    steps = tuple(Step("local_shuffle" if n.op == "shuffle" else n.op, plan.ids[n], n.label,
                       dict(n.params)) for n in ops)
    return StageSpec(plan.ids[source], source.label, steps)


def check_picklable(compiled: Compiled) -> None:
    """Every function shipped to an actor must pickle; name the node if not."""
    plan = compiled.plan
    shipped: list[Node] = []
    for node in plan.nodes:
        if plan.placement[node] in ("shards", "aggregators") and node.op != "from_actors":
            shipped.append(node)
    for node in shipped:
        try:
            cloudpickle.dumps(node.params)
        except Exception as e:  # noqa: BLE001 - any pickling failure is reported the same
            raise PlanError(
                f"{plan.ids[node]!r} ({node.label}) runs on an actor but its function or "
                f"data cannot be pickled: {type(e).__name__}: {e}; make it a module-level "
                "function or drop references to locks, open files and sockets") from e
