"""Bridges between a plan and learner threads: ``Enqueue`` and ``Dequeue``.

Both take a plain ``queue.Queue`` shared with a thread. A full queue applies
backpressure (the plan waits; nothing is dropped) and an empty one makes the
plan wait, in both cases awaited on the run's event loop: the blocking call runs
on the run's I/O thread, which wakes at least every ``WAKE_S`` seconds only to
notice that the run stopped.
"""

from __future__ import annotations

import queue as queue_mod
from typing import Any, Callable

from flowrl.errors import ConfigError, FlowError
from flowrl.graph.stream import LocalStream, from_iterable
from flowrl.runtime.context import RunContext, current_run, run_in_thread

WAKE_S = 0.2


def _check_queue(q: Any, op: str) -> None:
    if not all(hasattr(q, m) for m in ("put", "get", "put_nowait", "get_nowait")):
        raise ConfigError(f"{op}(queue={q!r}): expected a queue.Queue (put/get/put_nowait/"
                          "get_nowait)")


def _put_blocking(q: queue_mod.Queue, item: Any, ctx: RunContext) -> None:
    while not ctx.stopping:
        try:
            q.put(item, timeout=WAKE_S)
            return
        except queue_mod.Full:
            continue


class Enqueue:
    """``stream.for_each(Enqueue(q))``: put each item into ``q``, passing it through.

    When ``q`` is full the plan waits until the consumer thread makes room.

    >>> import queue, flowrl
    >>> q = queue.Queue(maxsize=10)
    >>> run = flowrl.Plan(flowrl.from_iterable(lambda: [1, 2]).for_each(Enqueue(q))).compile()
    >>> run.take(3), q.get_nowait(), q.get_nowait()
    ([1, 2], 1, 2)
    """

    flowrl_kind = "sink"

    def __init__(self, queue: queue_mod.Queue):
        _check_queue(queue, "Enqueue")
        self.queue = queue

    async def __call__(self, item: Any) -> Any:
        try:
            self.queue.put_nowait(item)
        except queue_mod.Full:
            await run_in_thread(_put_blocking, self.queue, item, current_run())
        return item


def _get_blocking(q: queue_mod.Queue, check: Callable[[], bool] | None,
                  ctx: RunContext) -> tuple[bool, Any]:
    while not ctx.stopping:
        if check is not None and not check():
            raise FlowError("Dequeue: check() reports the producer of the queue is no longer "
                            "running (e.g. the learner thread died); see its log for the cause")
        try:
            return True, q.get(timeout=WAKE_S)
        except queue_mod.Empty:
            continue
    return False, None


def Dequeue(queue: queue_mod.Queue, check: Callable[[], bool] | None = None, *,
            name: str = "dequeue") -> LocalStream:
    """A LocalStream of the items a thread puts into ``queue`` (endless).

    ``check()``, if given, is asked while waiting whether the producer is still
    alive; when it returns False the run fails with a FlowError instead of hanging.

    >>> import queue, flowrl
    >>> q = queue.Queue(); q.put("a"); q.put("b")
    >>> flowrl.Plan(Dequeue(q)).compile().take(2)
    ['a', 'b']
    """
    _check_queue(queue, "Dequeue")

    async def items():
        while True:
            try:
                item = queue.get_nowait()
            except queue_mod.Empty:
                got, item = await run_in_thread(_get_blocking, queue, check, current_run())
                if not got:
                    return
            yield item

    return from_iterable(items, name=name)
