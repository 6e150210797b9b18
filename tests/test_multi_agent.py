"""Multi-agent sampling semantics, PettingZoo, multi-agent configs and the seeds' ops."""

from __future__ import annotations

import random

import gymnasium as gym
import numpy as np
import pytest

import flowrl
from flowrl.algorithms import PG, PGConfig
from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError, OperatorError
from flowrl.metrics import MetricsContext, using_metrics
from flowrl.ops import ParallelRollouts, TrainOneStep, collect_metrics, synchronous_parallel_sample
from flowrl.policies import A2CPolicy, PGPolicy
from flowrl.workers import (MultiAgentEnv, PettingZooEnv, PolicySpec, RolloutWorker,
                            WorkerConfig, WorkerSet, make_multi_agent)

SB = SampleBatch
CARTPOLE = gym.make("CartPole-v1")
OBS, ACT = CARTPOLE.observation_space, CARTPOLE.action_space


class ConstPolicy:
    """Always plays ``action``; counts forwards and the rows they covered."""

    def __init__(self, observation_space, action_space, *, action=0, seed=None, **_):
        self.observation_space, self.action_space = observation_space, action_space
        self.action = action
        self.forwards: list[int] = []

    def compute_actions(self, obs, explore=True):
        n = len(obs)
        self.forwards.append(n)
        return (np.full(n, self.action, np.int64),
                {SB.ACTION_LOGP: np.zeros(n, np.float32), SB.VF_PREDS: np.zeros(n, np.float32),
                 SB.ACTION_DIST_INPUTS: np.zeros((n, 2), np.float32)})

    def value(self, obs):
        return np.zeros(len(obs), np.float32)

    def postprocess_trajectory(self, batch, last_value=0.0):
        return batch

    def get_weights(self):
        return {}


def test_mapping_is_called_once_per_agent_per_episode_and_rows_follow_it():
    calls: list[tuple] = []
    rng = random.Random(0)

    def mapping(agent_id, episode):
        calls.append((agent_id, episode.episode_id))
        return rng.choice(["p0", "p1"])

    w = RolloutWorker(make_multi_agent("CartPole-v1", 4),
                      policies={"p0": PolicySpec(ConstPolicy, config={"action": 0}),
                                "p1": PolicySpec(ConstPolicy, config={"action": 1})},
                      policy_mapping_fn=mapping, num_envs=3, rollout_fragment_length=40, seed=1)
    calls.clear()  # the build-time probe (episode_id -1) is not an episode
    batches = [w.sample() for _ in range(3)]
    assert len(calls) == len(set(calls)), "mapped an agent twice in one episode"
    mapped = set(calls)
    for mb in batches:
        assert set(mb.policy_batches) == {"p0", "p1"}
        for pid, b in mb.policy_batches.items():
            # each policy's rows are exactly the actions it took
            assert np.all(b[SB.ACTIONS] == int(pid[1]))
            rows = set(zip(b[SB.AGENT_INDEX].tolist(), b[SB.EPS_ID].tolist()))
            assert rows <= mapped
    episodes = {e for _, e in calls}
    assert len(episodes) > 3  # several episodes per env copy, each mapped afresh
    assert sum(len(e["agent_rewards"]) for e in w.episode_stats()) > 0


def test_one_batched_forward_per_policy_per_step_across_env_copies():
    w = RolloutWorker(make_multi_agent("CartPole-v1", 4),
                      policies={"p0": ConstPolicy, "p1": PolicySpec(ConstPolicy,
                                                                     config={"action": 1})},
                      policy_mapping_fn=lambda agent, episode: f"p{agent % 2}",
                      num_envs=3, rollout_fragment_length=25, seed=0)
    mb = w.sample()
    for pid in ("p0", "p1"):
        forwards = w.get_policy(pid).forwards
        assert len(forwards) == 25  # one per step, however many env copies
        assert sum(forwards) == mb.policy_batches[pid].count
        assert max(forwards) == 6  # 2 agents x 3 env copies in the first step
    assert mb.env_steps() == 75


class CountingAgents(MultiAgentEnv):
    """Agent ``i`` sees ``[i, t]``, earns ``10 i + t + action / 2`` and is done after
    ``i + 2`` steps; every row can thus be checked against its own agent and step."""

    def __init__(self, n=4):
        self.possible_agents = list(range(n))
        box = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
        self.observation_spaces = {i: box for i in self.possible_agents}
        self.action_spaces = {i: ACT for i in self.possible_agents}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {i: np.array([i, 0], np.float32) for i in self.possible_agents}, {}

    def step(self, actions):
        self.t += 1
        obs = {i: np.array([i, self.t], np.float32) for i in actions}
        rew = {i: 10.0 * i + self.t - 1 + int(a) / 2 for i, a in actions.items()}
        term = {i: self.t == i + 2 for i in actions}
        term["__all__"] = self.t == len(self.possible_agents) + 1
        return obs, rew, term, {"__all__": False}, {}


def test_every_row_keeps_its_own_agents_obs_reward_and_next_obs_when_policies_interleave():
    # The mapping changes with the episode, so on one step the env copies interleave
    # the two policies' agents in different orders.
    box = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
    w = RolloutWorker(lambda cfg: CountingAgents(),
                      policies={"p0": PolicySpec(ConstPolicy, box, ACT, {"action": 0}),
                                "p1": PolicySpec(ConstPolicy, box, ACT, {"action": 1})},
                      policy_mapping_fn=lambda agent, ep: f"p{(agent + ep.episode_id) % 2}",
                      num_envs=3, rollout_fragment_length=7, seed=0)
    for _ in range(2):
        mb = w.sample()
        for pid, b in mb.policy_batches.items():
            agent, t = b[SB.OBS][:, 0], b[SB.OBS][:, 1]
            np.testing.assert_array_equal(agent, b[SB.AGENT_INDEX])
            np.testing.assert_array_equal(t, b[SB.T])
            np.testing.assert_array_equal(b[SB.ACTIONS], int(pid[1]))
            np.testing.assert_array_equal(b[SB.REWARDS], 10 * agent + t + int(pid[1]) / 2)
            np.testing.assert_array_equal(b[SB.NEXT_OBS], b[SB.OBS] + [0, 1])
            np.testing.assert_array_equal(b[SB.TERMINATEDS], t + 1 == agent + 2)
            assert np.all((b[SB.EPS_ID] + agent) % 2 == int(pid[1]))
    assert mb.env_steps() == 21


class _ActionSpy(MultiAgentEnv):
    """Agent 0 has a Discrete(2) action, agent 1 a Box(-0.1, 0.1) one; records what
    each receives. ``drop`` lists the agents whose obs ``step`` leaves out."""

    def __init__(self, drop=None):
        self.possible_agents = [0, 1]
        box = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.observation_spaces = {0: box, 1: box}
        self.action_spaces = {0: gym.spaces.Discrete(2),
                              1: gym.spaces.Box(-0.1, 0.1, (1,), np.float32)}
        self.drop, self.seen = set(drop or ()), []

    def reset(self, *, seed=None, options=None):
        return {a: np.zeros(2, np.float32) for a in self.possible_agents}, {}

    def step(self, actions):
        self.seen.append(dict(actions))
        obs = {a: np.ones(2, np.float32) for a in actions if a not in self.drop}
        return (obs, {a: 1.0 for a in actions}, {"__all__": False}, {"__all__": False}, {})


def test_env_gets_python_ints_for_discrete_and_clipped_rows_for_box_actions():
    w = RolloutWorker(lambda cfg: _ActionSpy(), policies={"d": PGPolicy, "c": PGPolicy},
                      policy_mapping_fn=lambda agent, episode: "dc"[agent],
                      rollout_fragment_length=20, seed=0)
    mb = w.sample()
    seen = w.env.seen
    assert len(seen) == 20 and all(type(s[0]) is int and s[0] in (0, 1) for s in seen)
    box = np.array([s[1] for s in seen])
    assert box.dtype == np.float32 and box.shape == (20, 1) and np.abs(box).max() <= 0.1
    np.testing.assert_array_equal(box, np.clip(mb.policy_batches["c"][SB.ACTIONS], -0.1, 0.1))
    assert np.abs(mb.policy_batches["c"][SB.ACTIONS]).max() > 0.1   # the batch is unclipped

    class IntSpy(gym.Wrapper):
        def step(self, action):
            assert type(action) is int, type(action)
            return super().step(action)

    single = RolloutWorker(lambda cfg: IntSpy(gym.make("CartPole-v1")), policy=PGPolicy,
                           num_envs=2, rollout_fragment_length=10, seed=0)
    assert single.sample().count == 20


def test_an_agent_whose_obs_the_env_withholds_waits_with_its_row_open():
    # Turn-based semantics (issue 25): agent 1 acted on the first step and never got an
    # observation back, so it waits; its row is not complete and is carried along.
    w = RolloutWorker(lambda cfg: _ActionSpy(drop=[1]), policies={"d": PGPolicy, "c": PGPolicy},
                      policy_mapping_fn=lambda agent, episode: "dc"[agent],
                      rollout_fragment_length=5, seed=0)
    for _ in range(2):
        mb = w.sample()
        assert mb.policy_batches["d"].count == 5 and "c" not in mb.policy_batches
    assert [sorted(s) for s in w.env.seen] == [[0, 1]] + [[0]] * 9


def test_env_step_leaving_no_agent_to_act_is_an_operator_error_naming_the_env():
    w = RolloutWorker(lambda cfg: _ActionSpy(drop=[0, 1]), policies={"d": PGPolicy,
                                                                     "c": PGPolicy},
                      policy_mapping_fn=lambda agent, episode: "dc"[agent],
                      rollout_fragment_length=5, seed=0)
    with pytest.raises(OperatorError, match=r"_ActionSpy.step returned no observation for "
                                            r"any agent .* did not end the episode"):
        w.sample()


def test_unknown_policy_id_at_run_time_is_an_operator_error_naming_agent_and_id():
    def mapping(agent_id, episode):
        return "ghost" if episode.episode_id >= 0 and agent_id == 1 else "p"

    w = RolloutWorker(make_multi_agent("CartPole-v1", 2), policies={"p": PGPolicy},
                      policy_mapping_fn=mapping, rollout_fragment_length=5)
    with pytest.raises(OperatorError, match=r"agent_id=1\) returned policy id 'ghost'"):
        w.sample()


class _Mixed(MultiAgentEnv):
    """Agent 0 plays CartPole, agent 1 MountainCarContinuous (different spaces)."""

    def __init__(self, _config=None):
        self.envs = {0: gym.make("CartPole-v1"), 1: gym.make("MountainCarContinuous-v0")}
        self.possible_agents = [0, 1]
        self.observation_spaces = {a: e.observation_space for a, e in self.envs.items()}
        self.action_spaces = {a: e.action_space for a, e in self.envs.items()}

    def reset(self, *, seed=None, options=None):
        out = {a: e.reset(seed=seed) for a, e in self.envs.items()}
        return {a: o for a, (o, _) in out.items()}, {a: i for a, (_, i) in out.items()}


def test_agent_and_policy_spaces_disagreeing_is_a_config_error_at_build_time():
    with pytest.raises(ConfigError, match="agent 1 has observation space .* policy 'p'"):
        RolloutWorker(_Mixed, policies={"p": (PGPolicy, OBS, ACT, {})},
                      policy_mapping_fn=lambda agent, episode: "p")
    with pytest.raises(ConfigError, match="no agent maps to policy 'lonely'"):
        RolloutWorker(_Mixed, policies={"p0": PGPolicy, "p1": PGPolicy, "lonely": PGPolicy},
                      policy_mapping_fn=lambda agent, episode: f"p{agent}")
    # with matching spaces per policy it builds
    w = RolloutWorker(_Mixed, policies={"p0": PGPolicy, "p1": PGPolicy},
                      policy_mapping_fn=lambda agent, episode: f"p{agent}")
    assert w.get_policy("p1").action_space.shape == (1,)
    assert isinstance(w.env, _Mixed)


def test_policies_as_4_tuples_and_policy_spec_with_algorithm_default_class():
    algo = PG(PGConfig(env=make_multi_agent("CartPole-v1", 2), rollout_fragment_length=50,
                       train_batch_size=100, seed=0, model=(16,),
                       multiagent={"policies": {"a": (None, OBS, ACT, {"lr": 1e-2}),
                                                "b": PolicySpec(A2CPolicy)},
                                    "policy_mapping_fn": lambda agent, episode: "ab"[agent],
                                    "count_steps_by": "agent_steps"}))
    try:
        assert type(algo.get_policy("a")) is PGPolicy and algo.get_policy("a").lr == 1e-2
        assert type(algo.get_policy("b")) is A2CPolicy
        assert algo.config.count_steps_by == "agent_steps"
        r = algo.train()
        assert set(r["info"]["learner"]) == {"a", "b"}
        for key in ("policy_reward_mean", "policy_reward_min", "policy_reward_max"):
            assert set(r[key]) == {"a", "b"}
        assert r["policy_reward_min"]["a"] <= r["policy_reward_mean"]["a"] \
            <= r["policy_reward_max"]["a"]
    finally:
        algo.stop()
    with pytest.raises(ConfigError, match=r"count_steps_by'\]='rows'"):
        PGConfig(env="CartPole-v1", multiagent={"count_steps_by": "rows"})
    with pytest.raises(ConfigError, match="a tuple must be"):
        PG(PGConfig(env="CartPole-v1", multiagent={"policies": {"a": (PGPolicy, OBS)}}))


def test_train_one_step_trains_exactly_the_given_policies():
    cfg = WorkerConfig(rollout_fragment_length=20, seed=0, policy_config={"hidden_sizes": (8,)},
                       policies={"a": PolicySpec(PGPolicy), "b": PolicySpec(PGPolicy)},
                       policy_mapping_fn=lambda agent, episode: "ab"[agent],
                       policies_to_train=["a"])
    ws = WorkerSet(make_multi_agent("CartPole-v1", 2), None, cfg, num_workers=1,
                   backend="local")
    try:
        local, remote = ws.local_worker(), ws.remote_workers()[0]
        before = local.get_weights()
        ctx = using_metrics(MetricsContext())
        ctx.__enter__()
        batch = synchronous_parallel_sample(ws)[0]
        _, info = TrainOneStep(ws, policies=["b"])(batch)
        after = local.get_weights()
        assert list(info) == ["b"]
        assert all(np.array_equal(before["a"][k], after["a"][k]) for k in before["a"])
        assert not all(np.array_equal(before["b"][k], after["b"][k]) for k in before["b"])
        assert all(np.array_equal(after["b"][k], remote.get_weights()["b"][k])
                   for k in after["b"])
        _, info = TrainOneStep(ws, policies=["b"], num_sgd_iter=2, sgd_minibatch_size=8)(batch)
        assert list(info) == ["b"]
        _, info = TrainOneStep(ws)(batch)  # default: policies_to_train
        assert list(info) == ["a"]
        ctx.__exit__()
    finally:
        ws.stop()


def test_collect_metrics_is_a_plain_function_over_local_and_remote_workers():
    cfg = WorkerConfig(rollout_fragment_length=100, seed=0,
                       policies={"a": PolicySpec(PGPolicy), "b": PolicySpec(PGPolicy)},
                       policy_mapping_fn=lambda agent, episode: "ab"[agent])
    ws = WorkerSet(make_multi_agent("CartPole-v1", 2), None, cfg, num_workers=2,
                   backend="local")
    try:
        synchronous_parallel_sample(ws)
        r = collect_metrics(ws.local_worker(), ws.remote_workers())
        assert r["episodes_this_iter"] > 0
        assert set(r["policy_reward_mean"]) == {"a", "b"}
        assert r["episode_reward_mean"] == pytest.approx(
            r["policy_reward_mean"]["a"] + r["policy_reward_mean"]["b"])
        assert collect_metrics(ws.local_worker(), ws.remote_workers())["episodes_this_iter"] == 0
    finally:
        ws.stop()


def test_one_arg_mapping_functions_still_work():
    w = RolloutWorker(make_multi_agent("CartPole-v1", 2), policies={"a": PGPolicy, "b": PGPolicy},
                      policy_mapping_fn=lambda agent: "ab"[agent], rollout_fragment_length=10)
    assert set(w.sample().policy_batches) == {"a", "b"}
    with pytest.raises(ConfigError, match="takes neither"):
        RolloutWorker(make_multi_agent("CartPole-v1", 2), policies={"a": PGPolicy},
                      policy_mapping_fn=lambda: "a")


# -- PettingZoo -----------------------------------------------------------------------

def _pz_env(config):
    from pettingzoo.utils.env import ParallelEnv

    class Guess(ParallelEnv):
        """Each agent sees a bit and is paid for echoing it; agents drop out at
        different times, and the episode is truncated after ``max_cycles``."""

        metadata = {"name": "guess_v0"}

        def __init__(self, max_cycles=8):
            self.possible_agents = ["red", "blue", "green"]
            self.max_cycles = max_cycles
            self.rng = np.random.default_rng(0)

        def observation_space(self, agent):
            return gym.spaces.Box(0.0, 1.0, (1,), np.float32)

        def action_space(self, agent):
            return gym.spaces.Discrete(2)

        def _obs(self):
            self.bits = {a: int(self.rng.integers(2)) for a in self.agents}
            return {a: np.array([b], np.float32) for a, b in self.bits.items()}

        def reset(self, seed=None, options=None):
            if seed is not None:
                self.rng = np.random.default_rng(seed)
            self.agents, self.t = list(self.possible_agents), 0
            return self._obs(), {a: {} for a in self.agents}

        def step(self, actions):
            self.t += 1
            rewards = {a: float(actions[a] == self.bits[a]) for a in actions}
            terms = {a: a == "green" and self.t >= 3 for a in actions}
            truncs = {a: self.t >= self.max_cycles for a in actions}
            self.agents = [a for a in actions if not (terms[a] or truncs[a])]
            obs = {a: np.array([0.0], np.float32) for a in actions}
            obs.update(self._obs())
            return obs, rewards, terms, truncs, {a: {} for a in actions}

    return PettingZooEnv(Guess(**config))


def test_pettingzoo_parallel_env_samples_and_learns():
    w = RolloutWorker(_pz_env, env_config={"max_cycles": 8},
                      policies={"shared": (PGPolicy, None, None, {"lr": 3e-2})},
                      num_envs=4, rollout_fragment_length=16, seed=0)
    mb = w.sample()
    b = mb.policy_batches["shared"]
    green = b[SB.AGENT_INDEX] == 2
    # green terminates at t=3; the others are truncated at the 8-cycle limit
    assert b[SB.TERMINATEDS][green].sum() > 0 and not b[SB.TERMINATEDS][~green].any()
    assert b[SB.TRUNCATEDS][~green].sum() > 0
    assert set(np.unique(b[SB.T][green]).tolist()) == {0, 1, 2}
    eps = w.episode_stats()
    assert eps and all(e["episode_len"] == 8 for e in eps)
    for _ in range(30):
        w.learn_on_batch(w.sample())
    w.episode_stats()
    w.sample()
    late = w.episode_stats()
    # paid 1 per echoed bit: 8 + 8 + 3 at best, ~9.5 at random
    assert np.mean([e["episode_reward"] for e in late]) > 15
    with pytest.raises(ConfigError, match="give a pettingzoo.ParallelEnv"):
        PettingZooEnv(CARTPOLE)


# -- the seeds' many-policies tests -----------------------------------------------------

def _many_policies(n_agents: int, n_policies: int):
    policies = {f"pg_{i}": (PGPolicy, OBS, ACT, {"lr": 1e-2, "hidden_sizes": (32,)})
                for i in range(n_policies)}
    ids = list(policies)
    rng = random.Random(0)
    return policies, lambda agent_id: rng.choice(ids)


def test_train_multi_cartpole_many_policies():
    """The seeds' test: 10 agents, 20 PG policies, a random mapping, a worker trained
    with a synchronous sample/learn loop until ``episode_reward_mean >= 25 * n``."""
    n = 10
    policies, mapping = _many_policies(n, 20)
    worker = RolloutWorker(make_multi_agent("CartPole-v1", n), policies=policies,
                           policy_mapping_fn=mapping, rollout_fragment_length=100, seed=0)
    workers = WorkerSet.from_existing(worker)
    run = flowrl.Plan(ParallelRollouts(workers).for_each(TrainOneStep(workers))).compile()
    window: list[tuple[float, int]] = []  # (mean, episodes) per iteration
    for i in range(200):
        next(run)
        result = collect_metrics(worker)
        if result["episodes_this_iter"]:
            window.append((result["episode_reward_mean"], result["episodes_this_iter"]))
            assert len(result["policy_reward_mean"]) > 1
        while sum(c for _, c in window[1:]) >= 20:  # the last >= 20 episodes
            window.pop(0)
        episodes = sum(c for _, c in window)
        mean = sum(m * c for m, c in window) / max(episodes, 1)
        if episodes >= 20 and mean >= 25 * n:  # random play: about 22 * n
            break
    else:
        raise AssertionError(f"failed to improve reward: {window}")
    run.stop()
    worker.stop()


def test_train_external_multi_agent_cartpole_many_policies():
    """The seeds' second variant: the same task through an algorithm's plan, with the
    policies as 4-tuples in the multiagent config."""
    n = 10
    policies, mapping = _many_policies(n, 20)
    algo = PG(PGConfig(env=make_multi_agent("CartPole-v1", n), rollout_fragment_length=100,
                       train_batch_size=100, seed=0,
                       multiagent={"policies": policies, "policy_mapping_fn": mapping}))
    try:
        for i in range(200):
            result = algo.train()
            # the mean over the last 100 episodes (random play: about 22 * n)
            if result["episodes_total"] >= 100 and result["episode_reward_mean"] >= 25 * n:
                break
        else:
            raise AssertionError(f"failed to improve reward: {result['episode_reward_mean']}")
    finally:
        algo.stop()
