"""Evaluation during training: when it runs, how many episodes, with which weights."""

from __future__ import annotations

import json

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowrl.algorithms import PG, PGConfig
from flowrl.cli import main
from flowrl.errors import ConfigError
from flowrl.evaluation import assign_episodes, play_episodes
from flowrl.loggers import read_scalars

FAST = dict(env="CartPole-v1", rollout_fragment_length=50, train_batch_size=100, seed=0,
            model=(16,))


class TargetEnv(gym.Env):
    """Five steps from one fixed start; reward ``-|a - 0.5|``: the return is a
    continuous function of the policy's actions (greedy: of its weights)."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        reward = -abs(float(action[0]) - 0.5)
        return np.full(1, self.t / 5, np.float32), reward, self.t == 5, False, {}


class ParityLengthEnv(gym.Env):
    """An episode reset with an even seed lasts 2 steps, with an odd one 30."""

    observation_space = gym.spaces.Box(0.0, 1.0, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t, self.length = 0, 2 if seed is not None and seed % 2 == 0 else 30
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.zeros(1, np.float32), 1.0, self.t >= self.length, False, {}


def target_env(config):
    return TargetEnv()


def parity_env(config):
    return ParityLengthEnv()


@settings(max_examples=50, deadline=None)
@given(n=st.integers(1, 60), envs=st.lists(st.integers(1, 4), min_size=1, max_size=4))
def test_assign_episodes_hands_out_each_episode_once_evenly(n, envs):
    slots = [(i + 1, e) for i, e in enumerate(envs)]
    out = assign_episodes(range(n), slots)
    shares = [q for w, _ in slots for q in out[w]]
    assert sorted(e for q in shares for e in q) == list(range(n))
    assert max(map(len, shares)) - min(map(len, shares)) <= 1
    assert all(q == sorted(q) for q in shares)


def test_evaluation_runs_on_iterations_n_2n_only():
    with PG(PGConfig(**FAST, evaluation_interval=2, evaluation_duration=3)) as algo:
        seen = [("evaluation" in algo.train()) for _ in range(5)]
    assert seen == [False, True, False, True, False]


@pytest.mark.parametrize("eval_workers", [0, 2])
def test_exactly_evaluation_duration_episodes_with_several_envs(eval_workers):
    config = PGConfig(**FAST, num_envs_per_worker=3, evaluation_interval=1,
                      evaluation_duration=7, evaluation_num_workers=eval_workers)
    with PG(config) as algo:
        for _ in range(2):
            ev = algo.train()["evaluation"]
            assert ev["episodes_this_iter"] == 7
            assert ev["timesteps_this_iter"] == pytest.approx(7 * ev["episode_len_mean"])


@pytest.mark.parametrize("eval_workers", [0, 2])
def test_counted_episodes_are_not_biased_toward_short_ones(eval_workers):
    # Episodes 0..9 reset with seeds s, s+1, ...: five last 2 steps and five 30,
    # whichever finish first on the 3 envs per worker.
    config = PGConfig(env=parity_env, rollout_fragment_length=50, train_batch_size=100,
                      seed=0, num_envs_per_worker=3, evaluation_duration=10,
                      evaluation_num_workers=eval_workers)
    with PG(config) as algo:
        ev = algo.evaluate()["evaluation"]
    assert ev["episodes_this_iter"] == 10
    assert ev["episode_len_mean"] == (5 * 2 + 5 * 30) / 10


def _set_mean_action(algo, mean: float) -> None:
    """Zero the policy network but the mean's bias: greedy acts ``mean`` everywhere."""
    policy = algo.get_policy()
    weights = {k: np.zeros_like(v) for k, v in policy.get_weights().items()}
    weights["pi.4.bias"][:] = mean
    policy.set_weights(weights)


def test_greedy_by_default_matches_a_hand_computed_return():
    with PG(PGConfig(env=target_env, seed=0, num_envs_per_worker=2,
                     evaluation_duration=4)) as algo:
        _set_mean_action(algo, 0.2)
        ev = algo.evaluate()["evaluation"]
    assert ev["episodes_this_iter"] == 4 and ev["episode_len_mean"] == 5
    assert ev["episode_reward_mean"] == pytest.approx(5 * -0.3, abs=1e-5)   # |0.2 - 0.5|
    with PG(PGConfig(env=target_env, seed=0, evaluation_duration=4,
                     evaluation_config={"explore": True})) as algo:
        _set_mean_action(algo, 0.2)
        assert algo.evaluate()["evaluation"]["episode_reward_mean"] != pytest.approx(-1.5)


@pytest.mark.parametrize("name, fields", [
    ("dqn", dict(learning_starts=64, timesteps_per_iteration=64)),  # replay, epsilon-greedy
    ("impala", dict(num_workers=1))])                                # async, learner thread
def test_other_plan_shapes_take_the_evaluation_step(name, fields):
    from flowrl.algorithms import ALGORITHMS
    cls = ALGORITHMS[name]
    config = cls.config_class(env="CartPole-v1", seed=0, rollout_fragment_length=16,
                              train_batch_size=32, evaluation_interval=1,
                              evaluation_duration=3, **fields)
    with cls(config) as algo:
        assert [algo.train()["evaluation"]["episodes_this_iter"] for _ in range(2)] == [3, 3]


def test_evaluation_steps_are_not_training_steps():
    with PG(PGConfig(**FAST)) as plain, \
            PG(PGConfig(**FAST, evaluation_interval=1, evaluation_duration=2)) as evaluated:
        a, b = plain.train(), evaluated.train()
    assert b["evaluation"]["timesteps_this_iter"] > 0
    assert a["timesteps_total"] == b["timesteps_total"]
    assert a["info"]["num_steps_sampled"] == b["info"]["num_steps_sampled"]


def test_plan_dot_shows_the_evaluation_node():
    with PG(PGConfig(**FAST, evaluation_interval=1)) as algo:
        dot = algo.plan.to_dot()
        assert '"evaluation" [label="evaluation\\nfor_each(Evaluation)"' in dot
        assert '"report.collect_metrics" -> "evaluation"' in dot
    with PG(PGConfig(**FAST)) as algo:
        assert '"evaluation"' not in algo.plan.to_dot()


def test_evaluate_on_demand_without_an_interval():
    with PG(PGConfig(**FAST, evaluation_duration=3)) as algo:
        assert algo.evaluation_workers is None
        first = algo.evaluate()
        algo.train()
        counters = dict(algo.metrics.counters)
        again = algo.evaluate()
        assert dict(algo.metrics.counters) == counters
        assert "evaluation" not in algo.train()
    assert first["evaluation"]["episodes_this_iter"] == again["evaluation"]["episodes_this_iter"] == 3


def test_parallel_evaluation_evaluates_the_weights_the_step_starts_from():
    common = dict(env=target_env, rollout_fragment_length=50, train_batch_size=100, seed=0,
                  lr=0.05, evaluation_duration=2)
    with PG(PGConfig(**common)) as ref:
        before = ref.evaluate()["evaluation"]["episode_reward_mean"]
        ref.train()
        after = ref.evaluate()["evaluation"]["episode_reward_mean"]
    assert before != after                       # the step changed the greedy return
    with PG(PGConfig(**common, evaluation_interval=1, evaluation_num_workers=1,
                     evaluation_parallel_to_training=True)) as par:
        assert par.train()["evaluation"]["episode_reward_mean"] == before
    with PG(PGConfig(**common, evaluation_interval=1, evaluation_num_workers=1)) as seq:
        assert seq.train()["evaluation"]["episode_reward_mean"] == after


def test_recurrent_state_is_carried_per_env():
    # The same episodes played on one env or spread over three give the same returns:
    # each env's state, previous action and reward are its own.
    with PG(PGConfig(env="flowrl/StatelessCartPole-v1", seed=0,
                     model={"use_lstm": True, "lstm_cell_size": 8, "fcnet_hiddens": [8]})) as algo:
        policy = algo.get_policy()
        assert policy.is_recurrent
        envs = [gym.make("flowrl/StatelessCartPole-v1") for _ in range(3)]
        one = play_episodes(envs[:1], policy, [list(range(5))], seed=3)
        spread = play_episodes(envs, policy, [[0, 3], [1, 4], [2]], seed=3)
    assert one == spread and len(one) == 5


@pytest.mark.parametrize("field, value", [
    ("evaluation_interval", 0), ("evaluation_duration", 0), ("evaluation_duration", 2**40),
    ("evaluation_num_workers", -1), ("evaluation_config", {"lr_typo": 1}),
    ("evaluation_config", {"explore": "no"}), ("evaluation_config", {"num_envs_per_worker": 0}),
    ("evaluation_parallel_to_training", True), ("evaluation_parallel_to_training", 1)])
def test_config_errors_name_the_field(field, value):
    with pytest.raises(ConfigError, match=field):
        PGConfig(env="CartPole-v1", **{field: value})


def test_multi_agent_env_is_refused_by_name():
    from flowrl.workers import make_multi_agent
    with pytest.raises(ConfigError, match="evaluation_interval"):
        PG(PGConfig(env=lambda cfg: make_multi_agent("CartPole-v1", 2)(cfg),
                    evaluation_interval=1))


def test_cli_eval_interval_writes_evaluation_to_jsonl_and_tensorboard(tmp_path, capsys):
    assert main(["train", "pg", "--env", "CartPole-v1", "--stop-iters", "2", "--eval-interval",
                 "2", "--set", "evaluation_duration=3", "--set", "rollout_fragment_length=50",
                 "--set", "train_batch_size=50", "--run-dir", str(tmp_path), "--quiet"]) == 0
    (run_dir,) = list(tmp_path.iterdir())
    rows = [json.loads(line) for line in (run_dir / "result.jsonl").read_text().splitlines()]
    assert ["evaluation" in r for r in rows] == [False, True]
    assert rows[1]["evaluation"]["episodes_this_iter"] == 3
    scalars = read_scalars(str(run_dir))
    assert [step for step, _ in scalars["evaluation/episode_reward_mean"]] == [
        rows[1]["timesteps_total"]]


@pytest.mark.ray
@pytest.mark.parametrize("eval_workers", [0, 2])
def test_exact_count_on_ray(ray_session, eval_workers):
    config = PGConfig(**FAST, backend="ray", num_workers=1, num_cpus_per_worker=0,
                      num_envs_per_worker=2, evaluation_interval=1, evaluation_duration=5,
                      evaluation_num_workers=eval_workers)
    with PG(config) as algo:
        assert len(algo.evaluation_workers.remote_workers()) == eval_workers
        for _ in range(2):
            assert algo.train()["evaluation"]["episodes_this_iter"] == 5


@pytest.mark.ray
def test_parallel_evaluation_on_ray(ray_session):
    config = PGConfig(**FAST, backend="ray", num_workers=1, num_cpus_per_worker=0,
                      num_envs_per_worker=2, evaluation_interval=2, evaluation_duration=4,
                      evaluation_num_workers=2, evaluation_parallel_to_training=True)
    with PG(config) as algo:
        results = [algo.train() for _ in range(4)]
    assert [r.get("evaluation", {}).get("episodes_this_iter") for r in results] == [
        None, 4, None, 4]
    assert [r["timesteps_total"] for r in results] == [100, 200, 300, 400]


#: A tiny run of each algorithm whose config rejects num_workers=0.
REMOTE_ONLY = {
    "impala": dict(num_workers=1, train_batch_size=50),
    "appo": dict(num_workers=1, train_batch_size=50),
    "a3c": dict(num_workers=1),
    "apex": dict(num_workers=1, learning_starts=50, timesteps_per_iteration=50,
                 train_batch_size=32),
    "ddppo": dict(num_workers=1, backend="ray", num_cpus_per_worker=0, sgd_minibatch_size=50,
                  num_sgd_iter=1),
}


def _evaluate_a_checkpoint_of(name, tmp_path, capsys):
    from flowrl import checkpoint
    from flowrl.evaluation import evaluate_policy, load_for_evaluation
    from flowrl.experiment import algorithm_class
    fields = {"backend": "local", **REMOTE_ONLY[name]}
    with algorithm_class(name)(env="CartPole-v1", rollout_fragment_length=50, seed=0,
                               **fields) as algo:
        algo.train()
        algo.save(str(tmp_path / "ck"))
    state = checkpoint.read_checkpoint(str(tmp_path / "ck"))
    assert state["config"]["num_workers"] == 1
    saved = state["worker"]["policies"]["default_policy"]["weights"]
    with load_for_evaluation(str(tmp_path / "ck")) as loaded:
        assert loaded.name == name and loaded.config.num_workers == 1
        assert loaded.workers.remote_workers() == []
        weights = loaded.get_policy().get_weights()
        assert sorted(weights) == sorted(saved)
        for k in saved:
            np.testing.assert_array_equal(np.asarray(weights[k]), np.asarray(saved[k]))
        r = evaluate_policy(loaded, episodes=2, seed=0)
        assert len(r["returns"]) == 2 and all(x > 0 for x in r["returns"])
    assert main(["evaluate", str(tmp_path / "ck"), "--episodes", "2", "--seed", "0"]) == 0
    assert f"{name} CartPole-v1: 2 episodes, mean return" in capsys.readouterr().out


@pytest.mark.parametrize("name", ["impala", "appo", "a3c", "apex"])
def test_checkpoints_of_algorithms_that_need_remote_workers_evaluate(name, tmp_path, capsys):
    """Evaluation builds the policy from the checkpoint without the training
    topology, so configs that reject num_workers=0 load (their checkpoints did not)."""
    _evaluate_a_checkpoint_of(name, tmp_path, capsys)


@pytest.mark.ray
def test_a_ddppo_checkpoint_evaluates(ray_session, tmp_path, capsys):
    _evaluate_a_checkpoint_of("ddppo", tmp_path, capsys)
