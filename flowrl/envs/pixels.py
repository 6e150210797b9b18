"""Small pixel tasks for CNN policies: MinAtar games as gymnasium envs.

MinAtar (``pip install 'flowrl[minatar]'``) keeps the dynamics of five Atari games
on a 10x10 grid with one boolean channel per object kind, so a CNN learns them on
a CPU. :class:`MinAtarEnv` presents the state as a ``uint8`` image ``Box`` of
shape ``(C, 10, 10)``, channels first, values 0 and 255: the same dtype, layout
and range as the Atari frames of :mod:`flowrl.envs.atari`, so a model that
divides uint8 inputs by 255 sees 0.0/1.0.

Why not ``minatar.gym``: minatar 1.0.15 ships gymnasium registrations
(``MinAtar/Breakout-v1``) that make, reset and step under gymnasium 1.2.2, but its
``reset(seed=)`` does not call ``gymnasium.Env.reset``, so ``env.np_random`` is
never seeded and ``gymnasium.utils.env_checker.check_env`` rejects it; it also
keeps the deprecated ``seed()`` method and gives a bool ``Box``. Wrapping
``minatar.Environment`` directly is as short as wrapping that env, and passes
the checker.
"""

from __future__ import annotations

from typing import Any, ClassVar

import gymnasium as gym
import numpy as np

from flowrl.errors import ConfigError

#: MinAtar's games (``minatar.environments`` module names).
MINATAR_GAMES = ("asterix", "breakout", "freeway", "seaquest", "space_invaders")


class MinAtarEnv(gym.Env):
    """One MinAtar game as a gymnasium env with a ``(C, 10, 10)`` uint8 observation.

    ``game`` is one of :data:`MINATAR_GAMES`; ``use_minimal_action_set`` (default
    True) keeps only the actions the game uses (3 for breakout instead of 6);
    ``sticky_action_prob`` (MinAtar's default 0.1: with that probability the
    previous action repeats) and ``difficulty_ramping`` go to
    ``minatar.Environment``. Observation values are 0 or 255 (object present).
    ``reset(seed=s)`` seeds ``np_random``, which seeds MinAtar's own RNG (sticky
    actions, spawns). Registered as ``flowrl/MinAtarBreakout-v0``.

    Raises ConfigError when minatar is not installed or ``game`` is unknown.

    >>> env = MinAtarEnv("breakout")
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape, obs.dtype, sorted(set(obs.ravel().tolist())), env.action_space
    ((4, 10, 10), dtype('uint8'), [0, 255], Discrete(3))
    """

    metadata: ClassVar[dict[str, Any]] = {"render_modes": []}

    def __init__(self, game: str = "breakout", use_minimal_action_set: bool = True,
                 sticky_action_prob: float = 0.1, difficulty_ramping: bool = True):
        if game not in MINATAR_GAMES:
            raise ConfigError(f"MinAtarEnv(game={game!r}): unknown MinAtar game; choose one "
                              f"of {list(MINATAR_GAMES)}")
        try:
            import minatar
        except ImportError:
            raise ConfigError(f"MinAtarEnv(game={game!r}): the minatar package is not "
                              "installed; pip install 'flowrl[minatar]'") from None
        self.game_name = game
        self.game = minatar.Environment(game, sticky_action_prob=sticky_action_prob,
                                        difficulty_ramping=difficulty_ramping)
        self.action_set = (list(self.game.minimal_action_set()) if use_minimal_action_set
                           else list(range(self.game.num_actions())))
        rows, cols, channels = self.game.state_shape()
        self.observation_space = gym.spaces.Box(0, 255, shape=(channels, rows, cols),
                                                dtype=np.uint8)
        self.action_space = gym.spaces.Discrete(len(self.action_set))
        self._seeded = False

    def _obs(self) -> np.ndarray:
        return np.ascontiguousarray(self.game.state().transpose(2, 0, 1), dtype=np.uint8) * 255

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        if seed is not None or not self._seeded:  # else MinAtar's RNG runs on
            self.game.seed(int(self.np_random.integers(2**31 - 1)))
            self._seeded = True
        self.game.reset()
        return self._obs(), {}

    def step(self, action):
        reward, terminated = self.game.act(self.action_set[int(action)])
        return self._obs(), float(reward), bool(terminated), False, {}


__all__ = ["MinAtarEnv", "MINATAR_GAMES"]
