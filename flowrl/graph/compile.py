"""Compiling a Plan: its networkx graph in, plain frozen data out.

The compiler's input is ``plan.graph`` and nothing else (see ``plan.py`` for its
node and edge attributes): it walks the graph in topological order, follows edges
by ``port`` and ``index``, and decides everything from node attributes
(``op``, ``params``, ``kind``, ``stream``, ``num_shards``, ``placement``,
``entry`` and the annotations below). The result is plain data
(:class:`Compiled`) that any backend's runtime executes (``runtime/stages.py``
turns each :class:`StageSpec` into the code that runs it); stages hold no graph,
so the processes they ship to never import networkx.

- every consumer of a ParallelStream (a gather, or an aggregator's input) gets its
  list of :class:`ShardSlot`: which source shard it reads and the maximal chain of
  shard-local operators to fuse into one stage there (a :class:`StageSpec`);
  a gather with no input edge reads shards its caller presets (an aggregator's
  sub-plan);
- every aggregate node gets its round-robin groups of upstream slots;
- every run of driver-side one-to-one operators is fused into one call, and a
  synchronous ``from_iterable`` with the sync operators after it into one stage;
- annotations: ``num_cpus`` (a number >= 0) and ``resources`` (Ray custom
  resources, name -> amount >= 0) on a node become actor options of the hosts the
  runtime creates for it (:attr:`Compiled.host_options`). They are allowed on a
  ``from_items``/``from_range``/``from_iterators`` source (its item hosts), an
  ``aggregate`` node (its aggregator actors) and a shard-local operator
  (``for_each``, ``filter``, ... on a ParallelStream: the hosts its stage is
  fused onto). A host gets, per resource, the largest amount asked for by its
  source and the stages fused onto it (they run one at a time in that actor).
  Anywhere else the runtime creates no actor for the node (``from_actors`` hosts
  are the user's; driver-side and aggregator-pipeline nodes run in existing
  processes), so an annotation there is a ConfigError naming the node, as is a
  bad value. The local backend checks annotations the same way and, creating no
  actors, has nothing to apply them to;
- with ``ships=True`` (Ray), everything shipped to an actor must pickle, checked
  per node so the error names it.

State: none; :func:`compile_plan` reads the graph and returns a new
:class:`Compiled`.
"""

from __future__ import annotations

import inspect
import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import cloudpickle

from flowrl.errors import ConfigError, PlanError
from flowrl.graph.node import AGGREGATE, LOCAL, MAP_OPS, SHARD_LOCAL_OPS, SOURCE, Node
from flowrl.graph.plan import Plan

if TYPE_CHECKING:
    import networkx as nx

GATHER_OPS = frozenset({"gather_sync", "batch_across_shards", "gather_async",
                        "aggregator_input"})
# Driver-side operators that can join a synchronous source in one FusedStage.
SYNC_DRIVER_OPS = frozenset({"for_each", "filter", "batch", "flatten", "combine", "shuffle"})
#: Node attributes a user may set to ask for actor resources (see the module docstring).
ANNOTATIONS = ("num_cpus", "resources")


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
    """What the runtime executes, keyed by the plan's Node objects.

    ``slots``: gather -> the shards it reads; ``groups``: aggregate -> its members
    per aggregator; ``chains``: tail -> fused driver-side map run; ``segments``:
    tail -> [sync source, ops...]; ``host_sources``: parallel sources and
    aggregates in topological order; ``host_options``: host source -> Ray actor
    options from its annotations (absent: none).
    """

    plan: Plan
    slots: dict[Node, list[ShardSlot]] = field(default_factory=dict)
    groups: dict[Node, list[list[ShardSlot]]] = field(default_factory=dict)
    chains: dict[Node, list[Node]] = field(default_factory=dict)
    segments: dict[Node, list[Node]] = field(default_factory=dict)
    host_sources: list[Node] = field(default_factory=list)
    host_options: dict[Node, dict[str, Any]] = field(default_factory=dict)


def inputs(g: "nx.MultiDiGraph", node_id: str) -> list[tuple[str, int]]:
    """The ``(node id, port)`` pairs ``node_id`` reads, in its input order."""
    edges = sorted(g.in_edges(node_id, data=True), key=lambda e: e[2]["index"])
    return [(u, attrs["port"]) for u, _, attrs in edges]


def topological_order(g: "nx.MultiDiGraph") -> list[str]:
    """Node ids in topological order; among the ready ones, in the order they were added
    (so a plan's own graph compiles in the order its nodes were collected)."""
    import networkx as nx
    rank = {v: i for i, v in enumerate(g)}
    try:
        return list(nx.lexicographical_topological_sort(g, key=rank.__getitem__))
    except nx.NetworkXUnfeasible:
        cycle = " -> ".join(u for u, *_ in nx.find_cycle(g))
        raise PlanError(f"plan.graph has a cycle ({cycle}); streams must form a DAG: remove "
                        "the edge that was added to the graph after building") from None


def _step(g: "nx.MultiDiGraph", node_id: str, op: str | None = None) -> Step:
    attrs = g.nodes[node_id]
    return Step(op or attrs["op"], node_id, attrs["label"], dict(attrs["params"]))


def shard_slots(g: "nx.MultiDiGraph", node_id: str) -> list[ShardSlot]:
    """The shards a consumer of ParallelStream ``node_id`` reads, in shard order."""
    attrs = g.nodes[node_id]
    op = attrs["op"]
    if attrs["kind"] == SOURCE or op == AGGREGATE:
        return [ShardSlot(attrs["node"], i, StageSpec(node_id, attrs["label"], (), i))
                for i in range(attrs["num_shards"])]
    if op == "union":
        return [s for parent, _ in inputs(g, node_id) for s in shard_slots(g, parent)]
    if op == "select_shards":
        upstream = shard_slots(g, inputs(g, node_id)[0][0])
        return [upstream[i] for i in attrs["params"]["indices"]]
    if op in SHARD_LOCAL_OPS:
        step = _step(g, node_id)
        return [ShardSlot(s.source, s.index, s.stage.then(step))
                for s in shard_slots(g, inputs(g, node_id)[0][0])]
    raise PlanError(f"{node_id!r} ({op}) cannot feed a gather")


def compile_plan(plan: Plan, *, ships: bool = False) -> Compiled:
    """Compile ``plan.graph`` into the :class:`Compiled` data the runtime executes.

    Raises ConfigError for a bad annotation and, with ``ships``, PlanError for a
    node whose shipped function or data does not pickle.

    >>> import flowrl
    >>> plan = flowrl.Plan(flowrl.from_range(4, 2, name="nums").for_each(abs).gather_sync())
    >>> plan.graph.nodes["nums"]["num_cpus"] = 0.5
    >>> compiled = compile_plan(plan)
    >>> [[step.op for step in slot.stage.steps] for slot in compiled.slots[plan.output.node]]
    [['for_each'], ['for_each']]
    >>> [(source.label, options) for source, options in compiled.host_options.items()]
    [('nums', {'num_cpus': 0.5})]
    """
    g = plan.graph
    order = topological_order(g)
    nodes = {v: g.nodes[v]["node"] for v in order}
    out = Compiled(plan)
    slots: dict[str, list[ShardSlot]] = {}
    chains: dict[str, list[str]] = {}
    segments = _sync_segments(g, order)
    fused = {v for segment in segments.values() for v in segment}
    for v in order:
        attrs = g.nodes[v]
        op, local = attrs["op"], attrs["stream"] == LOCAL
        ins = inputs(g, v)
        if op in GATHER_OPS and ins:
            slots[v] = shard_slots(g, ins[0][0])
        if op == AGGREGATE:
            upstream, k = slots[attrs["entry"]], attrs["num_shards"]
            out.groups[nodes[v]] = [upstream[j::k] for j in range(k)]
        if not local and (attrs["kind"] == SOURCE or op == AGGREGATE):
            out.host_sources.append(nodes[v])
        if local and op in MAP_OPS and v not in fused:
            # A local stream has one consumer (validated), so a map op extends the
            # fused run ending at its parent.
            parent = ins[0][0]
            run = chains.pop(parent, []) if g.nodes[parent]["op"] in MAP_OPS else []
            chains[v] = run + [v]
    out.slots = {nodes[v]: s for v, s in slots.items()}
    out.chains = {nodes[tail]: [nodes[v] for v in run] for tail, run in chains.items()}
    out.segments = {nodes[tail]: [nodes[v] for v in seg] for tail, seg in segments.items()}
    out.host_options = {nodes[v]: opts for v, opts in host_options(g, order).items()}
    if ships:
        check_picklable(out)
    return out


def _is_sync_factory(op: str, params: dict) -> bool:
    return op == "from_iterable" and not inspect.isasyncgenfunction(params["factory"])


def is_sync_source(node: Node) -> bool:
    """A from_iterable whose factory is not an async generator function."""
    return _is_sync_factory(node.op, node.params)


def _sync_segments(g: "nx.MultiDiGraph", order: list[str]) -> dict[str, list[str]]:
    """Fuse each synchronous from_iterable with the sync operators after it.

    The segment runs as one fused stage on the driver (the same code shards run),
    so a chain like for_each/filter/batch/flatten costs one generator stack per
    item instead of one async generator per operator. Returns tail -> segment.
    """
    segments: dict[str, list[str]] = {}
    for v in order:
        attrs = g.nodes[v]
        if not _is_sync_factory(attrs["op"], attrs["params"]):
            continue
        segment = [v]
        while True:
            users = [w for _, w, port in g.out_edges(segment[-1], data="port") if port == 0]
            if len(users) != 1 or g.nodes[users[0]]["op"] not in SYNC_DRIVER_OPS:
                break
            segment.append(users[0])
        if len(segment) > 1:
            segments[segment[-1]] = segment
    return segments


def stage_for_segment(plan: Plan, segment: list[Node]) -> StageSpec:
    """The stage running a synchronous source segment (``shuffle`` as ``local_shuffle``)."""
    g = plan.graph
    source, *ops = [plan.ids[n] for n in segment]
    steps = tuple(_step(g, v, "local_shuffle" if g.nodes[v]["op"] == "shuffle" else None)
                  for v in ops)
    return StageSpec(source, g.nodes[source]["label"], steps)


# ----------------------------------------------------------------------------- annotations
def host_options(g: "nx.MultiDiGraph", order: list[str]) -> dict[str, dict[str, Any]]:
    """Actor options per host source id, from the ``num_cpus``/``resources`` annotations.

    See the module docstring for where annotations are allowed and how the
    amounts asked for one host combine.
    """
    options: dict[str, dict[str, Any]] = {}
    for v in order:
        attrs = g.nodes[v]
        asked = {a: attrs[a] for a in ANNOTATIONS if attrs.get(a) is not None}
        if not asked:
            continue
        _check_annotation(v, asked)
        for host in _annotated_hosts(g, v, sorted(asked)):
            opts = options.setdefault(host, {})
            if "num_cpus" in asked:
                opts["num_cpus"] = max(opts.get("num_cpus", 0), asked["num_cpus"])
            for name, amount in asked.get("resources", {}).items():
                res = opts.setdefault("resources", {})
                res[name] = max(res.get(name, 0), amount)
    return options


def _amount(value: Any) -> bool:
    return (isinstance(value, numbers.Real) and not isinstance(value, bool)
            and value >= 0 and value == value)


def _check_annotation(node_id: str, asked: dict[str, Any]) -> None:
    where = f"plan.graph.nodes[{node_id!r}]"
    if "num_cpus" in asked and not _amount(asked["num_cpus"]):
        raise ConfigError(f"{where}['num_cpus'] = {asked['num_cpus']!r}: must be a number "
                          ">= 0 (the CPUs each actor created for this node reserves)")
    resources = asked.get("resources")
    if resources is None:
        return
    if not isinstance(resources, dict):
        raise ConfigError(f"{where}['resources'] = {resources!r}: must be a dict of Ray custom "
                          "resource names to amounts, e.g. {'custom': 1}")
    for name, amount in resources.items():
        if not isinstance(name, str) or not name:
            raise ConfigError(f"{where}['resources'] has the key {name!r}: resource names "
                              "are non-empty strings")
        if name in ("CPU", "GPU"):
            raise ConfigError(f"{where}['resources'] asks for {name!r}: Ray takes CPUs and "
                              f"GPUs as options of their own; set {where}['num_cpus'] instead"
                              if name == "CPU" else
                              f"{where}['resources'] asks for 'GPU': the hosts the runtime "
                              "creates run no models; put GPU work on your own actors "
                              "(from_actors)")
        if not _amount(amount):
            raise ConfigError(f"{where}['resources'][{name!r}] = {amount!r}: must be a "
                              "number >= 0")


def _annotated_hosts(g: "nx.MultiDiGraph", node_id: str, names: list[str]) -> list[str]:
    """The host sources whose actors an annotation on ``node_id`` applies to."""
    attrs = g.nodes[node_id]
    op, parallel = attrs["op"], attrs["stream"] != LOCAL
    where = f"plan.graph.nodes[{node_id!r}] ({op}) has {' and '.join(names)}, but"
    if op == "from_actors":
        raise ConfigError(f"{where} its hosts are your own actors, which the runtime does not "
                          "create; give them resources where you create them "
                          "(MyHost.options(num_cpus=..., resources=...).remote())")
    if parallel and (attrs["kind"] == SOURCE or op == AGGREGATE):
        return [node_id]
    if parallel and op in SHARD_LOCAL_OPS:
        hosts = list(dict.fromkeys(s.stage.source_id for s in shard_slots(g, node_id)))
        adopted = [h for h in hosts if g.nodes[h]["op"] == "from_actors"]
        if adopted:
            raise ConfigError(f"{where} its stage runs on the hosts of from_actors source "
                              f"{adopted[0]!r}, your own actors, which the runtime does not "
                              "create; give them resources where you create them")
        return hosts
    if attrs["placement"] == "aggregators":
        why = "it runs inside the aggregator actors; annotate the aggregate node instead"
    elif parallel:
        why = "it only routes shards; annotate the sources or shard-local operators it reads"
    else:
        why = ("it runs on the driver; annotate a parallel source (from_items/from_range/"
               "from_iterators), a shard-local operator or an aggregate node")
    raise ConfigError(f"{where} the runtime creates no actor for it: {why}")


def check_picklable(compiled: Compiled) -> None:
    """Every function shipped to an actor must pickle; name the node if not."""
    g = compiled.plan.graph
    for v, attrs in g.nodes(data=True):
        if attrs["placement"] not in ("shards", "aggregators") or attrs["op"] == "from_actors":
            continue
        try:
            cloudpickle.dumps(attrs["params"])
        except Exception as e:  # noqa: BLE001 - any pickling failure is reported the same
            raise PlanError(
                f"{v!r} ({attrs['label']}) runs on an actor but its function or "
                f"data cannot be pickled: {type(e).__name__}: {e}; make it a module-level "
                "function or drop references to locks, open files and sockets") from e
