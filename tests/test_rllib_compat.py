"""RLlib 1.x code runs as written (issue 25, part 4).

Streams iterate, ``StandardMetricsReporting`` takes the config positionally, configs
read as mappings, and the seeds' execution plans run in their original shape:
the seeds' code with its imports mapped to flowrl and TF policies to their torch
twins (``PPOTFPolicy`` -> ``PPOPolicy``). Differences that remain are named where
they occur.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

import pytest

import flowrl
from flowrl import from_actors
from flowrl.algorithms import A2CConfig, AlgorithmConfig, PGConfig, PPOConfig, build_algorithm
from flowrl.batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError, PlanError
from flowrl.metrics import LEARNER_INFO, STEPS_SAMPLED_COUNTER, STEPS_TRAINED_COUNTER
from flowrl.metrics import get_metrics as _get_shared_metrics
from flowrl.ops import (ApplyGradients, ConcatBatches, ForwardUpdates, MultiGPUTrainOneStep,
                        ParallelRollouts, SelectExperiences, StandardizeFields,
                        StandardMetricsReporting, TrainOneStep, UpdateKL)
from flowrl.policies import A2CPolicy, PGPolicy, PPOPolicy
from flowrl.workers import WorkerConfig, WorkerSet, get_global_worker

logger = logging.getLogger(__name__)


def _workers(backend, num_workers=1, policy=PGPolicy, fragment=50):
    return WorkerSet("CartPole-v1", policy,
                     WorkerConfig(rollout_fragment_length=fragment, seed=0),
                     num_workers=num_workers, backend=backend)


# ----------------------------------------------------------------- streams iterate

def test_next_on_a_local_stream_compiles_it_once_and_a_second_iter_continues():
    s = flowrl.from_items([1, 2, 3, 4], 2).gather_sync().for_each(lambda x: x * 10)
    assert s.run is None  # building ran nothing
    assert next(s) == 10
    run = s.run
    assert iter(s) is run and iter(iter(s)) is run  # one Run per handle
    assert [x for x in s] == [20, 30, 40]  # the loop continues after next()
    with pytest.raises(StopIteration):
        next(s)
    # Another handle on the same plan starts a run of its own.
    assert list(flowrl.Plan(s).compile()) == [10, 20, 30, 40]


def test_stop_ends_a_stream_run_early_and_parallel_streams_still_refuse_to_iterate():
    s = flowrl.from_range(100, 1).gather_sync()
    assert next(s) == 0
    s.stop()
    with pytest.raises(StopIteration):
        next(s)
    with pytest.raises(PlanError, match="is a ParallelStream.*gather it first"):
        iter(flowrl.from_range(4, 2))


@pytest.mark.parametrize("mode, rows", [("bulk_sync", 100), ("async", 50)])
def test_next_parallel_rollouts_samples_locally(mode, rows):
    ws = _workers("local", num_workers=2)
    try:
        rollouts = ParallelRollouts(ws, mode=mode)
        batch = next(rollouts)
        assert batch.count == rows and rollouts.run.backend == "local"
        assert rollouts.run.metrics.counters[STEPS_SAMPLED_COUNTER] == rows
        rollouts.stop()
    finally:
        ws.stop()


@pytest.mark.ray
def test_next_parallel_rollouts_samples_from_ray_actors(ray_session):
    ws = _workers("ray", num_workers=2)
    try:
        rollouts = ParallelRollouts(ws, mode="bulk_sync")
        assert next(rollouts).count == 100 and rollouts.run.backend == "ray"
        assert next(rollouts).count == 100
        rollouts.stop()
    finally:
        ws.stop()


# ----------------------------------------------------------- configs as mappings

def test_algorithm_configs_read_as_mappings_with_rllib_spellings():
    c = PPOConfig(env="CartPole-v1", lr=0.01, lambda_=0.9)
    assert c["lr"] == c.get("lr") == 0.01 and "lr" in c
    assert c["lambda"] == c.get("lambda") == 0.9 and "lambda" in c
    assert c.get("framework") is None and "framework" not in c
    assert c["multiagent"]["count_steps_by"] == "env_steps" and c.multiagent == {}
    assert dict(c)["train_batch_size"] == c.train_batch_size
    with pytest.raises(KeyError, match="no field 'clip_parm' .*'clip_param'"):
        c["clip_parm"]


def test_reading_an_rllib_key_flowrl_lacks_says_how_to_add_it_not_a_lookalike():
    with pytest.raises(KeyError) as raised:
        PPOConfig(env="CartPole-v1")["simple_optimizer"]
    message = str(raised.value)
    assert "PPOConfig has no field 'simple_optimizer' (RLlib 1.x has this setting" in message
    assert "class MyConfig(PPOConfig): simple_optimizer: Any = None" in message
    assert "sample_timeout_s" not in message
    # the fix it names works: a subclass with the field reads it
    assert SeedPPOConfig(env="CartPole-v1")["simple_optimizer"] is True
    with pytest.raises(KeyError, match="'evaluation_num_episodes' is 'evaluation_duration' here"):
        PPOConfig(env="CartPole-v1")["evaluation_num_episodes"]


def test_unknown_config_keywords_are_config_errors_naming_class_keyword_and_fix():
    with pytest.raises(ConfigError, match=r"^PPOConfig\(lr_rate=\.\.\.\): unknown field "
                                          r"'lr_rate'; did you mean 'lr'\?$"):
        PPOConfig(env="CartPole-v1", lr_rate=0.1)
    with pytest.raises(ConfigError, match=r"^A2CConfig\(microbatch_size=\.\.\.\): unknown field "
                                          r"'microbatch_size'; RLlib 1\.x has this setting and "
                                          r"flowrl's A2CConfig does not: .*class MyConfig\("
                                          r"A2CConfig\): microbatch_size: Any = None"):
        A2CConfig(env="CartPole-v1", microbatch_size=4)
    with pytest.raises(ConfigError, match=r"^PPOConfig\(min_iter_time_s=\.\.\.\): unknown field "
                                          r"'min_iter_time_s'; RLlib 1\.x's 'min_iter_time_s' is "
                                          r"'min_time_s_per_reporting' here$"):
        PPOConfig(env="CartPole-v1", min_iter_time_s=1)
    with pytest.raises(ConfigError, match=r"^PPOConfig\(gama=\.\.\.\): unknown field 'gama'; "
                                          r"did you mean 'gamma'\?$"):
        PPOConfig(env="CartPole-v1").replace(gama=0.9)
    with pytest.raises(ConfigError, match=r"^PGConfig\(lr_rate=\.\.\.\): .*did you mean 'lr'"):
        build_algorithm("my_pg", PGConfig, PGPolicy, lambda workers, config: None)(
            env="CartPole-v1", lr_rate=0.1)


# ------------------------------------------------------- learner stats as RLlib has them

class PortedUpdateKL:
    """A KL update as ported from RLlib 1.x's PPO: it reads each policy's KL under
    ``learner_stats`` and refuses fetches that have no policy level."""

    def __init__(self, workers):
        self.workers = workers

    def __call__(self, fetches):
        def update(policy, policy_id):
            assert "learner_stats" not in fetches, fetches
            if policy_id in fetches:
                policy.update_kl(fetches[policy_id]["learner_stats"]["kl"])

        self.workers.local_worker().foreach_trainable_policy(update)
        return fetches


@pytest.mark.parametrize("train_op", ["TrainOneStep", "MultiGPUTrainOneStep"])
def test_an_update_kl_ported_from_rllib_reads_the_train_ops_learner_stats(train_op):
    ws = _workers("local", num_workers=0, policy=PPOPolicy, fragment=64)
    try:
        policy = ws.local_worker().get_policy()
        seen = []
        policy.update_kl = seen.append
        op = (TrainOneStep(ws, num_sgd_iter=1, sgd_minibatch_size=32) if train_op == "TrainOneStep"
              else MultiGPUTrainOneStep(ws, num_gpus=1, sgd_minibatch_size=32, _fake_gpus=True))
        plan = flowrl.Plan(ParallelRollouts(ws).for_each(op).for_each(lambda t: t[1])
                           .for_each(PortedUpdateKL(ws)))
        with plan.compile() as run:
            info = next(run)
            reported = run.metrics.info[LEARNER_INFO]
        stats = info[DEFAULT_POLICY_ID]
        assert seen == [stats["kl"]] and stats["learner_stats"]["kl"] == stats["kl"]
        # what results report keeps flowrl's flat stats, without the second copy
        assert "learner_stats" not in reported[DEFAULT_POLICY_ID]
        assert reported[DEFAULT_POLICY_ID]["kl"] == stats["kl"]
    finally:
        ws.stop()


def test_flowrl_update_kl_reads_rllib_shaped_stats_too():
    ws = _workers("local", num_workers=0, policy=PPOPolicy)
    try:
        policy = ws.local_worker().get_policy()
        before = policy.kl_coeff
        UpdateKL(ws)({DEFAULT_POLICY_ID: {"learner_stats": {"kl": 1.0}}})
        assert policy.kl_coeff == pytest.approx(before * 1.5)
    finally:
        ws.stop()


def test_standard_metrics_reporting_takes_the_config_third_and_keywords_win():
    ws = _workers("local", num_workers=0, fragment=100)
    try:
        config = AlgorithmConfig(env="CartPole-v1", timesteps_per_iteration=300)
        out = StandardMetricsReporting(ParallelRollouts(ws), ws, config)
        assert [next(out)["timesteps_total"] for _ in range(2)] == [300, 600]
        out.stop()
        out = StandardMetricsReporting(ParallelRollouts(ws), ws, {"timesteps_per_iteration": 300},
                                       timesteps_per_iteration=100)
        assert next(out)["timesteps_total"] == 100  # the keyword wins over the dict
        out.stop()
        with pytest.raises(ConfigError, match="third argument is the algorithm's config"):
            StandardMetricsReporting(ParallelRollouts(ws), ws, 300)
    finally:
        ws.stop()


# ------------------------------------------- the seeds' execution plans as written

def sample_only_execution_plan(workers, config, **kwargs):
    rollouts = ParallelRollouts(workers, mode="async")
    # Collect batches for the trainable policies.
    rollouts = rollouts.for_each(
        SelectExperiences(local_worker=workers.local_worker()))
    # Return training metrics.
    return StandardMetricsReporting(rollouts, workers, config)


@dataclass
class SeedPPOConfig(PPOConfig):
    """The keys the seeds' PPO plan reads that PPOConfig does not have."""

    simple_optimizer: bool = True
    shuffle_sequences: bool = True
    _fake_gpus: bool = False


def warn_about_bad_reward_scales(config, result):
    # The seeds' helper (abridged): warn when rewards dwarf vf_clip_param.
    if result["episode_reward_mean"] > 100 * config["vf_clip_param"]:
        logger.warning("The magnitude of your environment rewards are more than ...")
    return result


def ppo_execution_plan(workers, config, **kwargs):
    assert len(kwargs) == 0, (
        "PPO execution_plan does NOT take any additional parameters")
    rollouts = ParallelRollouts(workers, mode="bulk_sync")
    # Collect batches for the trainable policies.
    rollouts = rollouts.for_each(
        SelectExperiences(workers.trainable_policies()))
    # Concatenate the SampleBatches into one.
    rollouts = rollouts.combine(
        ConcatBatches(
            min_batch_size=config["train_batch_size"],
            count_steps_by=config["multiagent"]["count_steps_by"],
        ))
    # Standardize advantages.
    rollouts = rollouts.for_each(StandardizeFields(["advantages"]))
    # Perform one training step on the combined + standardized batch.
    if config["simple_optimizer"]:
        train_op = rollouts.for_each(
            TrainOneStep(workers,
                         num_sgd_iter=config["num_sgd_iter"],
                         sgd_minibatch_size=config["sgd_minibatch_size"]))
    else:
        train_op = rollouts.for_each(
            MultiGPUTrainOneStep(
                workers=workers,
                sgd_minibatch_size=config["sgd_minibatch_size"],
                num_sgd_iter=config["num_sgd_iter"],
                num_gpus=config["num_gpus"],
                shuffle_sequences=config["shuffle_sequences"],
                _fake_gpus=config["_fake_gpus"],
                framework=config.get("framework")))
    # Update KL after each round of training.
    train_op = train_op.for_each(lambda t: t[1]).for_each(
        UpdateKL(workers))
    # Warn about bad reward scales and return training metrics.
    return StandardMetricsReporting(train_op, workers, config) \
        .for_each(lambda result: warn_about_bad_reward_scales(
            config, result))


def LocalTrainOneStep(workers, num_sgd_iter: int = 1, sgd_minibatch_size: int = 0):
    # The seeds' op; its num_sgd_iter > 1 branch (do_minibatch_sgd) is left out.
    rollouts = from_actors(workers.remote_workers())

    def train_on_batch(samples):
        if isinstance(samples, SampleBatch):
            samples = MultiAgentBatch({DEFAULT_POLICY_ID: samples}, samples.count)
        worker = get_global_worker()
        if not hasattr(worker, 'num_iterations_trained'):
            worker.num_iterations_trained = 0
        info = worker.learn_on_batch(samples)
        worker.num_iterations_trained += 1
        info['num_iterations_trained'] = worker.num_iterations_trained
        return info, samples.count, num_sgd_iter

    info = rollouts.for_each(train_on_batch)
    return info


def LocalComputeUpdates(workers, significance_threshold):
    rollouts = from_actors(workers.remote_workers())

    def train_on_batch(samples):
        if isinstance(samples, SampleBatch):
            samples = MultiAgentBatch({DEFAULT_POLICY_ID: samples}, samples.count)
        worker = get_global_worker()
        if not hasattr(worker, 'num_iterations_trained'):
            worker.num_iterations_trained = 0
        info = worker.learn_on_batch(samples)
        worker.foreach_trainable_policy(
            lambda p, pid: p.asp_accumulate_grads())
        worker.num_iterations_trained += 1
        info['num_iterations_trained'] = worker.num_iterations_trained
        updates = {
            pid: worker.get_policy(pid).asp_get_updates(significance_threshold)
            for pid in worker.policies_to_train
        }
        return updates, info, samples.count, 1

    res = rollouts.for_each(train_on_batch)
    return res


def record_local_training(item):
    info, count = item[-3], item[-2]
    metrics = _get_shared_metrics()
    metrics.counters[STEPS_SAMPLED_COUNTER] += count
    metrics.counters[STEPS_TRAINED_COUNTER] += count
    metrics.info[LEARNER_INFO] = info
    return item


def local_train_execution_plan(workers, config):
    train_op = LocalTrainOneStep(workers).gather_async().for_each(record_local_training)
    return StandardMetricsReporting(train_op, workers, config)


def local_compute_updates_execution_plan(workers, config):
    train_op = (LocalComputeUpdates(workers, config["significance_threshold"])
                .gather_async().for_each(ForwardUpdates(workers)))
    return StandardMetricsReporting(train_op, workers, config)


@dataclass
class ASPConfig(AlgorithmConfig):
    significance_threshold: float = 1e-4


def AsyncGradients(workers):
    # Ensure workers are initially in sync.
    workers.sync_weights()

    # This function will be applied remotely on the workers.
    def samples_to_grads(samples):
        return get_global_worker().compute_gradients(samples), samples.count

    # Record learner metrics and pass through (grads, count).
    class record_metrics:
        # Differs from the seeds: flowrl has no _on_fetch_start hook, so the
        # GRAD_WAIT_TIMER push that timed the fetch is left out.
        def __call__(self, item):
            (grads, info), count = item
            metrics = _get_shared_metrics()
            metrics.counters[STEPS_SAMPLED_COUNTER] += count
            metrics.info[LEARNER_INFO] = info
            return grads, count

    rollouts = from_actors(workers.remote_workers())
    grads = rollouts.for_each(samples_to_grads)
    return grads.gather_async().for_each(record_metrics())


def async_gradients_execution_plan(workers, config):
    train_op = AsyncGradients(workers).for_each(ApplyGradients(workers, update_all=False))
    return StandardMetricsReporting(train_op, workers, config)


SEED_PLANS = {
    # name: (execution plan, config class, policy, config fields, trains)
    "sample_only": (sample_only_execution_plan, AlgorithmConfig, PGPolicy,
                    dict(rollout_fragment_length=50, timesteps_per_iteration=100), False),
    "ppo": (ppo_execution_plan, SeedPPOConfig, PPOPolicy,
            dict(num_envs_per_worker=1, rollout_fragment_length=64, train_batch_size=128,
                 sgd_minibatch_size=64, num_sgd_iter=2), True),
    "ppo_multi_gpu": (ppo_execution_plan, SeedPPOConfig, PPOPolicy,
                      dict(num_envs_per_worker=1, rollout_fragment_length=64,
                           train_batch_size=128, sgd_minibatch_size=64, num_sgd_iter=2,
                           simple_optimizer=False, num_gpus=2, _fake_gpus=True), True),
    "local_train_one_step": (local_train_execution_plan, AlgorithmConfig, PGPolicy,
                             dict(rollout_fragment_length=50, timesteps_per_iteration=100),
                             True),
    "local_compute_updates": (local_compute_updates_execution_plan, ASPConfig, PGPolicy,
                              dict(rollout_fragment_length=50, timesteps_per_iteration=100),
                              True),
    "async_gradients": (async_gradients_execution_plan, AlgorithmConfig, A2CPolicy,
                        dict(rollout_fragment_length=50, timesteps_per_iteration=100), False),
}
# Not here: the seeds' gather_experiences_tree_aggregation builds its aggregators with
# Ray's create_colocated(Aggregator, ...); flowrl places aggregators itself
# (ParallelStream.aggregate), see examples/seed_plans/tree_aggregation.py.


def _train_seed_plan(name, backend):
    plan, config_cls, policy, fields, trains = SEED_PLANS[name]
    algo_cls = build_algorithm(f"seed_{name}", config_cls, policy, plan)
    config = config_cls(env="CartPole-v1", num_workers=2, backend=backend, seed=0, **fields)
    with algo_cls(config) as algo:
        results = [algo.train() for _ in range(2)]
    last = results[-1]
    assert last["training_iteration"] == 2 and last["timesteps_total"] > 0
    learner = last["info"][LEARNER_INFO]
    assert bool(learner) or not trains
    if trains and name.startswith("ppo"):
        assert last["info"][STEPS_TRAINED_COUNTER] == 256
        assert "kl" in learner[DEFAULT_POLICY_ID]
    return results


@pytest.mark.parametrize("name", sorted(SEED_PLANS))
def test_seed_plan_runs_as_written_locally(name):
    _train_seed_plan(name, "local")


@pytest.mark.ray
@pytest.mark.parametrize("name", ["ppo", "local_train_one_step", "async_gradients"])
def test_seed_plan_runs_as_written_on_ray(ray_session, name):
    _train_seed_plan(name, "ray")


def test_tf_only_settings_in_a_seed_plan_are_config_errors_naming_them():
    ws = _workers("local", num_workers=0, policy=PPOPolicy)
    try:
        with pytest.raises(ConfigError, match="framework='tf'.*policies are torch"):
            MultiGPUTrainOneStep(workers=ws, framework="tf")
        with pytest.raises(ConfigError, match="shuffle_sequences=False"):
            MultiGPUTrainOneStep(ws, shuffle_sequences=False)
    finally:
        ws.stop()
