"""A replacement's start: the wait it is given, and a warm spare to build the next one in.

Start wait: a replacement gets :data:`~flowrl.runtime.calls.START_WAIT_S` to start:
until it answers once, a wait on it is bounded by what is left of that when it is
more than ``sample_timeout_s`` (:class:`StartingWorkers`; state: ``fresh``, worker
index -> when its replacement was made, until it answers or its start wait is
over, and ``starting``, worker index -> the replacement's pending ready call,
until it is done).

Spares:

Policy: most of a replacement's start is its new process importing flowrl and its
libraries (torch), not building the env
and policy. So once a set has replaced a worker it keeps one *spare* started
(``num_cpus=0``: it sits idle), started once the replacement answered its ready
call so that the two do not compete for the CPU; the next replacement rebuilds
the spare in place (:func:`rebuild_worker`: a fresh RolloutWorker, same env, seed
and policies as a new worker would get) and a new spare starts behind it. A set
that never loses a worker never starts one. The spare keeps its creation's zero
CPU reservation when promoted (Ray fixes an actor's resources at creation); the
lost worker's reservation is released. Only workers in their own processes
(``Calls.remote``) have spares: an in-process start costs no import.

State of the spares: ``spare`` (the started idle worker, or None) and ``stopped``,
both under the set's lock; one short-lived thread per spare start, waiting for the
replacement's ready call.
"""

from __future__ import annotations

import threading
import time
from typing import Any, Callable

from flowrl.runtime.calls import START_WAIT_S, Calls
from flowrl.workers.rollout_worker import RolloutWorker


class StartingWorkers:
    """The replacements of one WorkerSet that have not started yet; see the module
    docstring.

    >>> from flowrl.runtime.calls import IN_PROCESS
    >>> starts = StartingWorkers(IN_PROCESS)
    >>> starts.began(2, IN_PROCESS.call([], "append", 0))    # its ready call, done
    >>> sorted(starts.fresh), starts.still_starting(), starts.starting
    ([2], set(), {})
    >>> starts.bound(1.0, 2) > 1.0, starts.bound(1.0, 1)     # only worker 2 waits longer
    (True, 1.0)
    >>> starts.answered(2); starts.fresh
    {}
    """

    def __init__(self, calls: Calls):
        self.calls = calls
        self.fresh: dict[int, float] = {}
        self.starting: dict[int, Any] = {}

    def began(self, worker_index: int, ready: Any) -> None:
        """Replacement ``worker_index`` was made; ``ready``: its pending ready call."""
        self.starting[worker_index] = ready
        self.fresh[worker_index] = time.monotonic()

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


class SpareWorkers:
    """At most one warm spare; see the module docstring. ``start(worker_index)``
    creates a zero-CPU worker; ``lock`` is the owning set's."""

    def __init__(self, calls: Calls, start: Callable[[int], Any], lock: threading.RLock):
        self.calls = calls
        self.enabled = calls.remote
        self._start = start
        self._lock = lock
        self.spare: Any = None
        self.stopped = False

    def take(self) -> Any:
        """The spare (now no longer a spare), or None."""
        spare, self.spare = self.spare, None
        return spare

    def start_after(self, ready: Any, worker_index: int) -> None:
        """Start the next spare once ``ready`` (the replacement's ready call) is done."""
        if not self.enabled:
            return

        def start() -> None:
            try:
                self.calls.wait([ready], START_WAIT_S)
            except Exception:  # noqa: BLE001 - Ray is shutting down: no spare
                return
            with self._lock:
                if self.stopped or self.spare is not None:
                    return
                self.spare = self._start(worker_index)

        threading.Thread(target=start, name="flowrl-spare-worker", daemon=True).start()

    def stop(self) -> None:
        """End the spare; none starts after this."""
        with self._lock:
            self.stopped = True
            if self.spare is not None:
                self.calls.kill(self.spare)
                self.spare = None


def rebuild_worker(worker: RolloutWorker, env: Any, worker_index: int, kwargs: dict,
                   torch_threads: int | None) -> None:
    """Make the spare ``worker`` (inside its actor) what a new actor for
    ``worker_index`` would be: its envs closed, its state dropped, built afresh."""
    worker.stop()
    worker.__dict__.clear()
    RolloutWorker.__init__(worker, env, worker_index=worker_index, torch_threads=torch_threads,
                           **kwargs)


__all__ = ["SpareWorkers", "StartingWorkers", "rebuild_worker"]
