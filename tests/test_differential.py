"""Differential test: random plans give the same output on the local and Ray backends.

Plans are chains of shard-local operators, a gather, driver-side operators, and
optionally a ``Concurrently`` of two such pipelines. Without async operators the
outputs must be identical; with them, equal multisets with every shard's order
preserved (items carry their shard's tag, and only order-preserving operators
follow an async gather). Shards are hosted by a pool of user actors (reloaded per
example), so each example costs a few actor calls, not actor start-ups.
"""

from __future__ import annotations

import collections

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import flowrl
from flowrl import Plan

pytestmark = pytest.mark.ray

POOL = 4


class DataHost(flowrl.ShardHost):
    """Serves whatever list was loaded last, as ``(tag, value)`` items."""

    def __init__(self):
        self.items = []

    def load(self, items):
        self.items = list(items)

    def shard_items(self):
        return iter(list(self.items))


@pytest.fixture(scope="module")
def pool(ray_session):
    remote = ray_session.remote(num_cpus=0)(DataHost)
    hosts = [remote.remote() for _ in range(POOL)]
    ray_session.get([h.flowrl_ping.remote() for h in hosts])
    yield hosts
    for h in hosts:
        ray_session.kill(h)


# ------------------------------------------------------------------ operators on (tag, v)

def apply_op(stream, op):
    kind, p = op
    if kind == "map":
        return stream.for_each(lambda x, p=p: (x[0], x[1] * 3 + p))
    if kind == "filter":
        return stream.filter(lambda x, p=p: x[1] % p != 0)
    if kind == "dup":
        return stream.combine(lambda x: [x, x])
    # "batchsum": group n items, keep the first tag (only where order is defined)
    return stream.batch(p).for_each(lambda b: (b[0][0], sum(v for _, v in b)))


ORDERED_OPS = st.one_of(st.tuples(st.just("map"), st.integers(-3, 3)),
                        st.tuples(st.just("filter"), st.integers(2, 4)),
                        st.tuples(st.just("dup"), st.none()))
ALL_OPS = st.one_of(ORDERED_OPS, st.tuples(st.just("batchsum"), st.integers(1, 3)))
GATHERS = st.one_of(st.tuples(st.just("sync"), st.none()),
                    st.tuples(st.just("across"), st.none()),
                    st.tuples(st.just("async"), st.integers(1, 3)))


@st.composite
def pipelines(draw, num_hosts):
    shards = draw(st.lists(st.lists(st.integers(0, 50), max_size=6), min_size=1,
                           max_size=num_hosts))
    gather = draw(GATHERS)
    return {"shards": shards, "shard_ops": draw(st.lists(ALL_OPS, max_size=3)),
            "gather": gather,
            "local_ops": draw(st.lists(ORDERED_OPS if gather[0] == "async" else ALL_OPS,
                                       max_size=3))}


@st.composite
def plans(draw):
    first = draw(pipelines(POOL))
    second = None
    if len(first["shards"]) < POOL and draw(st.booleans()):
        second = draw(pipelines(POOL - len(first["shards"])))
    mode = draw(st.sampled_from(["round_robin", "async"]))
    return first, second, mode


def build(spec, hosts):
    s = flowrl.from_actors(hosts)
    for op in spec["shard_ops"]:
        s = apply_op(s, op)
    kind, num_async = spec["gather"]
    if kind == "sync":
        out = s.gather_sync()
    elif kind == "across":
        out = s.batch_across_shards().flatten()
    else:
        out = s.gather_async(num_async=num_async)
    for op in spec["local_ops"]:
        out = apply_op(out, op)
    return out


def run_plan(plan_spec, hosts):
    first, second, mode = plan_spec
    n1 = len(first["shards"])
    out = build(first, hosts[:n1])
    if second is not None:
        other = build(second, hosts[n1:n1 + len(second["shards"])])
        out = flowrl.Concurrently([out, other], mode=mode)
    with Plan(out).compile(backend="local" if isinstance(hosts[0], DataHost) else "ray") as run:
        return run.take(10_000)


def load(plan_spec, hosts, ray=None):
    first, second, _ = plan_spec
    data = [[(i, v) for v in shard] for i, shard in enumerate(first["shards"])]
    if second is not None:
        data += [[(10 + i, v) for v in shard] for i, shard in enumerate(second["shards"])]
    if ray is None:
        for h, items in zip(hosts, data):
            h.load(items)
    else:
        ray.get([h.load.remote(items) for h, items in zip(hosts, data)])


def is_async(plan_spec):
    first, second, mode = plan_spec
    specs = [first] + ([second] if second else [])
    return any(s["gather"][0] == "async" for s in specs) or (second is not None
                                                              and mode == "async")


def per_tag(items):
    out = collections.defaultdict(list)
    for tag, v in items:
        out[tag].append(v)
    return dict(out)


@settings(max_examples=20, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(plans())
def test_local_and_ray_agree(ray_session, pool, plan_spec):
    local_hosts = [DataHost() for _ in range(POOL)]
    load(plan_spec, local_hosts)
    load(plan_spec, pool, ray_session)
    expected = run_plan(plan_spec, local_hosts)
    actual = run_plan(plan_spec, pool)
    if not is_async(plan_spec):
        assert actual == expected
    else:
        assert sorted(actual) == sorted(expected)
        # only order-preserving operators follow an async gather, and Concurrently
        # keeps each input's order, so every shard's (tag's) sequence is the same
        assert per_tag(actual) == per_tag(expected)


# ------------------------------------------------------------------ stateful callables

class Numbering:
    """A stateful operator: numbers the items it has seen (per copy)."""

    def __init__(self):
        self.seen = 0

    def __call__(self, x):
        self.seen += 1
        return x[0], x[1], self.seen


def test_each_shard_has_its_own_copy_of_a_stateful_callable(ray_session, pool):
    data = [[(i, 10 * i + k) for k in range(3)] for i in range(3)]
    local_hosts = [DataHost() for _ in range(3)]
    for h, items in zip(local_hosts, data):
        h.load(items)
    ray_session.get([h.load.remote(items) for h, items in zip(pool, data)])
    numbering = Numbering()

    def plan(hosts):
        return flowrl.from_actors(hosts).for_each(numbering).gather_sync()

    with Plan(plan(local_hosts)).compile(backend="local") as run:
        expected = run.take(100)
    with Plan(plan(pool[:3])).compile(backend="ray") as run:
        actual = run.take(100)
    assert actual == expected
    assert [n for *_, n in expected] == [1, 1, 1, 2, 2, 2, 3, 3, 3]  # one count per shard
    assert numbering.seen == 0  # the plan's own object was never run


def test_concat_batches_in_an_aggregation_pipeline(ray_session, pool):
    """ConcatBatches keeps one buffer per aggregator on both backends: no batch mixes groups."""
    from flowrl.batch import SampleBatch
    from flowrl.ops import ConcatBatches

    data = [[SampleBatch(shard=[i] * 3, row=[100 * i + 3 * k + j for j in range(3)])
             for k in range(4)] for i in range(POOL)]
    local_hosts = [DataHost() for _ in range(POOL)]
    for h, items in zip(local_hosts, data):
        h.load(items)
    ray_session.get([h.load.remote(items) for h, items in zip(pool, data)])

    def plan(hosts):
        return (flowrl.from_actors(hosts)
                .aggregate(2, lambda g: g.combine(ConcatBatches(min_batch_size=7)))
                .gather_async())

    def summary(batches):
        groups = [sorted({int(s) % 2 for s in b["shard"]}) for b in batches]
        rows = collections.Counter(int(r) for b in batches for r in b["row"])
        return sorted(len(b) for b in batches), groups, rows

    with Plan(plan(local_hosts)).compile(backend="local") as run:
        local_sizes, local_groups, local_rows = summary(run.take(100))
    with Plan(plan(pool)).compile(backend="ray") as run:
        ray_sizes, ray_groups, ray_rows = summary(run.take(100))
    # 24 rows per group in 3-row batches: two 9-row batches each, 6 rows left buffered
    assert local_sizes == ray_sizes == [9, 9, 9, 9]
    assert all(len(g) == 1 for g in local_groups + ray_groups)  # never two groups in one batch
    assert sum(local_rows.values()) == sum(ray_rows.values()) == 36
    assert max(local_rows.values()) == max(ray_rows.values()) == 1  # no row duplicated
