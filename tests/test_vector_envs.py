"""``vector_env``: ``"sync"`` and ``"async"`` vector envs give the same results.

A worker steps its envs as one batch either way; with ``"async"`` each env runs in
a subprocess of the worker. Same seeds, same sampled batches and the same trained
weights on CartPole and on Pong (DeepMind preprocessing, uint8 frames), on both
backends; an env that raises in a subprocess is an EnvError naming the env and the
worker; ``algo.stop()`` ends the subprocesses.
"""

from __future__ import annotations

import os
import time

import gymnasium as gym
import numpy as np
import pytest

from flowrl.algorithms.ppo import PPO, PPOConfig
from flowrl.errors import ConfigError, EnvError
from flowrl.policies import PPOPolicy
from flowrl.workers import RolloutWorker

SMALL_CNN = {"conv_filters": [[8, 8, 4], [8, 4, 4]], "post_fcnet_hiddens": [32]}


def _ppo(env: str, vector_env: str, backend: str) -> PPOConfig:
    atari = env.startswith("ALE/")
    return PPOConfig(env=env, vector_env=vector_env, backend=backend,
                     num_workers=1 if backend == "ray" else 0, num_envs_per_worker=3,
                     rollout_fragment_length=8 if atari else 32,
                     train_batch_size=24 if atari else 96, sgd_minibatch_size=24,
                     num_sgd_iter=2, seed=3, num_cpus_per_worker=0,
                     model=SMALL_CNN if atari else {})


def _train(config: PPOConfig, iterations: int):
    algo = PPO(config)
    try:
        results = [algo.train() for _ in range(iterations)]
        weights = algo.workers.local_worker().get_weights()
    finally:
        algo.stop()
    return results, weights


@pytest.mark.timeout(240)
@pytest.mark.parametrize("env, backend", [
    ("CartPole-v1", "local"), ("ALE/Pong-v5", "local"),
    pytest.param("CartPole-v1", "ray", marks=pytest.mark.ray)])
def test_async_trains_exactly_as_sync(request, backend, env):
    if env.startswith("ALE/"):
        pytest.importorskip("ale_py")
    if backend == "ray":
        request.getfixturevalue("ray_session")
    iterations = 2 if env.startswith("ALE/") else 3
    runs = {kind: _train(_ppo(env, kind, backend), iterations) for kind in ("sync", "async")}
    (sync_results, sync_w), (async_results, async_w) = runs["sync"], runs["async"]
    assert sync_w.keys() == async_w.keys()
    for pid in sync_w:
        for k in sync_w[pid]:
            np.testing.assert_array_equal(sync_w[pid][k], async_w[pid][k], err_msg=k)
    for a, b in zip(sync_results, async_results):
        for k in ("timesteps_total", "episodes_this_iter", "episode_reward_mean",
                  "episode_reward_min", "episode_reward_max", "episode_len_mean"):
            np.testing.assert_equal(a[k], b[k], err_msg=k)


@pytest.mark.timeout(120)
def test_async_worker_samples_uint8_frames_like_sync():
    pytest.importorskip("ale_py")
    batches = {}
    for kind in ("sync", "async"):
        w = RolloutWorker("ALE/Pong-v5", policy=PPOPolicy, policy_config={"model": SMALL_CNN},
                          num_envs=2, rollout_fragment_length=6, seed=5, vector_env=kind)
        try:
            batches[kind] = [w.sample(), w.sample()]
        finally:
            w.stop()
    for a, b in zip(batches["sync"], batches["async"]):
        assert a["obs"].dtype == np.uint8 and a["obs"].shape == (12, 4, 84, 84)
        assert sorted(a.keys()) == sorted(b.keys())
        for k in a.keys():
            np.testing.assert_array_equal(a[k], b[k], err_msg=k)


class StepFails(gym.Env):
    """Raises in ``step`` once it has taken ``fail_at`` steps."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, fail_at=3):
        self.fail_at, self.t = fail_at, 0

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(2, np.float32), {}

    def step(self, action):
        self.t += 1
        if self.t >= self.fail_at:
            raise RuntimeError(f"the emulator crashed at step {self.t}")
        return np.zeros(2, np.float32), 0.0, False, False, {}


def step_fails(env_config):
    return StepFails(**env_config)


@pytest.mark.timeout(60)
@pytest.mark.parametrize("vector_env", ["sync", "async"])
def test_a_crashing_env_is_an_env_error_naming_env_and_worker(vector_env):
    w = RolloutWorker(step_fails, env_config={"fail_at": 3}, policy=PPOPolicy, num_envs=2,
                      rollout_fragment_length=5, worker_index=4, vector_env=vector_env)
    try:
        with pytest.raises(EnvError, match=r"^env step_fails raised RuntimeError in its step on "
                                           r"worker 4: .*the emulator crashed at step 3"):
            w.sample()
    finally:
        w.stop()


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_a_crashing_env_under_async_on_ray_surfaces_the_env_error(ray_session):
    algo = PPO(PPOConfig(env=step_fails, env_config={"fail_at": 3}, vector_env="async",
                         backend="ray", num_workers=1, num_envs_per_worker=2,
                         rollout_fragment_length=8, train_batch_size=16,
                         sgd_minibatch_size=16, num_cpus_per_worker=0,
                         recreate_failed_workers=False))
    try:
        with pytest.raises(Exception) as info:
            algo.train()
    finally:
        algo.stop()
    text = "".join(str(e) for e in _chain(info.value))
    assert "EnvError" in text or any(isinstance(e, EnvError) for e in _chain(info.value))
    assert "env step_fails raised RuntimeError in its step on worker 1" in text


def _chain(error):
    while error is not None:
        yield error
        error = error.__cause__ or error.__context__


def _gone(pid: int) -> bool:
    """Whether process ``pid`` has ended (a zombie waiting to be reaped counts)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def _env_pids(worker) -> list[int]:
    return [p.pid for p in worker.envs[0].processes]


@pytest.mark.timeout(120)
@pytest.mark.parametrize("backend", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_stop_ends_the_env_subprocesses(request, backend):
    if backend == "ray":
        ray = request.getfixturevalue("ray_session")
    algo = PPO(_ppo("CartPole-v1", "async", backend))
    try:
        algo.train()
        if backend == "ray":  # the driver's worker has no env (create_env_on_driver=False)
            pids = ray.get(algo.workers.remote_workers()[0].apply.remote(_env_pids))
        else:
            pids = _env_pids(algo.workers.local_worker())
        assert len(pids) == 3 and not any(_gone(p) for p in pids)
    finally:
        algo.stop()
    # subprocesses that never end are caught by the test's timeout, not a clock here
    while not all(_gone(p) for p in pids):
        time.sleep(0.1)


def test_vector_env_must_be_a_known_kind():
    with pytest.raises(ConfigError, match=r"PPOConfig\.vector_env='gymnasium': must be one of "
                                          r"\['sync', 'async', 'envpool'\]"):
        PPOConfig(env="CartPole-v1", vector_env="gymnasium")
    with pytest.raises(ConfigError, match=r"RolloutWorker\(vector_env='threads'\): choose one of"):
        RolloutWorker("CartPole-v1", policy=PPOPolicy, vector_env="threads")


# -- EnvPool (skipped where it is not installed) -------------------------------------
def test_envpool_takes_ale_ids_with_their_preprocessing_only():
    with pytest.raises(ConfigError, match=r"PPOConfig\.vector_env='envpool': vector_env='envpool' "
                                          r"steps ALE/\.\.\.-v5 envs only, not 'CartPole-v1'"):
        PPOConfig(env="CartPole-v1", vector_env="envpool")
    pytest.importorskip("ale_py")
    with pytest.raises(ConfigError, match=r"always applies the DeepMind preprocessing; set "
                                          r"preprocessor_pref='deepmind'"):
        PPOConfig(env="ALE/Pong-v5", vector_env="envpool", preprocessor_pref=None)
    with pytest.raises(ConfigError, match=r"env_config key 'mode' is not one EnvPool takes"):
        PPOConfig(env="ALE/Pong-v5", vector_env="envpool", env_config={"mode": 1})
    with pytest.raises(ConfigError, match=r"screen_size=10 must be an int of at least 16"):
        PPOConfig(env="ALE/Pong-v5", vector_env="envpool", env_config={"screen_size": 10})


@pytest.mark.timeout(120)
def test_envpool_resets_in_the_step_that_ends_and_reports_whole_games():
    pytest.importorskip("envpool")
    from flowrl.envs.envpool_env import EnvPoolVectorEnv
    venv = EnvPoolVectorEnv("ALE/Breakout-v5", 2, training=True, num_threads=1)
    rng = np.random.default_rng(0)
    try:
        obs, info = venv.reset(seed=3)
        assert obs.dtype == np.uint8 and obs.shape == (2, 4, 84, 84)
        steps, lives_lost, games = np.zeros(2, int), 0, []
        while len(games) < 1:
            obs, rewards, terms, truncs, infos = venv.step(rng.integers(4, size=2))
            steps += 1
            assert set(np.unique(rewards)) <= {-1.0, 0.0, 1.0}   # clipped for training
            done = terms | truncs
            for i in np.flatnonzero(done):
                assert infos["final_obs"][i].shape == (4, 84, 84)
                # the next episode starts in this step: its first frames, not the last ones
                assert not np.array_equal(infos["final_obs"][i], obs[i])
                ended = infos["final_info"].get("_episode", np.zeros(2, bool))[i]
                if ended:   # a whole game: every step since the game began
                    games.append((float(infos["final_info"]["episode"]["r"][i]),
                                  int(infos["final_info"]["episode"]["l"][i]), int(steps[i])))
                    steps[i] = 0
                else:       # a lost life ends the training episode, not the game
                    assert infos["lives"][i] > 0
                    lives_lost += 1
        assert lives_lost >= 4          # Breakout: 5 lives per game
        score, length, taken = games[0]
        assert score >= 0 and length == taken
    finally:
        venv.close()


@pytest.mark.timeout(120)
def test_envpool_without_a_seed_draws_fresh_noop_starts_and_with_one_repeats():
    # Breakout's first frames show how many no-ops the start took; pools made with
    # one seed would all start alike, as every worker's did with seed=None
    pytest.importorskip("envpool")
    from flowrl.envs.envpool_env import EnvPoolVectorEnv

    def first_obs(seed=None):
        venv = EnvPoolVectorEnv("ALE/Breakout-v5", 4, training=True, num_threads=1)
        try:
            return venv.reset(seed=seed)[0]
        finally:
            venv.close()

    unseeded = [first_obs().tobytes() for _ in range(4)]
    assert len(set(unseeded)) > 1
    assert np.array_equal(first_obs(seed=5), first_obs(seed=5))


@pytest.mark.timeout(120)
def test_a_worker_samples_pong_through_envpool():
    pytest.importorskip("envpool")
    w = RolloutWorker("ALE/Pong-v5", policy=PPOPolicy, policy_config={"model": SMALL_CNN},
                      num_envs=2, rollout_fragment_length=20, seed=1, vector_env="envpool",
                      torch_threads=1)
    try:
        b = w.sample()
    finally:
        w.stop()
    assert b["obs"].dtype == np.uint8 and b["obs"].shape == (40, 4, 84, 84)
    assert "new_obs" not in b and np.isfinite(b["advantages"]).all()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("vector_env", ["sync", "envpool"])
def test_pong_at_screen_size_42_samples_42x42_frames_into_the_42x42_conv_stack(vector_env):
    pytest.importorskip("ale_py")
    if vector_env == "envpool":
        pytest.importorskip("envpool")
    from flowrl.models.visionnet import DEFAULT_CONV
    w = RolloutWorker("ALE/Pong-v5", env_config={"screen_size": 42}, policy=PPOPolicy,
                      num_envs=2, rollout_fragment_length=20, seed=1, vector_env=vector_env,
                      torch_threads=1)
    try:
        b = w.sample()
        first_conv = w.get_policy().model.trunk[0]
    finally:
        w.stop()
    assert b["obs"].dtype == np.uint8 and b["obs"].shape == (40, 4, 42, 42)
    filters, _ = DEFAULT_CONV[(42, 42)]
    assert (first_conv.out_channels, first_conv.kernel_size[0]) == filters[0][:2]
    assert len(np.unique(b["obs"][:, -1].reshape(40, -1), axis=0)) > 10   # frames move
