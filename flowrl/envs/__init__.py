"""flowrl's own envs, registered with gymnasium under ``flowrl/`` on import.

- ``flowrl/StatelessCartPole-v1``, ``flowrl/CueRecall-v0``: tasks that need memory
  (:mod:`flowrl.envs.memory`);
- ``flowrl/MinAtarBreakout-v0``: a 10x10 pixel task for CNN policies
  (:mod:`flowrl.envs.pixels`, ``pip install 'flowrl[minatar]'``).

Importing this package does not import minatar.

>>> import gymnasium as gym
>>> env = gym.make("flowrl/CueRecall-v0", num_cues=2, delay=3)
>>> env.observation_space.shape, env.action_space
((4,), Discrete(2))
"""

from __future__ import annotations

import gymnasium as gym

from flowrl.envs.memory import CueRecall, StatelessCartPole
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


__all__ = ["StatelessCartPole", "CueRecall", "MinAtarEnv", "register_envs"]
