"""Bridges between a plan and a thread (a learner thread): ``Enqueue`` and ``Dequeue``.

Both take a plain ``queue.Queue`` shared with the thread, made before or after the
run. A full queue applies backpressure (the plan waits; nothing is dropped) and an
empty one makes the plan wait; either wait is awaited on the run's event loop and
woken by the thread's own ``put``/``get`` (see ``runtime/queue_bridge.py``): no
thread blocks on the queue for the plan and nothing polls it. ``check`` (is the
other side alive?) and ``timeout`` (how long nothing may move) turn a dead or stuck
thread into a :class:`~flowrl.errors.FlowError` naming ``label``, instead of a hang.
"""

from __future__ import annotations

import queue as queue_mod
from typing import Any, Callable

from flowrl.graph.stream import LocalStream, from_iterable
from flowrl.runtime.context import current_run
from flowrl.runtime.queue_bridge import check_queue, check_wait_args, wait_ready


class Enqueue:
    """``stream.for_each(Enqueue(q))``: put each item into ``q``, passing it through.

    When ``q`` is full the plan waits (awaited, woken by the consumer's ``get``)
    until the consumer thread makes room. ``check()`` returning False while it
    waits means the consumer died; no room for ``timeout`` seconds means it is
    stuck: either fails the run with a FlowError naming ``label`` (default: "the
    consumer of Enqueue's queue"). Touches no counters or timers.

    >>> import queue, flowrl
    >>> q = queue.Queue(maxsize=10)
    >>> with flowrl.Plan(flowrl.from_iterable(lambda: [1, 2]).for_each(Enqueue(q))).compile() as run:
    ...     run.take(3), q.get_nowait(), q.get_nowait()
    ([1, 2], 1, 2)
    """

    flowrl_kind = "sink"

    def __init__(self, queue: queue_mod.Queue, *, check: Callable[[], bool] | None = None,
                 timeout: float | None = None, label: str | None = None):
        check_queue(queue, "Enqueue")
        check_wait_args("Enqueue", check, timeout, label)
        self.queue = queue
        self.check = check
        self.timeout = timeout
        self.label = label or "the consumer of Enqueue's queue"

    async def __call__(self, item: Any) -> Any:
        q = self.queue
        while True:
            try:
                q.put_nowait(item)
                return item
            except queue_mod.Full:
                await wait_ready(current_run().loop, q, put=True, op="Enqueue",
                                 check=self.check, timeout=self.timeout, label=self.label)

    def __repr__(self) -> str:
        return f"Enqueue({self.label})"


def Dequeue(queue: queue_mod.Queue, check: Callable[[], bool] | None = None, *,
            timeout: float | None = None, label: str | None = None,
            name: str = "dequeue") -> LocalStream:
    """A LocalStream (node ``name``) of the items a thread puts into ``queue``; endless.

    An empty queue makes the plan wait, awaited and woken by the thread's ``put``.
    ``check()`` returning False while it waits means the producer died; no item for
    ``timeout`` seconds means it is stuck: either fails the run with a FlowError
    naming ``label`` (default: "the producer of Dequeue <name>'s queue"), e.g.
    ``label="learner thread 'learner' (learner_queue_timeout=300)"``. Items are
    taken only when the plan asks for one (none is held back when the run stops).
    Touches no counters or timers.

    >>> import queue, flowrl
    >>> q = queue.Queue(); q.put("a"); q.put("b")
    >>> with flowrl.Plan(Dequeue(q)).compile() as run:
    ...     run.take(2)
    ['a', 'b']
    """
    check_queue(queue, "Dequeue")
    check_wait_args("Dequeue", check, timeout, label)
    label = label or f"the producer of Dequeue {name!r}'s queue"

    async def items():
        while True:
            try:
                item = queue.get_nowait()
            except queue_mod.Empty:
                await wait_ready(current_run().loop, queue, put=False, op="Dequeue",
                                 check=check, timeout=timeout, label=label)
                continue
            yield item
    return from_iterable(items, name=name)
