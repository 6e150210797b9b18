"""Turn-based multi-agent envs: an agent without an observation waits (issue 25, part 4).

The sampler's rows are checked against a hand-computed game: which rows exist,
their rewards (including rewards given while the agent waited), ``t``,
``new_obs``, and the close of an agent that ends without a last observation;
the same rows must come out whatever the fragment length, since a waiting row
is carried into the next fragment. Then PG and PPO train on tic-tac-toe locally,
and PG in a Ray worker.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from flowrl.algorithms import PG, PPO, PGConfig, PPOConfig
from flowrl.batch import SampleBatch as SB
from flowrl.envs.turn_based import TicTacToe
from flowrl.policies import PGPolicy
from flowrl.workers import MultiAgentEnv, RolloutWorker


class _Alternate(MultiAgentEnv):
    """Agents 0 and 1 move in turn for ``n`` steps; the observation is the step count.

    The mover gets 1; the other agent gets 10 on every step (also before its first
    move, which no row can take), plus 100 on the last step, where only the mover
    gets a (final) observation.
    """

    def __init__(self, n: int = 6):
        self.n = n
        self.possible_agents = [0, 1]
        box = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
        self.observation_spaces = {0: box, 1: box}
        self.action_spaces = {0: gym.spaces.Discrete(2), 1: gym.spaces.Discrete(2)}

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {0: np.zeros(1, np.float32)}, {}

    def step(self, actions):
        mover = self.t % 2
        assert set(actions) == {mover}, actions
        other = 1 - mover
        self.t += 1
        last = self.t == self.n
        rewards = {mover: 1.0, other: 10.0 + (100.0 if last else 0.0)}
        obs = {(mover if last else other): np.full(1, self.t, np.float32)}
        return obs, rewards, {"__all__": last}, {"__all__": False}, {}


# The first episode as rows per agent: (t, obs, reward, new_obs, terminated).
EXPECTED = {
    0: [(0, 0, 1 + 10, 2, False), (2, 2, 1 + 10, 4, False), (4, 4, 1 + 110, 4, True)],
    1: [(1, 1, 1 + 10, 3, False), (3, 3, 1 + 10, 5, False), (5, 5, 1, 6, True)],
}


def _first_episode_rows(fragment_length: int, fragments: int):
    w = RolloutWorker(lambda cfg: _Alternate(6), policies={"p0": PGPolicy, "p1": PGPolicy},
                      policy_mapping_fn=lambda agent, episode: f"p{agent}",
                      rollout_fragment_length=fragment_length, seed=0)
    rows = {0: [], 1: []}
    first_eps = None
    for _ in range(fragments):
        mb = w.sample()
        for agent in (0, 1):
            b = mb.policy_batches.get(f"p{agent}")
            if b is None:
                continue
            first_eps = int(b[SB.EPS_ID].min()) if first_eps is None else first_eps
            for i in range(b.count):
                if b[SB.EPS_ID][i] == first_eps:
                    rows[agent].append((int(b[SB.T][i]), float(b[SB.OBS][i][0]),
                                        float(b[SB.REWARDS][i]), float(b[SB.NEXT_OBS][i][0]),
                                        bool(b[SB.TERMINATEDS][i])))
    return rows, w.episode_stats()


@pytest.mark.parametrize("fragment_length", [1, 2, 3, 4, 6, 7])
def test_waiting_agents_rows_match_the_hand_computed_game_at_any_fragment_length(
        fragment_length):
    rows, episodes = _first_episode_rows(fragment_length, fragments=14 // fragment_length + 1)
    assert {a: sorted(r) for a, r in rows.items()} == EXPECTED
    # Each agent's return counts what its rows hold: the 10 given to agent 1 before its
    # first move belongs to no row and is not counted.
    first = episodes[0]
    assert first["agent_rewards"] == {0: ("p0", 133.0), 1: ("p1", 23.0)}
    assert first["episode_len"] == 6 and first["episode_reward"] == 156.0


def test_a_waiting_row_is_carried_not_cut_at_the_fragments_end():
    w = RolloutWorker(lambda cfg: _Alternate(6), policies={"p0": PGPolicy, "p1": PGPolicy},
                      policy_mapping_fn=lambda agent, episode: f"p{agent}",
                      rollout_fragment_length=1, seed=0)
    first = w.sample()  # agent 0 moved and waits: its row is not complete yet
    assert first.policy_batches == {} and first.env_steps() == 1
    second = w.sample()  # agent 1 moved: agent 0's row got its 10 and its next obs
    b = second.policy_batches["p0"]
    assert b.count == 1 and b[SB.REWARDS][0] == 11.0 and b[SB.NEXT_OBS][0][0] == 2.0
    assert "p1" not in second.policy_batches


class _Retire(MultiAgentEnv):
    """Agents 0 and 1 move in turn; on step 2 agent 0 retires, and that step returns
    an observation for agent 0 alone (done, no ``"__all__"``), so nobody can act on
    step 3: the env takes an empty action dict there and gives agent 1 its turn and
    0.5. Agent 1 then moves twice more and the game ends. The obs is the step count.
    """

    def __init__(self):
        self.possible_agents = [0, 1]
        box = gym.spaces.Box(0.0, 100.0, (1,), np.float32)
        self.observation_spaces = {0: box, 1: box}
        self.action_spaces = {0: gym.spaces.Discrete(2), 1: gym.spaces.Discrete(2)}
        self.seen = []

    def reset(self, *, seed=None, options=None):
        self.t = 0
        return {0: np.zeros(1, np.float32)}, {}

    def step(self, actions):
        self.seen.append(sorted(actions))
        mover = {0: 0, 1: 1, 2: 0, 3: None, 4: 1, 5: 1}[self.t]
        assert set(actions) == ({mover} if mover is not None else set()), (self.t, actions)
        self.t += 1
        obs = np.full(1, self.t, np.float32)
        if self.t == 3:    # agent 0 retires: its final obs only, the game goes on
            return {0: obs}, {0: 5.0}, {0: True, "__all__": False}, {"__all__": False}, {}
        if self.t == 4:    # the empty step: agent 1's turn again
            return {1: obs}, {1: 0.5}, {"__all__": False}, {"__all__": False}, {}
        last = self.t == 6
        return ({(1 - mover) if self.t < 3 else 1: obs}, {mover: float(1 + last)},
                {"__all__": last}, {"__all__": False}, {})


# The first episode as rows per agent: (t, obs, reward, new_obs, terminated).
RETIRE_EXPECTED = {
    0: [(0, 0, 1, 2, False), (2, 2, 5, 3, True)],
    1: [(1, 1, 1 + 0.5, 4, False), (4, 4, 1, 5, False), (5, 5, 2, 6, True)],
}


@pytest.mark.parametrize("fragment_length", [1, 2, 3, 4, 6, 7])
def test_a_step_leaving_only_done_agents_is_followed_by_an_empty_step_that_counts(
        fragment_length):
    w = RolloutWorker(lambda cfg: _Retire(), policies={"p0": PGPolicy, "p1": PGPolicy},
                      policy_mapping_fn=lambda agent, episode: f"p{agent}",
                      rollout_fragment_length=fragment_length, seed=0)
    rows, env_steps = {0: [], 1: []}, 0
    for _ in range(14 // fragment_length + 1):
        mb = w.sample()
        env_steps += mb.env_steps()
        for agent in (0, 1):
            b = mb.policy_batches.get(f"p{agent}")
            for i in range(0 if b is None else b.count):
                if b[SB.EPS_ID][i] == 0:
                    rows[agent].append((int(b[SB.T][i]), float(b[SB.OBS][i][0]),
                                        float(b[SB.REWARDS][i]), float(b[SB.NEXT_OBS][i][0]),
                                        bool(b[SB.TERMINATEDS][i])))
    assert [a for a in w.env.seen[:6]] == [[0], [1], [0], [], [1], [1]]
    assert env_steps == len(w.env.seen)    # the empty steps count as env steps, as in RLlib
    assert {a: sorted(r) for a, r in rows.items()} == RETIRE_EXPECTED
    first = w.episode_stats()[0]
    assert first["episode_len"] == 6 and first["agent_rewards"] == {0: ("p0", 6.0),
                                                                    1: ("p1", 4.5)}


def test_tic_tac_toe_games_close_both_players_and_are_zero_sum():
    w = RolloutWorker(TicTacToe, policies={"x": PGPolicy, "o": PGPolicy},
                      policy_mapping_fn=lambda agent, episode: "xo"[agent],
                      rollout_fragment_length=200, seed=0)
    mb = w.sample()
    episodes = w.episode_stats()
    assert len(episodes) > 10
    returns = {}
    for pid, b in mb.policy_batches.items():
        for eps, term, r in zip(b[SB.EPS_ID], b[SB.TERMINATEDS], b[SB.REWARDS]):
            ret, ended = returns.get((pid, int(eps)), (0.0, False))
            returns[(pid, int(eps))] = (ret + float(r), ended or bool(term))
    complete = {e for (pid, e), (_, ended) in returns.items() if ended}
    assert len(complete) >= len(episodes) - 1
    for eps in complete:  # both players closed, the loser included, and no reward lost
        x, o = returns[("x", eps)], returns[("o", eps)]
        assert x[1] and o[1] and x[0] + o[0] == 0.0 and x[0] in (-1.0, 0.0, 1.0)
    assert all(e["episode_reward"] == 0.0 for e in episodes)


def _config(cls, backend, **fields):
    return cls(env=TicTacToe, backend=backend, num_workers=1, seed=0,
               multiagent={"policies": {"x": None, "o": None},
                           "policy_mapping_fn": lambda agent, episode: "xo"[agent]},
               **fields)


def _check_result(result):
    assert result["training_iteration"] == 1 and result["episodes_this_iter"] > 0
    assert sorted(result["policy_reward_mean"]) == ["o", "x"]
    assert result["episode_reward_mean"] == 0.0  # zero-sum: nothing lost or doubled
    assert sorted(result["info"]["learner"]) == ["o", "x"]


@pytest.mark.parametrize("algo, config, fields", [
    (PG, PGConfig, dict(rollout_fragment_length=100, train_batch_size=200)),
    (PPO, PPOConfig, dict(num_envs_per_worker=2, rollout_fragment_length=50,
                          train_batch_size=200, sgd_minibatch_size=64, num_sgd_iter=2)),
])
def test_pg_and_ppo_train_on_tic_tac_toe_locally(algo, config, fields):
    with algo(_config(config, "local", **fields)) as a:
        _check_result(a.train())


@pytest.mark.ray
def test_pg_trains_on_tic_tac_toe_on_ray(ray_session):
    with PG(_config(PGConfig, "ray", rollout_fragment_length=100, train_batch_size=200)) as a:
        _check_result(a.train())
