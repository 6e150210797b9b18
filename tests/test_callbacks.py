"""Callbacks and custom metrics (flowrl.callbacks): hooks, their kwargs and counts on
both backends, custom metrics in results, user_data, composition, errors."""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from flowrl.algorithms import PG, PGConfig
from flowrl.callbacks import DefaultCallbacks, MultiCallbacks
from flowrl.errors import ConfigError, OperatorError
from flowrl.loggers import flatten_scalars
from flowrl.ops import summarize_episodes
from flowrl.policies import PGPolicy
from flowrl.workers import Episode, PolicySpec, RolloutWorker, make_multi_agent

BACKENDS = [pytest.param("local"), pytest.param("ray", marks=pytest.mark.ray)]


@pytest.fixture(params=BACKENDS)
def backend(request):
    if request.param == "ray":
        request.getfixturevalue("ray_session")
    return request.param


class Recorder(DefaultCallbacks):
    """Checks each hook's kwargs and records what it saw (read back per worker)."""

    def __init__(self):
        self.log: list[tuple] = []  # ("start"|"end", episode_id, env_index, length)
        self.steps = 0
        self.samples: list[int] = []
        self.learned: list[int] = []
        self.errors: list[str] = []

    def _check(self, worker, base_env, policies, episode, env_index):
        if not (isinstance(episode, Episode) and env_index == episode.env_index
                and worker.policy_map is policies
                and len(base_env.get_sub_environments()) == worker.num_envs):
            self.errors.append(f"bad kwargs at {episode.episode_id}")

    def on_episode_start(self, *, worker, base_env, policies, episode, env_index, **kwargs):
        self._check(worker, base_env, policies, episode, env_index)
        if episode.length != 0 or episode.last_observation_for() is None:
            self.errors.append("start: length or first observation")
        episode.user_data["steps"] = 0
        self.log.append(("start", episode.episode_id, env_index, 0))

    def on_episode_step(self, *, worker, base_env, policies, episode, env_index, **kwargs):
        self._check(worker, base_env, policies, episode, env_index)
        self.steps += 1
        episode.user_data["steps"] += 1
        if episode.user_data["steps"] != episode.length:
            self.errors.append("user_data lost between steps")
        obs = episode.last_observation_for()
        if np.shape(obs) != (4,) or episode.last_action_for() not in (0, 1) \
                or episode.last_reward_for() != 1.0 or not isinstance(episode.last_info_for(), dict):
            self.errors.append("step: last obs/action/reward/info")

    def on_episode_end(self, *, worker, base_env, policies, episode, env_index, **kwargs):
        self._check(worker, base_env, policies, episode, env_index)
        episode.custom_metrics["len"] = episode.length
        episode.custom_metrics["steps_seen"] = episode.user_data["steps"]
        episode.custom_metrics["reward"] = episode.total_reward
        episode.hist_data["len"] = [episode.length]
        self.log.append(("end", episode.episode_id, env_index, episode.length))

    def on_sample_end(self, *, worker, samples, **kwargs):
        self.samples.append(samples.count)

    def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs):
        self.learned.append(train_batch.count)
        result["rows"] = train_batch.count

    def on_train_result(self, *, algorithm, result, **kwargs):
        result["trained_by"] = algorithm.name


def _state(worker):
    cb = worker.callbacks
    return worker.worker_index, cb.log, cb.steps, cb.samples, cb.learned, cb.errors


def test_hooks_get_their_kwargs_counts_and_custom_metrics_reach_the_result(backend):
    algo = PG(PGConfig(env="CartPole-v1", num_workers=1, num_envs_per_worker=2, backend=backend,
                       rollout_fragment_length=50, train_batch_size=100, callbacks=Recorder,
                       seed=0))
    try:
        results = [algo.train() for _ in range(2)]
        states = algo.workers.foreach_worker(_state)
    finally:
        algo.stop()
    r = results[-1]
    ends = []
    for index, log, steps, samples, learned, errors in states:
        assert errors == []
        starts = [e for e in log if e[0] == "start"]
        worker_ends = [e for e in log if e[0] == "end"]
        if index == 0:  # the driver's worker learns; the remote one samples
            assert learned == [100, 100] and samples == [] and log == []
            continue
        assert sum(samples) == steps == r["timesteps_total"] == 200
        assert samples == [100, 100]  # 2 envs x 50 steps per sample()
        # every env has exactly one live episode: one start more per env than ends
        assert len(starts) == len(worker_ends) + 2
        assert {e[1] for e in worker_ends} <= {e[1] for e in starts}
        ends += worker_ends
    assert len(ends) == r["episodes_total"] > 0
    lengths = [e[3] for e in ends]
    cm = r["custom_metrics"]
    assert cm["len_mean"] == pytest.approx(r["episode_len_mean"])
    assert cm["len_mean"] == pytest.approx(np.mean(lengths))
    assert (cm["len_min"], cm["len_max"]) == (min(lengths), max(lengths))
    assert cm["steps_seen_mean"] == cm["len_mean"]  # user_data lived through the episode
    assert cm["reward_mean"] == pytest.approx(r["episode_reward_mean"])
    assert sorted(r["hist_stats"]["len"]) == sorted(lengths)
    assert r["trained_by"] == "pg"
    assert r["info"]["learner"]["default_policy"]["custom_metrics"] == {"rows": 100}
    # the same numbers under the flattened names TensorBoard shows
    flat = flatten_scalars(r)
    assert flat["custom_metrics/len_mean"] == cm["len_mean"]
    assert flat["info/learner/default_policy/custom_metrics/rows"] == 100


class CountLearnCalls(DefaultCallbacks):
    def __init__(self):
        self.calls = 0

    def on_learn_on_batch(self, *, policy, train_batch, result, **kwargs):
        self.calls += 1
        result["call"] = self.calls


def test_learn_custom_metrics_are_the_iterations_last_learn_step_under_the_policys_stats():
    """The place docs/callbacks-evaluation.md gives: ``result["info"]["learner"][policy
    id]["custom_metrics"]``, from the last ``learn_on_batch`` of the iteration (DQN
    learns many times per iteration), not a mean over them."""
    from flowrl.algorithms import DQN, DQNConfig
    with DQN(DQNConfig(env="CartPole-v1", learning_starts=64, timesteps_per_iteration=256,
                       callbacks=CountLearnCalls, seed=0)) as algo:
        calls, results = [], []
        for _ in range(2):
            results.append(algo.train())
            calls.append(algo.get_policy().callbacks.calls)
    assert calls[0] > 1 and calls[1] > calls[0] + 1
    for r, n in zip(results, calls):
        assert r["info"]["learner"]["default_policy"]["custom_metrics"] == {"call": n}
        assert flatten_scalars(r)["info/learner/default_policy/custom_metrics/call"] == n


class TrainerKwarg(DefaultCallbacks):
    """RLlib 1.x's signature: ``trainer=``, no ``**kwargs``."""

    def on_train_result(self, *, trainer, result):
        result["iteration_seen"] = trainer.metrics.counters["training_iteration"]


def test_rllib_1x_trainer_kwarg_and_hooks_without_kwargs_work():
    with PG(PGConfig(env="CartPole-v1", callbacks=TrainerKwarg, seed=0)) as algo:
        assert algo.train()["iteration_seen"] == 1


class First(DefaultCallbacks):
    def on_episode_end(self, *, episode, **kwargs):
        episode.user_data["order"] = ["first"]
        episode.custom_metrics["first"] = 1.0

    def on_train_result(self, *, result, **kwargs):
        result["order"] = ["first"]


class Second(DefaultCallbacks):
    def on_episode_end(self, *, episode, **kwargs):
        episode.custom_metrics["second_after_first"] = float(
            episode.user_data["order"] == ["first"])

    def on_train_result(self, *, result, **kwargs):
        result["order"].append("second")


@pytest.mark.parametrize("callbacks", [[First, Second], MultiCallbacks([First, Second])],
                         ids=["list", "MultiCallbacks"])
def test_a_list_of_callback_classes_runs_each_hook_in_order(callbacks):
    with PG(PGConfig(env="CartPole-v1", callbacks=callbacks, seed=0)) as algo:
        r = algo.train()
    assert r["order"] == ["first", "second"]
    assert r["custom_metrics"]["first_mean"] == 1.0
    assert r["custom_metrics"]["second_after_first_min"] == 1.0


class BoomAtEpisodeEnd(DefaultCallbacks):
    def on_episode_end(self, **kwargs):
        raise ValueError("boom")


class BoomInList(DefaultCallbacks):
    def on_sample_end(self, **kwargs):
        raise KeyError("missing")


def test_a_raising_callback_is_an_operator_error_naming_it(backend):
    config = PGConfig(env="CartPole-v1", num_workers=1, backend=backend, seed=0,
                      callbacks=BoomAtEpisodeEnd)
    with PG(config) as algo:
        with pytest.raises(OperatorError, match=r"BoomAtEpisodeEnd\.on_episode_end raised "
                                                r"ValueError: boom on rollout worker 1"):
            algo.train()


def test_the_raising_member_of_a_list_of_callbacks_is_the_one_named():
    with PG(PGConfig(env="CartPole-v1", callbacks=[First, BoomInList])) as algo:
        with pytest.raises(OperatorError, match=r"BoomInList\.on_sample_end raised KeyError: "
                                                "'missing' on rollout worker 0") as info:
            algo.train()
    assert isinstance(info.value.__cause__, KeyError)  # through the plan, cause kept


def test_a_raising_on_train_result_is_an_operator_error_naming_it():
    class Late(DefaultCallbacks):
        def on_train_result(self, *, result, **kwargs):
            result["x"] = 1 / 0

    with PG(PGConfig(env="CartPole-v1", callbacks=Late)) as algo:
        with pytest.raises(OperatorError, match=r"Late\.on_train_result raised "
                                                "ZeroDivisionError") as info:
            algo.train()
    assert isinstance(info.value.__cause__, ZeroDivisionError)


def test_a_custom_metric_that_is_no_number_is_an_operator_error_naming_it():
    class Text(DefaultCallbacks):
        def on_episode_end(self, *, episode, **kwargs):
            episode.custom_metrics["level"] = "hard"

    w = RolloutWorker("CartPole-v1", policy=PGPolicy, rollout_fragment_length=200, seed=0,
                      callbacks=Text)
    with pytest.raises(OperatorError, match=r"custom_metrics\['level'\] = 'hard' \(str\) is "
                                            "not a number"):
        w.sample()


@pytest.mark.parametrize("value, match", [
    (Recorder(), "the class, not an instance"),
    ([], "DefaultCallbacks subclass"),
    (dict, "DefaultCallbacks subclass"),
])
def test_bad_callbacks_configs_are_config_errors_naming_the_field(value, match):
    with pytest.raises(ConfigError, match=rf"PGConfig\.callbacks=.*{match}"):
        PGConfig(env="CartPole-v1", callbacks=value)


def test_a_hook_flowrl_does_not_call_is_refused_not_ignored():
    class Post(DefaultCallbacks):
        def on_postprocess_trajectory(self, **kwargs):
            pass

    with pytest.raises(ConfigError, match="Post overrides on_postprocess_trajectory"):
        PGConfig(env="CartPole-v1", callbacks=[First, Post])


class PerAgent(DefaultCallbacks):
    def on_episode_start(self, *, episode, env_index, **kwargs):
        episode.user_data["seen"] = {a: 0 for a in (0, 1)}
        episode.user_data["obs"] = {a: episode.last_observation_for(a) for a in (0, 1)}
        if episode.last_observation_for(0) is None or episode.length != 0:
            episode.user_data["bad"] = True

    def on_episode_step(self, *, episode, **kwargs):
        # an agent that stepped has a new latest observation; a done one keeps its final one
        for agent, before in episode.user_data["obs"].items():
            now = episode.last_observation_for(agent)
            if now is not before:
                episode.user_data["seen"][agent] += 1
                episode.user_data["obs"][agent] = now

    def on_episode_end(self, *, episode, policies, **kwargs):
        episode.custom_metrics["len"] = episode.length
        episode.custom_metrics["bad"] = float(episode.user_data.get("bad", False))
        episode.custom_metrics["steps_0"] = episode.user_data["seen"][0]
        episode.custom_metrics["return_1"] = episode.agent_rewards[1]
        episode.custom_metrics["policy_of_1"] = float(episode.policy_for(1) == "b")
        episode.custom_metrics["policies"] = float(sorted(policies) == ["a", "b"])


def test_multi_agent_episodes_run_the_hooks_with_per_agent_data(backend):
    config = PGConfig(env=make_multi_agent("CartPole-v1", 2), num_workers=1, backend=backend,
                      seed=0, callbacks=PerAgent, rollout_fragment_length=100,
                      train_batch_size=100,
                      multiagent={"policies": {"a": PolicySpec(), "b": PolicySpec()},
                                  "policy_mapping_fn": lambda agent, episode: "ab"[agent]})
    with PG(config) as algo:
        r = algo.train()
        while r["episodes_this_iter"] == 0:
            r = algo.train()
    cm = r["custom_metrics"]
    assert cm["len_mean"] == pytest.approx(r["episode_len_mean"])
    assert cm["bad_max"] == 0.0 and cm["policy_of_1_min"] == 1.0 and cm["policies_min"] == 1.0
    assert cm["return_1_mean"] == pytest.approx(r["policy_reward_mean"]["b"])
    # agent 0 acted on each step of its own (shorter or equal) copy of CartPole
    assert cm["steps_0_mean"] == pytest.approx(r["policy_reward_mean"]["a"])


def test_custom_metrics_summary_leaves_out_nan_and_keeps_the_window():
    eps = [{"episode_reward": 1.0, "episode_len": 1, "custom_metrics": {"x": v}}
           for v in (1.0, math.nan, 5.0)]
    s = summarize_episodes(eps + [{"episode_reward": 1.0, "episode_len": 1}])
    assert s["custom_metrics"] == {"x_mean": 3.0, "x_min": 1.0, "x_max": 5.0}
    assert summarize_episodes([])["custom_metrics"] == {}


def test_without_callbacks_the_sampler_tracks_no_episode_objects():
    w = RolloutWorker("CartPole-v1", policy=PGPolicy, rollout_fragment_length=50, seed=0)
    w.sample()
    assert w.sampler.callbacks is None and w.sampler.episodes.live == [None]
    assert all("custom_metrics" not in e for e in w.episode_stats())
    w.stop()


class LivesGame(gym.Env):
    """A game of 2 lives of 3 steps each, reward 1 per step; ``info["lives"]``."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return np.zeros(1, np.float32), {"lives": 2}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 1.0, self.t == 6, False, {"lives": 2 - self.t // 3}


class EndOnLifeLoss(gym.Wrapper):
    """Ends the training episode when a life is lost; resets the game only when over."""

    def __init__(self, env):
        super().__init__(env)
        self.lives, self.over = 2, True

    def reset(self, **kwargs):
        if self.over:
            obs, info = self.env.reset(**kwargs)
        else:
            obs, _, _, _, info = self.env.step(0)  # no-op into the next life
        self.lives, self.over = info["lives"], False
        return obs, info

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.over = term or trunc
        lost = info["lives"] < self.lives
        self.lives = info["lives"]
        return obs, r, term or lost, trunc, info


def test_with_whole_game_reporting_a_game_carries_its_lives_custom_metrics():
    class PerLife(DefaultCallbacks):
        def on_episode_end(self, *, episode, **kwargs):
            episode.custom_metrics["life_len"] = episode.length
            lives = episode.last_info_for()["lives"]  # the final step's info
            episode.custom_metrics[f"len_with_{lives}_left"] = episode.length
            episode.hist_data["lives"] = [episode.length]

    def game(config):
        return EndOnLifeLoss(gym.wrappers.RecordEpisodeStatistics(LivesGame()))

    w = RolloutWorker(game, policy=PGPolicy, rollout_fragment_length=20, seed=0,
                      callbacks=PerLife)
    w.sample()
    games = w.episode_stats()
    w.stop()
    # 20 training steps: 4 games of 5 (the no-op that starts life 2 is the env's 6th step)
    assert [g["episode_len"] for g in games] == [6] * 4  # whole games, not lives
    # a metric both lives set takes the later life's value; one each set is kept
    assert [g["custom_metrics"] for g in games] == [
        {"life_len": 2.0, "len_with_1_left": 3.0, "len_with_0_left": 2.0}] * 4
    assert [g["hist_data"]["lives"] for g in games] == [[3.0, 2.0]] * 4


class LengthMetric(DefaultCallbacks):
    def on_episode_end(self, *, episode, **kwargs):
        episode.custom_metrics["length"] = episode.length
        episode.user_data["seen"] = True


@pytest.mark.parametrize("backend", ["local", pytest.param("ray", marks=pytest.mark.ray)])
def test_evaluation_episodes_run_the_callbacks_where_they_are_played(backend, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    config = PGConfig(env="CartPole-v1", callbacks=LengthMetric, backend=backend, seed=0,
                      rollout_fragment_length=50, train_batch_size=50,
                      evaluation_interval=1, evaluation_duration=3,
                      evaluation_num_workers=1 if backend == "ray" else 0)
    with PG(config) as algo:
        evaluation = algo.train()["evaluation"]
    assert evaluation["custom_metrics"]["length_mean"] == evaluation["episode_len_mean"]
