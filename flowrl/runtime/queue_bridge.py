"""Waiting on a thread's ``queue.Queue`` from a run's event loop, without polling.

Policy: a plan and a thread (a learner thread) share a plain ``queue.Queue``. The
plan side never blocks a thread on it: it tries ``put_nowait``/``get_nowait``, and
when the queue is full/empty it registers a waiter future and awaits it. The
queue is *watched*: its ``_put``/``_get`` hooks (the extension points
``queue.Queue`` subclasses override, called under the queue's mutex by every
``put``/``get`` variant) wake the waiters of the other direction with
``loop.call_soon_threadsafe``. So an item put by the thread wakes the plan at
once, and no thread or timer polls the queue. Watching is bound lazily, on the
first wait, so a queue made before any run (a ``LearnerThread``'s) works with
whichever run waits on it, and several runs may wait on one queue.

While a wait lasts, the other side's liveness ``check()`` (if given) is asked on
the event loop once when the wait starts and then every :data:`CHECK_INTERVAL_S`
(a loop timer; no thread wakes up), and ``timeout`` bounds how long nothing may
move; either failing raises :class:`~flowrl.errors.FlowError` naming ``label``.

State: per watched queue a :class:`QueueWatch` (its waiting getters and putters,
each a ``(loop, future)`` pair), guarded by the queue's own mutex.
"""

from __future__ import annotations

import asyncio
import queue as queue_mod
from typing import Any, Callable

from flowrl.errors import ConfigError, FlowError

#: Seconds between liveness checks while a wait lasts (only when ``check`` is given).
CHECK_INTERVAL_S = 1.0


def _set_done(fut: asyncio.Future) -> None:
    if not fut.done():
        fut.set_result(None)


class QueueWatch:
    """The waiters of one watched queue; installed by :func:`watch`."""

    __slots__ = ("getters", "putters")

    def __init__(self) -> None:
        self.getters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []
        self.putters: list[tuple[asyncio.AbstractEventLoop, asyncio.Future]] = []

    @staticmethod
    def wake(waiters: list) -> None:
        """Resolve every waiter in ``waiters`` on its loop (caller holds the mutex)."""
        for loop, fut in waiters:
            try:
                loop.call_soon_threadsafe(_set_done, fut)
            except RuntimeError:  # that run's loop is closed: nobody waits any more
                pass
        waiters.clear()


def check_queue(q: Any, op: str) -> None:
    """ConfigError unless ``q`` is a ``queue.Queue`` (or a subclass)."""
    if not isinstance(q, queue_mod.Queue):
        raise ConfigError(
            f"{op}(queue={q!r}): expected a queue.Queue (or a subclass such as "
            "queue.LifoQueue) shared with the thread; other queue types cannot wake the "
            "plan when the thread puts or takes an item")


def check_wait_args(op: str, check: Any, timeout: Any, label: Any) -> None:
    if check is not None and not callable(check):
        raise ConfigError(f"{op}(check={check!r}): must be a zero-argument callable returning "
                          "False once the other side died (e.g. thread.is_alive), or None")
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))
                                or not timeout > 0):
        raise ConfigError(f"{op}(timeout={timeout!r}): must be a number of seconds > 0, or "
                          "None to wait without a bound")
    if label is not None and not isinstance(label, str):
        raise ConfigError(f"{op}(label={label!r}): must be a string naming the other side "
                          "(e.g. \"learner thread 'learner'\"), or None")


def watch(q: queue_mod.Queue) -> QueueWatch:
    """The :class:`QueueWatch` of ``q``, hooking its ``_put``/``_get`` the first time."""
    w = q.__dict__.get("_flowrl_watch")
    if w is not None:
        return w
    with q.mutex:
        w = q.__dict__.get("_flowrl_watch")
        if w is None:
            w = QueueWatch()
            put, get = q._put, q._get

            def _put(item: Any) -> None:
                put(item)
                if w.getters:
                    w.wake(w.getters)

            def _get() -> Any:
                item = get()
                if w.putters:
                    w.wake(w.putters)
                return item

            q._put, q._get = _put, _get
            q.__dict__["_flowrl_watch"] = w
    return w


def _has_item(q: queue_mod.Queue) -> bool:
    return q._qsize() > 0


def _has_room(q: queue_mod.Queue) -> bool:
    return q.maxsize <= 0 or q._qsize() < q.maxsize


async def wait_ready(loop: asyncio.AbstractEventLoop, q: queue_mod.Queue, *, put: bool,
                     op: str, check: Callable[[], bool] | None, timeout: float | None,
                     label: str) -> None:
    """Return once ``q`` has room (``put=True``) or an item; the caller then retries.

    Awaits a future that the other side's ``put``/``get`` resolves; see the module
    docstring for ``check`` and ``timeout``. Raises FlowError naming ``label``.
    """
    w = watch(q)
    ready, waiters = (_has_room, w.putters) if put else (_has_item, w.getters)
    start = loop.time()
    if check is not None and not ready(q) and not check():
        raise _dead(op, label, put)
    while True:
        fut = loop.create_future()
        with q.mutex:
            if ready(q):
                return
            waiters.append((loop, fut))
        delay = CHECK_INTERVAL_S if check is not None else None
        if timeout is not None:
            left = start + timeout - loop.time()
            delay = left if delay is None else min(delay, left)
        timer = loop.call_later(max(delay, 0.0), _set_done, fut) if delay is not None else None
        try:
            await fut
        finally:
            if timer is not None:
                timer.cancel()
            with q.mutex:
                try:
                    waiters.remove((loop, fut))
                except ValueError:
                    pass  # woken: wake() already dropped it
        if ready(q):
            return
        if check is not None and not check():
            raise _dead(op, label, put)
        if timeout is not None and loop.time() - start >= timeout:
            raise FlowError(
                f"{op}: {label} {'took no item' if put else 'put no item'} for {timeout:g} s "
                f"(timeout={timeout:g}); it is stuck or too slow: find out why, or raise the "
                "timeout")


def _dead(op: str, label: str, put: bool) -> FlowError:
    return FlowError(
        f"{op}: {label} is no longer running (check() returned False) while the plan waits "
        f"{'for room in' if put else 'for an item from'} its queue; see its log or traceback "
        "for the cause")
