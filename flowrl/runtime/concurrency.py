"""Driver-side fan-in and fan-out: Concurrently's modes and ``duplicate``.

Policy:
- ``round_robin``: strict turns; input ``i`` gives ``w_i`` items per turn (a
  fractional weight rounds stochastically, a ``"*"`` weight takes what is ready
  now, at most :data:`STAR_LIMIT` items, so an always-ready input cannot starve
  the others). An exhausted input drops out. When only ``"*"`` inputs are left
  and a turn found nothing ready, wait (awaited) until one of them has an item.
- ``async``: whichever input is ready; ready inputs are served in rotation from
  the one after the last served, so none starves. When none is ready, wait for the
  first to become ready (awaited on the event loop, never polled). Every poll of
  an input gives the loop a turn (see :class:`~flowrl.runtime.context.Pull`), so
  an input waiting on the loop (a queue, a Ray reply, a timer) is woken even while
  another input is always ready; ``"*"`` inputs of ``round_robin`` are polled, so
  they get the same turns.
- ``duplicate``: one upstream, ``n`` branch buffers. A branch that needs a new item
  pulls it (one pull at a time) and appends it to every other live branch's
  buffer; it waits while some other branch is ``max_lag`` items behind.

State: per input a :class:`Pull` (its one outstanding request, a task of the run's
loop once polled); per splitter the
branch buffers, which branches are closed, and the futures of waiting branches.
"""

from __future__ import annotations

import asyncio
import math
import random
from collections import deque
from typing import Any, AsyncIterator

from flowrl.runtime.context import Pull, RunContext
from flowrl.runtime.stats import NodeStats

STAR_LIMIT = 1000


def stochastic_round(w: float, rng: random.Random) -> int:
    """``floor(w)``, plus one with probability ``w - floor(w)``.

    >>> stochastic_round(3, random.Random(0))
    3
    """
    base = math.floor(w)
    return base + (1 if rng.random() < w - base else 0)


async def round_robin(ctx: RunContext, inputs: list[AsyncIterator[Any]], weights: list[Any],
                      emit: set[int], rng: random.Random, st: NodeStats):
    pulls = [Pull(ctx, agen) for agen in inputs]
    active = list(range(len(inputs)))
    while active:
        moved = False
        for i in list(active):
            pull, w = pulls[i], weights[i]
            if w == "*":
                for _ in range(STAR_LIMIT):
                    try:
                        ready, item = await pull.poll()
                    except StopAsyncIteration:
                        active.remove(i)
                        break
                    if not ready:
                        break
                    moved = True
                    st.items_in += 1
                    if i in emit:
                        st.items_out += 1
                        yield item
                continue
            for _ in range(stochastic_round(w, rng)):
                try:
                    item = await pull.next()
                except StopAsyncIteration:
                    active.remove(i)
                    break
                moved = True
                st.items_in += 1
                if i in emit:
                    st.items_out += 1
                    yield item
        if not moved and active and all(weights[i] == "*" for i in active):
            # Only "*" inputs are left and none had anything ready: wait for one.
            tasks = [pulls[i].task for i in active if pulls[i].waiting()]
            if tasks:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)


async def async_union(ctx: RunContext, inputs: list[AsyncIterator[Any]], emit: set[int],
                      st: NodeStats):
    pulls = {i: Pull(ctx, agen) for i, agen in enumerate(inputs)}
    order = list(range(len(inputs)))
    start = 0
    while pulls:
        served = False
        for k in range(len(order)):
            i = order[(start + k) % len(order)]
            pull = pulls.get(i)
            if pull is None:
                continue
            try:
                ready, item = await pull.poll()
            except StopAsyncIteration:
                del pulls[i]
                continue
            if ready:
                start = (start + k + 1) % len(order)
                served = True
                st.items_in += 1
                if i in emit:
                    st.items_out += 1
                    yield item
                break
        if not served and pulls:
            tasks = [p.task for p in pulls.values() if p.waiting()]
            if tasks:
                await asyncio.wait(tasks, return_when=asyncio.FIRST_COMPLETED)


class Splitter:
    """Fans one upstream out to ``n`` branches kept within ``max_lag`` of each other."""

    def __init__(self, ctx: RunContext, upstream: AsyncIterator[Any], n: int, max_lag: int,
                 st: NodeStats):
        self.ctx = ctx
        self.upstream = upstream
        self.max_lag = max_lag
        self.buffers: list[deque] = [deque() for _ in range(n)]
        self.closed = [False] * n
        self.ended = False
        self.pulling: Any = None  # future resolved when the in-progress pull is done
        self.waiters: list[Any] = []
        self.st = st

    def _wake(self) -> None:
        waiters, self.waiters = self.waiters, []
        for f in waiters:
            if not f.done():
                f.set_result(None)

    def _lagging(self, i: int) -> bool:
        return any(len(b) >= self.max_lag for j, b in enumerate(self.buffers)
                   if j != i and not self.closed[j])

    async def branch(self, i: int):
        buf = self.buffers[i]
        try:
            while True:
                if buf:
                    item = buf.popleft()
                    self._wake()
                    yield item
                    continue
                if self.ended:
                    return
                if self.pulling is not None or self._lagging(i):
                    fut = self.pulling
                    if fut is None:
                        fut = self.ctx.loop.create_future()
                        self.waiters.append(fut)
                    await fut
                    continue
                self.pulling = self.ctx.loop.create_future()
                try:
                    item = await self.upstream.__anext__()
                except StopAsyncIteration:
                    self.ended = True
                    continue
                finally:
                    done, self.pulling = self.pulling, None
                    done.set_result(None)
                    self._wake()
                self.st.items_in += 1
                for j, b in enumerate(self.buffers):
                    if j != i and not self.closed[j]:
                        b.append(item)
                self.st.depth(max(len(b) for b in self.buffers))
                self.st.items_out += 1
                yield item
        finally:
            self.closed[i] = True
            buf.clear()
            self._wake()
