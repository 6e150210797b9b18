"""Several algorithms in one plan (PPO + DQN on one rollout stream) and MultiWorkerSet."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import flowrl
from flowrl.errors import ConfigError
from flowrl.ops import (ConcatBatches, ParallelRollouts, TrainOneStep, collect_metrics)
from flowrl.policies import PGPolicy
from flowrl.workers import MultiWorkerSet, WorkerConfig

HERE = os.path.dirname(__file__)


def _example(name):
    path = os.path.join(HERE, os.pardir, "examples", f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"example_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _changed(before, after):
    return any(not np.array_equal(before[k], after[k]) for k in before)


def test_ppo_and_dqn_policies_trained_by_their_own_sub_plans():
    ex = _example("multi_agent_two_trainers")
    workers = ex.make_workers(num_agents=4, num_workers=1, seed=0)
    local = workers.local_worker()
    before = local.get_weights()
    learner_seen = set()
    try:
        run = flowrl.Plan(ex.build(workers, train_batch_size=200, learning_starts=100)).compile(
            seed=0)
        for _ in range(3):
            r = next(run)
            learner_seen |= set(r["info"]["learner"])
        run.stop()
        after = local.get_weights()
        assert _changed(before["ppo"], after["ppo"]) and _changed(before["dqn"], after["dqn"])
        assert learner_seen <= {"ppo", "dqn"}  # each sub-plan reports only its policy
        assert set(r["policy_reward_mean"]) == {"ppo", "dqn"}
        assert r["info"]["num_target_updates"] >= 1
        remote = workers.remote_workers()[0].get_weights()
        assert all(np.array_equal(after[p][k], remote[p][k]) for p in after for k in after[p])
    finally:
        workers.stop()


@pytest.mark.slow
def test_pg_and_dqn_multi_agent_cartpole_learns():
    """The seeds' PG + DQN case: 3 agents mapped agent % 2 to a PG and a DQN policy
    reach ``episode_reward_mean >= 25 * n``."""
    ex = _example("multi_agent_two_trainers")
    n = 3
    workers = ex.make_workers(num_agents=n, onpolicy_class=PGPolicy, onpolicy_id="pg",
                              num_workers=0, seed=0)
    try:
        run = flowrl.Plan(ex.build(workers, onpolicy_id="pg", train_batch_size=200)).compile(
            seed=0)
        for _ in range(200):
            r = next(run)
            if r["episodes_total"] >= 50 and r["episode_reward_mean"] >= 25 * n:
                break
        else:
            raise AssertionError(f"failed to improve reward: {r['episode_reward_mean']}")
        run.stop()
    finally:
        workers.stop()


def test_multi_worker_set_drives_training_and_evaluation_workers_in_one_plan():
    config = WorkerConfig(rollout_fragment_length=50, seed=0,
                          policy_config={"hidden_sizes": (16,), "lr": 1e-2})
    mws = MultiWorkerSet(2, "CartPole-v1", PGPolicy, config, num_workers_per_set=1,
                         backend="local")
    train_set, eval_set = mws[0], mws[1]

    def sync_to_eval(item):
        mws.sync_weights(source=0)
        return item

    train_op = (ParallelRollouts(train_set)
                .combine(ConcatBatches(min_batch_size=100))
                .for_each(TrainOneStep(train_set), name="train")
                .for_each(sync_to_eval, name="sync_to_eval"))
    eval_op = ParallelRollouts(eval_set, name="eval_rollouts")
    plan = flowrl.Plan(flowrl.Concurrently([train_op, eval_op], mode="round_robin",
                                           output_indexes=[0]))
    try:
        with plan.compile(seed=0) as run:
            run.take(3)
            trained = train_set.local_worker().get_weights()
            for w in [eval_set.local_worker(), *eval_set.remote_workers()]:
                got = w.get_weights()
                assert all(np.array_equal(trained[p][k], got[p][k])
                           for p in trained for k in trained[p])
            evaluation = collect_metrics(eval_set.local_worker(), eval_set.remote_workers())
            assert evaluation["episodes_this_iter"] > 0
            assert run.metrics.counters["num_steps_trained"] >= 300
    finally:
        mws.stop()
    with pytest.raises(ConfigError, match="num_sets=0"):
        MultiWorkerSet(0, "CartPole-v1", PGPolicy)
