"""A rollout worker killed (``ray.kill``) inside IMPALA's tree aggregation.

The aggregator asks the driver (which owns the WorkerSet) for the replacement:
same ``worker_index``, the learner's weights, training goes on and the restart and
the abandoned requests are counted; ``ignore_worker_failures`` drops the worker;
with both settings off the loss is a WorkerError naming the worker.
"""

from __future__ import annotations

import time

import pytest
import ray

from flowrl import FlowError, WorkerError
from flowrl.algorithms.impala import IMPALA, IMPALAConfig
from ray_helpers import kill

pytestmark = pytest.mark.ray

SMALL = dict(env="CartPole-v1", num_workers=2, num_aggregation_workers=1,
             rollout_fragment_length=25, train_batch_size=50, num_cpus_per_worker=0,
             backend="ray", seed=0)


def _train_until(algo, pred, what, limit_s=120):
    """Train until ``pred(result)``; the limit only catches a hang."""
    deadline = time.monotonic() + limit_s
    while True:
        result = algo.train()
        if pred(result):
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"no {what} after {limit_s} s; last result: "
                                 f"{ {k: v for k, v in result.items() if k.startswith('num_')} }")


def test_impala_replaces_a_worker_killed_inside_the_aggregator(ray_session):
    algo = IMPALA(IMPALAConfig(**SMALL))
    try:
        first = algo.train()
        old = algo.workers.remote_workers()[0]
        kill(old)
        result = _train_until(algo, lambda r: r["num_worker_restarts"] >= 1, "restart")
        sampled = result["info"]["num_steps_sampled"]
        # training goes on with the replacement sampling
        later = _train_until(algo, lambda r: r["info"]["num_steps_sampled"] > sampled + 100,
                             "progress after the restart")
        new = algo.workers.remote_workers()[0]
        assert new is not old and algo.workers.num_restarts == 1
        assert ray.get(new.apply.remote(lambda w: w.worker_index), timeout=60) == 1
        # the replacement holds the learner's weights once a broadcast reaches it
        algo.workers.sync_weights(wait=True)
        local = algo.workers.local_worker().get_weights()
        remote = ray.get(new.apply.remote(lambda w: w.get_weights()), timeout=60)
        assert all((local[p][k] == remote[p][k]).all() for p in local for k in local[p])
    finally:
        algo.stop()
    assert later["num_worker_restarts"] == 1 and later["num_healthy_workers"] == 2
    assert later["num_lost_requests"] >= 1          # the killed worker's sample request
    assert later["info"]["num_steps_trained"] > first["info"]["num_steps_trained"]


@pytest.mark.slow
def test_impala_ignore_worker_failures_drops_a_worker_inside_the_aggregator(ray_session):
    algo = IMPALA(IMPALAConfig(**SMALL, ignore_worker_failures=True))
    try:
        algo.train()
        kill(algo.workers.remote_workers()[1])
        result = _train_until(algo, lambda r: r["num_healthy_workers"] == 1, "drop")
        sampled = result["info"]["num_steps_sampled"]
        later = _train_until(algo, lambda r: r["info"]["num_steps_sampled"] > sampled + 100,
                             "progress after the drop")
    finally:
        algo.stop()
    assert later["num_worker_restarts"] == 0 and algo.workers.num_dropped == 1


def test_impala_without_recovery_a_worker_killed_inside_the_aggregator_is_named(ray_session):
    algo = IMPALA(IMPALAConfig(**SMALL, recreate_failed_workers=False))
    try:
        algo.train()
        kill(algo.workers.remote_workers()[1])
        # Found first either by the aggregator (the shard) or by metrics collection on
        # the driver (foreach_worker): both name the worker and say how to recover.
        with pytest.raises(FlowError, match=r"(impala/rollouts\[1\]|remote worker 2).*"
                                            r"recreate_failed_workers") as info:
            _train_until(algo, lambda r: False, "error")
        assert isinstance(info.value, WorkerError) or isinstance(info.value.__cause__, WorkerError)
    finally:
        algo.stop()


@pytest.mark.slow
def test_rollouts_without_recovery_a_worker_killed_inside_an_aggregator_is_named(ray_session):
    """The IMPALA case above without a learner, so only the aggregator can find the
    loss: its WorkerError (not wrapped in an OperatorError) names the shard and the
    settings."""
    from flowrl import Plan
    from flowrl.ops import rollout_shards
    from flowrl.policies import PGPolicy
    from flowrl.workers import WorkerConfig, WorkerSet

    ws = WorkerSet("CartPole-v1", PGPolicy,
                   WorkerConfig(rollout_fragment_length=8, num_cpus_per_worker=0, seed=0,
                                recreate_failed_workers=False),
                   num_workers=2, backend="ray")
    stream = (rollout_shards(ws, name="rollouts")
              .aggregate(1, lambda g: g.for_each(lambda b: b.count), name="agg")
              .gather_sync())
    try:
        with Plan(stream).compile(backend="ray", remote_timeout_s=60) as run:
            assert run.take(4) == [8] * 4
            kill(ws.remote_workers()[1])
            with pytest.raises(WorkerError, match=r"rollouts\[1\].*recreate_failed_workers"):
                run.take(1000)
    finally:
        ws.stop()
