"""Runtime behaviour: queues, stopping, release, async operators, named errors from
fused stages (on both backends) and code the local backend cannot give each shard."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
import traceback

import pytest

import flowrl
from flowrl import Concurrently, ConfigError, FlowError, OperatorError, Plan
from flowrl.ops import Dequeue, Enqueue


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.ray)])
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_session")
    return request.param


class Numbers(flowrl.ShardHost):
    def shard_items(self):
        return iter(range(100))


def test_enqueue_applies_backpressure_and_drops_nothing():
    q = queue.Queue(maxsize=2)
    run = Plan(flowrl.from_iterable(lambda: range(10)).for_each(Enqueue(q))).compile()
    out: list = []
    producer = threading.Thread(target=lambda: out.extend(run.take(10)))
    producer.start()
    deadline = time.monotonic() + 5
    while q.qsize() < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    time.sleep(0.2)
    assert q.qsize() == 2 and producer.is_alive()  # blocked on the full queue
    received = [q.get(timeout=5) for _ in range(10)]
    producer.join(timeout=5)
    assert received == list(range(10)) and out == list(range(10))
    run.stop()


def test_stop_while_waiting_on_an_empty_queue_returns():
    waiting = Dequeue(queue.Queue())
    finite = flowrl.from_iterable(lambda: [1, 2, 3])
    run = Plan(Concurrently([waiting, finite], mode="async")).compile()
    assert run.take(3) == [1, 2, 3]
    run.stop()  # returns although Dequeue still waits (a hang fails on the test timeout)
    assert run.take(1) == []


def test_stop_releases_exactly_what_the_run_created():
    host = Numbers()
    other = Plan(flowrl.from_actors([host]).gather_sync()).compile()
    run = Plan(flowrl.from_actors([host]).gather_sync()).compile()
    assert len(host.flowrl_installed_keys()) == 2
    run.take(3)
    run.stop()
    assert host.flowrl_installed_keys() == [key for key in host.flowrl_installed_keys()
                                            if key.startswith(other.key)]
    assert other.take(2) == [0, 1]
    other.stop()
    assert host.flowrl_installed_keys() == []


def test_an_operator_error_stops_the_run_and_releases_hosts():
    host = Numbers()
    run = Plan(flowrl.from_actors([host]).gather_sync().for_each(lambda x: 1 // (x - 3))).compile()
    with pytest.raises(OperatorError):
        run.take(10)
    assert host.flowrl_installed_keys() == []
    assert run.take(1) == []


def test_async_operators_and_async_sources():
    async def slow_double(x):
        await asyncio.sleep(0)
        return 2 * x

    async def numbers():
        for i in range(4):
            await asyncio.sleep(0)
            yield i

    assert Plan(flowrl.from_iterable(numbers).for_each(slow_double)).compile().take(10) == [
        0, 2, 4, 6]


def test_aggregator_pipeline_may_suspend():
    async def later(batch):
        await asyncio.sleep(0)
        return sum(batch)

    s = flowrl.from_range(16, 4).aggregate(2, lambda g: g.batch(2).for_each(later))
    assert sum(Plan(s.gather_async()).compile().take(100)) == sum(range(16))


def test_get_metrics_is_per_run():
    def mark(x):
        flowrl.get_metrics().counters["n"] += x
        return x
    a = Plan(flowrl.from_iterable(lambda: [1, 2]).for_each(mark)).compile()
    b = Plan(flowrl.from_iterable(lambda: [10]).for_each(mark)).compile()
    a.take(5), b.take(5)
    assert (a.metrics.counters["n"], b.metrics.counters["n"]) == (3, 10)
    with pytest.raises(FlowError, match="outside a driver-side operator call"):
        flowrl.get_metrics()


def test_stats_report_waits_and_queue_depths():
    with Plan(flowrl.from_range(40, 4).gather_async(num_async=3, name="g")).compile() as run:
        run.take(40)
        stats = run.stats()["g"]
    assert stats["items_out"] == 40
    assert stats["max_queue_depth"] == 12
    assert stats["items_per_s"] > 0


def test_stats_count_shard_side_nodes_across_shards():
    s = (flowrl.from_range(20, 2, name="src").filter(lambda x: x % 2 == 0, name="even")
         .batch(3, name="triples").gather_sync(name="g"))
    with Plan(s).compile() as run:
        run.take(100)
    stats = run.stats()  # a snapshot taken when the run stopped
    assert stats["src"]["items_out"] == 20
    assert (stats["even"]["items_in"], stats["even"]["items_out"]) == (20, 10)
    assert (stats["triples"]["items_in"], stats["triples"]["items_out"]) == (10, 4)
    assert stats["g"]["items_in"] == 4


def test_async_sources_must_be_async_generator_functions():
    async def numbers():
        yield 1

    run = Plan(flowrl.from_iterable(lambda: numbers(), name="wrapped").batch(2)).compile()
    with pytest.raises(OperatorError, match=r"'wrapped'.*make the factory an async generator"):
        next(run)
    assert Plan(flowrl.from_iterable(numbers).batch(2)).compile().take(3) == [[1]]


def test_sync_source_segment_reports_every_node():
    s = flowrl.from_iterable(lambda: range(10), name="src").filter(
        lambda x: x % 2 == 0, name="even").batch(2, name="pairs").flatten(name="flat")
    with Plan(s).compile() as run:
        assert run.take(20) == [0, 2, 4, 6, 8]
    stats = run.stats()
    assert [stats[n]["items_out"] for n in ("src", "even", "pairs", "flat")] == [10, 5, 3, 5]
    assert (stats["pairs"]["items_in"], stats["flat"]["items_in"]) == (5, 3)
    assert set(stats["flat"]["fused_with"]) == {"src", "even", "pairs", "flat"}


# ---------------------------------------------------------------- fused stages' errors
def halve_even(x):
    if x == 3:
        raise ValueError(f"odd input {x}")
    return x // 2


def test_a_fused_map_error_names_its_node_and_the_users_function(backend):
    s = (flowrl.from_range(6, 2, name="src").for_each(lambda x: x + 1, name="inc")
         .for_each(halve_even, name="halve").filter(lambda x: True, name="all"))
    run = Plan(s.gather_sync()).compile(backend=backend)
    with pytest.raises(OperatorError, match=r"'halve' \(halve\) raised ValueError: "
                                            r"odd input 3") as info:
        run.take(10)
    err = info.value
    assert (err.node_id, err.label) == ("halve", "halve")
    cause = err.remote_traceback or "".join(traceback.format_exception(err.__cause__))
    assert "in halve_even" in cause and "odd input 3" in cause


def test_a_driver_side_fused_map_error_names_its_node_and_the_users_function():
    s = (flowrl.from_range(6, 2).gather_sync().for_each(lambda x: x + 1, name="inc")
         .for_each(halve_even, name="halve"))
    with Plan(s).compile() as run, pytest.raises(OperatorError, match=r"'halve'") as info:
        run.take(10)
    assert "in halve_even" in "".join(traceback.format_exception(info.value.__cause__))


def lazily_failing(x):
    """A generator function: the KeyError comes when its result is iterated."""
    yield x
    yield {}["missing"]


@pytest.mark.parametrize("where", ["shards", "aggregator"])
def test_lazy_errors_of_shard_side_combine_and_flatten_name_their_node(backend, where):
    combined = flowrl.from_range(4, 2).combine(lazily_failing, name="pairs")
    flattened = flowrl.from_range(4, 2).for_each(lambda x: [x], name="wrap").flatten(
        name="flat").combine(lazily_failing, name="after")
    if where == "aggregator":
        combined = flowrl.from_range(4, 2).aggregate(
            1, lambda g: g.combine(lazily_failing, name="pairs"))
        flattened = flowrl.from_range(4, 2).aggregate(
            1, lambda g: g.for_each(lazily_failing, name="wrap").flatten(name="flat"))
    for stream, node in [(combined, "pairs"), (flattened, "after" if where == "shards"
                                                else "flat")]:
        run = Plan(stream.gather_sync()).compile(backend=backend)
        with pytest.raises(OperatorError, match=rf"'{node}'.*KeyError") as info:
            run.take(10)
        assert info.value.node_id == node


@pytest.mark.parametrize("upstream", [
    lambda: flowrl.from_iterable(lambda: range(4)),  # fused into one sync segment
    lambda: flowrl.from_range(4, 2).gather_sync()], ids=["sync_segment", "after_gather"])
def test_lazy_errors_of_driver_side_combine_and_flatten_name_their_node(upstream):
    for stream, node in [(upstream().combine(lazily_failing, name="pairs"), "pairs"),
                         (upstream().for_each(lazily_failing).flatten(name="flat"), "flat")]:
        with Plan(stream).compile() as run, pytest.raises(
                OperatorError, match=rf"'{node}'.*KeyError") as info:
            run.take(10)
        assert info.value.node_id == node


# ------------------------------------------------------ code the local backend ships
class LockedCounter:
    """Stateful, and holds a lock: it cannot be pickled, so Ray could not ship it."""

    def __init__(self):
        self.lock = threading.Lock()
        self.n = 0

    def __call__(self, x):
        with self.lock:
            self.n += 1
            return self.n


def test_an_unpicklable_shard_side_callable_is_refused_naming_its_node():
    counter = LockedCounter()
    stream = flowrl.from_range(4, 2, name="src").for_each(counter, name="count")
    with pytest.raises(ConfigError, match=r"'count' \(count\) runs shard-side.*cannot be "
                                          r"pickled: TypeError.*lock.*make it picklable"):
        Plan(stream.gather_sync()).compile(backend="local")
    assert counter.n == 0  # not shared across the shards: never called


def test_an_unpicklable_aggregator_callable_is_refused_naming_its_node():
    stream = flowrl.from_range(4, 2).aggregate(
        1, lambda g: g.for_each(LockedCounter(), name="agg_count"))
    with pytest.raises(ConfigError, match=r"'agg_count' \(agg_count\) runs shard-side"):
        Plan(stream.gather_async()).compile(backend="local")


def test_a_picklable_stateful_callable_gets_one_state_per_shard():
    class Count:
        def __init__(self):
            self.n = 0

        def __call__(self, x):
            self.n += 1
            return self.n

    stream = flowrl.from_range(6, 2).for_each(Count())
    with Plan(stream.gather_sync()).compile(backend="local") as run:
        assert run.take(10) == [1, 1, 2, 2, 3, 3]
