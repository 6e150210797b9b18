"""Algorithms as plans: a typed config, a policy, and an ``execution_plan``.

Names resolve on first use (PEP 562): ``from flowrl.algorithms import PPO`` imports
only PPO's module, and PPO's policy (with torch) is imported when an algorithm is
built, overlapping ``ray.init`` on the Ray backend (see
:func:`~flowrl.algorithms.base.ensure_ray`).

>>> import flowrl.algorithms as algorithms
>>> sorted(algorithms.ALGORITHMS)
['a2c', 'a3c', 'apex', 'apex_ddpg', 'appo', 'bc', 'cql', 'ddpg', 'ddppo', 'dqn', 'impala', 'marwil', 'pg', 'ppo', 'sac', 'td3']
"""

from __future__ import annotations

import importlib
from typing import Any

from flowrl.config_text import suggest
from flowrl.errors import ConfigError

_WHERE = {
    "A2C": "a2c", "A2CConfig": "a2c", "A3C": "a3c", "A3CConfig": "a3c",
    "ApeX": "apex", "ApeXConfig": "apex", "ApexDDPG": "apex_ddpg",
    "ApexDDPGConfig": "apex_ddpg", "APPO": "appo", "APPOConfig": "appo",
    "Algorithm": "base", "AlgorithmConfig": "base", "build_algorithm": "base",
    "BC": "marwil", "BCConfig": "marwil", "CQL": "cql", "CQLConfig": "cql",
    "DDPG": "ddpg", "DDPGConfig": "ddpg",
    "DDPPO": "ddppo", "DDPPOConfig": "ddppo", "DQN": "dqn", "DQNConfig": "dqn",
    "IMPALA": "impala", "IMPALAConfig": "impala", "MARWIL": "marwil",
    "MARWILConfig": "marwil", "PG": "pg", "PGConfig": "pg",
    "PPO": "ppo", "PPOConfig": "ppo", "SAC": "sac", "SACConfig": "sac",
    "TD3": "ddpg", "TD3Config": "ddpg",
}
_NAMES = {"pg": "PG", "a2c": "A2C", "ppo": "PPO", "a3c": "A3C", "impala": "IMPALA",
          "appo": "APPO", "dqn": "DQN", "apex": "ApeX", "ddppo": "DDPPO", "marwil": "MARWIL",
          "bc": "BC", "sac": "SAC", "cql": "CQL", "ddpg": "DDPG", "td3": "TD3",
          "apex_ddpg": "ApexDDPG"}

__all__ = ["Algorithm", "AlgorithmConfig", "build_algorithm", "PG", "PGConfig", "A2C",
           "A2CConfig", "PPO", "PPOConfig", "ALGORITHMS", "A3C", "A3CConfig", "IMPALA",
           "IMPALAConfig", "APPO", "APPOConfig", "DQN", "DQNConfig", "ApeX", "ApeXConfig",
           "DDPPO", "DDPPOConfig", "MARWIL", "MARWILConfig", "BC", "BCConfig",
           "SAC", "SACConfig", "CQL", "CQLConfig", "DDPG", "DDPGConfig", "TD3", "TD3Config",
           "ApexDDPG", "ApexDDPGConfig", "algorithm_class"]


def __getattr__(name: str) -> Any:
    if name == "ALGORITHMS":
        value: Any = {key: __getattr__(cls) for key, cls in _NAMES.items()}
    elif name in _WHERE:
        value = getattr(importlib.import_module(f"flowrl.algorithms.{_WHERE[name]}"), name)
    else:
        raise AttributeError(f"module 'flowrl.algorithms' has no attribute {name!r}")
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))


def algorithm_class(name: Any) -> type:
    """The algorithm class registered as ``name`` (case-insensitive) in
    :data:`ALGORITHMS`; ConfigError with a suggestion otherwise.

    >>> algorithm_class("PPO").__name__
    'PPO'
    >>> algorithm_class("ppp")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: unknown algorithm 'ppp'; did you mean 'ppo'? (choose one of ['a2c', 'a3c', 'apex', 'apex_ddpg', 'appo', 'bc', 'cql', 'ddpg', 'ddppo', 'dqn', 'impala', 'marwil', 'pg', 'ppo', 'sac', 'td3'])
    """
    registry = globals()["ALGORITHMS"] if "ALGORITHMS" in globals() else __getattr__("ALGORITHMS")
    cls = registry.get(name.lower()) if isinstance(name, str) else None
    if cls is None:
        raise ConfigError(f"unknown algorithm {name!r}; {suggest(str(name), list(registry))} "
                          f"(choose one of {sorted(registry)})")
    return cls
