"""A small turn-based two-player game in RLlib's ``MultiAgentEnv`` style: tic-tac-toe.

Only the player whose turn is next gets an observation, as in RLlib's board-game
examples and in PettingZoo AEC games converted naively: after player 0 moves,
``step`` returns an observation for player 1 alone, and player 0 waits (its
reward, if the opponent's move decides the game, arrives without an observation).
:class:`~flowrl.workers.multi_agent_sampler.MultiAgentSampler` handles that: the
waiting player's row stays open, collects the rewards it is owed and ends when its
next observation arrives or the game is over.

- agents ``0`` (moves first) and ``1``;
- observation: the 9 cells seen by the player to move, ``+1`` its own marks,
  ``-1`` the opponent's, ``0`` empty (``Box(-1, 1, (9,), float32)``);
- action: a cell, ``Discrete(9)``; playing an occupied cell loses the game;
- rewards: ``+1`` to the winner and ``-1`` to the loser on the deciding move,
  ``0`` otherwise (a draw gives both 0);
- the game ends (``terminateds["__all__"]``) on a win, an illegal move or a full
  board; the final step returns an observation for the player who moved only, so
  the other one is done without a last observation.

>>> env = TicTacToe()
>>> obs, _ = env.reset(seed=0)
>>> list(obs)
[0]
>>> obs, rewards, terms, truncs, _ = env.step({0: 4})
>>> list(obs), float(obs[1][4]), rewards, terms["__all__"]
([1], -1.0, {0: 0.0}, False)
>>> for action in ({1: 0}, {0: 3}, {1: 1}):
...     obs, rewards, terms, _, _ = env.step(action)
>>> obs, rewards, terms, _, _ = env.step({0: 5})   # 3, 4, 5: a row for player 0
>>> list(obs), rewards, terms["__all__"]
([0], {0: 1.0, 1: -1.0}, True)
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.envs.multi_agent import MultiAgentEnv

_LINES = ((0, 1, 2), (3, 4, 5), (6, 7, 8), (0, 3, 6), (1, 4, 7), (2, 5, 8), (0, 4, 8),
          (2, 4, 6))


class TicTacToe(MultiAgentEnv):
    """Tic-tac-toe for two agents; see the module docstring. ``env_config`` is
    accepted (an env creator's argument) and must be empty."""

    def __init__(self, env_config: dict | None = None):
        if env_config:
            raise ValueError(f"TicTacToe takes no env_config keys, got {sorted(env_config)}")
        self.possible_agents = [0, 1]
        space = gym.spaces.Box(-1.0, 1.0, (9,), np.float32)
        self.observation_spaces = {a: space for a in self.possible_agents}
        self.action_spaces = {a: gym.spaces.Discrete(9) for a in self.possible_agents}
        self.board = np.zeros(9, np.float32)  # +1 player 0, -1 player 1
        self.to_move = 0

    def _view(self, agent: int) -> np.ndarray:
        return self.board * (1.0 if agent == 0 else -1.0)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        self.board = np.zeros(9, np.float32)
        self.to_move = 0
        return {0: self._view(0)}, {}

    def step(self, actions: dict[Any, Any]):
        mover, other = self.to_move, 1 - self.to_move
        if set(actions) != {mover}:
            raise ValueError(f"TicTacToe.step({actions!r}): it is agent {mover}'s turn; give "
                             f"an action for agent {mover} alone")
        cell = int(actions[mover])
        if not 0 <= cell < 9:
            raise ValueError(f"TicTacToe.step: cell {cell} is not in [0, 9)")
        if self.board[cell] != 0:  # an illegal move loses the game
            return self._end(mover, {mover: -1.0, other: 1.0})
        self.board[cell] = 1.0 if mover == 0 else -1.0
        mark = self.board[cell]
        if any(all(self.board[i] == mark for i in line) for line in _LINES):
            return self._end(mover, {mover: 1.0, other: -1.0})
        if not (self.board == 0).any():
            return self._end(mover, {mover: 0.0, other: 0.0})
        self.to_move = other
        return ({other: self._view(other)}, {mover: 0.0}, {"__all__": False},
                {"__all__": False}, {})

    def _end(self, mover: int, rewards: dict[int, float]):
        return ({mover: self._view(mover)}, rewards, {"__all__": True}, {"__all__": False}, {})


__all__ = ["TicTacToe"]
