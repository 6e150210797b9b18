"""Inference from checkpoints: ``Algorithm.from_checkpoint``, ``compute_single_action``
and ``predict``, ``flowrl evaluate --video`` and ``flowrl export``."""

from __future__ import annotations

import os
import sys

import gymnasium as gym
import numpy as np
import pytest
import torch

from flowrl import checkpoint
from flowrl.algorithms import DQN, IMPALA, PG, PPO, Algorithm, DQNConfig, IMPALAConfig, PPOConfig
from flowrl.cli import main
from flowrl.errors import ConfigError

SMALL_PPO = ["--set", "rollout_fragment_length=64", "--set", "train_batch_size=64",
             "--set", "sgd_minibatch_size=32", "--set", "num_sgd_iter=1",
             "--set", "num_envs_per_worker=1"]


@pytest.fixture(scope="module")
def ppo_run(tmp_path_factory):
    """A ``flowrl train`` run directory: PPO on CartPole-v1 with one remote worker,
    one iteration."""
    root = tmp_path_factory.mktemp("runs")
    assert main(["train", "ppo", "--env", "CartPole-v1", *SMALL_PPO, "--num-workers", "1",
                 "--stop-iters", "1", "--run-dir", str(root), "--seed", "0", "--quiet",
                 "--no-tensorboard"]) == 0
    (run_dir,) = list(root.iterdir())
    return run_dir


def saved_weights(path) -> dict[str, np.ndarray]:
    return checkpoint.read_checkpoint(str(path))["worker"]["policies"]["default_policy"][
        "weights"]


def cartpole_observations(n: int, seed: int = 0) -> np.ndarray:
    """``n`` observations of CartPole-v1 met by random play."""
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(seed)
    obs, _ = env.reset(seed=seed)
    out = []
    for _ in range(n):
        out.append(obs)
        obs, _, terminated, truncated, _ = env.step(int(rng.integers(2)))
        if terminated or truncated:
            obs, _ = env.reset()
    return np.stack(out)


def minatar_observations(n: int) -> np.ndarray:
    env = gym.make("flowrl/MinAtarBreakout-v0")
    obs, _ = env.reset(seed=0)
    out = []
    for _ in range(n):
        out.append(obs)
        obs, _, terminated, truncated, _ = env.step(env.action_space.sample())
        if terminated or truncated:
            obs, _ = env.reset()
    return np.stack(out)


# -- Algorithm.from_checkpoint -----------------------------------------------------
@pytest.mark.parametrize("where", ["run", "checkpoints", "checkpoint", "state.json"])
def test_from_checkpoint_on_algorithm_rebuilds_the_saved_algorithm_without_remote_workers(
        ppo_run, where):
    path = {"run": ppo_run, "checkpoints": ppo_run / "checkpoint",
            "checkpoint": ppo_run / "checkpoint" / "checkpoint_000001",
            "state.json": ppo_run / "checkpoint" / "checkpoint_000001" / "state.json"}[where]
    with Algorithm.from_checkpoint(str(path)) as algo:
        assert type(algo) is PPO
        assert algo.config.train_batch_size == 64 and algo.config.sgd_minibatch_size == 32
        assert algo.config.seed == 0 and algo.config.env == "CartPole-v1"
        assert algo.config.num_workers == 0 and algo.config.backend == "local"
        assert algo.workers.remote_workers() == []
        assert algo.metrics.counters["training_iteration"] == 1
        weights = algo.get_policy().get_weights()
        saved = saved_weights(path)
        assert weights.keys() == saved.keys()
        for name in weights:
            np.testing.assert_array_equal(weights[name], saved[name])


def test_from_checkpoint_on_a_subclass_checks_the_algorithm_and_takes_changes(ppo_run):
    with pytest.raises(ConfigError, match=r"DQN\.from_checkpoint\(.*\): the checkpoint is from "
                       r"'ppo', not 'dqn'; call it on that algorithm's class"):
        DQN.from_checkpoint(str(ppo_run))
    with PPO.from_checkpoint(str(ppo_run), num_workers=1, lr=5e-4) as algo:
        assert len(algo.workers.remote_workers()) == 1 and algo.config.lr == 5e-4
        assert [g["lr"] for g in algo.get_policy().optimizer.param_groups] == [5e-4]
        before = algo.metrics.counters["num_steps_sampled"]
        assert algo.train()["timesteps_total"] == before + 64   # it trains on


def test_from_checkpoint_keeps_the_one_worker_an_actor_learner_algorithm_needs(tmp_path):
    with IMPALA(IMPALAConfig(env="CartPole-v1", num_workers=2, num_aggregation_workers=1,
                             rollout_fragment_length=20, train_batch_size=40, seed=0)) as algo:
        algo.save(str(tmp_path / "impala"))
    with Algorithm.from_checkpoint(str(tmp_path / "impala")) as algo:
        assert type(algo) is IMPALA
        assert (algo.config.num_workers, algo.config.num_aggregation_workers) == (1, 0)
        assert algo.config.backend == "local" and algo.compute_single_action(np.zeros(4)) in (0, 1)


@pytest.mark.parametrize("name, saved, want", [
    ("pg", {}, ("local", 0)), ("ppo", {}, ("local", 0)), ("a2c", {}, ("local", 0)),
    ("dqn", {}, ("local", 0)), ("impala", {"num_aggregation_workers": 2}, ("local", 1)),
    ("appo", {}, ("local", 1)), ("a3c", {}, ("local", 1)), ("apex", {}, ("local", 1)),
    ("ddppo", {}, ("ray", 1)),      # DD-PPO runs on Ray only
])
def test_inference_config_keeps_the_fewest_workers_each_algorithm_runs_with(name, saved, want):
    from flowrl.algorithms import ALGORITHMS
    cls = ALGORITHMS[name]
    config = cls.config_class(env="CartPole-v1", backend="ray", num_workers=4,
                              evaluation_interval=1, evaluation_num_workers=2, **saved)
    acting = cls.inference_config(config)
    assert (acting.backend, acting.num_workers, acting.evaluation_num_workers) == (*want, 0)
    assert acting.evaluation_interval == 1 and acting.gamma == config.gamma


def test_from_checkpoint_reads_a_tune_trial_and_its_checkpoints(tmp_path):
    from flowrl.tune import trainable
    trial = trainable("pg")(config=dict(env="CartPole-v1", rollout_fragment_length=50,
                                        train_batch_size=50, seed=0))
    try:
        for i in range(2):        # as Tune lays a trial out: checkpoint_NNNNNN/algorithm/
            trial.train()
            trial.save(str(tmp_path / "trial" / checkpoint.checkpoint_name(i)))
        last = trial.algo.get_policy().get_weights()
    finally:
        trial.stop()
    for path, iteration in ((tmp_path / "trial", 2),
                            (tmp_path / "trial" / "checkpoint_000000", 1)):
        with Algorithm.from_checkpoint(str(path)) as algo:
            assert type(algo) is PG
            assert algo.metrics.counters["training_iteration"] == iteration
    with PG.from_checkpoint(str(tmp_path / "trial")) as algo:
        np.testing.assert_array_equal(algo.get_policy().get_weights()["pi.0.weight"],
                                      last["pi.0.weight"])


def make_dict_cartpole(env_config):
    """CartPole-v1 whose observation is a dict of positions and velocities."""
    class DictObs(gym.ObservationWrapper):
        def __init__(self, env):
            super().__init__(env)
            box = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
            self.observation_space = gym.spaces.Dict({"position": box, "velocity": box})

        def observation(self, obs):
            return {"position": obs[[0, 2]], "velocity": obs[[1, 3]]}
    return DictObs(gym.make("CartPole-v1"))


def test_from_checkpoint_loads_pickled_config_only_when_allowed_and_flattens_dicts(tmp_path):
    with PG(env=make_dict_cartpole, train_batch_size=50, rollout_fragment_length=50,
            seed=0) as algo:
        algo.train()
        algo.save(str(tmp_path / "ck"))
    with pytest.raises(ConfigError, match=r"config field config\.env .*was saved with pickle"):
        Algorithm.from_checkpoint(str(tmp_path / "ck"))
    with Algorithm.from_checkpoint(str(tmp_path / "ck"), allow_pickle=True) as algo:
        obs = {"position": np.array([0.1, 0.02], np.float32),
               "velocity": np.array([-0.3, 0.5], np.float32)}
        flat = gym.spaces.flatten(algo._driver_env().env.observation_space, obs)
        policy = algo.get_policy()
        want = int(policy.compute_actions(flat[None], False)[0][0])
        assert algo.compute_single_action(obs) == want
        actions, _ = algo.predict([obs, obs])
        assert actions.tolist() == [want, want]


# -- compute_single_action and predict ---------------------------------------------
@pytest.fixture(scope="module")
def ppo(ppo_run):
    algo = Algorithm.from_checkpoint(str(ppo_run))
    yield algo
    algo.stop()


def test_compute_single_action_is_the_policys_greedy_action_for_one_observation(ppo):
    obs = cartpole_observations(20)
    policy = ppo.get_policy()
    greedy = policy.compute_actions(obs, False)[0]
    singles = [ppo.compute_single_action(o) for o in obs]
    assert all(type(a) is int for a in singles) and singles == greedy.tolist()
    assert ppo.compute_single_action(obs[0].tolist()) == singles[0]   # a list will do
    assert ppo.compute_single_action(obs[0].astype(np.float64)) == singles[0]
    before = dict(ppo.metrics.counters)
    sampled = [ppo.compute_single_action(obs[0], explore=True) for _ in range(50)]
    assert set(sampled) <= {0, 1} and dict(ppo.metrics.counters) == before


def test_predict_takes_one_observation_or_a_batch(ppo):
    obs = cartpole_observations(7, seed=1)
    greedy = ppo.get_policy().compute_actions(obs, False)[0]
    actions, state = ppo.predict(obs)
    assert state is None and actions.dtype == np.int64
    np.testing.assert_array_equal(actions, greedy)
    action, state = ppo.predict(obs[3])
    assert action == int(greedy[3]) and state is None


@pytest.mark.parametrize("call, obs, match", [
    ("single", np.zeros(3), r"PPO\.compute_single_action: an observation of shape \(3,\) does "
     r"not fit the observation space Box \(4,\) float32: give one observation of shape \(4,\)$"),
    ("single", np.zeros((2, 4)), r"shape \(2, 4\) .* give one observation of shape \(4,\)$"),
    ("predict", np.zeros((2, 5)), r"PPO\.predict: an observation of shape \(2, 5\) .*give one "
     r"observation of shape \(4,\) or a batch \(B, 4\)"),
    ("predict", "left", r"an observation of type str does not fit"),
])
def test_an_observation_of_the_wrong_shape_names_the_shape_the_policy_takes(ppo, call, obs,
                                                                            match):
    with pytest.raises(ValueError, match=match):
        if call == "single":
            ppo.compute_single_action(obs)
        else:
            ppo.predict(obs)


def test_a_state_for_a_feedforward_policy_is_refused(ppo):
    with pytest.raises(ConfigError, match="state given, but this policy is not recurrent"):
        ppo.compute_single_action(np.zeros(4), [np.zeros(3)])
    assert ppo.compute_single_action(np.zeros(4), []) in (0, 1)


def test_a_recurrent_policy_takes_and_returns_its_state():
    with PPO(PPOConfig(env="flowrl/StatelessCartPole-v1", seed=0,
                       model={"use_lstm": True, "lstm_cell_size": 8,
                              "lstm_use_prev_action": True})) as algo:
        policy = algo.get_policy()
        obs = np.array([0.01, 0.02], np.float32)
        action, state = algo.compute_single_action(obs)
        initial = policy.get_initial_state()
        want, extra = policy.compute_actions(obs[None], False,
                                             state_batches=[s[None] for s in initial])
        assert action == int(want[0]) and [s.shape for s in state] == [(8,), (8,)]
        np.testing.assert_allclose(state[0], extra["state_out_0"][0])
        # the next step starts from state_out, with the previous action
        action2, state2 = algo.compute_single_action(obs, state, prev_action=action,
                                                     prev_reward=1.0)
        want2, extra2 = policy.compute_actions(
            obs[None], False, state_batches=[s[None] for s in state],
            prev_actions=np.array([action]), prev_rewards=np.array([1.0], np.float32))
        assert action2 == int(want2[0])
        np.testing.assert_allclose(state2[1], extra2["state_out_1"][0])
        assert not np.allclose(state2[1], state[1])
        # a batch: episode_start rows begin again from the initial state
        batch_state = [np.stack([s2, s2]) for s2 in state2]
        actions, out = algo.predict(np.stack([obs, obs]), batch_state,
                                    episode_start=[True, False])
        assert actions.shape == (2,) and [s.shape for s in out] == [(2, 8), (2, 8)]
        np.testing.assert_allclose(out[0][0], state[0], rtol=1e-5)
        with pytest.raises(ConfigError, match=r"state\[0\] has shape \(3,\); it takes \(8,\)"):
            algo.compute_single_action(obs, [np.zeros(3), np.zeros(8)])
        with pytest.raises(ConfigError, match=r"state has 1 parts; this policy's state has 2"):
            algo.compute_single_action(obs, [np.zeros(8)])


def test_image_observations_keep_their_dtype():
    with PPO(PPOConfig(env="flowrl/MinAtarBreakout-v0", seed=0)) as algo:
        frames = minatar_observations(3)
        greedy = algo.get_policy().compute_actions(frames, False)[0]
        assert [algo.compute_single_action(f) for f in frames] == greedy.tolist()
        with pytest.raises(ConfigError, match=r"observations of dtype float64 for the observation "
                           r"space Box \(4, 10, 10\) uint8, which holds uint8: give the env's own "
                           r"uint8 observations"):
            algo.compute_single_action(frames[0] / 255.0)


# -- flowrl export ------------------------------------------------------------------
def outputs_of(module_out) -> tuple[torch.Tensor, ...]:
    return module_out if isinstance(module_out, tuple) else (module_out,)


def assert_same_outputs(policy, obs: np.ndarray, outputs) -> None:
    """The exported outputs equal what the policy computes on ``obs``."""
    _, extra = policy.compute_actions(obs, False)
    want = [extra["action_dist_inputs"], extra["vf_preds"]][:len(outputs)]
    assert len(outputs) == 2 or not getattr(policy, "use_critic", True)
    for got, expected in zip(outputs, want):
        got = torch.as_tensor(np.asarray(got))
        assert got.shape == expected.shape
        assert torch.allclose(got, torch.as_tensor(expected), atol=1e-5), (got, expected)


def test_export_torchscript_of_an_mlp_gives_the_policys_outputs(ppo_run, tmp_path, capsys):
    out = tmp_path / "policy.pt"
    assert main(["export", str(ppo_run), "--format", "torchscript", "-o", str(out)]) == 0
    assert f"wrote {out}" in capsys.readouterr().out
    module = torch.jit.load(str(out))
    obs = cartpole_observations(9)     # traced on 2 rows, run on 9 and on 1
    with PPO.from_checkpoint(str(ppo_run)) as algo, torch.no_grad():
        assert_same_outputs(algo.get_policy(), obs, outputs_of(module(torch.as_tensor(obs))))
        assert_same_outputs(algo.get_policy(), obs[:1],
                            outputs_of(module(torch.as_tensor(obs[:1]))))


def test_export_of_cnns_gives_the_policys_outputs(tmp_path):
    frames = minatar_observations(5)
    for cls, config in ((PPO, PPOConfig), (DQN, DQNConfig)):
        path = tmp_path / cls.name
        with cls(config(env="flowrl/MinAtarBreakout-v0", seed=0)) as algo:
            algo.save(str(path))
        out = tmp_path / f"{cls.name}.pt"
        assert main(["export", str(path), "--format", "torchscript", "-o", str(out)]) == 0
        module = torch.jit.load(str(out))
        with cls.from_checkpoint(str(path)) as algo, torch.no_grad():
            assert_same_outputs(algo.get_policy(), frames,
                                outputs_of(module(torch.as_tensor(frames))))


def test_export_onnx_gives_the_policys_outputs(ppo_run, tmp_path):
    ort = pytest.importorskip("onnxruntime")
    out = tmp_path / "policy.onnx"
    assert main(["export", str(ppo_run / "checkpoint"), "--format", "onnx", "-o", str(out)]) == 0
    session = ort.InferenceSession(str(out))
    assert [o.name for o in session.get_outputs()] == ["action_dist_inputs", "value"]
    obs = cartpole_observations(6)
    with PPO.from_checkpoint(str(ppo_run)) as algo:
        assert_same_outputs(algo.get_policy(), obs, session.run(None, {"obs": obs}))
    frames = minatar_observations(3)
    with PPO(PPOConfig(env="flowrl/MinAtarBreakout-v0", seed=0)) as algo:
        algo.save(str(tmp_path / "cnn"))
        assert main(["export", str(tmp_path / "cnn"), "--format", "onnx", "-o",
                     str(tmp_path / "cnn.onnx")]) == 0
        session = ort.InferenceSession(str(tmp_path / "cnn.onnx"))
        assert_same_outputs(algo.get_policy(), frames, session.run(None, {"obs": frames}))


def test_export_errors_say_what_to_do(ppo_run, tmp_path, capsys, monkeypatch):
    with PPO(PPOConfig(env="flowrl/StatelessCartPole-v1", seed=0,
                       model={"use_lstm": True, "lstm_cell_size": 8})) as algo:
        algo.save(str(tmp_path / "lstm"))
    assert main(["export", str(tmp_path / "lstm"), "--format", "torchscript", "-o",
                 str(tmp_path / "lstm.pt")]) == 2
    assert "is recurrent, and a module of observations alone cannot carry its state" in \
        capsys.readouterr().err
    assert main(["export", str(ppo_run), "--format", "torchscript", "--policy-id", "nope",
                 "-o", str(tmp_path / "x.pt")]) == 2
    assert "no such policy; known: ['default_policy']" in capsys.readouterr().err
    assert main(["export", str(ppo_run), "--format", "torchscript", "-o",
                 str(tmp_path / "missing" / "x.pt")]) == 2
    assert "does not exist; create it" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "onnx", None)       # as if onnx were not installed
    assert main(["export", str(ppo_run), "--format", "onnx", "-o", str(tmp_path / "x.onnx")]) == 2
    assert "writing ONNX needs the onnx package: pip install 'flowrl[export]'" in \
        capsys.readouterr().err
    assert not list(tmp_path.glob("*.pt")) and not list(tmp_path.glob("*.onnx"))


# -- flowrl evaluate --video ----------------------------------------------------------
def test_evaluate_records_every_episode_as_a_video(ppo_run, tmp_path, capsys):
    pytest.importorskip("moviepy")
    pytest.importorskip("pygame")           # draws CartPole's frames
    videos = tmp_path / "videos"
    assert main(["evaluate", str(ppo_run), "--episodes", "2", "--seed", "0",
                 "--video", str(videos)]) == 0
    assert f"videos in {videos}" in capsys.readouterr().out
    files = sorted(os.listdir(videos))
    assert files == ["ppo-episode-0.mp4", "ppo-episode-1.mp4"]
    assert all(os.path.getsize(videos / f) > 0 for f in files)


def test_evaluate_video_errors_say_what_to_do(ppo_run, tmp_path, capsys, monkeypatch):
    with PPO(PPOConfig(env="flowrl/MinAtarBreakout-v0", seed=0)) as algo:
        algo.save(str(tmp_path / "minatar"))
    pytest.importorskip("moviepy")
    assert main(["evaluate", str(tmp_path / "minatar"), "--episodes", "1",
                 "--video", str(tmp_path / "v")]) == 2
    assert ("env 'flowrl/MinAtarBreakout-v0' cannot be made with render_mode='rgb_array'"
            in capsys.readouterr().err)
    monkeypatch.setitem(sys.modules, "moviepy", None)    # as if moviepy were not installed
    assert main(["evaluate", str(ppo_run), "--video", str(tmp_path / "v")]) == 2
    assert ("--video " + str(tmp_path / "v") + ": recording videos needs moviepy: pip install "
            "'flowrl[video]'") in capsys.readouterr().err
    assert not os.path.exists(tmp_path / "v")
