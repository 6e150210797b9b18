"""Aggregator hosts for tree aggregation (``ParallelStream.aggregate``).

Each aggregator is a ShardHost whose one shard is the output of the aggregate's
sub-pipeline run over its round-robin group of upstream shards: it compiles that
sub-plan with the group's hosts preset as the input gather's shards and iterates
it. The same class runs in-process (local backend) or as a Ray actor created
beside the driver (Ray backend).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from flowrl.graph.node import Node
from flowrl.runtime.shard_host import ShardHost


@dataclass
class AggregatorSpec:
    plan: Any                       # the outer Plan (for node ids)
    node: Node                      # the aggregate node
    members: list[tuple[Any, Any, str]]  # (host, fused stage, label) of its group
    key: str
    seed: int

    def __getstate__(self):
        # Ship only what the sub-plan needs: the ids of the nodes reachable from the
        # aggregate node (its pipeline and the shard side feeding it), never the
        # driver's nodes (a learner's queue, a local worker) that cannot or should
        # not travel to an aggregator.
        from flowrl.graph.plan import collect

        state = dict(self.__dict__)
        plan = state.pop("plan")
        if plan is not None:
            state["ids"] = {n: plan.ids[n] for n in collect(self.node) if n in plan.ids}
        state["plan"] = None
        return state


class AggregatorHost(ShardHost):
    """Runs one aggregator's sub-pipeline over its group of shards."""

    def __init__(self, spec: AggregatorSpec, backend: str):
        self.spec = spec
        self.backend = backend
        self._runs: list[Any] = []

    def shard_items(self) -> Iterator[Any]:
        from flowrl.graph.plan import Plan
        from flowrl.graph.stream import LocalStream
        from flowrl.runtime.run import Run

        spec = self.spec
        entry = spec.node.params["entry"]
        ids = spec.plan.ids if spec.plan is not None else spec.ids
        out_node, out_port = spec.node.inputs[0]
        sub = Plan(LocalStream(out_node, out_port), name=spec.key,
                   _boundary=frozenset({entry}), _ids=ids)
        run = Run(sub, backend=self.backend, seed=spec.seed, _preset={entry: spec.members})
        self._runs.append(run)
        try:
            yield from run
        finally:
            run.stop()
            self._runs.remove(run)

    def flowrl_close(self) -> None:
        for run in list(self._runs):
            run.stop()
