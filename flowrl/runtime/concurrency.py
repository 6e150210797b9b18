"""Driver-side fan-in and fan-out: Concurrently's modes and ``duplicate``.

Policy:
- ``round_robin``: strict turns; input ``i`` gives ``w_i`` items per turn (a
  fractional weight rounds stochastically, a ``"*"`` weight takes what is ready
  now, at most :data:`STAR_LIMIT` items, so an always-ready input cannot starve
  the others). An exhausted input drops out. When only ``"*"`` inputs are left
  and a turn found nothing ready, wait (awaited) until one of them has an item.
- ``async``: whichever input is ready; ready inputs are served in rotation from
  the one after the last served, so none starves. When none is ready, wait for the
  first to become ready (awaited on the event loop, never polled). While some
  input waits on the loop (a queue, a Ray reply, a timer), every item served from
  an always-ready input is followed by one loop turn, so the waiting input is
  woken; ``"*"`` inputs of ``round_robin`` get the same turn after each round.
- ``duplicate``: one upstream, ``n`` branch buffers. A branch that needs a new item
  pulls it (one pull at a time) and appends it to every other live branch's
  buffer; it waits while some other branch is ``max_lag`` items behind.

State: per input a :class:`Pull` (its one outstanding request); per splitter the
branch buffers, which branches are closed, and the futures of waiting branches.
"""

from __future__ import annotations

import math
import random
from collections import deque
from typing import Any, AsyncIterator

from flowrl.runtime.context import Pull, RunContext, first_completed, next_turn
from flowrl.runtime.stats import NodeStats

STAR_LIMIT = 1000


def _waiting(pulls) -> bool:
    """Whether some input's pull is a task waiting on the loop (which only a loop turn
    can wake: a thread's queue put, a Ray reply, a timer)."""
    return any(p.task is not None and not p.task.done() for p in pulls)


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
                        ready, item = pull.poll()
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
        if moved and _waiting(pulls[i] for i in active if weights[i] == "*"):
            await next_turn()
        elif not moved and active and all(weights[i] == "*" for i in active):
            # Only "*" inputs are left and none had anything ready: wait for one.
            tasks = [pulls[i].task for i in active if pulls[i].task is not None]
            if tasks:
                await first_completed(ctx, tasks)


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
                ready, item = pull.poll()
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
                if _waiting(pulls.values()):
                    await next_turn()
                break
        if not served and pulls:
            tasks = [p.task for p in pulls.values() if p.task is not None]
            if tasks:
                await first_completed(ctx, tasks)


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
