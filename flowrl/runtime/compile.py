"""Compiling a Plan: its networkx graph in, one plain program out.

The compiler's input is ``plan.graph`` and nothing else (see ``graph/plan.py`` for
its node and edge attributes): it walks the graph in topological order, follows
edges by ``port`` and ``index``, and decides everything from node attributes
(``op``, ``params``, ``kind``, ``stream``, ``num_shards``, ``placement``,
``entry`` and the annotations below). The result, :class:`Compiled`, is the one
form of the plan the runtime executes: every node as an :class:`Op` keyed by its
id (inputs by id and port, never a linked Node), plus the decisions below. It
holds no graph and no Node, so the processes it ships to never import networkx.

- every consumer of a ParallelStream (a gather, or an aggregator's input) gets its
  list of :class:`ShardSlot`: which source shard it reads and the maximal chain of
  shard-local operators to fuse into one stage there (a :class:`StageSpec`);
- every aggregate node gets its round-robin groups of upstream slots, and its
  pipeline (the nodes its aggregators run) as a program of its own
  (:attr:`Compiled.pipelines`), whose ``entry`` gather reads the shards an
  aggregator is given;
- every maximal run of synchronous local-stream operators (``for_each``,
  ``filter``, ``zip_with_source_actor``, ``batch``, ``flatten``, ``combine``,
  ``shuffle``) becomes one stage (:attr:`Compiled.runs`), executed by the same
  code as a shard's stage (``runtime/stages.py``); a synchronous
  ``from_iterable`` is a run too, its stage's source, which the stage pulls;
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
- :func:`check_picklable` (Ray): everything shipped to an actor must pickle,
  checked per node so the error names it.

State: none; :func:`compile_plan` reads the graph and returns a new
:class:`Compiled`.
"""

from __future__ import annotations

import inspect
import numbers
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

import cloudpickle

from flowrl.errors import ConfigError, PlanError
from flowrl.graph.node import AGGREGATE, LOCAL, SHARD_LOCAL_OPS, SOURCE

if TYPE_CHECKING:
    import networkx as nx

    from flowrl.graph.plan import Plan

GATHER_OPS = frozenset({"gather_sync", "batch_across_shards", "gather_async",
                        "aggregator_input"})
#: Synchronous local-stream operators: a maximal run of them is one stage.
SYNC_OPS = frozenset({"for_each", "filter", "zip_with_source_actor", "batch", "flatten",
                      "combine", "shuffle"})
#: Node attributes a user may set to ask for actor resources (see the module docstring).
ANNOTATIONS = ("num_cpus", "resources")


@dataclass(frozen=True)
class Op:
    """One node of a compiled plan: what the runtime needs to run and report it.

    ``inputs``: the ``(node id, port)`` pairs it reads, in input order;
    ``placement``: ``shards``, ``aggregators`` or ``driver``.
    """

    id: str
    op: str
    label: str
    params: dict
    inputs: tuple[tuple[str, int], ...] = ()
    placement: str = "driver"
    num_outputs: int = 1


@dataclass(frozen=True)
class Step:
    """One operator of a fused stage: op name, node id, label and parameters."""

    op: str
    node_id: str
    label: str
    params: dict = field(default_factory=dict)


@dataclass(frozen=True)
class StageSpec:
    """A chain of operators fused into one stage over ``source_id``'s items.

    On a shard, the source is shard ``shard_index`` of a source node (the index
    offsets the seeds of seeded shuffles so shards differ but replay); on the
    driver, the node whose items are pushed into the stage, or a synchronous
    ``from_iterable`` the stage pulls.
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
    """Shard ``index`` of node ``source`` (a source or aggregate id) with its fused stage."""

    source: str
    index: int
    stage: StageSpec


@dataclass
class Compiled:
    """A compiled plan: plain data, keyed by node id.

    ``ops``: every node, in topological order; ``output``: the ``(id, port)`` the
    run yields; ``slots``: gather -> the shards it reads; ``groups``: aggregate ->
    its members per aggregator; ``pipelines``: aggregate -> the program its
    aggregators run; ``entry``: in such a program, the gather that reads the
    shards an aggregator is given; ``runs``: tail -> the stage of the run of
    synchronous operators ending there; ``host_sources``: parallel sources and
    aggregates in topological order; ``host_options``: host source -> Ray actor
    options from its annotations (absent: none).
    """

    name: str
    ops: dict[str, Op]
    output: tuple[str, int]
    slots: dict[str, list[ShardSlot]] = field(default_factory=dict)
    groups: dict[str, list[list[ShardSlot]]] = field(default_factory=dict)
    pipelines: dict[str, "Compiled"] = field(default_factory=dict)
    entry: str | None = None
    runs: dict[str, StageSpec] = field(default_factory=dict)
    host_sources: list[str] = field(default_factory=list)
    host_options: dict[str, dict[str, Any]] = field(default_factory=dict)

    def pulls_source(self, run: StageSpec) -> bool:
        """Whether ``run``'s stage pulls its source itself (a synchronous from_iterable)."""
        return is_sync_source(self.ops[run.source_id])


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
        return [ShardSlot(node_id, i, StageSpec(node_id, attrs["label"], (), i))
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


def compile_plan(plan: "Plan") -> Compiled:
    """Compile ``plan.graph`` into the :class:`Compiled` program the runtime executes.

    Raises ConfigError for a bad annotation.

    >>> import flowrl
    >>> plan = flowrl.Plan(flowrl.from_range(4, 2, name="nums").for_each(abs).gather_sync())
    >>> plan.graph.nodes["nums"]["num_cpus"] = 0.5
    >>> compiled = compile_plan(plan)
    >>> [[step.op for step in slot.stage.steps] for slot in compiled.slots[plan.output_id]]
    [['for_each'], ['for_each']]
    >>> compiled.host_options
    {'nums': {'num_cpus': 0.5}}
    """
    g = plan.graph
    out = _compile_graph(g, plan.name, (plan.output_id, plan.output.port))
    order = list(out.ops)
    out.host_options = host_options(g, order)
    for v in order:
        if g.nodes[v]["op"] == AGGREGATE:
            out.pipelines[v] = _pipeline(g, v, v)
    return out


def _compile_graph(g: "nx.MultiDiGraph", name: str, output: tuple[str, int],
                   entry: str | None = None) -> Compiled:
    order = topological_order(g)
    ops = {v: _op(g, v) for v in order}
    out = Compiled(name, ops, output, entry=entry)
    for v in order:
        attrs = g.nodes[v]
        op, local = attrs["op"], attrs["stream"] == LOCAL
        ins = ops[v].inputs
        if op in GATHER_OPS and ins:
            out.slots[v] = shard_slots(g, ins[0][0])
        if op == AGGREGATE:
            upstream, k = out.slots[attrs["entry"]], attrs["num_shards"]
            out.groups[v] = [upstream[j::k] for j in range(k)]
        if not local and (attrs["kind"] == SOURCE or op == AGGREGATE):
            out.host_sources.append(v)
        if is_sync_source(ops[v]):
            out.runs[v] = StageSpec(v, attrs["label"])  # a run the stage pulls
        elif local and op in SYNC_OPS:
            # A local stream has one consumer (validated), so a synchronous operator
            # extends the run ending at its parent, or starts one over its parent.
            parent, port = ins[0]
            run = out.runs.pop(parent, None) if port == 0 else None
            if run is None:
                run = StageSpec(parent, g.nodes[parent]["label"])
            out.runs[v] = run.then(_step(g, v, "local_shuffle" if op == "shuffle" else None))
    return out


def _op(g: "nx.MultiDiGraph", v: str) -> Op:
    attrs = g.nodes[v]
    return Op(v, attrs["op"], attrs["label"], attrs["params"], tuple(inputs(g, v)),
              attrs["placement"], attrs["num_outputs"])


def _pipeline(g: "nx.MultiDiGraph", aggregate: str, name: str) -> Compiled:
    """The program an aggregator of ``aggregate`` runs: every node its pipeline's output
    reads, back to (not beyond) the pipeline's entry gather."""
    entry = g.nodes[aggregate]["entry"]
    (output,) = inputs(g, aggregate)
    nodes, stack = {output[0]}, [output[0]]
    while stack:
        v = stack.pop()
        if v == entry:
            continue
        for u in g.predecessors(v):
            if u not in nodes:
                nodes.add(u)
                stack.append(u)
    sub = g.subgraph(nodes).copy()
    sub.remove_edges_from(list(sub.in_edges(entry, keys=True)))
    program = _compile_graph(sub, name, output, entry=entry)
    # inside an aggregator its pipeline is what runs on the driver
    program.ops = {v: replace(op, placement="driver") for v, op in program.ops.items()}
    return program


def is_sync_source(op: Op) -> bool:
    """A from_iterable whose factory is not an async generator function."""
    return op.op == "from_iterable" and not inspect.isasyncgenfunction(op.params["factory"])


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
    """Every function shipped to an actor must pickle; name the node if not. The params
    of host sources are not shipped: ``from_actors``' name hosts (and their recovery,
    which stays on the driver), an ``aggregate``'s its pipeline, whose own nodes are
    checked here."""
    for op in compiled.ops.values():
        if op.placement not in ("shards", "aggregators") or op.op in ("from_actors", "aggregate"):
            continue
        try:
            cloudpickle.dumps(op.params)
        except Exception as e:  # noqa: BLE001 - any pickling failure is reported the same
            raise PlanError(
                f"{op.id!r} ({op.label}) runs on an actor but its function or "
                f"data cannot be pickled: {type(e).__name__}: {e}; make it a module-level "
                "function or drop references to locks, open files and sockets") from e
