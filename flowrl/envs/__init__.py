"""flowrl's own envs, registered with gymnasium under ``flowrl/`` on import.

- ``flowrl/StatelessCartPole-v1``, ``flowrl/CueRecall-v0``: tasks that need memory
  (:mod:`flowrl.envs.memory`);
- ``flowrl/MinAtarBreakout-v0``: a 10x10 pixel task for CNN policies
  (:mod:`flowrl.envs.pixels`, ``pip install 'flowrl[minatar]'``);
- ``flowrl/MultiAgentCartPole-v1``: a multi-agent env id (not in gymnasium's
  registry, which holds single-agent envs; :mod:`flowrl.envs.multi_agent`);
- ``ALE/...-v5`` ids are ale-py's; :func:`make_atari` adds the DeepMind
  preprocessing (:mod:`flowrl.envs.atari`, ``pip install 'flowrl[atari]'``).

Rollout workers build envs from the id string in their own process;
:func:`ensure_registered` makes an id's namespace known there first.
Importing this package imports neither minatar nor ale-py.

>>> import gymnasium as gym
>>> env = gym.make("flowrl/CueRecall-v0", num_cues=2, delay=3)
>>> env.observation_space.shape, env.action_space
((4,), Discrete(2))
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym

from flowrl.envs.atari import PREPROCESSOR_PREFS, import_ale, is_atari_id, make_atari
from flowrl.envs.memory import CueRecall, StatelessCartPole
from flowrl.envs.multi_agent import multi_agent_creator
from flowrl.envs.pixels import MinAtarEnv

_IDS = {
    "flowrl/StatelessCartPole-v1": dict(entry_point="flowrl.envs.memory:StatelessCartPole",
                                        max_episode_steps=500, reward_threshold=475.0),
    "flowrl/CueRecall-v0": dict(entry_point="flowrl.envs.memory:CueRecall",
                                reward_threshold=0.99),
    "flowrl/MinAtarBreakout-v0": dict(entry_point="flowrl.envs.pixels:MinAtarEnv",
                                      kwargs={"game": "breakout"}),
}


def register_envs() -> None:
    """Register the ``flowrl/`` ids that gymnasium's registry lacks (importing this
    package does it; calling it again changes nothing)."""
    for env_id, kwargs in _IDS.items():
        if env_id not in gym.registry:
            gym.register(env_id, **kwargs)


register_envs()


def ensure_registered(env_id: str, where: str = "") -> None:
    """Make ``env_id`` known to gymnasium in this process: ``flowrl/`` ids by
    :func:`register_envs`, ``ALE/`` ids by importing ale-py (a ConfigError saying
    ``pip install 'flowrl[atari]'`` when it is missing, starting with ``where``,
    default the id). Other ids are left to gymnasium.

    >>> ensure_registered("flowrl/StatelessCartPole-v1")
    >>> gym.spec("flowrl/StatelessCartPole-v1").reward_threshold
    475.0
    """
    if isinstance(env_id, str) and env_id.startswith("flowrl/"):
        register_envs()
    elif is_atari_id(env_id):
        import_ale(where or repr(env_id))


def reports_episode_infos(env: Any) -> bool:
    """Whether ``env``'s wrapper chain (``env``, ``env.env``, ``env.env.env``...)
    holds a ``gymnasium.wrappers.RecordEpisodeStatistics`` (or its vector
    version). Such an env reports each finished episode as ``info["episode"]``
    (``"r"`` return, ``"l"`` length), and those are the returns to report: for
    :func:`make_atari`, whole games with unclipped scores, where the env's own
    ``terminated`` and rewards are per life and clipped.

    >>> reports_episode_infos(gym.make("CartPole-v1"))
    False
    >>> reports_episode_infos(gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1")))
    True
    """
    kinds = (gym.wrappers.RecordEpisodeStatistics, gym.wrappers.vector.RecordEpisodeStatistics)
    seen = set()
    while env is not None and id(env) not in seen:
        if isinstance(env, kinds):
            return True
        seen.add(id(env))
        env = getattr(env, "env", None)
    return False


__all__ = ["StatelessCartPole", "CueRecall", "MinAtarEnv", "make_atari", "is_atari_id",
           "ensure_registered", "register_envs", "reports_episode_infos", "PREPROCESSOR_PREFS",
           "multi_agent_creator"]
