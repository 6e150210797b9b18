"""EnvPool's Atari as a gymnasium vector env in ``SAME_STEP`` autoreset mode.

``vector_env="envpool"`` (``pip install flowrl[envpool]``) steps a worker's ``ALE/...-v5``
envs in EnvPool's C++ thread pool, with EnvPool's own DeepMind preprocessing: up
to 30 no-op starts, frame skip 4 with a max-pool over the last two frames, 84x84
(or ``env_config`` ``screen_size``) grayscale, 4 frames stacked channels first,
uint8; for training, episodic life and sign-clipped rewards. The observations are
:func:`flowrl.envs.make_atari`'s in shape, dtype and meaning, not bit for bit
(EnvPool resizes and draws its no-ops its own way), so a run with it does not
repeat a ``"sync"`` run.

:class:`EnvPoolVectorEnv` turns EnvPool's protocol into the one the samplers
expect:

- Autoreset. EnvPool resets a finished env on the step after the one that ended
  it (a new game, or after a lost life the same game going on), ignoring that
  step's action. Here the step that ends an episode takes that reset step for
  just the finished envs within the same call, returns the next episode's first
  observation and the final one in ``infos["final_obs"]``, as gymnasium's
  ``AutoresetMode.SAME_STEP`` does.
- Whole games. A game is reported in ``infos["final_info"]["episode"]`` (``"r"``
  the game's own unclipped score, ``"l"`` its steps, ``"_episode"`` the mask) on
  the step it ends, as :mod:`flowrl.envs.atari`'s ``RecordEpisodeStatistics``
  does: a lost life ends a training episode but not the game.
- Seeding. EnvPool takes its seed when it is made and seeds its envs from it. The
  pool is made with a seed drawn from fresh OS entropy, so unseeded pools (every
  worker's with ``seed=None``, and every run's) draw their own no-op starts, as an
  unseeded gymnasium env does; a ``reset`` with a seed other than the pool's
  remakes it from that seed, so seeded runs repeat.

State: the pool, and per env the running game score and length.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.envs.atari import ATARI_NAMESPACE, screen_size_of
from flowrl.errors import ConfigError

#: ``env_config`` keys EnvPool takes for an ALE env, by their ale-py names, and the
#: preprocessing's ``screen_size`` (EnvPool's ``img_height`` and ``img_width``).
ENV_CONFIG_KEYS = ("repeat_action_probability", "full_action_space", "screen_size")


def import_envpool(where: str):
    """``envpool``, imported; a ConfigError starting with ``where`` when missing."""
    try:
        import envpool
    except ImportError:
        raise ConfigError(f"{where}: vector_env='envpool' needs envpool, which is not "
                          "installed; pip install flowrl[envpool], or use vector_env='sync' or "
                          "'async'") from None
    return envpool


def envpool_task(env_id: Any, env_config: dict, preprocessor_pref: str | None) -> str:
    """EnvPool's task id for ``env_id`` (``"ALE/Pong-v5"`` -> ``"Pong-v5"``); a
    ConfigError naming what EnvPool cannot do: ids other than ``ALE/`` ones,
    ``preprocessor_pref=None`` (EnvPool always preprocesses) and ``env_config``
    keys other than :data:`ENV_CONFIG_KEYS`.

    >>> envpool_task("ALE/Pong-v5", {}, "deepmind")
    'Pong-v5'
    >>> envpool_task("CartPole-v1", {}, "deepmind")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: vector_env='envpool' steps ALE/...-v5 envs only, not 'CartPole-v1'; use vector_env='sync' or 'async'
    """
    if not (isinstance(env_id, str) and env_id.startswith(ATARI_NAMESPACE)):
        raise ConfigError(f"vector_env='envpool' steps {ATARI_NAMESPACE}...-v5 envs only, not "
                          f"{env_id!r}; use vector_env='sync' or 'async'")
    if preprocessor_pref is None:
        raise ConfigError(f"vector_env='envpool' with {env_id!r} always applies the DeepMind "
                          "preprocessing; set preprocessor_pref='deepmind' or use "
                          "vector_env='sync' or 'async'")
    unknown = sorted(set(env_config) - set(ENV_CONFIG_KEYS))
    if unknown:
        raise ConfigError(f"vector_env='envpool' with {env_id!r}: env_config key "
                          f"{unknown[0]!r} is not one EnvPool takes; it takes "
                          f"{sorted(ENV_CONFIG_KEYS)} (or use vector_env='sync' or 'async')")
    return env_id[len(ATARI_NAMESPACE):]


def fresh_seed(num_envs: int) -> int:
    """A seed for a pool of ``num_envs`` drawn from fresh OS entropy, as gymnasium
    draws one for an unseeded env. EnvPool seeds env ``i`` with ``seed + i`` and takes
    int32 seeds only, so the seed is below ``2**31 - num_envs``.

    >>> 0 <= fresh_seed(8) < 2**31 - 8
    True
    """
    return int(np.random.default_rng().integers(2**31 - num_envs))


class EnvPoolVectorEnv(gym.vector.VectorEnv):
    """``num_envs`` copies of ``env_id`` in one EnvPool; see the module docstring.

    ``training`` turns on episodic life and reward clipping (reported games keep
    the raw scores). ``num_threads`` (0: EnvPool's choice) sizes the thread pool.
    """

    def __init__(self, env_id: str, num_envs: int, env_config: dict | None = None, *,
                 preprocessor_pref: str | None = "deepmind", training: bool = True,
                 num_threads: int = 0):
        env_config = dict(env_config or {})
        self._envpool = import_envpool(f"env {env_id!r}")
        self._task = envpool_task(env_id, env_config, preprocessor_pref)
        size = screen_size_of(env_id, env_config, preprocessor_pref)
        self._kwargs = dict(env_type="gymnasium", num_envs=num_envs, num_threads=num_threads,
                            img_height=size, img_width=size,
                            episodic_life=training, reward_clip=training, noop_max=30,
                            repeat_action_probability=env_config.get(
                                "repeat_action_probability", 0.0),
                            full_action_space=env_config.get("full_action_space", False))
        self.num_envs = num_envs
        self._seeded = fresh_seed(num_envs)
        self._pool = self._make(self._seeded)
        self.single_observation_space = self._pool.observation_space
        self.single_action_space = self._pool.action_space
        self.observation_space = gym.vector.utils.batch_space(self.single_observation_space,
                                                              num_envs)
        self.action_space = gym.vector.utils.batch_space(self.single_action_space, num_envs)
        self.metadata = {"autoreset_mode": gym.vector.AutoresetMode.SAME_STEP}
        self._score = np.zeros(num_envs, np.float64)
        self._length = np.zeros(num_envs, np.int64)

    def _make(self, seed: int):
        return self._envpool.make(self._task, seed=seed, **self._kwargs)

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        """Every env's first observation; a ``seed`` other than the pool's remakes it
        (``seed=None`` keeps the pool and its freshly drawn seed)."""
        if seed is not None and seed != self._seeded:
            self._pool.close()
            self._pool, self._seeded = self._make(int(seed)), int(seed)
        obs, info = self._pool.reset()
        self._score[:] = 0.0
        self._length[:] = 0
        return obs, {"lives": info["lives"]}

    def step(self, actions):
        obs, rewards, terms, truncs, info = self._pool.step(np.asarray(actions))
        self._score += info["reward"]
        self._length += 1
        infos: dict[str, Any] = {"lives": info["lives"]}
        done = terms | truncs
        if done.any():
            ids = np.flatnonzero(done)
            final_obs = np.empty(self.num_envs, dtype=object)
            final_obs[ids] = list(obs[ids])
            game_over = done & (info["terminated"].astype(bool) | truncs)
            final_info: dict[str, Any] = {}
            if game_over.any():
                final_info = {"episode": {"r": np.where(game_over, self._score, 0.0),
                                          "l": np.where(game_over, self._length, 0)},
                              "_episode": game_over}
                self._score[game_over] = 0.0
                self._length[game_over] = 0
            # EnvPool's own autoreset, now: a step of just the finished envs, whose
            # actions it ignores (its reset would start a new game after a lost life)
            first, _, _, _, first_info = self._pool.step(np.zeros(len(ids), np.int64), ids)
            obs = obs.copy()
            obs[first_info["env_id"]] = first
            infos.update(final_obs=final_obs, _final_obs=done, final_info=final_info,
                         _final_info=done)
        return obs, rewards, terms, truncs, infos

    def close(self, **kwargs) -> None:
        """Close the pool (its threads end)."""
        self._pool.close()


__all__ = ["EnvPoolVectorEnv", "envpool_task", "import_envpool"]
