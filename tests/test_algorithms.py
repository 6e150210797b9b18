"""Algorithms: configs, plans, results, checkpoints, and short learning runs."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from flowrl.errors import ConfigError, FlowError
from flowrl.algorithms import A2C, A2CConfig, PG, PGConfig, PPO, PPOConfig

SMALL = dict(env="CartPole-v1", num_workers=1, num_envs_per_worker=2, rollout_fragment_length=32,
             train_batch_size=128, sgd_minibatch_size=64, num_sgd_iter=2, model=(16,), seed=0)


@pytest.mark.parametrize("field, value", [
    ("lr", -1.0), ("gamma", 1.5), ("num_workers", -1), ("train_batch_size", 0),
    ("num_sgd_iter", 0), ("clip_param", 0), ("lambda_", 2.0), ("backend", "spark"),
    ("model", (0,)), ("seed", "x"), ("num_envs_per_worker", 1.5)])
def test_bad_config_names_the_field(field, value):
    with pytest.raises(ConfigError, match=rf"PPOConfig\.{field}[.=]"):
        PPOConfig(**{**SMALL, field: value})


def test_unknown_env_is_a_flow_error_naming_it():
    with pytest.raises(FlowError, match="NoSuchEnv-v3"):
        PPOConfig(env="NoSuchEnv-v3")
    with pytest.raises(ConfigError, match="CartPole-v1"):   # a close match is suggested
        PGConfig(env="CartPol-v1")
    with pytest.raises(ConfigError, match=r"PPOConfig\.env=None"):
        PPOConfig()


def test_an_env_id_may_name_the_module_that_registers_it_as_gymnasium_make_does():
    config = PPOConfig(env="gymnasium.envs.classic_control:CartPole-v1")
    assert config.env == "gymnasium.envs.classic_control:CartPole-v1"
    with pytest.raises(ConfigError, match=r"PPOConfig\.env='no_such_module_x:Foo-v0': cannot "
                                          r"import module 'no_such_module_x'"):
        PPOConfig(env="no_such_module_x:Foo-v0")
    with pytest.raises(ConfigError, match="registers no gymnasium env of that id"):
        PPOConfig(env="gymnasium.envs.classic_control:NoSuchEnv-v3")


def test_cross_field_and_multiagent_checks():
    with pytest.raises(ConfigError, match="sgd_minibatch_size"):
        PPOConfig(**{**SMALL, "sgd_minibatch_size": 256})
    with pytest.raises(ConfigError, match="multiagent"):
        PPOConfig(**{**SMALL, "multiagent": {"policys": {}}})


def test_ppo_result_plan_and_counters():
    algo = PPO(PPOConfig(**SMALL))
    r1, r2 = algo.train(), algo.train()
    assert (r1["training_iteration"], r2["training_iteration"]) == (1, 2)
    assert r2["timesteps_total"] == 256 == r2["info"]["num_steps_trained"]
    for key in ("episode_reward_mean", "episode_len_mean", "episodes_total", "time_total_s"):
        assert key in r2
    assert "kl" in r2["info"]["learner"]["default_policy"]
    assert "learn_time_ms" in r2["timers"] and "learn_throughput" in r2["timers"]
    dot = algo.plan.to_dot()
    for label in ("ppo/concat_batches", "ppo/standardize", "ppo/train", "ppo/update_kl"):
        assert label in dot
    assert len(algo.workers.remote_workers()) == 1
    algo.stop()


@pytest.mark.parametrize("algo_cls, config_cls", [(PG, PGConfig), (A2C, A2CConfig)])
def test_pg_and_a2c_train(algo_cls, config_cls):
    algo = algo_cls(config_cls(env="CartPole-v1", num_workers=2, num_envs_per_worker=1,
                               rollout_fragment_length=25, train_batch_size=100, seed=0))
    r = algo.train()
    assert r["timesteps_total"] == 100 and r["info"]["num_steps_trained"] == 100
    assert algo.plan.to_dot().startswith("digraph")
    algo.stop()


def test_save_restore_resumes_counters_weights_and_optimizer(tmp_path):
    algo = PPO(PPOConfig(**{**SMALL, "kl_coeff": 0.2}))
    algo.train(); algo.train()
    path = algo.save(str(tmp_path / "ckpt"))
    weights = algo.get_policy().get_weights()
    opt_state = algo.get_policy().get_state()["optimizer"]
    kl_coeff = algo.get_policy().kl_coeff
    algo.stop()

    fresh = PPO(PPOConfig(**{**SMALL, "kl_coeff": 0.2, "seed": 5}))
    fresh.restore(str(tmp_path / "ckpt"))
    assert all(np.array_equal(weights[k], fresh.get_policy().get_weights()[k]) for k in weights)
    assert fresh.get_policy().kl_coeff == kl_coeff
    restored_opt = fresh.get_policy().get_state()["optimizer"]
    assert restored_opt["state"][0]["step"] == opt_state["state"][0]["step"]
    remote = fresh.workers.remote_workers()[0].get_weights()["default_policy"]
    assert all(np.array_equal(weights[k], remote[k]) for k in weights)
    r = fresh.train()
    assert r["training_iteration"] == 3
    assert r["timesteps_total"] == 384 and r["info"]["num_steps_trained"] == 384
    assert r["timesteps_this_iter"] == 128
    fresh.stop()
    assert path.endswith("ckpt/state.json")
    with pytest.raises(ConfigError, match="checkpoint is from 'ppo'"):
        pg = PG(PGConfig(env="CartPole-v1"))
        try:
            pg.restore(str(tmp_path / "ckpt"))
        finally:
            pg.stop()


def test_restore_in_a_fresh_process_continues(tmp_path):
    algo = PPO(PPOConfig(**SMALL))
    algo.train()
    algo.save(str(tmp_path / "ckpt"))
    algo.stop()
    script = textwrap.dedent(f"""
        import json
        from flowrl.algorithms import PPO, PPOConfig
        algo = PPO(PPOConfig(**{SMALL!r}))
        algo.restore({str(tmp_path / "ckpt")!r})
        r = algo.train()
        print(json.dumps([r["training_iteration"], r["timesteps_total"],
                          r["info"]["num_steps_trained"]]))
        algo.stop()
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=100)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout.strip().splitlines()[-1]) == [2, 256, 256]


@pytest.mark.slow   # the default suite checks PPO's update on a bandit (test_learning_updates)
@pytest.mark.parametrize("backend", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_ppo_learns_cartpole(backend, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    algo = PPO(PPOConfig(env="CartPole-v1", num_workers=2, backend=backend, seed=0))
    assert algo._run.backend == backend
    best = 0.0
    for _ in range(40):
        r = algo.train()
        best = max(best, r["episode_reward_mean"])
        if best >= 150:
            break
    algo.stop()
    assert best >= 150, f"mean return only reached {best:.1f} in {r['timesteps_total']} steps"
