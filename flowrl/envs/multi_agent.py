"""flowrl's multi-agent env ids, for specs that name an env by a string.

gymnasium's registry holds single-agent envs only (``gymnasium.make`` wraps what
it builds in wrappers that need a ``gymnasium.Env``), so a YAML spec could not name
a :class:`~flowrl.workers.MultiAgentEnv`. The ids here fill that gap; a config,
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

from flowrl.errors import ConfigError


def _multi_agent_cartpole(env_config: dict) -> Any:
    from flowrl.workers.multi_agent_env import make_multi_agent
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


__all__ = ["MULTI_AGENT_IDS", "multi_agent_creator", "check_multi_agent_env_config"]
