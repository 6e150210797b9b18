"""The env-stepping loop's shared parts: Acting (forward, recurrent state, env actions)
and Episodes (ids, counts, callbacks), checked against literal expected states."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from flowrl.evaluation import play_episodes
from flowrl.workers.env_loop import Acting, Episodes
from flowrl.workers.episode import SINGLE_AGENT_ID


class Counting:
    """A recurrent policy whose state counts the steps since the episode's start; it
    records the inputs of every forward."""

    is_recurrent = True

    def __init__(self):
        self.seen: list[tuple] = []

    def get_initial_state(self):
        return [np.zeros(1, np.float32)]

    def compute_actions(self, obs, explore, state_batches, prev_actions, prev_rewards):
        self.seen.append((state_batches[0][:, 0].tolist(),
                          None if prev_actions is None else prev_actions.tolist(),
                          prev_rewards.tolist()))
        actions = np.asarray(obs, np.int64)[:, 0] % 2
        return actions, {"state_out_0": state_batches[0] + 1}


def test_a_recurrent_policy_gets_its_rows_state_and_starts_over_where_episodes_end():
    policy = Counting()
    acting = Acting(policy, gym.spaces.Discrete(2), explore=False, num_rows=3)
    assert acting.prev_actions is None
    a, extra = acting.act(np.array([[1], [2], [3]]))
    acting.advance(extra, a, [0.5, 1.5, 2.5], np.array([False, True, False]))
    assert [s[0] for s in acting.state[0].tolist()] == [1.0, 0.0, 1.0]
    assert acting.prev_actions.tolist() == [1, 0, 1] and acting.prev_rewards.tolist() == [
        0.5, 0.0, 2.5]
    # rows 2 and 0 act (in that order); row 1 keeps its state
    a, extra = acting.act(np.array([[4], [5]]), rows=[2, 0])
    acting.advance(extra, a, [3.0, 4.0], np.array([True, False]), rows=[2, 0])
    assert policy.seen == [([0.0, 0.0, 0.0], None, [0.0, 0.0, 0.0]),
                           ([1.0, 1.0], [1, 1], [2.5, 0.5])]
    assert [s[0] for s in acting.state[0].tolist()] == [2.0, 0.0, 0.0]
    assert acting.prev_actions.tolist() == [1, 0, 0]
    assert acting.prev_rewards.tolist() == [4.0, 0.0, 0.0]
    assert acting.num_forwards == 2


def test_actions_reach_the_env_as_ints_or_clipped_and_the_batch_keeps_them():
    discrete = Acting(None, gym.spaces.Discrete(3), explore=False).to_env(np.array([2, 0]))
    assert discrete == [2, 0] and all(type(x) is int for x in discrete)
    box = Acting(None, gym.spaces.Box(-1.0, 1.0, (2,)), explore=False)
    actions = np.array([[0.5, 3.0], [-2.0, 0.0]], np.float32)
    assert box.to_env(actions).tolist() == [[0.5, 1.0], [-1.0, 0.0]]
    assert actions.tolist() == [[0.5, 3.0], [-2.0, 0.0]]  # unclipped for the batch
    other = np.array([[1, 0]])
    assert Acting(None, gym.spaces.MultiBinary(2), explore=False).to_env(other) is other


class Recorder:
    """EpisodeCallbacks' interface: records (hook, episode id, length, last reward)."""

    policies = {"p": None}

    def __init__(self):
        self.calls: list[tuple] = []

    def start(self, episode):
        self.calls.append(("start", episode.episode_id, episode.length,
                           episode.last_reward_for()))

    def step(self, episode):
        self.calls.append(("step", episode.episode_id, episode.length,
                           episode.last_reward_for()))
        episode.custom_metrics["len"] = episode.length

    def end(self, episode):
        self.calls.append(("end", episode.episode_id, episode.length,
                           episode.last_reward_for()))
        episode.hist_data["h"] = [episode.length]


def test_episodes_count_run_the_hooks_and_carry_lives_into_the_game():
    hooks = Recorder()
    eps = Episodes(2, hooks, first_id=10)
    for i in range(2):
        eps.start(i, np.zeros(1), {})
    eps.t += 1
    eps.ret += [1.0, 2.0]
    eps.step(0, np.zeros(1), 1, 1.0, {}, False)
    eps.step(1, np.zeros(1), 0, 2.0, lambda: {"k": 1}, True)
    assert eps.live[1].last_info_for(SINGLE_AGENT_ID) == {"k": 1}
    assert eps.finish(1, None) is None  # a life: its metrics wait for the game's entry
    eps.begin(1, np.zeros(1), {})
    eps.t[1] += 2
    eps.step(1, np.zeros(1), 0, 3.0, {}, True)
    assert eps.finish(1, {"episode_len": 3}) == {
        "episode_len": 3, "custom_metrics": {"len": 2.0}, "hist_data": {"h": [1.0, 2.0]}}
    assert hooks.calls == [("start", 10, 0, 0.0), ("start", 11, 0, 0.0),
                           ("step", 10, 1, 1.0), ("step", 11, 1, 2.0), ("end", 11, 1, 2.0),
                           ("start", 12, 0, 0.0), ("step", 12, 2, 3.0), ("end", 12, 2, 3.0)]
    assert eps.eps_id.tolist() == [10, 12] and eps.next_id == 13
    assert Episodes(1, None).finish(0, {"x": 1}) == {"x": 1}  # no callbacks: as given


class AgentRecorder(Recorder):
    """Records (hook, episode id, length, agent returns, agent 1's last obs/action)."""

    def _log(self, hook, episode):
        self.calls.append((hook, episode.episode_id, episode.length, dict(episode.agent_rewards),
                           episode.last_observation_for(1), episode.last_action_for(1)))

    def start(self, episode):
        self._log("start", episode)

    def step(self, episode):
        self._log("step", episode)

    def end(self, episode):
        self._log("end", episode)
        episode.custom_metrics["len"] = episode.length


@pytest.mark.parametrize("with_callbacks", [False, True])
def test_multi_agent_episodes_map_policies_count_and_run_the_hooks(with_callbacks):
    hooks = AgentRecorder() if with_callbacks else None
    mapped = []

    def mapping(agent, episode):
        mapped.append((agent, episode.episode_id))
        return f"p{agent}"

    eps = Episodes(1, hooks, first_id=5, mapping=mapping)
    eps.start(0, {0: "o0", 1: "o1"}, {})  # the first episode: an Episode even without hooks
    episode = eps.live[0]
    assert episode.policy_for(1) == "p1" and episode.policy_for(1) == "p1"
    episode.agent_rewards.update({0: 1.0, 1: 2.0})  # the sampler adds up the returns
    eps.t[0] += 1
    # agent 0 acted and got no observation back: it keeps its first one
    assert eps.step_agents(0, {1: "o1'"}, {0: 7}, {0: 1.0, 1: 2.0}, {}, False) is None
    assert episode.length == 1
    episode.agent_rewards[1] += 3.0
    eps.t[0] += 1
    entry = eps.step_agents(0, {}, {1: 8}, {1: 3.0}, {}, True)
    assert mapped == [(1, 5), (0, 5)]
    assert entry == {"episode_reward": 6.0, "episode_len": 2,
                     "policy_rewards": {"p0": [1.0], "p1": [5.0]},
                     "agent_rewards": {0: ("p0", 1.0), 1: ("p1", 5.0)},
                     **({"custom_metrics": {"len": 2.0}} if with_callbacks else {})}
    eps.begin(0, {1: "n1"}, {1: {"k": 1}})
    assert eps.live[0].episode_id == 6 and eps.t.tolist() == [0]
    if with_callbacks:
        assert eps.live[0].last_info_for(1) == {"k": 1}
        assert hooks.calls == [("start", 5, 0, {}, "o1", None),
                               ("step", 5, 1, {0: 1.0, 1: 2.0}, "o1'", None),
                               ("step", 5, 2, {0: 1.0, 1: 5.0}, "o1'", 8),
                               ("end", 5, 2, {0: 1.0, 1: 5.0}, "o1'", 8),
                               ("start", 6, 0, {}, "n1", None)]
    else:
        assert eps.live[0].last_observation_for(1) is None  # nothing recorded


class Steps(gym.Env):
    """Episode ``k`` (its reset seed) lasts ``k`` steps; the observation is the step."""

    observation_space = gym.spaces.Box(0, 100, (1,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def reset(self, *, seed=None, options=None):
        self.n, self.t = seed, 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        self.t += 1
        return np.full(1, self.t, np.float32), 1.0, self.t >= self.n, False, {}


def test_evaluation_carries_each_slots_state_through_the_shared_loop():
    policy = Counting()
    out = play_episodes([Steps(), Steps()], policy, [[1, 3], [2]], seed=0)
    assert [(e["episode"], e["episode_len"]) for e in out] == [(1, 1), (2, 2), (3, 3)]
    # slot 0 plays 1 step, then episode 3; slot 1 plays 2 steps, then nothing
    assert [s for s, _, _ in policy.seen] == [[0.0, 0.0], [0.0, 1.0], [1.0], [2.0]]
    assert [r for _, _, r in policy.seen] == [[0.0, 0.0], [0.0, 1.0], [1.0], [1.0]]


@pytest.mark.parametrize("rows", [None, [1, 0]])
def test_a_feedforward_policy_acts_lean_only_when_asked(rows):
    class Plain:
        is_recurrent = False
        calls: list = []

        def compute_actions(self, obs, explore, **kwargs):
            self.calls.append(kwargs)
            return np.zeros(len(obs), np.int64), {}

    acting = Acting(Plain(), gym.spaces.Discrete(2), explore=True)
    acting.act(np.zeros((2, 1)), rows=rows)
    acting.act(np.zeros((2, 1)), lean=True, rows=rows)
    assert Plain.calls == [{}, {"vf_preds": False}]
