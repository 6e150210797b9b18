"""Multi-agent envs: the protocol rollout workers understand, a helper to build
one, and flowrl's multi-agent env ids.

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

gymnasium's registry holds single-agent envs only (``gymnasium.make`` wraps what
it builds in wrappers that need a ``gymnasium.Env``), so a YAML spec could not name
a :class:`MultiAgentEnv`. The ids here fill that gap; a config,
a rollout worker and the CLI accept them wherever they accept a gymnasium id:

- ``flowrl/MultiAgentCartPole-v1``: ``num_agents`` (``env_config``, default 2)
  independent CartPole-v1 copies, agent ``i`` playing copy ``i`` (as RLlib's
  ``MultiAgentCartPole`` example env); the env episode ends when every copy has.

>>> env = multi_agent_creator("flowrl/MultiAgentCartPole-v1")({"num_agents": 3})
>>> obs, _ = env.reset(seed=0)
>>> sorted(obs), env.action_spaces[2]
([0, 1, 2], Discrete(2))
>>> multi_agent_creator("CartPole-v1") is None
True
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym

from flowrl.errors import ConfigError


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


def _multi_agent_cartpole(env_config: dict) -> Any:
    config = dict(env_config or {})
    n = config.pop("num_agents", 2)
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"env_config['num_agents']={n!r} for 'flowrl/MultiAgentCartPole-v1': "
                          "must be an int >= 1")
    return make_multi_agent("CartPole-v1", n)(config)


#: id -> (creator(env_config) -> MultiAgentEnv, the env_config keys it takes).
MULTI_AGENT_IDS: dict[str, tuple[Callable[[dict], Any], tuple[str, ...]]] = {
    "flowrl/MultiAgentCartPole-v1": (_multi_agent_cartpole, ("num_agents",)),
}


def multi_agent_creator(env_id: Any) -> Callable[[dict], Any] | None:
    """The ``creator(env_config)`` of flowrl multi-agent env id ``env_id``, or None
    when ``env_id`` is not one (a gymnasium id, a callable)."""
    entry = MULTI_AGENT_IDS.get(env_id) if isinstance(env_id, str) else None
    return entry[0] if entry else None


def check_multi_agent_env_config(env_id: str, env_config: dict, where: str) -> None:
    """A ConfigError naming ``where`` when ``env_config`` has a key that multi-agent
    id ``env_id`` does not take."""
    accepted = MULTI_AGENT_IDS[env_id][1]
    unknown = sorted(set(env_config) - set(accepted), key=str)
    if unknown:
        raise ConfigError(f"{where}: {env_id!r} takes no argument {unknown[0]!r}; it takes "
                          f"{list(accepted)}")


__all__ = ["MultiAgentEnv", "make_multi_agent", "MULTI_AGENT_IDS", "multi_agent_creator",
           "check_multi_agent_env_config"]
