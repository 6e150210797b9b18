"""PPO's ``lr_schedule``: RLlib 1.x's piecewise-linear learning rate over env steps sampled.

The rate is checked against closed-form values of the schedule, the training
step of each batch against the rate at the steps sampled before that batch, and a
rate of 0 against unchanged weights.
"""

from __future__ import annotations

import numpy as np
import pytest

from flowrl.algorithms import PPO, PPOConfig
from flowrl.errors import ConfigError
from flowrl.ops.train_ops import piecewise_lr


@pytest.mark.parametrize("t, expected", [(0, 1.0), (50, 0.75), (100, 0.5), (150, 0.25),
                                         (200, 0.0), (10_000, 0.0)])
def test_piecewise_lr_interpolates_between_points_and_holds_the_last(t, expected):
    assert piecewise_lr([[0, 1.0], [100, 0.5], [200, 0.0]], t) == pytest.approx(expected)


@pytest.mark.parametrize("schedule", [
    [[10, 1e-3], [100, 0.0]],          # does not start at timestep 0
    [[0, 1e-3], [100, 1e-4], [50, 0]],  # timesteps not increasing
    [[0, 0.0], [100, 1e-3]],           # the first rate is 0
    [[0, 1e-3, 5]],                    # not a pair
    [[0.5, 1e-3]],                     # a timestep that is not an int
    [[0, -1e-3]],                      # a negative rate
    [],
])
def test_a_bad_schedule_is_a_config_error_naming_the_field(schedule):
    with pytest.raises(ConfigError, match=r"PPOConfig\.lr_schedule=.*\[timestep, lr\] pairs"):
        PPOConfig(env="CartPole-v1", lr_schedule=schedule)


def _ppo(schedule) -> PPO:
    return PPO(PPOConfig(env="CartPole-v1", num_workers=0, num_envs_per_worker=2,
                         rollout_fragment_length=64, train_batch_size=128,
                         sgd_minibatch_size=64, num_sgd_iter=2, lr=1.0, lr_schedule=schedule,
                         seed=0))


def test_each_batch_trains_at_the_rate_of_the_steps_sampled_before_it():
    algo = _ppo([[0, 1e-3], [512, 0.0]])
    try:
        assert algo.get_policy().optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)
        assert "ppo/update_lr" in algo.plan.to_dot()
        trained = []
        for _ in range(5):
            r = algo.train()
            trained.append(r["info"]["learner"]["default_policy"]["cur_lr"])
        # batch k (from 0) was sampled from timestep 128 k on; `lr` (1.0) is not used
        assert trained == pytest.approx([1e-3, 7.5e-4, 5e-4, 2.5e-4, 0.0])
        assert algo.get_policy().optimizer.param_groups[0]["lr"] == 0.0
    finally:
        algo.stop()


def test_a_rate_of_zero_leaves_the_weights_unchanged():
    algo = _ppo([[0, 1e-3], [128, 0.0]])
    try:
        algo.train()
        before = algo.get_policy().get_weights()
        algo.train()
        after = algo.get_policy().get_weights()
        assert all(np.array_equal(before[k], after[k]) for k in before)
    finally:
        algo.stop()


def test_without_a_schedule_the_rate_stays_the_config_lr():
    algo = PPO(PPOConfig(env="CartPole-v1", num_workers=0, num_envs_per_worker=2,
                         rollout_fragment_length=64, train_batch_size=128,
                         sgd_minibatch_size=64, num_sgd_iter=1, lr=3e-3, seed=0))
    try:
        rates = [algo.train()["info"]["learner"]["default_policy"]["cur_lr"] for _ in range(2)]
        assert rates == [3e-3, 3e-3]
        assert "ppo/update_lr" not in algo.plan.to_dot()
    finally:
        algo.stop()
