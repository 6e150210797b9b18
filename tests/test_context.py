"""Shard-side context: ``flowrl.current_host()`` and ``flowrl.workers.get_global_worker()``.

Seed-style shard functions ask for the worker they run on instead of capturing
one; they must run unchanged on both backends, and aggregator-side code must see
the aggregator as its host.
"""

from __future__ import annotations

import pytest

import flowrl
from flowrl import FlowError, OperatorError, Plan, current_host
from flowrl.ops import rollout_shards
from flowrl.workers import get_global_worker


@pytest.fixture(params=["local", pytest.param("ray", marks=pytest.mark.ray)])
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_session")
    return request.param


class MockWorker(flowrl.ShardHost):
    """A duck-typed rollout worker: samples batches tagged with its index, learns on them."""

    def __init__(self, worker_index):
        self.worker_index = worker_index
        self.learned = 0

    def sample(self):
        return [self.worker_index] * 3

    def shard_items(self):
        while True:
            yield self.sample()

    def learn_on_batch(self, batch):
        self.learned += len(batch)  # state of *this* worker only
        return {"worker": self.worker_index, "learned": self.learned,
                "batch_from": batch[0]}


class Workers:
    """The part of a WorkerSet that rollout_shards needs."""

    def __init__(self, remotes):
        self._remotes = remotes

    def remote_workers(self):
        return self._remotes

    def restarter(self):
        return None  # a lost worker is a WorkerError


@pytest.fixture(scope="module")
def ray_workers(request):
    """Two MockWorker actors shared by this module's Ray tests (actor start-up is slow)."""
    ray = request.getfixturevalue("ray_session")
    cls = ray.remote(num_cpus=0)(MockWorker)
    actors = [cls.remote(i + 1) for i in range(2)]
    yield actors
    for a in actors:
        ray.kill(a)


@pytest.fixture
def workers(backend, request):
    if backend == "ray":
        return request.getfixturevalue("ray_workers")
    return [MockWorker(i + 1) for i in range(2)]


def train_on_batch(batch):  # a seed-style shard function, unchanged across backends
    return get_global_worker().learn_on_batch(batch)


def test_seed_style_shard_function_runs_unchanged(backend, workers):
    stream = rollout_shards(Workers(workers)).for_each(train_on_batch)
    with Plan(stream.gather_sync()).compile(backend=backend) as run:
        infos = run.take(6)
    assert [(i["worker"], i["batch_from"]) for i in infos] == [(1, 1), (2, 2)] * 3
    # each worker's own state: 3 more rows learned per batch, on that worker only
    learned = [i["learned"] for i in infos]
    assert [b - a for a, b in zip(learned, learned[2:])] == [3, 3, 3, 3]


def test_seed_style_function_on_real_rollout_workers_locally():
    from flowrl.policies import PGPolicy
    from flowrl.workers import WorkerConfig, WorkerSet

    ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=20, seed=0),
                   num_workers=2, backend="local")
    try:
        stream = rollout_shards(ws).for_each(
            lambda batch: (get_global_worker().worker_index, get_global_worker().learn_on_batch(batch)))
        with Plan(stream.gather_sync()).compile() as run:
            out = run.take(2)
        assert [index for index, _ in out] == [1, 2]
        assert all("default_policy" in info for _, info in out)
    finally:
        ws.stop()


def test_aggregator_side_code_sees_the_aggregator(backend, workers):
    def tag_shard(x):
        return current_host().worker_index, x

    def in_aggregator(item):
        host = type(current_host()).__name__
        try:
            get_global_worker()
            worker = "no error"
        except FlowError as e:
            worker = str(e).split(",")[0]
        return host, flowrl.get_metrics() is not None, worker, item

    stream = (flowrl.from_actors(workers).for_each(tag_shard)
              .aggregate(1, lambda g: g.for_each(in_aggregator)))
    with Plan(stream.gather_async()).compile(backend=backend) as run:
        out = run.take(4)
    assert {(h, m, w) for h, m, w, _ in out} == {
        ("AggregatorHost", True, "get_global_worker() was called on AggregatorHost")}
    assert {index for *_, (index, _) in out} <= {1, 2}


def test_driver_side_context():
    local = MockWorker(0)
    seen = []

    def on_driver(batch):
        seen.append(get_global_worker() is local)
        return batch

    stream = flowrl.from_actors([MockWorker(1)]).gather_sync().for_each(on_driver)
    with Plan(stream).compile(local_worker=local) as run:
        run.take(2)
    assert seen == [True, True]
    no_host = Plan(flowrl.from_iterable(lambda: [1]).for_each(lambda x: current_host(),
                                                               name="asks"))
    with no_host.compile() as run, pytest.raises(
            OperatorError, match=r"'asks'.*current_host\(\) was called outside shard-side code"):
        next(run)
    no_worker = Plan(flowrl.from_iterable(lambda: [1]).for_each(lambda x: get_global_worker()))
    with no_worker.compile() as run, pytest.raises(
            OperatorError, match=r"compiled without a local worker; compile with plan.compile"):
        next(run)


def test_outside_any_run_both_raise():
    with pytest.raises(FlowError, match="outside shard-side code"):
        current_host()
    with pytest.raises(FlowError, match="outside a running plan"):
        get_global_worker()


def test_an_algorithm_tells_its_run_the_local_worker():
    from flowrl.algorithms.pg import PG, PGConfig

    algo = PG(PGConfig(env="CartPole-v1", rollout_fragment_length=20, train_batch_size=20,
                       seed=0))
    try:
        assert algo._run.ctx.local_worker is algo.workers.local_worker()
    finally:
        algo.stop()
