"""The multi-agent env protocol rollout workers understand, and a helper to build one.

A :class:`MultiAgentEnv` follows gymnasium's ``reset``/``step`` with every value a
dict keyed by agent id (RLlib's convention):

- ``reset(seed=None, options=None) -> (obs, infos)``
- ``step(actions) -> (obs, rewards, terminateds, truncateds, infos)``; only agents
  in ``actions`` acted, and the agents in the returned ``obs`` act next.
  ``terminateds``/``truncateds`` carry the key ``"__all__"`` (the env episode is
  over); a done agent does not act again this episode. An agent that acted may get
  no ``obs`` entry (turn-based games): it waits until its next one, and rewards
  given to it meanwhile count for its last action (see
  :mod:`flowrl.workers.multi_agent_sampler`); at its end it may get its final
  observation, or none.
- ``possible_agents`` (list), ``observation_spaces`` and ``action_spaces`` (dicts
  by agent id).

The worker resets the env itself when ``"__all__"`` is set (no auto-reset).
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym


class MultiAgentEnv:
    """Base class marking an env as multi-agent; see the module docstring."""

    possible_agents: list
    observation_spaces: dict
    action_spaces: dict

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        raise NotImplementedError

    def step(self, actions: dict):
        raise NotImplementedError

    def close(self) -> None:
        pass


def make_multi_agent(env: str | Callable[[dict], gym.Env], num_agents: int = 2):
    """An env creator for ``num_agents`` independent copies of a single-agent env.

    Agent ``i`` (id ``i``) plays copy ``i``; the env episode ends when every copy
    has ended. Useful to test multi-agent plumbing with ordinary gymnasium envs.

    >>> env = make_multi_agent("CartPole-v1", 2)({})
    >>> obs, _ = env.reset(seed=0)
    >>> sorted(obs), env.action_spaces[1]
    ([0, 1], Discrete(2))
    """

    def create(env_config: dict) -> MultiAgentEnv:
        return _IndependentCopies(env, num_agents, env_config or {})

    return create


class _IndependentCopies(MultiAgentEnv):
    def __init__(self, env, num_agents: int, env_config: dict):
        make = (lambda: gym.make(env, **env_config)) if isinstance(env, str) \
            else (lambda: env(env_config))
        self.envs = [make() for _ in range(num_agents)]
        self.possible_agents = list(range(num_agents))
        self.observation_spaces = {i: e.observation_space for i, e in enumerate(self.envs)}
        self.action_spaces = {i: e.action_space for i, e in enumerate(self.envs)}
        self._done: set[int] = set()

    def reset(self, *, seed=None, options=None):
        self._done = set()
        results = [e.reset(seed=None if seed is None else seed + i, options=options)
                   for i, e in enumerate(self.envs)]
        return ({i: r[0] for i, r in enumerate(results)},
                {i: r[1] for i, r in enumerate(results)})

    def step(self, actions: dict[Any, Any]):
        obs, rew, term, trunc, info = {}, {}, {}, {}, {}
        for i, action in actions.items():
            obs[i], rew[i], term[i], trunc[i], info[i] = self.envs[i].step(action)
            if term[i] or trunc[i]:
                self._done.add(i)
        everyone = len(self._done) == len(self.envs)
        term["__all__"] = everyone and all(term.get(i, True) for i in actions)
        trunc["__all__"] = everyone and not term["__all__"]
        return obs, rew, term, trunc, info

    def close(self) -> None:
        for e in self.envs:
            e.close()


__all__ = ["MultiAgentEnv", "make_multi_agent"]
