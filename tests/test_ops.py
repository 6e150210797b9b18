"""RL operators: rollouts, batching, standardization, training, reporting."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import flowrl
from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError
from flowrl.metrics import (AGENT_STEPS_SAMPLED_COUNTER, LEARN_ON_BATCH_TIMER, LEARNER_INFO,
                            SAMPLE_TIMER, STEPS_SAMPLED_COUNTER, STEPS_TRAINED_COUNTER,
                            WORKER_UPDATE_TIMER)
from flowrl.ops import (CollectMetrics, ConcatBatches, MultiGPUTrainOneStep,
                        OncePerTimeInterval, OncePerTimestepsElapsed, ParallelRollouts,
                        SelectExperiences, StandardizeFields, StandardMetricsReporting,
                        TrainOneStep, UpdateKL, rollout_shards, synchronous_parallel_sample)
from flowrl.policies import PGPolicy, PPOPolicy
from flowrl.workers import WorkerConfig, WorkerSet

PPO_ONE_STEP = {"num_sgd_iter": 1, "sgd_minibatch_size": None, "hidden_sizes": (16,)}


def make_workers(num_workers=2, fragment=100, policy=PGPolicy, backend="local", seed=0,
                 policy_config=None):
    config = WorkerConfig(rollout_fragment_length=fragment, seed=seed,
                          policy_config=policy_config or {"hidden_sizes": (16,)})
    return WorkerSet("CartPole-v1", policy, config, num_workers=num_workers, backend=backend)


def run_of(stream):
    return flowrl.Plan(stream).compile()


# -- rollouts ---------------------------------------------------------------------

@pytest.mark.parametrize("mode, num_workers, per_item", [
    ("bulk_sync", 2, 200), ("async", 2, 100), ("bulk_sync", 0, 100), ("async", 0, 100)])
def test_parallel_rollouts_steps_per_item_and_counters(mode, num_workers, per_item):
    ws = make_workers(num_workers)
    with run_of(ParallelRollouts(ws, mode=mode)) as run:
        batches = run.take(3)
        assert [b.count for b in batches] == [per_item] * 3
        assert run.metrics.counters[STEPS_SAMPLED_COUNTER] == 3 * per_item
        assert run.metrics.counters[AGENT_STEPS_SAMPLED_COUNTER] == 3 * per_item
        timer = run.metrics.timers[SAMPLE_TIMER]
        assert timer.count >= 2 and timer.mean_units_processed == per_item
    ws.stop()


def test_bulk_sync_round_holds_one_fragment_per_worker():
    ws = make_workers(2, fragment=10)
    with run_of(ParallelRollouts(ws, mode="bulk_sync")) as run:
        batch = next(run)
    worker_of_row = np.asarray(batch["eps_id"]) >> 32
    assert worker_of_row.tolist() == [1] * 10 + [2] * 10
    ws.stop()


def test_parallel_rollouts_bad_modes():
    ws = make_workers(1, fragment=5)
    with pytest.raises(ConfigError, match="rollout_shards"):
        ParallelRollouts(ws, mode="raw")
    with pytest.raises(ConfigError, match="unknown mode"):
        ParallelRollouts(ws, mode="bulk")
    with pytest.raises(ConfigError, match="num_async"):
        ParallelRollouts(ws, mode="async", num_async=0)
    ws.stop()


def test_rollout_shards_one_per_remote_worker_and_none_without():
    ws = make_workers(3, fragment=5)
    shards = rollout_shards(ws)
    assert shards.num_shards == 3
    with run_of(shards.for_each(lambda b: b.count).gather_sync()) as run:
        assert run.take(3) == [5, 5, 5]
    ws.stop()
    ws0 = make_workers(0, fragment=5)
    with pytest.raises(ConfigError, match="no remote workers"):
        rollout_shards(ws0)
    ws0.stop()


def test_synchronous_parallel_sample():
    ws = make_workers(2, fragment=7)
    batches = synchronous_parallel_sample(ws)
    assert [b.count for b in batches] == [7, 7]
    assert synchronous_parallel_sample(ws, remote_fn=lambda w: w.worker_index) == [1, 2]
    ws.stop()
    ws0 = make_workers(0, fragment=7)
    assert [b.count for b in synchronous_parallel_sample(ws0)] == [7]
    ws0.stop()


# -- batch transforms ---------------------------------------------------------------

def test_concat_batches_of_100_step_fragments_to_1000_is_exact():
    ws = make_workers(2, fragment=100)
    stream = ParallelRollouts(ws, mode="async").combine(ConcatBatches(min_batch_size=1000))
    with run_of(stream) as run:
        assert [b.count for b in run.take(2)] == [1000, 1000]
        assert run.metrics.counters[STEPS_SAMPLED_COUNTER] == 2000
    ws.stop()


@settings(max_examples=60, deadline=None)
@given(sizes=st.lists(st.integers(1, 50), min_size=1, max_size=30), min_size=st.integers(1, 120))
def test_concat_batches_loses_and_duplicates_no_row(sizes, min_size):
    concat = ConcatBatches(min_batch_size=min_size)
    rows, next_id, out = [], 0, []
    for n in sizes:
        ids = list(range(next_id, next_id + n))
        next_id += n
        rows += ids
        out += concat(SampleBatch(id=ids))
    emitted = [i for b in out for i in b["id"].tolist()]
    assert emitted == rows[:len(emitted)]            # in order, nothing lost or repeated
    assert all(b.count >= min_size for b in out)
    assert len(rows) - len(emitted) < min_size       # the buffer holds less than one batch
    assert all(b.count - min_size < max(sizes) for b in out)


def test_concat_batches_counts_agent_steps_and_rejects_bad_args():
    mb = MultiAgentBatch({"a": SampleBatch(t=[0, 1]), "b": SampleBatch(t=[0, 1])}, 2)
    assert ConcatBatches(4, count_steps_by="agent_steps")(mb)[0].agent_steps() == 4
    assert ConcatBatches(4)(mb) == []
    with pytest.raises(ConfigError, match="count_steps_by"):
        ConcatBatches(4, count_steps_by="rows")
    with pytest.raises(ConfigError, match="min_batch_size"):
        ConcatBatches(0)


finite = st.floats(-1e3, 1e3, allow_nan=False, width=32)


@settings(max_examples=80, deadline=None)
@given(values=st.lists(finite, min_size=2, max_size=200))
def test_standardize_gives_mean_0_std_1(values):
    x = np.asarray(values, np.float32)
    batch = SampleBatch(advantages=x.copy(), other=x.copy())
    out = StandardizeFields(["advantages"])(batch)
    assert out is not batch and np.array_equal(batch["advantages"], x)   # input untouched
    assert np.array_equal(out["other"], x)
    y = out["advantages"].astype(np.float64)
    std = float(np.asarray(values, np.float64).std())
    assert abs(y.mean()) < 1e-3
    if std > 1e-2:
        assert abs(y.std() - 1.0) < 1e-3
    else:
        assert y.std() <= 1.0 + 1e-3


def test_standardize_identity_for_one_row_and_per_policy():
    one = SampleBatch(advantages=[5.0])
    assert StandardizeFields(["advantages"])(one)["advantages"].tolist() == [5.0]
    mb = MultiAgentBatch({"p": SampleBatch(advantages=[1.0, 3.0]),
                          "q": SampleBatch(advantages=[10.0, 30.0, 50.0])}, 3)
    out = StandardizeFields(["advantages"])(mb)
    assert np.allclose(out.policy_batches["p"]["advantages"], [-1, 1])
    assert np.allclose(out.policy_batches["q"]["advantages"].mean(), 0, atol=1e-6)
    with pytest.raises(ConfigError, match="missing|no column"):
        StandardizeFields(["nope"])(SampleBatch(advantages=[1.0, 2.0]))


def test_select_experiences():
    mb = MultiAgentBatch({"a": SampleBatch(t=[0]), "b": SampleBatch(t=[0, 1])}, 2)
    out = SelectExperiences(["a"])(mb)
    assert sorted(out.policy_batches) == ["a"] and out.env_steps() == 2
    sb = SampleBatch(t=[0, 1])
    assert SelectExperiences(["default_policy"])(sb) is sb


# -- training -----------------------------------------------------------------------

def test_train_one_step_returns_batch_and_info_and_trains_what_was_sampled():
    ws = make_workers(2, fragment=50, policy=PPOPolicy, policy_config=PPO_ONE_STEP)
    before = ws.local_worker().get_weights()
    op = TrainOneStep(ws, num_sgd_iter=2, sgd_minibatch_size=32, seed=0)
    with run_of(ParallelRollouts(ws).for_each(op)) as run:
        for _ in range(2):
            batch, info = next(run)
            assert isinstance(batch, SampleBatch) and batch.count == 100
            assert set(info) == {"default_policy"} and "kl" in info["default_policy"]
        m = run.metrics
        assert m.counters[STEPS_TRAINED_COUNTER] == m.counters[STEPS_SAMPLED_COUNTER] == 200
        assert m.timers[LEARN_ON_BATCH_TIMER].count == 2
        assert m.timers[WORKER_UPDATE_TIMER].count == 2
        # results report the stats flat; the op hands them on also under learner_stats
        assert m.info[LEARNER_INFO]["default_policy"] is info["default_policy"]["learner_stats"]
        assert "learner_stats" not in m.info[LEARNER_INFO]["default_policy"]
    after = ws.local_worker().get_weights()
    assert not np.array_equal(before["default_policy"]["pi.0.weight"],
                              after["default_policy"]["pi.0.weight"])
    remote = ws.remote_workers()[0].get_weights()
    assert all(np.array_equal(after["default_policy"][k], remote["default_policy"][k])
               for k in after["default_policy"])
    ws.stop()


def _train_once(op_factory, batch, seed):
    ws = make_workers(0, fragment=10, policy=PPOPolicy, seed=seed, policy_config=PPO_ONE_STEP)
    with run_of(flowrl.from_iterable(lambda: [batch]).for_each(op_factory(ws))) as run:
        _, info = next(run)
    weights = ws.local_worker().get_weights()["default_policy"]
    ws.stop()
    return weights, info["default_policy"]


@pytest.mark.parametrize("num_gpus", [1, 2, 3])
def test_multi_gpu_towers_equal_single_tower_training(num_gpus):
    sampler = make_workers(0, fragment=96, policy=PPOPolicy, seed=1, policy_config=PPO_ONE_STEP)
    batch = StandardizeFields(["advantages"])(sampler.local_worker().sample())
    sampler.stop()
    sgd = dict(num_sgd_iter=3, sgd_minibatch_size=40, seed=7)
    single, s_info = _train_once(lambda ws: TrainOneStep(ws, **sgd), batch, seed=3)
    towers, t_info = _train_once(lambda ws: MultiGPUTrainOneStep(ws, num_gpus=num_gpus, **sgd),
                                 batch, seed=3)
    for k in single:
        np.testing.assert_allclose(towers[k], single[k], rtol=1e-4, atol=1e-5)
    assert math.isclose(t_info["kl"], s_info["kl"], rel_tol=1e-3, abs_tol=1e-6)


def test_update_kl_uses_sampled_kl():
    ws = make_workers(0, fragment=10, policy=PPOPolicy,
                      policy_config={"kl_coeff": 0.2, "kl_target": 0.01})
    policy = ws.local_worker().get_policy()
    item = (None, {"default_policy": {"kl": 0.5}})
    assert UpdateKL(ws)(item) is item
    assert math.isclose(policy.kl_coeff, 0.3)
    UpdateKL(ws)({"default_policy": {"kl": 0.0001}})
    assert math.isclose(policy.kl_coeff, 0.15)
    ws.stop()


# -- reporting ------------------------------------------------------------------------

def test_standard_metrics_reporting_result_keys():
    ws = make_workers(1, fragment=100, policy=PPOPolicy, policy_config=PPO_ONE_STEP)
    train = ParallelRollouts(ws).for_each(TrainOneStep(ws))
    with run_of(StandardMetricsReporting(train, ws, timesteps_per_iteration=200)) as run:
        r1, r2 = run.take(2)
    for key in ("episode_reward_mean", "episode_reward_min", "episode_reward_max",
                "episode_len_mean", "episodes_total", "timesteps_total", "training_iteration",
                "time_total_s", "info", "timers"):
        assert key in r1
    assert (r1["training_iteration"], r2["training_iteration"]) == (1, 2)
    assert (r1["timesteps_total"], r2["timesteps_total"]) == (200, 400)
    assert r2["timesteps_this_iter"] == 200
    assert r2["info"]["num_steps_trained"] == 400 and "default_policy" in r2["info"]["learner"]
    assert {"learn_time_ms", "learn_throughput", "sample_time_ms"} <= set(r2["timers"])
    assert r2["time_total_s"] >= r1["time_total_s"] > 0
    ws.stop()


def test_collect_metrics_reports_episodes_from_every_worker_over_last_100():
    ws = make_workers(2, fragment=300)
    collect = CollectMetrics(ws)
    with run_of(ParallelRollouts(ws, mode="bulk_sync").for_each(collect)) as run:
        results = run.take(3)
    assert all(r["episodes_this_iter"] > 0 for r in results)
    assert results[-1]["episodes_total"] == sum(r["episodes_this_iter"] for r in results)
    window = list(collect.episodes)
    assert len(window) == min(100, results[-1]["episodes_total"])
    assert math.isclose(results[-1]["episode_reward_mean"],
                        np.mean([e["episode_reward"] for e in window]))
    ws.stop()


def test_once_per_filters():
    f = OncePerTimeInterval(0)
    assert all(f(i) for i in range(3))
    with pytest.raises(ConfigError):
        OncePerTimeInterval(-1)

    def count(x):
        flowrl.get_metrics().counters[STEPS_SAMPLED_COUNTER] += 50
        return x
    stream = flowrl.from_iterable(lambda: range(20)).for_each(count)
    with run_of(stream.filter(OncePerTimestepsElapsed(100))) as run:
        assert run.take(4) == [1, 3, 5, 7]


# -- Ray backend ----------------------------------------------------------------------

@pytest.mark.ray
def test_rollouts_and_training_on_ray(ray_session):
    # One WorkerSet for both checks: starting Ray actors dominates this test's time.
    ws = make_workers(2, fragment=50, policy=PPOPolicy, backend="ray",
                      policy_config=PPO_ONE_STEP)
    with run_of(ParallelRollouts(ws, mode="bulk_sync")) as run:
        assert run.backend == "ray"
        assert [b.count for b in run.take(2)] == [100, 100]
        assert run.metrics.counters[STEPS_SAMPLED_COUNTER] == 200
    with run_of(ParallelRollouts(ws, mode="async", num_async=2)) as run:
        assert [b.count for b in run.take(4)] == [50] * 4
    with run_of(ParallelRollouts(ws).for_each(TrainOneStep(ws))) as run:
        batch, info = next(run)
        assert batch.count == 100 and "default_policy" in info
        assert run.metrics.counters[STEPS_TRAINED_COUNTER] == 100
    local = ws.local_worker().get_weights()["default_policy"]
    remote = ws.foreach_worker(lambda w: w.get_weights())[1]["default_policy"]
    assert all(np.array_equal(local[k], remote[k]) for k in local)
    ws.stop()
