"""Aggregator hosts for tree aggregation (``ParallelStream.aggregate``).

Each aggregator is a ShardHost whose one shard is the output of the aggregate's
pipeline run over its round-robin group of upstream shards. The compiler has
already made that pipeline a program of its own (``Compiled.pipelines``); the
aggregator receives it with its group's shards (:class:`AggregatorSpec`, plain
data that never holds the outer plan) and runs it, the group's shards read by
the program's entry gather. The same class runs in-process (local backend) or as
a Ray actor created beside the driver (Ray backend).

A member lost inside an aggregator is recovered as a driver-side gather's would
be, by its source's recovery, which on Ray runs on the driver
(:class:`~flowrl.runtime.recovery.RelayedRecovery`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from flowrl.runtime.compile import Compiled
from flowrl.runtime.shard_host import ShardHost


@dataclass
class AggregatorSpec:
    """What one aggregator runs: its pipeline's program over its group of shards."""

    program: Compiled               # the aggregate's pipeline (Compiled.pipelines)
    members: list[tuple[Any, Any, str, int, Any]]  # (host, stage, label, index, recovery)
    seed: int
    remote_timeout_s: float | None = None  # the bound of the outer run, for the sub-run


class AggregatorHost(ShardHost):
    """Runs one aggregator's pipeline over its group of shards."""

    def __init__(self, spec: AggregatorSpec, backend: str):
        self.spec = spec
        self.backend = backend
        self._runs: list[Any] = []

    def shard_items(self) -> Iterator[Any]:
        from flowrl.runtime.run import Run, make_backend

        spec = self.spec
        backend = make_backend(spec.program, self.backend, spec.remote_timeout_s)
        run = Run(spec.program, backend, spec.seed, inputs=spec.members)
        self._runs.append(run)
        try:
            yield from run
        finally:
            run.stop()
            self._runs.remove(run)

    def flowrl_close(self) -> None:
        for run in list(self._runs):
            run.stop()
