"""Envs that need memory: a policy that sees only the current observation cannot
solve them, a recurrent one can.

- :class:`StatelessCartPole`: CartPole-v1 with the two velocities removed from the
  observation. Position and angle alone do not say where the pole is going; a
  policy has to infer velocity from consecutive observations.
- :class:`CueRecall`: a cue shown once, ``delay`` blank steps, then the agent must
  name the cue. Without memory the answer step looks the same whatever the cue
  was, so any memoryless policy scores exactly chance (``1 / num_cues``); with
  memory the score is 1.0.

Both are registered as ``flowrl/StatelessCartPole-v1`` and ``flowrl/CueRecall-v0``
when :mod:`flowrl.envs` is imported, and are seeded through ``reset(seed=...)``.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np
from gymnasium.envs.classic_control.cartpole import CartPoleEnv

from flowrl.errors import ConfigError

#: The CartPole observation entries StatelessCartPole keeps: cart position, pole angle.
KEPT = np.array([0, 2])


class StatelessCartPole(CartPoleEnv):
    """CartPole-v1 observing ``[cart position, pole angle]`` only (a ``Box`` of shape
    ``(2,)``). Dynamics, reward, termination and (registered) the 500-step limit are
    CartPole's: the full state still evolves, only the velocities are hidden.

    >>> env = gym.make("flowrl/StatelessCartPole-v1")
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape, env.observation_space.shape, env.spec.max_episode_steps
    ((2,), (2,), 500)
    """

    def __init__(self, render_mode: str | None = None):
        super().__init__(render_mode=render_mode)
        full = self.observation_space
        self.observation_space = gym.spaces.Box(full.low[KEPT], full.high[KEPT],
                                                dtype=np.float32)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        obs, info = super().reset(seed=seed, options=options)
        return obs[KEPT], info

    def step(self, action):
        obs, reward, terminated, truncated, info = super().step(action)
        return obs[KEPT], reward, terminated, truncated, info


class CueRecall(gym.Env):
    """Remember a cue over ``delay`` blank steps, then name it.

    An episode has ``delay + 1`` steps. The observation (float32, length
    ``num_cues + 2``) is ``[cue one-hot..., cue_flag, answer_flag]``:

    - ``t = 0``: the cue (drawn uniformly from ``num_cues``) one-hot, ``cue_flag=1``;
    - ``t = 1 .. delay``: the one-hot and ``cue_flag`` are zero, so nothing about the
      cue is visible; ``answer_flag`` is 1 at ``t = delay``, the answer step.

    The action (``Discrete(num_cues)``) taken at the answer step is graded: reward
    1 if it equals the cue, else 0, and the episode terminates. Actions at earlier
    steps earn 0 and change nothing. So an episode's return is its accuracy: the
    answer-step observation is the same for every cue, hence any memoryless policy
    (deterministic or not) scores ``1 / num_cues`` in expectation, and a policy
    that remembers ``t = 0`` scores 1.0.

    ``num_cues >= 2`` and ``delay >= 1`` are keyword arguments (``env_config`` keys
    for ``flowrl/CueRecall-v0``).

    >>> env = CueRecall(num_cues=3, delay=2)
    >>> obs, _ = env.reset(seed=0)
    >>> cue = int(obs[:3].argmax())
    >>> env.step(0)[0].tolist()
    [0.0, 0.0, 0.0, 0.0, 0.0]
    >>> obs, reward, terminated, truncated, _ = env.step(cue)
    >>> obs.tolist(), reward, terminated
    ([0.0, 0.0, 0.0, 0.0, 1.0], 0.0, False)
    >>> env.step(cue)[1:3]
    (1.0, True)
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, num_cues: int = 4, delay: int = 5):
        for name, value, lo in (("num_cues", num_cues, 2), ("delay", delay, 1)):
            if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
                raise ConfigError(f"CueRecall({name}={value!r}): must be an int >= {lo}")
        self.num_cues, self.delay = int(num_cues), int(delay)
        self.observation_space = gym.spaces.Box(0.0, 1.0, shape=(self.num_cues + 2,),
                                                dtype=np.float32)
        self.action_space = gym.spaces.Discrete(self.num_cues)
        self._cue = 0
        self._t = 0

    def _obs(self) -> np.ndarray:
        obs = np.zeros(self.num_cues + 2, dtype=np.float32)
        if self._t == 0:
            obs[self._cue] = 1.0
            obs[self.num_cues] = 1.0
        if self._t == self.delay:
            obs[self.num_cues + 1] = 1.0
        return obs

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._cue = int(self.np_random.integers(self.num_cues))
        self._t = 0
        return self._obs(), {}

    def step(self, action):
        if self._t > self.delay:
            raise gym.error.ResetNeeded("CueRecall: the episode is over; call reset()")
        if self._t < self.delay:
            self._t += 1
            return self._obs(), 0.0, False, False, {}
        self._t += 1
        reward = 1.0 if int(action) == self._cue else 0.0
        return np.zeros(self.num_cues + 2, dtype=np.float32), reward, True, False, {}


__all__ = ["StatelessCartPole", "CueRecall"]
