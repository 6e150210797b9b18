"""Property tests: every operator against a plain-Python model (local backend).

Unordered results are compared as multisets, with per-shard / per-input order
checked; seeds come from Hypothesis so a failure replays.
"""

from __future__ import annotations

import collections
import math

from hypothesis import given, settings
from hypothesis import strategies as st

import flowrl
from flowrl import Concurrently, Plan

settings.register_profile("flowrl", max_examples=60, deadline=None)
settings.load_profile("flowrl")

shard_lists = st.lists(st.lists(st.integers(-50, 50), max_size=8), min_size=1, max_size=5)


def run(stream, seed=0, limit=100_000):
    with Plan(stream).compile(backend="local", seed=seed) as r:
        return r.take(limit)


def tagged(shards):
    return [[(s, i, v) for i, v in enumerate(items)] for s, items in enumerate(shards)]


def round_robin_model(lists, weights):
    its = [iter(x) for x in lists]
    active, out = list(range(len(lists))), []
    while active:
        for i in list(active):
            for _ in range(weights[i]):
                try:
                    out.append(next(its[i]))
                except StopIteration:
                    active.remove(i)
                    break
    return out


@given(shard_lists)
def test_gather_sync_equals_round_robin_over_shards(shards):
    assert run(flowrl.from_iterators(shards).gather_sync()) == round_robin_model(
        shards, [1] * len(shards))


@given(shard_lists)
def test_batch_across_shards_equals_rounds(shards):
    rounds, depth = [], max(len(s) for s in shards)
    for r in range(depth):
        row = [s[r] for s in shards if r < len(s)]
        if row:
            rounds.append(row)
    assert run(flowrl.from_iterators(shards).batch_across_shards()) == rounds


@given(shard_lists, st.integers(1, 4), st.integers(0, 2**16))
def test_gather_async_is_the_input_multiset_with_per_shard_order(shards, num_async, seed):
    data = tagged(shards)
    out = run(flowrl.from_iterators(data).gather_async(num_async=num_async), seed=seed)
    assert collections.Counter(out) == collections.Counter(x for s in data for x in s)
    for s, items in enumerate(data):
        assert [x for x in out if x[0] == s] == items


def test_gather_async_really_interleaves_shards():
    out = run(flowrl.from_iterators([[("a", i) for i in range(50)],
                                     [("b", i) for i in range(50)]]).gather_async())
    first_half = {k for k, _ in out[:50]}
    assert first_half == {"a", "b"}


@given(shard_lists, st.integers(1, 5))
def test_shard_batch_matches_model(shards, n):
    expected = [[s[i:i + n] for i in range(0, len(s), n)] for s in shards]
    assert run(flowrl.from_iterators(shards).batch(n).gather_sync()) == round_robin_model(
        expected, [1] * len(shards))


@given(shard_lists)
def test_shard_for_each_filter_flatten_combine_match_model(shards):
    stream = (flowrl.from_iterators(shards).for_each(lambda x: x * 3).filter(lambda x: x % 2 == 0)
              .combine(lambda x: [x, -x]).batch(3).flatten())
    expected = [[y for x in s for y in (3 * x, -3 * x) if (3 * x) % 2 == 0] for s in shards]
    assert run(stream.gather_sync()) == round_robin_model(expected, [1] * len(shards))


@given(st.lists(st.integers(), max_size=40), st.integers(1, 10), st.integers(0, 99))
def test_shuffle_is_a_seeded_permutation(items, buffer_size, seed):
    def plan():
        return flowrl.from_iterable(lambda: items).shuffle(buffer_size, seed=seed)
    out = run(plan())
    assert sorted(out) == sorted(items)
    assert out == run(plan())


@given(shard_lists, st.integers(1, 6), st.integers(0, 99))
def test_local_shuffle_permutes_within_each_shard(shards, buffer_size, seed):
    data = tagged(shards)
    out = run(flowrl.from_iterators(data).local_shuffle(buffer_size, seed=seed).gather_async())
    for s, items in enumerate(data):
        assert sorted(x for x in out if x[0] == s) == items


@given(st.lists(st.lists(st.integers(), max_size=6), min_size=2, max_size=4), st.data())
def test_concurrently_round_robin_weights_match_model(lists, data):
    weights = data.draw(st.lists(st.integers(1, 3), min_size=len(lists), max_size=len(lists)))
    streams = [flowrl.from_iterable(lambda x=x: x) for x in lists]
    assert run(Concurrently(streams, round_robin_weights=weights)) == round_robin_model(
        lists, weights)


@given(st.floats(0.1, 3.0), st.integers(0, 99))
def test_fractional_weights_round_stochastically(weight, seed):
    a = flowrl.from_iterable(lambda: ["a"] * 1000)
    b = flowrl.from_iterable(lambda: ["b"] * 100)
    out = run(Concurrently([a, b], round_robin_weights=[weight, 1], seed=seed))
    runs, current = [], 0  # items taken from input 0 in each turn
    for x in out:
        if x == "b":
            runs.append(current)
            current = 0
        else:
            current += 1
    assert len(runs) == 100
    assert set(runs) <= {math.floor(weight), math.ceil(weight)}
    assert abs(sum(runs) / len(runs) - weight) < 0.25


@given(st.lists(st.lists(st.integers(), max_size=6), min_size=2, max_size=4))
def test_concurrently_async_preserves_each_input(lists):
    streams = [flowrl.from_iterable(lambda i=i, x=x: [(i, v) for v in x])
               for i, x in enumerate(lists)]
    out = run(Concurrently(streams, mode="async"))
    for i, x in enumerate(lists):
        assert [v for j, v in out if j == i] == x
    assert len(out) == sum(map(len, lists))


@given(st.lists(st.integers(), max_size=30), st.integers(1, 4), st.integers(1, 4),
       st.sampled_from(["round_robin", "async"]))
def test_duplicate_lag_bound_and_completeness(items, max_lag, weight, mode):
    weight = min(weight, max_lag)
    x, y = flowrl.from_iterable(lambda: items).duplicate(2, max_lag=max_lag)
    copies = [x.for_each(lambda v: ("x", v)), y.for_each(lambda v: ("y", v))]
    weights = [weight, weight] if mode == "round_robin" else None
    out = run(Concurrently(copies, mode=mode, round_robin_weights=weights))
    assert [v for k, v in out if k == "x"] == items
    assert [v for k, v in out if k == "y"] == items
    lead = 0
    for k, _ in out:
        lead += 1 if k == "x" else -1
        assert abs(lead) <= max_lag


@given(st.lists(st.integers(), min_size=1, max_size=30), st.integers(1, 3))
def test_duplicate_leader_waits_for_a_lagging_copy_in_async_mode(items, max_lag):
    # the slow copy only yields every other turn; the leader must wait, not drop
    x, y = flowrl.from_iterable(lambda: items).duplicate(2, max_lag=max_lag)
    out = run(Concurrently([x.for_each(lambda v: ("x", v)), y.batch(2).for_each(
        lambda v: ("y", v))], mode="async"))
    assert [v for k, v in out if k == "x"] == items
    assert [w for k, v in out if k == "y" for w in v] == items


@given(shard_lists, st.data())
def test_aggregate_loses_and_duplicates_nothing(shards, data):
    k = data.draw(st.integers(1, len(shards)))
    n = data.draw(st.integers(1, 4))
    items = tagged(shards)
    out = run(flowrl.from_iterators(items).aggregate(k, lambda g: g.batch(n)).gather_async())
    flat = [x for b in out for x in b]
    assert collections.Counter(flat) == collections.Counter(x for s in items for x in s)
    for s, expected in enumerate(items):
        assert [x for x in flat if x[0] == s] == expected


@given(shard_lists, st.integers(1, 4))
def test_local_gather_async_is_a_rotation_over_the_shards(shards, num_async):
    """In-process hosts are always ready, so least recently served first is a
    rotation: the same order as gather_sync, whatever num_async."""
    data = tagged(shards)
    out = run(flowrl.from_iterators(data).gather_async(num_async=num_async))
    assert out == round_robin_model(data, [1] * len(data))


@given(st.lists(st.integers(), max_size=40), st.integers(1, 8), st.integers(0, 99))
def test_driver_and_shard_shuffles_agree_for_a_seed(items, buffer_size, seed):
    async def async_items():
        for x in items:
            yield x

    driver_async = run(flowrl.from_iterable(async_items).shuffle(buffer_size, seed=seed))
    driver_fused = run(flowrl.from_iterable(lambda: items).shuffle(buffer_size, seed=seed))
    shard = run(flowrl.from_iterators([items]).local_shuffle(buffer_size, seed=seed).gather_sync())
    assert driver_async == driver_fused == shard
