"""The driver under real asyncio: user coroutines always run inside a task of the run's loop.

``async def`` operators and async-generator sources await real things here
(``asyncio.sleep(0.01)``, an ``asyncio.Queue`` fed by another task, a timeout), on
inputs that are not always ready, on both backends. A ``"*"`` round-robin weight
with nothing ready must wait, not spin. Stopping a run cancels the coroutines still
waiting; their errors name their node; a blocking call leaves the loop free.
"""

from __future__ import annotations

import asyncio
import collections
import itertools
import queue
import threading
import time

import pytest

import flowrl
from flowrl import Concurrently, OperatorError, Plan
from flowrl.ops import Dequeue
from flowrl.runtime import concurrency
from flowrl.runtime.context import CURRENT_RUN, Pull, RunContext, call_blocking


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.ray)])
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_session")
    return request.param


async def slow_double(x):
    """Needs a running loop and a task of its own across its awaits."""
    task = asyncio.current_task()
    await asyncio.sleep(0.01)
    async with asyncio.timeout(30):
        await asyncio.sleep(0.001)
    if asyncio.current_task() is not task:
        raise RuntimeError("the coroutine moved to another task while it ran")
    return 2 * x


async def trickle(n, delay=0.005):
    """An async source whose items come from another task through an asyncio.Queue."""
    q: asyncio.Queue = asyncio.Queue(maxsize=2)

    async def produce():
        for i in range(n):
            await asyncio.sleep(delay)
            await q.put(i)
        await q.put(None)

    producer = asyncio.create_task(produce())
    while (x := await q.get()) is not None:
        yield x
    await producer


def test_async_operator_after_a_synchronous_source():
    with Plan(flowrl.from_iterable(lambda: range(6)).for_each(slow_double)).compile() as run:
        assert run.take(10) == [0, 2, 4, 6, 8, 10]


def test_async_operator_after_a_gather(backend):
    s = flowrl.from_range(12, 3).gather_sync().for_each(slow_double)
    with Plan(s).compile(backend=backend) as run:
        assert run.take(20) == [2 * x for x in [0, 4, 8, 1, 5, 9, 2, 6, 10, 3, 7, 11]]


def test_async_source_fed_by_another_task():
    async def numbers():
        async for x in trickle(8):
            yield x

    s = flowrl.from_iterable(numbers).for_each(slow_double).batch(3)
    with Plan(s).compile() as run:
        assert run.take(10) == [[0, 2, 4], [6, 8, 10], [12, 14]]


async def _trickle6_fn():
    async for x in trickle(6):
        yield x


def test_async_inputs_under_concurrently_async(backend):
    """Async inputs polled while another input is ready: each item exactly once."""
    gathered = flowrl.from_range(20, 2).gather_async(num_async=2).for_each(slow_double)
    local = flowrl.from_iterable(_trickle6_fn).for_each(slow_double).for_each(lambda x: -x - 1)
    with Plan(Concurrently([gathered, local], mode="async")).compile(backend=backend) as run:
        out = run.take(100)
    assert collections.Counter(out) == collections.Counter(
        [2 * x for x in range(20)] + [-2 * x - 1 for x in range(6)])
    assert [x for x in out if x < 0] == [-2 * x - 1 for x in range(6)]  # order kept


def test_star_weight_with_an_async_input():
    fast = flowrl.from_iterable(lambda: range(5))
    slow = flowrl.from_iterable(_trickle6_fn).for_each(lambda x: 100 + x)
    with Plan(Concurrently([fast, slow], round_robin_weights=[1, "*"])).compile() as run:
        out = run.take(100)
    assert [x for x in out if x < 100] == list(range(5))
    assert [x for x in out if x >= 100] == [100 + i for i in range(6)]


def test_aggregator_pipeline_awaits_for_real(backend):
    async def later(batch):
        await asyncio.sleep(0.01)
        return sum(batch)

    s = flowrl.from_range(16, 4).aggregate(2, lambda g: g.batch(2).for_each(later))
    with Plan(s.gather_async()).compile(backend=backend) as run:
        out = run.take(100)
    assert len(out) == 8 and sum(out) == sum(range(16))


def test_duplicate_branches_with_async_operators():
    a, b = flowrl.from_iterable(lambda: range(6)).duplicate(2)
    merged = Concurrently([a.for_each(slow_double), b.for_each(lambda x: -x)], mode="async")
    with Plan(merged).compile() as run:
        out = run.take(100)
    assert sorted(x for x in out if x > 0) == [2, 4, 6, 8, 10]
    assert [x for x in out if x <= 0 and x != 0] == [-1, -2, -3, -4, -5]


class CountingPolls:
    """Counts Pull.poll calls (each one is a turn of a "*" input)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        original = concurrency.Pull.poll

        async def poll(pull):
            self.calls += 1
            return await original(pull)

        monkeypatch.setattr(concurrency.Pull, "poll", poll)


def test_star_weight_waits_for_items_arriving_later_without_spinning(monkeypatch):
    polls = CountingPolls(monkeypatch)
    q = queue.Queue()
    plan = Plan(Concurrently([flowrl.from_iterable(lambda: [1, 2, 3]), Dequeue(q)],
                             round_robin_weights=[1, "*"]))
    run = plan.compile()
    assert run.take(3) == [1, 2, 3]
    out, errors = [], []

    def consume():
        try:
            out.extend(run.take(2))
        except BaseException as e:  # noqa: BLE001 - handed to the test
            errors.append(e)

    t = threading.Thread(target=consume, daemon=True)
    t.start()
    time.sleep(0.5)  # `a` has ended and nothing is ready: a spinning loop polls non-stop
    idle_polls = polls.calls
    assert t.is_alive() and idle_polls < 20
    q.put("late-1")
    time.sleep(0.2)
    q.put("late-2")
    t.join(timeout=30)
    assert (out, errors) == (["late-1", "late-2"], [])
    assert polls.calls - idle_polls < 20
    run.stop()


@pytest.mark.parametrize("mode", ["async", "star"])
def test_an_always_ready_input_does_not_starve_a_waiting_queue(backend, mode):
    # IMPALA's shape: the first input never waits (an endless in-process source; on
    # the local backend every pull is ready at once) and is driven but not emitted;
    # the second is a Dequeue fed by a thread. Only a loop turn delivers the thread's
    # put, and no item leaves the node until then, so serving the ready input must
    # keep giving the loop turns, or the node spins on it forever.
    q = queue.Queue()
    if backend == "local":
        ready = flowrl.from_iterable(itertools.count)
    else:
        ready = flowrl.from_range(10**9, num_shards=1, repeat=True).gather_sync()
    if mode == "async":
        out = Concurrently([ready, Dequeue(q)], mode="async", output_indexes=[1])
    else:
        out = Concurrently([ready, Dequeue(q)], round_robin_weights=[1, "*"],
                           output_indexes=[1])

    def feed():
        for i in range(3):
            time.sleep(0.05)
            q.put(f"late-{i}")

    feeder = threading.Thread(target=feed, daemon=True)
    with Plan(out).compile(backend=backend) as run:
        feeder.start()
        seen = run.take(3)  # bounded by the per-test timeout: a starved queue hangs here
    assert seen == ["late-0", "late-1", "late-2"]


def test_user_coroutines_run_in_a_task_of_the_runs_own_loop():
    seen = []

    async def where(x):
        await asyncio.sleep(0)
        seen.append((asyncio.get_running_loop(), asyncio.current_task() is not None))
        return x

    with Plan(flowrl.from_iterable(lambda: range(3)).for_each(where)).compile() as run:
        assert run.take(5) == [0, 1, 2]
        assert seen == [(run.loop, True)] * 3


def test_stop_cancels_the_coroutines_still_waiting():
    events = []

    async def never_answers(x):
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            events.append(f"operator cancelled on {x}")
            raise

    async def stalls():
        try:
            yield "first"
            await asyncio.Event().wait()
        finally:
            events.append("source closed")

    stuck = flowrl.from_iterable(lambda: [7]).for_each(never_answers)
    ready = flowrl.from_iterable(lambda: [1, 2, 3])
    run = Plan(Concurrently([stuck, flowrl.from_iterable(stalls), ready],
                            mode="async")).compile()
    assert sorted(run.take(4), key=str) == [1, 2, 3, "first"]
    assert len(run.ctx.background) == 2  # the two waiting pulls are tasks of the loop
    run.stop()
    assert sorted(events) == ["operator cancelled on 7", "source closed"]
    assert not run.ctx.background and run.loop.is_closed()


def test_errors_of_async_operators_and_sources_name_their_node(backend):
    async def fails_later(x):
        await asyncio.sleep(0.001)
        if x == 2:
            raise ValueError(f"bad {x}")
        return x

    async def source():
        yield 1
        await asyncio.sleep(0.001)
        raise KeyError("gone")

    s = flowrl.from_range(4, 1).gather_sync().for_each(fails_later, name="late")
    run = Plan(s).compile(backend=backend)
    with pytest.raises(OperatorError, match=r"'late'.*ValueError: bad 2"):
        run.take(10)
    run = Plan(flowrl.from_iterable(source, name="src")).compile()
    assert next(run) == 1
    with pytest.raises(OperatorError, match=r"'src'.*KeyError: 'gone'") as info:
        next(run)
    assert info.value.node_id == "src"


def test_a_blocking_call_leaves_the_loop_free():
    """call_blocking waits on the run's executor thread: a coroutine on the loop can
    still run meanwhile (here it is the one that ends the wait)."""
    released = threading.Event()

    async def blocks(x):
        return await call_blocking(lambda: released.wait(timeout=60) and x)

    async def releases(x):
        await asyncio.sleep(0.01)
        released.set()
        return -x

    a = flowrl.from_iterable(lambda: [5]).for_each(blocks)
    b = flowrl.from_iterable(lambda: [5]).for_each(releases)
    with Plan(Concurrently([a, b], mode="async")).compile() as run:
        assert sorted(run.take(2)) == [-5, 5]


def test_a_poll_reports_what_is_ready_after_one_loop_turn():
    """Pull.poll: an input that waits on nothing outside is ready after one turn; one
    that waits stays a background task until it is done, then gives its item once."""
    loop = asyncio.new_event_loop()
    ctx = RunContext(loop)
    gate = asyncio.Event()

    async def ready():
        yield "now"

    async def gated():
        await gate.wait()
        yield "later"

    async def main():
        now, later = Pull(ctx, ready()), Pull(ctx, gated())
        states = [await now.poll(), len(ctx.background), await later.poll(),
                  len(ctx.background)]
        gate.set()
        await later.task
        states += [len(ctx.background), await later.poll(), later.task]
        return states

    token = CURRENT_RUN.set(ctx)
    try:
        states = loop.run_until_complete(main())
        loop.run_until_complete(loop.shutdown_asyncgens())
    finally:
        CURRENT_RUN.reset(token)
        loop.close()
        ctx.executor.shutdown()
    assert states == [(True, "now"), 0, (False, None), 1, 0, (True, "later"), None]
