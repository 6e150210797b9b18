"""Time-to-goal on CartPole-v1 for the async algorithms (slow: ``pytest -m slow``).

Each trains until the mean reward of the last 100 episodes reaches 450, within a
generous step budget; the quick default-run checks are in test_gradient_ops.py
(A3C) and test_impala.py (IMPALA, APPO).
"""

from __future__ import annotations

import pytest

from flowrl.algorithms import A3C, APPO, IMPALA, A3CConfig, APPOConfig, IMPALAConfig

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]

ASYNC_CARTPOLE = dict(env="CartPole-v1", num_workers=2, num_envs_per_worker=4,
                      train_batch_size=200, lr=2e-3, seed=0, timesteps_per_iteration=5000)


def _train_to(algo, reward: float, max_steps: int) -> dict:
    try:
        while True:
            result = algo.train()
            if result["episode_reward_mean"] >= reward or result["timesteps_total"] >= max_steps:
                return result
    finally:
        algo.stop()


@pytest.mark.ray
@pytest.mark.parametrize("cls, config", [(IMPALA, IMPALAConfig), (APPO, APPOConfig)])
def test_reaches_450_with_two_ray_workers(cls, config, ray_session):
    result = _train_to(cls(config(**ASYNC_CARTPOLE, backend="ray")), 450, 1_500_000)
    assert result["episode_reward_mean"] >= 450, result["episode_reward_mean"]


def test_a3c_reaches_450():
    algo = A3C(A3CConfig(env="CartPole-v1", num_workers=2, seed=0,
                         timesteps_per_iteration=5000))
    result = _train_to(algo, 450, 2_000_000)
    assert result["episode_reward_mean"] >= 450, result["episode_reward_mean"]
