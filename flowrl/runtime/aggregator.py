"""Aggregator hosts for tree aggregation (``ParallelStream.aggregate``).

Each aggregator is a ShardHost whose one shard is the output of the aggregate's
pipeline run over its round-robin group of upstream shards. The compiler has
already made that pipeline a program of its own (``Compiled.pipelines``); the
aggregator receives it with its group's shards (:class:`AggregatorSpec`, plain
data that never holds the outer plan) and runs it, the group's shards read by
the program's entry gather. The same class runs in-process (local backend) or as
a Ray actor created beside the driver (Ray backend).

A member lost inside an aggregator recovers there, with the member's ``restart``;
a restart that must run on the driver (a WorkerSet's) is relayed to it: see
:class:`RestartRelay` (state: one broker actor and one waiting thread per run that
needs it).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Iterator

from flowrl.errors import WorkerError
from flowrl.runtime.compile import Compiled
from flowrl.runtime.shard_host import ShardHost


@dataclass
class AggregatorSpec:
    """What one aggregator runs: its pipeline's program over its group of shards."""

    program: Compiled               # the aggregate's pipeline (Compiled.pipelines)
    members: list[tuple[Any, Any, str, dict]]  # (host, fused stage, label, recovery)
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


# ---------------------------------------------------------------------------------
# Restarts requested by aggregators, performed by the driver.
#
# A WorkerSet's restart (``WorkerSet.restarter()``) must run where the WorkerSet
# lives: only the driver holds the learner's current weights and the list of remote
# workers that later weight broadcasts and ``foreach_worker`` reach. An aggregator on
# Ray therefore gets a serializable stand-in, :class:`RelayedRestart`, which sends
# the request through a small async actor (:class:`RestartBroker`) and waits for the
# answer; a :class:`RestartRelay` thread on the driver blocks on the broker's next
# request (no polling), calls the real restart and sends back the new actor handle
# (or None: dropped, or the error text). The aggregator's sub-run then installs its
# stage on the replacement exactly as a driver-side gather would.


class RestartBroker:
    """Ray actor (async): hands restart requests from aggregators to the driver."""

    def __init__(self) -> None:
        import asyncio
        self._requests: Any = asyncio.Queue()
        self._replies: dict[int, Any] = {}
        self._seq = 0

    async def request(self, source: str, index: int, lost: int) -> tuple[Any, str | None]:
        import asyncio
        self._seq += 1
        reply = asyncio.get_running_loop().create_future()
        self._replies[self._seq] = reply
        await self._requests.put((self._seq, source, index, lost))
        return await reply

    async def next_request(self) -> tuple[int, str, int, int]:
        return await self._requests.get()

    async def reply(self, seq: int, result: tuple[Any, str | None]) -> None:
        reply = self._replies.pop(seq, None)
        if reply is not None and not reply.done():
            reply.set_result(result)


class RelayedRestart:
    """The ``restart`` an aggregator calls for a member whose restart runs on the driver.

    ``restart(index, lost=n)`` asks the driver (through the broker) for the
    replacement of shard ``index`` of source ``source`` and returns it (None: the
    driver dropped the worker). A refusal on the driver (``max_worker_restarts`` used
    up, a failed rebuild) comes back as a WorkerError with the driver's message.
    ``takes_lost``: the runtime passes how many requests were abandoned, which the
    driver adds to its ``num_lost_requests``.
    """

    takes_lost = True

    def __init__(self, broker: Any, source: str, timeout_s: float):
        self.broker = broker
        self.source = source
        self.timeout_s = timeout_s

    def __call__(self, index: int, lost: int = 0) -> Any:
        from flowrl.runtime.ray_backend import RAY_CALLS
        asked = RAY_CALLS.call(self.broker, "request", self.source, index, lost)
        try:
            new, error = RAY_CALLS.get(
                asked, timeout=self.timeout_s, label="the restart broker",
                setting="the larger of remote_timeout_s and the start wait")
        except WorkerError as e:
            # Not this member's loss: the driver is stopping or stuck in the learner.
            raise WorkerError(f"the restart of {self.source}[{index}] got no answer from "
                              f"the driver ({e}); the run is stopping") from e
        if error is not None:
            raise WorkerError(error)
        return new


class RestartRelay:
    """Driver side of relayed restarts: one broker actor and one waiting thread per run.

    :meth:`proxy` registers a driver-only restart for a source and returns its
    :class:`RelayedRestart`. The thread serves requests one at a time: it adds the
    request's abandoned count to ``counters['num_lost_requests']`` and calls the
    registered restart. :meth:`close` ends the broker (which ends the thread).
    """

    def __init__(self, counters: Any, lost_counter: str, timeout_s: float):
        import threading

        from flowrl.runtime.ray_backend import RAY_CALLS
        self.calls = RAY_CALLS
        self.broker = RAY_CALLS.create(RestartBroker, num_cpus=0, on_driver_node=True)
        self.counters = counters
        self.lost_counter = lost_counter
        self.timeout_s = timeout_s
        self.restarts: dict[str, Any] = {}
        self._thread = threading.Thread(target=self._serve, name="flowrl-restart-relay",
                                        daemon=True)
        self._thread.start()

    def proxy(self, source: str, restart: Any) -> RelayedRestart:
        self.restarts[source] = restart
        return RelayedRestart(self.broker, source, self.timeout_s)

    def _serve(self) -> None:
        calls = self.calls
        while True:
            # Unbounded on purpose: this thread waits for the next request as long as
            # the run lasts; close() ends the broker, which ends the wait.
            try:
                seq, source, index, lost = calls.get(
                    calls.call(self.broker, "next_request"), timeout=None,
                    label="the restart broker", setting="the run's lifetime")
            except Exception:  # noqa: BLE001 - the broker ended: the run stopped
                return
            self.counters[self.lost_counter] += lost
            try:
                result = (self.restarts[source](index), None)
            except Exception as e:  # noqa: BLE001 - sent back, raised in the aggregator
                result = (None, str(e) if isinstance(e, WorkerError) else
                          f"restart of {source}[{index}] on the driver raised "
                          f"{type(e).__name__}: {e}")
            try:
                calls.call(self.broker, "reply", seq, result)
            except Exception:  # noqa: BLE001 - the broker ended
                return

    def close(self) -> None:
        self.calls.kill(self.broker)
        self._thread.join(timeout=3)
