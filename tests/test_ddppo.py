"""DD-PPO: gradients all-reduced among Ray workers, no learner on the driver."""

from __future__ import annotations


import numpy as np
import pytest
from ray_helpers import kill

from flowrl.algorithms import DDPPO, DDPPOConfig
from flowrl.callbacks import DefaultCallbacks
from flowrl.algorithms.ddppo import allreduce_mean
from flowrl.errors import ConfigError, FlowError, WorkerError

QUICK = dict(env="CartPole-v1", num_workers=2, num_envs_per_worker=2,
             rollout_fragment_length=64, sgd_minibatch_size=64, num_sgd_iter=2, seed=0,
             num_cpus_per_worker=0.5, model=(32,))


def test_ddppo_config_errors():
    with pytest.raises(ConfigError, match="use backend='ray'"):
        DDPPOConfig(env="CartPole-v1", backend="local")
    with pytest.raises(ConfigError, match="num_workers >= 1"):
        DDPPOConfig(env="CartPole-v1", num_workers=0)
    with pytest.raises(ConfigError, match="kl_coeff=0.2: must be 0"):
        DDPPOConfig(env="CartPole-v1", kl_coeff=0.2)
    with pytest.raises(ConfigError, match=r"gloo_timeout_s=0: must be a number > 0"):
        DDPPOConfig(env="CartPole-v1", gloo_timeout_s=0)


def test_ddppo_refuses_to_replace_or_drop_workers():
    config = DDPPOConfig(env="CartPole-v1")
    assert not config.recreate_failed_workers and not config.ignore_worker_failures
    for name in ("recreate_failed_workers", "ignore_worker_failures"):
        with pytest.raises(ConfigError, match=rf"DDPPOConfig\.{name}=True: .*gloo process "
                                              r"group that cannot be re-formed.*restart from "
                                              r"the last checkpoint"):
            DDPPOConfig(env="CartPole-v1", **{name: True})


def test_allreduce_mean_without_a_group_raises_instead_of_returning_local_gradients():
    with pytest.raises(ConfigError, match=r"allreduce_mean: no torch.distributed process "
                                          r"group is initialized.*init_process_group"):
        allreduce_mean([np.ones(3, np.float32)])


def _weights(worker):
    import torch.distributed as dist
    return worker.get_weights()["default_policy"], dist.get_world_size()


LSTM = {"use_lstm": True, "fcnet_hiddens": [32], "lstm_cell_size": 16, "max_seq_len": 8}


@pytest.mark.ray
@pytest.mark.parametrize("standardize, model, minibatch", [
    ("batch", (32,), 64), ("minibatch", (32,), 64), ("minibatch", LSTM, 16)])
def test_ddppo_workers_stay_identical_and_train(ray_session, standardize, model, minibatch):
    # With an LSTM, minibatches of 2 sequences: the workers' batches are cut into
    # different numbers of sequences (seed 0: 20 and 18 in the first round), so
    # of minibatches, and the workers must still take the same steps.
    algo = DDPPO(DDPPOConfig(**{**QUICK, "model": model, "sgd_minibatch_size": minibatch},
                             standardize_advantages=standardize))
    try:
        start = algo.get_policy().get_weights()
        for _ in range(2):
            r = algo.train()
        assert r["timesteps_total"] == 2 * 2 * 128
        assert r["info"]["num_steps_trained"] == 512
        (w1, size1), (w2, size2) = algo.workers.foreach_remote_worker(_weights)
        assert size1 == size2 == 2
        local = algo.get_policy().get_weights()
        for k in w1:
            np.testing.assert_array_equal(w1[k], w2[k])      # bit-identical workers
            np.testing.assert_array_equal(w1[k], local[k])   # the driver mirrors worker 1
        assert any(not np.array_equal(start[k], local[k]) for k in start)
        assert "policy_loss" in r["info"]["learner"]["default_policy"]
    finally:
        algo.stop()
    with pytest.raises(FlowError, match=r"the plan ended \(was stop\(\) called\?\)"):
        algo.train()   # stopped on purpose: its killed workers are not reported as lost


@pytest.mark.slow
@pytest.mark.ray
def test_ddppo_learns_cartpole(ray_session):
    algo = DDPPO(DDPPOConfig(env="CartPole-v1", num_workers=2, num_envs_per_worker=4,
                             rollout_fragment_length=128, sgd_minibatch_size=128,
                             num_sgd_iter=6, seed=0, num_cpus_per_worker=0.5))
    try:
        for _ in range(200):
            r = algo.train()
            if r["episode_reward_mean"] >= 450:
                break
        else:
            raise AssertionError(f"DD-PPO did not reach 450: {r['episode_reward_mean']}")
    finally:
        algo.stop()




@pytest.mark.ray
def test_a_killed_worker_ends_the_run_with_an_error_naming_it(ray_session):
    algo = DDPPO(DDPPOConfig(**QUICK, sample_timeout_s=60, gloo_timeout_s=60))
    try:
        algo.train()
        kill(algo.workers.remote_workers()[1])
        # No silent continuation: the very next round fails, naming the lost worker
        # (a hang would be caught by the test timeout).
        with pytest.raises(WorkerError, match=r"DDPPO: remote worker 2 died \(\w+\)\. "
                                              r"The workers' gloo process group cannot be "
                                              r"re-formed.*restore the last checkpoint"):
            algo.train()
        with pytest.raises(FlowError):
            algo.train()   # the run stays ended
    finally:
        algo.stop()


def _lr(worker) -> float:
    return worker.get_policy().optimizer.param_groups[0]["lr"]


class RowsLearned(DefaultCallbacks):
    def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs):
        result["rows"] = train_batch.count


@pytest.mark.ray
def test_ddppo_lr_schedule_sets_the_rate_the_workers_train_with(ray_session):
    # also: the workers' rounds run on_learn_on_batch, as every other learner does
    algo = DDPPO(DDPPOConfig(**QUICK, lr_schedule=[[0, 1e-3], [200, 1e-9]],
                             callbacks=RowsLearned))
    try:
        first = algo.train()
        assert algo.workers.foreach_remote_worker(_lr) == pytest.approx([1e-9, 1e-9])
        second = algo.train()   # sampled from step 256 on: the schedule's last rate
        assert second["timesteps_total"] == 512
        assert [r["info"]["learner"]["default_policy"]["cur_lr"]
                for r in (first, second)] == pytest.approx([1e-3, 1e-9])
        assert "ddppo/update_lr" in algo.plan.to_dot()
        assert second["info"]["learner"]["default_policy"]["custom_metrics"] == {"rows": 128}
    finally:
        algo.stop()


def test_ddppo_trains_a_recurrent_policy_on_whole_sequences_as_ppo_does():
    # One worker in a one-process group: DD-PPO's round must be PPO's minibatch
    # SGD (whole sequences shuffled), not SGD over shuffled single rows.
    import socket

    import torch.distributed as dist

    import flowrl
    from flowrl.algorithms.ddppo import _DDPPOTrain
    from flowrl.ops import StandardizeFields
    from flowrl.policies import PPOPolicy
    from flowrl.workers import RolloutWorker

    config = {"model": {"use_lstm": True, "fcnet_hiddens": [16], "lstm_cell_size": 8,
                        "max_seq_len": 8}, "seed": 0, "lr": 1e-2}
    worker = RolloutWorker("CartPole-v1", policy=PPOPolicy, policy_config=config,
                           rollout_fragment_length=64, seed=0)
    reference = RolloutWorker("CartPole-v1", policy=PPOPolicy, policy_config=config, seed=0)
    batch = worker.sample()
    start = worker.get_policy().get_weights()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=0,
                            world_size=1)
    try:
        train = _DDPPOTrain(num_sgd_iter=2, sgd_minibatch_size=32, seed=0)
        plan = flowrl.Plan(flowrl.from_iterable(lambda: [batch]).for_each(train))
        with plan.compile(local_worker=worker) as run:
            (info, count), = run.take(1)
    finally:
        dist.destroy_process_group()
    reference.get_policy().learn_on_batch(StandardizeFields(["advantages"])(batch),
                                          num_sgd_iter=2, sgd_minibatch_size=32,
                                          rng=np.random.default_rng(0))
    got, want = worker.get_policy().get_weights(), reference.get_policy().get_weights()
    assert count == 64 and "policy_loss" in info["default_policy"]
    assert any(not np.allclose(got[k], start[k]) for k in start)
    for k in want:
        np.testing.assert_allclose(got[k], want[k], rtol=0, atol=1e-6)
    worker.stop()
    reference.stop()
