"""The running plan's context and the coroutine-driving primitives.

Policy: the driver pipeline is a tree of async iterators on one asyncio event
loop per run. Most steps never suspend (an in-process shard, a ready item), so
the driver first advances a coroutine by hand with ``send(None)``; only when it
really suspends on a future is the rest handed to the event loop
(:class:`Resume`). That keeps the per-item cost of a fused chain near that of a
plain generator while every wait is still awaited, never polled.

Runtime code advanced by hand only awaits futures of the run's own loop, which
needs no running loop. User coroutines (``async def`` operators, async-generator
sources) may await anything (``asyncio.sleep``, an ``asyncio.Queue``, a timeout,
any async library), so they must run inside a task of the running loop: before
calling one, the driver calls :func:`into_loop`, which, while code is being
advanced by hand (``RunContext.by_hand``), suspends with a bare yield. The hand
advance then stops there and hands the rest to a task, which resumes it on the
loop's next turn; the user coroutine starts, and finishes, inside that task.

State kept here: a ``contextvars.ContextVar`` holding the current
:class:`RunContext` (its loop, executor, background tasks and whether code is
being advanced by hand), set while a run's driver code executes, so runtime code
never needs a global loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import types
from dataclasses import dataclass, field
from typing import Any, Awaitable, Callable

from flowrl.errors import FlowError


@dataclass
class RunContext:
    """A run's loop, its I/O threads for blocking Ray waits, and its pending tasks.

    ``executor`` serves only blocking Ray waits (``call_blocking``); the runtime
    sizes it to one thread per gather, each of which has at most one such wait in
    flight, so one wait can never hold up another. Queue bridges use no thread.
    """

    loop: asyncio.AbstractEventLoop
    executor: concurrent.futures.ThreadPoolExecutor = field(
        default_factory=lambda: concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="flowrl-io"))
    background: set = field(default_factory=set)  # tasks not yet done
    stopping: bool = False
    local_worker: Any = None  # what get_global_worker() returns in driver-side operators
    by_hand: bool = False  # True while driver code is advanced with send(None), not a task
    polling: int = 0  # Pull.poll calls in progress (a poll must not block)


_RUN: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar("flowrl_run",
                                                                        default=None)


def current_run() -> RunContext:
    ctx = _RUN.get()
    if ctx is None:
        raise FlowError("no flowrl run is executing here; this helper is only available "
                        "inside operators of a running plan")
    return ctx


async def call_blocking(fn: Callable[..., Any], *args: Any) -> Any:
    """Await blocking ``fn(*args)`` without stalling anything that could progress.

    While the driver advances the plan by hand (no event loop running), no
    background task is pending and no input is being polled (a poll must not
    wait: another input may be ready), nothing else in the run can move until
    this returns, so ``fn`` is called right here, saving two thread hand-offs per
    call; otherwise it runs on the run's I/O thread and the loop stays free.
    """
    if blocks_here():
        return fn(*args)
    ctx = current_run()
    return await ctx.loop.run_in_executor(ctx.executor, fn, *args)


def blocks_here() -> bool:
    """Whether :func:`call_blocking` would call its function right here (nothing else
    in the run could move meanwhile) rather than hand it to the I/O thread."""
    ctx = current_run()
    return not ctx.background and not ctx.polling and not _loop_running()


def _loop_running() -> bool:
    # asyncio's own non-raising check (get_running_loop raises when there is none,
    # and this runs once per blocking Ray call).
    return asyncio._get_running_loop() is not None


def try_now(ctx: RunContext, aw: Any) -> tuple[bool, Any]:
    """Advance awaitable ``aw`` by hand: ``(True, result)`` or ``(False, yielded)``.

    ``yielded`` is a future of the run's loop, or None (a bare yield: continue on
    the loop's next turn). ``StopAsyncIteration`` and operator errors propagate.
    """
    outer, ctx.by_hand = ctx.by_hand, True
    try:
        y = aw.send(None)
    except StopIteration as e:
        return True, e.value
    finally:
        ctx.by_hand = outer
    return False, y


@types.coroutine
def next_turn():
    """Give the loop one turn: a bare yield, resumed on the loop's next iteration
    (advanced by hand, the rest is handed to a task, as :func:`into_loop` does)."""
    yield


async def into_loop(ctx: RunContext) -> None:
    """Make sure what follows runs inside a task of ``ctx.loop`` (see the module policy).

    Free when already there; while advanced by hand, one loop turn.
    """
    if ctx.by_hand:
        await next_turn()


class Resume:
    """Awaitable continuing ``aw``, already advanced by hand to yield ``first``.

    Passes ``first`` (a future) to the event loop, then keeps driving ``aw``
    inside the loop, throwing in whatever the loop throws (cancellation).
    """

    __slots__ = ("aw", "first")

    def __init__(self, aw: Any, first: Any):
        self.aw = aw
        self.first = first

    def __await__(self):
        aw = self.aw
        try:
            arg = yield self.first
            send = aw.send
        except BaseException as e:  # noqa: BLE001 - forwarded into the coroutine
            send, arg = aw.throw, e
        while True:
            try:
                y = send(arg)
            except StopIteration as e:
                return e.value
            try:
                arg = yield y
                send = aw.send
            except BaseException as e:  # noqa: BLE001
                send, arg = aw.throw, e


async def finish(aw: Any, first: Any) -> Any:
    return await Resume(aw, first)


def spawn(ctx: RunContext, aw: Awaitable, first: Any) -> asyncio.Task:
    """A task finishing a hand-advanced awaitable; tracked until it completes."""
    task = ctx.loop.create_task(finish(aw, first))
    ctx.background.add(task)
    task.add_done_callback(ctx.background.discard)
    return task


async def first_completed(ctx: RunContext, tasks: list[asyncio.Future]) -> None:
    """Wait until any of ``tasks`` is done (without ``asyncio.wait``'s running-loop lookup)."""
    if any(t.done() for t in tasks):
        return
    waiter = ctx.loop.create_future()

    def wake(_):
        if not waiter.done():
            waiter.set_result(None)

    for t in tasks:
        t.add_done_callback(wake)
    try:
        await waiter
    finally:
        for t in tasks:
            t.remove_done_callback(wake)


class Pull:
    """The one outstanding ``__anext__`` of an async iterator, pollable without waiting.

    ``poll()`` returns ``(True, item)`` when an item is ready now, else starts (or
    keeps) a background task for it and returns ``(False, None)``; ``await next()``
    waits for the item. End of stream raises ``StopAsyncIteration``.
    """

    __slots__ = ("ctx", "agen", "task")

    def __init__(self, ctx: RunContext, agen: Any):
        self.ctx = ctx
        self.agen = agen
        self.task: asyncio.Task | None = None

    def poll(self) -> tuple[bool, Any]:
        if self.task is not None:
            if not self.task.done():
                return False, None
            task, self.task = self.task, None
            return True, task.result()
        ctx = self.ctx
        aw = self.agen.__anext__()
        ctx.polling += 1
        try:
            ready, value = try_now(ctx, aw)
        finally:
            ctx.polling -= 1
        if ready:
            return True, value
        self.task = spawn(ctx, aw, value)
        return False, None

    async def next(self) -> Any:
        if self.task is not None:
            task, self.task = self.task, None
            return await task
        return await self.agen.__anext__()
