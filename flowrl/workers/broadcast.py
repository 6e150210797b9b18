"""Weight broadcast of a WorkerSet: the local worker's weights to every remote worker.

Policy: one ``put`` of the weights per broadcast, then ``set_weights`` on each
remote worker. Calls to a worker run in submission order, so each worker's next
``sample()`` uses the new weights; the calls are not awaited (a worker busy
sampling would stall the learner), but none is forgotten: each is tracked until
it answers, and every later broadcast first takes the ones that finished. A
failed ``set_weights`` is reported to the set (which raises a WorkerError naming
the worker), and so is one unanswered past its bound (a lost worker, which the
set replaces, drops or raises for); ``wait=True`` waits for all of them.
In-process workers take the weights at once.

State: the pending ``set_weights`` calls (:class:`~flowrl.runtime.calls.PendingCalls`,
keyed by ``(worker index, handle)``).
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

from flowrl.runtime.calls import Calls, PendingCalls


class WeightBroadcast:
    """Sends weights and tracks the sends; see the module docstring.

    ``failed(idx, handle, error)``: a ``set_weights`` call raised (or its worker
    died); ``silent(idx, handle)``: one went unanswered past ``bound(idx)``.
    """

    def __init__(self, calls: Calls, *, failed: Callable[[int, Any, BaseException], None],
                 silent: Callable[[int, Any], None], bound: Callable[[int], float]):
        self.calls = calls
        self.pending = PendingCalls(calls)
        self._failed = failed
        self._silent = silent
        self._bound = bound

    def send(self, weights: Any, targets: Sequence[tuple[int, Any]], *, wait: bool,
             versions: dict[str, int] | None = None) -> None:
        """``set_weights(weights)`` on each ``(index, handle)`` of ``targets``
        (``set_weights(weights, versions)`` with the policies' ``versions``)."""
        self.check(False)
        if targets:
            shared = self.calls.put(weights)
            extra = () if versions is None else (versions,)
            for idx, w in targets:
                try:
                    p = self.calls.call(w, "set_weights", shared, *extra)
                except Exception as e:  # noqa: BLE001 - an in-process worker raised now
                    self._failed(idx, w, e)
                    continue
                self.pending.add((idx, w), p, f"remote worker {idx}")
        if wait:
            self.check(True)

    def check(self, wait: bool) -> None:
        """Report the earlier sends that finished badly or are overdue (all of them
        with ``wait``, after waiting for each up to its bound)."""
        if not len(self.pending):
            return
        def bound(key: tuple[int, Any]) -> float:
            return self._bound(key[0])

        wait_s = self.pending.time_left(bound) if wait else 0.0
        for (idx, w), error in self.pending.finished(wait_s=wait_s):
            if error is not None:
                self._failed(idx, w, error)
        for idx, w in self.pending.overdue(None if wait else bound):
            self._silent(idx, w)


__all__ = ["WeightBroadcast"]
