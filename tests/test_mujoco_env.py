"""flowrl.envs.mujoco: CleanRL's normalization stack as an env creator, run with PPO.

The creator's checks run on classic-control envs; the PPO runs need mujoco
(skipped without it) and stay at a few thousand env steps.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pytest

from flowrl.envs.mujoco import episode_statistics, normalized_env
from flowrl.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_the_creator_needs_an_id_and_a_box_action_space():
    with pytest.raises(ConfigError, match=r"give the gymnasium id"):
        normalized_env({})
    with pytest.raises(ConfigError, match=r"'CartPole-v1' has action space Discrete\(2\)"):
        normalized_env({"id": "CartPole-v1"})
    with pytest.raises(ConfigError, match=r"env_config\['gamma'\]=1.5"):
        normalized_env({"id": "Pendulum-v1", "gamma": 1.5})


def test_episode_statistics_hold_the_raw_returns_while_the_agent_sees_normalized_rewards():
    env = normalized_env({"id": "Pendulum-v1", "clip_reward": 1.0})
    env.reset(seed=0)
    seen, done = [], False
    while not done:
        _, reward, terminated, truncated, info = env.step(np.array([2.0], np.float32))
        seen.append(reward)
        done = terminated or truncated
    stats = episode_statistics(env)
    assert stats.episode_count == 1
    raw_return = info["episode"]["r"]
    assert stats.return_queue[-1] == pytest.approx(raw_return)
    assert max(abs(r) for r in seen) <= 1.0 < abs(raw_return)  # clipped, unlike the raw


def test_ppo_trains_on_hopper_and_every_sampled_episode_has_a_raw_return():
    pytest.importorskip("mujoco")
    from flowrl.algorithms import PPO, PPOConfig
    algo = PPO(PPOConfig(env=normalized_env, env_config={"id": "Hopper-v5"}, num_workers=0,
                         num_envs_per_worker=2, rollout_fragment_length=512,
                         train_batch_size=1024, sgd_minibatch_size=256, num_sgd_iter=2,
                         lr_schedule=[[0, 3e-4], [2048, 0.0]], vf_clip_param=0.2, seed=0))
    try:
        for _ in range(2):
            r = algo.train()
        venv = algo.workers.local_worker().envs[0]
        stats = [episode_statistics(env) for env in venv.envs]
        assert r["timesteps_total"] == 2048
        assert sum(s.episode_count for s in stats) == r["episodes_total"] > 0
        assert all(np.isfinite(ret) for s in stats for ret in s.return_queue)
        assert r["info"]["learner"]["default_policy"]["cur_lr"] == pytest.approx(1.5e-4)
    finally:
        algo.stop()


def test_the_hopper_tuned_example_runs_from_the_command_line(tmp_path):
    pytest.importorskip("mujoco")
    from flowrl.cli import main
    spec = os.path.join(ROOT, "tuned_examples", "ppo-hopper.yaml")
    assert main(["train", "--config", spec, "--stop-timesteps", "2048", "--run-dir",
                 str(tmp_path), "--quiet", "--no-tensorboard", "--set", "num_sgd_iter=1"]) == 0
    (run_dir,) = list(tmp_path.iterdir())
    with open(run_dir / "result.jsonl") as f:
        last = json.loads(f.read().splitlines()[-1])
    assert last["timesteps_total"] == 2048
    assert last["info"]["learner"]["default_policy"]["cur_lr"] == pytest.approx(3e-4)
