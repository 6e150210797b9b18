"""The restart policy of a WorkerSet: what becomes of a lost remote worker.

Policy (:class:`~flowrl.workers.WorkerConfig` fields): a remote worker that died
or did not answer within ``sample_timeout_s`` is lost. It is replaced
(``recreate_failed_workers``: a new worker with the same ``worker_index``), or
dropped (``ignore_worker_failures``, or ``recreate_failed_workers=False``), or,
with neither, it is a :class:`~flowrl.errors.WorkerError` naming it. Once
``max_worker_restarts`` replacements were counted the next loss is a WorkerError.
A replacement gets :data:`~flowrl.runtime.calls.START_WAIT_S` to start: until it
answers once, a wait on it is bounded by what is left of that when it is more
than ``sample_timeout_s``.

Counting: each replacement counts once, in one counter, ``num_worker_restarts``.
Until the set is bound to a run's metrics (:meth:`RestartPolicy.report_to`: a
run's driver binds it at the first restart it asks for, ``CollectMetrics`` at
its first report) the count is kept here; from then on it lives in the run's
counters, so results report it and checkpoints carry it.

State: the restart count (``_unreported``, then ``metrics.counters``),
``num_dropped``, ``fresh`` (worker index -> when its replacement was made, until
it answers or its start wait is over) and ``starting`` (worker index -> the
replacement's pending ready call, until it is done).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Any

from flowrl.errors import WorkerError
from flowrl.runtime.calls import START_WAIT_S, Calls
from flowrl.runtime.driver import WORKER_RESTARTS_COUNTER as RESTARTS_COUNTER

if TYPE_CHECKING:
    from flowrl.workers.worker_set import WorkerConfig, WorkerSet

log = logging.getLogger("flowrl.workers")


class RestartPolicy:
    """Decides, counts and times the replacements of one WorkerSet; see the module
    docstring. ``config`` None (a set from ``from_existing``) tolerates no loss."""

    def __init__(self, config: "WorkerConfig | None", calls: Calls):
        self.config = config
        self.calls = calls
        self.num_dropped = 0
        self.fresh: dict[int, float] = {}
        self.starting: dict[int, Any] = {}
        self._unreported = 0
        self._metrics: Any = None

    # -- counting ------------------------------------------------------------------
    @property
    def num_restarts(self) -> int:
        """Replacements made (and, once bound, those restored with the run's metrics)."""
        if self._metrics is None:
            return self._unreported
        return self._metrics.counters[RESTARTS_COUNTER]

    def report_to(self, metrics: Any) -> None:
        """Count from now on in ``metrics.counters`` (a run's MetricsContext); the
        replacements made before the first binding are added to it once."""
        if metrics is self._metrics:
            return
        if self._metrics is None:
            metrics.counters[RESTARTS_COUNTER] += self._unreported
            self._unreported = 0
        self._metrics = metrics

    def _count(self) -> None:
        if self._metrics is None:
            self._unreported += 1
        else:
            self._metrics.counters[RESTARTS_COUNTER] += 1

    # -- deciding ------------------------------------------------------------------
    @property
    def tolerates_failures(self) -> bool:
        return self.config is not None and self.config.tolerates_failures

    def refuse(self, worker_index: int, reason: str, where: str,
               error: BaseException | None = None) -> None:
        """Raise the WorkerError for a lost worker when losses are not tolerated."""
        if not self.tolerates_failures:
            raise WorkerError(
                f"WorkerSet.{where}: remote worker {worker_index} (a Ray actor) {reason}; set "
                "recreate_failed_workers=True to replace it or ignore_worker_failures=True "
                "to go on without it") from error

    def replaces(self, worker_index: int, reason: str) -> bool:
        """True: replace lost worker ``worker_index``; False: drop it (the set has a
        config). Raises once ``max_worker_restarts`` is used up."""
        config = self.config
        if config.ignore_worker_failures or not config.recreate_failed_workers:
            return False
        limit = config.max_worker_restarts
        if limit is not None and self.num_restarts >= limit:
            raise WorkerError(f"remote worker {worker_index} was lost ({reason}) after "
                              f"{self.num_restarts} restart(s): max_worker_restarts={limit} is "
                              "used up; find out why workers fail, or raise the limit")
        return True

    def another_may_come(self) -> bool:
        """Whether ``max_worker_restarts`` allows a replacement after the next one."""
        limit = None if self.config is None else self.config.max_worker_restarts
        return limit is None or self.num_restarts + 1 < limit

    def dropped(self, worker_index: int, reason: str, left: int) -> None:
        self.num_dropped += 1
        log.warning("remote worker %d was lost (%s) and dropped "
                    "(ignore_worker_failures); %d remote worker(s) left", worker_index,
                    reason, left)

    def replaced(self, worker_index: int, reason: str, ready: Any) -> None:
        """Record replacement ``worker_index`` made (``ready``: its pending ready call)."""
        self.starting[worker_index] = ready
        self.fresh[worker_index] = time.monotonic()
        self._count()
        log.warning("remote worker %d was lost (%s) and replaced (restart %d)", worker_index,
                    reason, self.num_restarts)

    # -- timing --------------------------------------------------------------------
    def answered(self, worker_index: int) -> None:
        """Worker ``worker_index`` answered a call: it is started."""
        self.fresh.pop(worker_index, None)

    def still_starting(self) -> set[int]:
        """Indices of replacements whose worker is not built yet."""
        if not self.starting:
            return set()
        done = {id(p) for p in self.calls.wait(list(self.starting.values()), 0)}
        for idx, p in list(self.starting.items()):
            if id(p) in done:
                del self.starting[idx]
        return set(self.starting)

    def bound(self, timeout_s: float, worker_index: int | None = None) -> float:
        """Seconds to wait for worker ``worker_index`` (any worker if None):
        ``timeout_s``, or what is left of START_WAIT_S for a replacement that has not
        answered yet."""
        now, bound = time.monotonic(), timeout_s
        for i, t0 in list(self.fresh.items()):
            if now - t0 > START_WAIT_S:
                del self.fresh[i]
            elif worker_index is None or i == worker_index:
                bound = max(bound, t0 + START_WAIT_S - now)
        return bound


class Restarter:
    """The ``restart`` a WorkerSet gives ``from_actors``; runs on the driver only.

    Inside an aggregator (Ray) the runtime ships a stand-in that asks the driver to
    call it (``flowrl.runtime.aggregator.RelayedRestart``). The set counts the
    replacements it makes itself: the driver binds it to the run's metrics
    (:meth:`report_restarts_to`) instead of counting them again.
    """

    driver_only = True

    def __init__(self, workers: "WorkerSet", indices: list[int]):
        self.workers = workers
        self.indices = indices
        self.handed = {idx: w for idx, w in zip(workers._indices, workers._remotes)}

    def __getstate__(self) -> dict:
        # Plans are shipped to aggregators with their nodes' params: a copy carries no
        # WorkerSet (its local worker, locks), only what names it. The runtime never
        # calls a copy; it relays to the driver's original instead.
        return {"workers": None, "indices": self.indices, "handed": {}}

    def report_restarts_to(self, metrics: Any) -> None:
        """Count this set's replacements in ``metrics`` (see :class:`RestartPolicy`)."""
        if self.workers is not None:
            self.workers.restarts.report_to(metrics)

    def __call__(self, i: int) -> Any:
        if self.workers is None:
            raise WorkerError(f"WorkerSet.restarter(): restart({i}) was called on a copy "
                              "shipped away from the driver; only the driver's WorkerSet can "
                              "replace its workers")
        with self.workers._lock:
            return self._restart(i)

    def _restart(self, i: int) -> Any:
        ws, idx = self.workers, self.indices[i]
        if idx not in ws._indices:
            return None                       # dropped already
        current = ws._remotes[ws._indices.index(idx)]
        if current is not self.handed.get(idx):
            self.handed[idx] = current        # replaced already (foreach_worker, sync)
            return current
        self.handed[idx] = new = ws.restart_worker(idx, reason="lost in the plan")
        return new


__all__ = ["RestartPolicy", "Restarter"]
