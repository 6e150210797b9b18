"""Fault tolerance of rollout workers and algorithms: real Ray actors killed
(``ray.kill``) or stuck mid-run. PPO (bulk-sync and async sampling) keeps training
while a rollout worker is killed; a WorkerSet replaces a lost worker (from its warm
spare the second time) or names it; failure settings are validated. Plan hosts in
general: ``test_fault_tolerance.py``.
"""

from __future__ import annotations

import time

import pytest
import ray
from ray_helpers import kill

from flowrl import ConfigError, Plan, WorkerError
from flowrl.algorithms.ppo import PPO, PPOConfig
from flowrl.ops import ParallelRollouts
from flowrl.policies import PGPolicy
from flowrl.workers import WorkerConfig, WorkerSet

pytestmark = pytest.mark.ray

PPO_SMALL = dict(env="CartPole-v1", num_workers=2, num_envs_per_worker=1,
                 rollout_fragment_length=32, train_batch_size=64, sgd_minibatch_size=32,
                 num_sgd_iter=1, num_cpus_per_worker=0, backend="ray", seed=0)


def test_ppo_keeps_training_when_a_worker_is_killed(ray_session):
    algo = PPO(PPOConfig(**PPO_SMALL))
    try:
        first = algo.train()
        old = algo.workers.remote_workers()[1]
        ray.kill(old, no_restart=True)
        results = [algo.train() for _ in range(3)]
        new = algo.workers.remote_workers()[1]
        assert new is not old
        assert ray.get(new.apply.remote(lambda w: w.worker_index)) == 2
        # the replacement got the learner's current weights
        local = algo.workers.local_worker().get_weights()
        algo.workers.sync_weights(wait=True)
        remote = ray.get(new.apply.remote(lambda w: w.get_weights()))
        for pid in local:
            for k in local[pid]:
                assert (local[pid][k] == remote[pid][k]).all()
    finally:
        algo.stop()
    last = results[-1]
    assert last["num_worker_restarts"] == 1 and last["num_healthy_workers"] == 2
    assert last["num_lost_requests"] >= 0
    assert last["timesteps_total"] > first["timesteps_total"]


def test_ppo_ignore_worker_failures_drops_the_worker(ray_session):
    algo = PPO(PPOConfig(**PPO_SMALL, ignore_worker_failures=True))
    try:
        algo.train()
        ray.kill(algo.workers.remote_workers()[0], no_restart=True)
        results = [algo.train() for _ in range(2)]
    finally:
        algo.stop()
    assert results[-1]["num_healthy_workers"] == 1
    assert results[-1]["num_worker_restarts"] == 0
    assert results[-1]["timesteps_this_iter"] > 0


def test_async_rollouts_replace_a_killed_worker(ray_session):
    ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=16, seed=0,
                                                        num_cpus_per_worker=0),
                   num_workers=2, backend="ray")
    try:
        with Plan(ParallelRollouts(ws, mode="async", num_async=2)).compile() as run:
            run.take(4)
            ray.kill(ws.remote_workers()[0], no_restart=True)
            assert all(b.count == 16 for b in run.take(20))
            counters = dict(run.metrics.counters)
        assert counters["num_worker_restarts"] == 1 and ws.num_restarts == 1
        # counters count only what arrived
        assert counters["num_steps_sampled"] == 24 * 16
    finally:
        ws.stop()


def _spare_of(ws):
    """The set's spare, once its start was submitted (a thread does it when the last
    replacement is up; the deadline only catches a hang)."""
    deadline = time.monotonic() + 120
    while ws.spares.spare is None and time.monotonic() < deadline:
        time.sleep(0.05)
    assert ws.spares.spare is not None
    return ws.spares.spare


def test_a_second_replacement_is_the_warm_spare_rebuilt_as_the_lost_worker(ray_session):
    ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=8, seed=3,
                                                        num_cpus_per_worker=0),
                   num_workers=2, backend="ray")
    try:
        assert ws.spares.spare is None                  # nothing lost yet: no spare
        kill(ws.remote_workers()[1])
        assert ws.foreach_worker(lambda w: w.worker_index) == [0, 1]   # worker 2 replaced
        # metrics do not wait for a replacement still starting (a new process: seconds)
        assert ws.foreach_worker(lambda w: w.worker_index, skip_starting=True)[:2] == [0, 1]
        spare = _spare_of(ws)                                # started once 2 is up
        assert spare is not None and ray.get(spare.flowrl_ping.remote(), timeout=120)
        w0 = {k: v * 0 + 0.25 for k, v in ws.local_worker().get_weights()["default_policy"].items()}
        ws.local_worker().set_weights({"default_policy": w0})   # not what a new worker has
        kill(ws.remote_workers()[0])
        assert ws.foreach_worker(lambda w: w.worker_index) == [0, 2]   # worker 1 replaced
        assert ws.foreach_worker(lambda w: (w.worker_index, w.seed)) == [(0, 3), (1, 1003),
                                                                        (2, 2003)]
        assert ws.remote_workers()[0] is spare and ws.num_restarts == 2
        got = ray.get(spare.get_weights.remote())["default_policy"]
        assert all((got[k] == w0[k]).all() for k in w0)
        assert ray.get(spare.sample.remote()).count == 8
        assert _spare_of(ws) is not spare                    # the next one
    finally:
        ws.stop()


def test_foreach_worker_and_sync_weights_are_bounded(ray_session):
    ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=8,
                                                        num_cpus_per_worker=0,
                                                        sample_timeout_s=1.0,
                                                        recreate_failed_workers=False),
                   num_workers=2, backend="ray")
    try:
        ws.remote_workers()[1].apply.remote(lambda w: time.sleep(3600))
        with pytest.raises(WorkerError, match=r"foreach_worker: remote worker 2 .* not "
                                              r"answered within 1 s \(sample_timeout_s\)"):
            ws.foreach_worker(lambda w: w.worker_index)
        with pytest.raises(WorkerError, match=r"sync_weights: remote worker 2 .* not "
                                              r"answered within 1 s"):
            ws.sync_weights(wait=True)
    finally:
        ws.stop()


def test_stuck_worker_is_replaced_by_foreach_worker(ray_session):
    ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=8,
                                                        num_cpus_per_worker=0,
                                                        sample_timeout_s=1.0),
                   num_workers=2, backend="ray")
    try:
        stuck = ws.remote_workers()[0]
        stuck.apply.remote(lambda w: time.sleep(3600))
        assert ws.foreach_worker(lambda w: w.worker_index) == [0, 2]   # one answered
        assert ws.foreach_worker(lambda w: w.worker_index) == [0, 1, 2]  # replaced
        assert ws.num_restarts == 1 and ws.remote_workers()[0] is not stuck
    finally:
        ws.stop()


def test_a_failed_weight_sync_surfaces_on_ray(ray_session):
    ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=8,
                                                        num_cpus_per_worker=0),
                   num_workers=1, backend="ray")
    try:
        # weights for a policy the remote worker does not have: set_weights raises there
        ws.local_worker().get_weights = lambda policies=None: {"no_such_policy": {}}
        with pytest.raises(WorkerError, match=r"sync_weights: remote worker 1 raised "
                                              r"ConfigError: .*no_such_policy"):
            ws.sync_weights(wait=True)
    finally:
        ws.stop()


@pytest.mark.parametrize("field,value,match", [
    ("recreate_failed_workers", 1, r"PPOConfig\.recreate_failed_workers=1: must be True or False"),
    ("ignore_worker_failures", None, r"ignore_worker_failures=None: must be True or False"),
    ("max_worker_restarts", -1, r"max_worker_restarts=-1: must be an int >= 0 or None"),
    ("sample_timeout_s", 0, r"sample_timeout_s=0: must be a number > 0 .*or None"),
])
def test_failure_fields_are_validated(field, value, match):
    with pytest.raises(ConfigError, match=match):
        PPOConfig(env="CartPole-v1", **{field: value})
