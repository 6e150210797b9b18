"""DD-PPO: gradients all-reduced among Ray workers, no learner on the driver."""

from __future__ import annotations

import numpy as np
import pytest

from flowrl.algorithms import DDPPO, DDPPOConfig
from flowrl.errors import ConfigError

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


def _weights(worker):
    import torch.distributed as dist
    return worker.get_weights()["default_policy"], dist.get_world_size()


@pytest.mark.ray
def test_ddppo_workers_stay_identical_and_train(ray_session):
    algo = DDPPO(DDPPOConfig(**QUICK))
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
