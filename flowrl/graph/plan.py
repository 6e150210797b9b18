"""``Plan``: every node reachable from an output, as a validated networkx graph.

``plan.graph`` (a ``networkx.MultiDiGraph``) is the plan's one intermediate
representation: the compiler (``runtime/compile.py``) reads it and nothing else,
so a user may inspect or annotate it between building and compiling.

Building a Plan collects nodes backwards from the output stream, gives each a
stable readable id (the user's ``name=``, else parent id + op, de-duplicated with
``_2``, ``_3`` in topological order), and adds one graph node per operator, in
that topological order, with these attributes:

- ``op``, ``params`` (the operator's parameters), ``kind``, ``stream``
  (``parallel``/``local``), ``num_shards``, ``num_outputs`` (copies of a
  ``duplicate``), ``label`` and ``detail`` (for display);
- ``placement``: ``shards``, ``aggregators`` or ``driver``, derived from the graph;
- ``entry`` on an ``aggregate`` node: the id of its pipeline's input node;
- ``node``: the :class:`~flowrl.graph.node.Node` that stream handles point at;
- optional user annotations ``num_cpus`` and ``resources`` (see
  ``runtime/compile.py``).

An edge ``u -> v`` carries ``port`` (which output of ``u``), ``index`` (which
input of ``v``) and ``asynchronous`` (drawn dashed). Building runs every
validation rule (see ``validate.py``).

This package describes plans and never imports the runtime that executes them.
``Plan.compile`` is the public way in all the same: it calls the compiler the
runtime installs with :func:`set_compiler` when it is imported (``import flowrl``
does), so the dependency points from runtime to graph only.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from flowrl.defaults import REMOTE_TIMEOUT_S
from flowrl.errors import FlowError, PlanError
from flowrl.graph.node import AGGREGATE, LOCAL, PARALLEL, Node, describe_callable
from flowrl.graph.stream import LocalStream

if TYPE_CHECKING:
    import networkx as nx


#: What ``Plan.compile`` calls (see the module docstring); None until the runtime is imported.
_compiler: Callable[..., Any] | None = None


def set_compiler(compiler: Callable[..., Any]) -> None:
    """Install ``compiler(plan, backend, *, seed, local_worker, remote_timeout_s) -> Run``
    as what :meth:`Plan.compile` calls (``flowrl.runtime`` does on import)."""
    global _compiler
    _compiler = compiler


def collect(output: Node) -> list[Node]:
    """Nodes reachable backwards from ``output`` in a deterministic topological order."""
    order: list[Node] = []
    state: dict[Node, int] = {}  # 1 = on the DFS stack, 2 = done
    stack: list[tuple[Node, int]] = [(output, 0)]
    while stack:
        node, i = stack.pop()
        if i == 0:
            if state.get(node) == 2:
                continue
            if state.get(node) == 1:
                raise PlanError(f"the plan has a cycle through {node.base_id!r}; "
                                "streams must form a DAG")
            state[node] = 1
        inputs = node.inputs
        if i < len(inputs):
            stack.append((node, i + 1))
            parent = inputs[i][0]
            if state.get(parent) == 1:
                raise PlanError(f"the plan has a cycle through {parent.base_id!r}; "
                                "streams must form a DAG")
            if state.get(parent) != 2:
                stack.append((parent, 0))
        else:
            state[node] = 2
            order.append(node)
    return order


def assign_ids(order: list[Node]) -> dict[Node, str]:
    ids: dict[Node, str] = {}
    taken: set[str] = set()
    for node in order:
        if node.name:
            base = node.name
        elif len(node.inputs) == 1 and node.inputs[0][0] in ids:
            parent, port = node.inputs[0]
            suffix = f"[{port}]" if parent.num_outputs > 1 else ""
            base = f"{ids[parent]}{suffix}.{node.op}"
        else:
            base = node.op
        node_id, k = base, 2
        while node_id in taken:
            node_id, k = f"{base}_{k}", k + 1
        taken.add(node_id)
        ids[node] = node_id
    return ids


def _placements(g: "nx.MultiDiGraph") -> None:
    """Set each node's ``placement``: where its operator runs.

    An aggregate node and everything between its pipeline's input and itself run
    on the aggregators; other local-stream nodes on the driver; parallel-stream
    nodes where their shards live (on the aggregators when every input comes from
    them, else on the shard hosts).
    """
    import networkx as nx
    in_aggregator: set[str] = set()
    for v, attrs in g.nodes(data=True):
        if attrs["op"] == AGGREGATE and "entry" in attrs:
            entry = attrs["entry"]
            in_aggregator |= (nx.descendants(g, entry) & nx.ancestors(g, v)) | {entry, v}
    for v, attrs in g.nodes(data=True):  # insertion order is topological
        if v in in_aggregator:
            attrs["placement"] = "aggregators"
        elif attrs["stream"] == LOCAL:
            attrs["placement"] = "driver"
        else:
            parents = [g.nodes[u]["placement"] for u in g.predecessors(v)]
            attrs["placement"] = ("aggregators" if parents and all(
                p == "aggregators" for p in parents) else "shards")


def _detail(node: Node) -> str:
    """What a node does, for display beside its id: the op and the function it calls."""
    fn = node.params.get("fn", node.params.get("factory"))
    return f"{node.op}({describe_callable(fn)})" if fn is not None else node.op


def _is_async_edge(consumer: Node) -> bool:
    return (consumer.op in ("gather_async", "aggregator_input")
            or (consumer.op == "concurrently" and consumer.params["mode"] == "async"))


class Plan:
    """A validated DAG of operators ending in ``output`` (a LocalStream).

    ``plan.graph`` is a ``networkx.MultiDiGraph`` keyed by readable node ids.

    >>> import flowrl
    >>> plan = flowrl.Plan(flowrl.from_range(4, name="nums").gather_async(name="gathered"))
    >>> sorted(plan.graph.nodes)
    ['gathered', 'nums']
    >>> plan.graph.nodes["gathered"]["kind"], plan.graph.nodes["nums"]["placement"]
    ('gather', 'shards')
    """

    def __init__(self, output: LocalStream, name: str = "plan"):
        if not isinstance(output, LocalStream):
            raise PlanError(f"Plan(output={output!r}): the output must be a LocalStream; "
                            "gather a ParallelStream first (gather_sync/gather_async)")
        self.name = name
        self.output = output
        self.nodes: list[Node] = collect(output.node)
        self.ids: dict[Node, str] = assign_ids(self.nodes)
        self.graph = self._build_graph()
        from flowrl.graph.validate import validate
        validate(self)

    def _build_graph(self) -> nx.MultiDiGraph:
        # imported here: `import flowrl`, and so every Ray worker process, skips it
        import networkx as nx
        g = nx.MultiDiGraph(name=self.name)
        for node in self.nodes:
            g.add_node(self.ids[node], op=node.op, params=node.params, label=node.label,
                       kind=node.kind, stream=node.stream, num_shards=node.num_shards,
                       num_outputs=node.num_outputs, detail=_detail(node), node=node)
            if node.op == AGGREGATE and node.params["entry"] in self.ids:
                # (a pipeline that ignores its input has no entry: validate() names it)
                g.nodes[self.ids[node]]["entry"] = self.ids[node.params["entry"]]
        for node in self.nodes:
            for index, (parent, port) in enumerate(node.inputs):
                if parent in self.ids:
                    g.add_edge(self.ids[parent], self.ids[node], port=port, index=index,
                               asynchronous=_is_async_edge(node))
        _placements(g)
        return g

    def node_id(self, node: Node) -> str:
        return self.ids[node]

    @property
    def output_id(self) -> str:
        return self.ids[self.output.node]

    def to_dot(self, stats: dict[str, Any] | None = None) -> str:
        """Byte-stable DOT text, one cluster per placement; ``stats`` from ``Run.stats()``."""
        from flowrl.graph.dot import plan_to_dot
        return plan_to_dot(self, stats)

    def to_image(self, fmt: str, stats: dict[str, Any] | None = None) -> bytes:
        """The plan drawn by Graphviz as ``fmt`` (``"svg"`` or ``"png"``): the image
        file's bytes, for writing anywhere (``flowrl plan --format svg`` writes them to
        stdout)."""
        from flowrl.graph.dot import plan_to_image
        return plan_to_image(self, fmt, stats)

    def render(self, path: str, stats: dict[str, Any] | None = None) -> str:
        """Write the plan as SVG/PNG (by ``path``'s suffix) through Graphviz, or ``.dot`` text."""
        from flowrl.graph.dot import render
        return render(self, path, stats)

    def compile(self, backend: str = "auto", *, seed: int = 0, local_worker=None,
                remote_timeout_s: float | None = REMOTE_TIMEOUT_S):
        """Compile into a :class:`~flowrl.runtime.run.Run` on ``backend`` and start it.

        ``"local"`` runs in-process, ``"ray"`` on Ray actors, ``"auto"`` picks Ray when
        any source is a Ray actor handle
        (:func:`~flowrl.runtime.calls.resolve_backend`). ``seed`` drives the local backend's
        completion-order scheduler for async gathers. ``local_worker`` is what
        :func:`flowrl.workers.get_global_worker` returns inside the run's
        driver-side operators (an algorithm passes its WorkerSet's local worker).
        ``remote_timeout_s`` bounds how long a remote host (a Ray actor) may leave a
        request unanswered: past it the run fails with a WorkerError naming the
        stuck shard (``None``: no bound; default
        :data:`~flowrl.defaults.REMOTE_TIMEOUT_S`). In-process hosts run on the driver's
        thread and cannot be bounded.
        """
        if _compiler is None:
            raise FlowError("Plan.compile: no runtime is installed; `import flowrl` installs "
                            "it (flowrl.runtime.compile_run)")
        return _compiler(self, backend, seed=seed, local_worker=local_worker,
                         remote_timeout_s=remote_timeout_s)

    def __repr__(self) -> str:
        return f"Plan({self.name!r}, {len(self.nodes)} nodes, output={self.output_id!r})"


__all__ = ["Plan", "collect", "set_compiler", "PARALLEL", "LOCAL"]
