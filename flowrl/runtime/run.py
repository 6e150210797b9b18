"""``Run``: a compiled plan executing on a backend, consumed as an iterator.

Policy: the run owns one asyncio event loop; ``next(run)`` runs the output
iterator's ``__anext__()`` to completion on it (``loop.run_until_complete``), so
between two ``next`` calls the loop stands still and its background tasks (pulls
of polled inputs) wait with it. A plan that is one synchronous segment needs no
loop: ``next(run)`` is a plain ``next()`` on its generator. A plan whose output is
a gather read as it is hands out what each of its fetches brought (a round of
``gather_sync``, a pass of ``gather_async``) from a queue, entering the loop once
per fetch; the gather sends its requests as it would item by item. Any error stops the
run and releases what it created before it propagates; ``stop()`` is idempotent,
cancels the background tasks, closes the node iterators and releases exactly
what this run created: its stages on hosts it adopted, and the hosts it made.

State: the event loop and :class:`RunContext`, the :class:`Driver` (hosts,
shards, node iterators, stats), the run's :class:`MetricsContext`, the fetched
items not yet handed out, and whether it has stopped.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextvars
import time
import uuid
import weakref
from collections import deque
from time import perf_counter as perf
from typing import TYPE_CHECKING, Any

from flowrl.defaults import REMOTE_TIMEOUT_S
from flowrl.errors import ConfigError
from flowrl.metrics import CURRENT_METRICS
from flowrl.metrics import MetricsContext
from flowrl.runtime.backend import Backend
from flowrl.runtime.calls import resolve_backend
from flowrl.runtime.compile import Compiled, check_picklable, compile_plan
from flowrl.runtime.context import CURRENT_RUN, RunContext
from flowrl.runtime.driver import Driver, Member, fetched_items

if TYPE_CHECKING:
    from flowrl.graph.plan import Plan

def uses_ray_actors(program: Compiled) -> bool:
    """Whether ``program`` reads Ray actor handles (a remote ``from_actors``)."""
    return any(op.op == "from_actors" and op.params["remote"] for op in program.ops.values())


def check_remote_timeout(value: Any) -> None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float))
                              or not value > 0):
        raise ConfigError(f"compile(remote_timeout_s={value!r}): must be a number of seconds > 0 "
                          "(how long a remote host may leave a request unanswered before the "
                          "run fails with a WorkerError), or None for no bound")


def make_backend(program: Compiled, backend: str,
                 remote_timeout_s: float | None = REMOTE_TIMEOUT_S) -> Backend:
    check_remote_timeout(remote_timeout_s)
    if resolve_backend(backend, "compile", reads_actors=uses_ray_actors(program)) == "local":
        from flowrl.runtime.local_backend import LocalBackend
        return LocalBackend()
    from flowrl.runtime.ray_backend import RayBackend
    return RayBackend(remote_timeout_s=remote_timeout_s)


def compile_run(plan: "Plan", backend: str = "auto", *, seed: int = 0, local_worker: Any = None,
                remote_timeout_s: float | None = REMOTE_TIMEOUT_S) -> "Run":
    """What ``plan.compile(...)`` does (see :meth:`flowrl.Plan.compile`): compile
    ``plan.graph``, pick the backend, check what ships to actors, start the run."""
    check_remote_timeout(remote_timeout_s)
    program = compile_plan(plan)
    chosen = make_backend(program, backend, remote_timeout_s)
    if chosen.name == "ray":
        try:
            check_picklable(program)
        except BaseException:
            chosen.stop()
            raise
    return Run(program, chosen, seed, local_worker=local_worker)


def _running_loop() -> asyncio.AbstractEventLoop | None:
    try:
        return asyncio.get_running_loop()
    except RuntimeError:
        return None


class Run:
    """A running plan: iterate it, ``take(n)``, ``stop()``, or use it as a context manager.

    ``run.metrics`` is the run's :class:`~flowrl.metrics.MetricsContext`;
    ``run.stats()`` gives per-node items in/out, busy and wait seconds and queue
    depth.

    A Run executes a compiled ``program`` on ``backend`` (``plan.compile()`` makes
    both); ``inputs`` are the shards a program's ``entry`` gather reads (an
    aggregator's group, see ``runtime/aggregator.py``).

    >>> import flowrl
    >>> with flowrl.Plan(flowrl.from_items([1, 2, 3], 1).gather_sync()).compile() as run:
    ...     run.take(2), next(run), run.take(5)
    ([1, 2], 3, [])
    """

    def __init__(self, program: Compiled, backend: Backend, seed: int = 0, *,
                 local_worker: Any = None, inputs: list[Member] = ()):
        self.name = program.name
        self._backend = backend
        self.backend = backend.name
        self.metrics = MetricsContext()
        self.loop = asyncio.new_event_loop()
        # One I/O thread per gather: each has at most one blocking Ray wait in flight.
        self.ctx = RunContext(self.loop, concurrent.futures.ThreadPoolExecutor(
            max_workers=max(1, len(program.slots)), thread_name_prefix="flowrl-io"),
            local_worker=local_worker)
        self._stopped = False
        self._fetched: deque[tuple[Any, Any]] = deque()  # (actor, item), see __next__
        self._final_stats: dict | None = None
        self.key = f"{program.name}-{uuid.uuid4().hex[:8]}"
        self._started = time.perf_counter()
        self._driver = Driver(program, self._backend, self.ctx, self.metrics, self.key,
                              seed, inputs)
        self._res = _Resources(self.loop, self.ctx, self._driver, self._backend)
        self._finalizer = weakref.finalize(self, self._res.release)
        self._finalizer.atexit = False  # at exit the process takes its threads and actors along
        try:
            self._driver.start()
            self._sync = self._driver.sync_output()
            self._fetches = None if self._sync is not None else self._driver.output_fetches()
            if self._sync is None and self._fetches is None:
                self._out = self._driver.build(*program.output)
        except BaseException:
            self.stop()
            raise

    # ------------------------------------------------------------------ iterate
    def __iter__(self) -> "Run":
        return self

    def __next__(self) -> Any:
        if self._stopped:
            raise StopIteration
        fetched = self._fetched
        if not fetched:
            run_token = CURRENT_RUN.set(self.ctx)
            metrics_token = CURRENT_METRICS.set(self.metrics)
            sync = self._sync
            try:
                if sync is not None:  # one synchronous segment: no event loop involved
                    t = perf()
                    try:
                        return next(sync.items or sync.open())
                    finally:
                        sync.busy.s += perf() - t
                if self._fetches is None:
                    return self._res.in_loop(anext(self._out))
                while not fetched:  # the output gather's next round or pass (no loop)
                    fetched.extend(fetched_items(next(self._fetches)))
            except (StopIteration, StopAsyncIteration):
                self.stop()
                raise StopIteration from None
            except BaseException:
                self.stop()
                raise
            finally:
                CURRENT_METRICS.reset(metrics_token)
                CURRENT_RUN.reset(run_token)
        actor, x = fetched.popleft()
        self.metrics.current_actor = actor
        return x

    def take(self, n: int) -> list[Any]:
        """Up to ``n`` next items (fewer if the plan ends first)."""
        out = []
        for _ in range(n):
            try:
                out.append(next(self))
            except StopIteration:
                break
        return out

    # ------------------------------------------------------------------ inspect
    def stats(self) -> dict[str, dict]:
        """Per node id: items_in, items_out, items_per_s (out, over the run's wall time),
        busy_s, wait_s, queue_depth, max_queue_depth (and fused_with for fused nodes;
        ``extra``, figures of the operator's own, for a driver-side operator whose
        function has a ``node_stats()`` method returning ``{name: value}``).
        Shard-side nodes report items in/out summed over their shards (fetched from
        the hosts when this is called); their time is spent on the hosts and not
        measured here."""
        if self._final_stats is not None:
            return self._final_stats
        elapsed = max(time.perf_counter() - self._started, 1e-9)
        out = self._driver.node_stats()
        for st in out.values():
            st["items_per_s"] = round(st["items_out"] / elapsed, 3)
        return out

    # ------------------------------------------------------------------ stop
    def stop(self) -> None:
        """Stop promptly and release what this run created (idempotent)."""
        if self._stopped:
            return
        try:  # keep the figures: after this the hosts are released or gone
            self._final_stats = self.stats()
        except Exception:  # noqa: BLE001 - a dead host must not prevent stopping
            self._final_stats = {}
        self._stopped = True
        self._finalizer()

    def __enter__(self) -> "Run":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        state = "stopped" if self._stopped else "running"
        return f"Run({self.name!r}, backend={self.backend!r}, {state})"


class _Resources:
    """What a run must release; referenced by the run's finalizer, never referencing the run."""

    def __init__(self, loop: asyncio.AbstractEventLoop, ctx: RunContext, driver: Driver,
                 backend: Any):
        self.loop = loop
        self.ctx = ctx
        self.driver = driver
        self.backend = backend
        self.helper: concurrent.futures.ThreadPoolExecutor | None = None

    def in_loop(self, aw: Any) -> Any:
        """Run awaitable ``aw`` to completion on the run's loop."""
        coro = _complete(aw)
        if _running_loop() is None:
            return self.loop.run_until_complete(coro)
        # A run nested inside another run's step (an in-process aggregator): the
        # thread already runs a loop, so this run's loop turns on a helper thread.
        if self.helper is None:
            self.helper = concurrent.futures.ThreadPoolExecutor(1, "flowrl-nested")
        context = contextvars.copy_context()
        return self.helper.submit(context.run, self.loop.run_until_complete, coro).result()

    def release(self) -> None:
        """Cancel pending tasks, close the node iterators, release hosts, end threads and loop."""
        ctx, loop = self.ctx, self.loop
        try:
            if ctx.background and not loop.is_closed():
                for task in list(ctx.background):
                    task.cancel()
                self.in_loop(asyncio.gather(*ctx.background, return_exceptions=True))
            for agen in reversed(self.driver.agens):
                self._close(agen)
            if not loop.is_closed():  # then the async generators user code started
                self.in_loop(loop.shutdown_asyncgens())
        finally:
            try:
                self.driver.stop()
            finally:
                self.backend.stop()
                ctx.executor.shutdown(wait=False, cancel_futures=True)
                if self.helper is not None:
                    self.helper.shutdown(wait=False)
                if not loop.is_closed():
                    loop.close()

    def _close(self, agen: Any) -> None:
        if not hasattr(agen, "aclose"):  # a sync segment's generator (Run.sync_output)
            agen.close()
            return
        try:
            self.in_loop(agen.aclose())
        except (RuntimeError, StopAsyncIteration, GeneratorExit):
            pass  # already finished or closing: nothing left to release


async def _complete(aw: Any) -> Any:
    """``aw`` as a coroutine (``run_until_complete`` wants a coroutine or a future)."""
    return await aw
