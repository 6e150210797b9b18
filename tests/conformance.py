"""Conformance suite: every backend must pass these; the local backend is the reference.

Each normative example of docs/design.md is a test here. Unordered results are
compared as multisets with per-shard order checked, never by timing.
"""

from __future__ import annotations

import collections
import itertools
import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowrl
from flowrl import Concurrently, OperatorError, Plan


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.ray)])
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_session")
    return request.param


def run_all(stream, backend, limit=10_000):
    with Plan(stream).compile(backend=backend) as run:
        return run.take(limit)


class Counter(flowrl.ShardHost):
    """A user shard host: yields ``base, base + 1, ...`` (``n`` items, or forever)."""

    def __init__(self, base, n=None):
        self.base, self.n = base, n

    def shard_items(self):
        i = 0
        while self.n is None or i < self.n:
            yield self.base + i
            i += 1


def make_hosts(backend, cls, arg_list):
    if backend == "ray":
        import ray
        remote_cls = ray.remote(num_cpus=0)(cls)
        return [remote_cls.remote(*args) for args in arg_list]
    return [cls(*args) for args in arg_list]


def assert_fair(shard_of_item, num_shards):
    """Every prefix of the output gives each shard its equal share within one item."""
    counts = [0] * num_shards
    for t, s in enumerate(shard_of_item, 1):
        counts[s] += 1
        assert max(abs(c - t / num_shards) for c in counts) <= 1, (
            f"after {t} items the shards have {counts}: {list(shard_of_item)}")


def per_key_order(pairs):
    order = collections.defaultdict(list)
    for k, v in pairs:
        order[k].append(v)
    return dict(order)


# ------------------------------------------------------------------ sources + gathers

def test_from_items_gather_sync_design_example(backend):
    assert run_all(flowrl.from_items([1, 2, 3, 4], 2).gather_sync(), backend) == [1, 2, 3, 4]


def test_from_range_contiguous_split_in_sync_order(backend):
    assert run_all(flowrl.from_range(4).gather_sync(), backend) == [0, 2, 1, 3]
    # the last shard takes the remainder
    assert run_all(flowrl.from_range(7, num_shards=3).batch_across_shards(), backend) == [
        [0, 2, 4], [1, 3, 5], [6]]


def test_batch_across_shards_design_example(backend):
    out = run_all(flowrl.from_iterators([[0, 1], [2, 3, 4]]).batch_across_shards(), backend)
    assert out == [[0, 2], [1, 3], [4]]


def test_from_iterators_accepts_callables_and_ranges(backend):
    out = run_all(flowrl.from_iterators([lambda: iter("ab"), range(3)]).gather_sync(), backend)
    assert out == ["a", 0, "b", 1, 2]


def test_gather_sync_drops_finished_shards(backend):
    out = run_all(flowrl.from_iterators([[1], [2, 3, 4], []]).gather_sync(), backend)
    assert out == [1, 2, 3, 4]


@pytest.mark.parametrize("num_async", [1, 3])
def test_gather_async_is_a_multiset_with_per_shard_order(backend, num_async):
    shards = [[(s, i) for i in range(6)] for s in range(3)]
    out = run_all(flowrl.from_iterators(shards).gather_async(num_async=num_async), backend)
    assert sorted(out) == sorted(x for s in shards for x in s)
    assert per_key_order(out) == {s: list(range(6)) for s in range(3)}


class Paced(flowrl.ShardHost):
    """Yields ``(shard, 0), (shard, 1), ...`` forever, sleeping ``delays_ms[i % len]``
    milliseconds before item ``i`` (shards of different, uneven speeds)."""

    def __init__(self, shard, delays_ms):
        self.shard, self.delays_ms = shard, delays_ms

    def shard_items(self):
        for i in itertools.count():
            time.sleep(self.delays_ms[i % len(self.delays_ms)] / 1000)
            yield self.shard, i


def test_gather_async_is_fair_under_a_slow_consumer(backend):
    """docs/design.md#fair-gathers: among results ready together the least recently
    served shard goes first, so no shard is starved by faster ones.

    The consumer is slower than every shard by construction, not by timing: on Ray,
    before taking the next item it waits until each host has answered its pending
    pulls (a ping, which an actor runs after the calls submitted before it)."""

    def consumed(hosts):
        if backend == "ray":
            import ray
            ray.get([h.flowrl_ping.remote() for h in hosts], timeout=60)

    @settings(max_examples=3 if backend == "ray" else 25, deadline=None)
    @given(delays=st.lists(st.lists(st.integers(0, 4), min_size=1, max_size=3),
                           min_size=2, max_size=4),
           num_async=st.integers(1, 3))
    def check(delays, num_async):
        hosts = make_hosts(backend, Paced, list(enumerate(delays)))
        try:
            stream = flowrl.from_actors(hosts).gather_async(num_async=num_async)
            out = []
            with Plan(stream).compile(backend=backend) as run:
                for _ in range(4 * len(hosts)):
                    out += run.take(1)
                    consumed(hosts)
        finally:
            if backend == "ray":
                import ray
                for h in hosts:
                    ray.kill(h)
        assert all(seq == list(range(len(seq))) for seq in per_key_order(out).values())
        assert_fair([s for s, _ in out], len(hosts))

    check()


def test_repeat_cycles_items(backend):
    out = run_all(flowrl.from_items([1, 2], 1, repeat=True).gather_sync(), backend, limit=5)
    assert out == [1, 2, 1, 2, 1]


# ------------------------------------------------------------------ shard-local transforms

def test_shard_local_chain_is_applied_per_shard(backend):
    s = (flowrl.from_range(8, num_shards=2)
         .for_each(lambda x: x * 10)
         .filter(lambda x: x != 20)
         .batch(2)
         .combine(lambda b: [sum(b)])
         .gather_sync())
    # shard 0: 0,10,30 -> [0,10],[30] -> 10, 30 ; shard 1: 40,50,60,70 -> 90, 130
    assert run_all(s, backend) == [10, 90, 30, 130]


def test_flatten_on_shards(backend):
    s = flowrl.from_items([[1, 2], [3], [4, 5]], 1).flatten().gather_sync()
    assert run_all(s, backend) == [1, 2, 3, 4, 5]


def test_local_shuffle_is_a_seeded_permutation(backend):
    def plan():
        return flowrl.from_range(40, 2).local_shuffle(8, seed=3).gather_sync()
    first, second = run_all(plan(), backend), run_all(plan(), backend)
    assert sorted(first) == list(range(40))
    assert first == second
    assert first != run_all(flowrl.from_range(40, 2).gather_sync(), backend)


def test_select_shards_and_parallel_union(backend):
    a = flowrl.from_iterators([[1, 2], [3, 4], [5, 6]])
    b = flowrl.from_iterators([[7, 8]])
    assert run_all(a.select_shards([2, 0]).gather_sync(), backend) == [5, 1, 6, 2]
    u = a.union(b)
    assert u.num_shards == 4
    assert run_all(u.for_each(lambda x: -x).gather_sync(), backend) == [-1, -3, -5, -7, -2, -4,
                                                                          -6, -8]


def test_from_actors_reads_user_shard_hosts(backend):
    hosts = make_hosts(backend, Counter, [(0, 3), (100, 2)])
    assert run_all(flowrl.from_actors(hosts).gather_sync(), backend) == [0, 100, 1, 101, 2]
    # the hosts outlive the run and serve the next one
    assert run_all(flowrl.from_actors(hosts).gather_sync(), backend) == [0, 100, 1, 101, 2]


class Tally(flowrl.ShardHost):
    """A user shard host that counts the items its stream has made (``made()``); with
    ``fail_after`` its stream raises once it has made that many."""

    def __init__(self, base, fail_after=None):
        self.base, self.fail_after, self.count = base, fail_after, 0

    def shard_items(self):
        while True:
            if self.count == self.fail_after:
                raise ValueError(f"shard {self.base} broke after {self.count} items")
            self.count += 1
            yield self.base + self.count

    def made(self):
        return self.count


def made(backend, hosts):
    """Items each host has made; on Ray the call queues behind every pull sent before."""
    if backend == "ray":
        import ray
        return ray.get([h.made.remote() for h in hosts])
    return [h.made() for h in hosts]


def test_a_gather_output_asks_for_the_next_round_once_the_last_is_taken(backend):
    # The run hands a fetched round out item by item without sending the next round's
    # requests before its last item is taken, and names each item's shard.
    hosts = make_hosts(backend, Tally, [(0,), (100,)])
    with Plan(flowrl.from_actors(hosts).gather_sync()).compile(backend=backend) as run:
        for k in (1, 2):
            assert next(run) == k
            assert run.metrics.current_actor == hosts[0]
            assert made(backend, hosts) == [k, k]
            assert next(run) == 100 + k
            assert run.metrics.current_actor == hosts[1]
            assert made(backend, hosts) == [k, k]


def test_a_gather_async_output_names_each_items_shard_and_fails_after_what_it_served(backend):
    # a pass hands out the items it served, each naming its shard, before the failure
    # it met
    hosts = make_hosts(backend, Tally, [(0,), (100, 2)])
    out = []
    with pytest.raises(OperatorError, match="shard 100 broke after 2 items"):
        with Plan(flowrl.from_actors(hosts).gather_async(num_async=1)).compile(
                backend=backend) as run:
            for x in run:
                assert run.metrics.current_actor == hosts[0 if x < 100 else 1], x
                out.append(x)
    assert [x for x in out if x > 100] == [101, 102]
    if backend == "local":  # the third pass serves shard 0, then meets shard 1's failure
        assert out == [1, 101, 2, 102, 3]


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_plan_that_is_a_gather_never_enters_its_event_loop(backend, mode, monkeypatch):
    # Its waits run in the caller's thread; only a larger plan runs on the loop. Items
    # of a finite shard come until it ends, each shard's in order.
    hosts = make_hosts(backend, Counter, [(0, 3), (100,)])
    s = flowrl.from_actors(hosts)
    out = s.gather_sync() if mode == "sync" else s.gather_async(num_async=2)
    run = Plan(out).compile(backend=backend)

    def entered():
        raise AssertionError("the run entered its event loop")

    monkeypatch.setattr(run.loop, "run_forever", entered)
    got = []
    for x in run:  # until the short shard has ended, and 10 items at least
        got.append(x)
        if len(got) >= 10 and 2 in got or len(got) == 1000:
            break
    monkeypatch.undo()
    run.stop()
    assert [x for x in got if x < 100] == [0, 1, 2]
    assert [x for x in got if x >= 100] == list(range(100, 100 + len(got) - 3))
    if mode == "sync" or backend == "local":
        assert got == [0, 100, 1, 101, 2, 102, 103, 104, 105, 106]


def test_one_host_serves_two_runs_at_once(backend):
    hosts = make_hosts(backend, Counter, [(0,), (100,)])
    first = Plan(flowrl.from_actors(hosts).gather_sync()).compile(backend=backend)
    second = Plan(flowrl.from_actors(hosts).for_each(lambda x: -x).gather_sync()).compile(
        backend=backend)
    assert first.take(2) == [0, 100]
    assert second.take(4) == [0, -100, -1, -101]
    second.stop()
    assert first.take(2) == [1, 101]
    first.stop()


def test_zip_with_source_actor_names_the_producing_shard(backend):
    hosts = make_hosts(backend, Counter, [(0, 3), (100, 3)])
    s = flowrl.from_actors(hosts).gather_async().for_each(lambda x: x + 1).zip_with_source_actor()
    out = run_all(s, backend)
    assert sorted(x for _, x in out) == [1, 2, 3, 101, 102, 103]
    for actor, x in out:
        assert actor == hosts[0 if x < 100 else 1]


# ------------------------------------------------------------------ driver-side operators

def test_local_stream_operators(backend):
    s = (flowrl.from_range(10, 2).gather_sync()
         .for_each(lambda x: x + 1).filter(lambda x: x % 2 == 0).batch(2).flatten()
         .combine(lambda x: [x, x]))
    assert run_all(s, backend) == [6, 6, 2, 2, 8, 8, 4, 4, 10, 10]


def test_concurrently_round_robin_design_example(backend):
    a = flowrl.from_items([1, 2, 3], 1).gather_sync()
    b = flowrl.from_items([4, 5, 6], 1).gather_sync()
    assert run_all(Concurrently([a, b]), backend) == [1, 4, 2, 5, 3, 6]


def test_concurrently_weights_design_example(backend):
    streams = [flowrl.from_items([v] * 3, 1).gather_sync() for v in (1, 2, 3)]
    out = run_all(Concurrently(streams, round_robin_weights=[3, 1, 2]), backend)
    assert out == [1, 1, 1, 2, 3, 3, 2, 3, 2]


def test_concurrently_star_weight_design_example():
    streams = [flowrl.from_iterable(lambda v=v: [v] * 3) for v in (1, 2, 3)]
    out = run_all(Concurrently(streams, round_robin_weights=[1, 1, "*"]), "local")
    assert out == [1, 2, 3, 3, 3, 1, 2, 1, 2]


def test_concurrently_output_indexes_design_example(backend):
    a = flowrl.from_items([1, 2, 3], 1).gather_sync()
    b = flowrl.from_items([4, 5, 6], 1).gather_sync()
    assert run_all(Concurrently([a, b], output_indexes=[1]), backend) == [4, 5, 6]


def test_concurrently_output_indexes_still_drives_every_input(backend):
    seen = []
    a = flowrl.from_items([1, 2, 3], 1).gather_sync().for_each(lambda x: seen.append(x) or x)
    b = flowrl.from_items([4, 5, 6], 1).gather_sync()
    assert run_all(Concurrently([a, b], output_indexes=[1]), backend) == [4, 5, 6]
    assert seen == [1, 2, 3]


def test_concurrently_async_is_a_fair_multiset(backend):
    a = flowrl.from_items([("a", i) for i in range(5)], 1).gather_sync()
    b = flowrl.from_items([("b", i) for i in range(5)], 1).gather_sync()
    out = run_all(Concurrently([a, b], mode="async"), backend)
    assert per_key_order(out) == {"a": list(range(5)), "b": list(range(5))}


def test_duplicate_gives_every_copy_every_item(backend):
    x, y = flowrl.from_range(6, 2).gather_sync().duplicate(2)
    out = run_all(Concurrently([x.for_each(lambda v: ("x", v)), y.for_each(lambda v: ("y", v))]),
                  backend)
    assert per_key_order(out) == {"x": [0, 3, 1, 4, 2, 5], "y": [0, 3, 1, 4, 2, 5]}


def test_aggregate_loses_and_duplicates_nothing(backend):
    s = flowrl.from_range(24, num_shards=4).aggregate(2, lambda g: g.batch(3))
    assert s.num_shards == 2
    batches = run_all(s.for_each(sorted).gather_sync(), backend)
    assert all(len(b) <= 3 for b in batches)
    assert sorted(x for b in batches for x in b) == list(range(24))


# ------------------------------------------------------------------ metrics

def test_get_metrics_inside_driver_operators(backend):
    def count(x):
        flowrl.get_metrics().counters["seen"] += 1
        return x
    with Plan(flowrl.from_range(5, 2).gather_sync().for_each(count)).compile(backend=backend) as run:
        run.take(10)
        assert run.metrics.counters["seen"] == 5


def test_get_metrics_fails_in_shard_operators(backend):
    s = flowrl.from_range(2, 1).for_each(lambda x: flowrl.get_metrics(), name="shard_side")
    with pytest.raises(OperatorError, match="shard_side"):
        run_all(s.gather_sync(), backend)


# ------------------------------------------------------------------ failure and stopping

def test_shard_operator_error_names_the_node(backend):
    s = flowrl.from_range(4, 2).for_each(lambda x: 1 // (x - 2), name="divide").gather_sync()
    with pytest.raises(OperatorError, match="'divide'.*ZeroDivisionError") as info:
        run_all(s, backend)
    assert info.value.node_id == "divide"


def test_driver_operator_error_names_the_node_and_chains_the_cause(backend):
    s = flowrl.from_range(4, 2).gather_sync().for_each(lambda x: {}[x], name="lookup")
    with pytest.raises(OperatorError, match="'lookup'") as info:
        run_all(s, backend)
    assert isinstance(info.value.__cause__, KeyError)


def test_stop_mid_stream_is_final(backend):
    run = Plan(flowrl.from_range(10, 2, repeat=True).gather_async(num_async=2)).compile(
        backend=backend)
    assert len(run.take(5)) == 5
    run.stop()  # returns (a hang fails on the test timeout) and ends the run
    assert run.take(3) == []
    run.stop()  # idempotent


def test_a_plan_whose_sources_end_finishes(backend):
    streams = [flowrl.from_range(5, 2).gather_async(), flowrl.from_range(3, 1).gather_sync()]
    x, y = Concurrently(streams, mode="async").duplicate(2)
    out = run_all(Concurrently([x, y]), backend)
    assert sorted(out) == sorted([0, 1, 2, 3, 4, 0, 1, 2] * 2)


def test_stats_count_items_per_node(backend):
    s = flowrl.from_range(10, 2).gather_sync(name="g").filter(lambda x: x % 2 == 0, name="even")
    with Plan(s.for_each(str, name="str")).compile(backend=backend) as run:
        run.take(100)
        stats = run.stats()
    assert stats["g"]["items_out"] == 10
    assert (stats["even"]["items_in"], stats["even"]["items_out"]) == (10, 5)
    assert stats["str"]["items_out"] == 5
    assert set(stats["str"]["fused_with"]) == {"even", "str"}
