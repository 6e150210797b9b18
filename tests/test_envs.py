"""flowrl.envs: memory tasks, MinAtar pixels, Atari with the DeepMind preprocessing,
and the plumbing that lets workers and the CLI build them from an id string.

Expectations are built by hand: StatelessCartPole against CartPole itself, CueRecall
against what a memoryless and a remembering agent can know, Atari scores against
the raw rewards recorded beneath the wrappers. Atari tests play one short random
game each.
"""

from __future__ import annotations

import sys

import gymnasium as gym
import numpy as np
import pytest

import flowrl.envs  # noqa: F401  (registers the flowrl/ ids)
from flowrl.envs import CueRecall, reports_episode_infos
from flowrl.errors import ConfigError
from flowrl.workers.rollout_worker import make_env_creator


# -- StatelessCartPole -----------------------------------------------------------------

def test_stateless_cartpole_is_cartpole_without_velocities():
    full, stateless = gym.make("CartPole-v1"), gym.make("flowrl/StatelessCartPole-v1")
    assert stateless.spec.max_episode_steps == full.spec.max_episode_steps == 500
    space = stateless.observation_space
    assert space.shape == (2,)
    np.testing.assert_array_equal(space.high, full.observation_space.high[[0, 2]])
    rng = np.random.default_rng(0)
    for seed in range(3):
        a, _ = full.reset(seed=seed)
        b, _ = stateless.reset(seed=seed)
        np.testing.assert_array_equal(b, a[[0, 2]])
        done = False
        while not done:
            action = int(rng.integers(2))
            a, ra, ta, ua, _ = full.step(action)
            b, rb, tb, ub, _ = stateless.step(action)
            np.testing.assert_array_equal(b, a[[0, 2]])
            assert (ra, ta, ua) == (rb, tb, ub)
            done = ta or ua


def test_stateless_cartpole_keeps_the_500_step_limit():
    env = gym.make("flowrl/StatelessCartPole-v1")
    env.reset(seed=0)
    env.unwrapped.theta_threshold_radians = np.inf  # the pole may fall; only time ends it
    env.unwrapped.x_threshold = np.inf
    steps, truncated, terminated = 0, False, False
    while not (truncated or terminated):
        _, _, terminated, truncated, _ = env.step(steps % 2)
        steps += 1
    assert (steps, truncated, terminated) == (500, True, False)


# -- CueRecall ---------------------------------------------------------------------------

def play_cue_recall(env, seed: int, policy) -> tuple[list[np.ndarray], float, int]:
    """One episode; ``policy(history) -> action`` sees every observation so far."""
    obs, _ = env.reset(seed=seed)
    history, total, done = [obs], 0.0, False
    while not done:
        obs, reward, terminated, truncated, _ = env.step(policy(history))
        total += reward
        done = terminated or truncated
        if not done:
            history.append(obs)
    return history, total, len(history)


def test_cue_is_visible_at_the_first_step_only():
    env = CueRecall(num_cues=4, delay=3)
    cues, later = set(), set()
    for seed in range(60):
        history, _, length = play_cue_recall(env, seed, lambda h: 0)
        assert length == 4
        first = history[0]
        cue = int(np.flatnonzero(first[:4])[0])
        assert first.tolist() == [float(i == cue) for i in range(4)] + [1.0, 0.0]
        cues.add(cue)
        later.add(tuple(np.concatenate(history[1:]).tolist()))
    assert cues == {0, 1, 2, 3}
    # every episode's later observations are the same, whatever its cue: blank, then
    # the answer flag at the last step
    assert later == {(0.0,) * 6 + (0.0,) * 6 + (0.0,) * 5 + (1.0,)}


def test_memoryless_policies_score_chance_and_memory_scores_one():
    env = gym.make("flowrl/CueRecall-v0", num_cues=4, delay=5)
    n = 2000
    for action in range(4):  # a memoryless agent answers the same at the answer step
        mean = np.mean([play_cue_recall(env, seed, lambda h, a=action: a)[1]
                        for seed in range(n)])
        assert abs(mean - 0.25) < 0.04, (action, mean)   # 4 standard errors

    def oracle(history):
        return int(np.argmax(history[0][:4]))

    returns = [play_cue_recall(env, seed, oracle)[1] for seed in range(200)]
    assert returns == [1.0] * 200


def test_cue_recall_is_seeded_by_reset():
    env = CueRecall(num_cues=5, delay=1)
    first = [env.reset(seed=s)[0].tolist() for s in range(20)]
    assert first == [env.reset(seed=s)[0].tolist() for s in range(20)]
    assert len({tuple(o) for o in first}) > 1


def test_cue_recall_rejects_bad_arguments():
    with pytest.raises(ConfigError, match=r"CueRecall\(delay=0\): must be an int >= 1"):
        CueRecall(delay=0)
    with pytest.raises(ConfigError, match=r"CueRecall\(num_cues=1\)"):
        gym.make("flowrl/CueRecall-v0", num_cues=1)
    env = CueRecall(num_cues=2, delay=1)
    env.reset(seed=0)
    env.step(0), env.step(0)
    with pytest.raises(gym.error.ResetNeeded):
        env.step(0)


# -- MinAtar -----------------------------------------------------------------------------

def test_minatar_breakout_is_a_channels_first_uint8_image():
    pytest.importorskip("minatar")
    env = gym.make("flowrl/MinAtarBreakout-v0")
    assert env.observation_space == gym.spaces.Box(0, 255, (4, 10, 10), np.uint8)
    assert env.action_space == gym.spaces.Discrete(3)
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 10, 10) and obs.dtype == np.uint8
    assert set(np.unique(obs)) <= {0, 255}
    # MinAtar breakout's channels: 0 paddle (one cell of the bottom row), 3 bricks
    # (rows 1 to 3); channels first puts them at obs[c, row, col]
    assert obs[0, 9].tolist().count(255) == 1 and not obs[0, :9].any()
    assert (obs[3, 1:4] == 255).all() and not obs[3, 4:].any()
    rng = np.random.default_rng(0)
    total, done, steps = 0.0, False, 0
    while not done:
        obs, reward, terminated, truncated, _ = env.step(int(rng.integers(3)))
        assert obs in env.observation_space
        total += reward
        done, steps = terminated or truncated, steps + 1
    assert terminated and steps > 1 and total >= 0


def test_minatar_is_seeded_by_reset_and_passes_gymnasiums_checker():
    pytest.importorskip("minatar")
    from gymnasium.utils.env_checker import check_env

    def rollout(seed):
        env = gym.make("flowrl/MinAtarBreakout-v0")
        frames = [env.reset(seed=seed)[0]]
        for t in range(60):
            obs, _, terminated, truncated, _ = env.step(t % 3)
            frames.append(obs)
            if terminated or truncated:
                frames.append(env.reset()[0])
        return np.stack(frames)

    np.testing.assert_array_equal(rollout(1), rollout(1))
    assert not np.array_equal(rollout(1), rollout(2))
    check_env(gym.make("flowrl/MinAtarBreakout-v0").unwrapped, skip_render_check=True)


def test_minatar_missing_or_unknown_game_is_a_config_error(monkeypatch):
    from flowrl.envs.pixels import MinAtarEnv
    with pytest.raises(ConfigError, match=r"unknown MinAtar game; choose one of"):
        MinAtarEnv("pong")
    monkeypatch.setitem(sys.modules, "minatar", None)   # import minatar fails
    with pytest.raises(ConfigError, match=r"pip install 'flowrl\[minatar\]'"):
        gym.make("flowrl/MinAtarBreakout-v0")


# -- Atari -------------------------------------------------------------------------------

class RawRewards(gym.Wrapper):
    """Records every reward of the env beneath, since its last reset."""

    def reset(self, **kwargs):
        self.rewards = []
        return self.env.reset(**kwargs)

    def step(self, action):
        out = self.env.step(action)
        self.rewards.append(out[1])
        return out


def atari_with_raw_rewards(game: str, training: bool):
    from flowrl.envs.atari import wrap_deepmind
    pytest.importorskip("ale_py")
    pytest.importorskip("cv2")
    flowrl.envs.ensure_registered(f"ALE/{game}-v5")
    raw = RawRewards(gym.make(f"ALE/{game}-v5", frameskip=1, repeat_action_probability=0.0))
    return wrap_deepmind(raw, training=training), raw


def test_atari_deepmind_observations():
    pytest.importorskip("ale_py")
    env = flowrl.envs.make_atari("ALE/Breakout-v5", {})
    assert env.observation_space == gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    base = env.unwrapped
    assert base._frameskip == 1 and base.ale.getFloat("repeat_action_probability") == 0.0
    obs, _ = env.reset(seed=0)
    assert obs.shape == (4, 84, 84) and obs.dtype == np.uint8
    assert all(np.array_equal(obs[0], obs[i]) for i in range(4))  # stack padded with it
    frames = [obs[-1]]
    for action in [1, 2, 2, 3]:   # FIRE launches the ball, then the paddle moves
        obs, *_ = env.step(action)
        frames.append(obs[-1])
    # the newest frame is last: the stack holds the last 4 frames, oldest first
    assert all(np.array_equal(obs[i], frames[i + 1]) for i in range(4))
    assert not np.array_equal(frames[0], frames[-1])


def test_atari_grayscale_inner_env_gives_the_observations_of_an_rgb_one():
    """make_atari makes the inner ALE env with obs_type="grayscale" (its cheapest
    screen copy) because AtariPreprocessing reads the screen from the emulator
    itself; if a gymnasium or ale-py release starts using the inner observation,
    the frames differ and this fails."""
    pytest.importorskip("ale_py")
    from flowrl.envs.atari import wrap_deepmind
    env = flowrl.envs.make_atari("ALE/Pong-v5", {})
    assert env.unwrapped._obs_type == "grayscale"
    rgb = wrap_deepmind(gym.make("ALE/Pong-v5", frameskip=1, repeat_action_probability=0.0,
                                 obs_type="rgb"))
    actions = np.random.default_rng(0).integers(6, size=300)
    runs = []
    for e in (env, rgb):
        obs, _ = e.reset(seed=3)
        frames = [obs]
        for a in actions:
            obs, _, term, trunc, _ = e.step(int(a))
            frames.append(obs)
            if term or trunc:
                frames.append(e.reset()[0])
        runs.append(np.stack(frames))
    assert runs[0].shape == runs[1].shape and np.array_equal(runs[0], runs[1])


def test_atari_screen_size_resizes_the_frames_and_never_reaches_gymnasium_make():
    """env_config screen_size=42 gives (4, 42, 42) frames that are the 84x84 ones'
    game resized (the same game, step for step), and the key is the preprocessing's:
    the ALE env is made without it."""
    pytest.importorskip("ale_py")
    cv2 = pytest.importorskip("cv2")
    config = {"screen_size": 42}
    small = flowrl.envs.make_atari("ALE/Pong-v5", config)
    big = flowrl.envs.make_atari("ALE/Pong-v5", {})
    assert config == {"screen_size": 42}                     # the caller's dict is untouched
    assert small.observation_space == gym.spaces.Box(0, 255, (4, 42, 42), np.uint8)
    obs_small, _ = small.reset(seed=5)
    obs_big, _ = big.reset(seed=5)
    for a in np.random.default_rng(1).integers(6, size=60):
        obs_small, *_ = small.step(int(a))
        obs_big, *_ = big.step(int(a))
    assert obs_small.shape == (4, 42, 42) and obs_small.dtype == np.uint8
    # both are resizes of the same screen: the 84x84 frame shrunk to 42x42 is within
    # rounding of it (an older frame of the stack, with the ball elsewhere, is not)
    shrunk = cv2.resize(obs_big[-1], (42, 42), interpolation=cv2.INTER_AREA).astype(int)
    assert np.abs(shrunk - obs_small[-1]).max() <= 2
    assert np.abs(shrunk - obs_small[0]).max() > 20


def test_atari_env_config_reaches_the_ale_env():
    pytest.importorskip("ale_py")
    env = flowrl.envs.make_atari("ALE/Breakout-v5", {"repeat_action_probability": 0.25,
                                                     "full_action_space": True})
    assert env.unwrapped.ale.getFloat("repeat_action_probability") == 0.25
    assert env.action_space == gym.spaces.Discrete(18)
    raw = flowrl.envs.make_atari("ALE/Breakout-v5", {}, preprocessor_pref=None)
    assert raw.observation_space.shape == (210, 160, 3)
    assert raw.unwrapped._frameskip == 4     # ale-py's v5 defaults, untouched
    assert not reports_episode_infos(raw)


def test_atari_training_clips_rewards_and_ends_episodes_at_each_life():
    env, raw = atari_with_raw_rewards("SpaceInvaders", training=True)
    ale = env.unwrapped.ale
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    assert ale.lives() == 3
    clipped, steps, episodes = [], 0, []
    while True:
        _, reward, terminated, truncated, info = env.step(int(rng.integers(6)))
        clipped.append(reward)
        steps += 1
        if terminated or truncated:
            episodes.append(info.get("episode"))
            if "episode" in info:
                break
            lives, frame = ale.lives(), ale.getEpisodeFrameNumber()
            env.reset()
            # the game goes on: same lives, clock running (a no-op step of 4 frames)
            assert ale.lives() == lives and ale.getEpisodeFrameNumber() == frame + 4
    assert set(clipped) <= {-1.0, 0.0, 1.0}
    assert len(episodes) == 3 and episodes[:2] == [None, None]   # one per life
    score = episodes[-1]
    # the whole game's raw score: every reward beneath the wrappers, unclipped
    assert score["r"] == sum(raw.rewards) > sum(clipped) > 0
    # its length counts the agent's steps plus the no-op step after each life loss
    assert score["l"] == steps + 2


def test_atari_evaluation_plays_whole_games_with_raw_rewards():
    env, raw = atari_with_raw_rewards("SpaceInvaders", training=False)
    rng = np.random.default_rng(0)
    env.reset(seed=0)
    rewards, done = [], False
    while not done:
        _, reward, terminated, truncated, info = env.step(int(rng.integers(6)))
        rewards.append(reward)
        done = terminated or truncated
    assert env.unwrapped.ale.lives() == 0 and terminated
    assert max(rewards) > 1                             # SpaceInvaders scores 5 and up
    assert info["episode"]["r"] == sum(rewards) == sum(raw.rewards)
    assert info["episode"]["l"] == len(rewards)


def test_atari_config_errors(monkeypatch, tmp_path):
    pytest.importorskip("ale_py")
    from flowrl.envs import make_atari
    with pytest.raises(ConfigError, match=r"preprocessor_pref='rllib' is unknown"):
        make_atari("ALE/Breakout-v5", {}, preprocessor_pref="rllib")
    with pytest.raises(ConfigError, match=r"frameskip=4 with preprocessor_pref='deepmind'"):
        make_atari("ALE/Breakout-v5", {"frameskip": 4})
    for bad in (8, 42.0, "42", True):
        with pytest.raises(ConfigError,
                           match=rf"screen_size={bad!r} must be an int of at least 16"):
            make_atari("ALE/Breakout-v5", {"screen_size": bad})
    with pytest.raises(ConfigError, match=r"screen_size=42 sizes the DeepMind preprocessing, "
                                          r"which preprocessor_pref=None turns off"):
        make_atari("ALE/Breakout-v5", {"screen_size": 42}, preprocessor_pref=None)
    with monkeypatch.context() as m:
        m.setenv("ALE_ROMS_DIR", str(tmp_path))          # a ROM directory without breakout
        with pytest.raises(ConfigError, match=r"ROM of game 'breakout' \(breakout.bin\)"):
            make_atari("ALE/Breakout-v5", {})
    with monkeypatch.context() as m:
        m.setitem(sys.modules, "cv2", None)
        with pytest.raises(ConfigError, match=r"needs OpenCV.*pip install 'flowrl\[atari\]'"):
            make_atari("ALE/Breakout-v5", {})


def test_missing_ale_py_is_a_config_error_naming_the_extra(monkeypatch):
    from flowrl.algorithms.pg import PGConfig
    monkeypatch.setitem(sys.modules, "ale_py", None)      # import ale_py fails
    with pytest.raises(ConfigError, match=r"make_atari\('ALE/Pong-v5'\): ALE envs need ale-py"
                                          r".*pip install 'flowrl\[atari\]'"):
        flowrl.envs.make_atari("ALE/Pong-v5", {})
    with pytest.raises(ConfigError, match=r"PGConfig.env='ALE/Pong-v5': .*flowrl\[atari\]"):
        PGConfig(env="ALE/Pong-v5")


# -- reports_episode_infos ---------------------------------------------------------------

def test_reports_episode_infos_walks_the_wrapper_chain():
    stats = gym.wrappers.RecordEpisodeStatistics
    cartpole = gym.make("CartPole-v1")
    assert not reports_episode_infos(cartpole)
    assert reports_episode_infos(stats(cartpole))
    assert reports_episode_infos(gym.wrappers.TransformReward(stats(cartpole), float))
    assert not reports_episode_infos(gym.wrappers.TransformReward(cartpole, float))
    assert not reports_episode_infos(None) and not reports_episode_infos(object())

    class Loop:
        pass

    loop = Loop()
    loop.env = loop                                          # a chain that never ends
    assert not reports_episode_infos(loop)


def test_atari_chains_report_whole_games():
    pytest.importorskip("ale_py")
    for training in (True, False):
        assert reports_episode_infos(make_env_creator("ALE/Breakout-v5", {},
                                                  training=training)())


# -- plumbing: workers, config, CLI ------------------------------------------------------

def test_env_creator_registers_flowrl_ids_in_a_fresh_process(monkeypatch):
    # a Ray worker starts without flowrl.envs imported: the id is unknown there
    monkeypatch.delitem(gym.registry, "flowrl/CueRecall-v0")
    env = make_env_creator("flowrl/CueRecall-v0", {"num_cues": 3, "delay": 2})()
    assert env.observation_space.shape == (5,) and env.unwrapped.delay == 2


def test_env_creator_wraps_ale_ids_by_preprocessor_pref():
    pytest.importorskip("ale_py")
    from flowrl.envs.atari import EpisodicLifeEnv

    def has_episodic_life(env):
        while env is not None:
            if isinstance(env, EpisodicLifeEnv):
                return True
            env = getattr(env, "env", None)
        return False

    train = make_env_creator("ALE/Breakout-v5", {}, "deepmind")()
    assert train.observation_space.shape == (4, 84, 84) and has_episodic_life(train)
    evaluate = make_env_creator("ALE/Breakout-v5", {}, "deepmind", training=False)()
    assert evaluate.observation_space.shape == (4, 84, 84) and not has_episodic_life(evaluate)
    assert make_env_creator("ALE/Breakout-v5", {}, None)().observation_space.shape == (210, 160, 3)


def test_preprocessor_pref_is_validated_and_travels_to_workers():
    pytest.importorskip("ale_py")
    from flowrl.algorithms.pg import PG, PGConfig
    from flowrl.policies import PGPolicy
    from flowrl.workers.rollout_worker import RolloutWorker
    with pytest.raises(ConfigError, match=r"PGConfig.preprocessor_pref='rllib': must be one "
                                          r"of \['deepmind'\] or None"):
        PGConfig(env="CartPole-v1", preprocessor_pref="rllib")
    assert PGConfig(env="CartPole-v1").preprocessor_pref == "deepmind"
    for pref, shape in (("deepmind", (4, 84, 84)), (None, (210, 160, 3))):
        # raw frames have no default conv stack: the config names one
        model = {} if pref else {"conv_filters": [[16, 8, 4], [32, 4, 4]]}
        config = PGConfig(env="ALE/Breakout-v5", preprocessor_pref=pref, model=model)
        kwargs = PG.worker_config(config).worker_kwargs(PGPolicy)
        worker = RolloutWorker(config.env, worker_index=1, **kwargs)
        assert worker.env.observation_space.shape == shape
        worker.stop()


def test_cli_trains_on_a_flowrl_env(tmp_path, capsys):
    from flowrl.cli import main
    argv = ["train", "ppo", "--env", "flowrl/StatelessCartPole-v1", "--stop-iters", "1",
            "--run-dir", str(tmp_path), "--quiet", "--no-tensorboard", "--num-workers", "0",
            "--set", "train_batch_size=64", "--set", "rollout_fragment_length=64",
            "--set", "sgd_minibatch_size=32", "--set", "num_sgd_iter=1",
            "--set", "preprocessor_pref=null"]
    assert main(argv) == 0, capsys.readouterr().err
    assert list(tmp_path.glob("ppo-flowrl_StatelessCartPole-v1-*/result.jsonl"))
