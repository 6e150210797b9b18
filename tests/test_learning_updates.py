"""Every algorithm's update moves its policy the way its maths says, in a few updates.

The runs that train on CartPole until a reward threshold carry the ``slow`` marker
(``python -m pytest -m slow``). These checks keep what those runs prove in the default
suite, on the local backend and in seconds: an algorithm's whole loop (sampling,
postprocessing, its trainer and optimizer, weight syncs) moves the policy toward the
rewarded action and the value toward the return, on a two-armed bandit where arm 0
pays 1 and arm 1 pays 0. Each episode is one step, so the targets are known in closed
form: ``V(s) = pi(0|s)`` and ``Q(s, a) = 1 - a``. Seeds fix the synchronous runs;
IMPALA's and APPO's learner threads train as batches arrive, so they are checked after
a fixed number of learnt rows, by margins every such run clears.
"""

from __future__ import annotations

import itertools

import gymnasium as gym
import numpy as np
import pytest

from flowrl.algorithms import (A2C, A2CConfig, A3C, A3CConfig, APPO, APPOConfig, DQN,
                               DQNConfig, IMPALA, IMPALAConfig, PG, PGConfig, PPO, PPOConfig)
from flowrl.batch import SampleBatch as SB
from flowrl.workers import make_multi_agent

OBS = np.array([[0.5, -0.5]], np.float32)


class TwoArmedBandit(gym.Env):
    """One-step episodes from a fixed observation; ``paying_arm`` pays 1, the other 0."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, paying_arm: int = 0):
        self.paying_arm = paying_arm

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        return OBS[0].copy(), {}

    def step(self, action):
        return OBS[0].copy(), float(action == self.paying_arm), True, False, {}


def bandit(env_config):
    return TwoArmedBandit()


def prob_of_arm_0(policy) -> float:
    _, extra = policy.compute_actions(OBS, explore=False)
    logits = extra[SB.ACTION_DIST_INPUTS][0].astype(np.float64)
    p = np.exp(logits - logits.max())
    return float(p[0] / p.sum())


SMALL = dict(env=bandit, model=(16,), seed=0)

ON_POLICY = [
    pytest.param(PG, PGConfig, dict(num_workers=0, rollout_fragment_length=32,
                                    train_batch_size=32, lr=1e-2), False, id="pg"),
    pytest.param(A2C, A2CConfig, dict(num_workers=0, rollout_fragment_length=32,
                                      train_batch_size=32, lr=1e-2), True, id="a2c"),
    pytest.param(A3C, A3CConfig, dict(num_workers=1, num_envs_per_worker=1,
                                      rollout_fragment_length=32, lr=1e-2,
                                      min_time_s_per_reporting=0,
                                      timesteps_per_iteration=32), True, id="a3c"),
    pytest.param(PPO, PPOConfig, dict(num_workers=0, rollout_fragment_length=64,
                                      train_batch_size=64, sgd_minibatch_size=32,
                                      num_sgd_iter=2, lr=1e-2), True, id="ppo"),
    pytest.param(IMPALA, IMPALAConfig, dict(num_workers=1, rollout_fragment_length=32,
                                            train_batch_size=32, lr=1e-2), True,
                 id="impala"),
    pytest.param(APPO, APPOConfig, dict(num_workers=1, rollout_fragment_length=32,
                                        train_batch_size=32, lr=1e-2), True, id="appo"),
]


@pytest.mark.parametrize("algo_cls, config_cls, settings, has_critic", ON_POLICY)
def test_a_few_updates_raise_the_rewarded_arm_and_move_the_value_to_the_return(
        algo_cls, config_cls, settings, has_critic):
    with algo_cls(config_cls(**SMALL, **settings)) as algo:
        assert algo.config.backend == "local"
        policy = algo.get_policy()
        p0, v0 = prob_of_arm_0(policy), float(policy.value(OBS)[0])
        for _ in range(5):
            result = algo.train()
        # IMPALA's and APPO's learner threads train as batches arrive, so an iteration
        # holds any number of updates: they go on until five 32-row batches were learnt
        for _ in range(100):
            if algo_cls not in (IMPALA, APPO) or result["info"]["num_steps_trained"] >= 160:
                break
            result = algo.train()
        if algo_cls not in (IMPALA, APPO):   # every sampled step is trained on once
            assert result["info"]["num_steps_trained"] == result["timesteps_total"]
        p, v = prob_of_arm_0(policy), float(policy.value(OBS)[0])
    # the policy gradient pushes up the arm that paid
    assert p > p0 + 0.1, (p0, p)
    if has_critic:
        # V(s) moves from its start toward the return, pi(0) (here close to 1)
        assert abs(v - p) < abs(v0 - p) - 0.1, (v0, v, p)


def test_a_few_dqn_updates_move_q_toward_the_one_step_targets():
    config = DQNConfig(env=bandit, seed=0, hiddens=(16,), lr=1e-2,
                       learning_starts=64, train_batch_size=32, timesteps_per_iteration=64,
                       target_network_update_freq=64,
                       exploration_config={"epsilon_timesteps": 200, "final_epsilon": 0.1})
    with DQN(config) as algo:
        q0 = algo.get_policy().q_values(OBS)[0]
        for _ in range(4):
            result = algo.train()
        q = algo.get_policy().q_values(OBS)[0]
    assert result["info"]["num_steps_trained"] > 0
    target = np.array([1.0, 0.0])   # one-step episodes: Q(s, a) = r(a)
    assert np.abs(q - target).max() < 0.5 * np.abs(q0 - target).max(), (q0, q)
    assert q[0] > q[1] + 0.5


def test_each_policy_of_a_multi_agent_run_learns_from_its_own_agents_rewards():
    """Two agents, each mapped to its own PG policy, on bandits paying different arms
    (agent 0 arm 0, agent 1 arm 1): each policy raises the arm that paid its agent."""
    built = itertools.count()

    def bandit_paying_in_turn(env_config):   # copies are built in agent order, in pairs
        return TwoArmedBandit(paying_arm=next(built) % 2)

    config = PGConfig(env=make_multi_agent(bandit_paying_in_turn, 2),
                      rollout_fragment_length=32, train_batch_size=32, lr=1e-2,
                      model=(16,), seed=0,
                      multiagent={"policies": {"p0": None, "p1": None},
                                  "policy_mapping_fn": lambda agent_id: f"p{agent_id}"})
    with PG(config) as algo:
        before = {pid: prob_of_arm_0(algo.get_policy(pid)) for pid in ("p0", "p1")}
        for _ in range(5):
            algo.train()
        after = {pid: prob_of_arm_0(algo.get_policy(pid)) for pid in ("p0", "p1")}
    assert after["p0"] > before["p0"] + 0.1, (before, after)
    assert after["p1"] < before["p1"] - 0.1, (before, after)
