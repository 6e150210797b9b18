"""``PettingZooEnv``: a PettingZoo ``ParallelEnv`` as a :class:`~flowrl.envs.MultiAgentEnv`.

PettingZoo is to multi-agent envs what gymnasium is to single-agent ones; its
``ParallelEnv`` already speaks in dicts keyed by agent. The wrapper adds what the
rollout worker's protocol needs: ``observation_spaces`` / ``action_spaces`` dicts
(from the env's per-agent space methods) and ``"__all__"`` in ``terminateds`` /
``truncateds``, set once no agent is left (``env.agents`` is empty); it is a
termination when every agent that acted last terminated, else a truncation.

PettingZoo is an optional dependency (``pip install flowrl[multiagent]``); it is
imported only when a ``PettingZooEnv`` is built.
"""

from __future__ import annotations

from typing import Any

from flowrl.envs.multi_agent import MultiAgentEnv
from flowrl.errors import ConfigError


class PettingZooEnv(MultiAgentEnv):
    """Wrap ``env``, a ``pettingzoo.ParallelEnv``; see the module docstring.

    Use it in an env creator: ``env=lambda cfg: PettingZooEnv(my_parallel_env(**cfg))``.
    ``env.unwrapped``-style access goes through :attr:`par_env`.

    >>> from pettingzoo.utils.env import ParallelEnv
    >>> import gymnasium as gym
    >>> class Echo(ParallelEnv):
    ...     metadata = {"name": "echo"}
    ...     possible_agents = ["a", "b"]
    ...     def observation_space(self, agent): return gym.spaces.Discrete(2)
    ...     def action_space(self, agent): return gym.spaces.Discrete(2)
    ...     def reset(self, seed=None, options=None):
    ...         self.agents = list(self.possible_agents)
    ...         return {a: 0 for a in self.agents}, {a: {} for a in self.agents}
    ...     def step(self, actions):
    ...         self.agents = []
    ...         return (dict(actions), {a: 1.0 for a in actions}, {a: True for a in actions},
    ...                 {a: False for a in actions}, {a: {} for a in actions})
    >>> env = PettingZooEnv(Echo())
    >>> _ = env.reset(seed=0)
    >>> obs, rew, term, trunc, info = env.step({"a": 1, "b": 0})
    >>> obs, term["__all__"], trunc["__all__"], env.action_spaces["a"]
    ({'a': 1, 'b': 0}, True, False, Discrete(2))
    """

    def __init__(self, env: Any):
        try:
            from pettingzoo.utils.env import ParallelEnv
        except ImportError as e:  # optional dependency
            raise ConfigError("PettingZooEnv needs PettingZoo: pip install 'flowrl[multiagent]' "
                              "(or pip install pettingzoo)") from e
        if not isinstance(env, ParallelEnv):
            hint = (" (an AEC env: convert it with pettingzoo.utils.conversions."
                    "aec_to_parallel)" if hasattr(env, "agent_iter") else "")
            raise ConfigError(f"PettingZooEnv(env={type(env).__name__}): give a "
                              f"pettingzoo.ParallelEnv{hint}")
        self.par_env = env
        self.possible_agents = list(env.possible_agents)
        self.observation_spaces = {a: env.observation_space(a) for a in self.possible_agents}
        self.action_spaces = {a: env.action_space(a) for a in self.possible_agents}

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, infos = self.par_env.reset(seed=seed, options=options)
        return obs, infos

    def step(self, actions: dict):
        obs, rewards, terms, truncs, infos = self.par_env.step(actions)
        terms, truncs = dict(terms), dict(truncs)
        over = not self.par_env.agents
        all_term = over and all(terms.get(a, False) for a in actions)
        terms["__all__"] = all_term
        truncs["__all__"] = over and not all_term
        return obs, rewards, terms, truncs, infos

    def close(self) -> None:
        self.par_env.close()


__all__ = ["PettingZooEnv"]
