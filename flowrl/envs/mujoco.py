"""MuJoCo continuous control with CleanRL's observation and reward normalization.

:func:`normalized_env` is an env creator (``AlgorithmConfig.env`` takes it, with
``env_config={"id": "Hopper-v5"}``) that wraps a gymnasium env as CleanRL's
``ppo_continuous_action.py`` does, innermost first:

1. ``RecordEpisodeStatistics``: episode returns and lengths of the *raw*
   rewards, in ``info["episode"]`` when an episode ends;
2. ``ClipAction``: actions clipped to the env's bounds;
3. ``NormalizeObservation`` then a clip to ``[-clip_obs, clip_obs]``;
4. ``NormalizeReward(gamma)`` (rewards divided by a running std of the
   discounted return) then a clip to ``[-clip_reward, clip_reward]``.

The normalization statistics are per env copy and keep updating while it runs,
as in CleanRL. Importing this module also registers ``flowrl/Hopper-v5``,
``flowrl/HalfCheetah-v5`` and ``flowrl/Walker2d-v5`` (the same wrapping with
the defaults) with gymnasium, so a config file can name one as
``env: flowrl.envs.mujoco:flowrl/Hopper-v5`` (gymnasium imports the module named
before the colon).

The learner sees normalized rewards; the returns to compare with published
scores are the raw ones that :func:`episode_statistics` reads from the
``RecordEpisodeStatistics`` wrapper.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.errors import ConfigError

#: ``env_config`` keys :func:`normalized_env` takes, with their defaults (``id`` has none).
DEFAULTS = {"gamma": 0.99, "clip_obs": 10.0, "clip_reward": 10.0}
#: The envs registered as ``flowrl/<id>`` by importing this module.
REGISTERED = ("Hopper-v5", "HalfCheetah-v5", "Walker2d-v5")


def normalized_env(env_config: dict[str, Any]) -> gym.Env:
    """A gymnasium env ``env_config["id"]`` (a Box action space) wrapped as the module
    docstring says; ``gamma``, ``clip_obs`` and ``clip_reward`` default to
    ``DEFAULTS``. Any other key is passed to ``gymnasium.make``.

    >>> env = normalized_env({"id": "Pendulum-v1", "gamma": 0.9})
    >>> obs, _ = env.reset(seed=0)
    >>> bool(np.all(np.abs(obs) <= 10)), env.observation_space.shape
    (True, (3,))
    >>> _, reward, *_ = env.step(np.array([5.0], np.float32))  # clipped to 2 by ClipAction
    >>> bool(abs(reward) <= 10)
    True
    """
    if not isinstance(env_config, dict) or "id" not in env_config:
        raise ConfigError(f"normalized_env(env_config={env_config!r}): give the gymnasium id, "
                          "e.g. env_config={'id': 'Hopper-v5'}")
    settings = {**DEFAULTS, **env_config}
    env_id = settings.pop("id")
    gamma, clip_obs, clip_reward = (settings.pop(k) for k in DEFAULTS)
    for name, value, ok in (("gamma", gamma, 0 <= gamma <= 1),
                            ("clip_obs", clip_obs, clip_obs > 0),
                            ("clip_reward", clip_reward, clip_reward > 0)):
        if not ok:
            raise ConfigError(f"normalized_env(env_config[{name!r}]={value!r}): must be "
                              f"{'in [0, 1]' if name == 'gamma' else '> 0'}")
    env = gym.make(env_id, **settings)
    if not isinstance(env.action_space, gym.spaces.Box):
        raise ConfigError(f"normalized_env: {env_id!r} has action space {env.action_space}; "
                          "ClipAction needs a Box")
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = gym.wrappers.ClipAction(env)
    env = gym.wrappers.NormalizeObservation(env)
    env = gym.wrappers.TransformObservation(
        env, lambda obs: np.clip(obs, -clip_obs, clip_obs), env.observation_space)
    env = gym.wrappers.NormalizeReward(env, gamma=gamma)
    return gym.wrappers.TransformReward(env, lambda r: np.clip(r, -clip_reward, clip_reward))


def episode_statistics(env: gym.Env) -> gym.wrappers.RecordEpisodeStatistics:
    """The ``RecordEpisodeStatistics`` wrapper in ``env``'s chain of wrappers (its
    ``episode_count`` and ``return_queue``, the raw returns of the last 100
    episodes); ConfigError when there is none.

    >>> stats = episode_statistics(normalized_env({"id": "Pendulum-v1"}))
    >>> stats.episode_count, len(stats.return_queue)
    (0, 0)
    """
    inner = env
    while True:
        if isinstance(inner, gym.wrappers.RecordEpisodeStatistics):
            return inner
        if not isinstance(inner, gym.Wrapper):
            raise ConfigError(f"episode_statistics: {env} has no RecordEpisodeStatistics "
                              "wrapper; build it with normalized_env")
        inner = inner.env


def _registered_creator(base_id: str, **env_config: Any) -> gym.Env:
    return normalized_env({"id": base_id, **env_config})


for _base in REGISTERED:
    if f"flowrl/{_base}" not in gym.registry:
        gym.register(f"flowrl/{_base}", entry_point=_registered_creator,
                     kwargs={"base_id": _base}, disable_env_checker=True, order_enforce=False,
                     reward_threshold=gym.spec(_base).reward_threshold)

__all__ = ["normalized_env", "episode_statistics", "DEFAULTS", "REGISTERED"]
