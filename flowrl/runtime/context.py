"""The running plan's context, blocking calls, and pollable pulls.

Policy: the driver pipeline is a tree of async iterators on one asyncio event
loop per run; ``next(run)`` runs the output iterator's ``__anext__()`` to
completion on that loop (``loop.run_until_complete``; a plan that is one run of
a synchronous source, or a gather alone, needs no loop: see ``driver.py``), so
every operator, including a user's ``async def`` operator or async-generator
source, runs inside a task of the running loop and may await anything. A
blocking call (a Ray wait) is awaited through :func:`call_blocking`: while some
other task exists on the loop (a polled input, a user coroutine) it runs on the
run's executor thread, so the loop stays free for them; while the calling task
is the loop's only one, nothing else could run meanwhile, and the call runs
right there (no thread hop per wait). An input that is polled
(``Concurrently``) gets a real task for its outstanding ``__anext__``
(:class:`Pull`); those tasks are the run's background tasks, cancelled when it
stops.

State kept here: a ``contextvars.ContextVar`` holding the current
:class:`RunContext` (its loop, executor, background tasks, local worker), set
while a run's driver code executes, so runtime code never needs a global loop.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
from dataclasses import dataclass, field
from typing import Any, Callable

from flowrl.errors import FlowError


@dataclass
class RunContext:
    """A run's loop, its I/O threads for blocking Ray waits, and its pending tasks.

    ``executor`` serves only blocking Ray waits (:func:`call_blocking`) made while
    other tasks share the loop; the runtime
    sizes it to one thread per gather, each of which has at most one such wait in
    flight, so one wait can never hold up another. Queue bridges use no thread.
    """

    loop: asyncio.AbstractEventLoop
    executor: concurrent.futures.ThreadPoolExecutor = field(
        default_factory=lambda: concurrent.futures.ThreadPoolExecutor(
            max_workers=1, thread_name_prefix="flowrl-io"))
    background: set = field(default_factory=set)  # Pull tasks not yet done or taken
    local_worker: Any = None  # what get_global_worker() returns in driver-side operators


#: The run whose driver-side operators execute now (what :func:`current_run` returns);
#: ``Run`` sets it around each step, shard-side code runs with it unset.
CURRENT_RUN: contextvars.ContextVar[RunContext | None] = contextvars.ContextVar(
    "flowrl_run", default=None)


def current_run() -> RunContext:
    ctx = CURRENT_RUN.get()
    if ctx is None:
        raise FlowError("no flowrl run is executing here; this helper is only available "
                        "inside operators of a running plan")
    return ctx


async def call_blocking(fn: Callable[..., Any], *args: Any) -> Any:
    """Await blocking ``fn(*args)`` without holding up any other task of the run's loop.

    With other tasks on the loop it runs on the run's executor thread, and they
    run meanwhile; with none (the caller is the loop's only task) it runs in the
    caller's thread, since nothing could use the loop in between.

    >>> import asyncio
    >>> ctx = RunContext(asyncio.new_event_loop())
    >>> async def main():
    ...     token = CURRENT_RUN.set(ctx)
    ...     try:
    ...         return await call_blocking(sum, [1, 2, 3])
    ...     finally:
    ...         CURRENT_RUN.reset(token)
    >>> ctx.loop.run_until_complete(main())
    6
    >>> ctx.loop.close(); ctx.executor.shutdown()
    """
    ctx = current_run()
    if len(asyncio.all_tasks(ctx.loop)) <= 1:
        return fn(*args)
    return await ctx.loop.run_in_executor(ctx.executor, fn, *args)


class Pull:
    """The one outstanding ``__anext__`` of an async iterator, as a task of the run's loop.

    ``await poll()`` gives the loop one turn, then returns ``(True, item)`` when an
    item is ready (the pull's task has finished: one that waits on nothing outside
    the process finishes in its first turn), else ``(False, None)`` while the task
    keeps running in the background; ``await next()`` waits for the item. End of
    stream raises ``StopAsyncIteration``. The task is in ``ctx.background`` from
    its start until it is taken (or, if never taken, until it is done).
    """

    __slots__ = ("ctx", "agen", "task")

    def __init__(self, ctx: RunContext, agen: Any):
        self.ctx = ctx
        self.agen = agen
        self.task: asyncio.Task | None = None

    def waiting(self) -> bool:
        """Whether this pull's task is pending on the loop."""
        return self.task is not None and not self.task.done()

    async def poll(self) -> tuple[bool, Any]:
        if self.task is None:
            self.task = self._start()
        # One loop turn: a new task runs its first step, and whatever a thread, a
        # timer or a Ray reply woke meanwhile runs too, even while some other
        # input is always ready.
        await asyncio.sleep(0)
        if not self.task.done():
            return False, None
        return True, self._take().result()

    async def next(self) -> Any:
        if self.task is not None:
            return await self._take()
        return await self.agen.__anext__()

    def _take(self) -> asyncio.Task:
        task, self.task = self.task, None
        self.ctx.background.discard(task)
        return task

    def _start(self) -> asyncio.Task:
        background = self.ctx.background
        task = self.ctx.loop.create_task(_anext(self.agen))
        background.add(task)
        task.add_done_callback(background.discard)
        return task


async def _anext(agen: Any) -> Any:
    return await agen.__anext__()
