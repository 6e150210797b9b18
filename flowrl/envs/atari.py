"""Atari through ale-py, with the DeepMind preprocessing (``preprocessor_pref="deepmind"``).

:func:`make_atari` builds an ``ALE/...-v5`` env (``pip install 'flowrl[atari]'``;
the ale-py wheel ships the ROMs) and wraps it, innermost first:

1. the ALE env, made with ``frameskip=1``, ``repeat_action_probability=0.0``
   (sticky actions off) and ``obs_type="grayscale"`` unless ``env_config`` says
   otherwise; every ``env_config`` key but ``screen_size`` goes to
   ``gymnasium.make`` (``full_action_space``, ``mode``, ...). Step 2 reads the
   screen from the emulator itself, so the inner env's own observation is never
   used; grayscale is its cheapest screen copy (Pong: about 11% more steps/s than
   RGB, the same observations);
2. ``gymnasium.wrappers.AtariPreprocessing``: up to 30 no-op starts, frame skip 4
   with a max-pool over the last two frames, 84x84 grayscale (``env_config``
   ``screen_size``: another side, e.g. 42 as RLlib 1.x's ``dim: 42`` for a cheaper
   CNN), uint8;
3. ``gymnasium.wrappers.RecordEpisodeStatistics``: sees whole games and raw
   rewards, so ``info["episode"] = {"r": score, "l": steps, "t": seconds}``
   appears exactly when a game ends (all lives lost, or ALE's frame limit), with
   the game's own unclipped score (``"l"`` counts the agent's steps plus, in
   training, the no-op step after each lost life);
4. training only: :class:`EpisodicLifeEnv` (a life loss ends the training episode;
   the reset that follows continues the game) and sign-clipped rewards;
5. ``gymnasium.wrappers.FrameStackObservation``: the last 4 frames, channels first,
   an observation ``Box(0, 255, (4, 84, 84), uint8)`` (``(4, 42, 42)`` with
   ``screen_size=42``).

So a learner sees clipped rewards and per-life episodes, while reported returns
(from ``info["episode"]``; see :func:`flowrl.envs.reports_episode_infos`) are
whole-game scores, as published Atari results are. ``training=False`` (evaluation)
leaves out step 4. ``preprocessor_pref=None`` gives the raw ``gymnasium.make`` env.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.errors import ConfigError

#: The values ``preprocessor_pref`` may take (besides None: no preprocessing).
PREPROCESSOR_PREFS = ("deepmind",)
ATARI_NAMESPACE = "ALE/"
#: The side of the preprocessed square frames unless ``env_config["screen_size"]`` says.
SCREEN_SIZE = 84


def is_atari_id(env: Any) -> bool:
    """Whether ``env`` is an ale-py env id (``ALE/...``), which :func:`make_atari` builds.

    >>> is_atari_id("ALE/Breakout-v5"), is_atari_id("CartPole-v1")
    (True, False)
    """
    return isinstance(env, str) and env.startswith(ATARI_NAMESPACE)


def import_ale(where: str):
    """``ale_py``, imported (which registers the ``ALE/`` ids with gymnasium); when
    it is missing, a ConfigError starting with ``where`` (the env id, or the config
    field holding it) that names the extra to install."""
    try:
        import ale_py
    except ImportError:
        raise ConfigError(f"{where}: ALE envs need ale-py, which is not installed; "
                          "pip install 'flowrl[atari]'") from None
    return ale_py


def _check_rom(env_id: str) -> None:
    """A ConfigError naming the game and its ROM file when ale-py cannot load it."""
    from ale_py import roms
    try:
        game = gym.spec(env_id).kwargs["game"]
    except Exception:  # an unknown id: gymnasium.make says so, with suggestions
        return
    try:
        found = roms.get_rom_path(game) is not None
    except OSError:  # ALE_ROMS_DIR without the file, or a file with the wrong hash
        found = False
    if not found:
        raise ConfigError(f"env {env_id!r}: the ROM of game {game!r} ({game}.bin) is missing "
                          "or does not match ale-py's checksum; reinstall ale-py (its wheel "
                          "ships the ROMs) or check ALE_ROMS_DIR")


def make_atari(env_id: str, env_config: dict | None = None, *,
               preprocessor_pref: str | None = "deepmind", training: bool = True) -> gym.Env:
    """An ale-py env with the DeepMind preprocessing (see the module docstring).

    ``env_config`` keys go to ``gymnasium.make``; with preprocessing they override
    the defaults ``frameskip=1``, ``repeat_action_probability=0.0`` and
    ``obs_type="grayscale"``, and ``screen_size`` (default 84) is the side of the
    preprocessed frames instead.
    ``training=False`` leaves out episodic life and reward clipping (evaluation).
    ConfigError when ale-py (or OpenCV, which the resizing needs) is missing, when
    the game's ROM is missing, for an unknown ``preprocessor_pref``, for an
    ``env_config`` frameskip other than 1 with preprocessing, and for a
    ``screen_size`` that is not an int of at least 16 or that comes without
    preprocessing.

    >>> env = make_atari("ALE/Pong-v5", {})
    >>> obs, _ = env.reset(seed=0)
    >>> obs.shape, obs.dtype, env.action_space
    ((4, 84, 84), dtype('uint8'), Discrete(6))
    >>> make_atari("ALE/Pong-v5", {"screen_size": 42}).observation_space.shape
    (4, 42, 42)
    >>> make_atari("ALE/Pong-v5", {}, preprocessor_pref=None).observation_space.shape
    (210, 160, 3)
    """
    if preprocessor_pref is not None and preprocessor_pref not in PREPROCESSOR_PREFS:
        raise ConfigError(f"make_atari({env_id!r}): preprocessor_pref={preprocessor_pref!r} is "
                          f"unknown; choose one of {list(PREPROCESSOR_PREFS)} or None")
    import_ale(f"make_atari({env_id!r})")
    _check_rom(env_id)
    env_config = dict(env_config or {})
    screen_size = screen_size_of(env_id, env_config, preprocessor_pref)
    if preprocessor_pref is None:
        return gym.make(env_id, **env_config)
    try:
        import cv2  # noqa: F401  (AtariPreprocessing resizes with it)
    except ImportError:
        raise ConfigError(f"env {env_id!r} with preprocessor_pref='deepmind' needs OpenCV, "
                          "which is not installed; pip install 'flowrl[atari]'") from None
    if env_config.get("frameskip", 1) != 1:
        raise ConfigError(f"env {env_id!r}: env_config frameskip={env_config['frameskip']!r} "
                          "with preprocessor_pref='deepmind', which skips 4 frames itself; "
                          "drop frameskip from env_config or set preprocessor_pref=None")
    env = gym.make(env_id, **{"frameskip": 1, "repeat_action_probability": 0.0,
                              "obs_type": "grayscale", **env_config})
    return wrap_deepmind(env, training=training, screen_size=screen_size)


def screen_size_of(env_id: str, env_config: dict, preprocessor_pref: str | None) -> int:
    """The side of ``env_id``'s preprocessed frames: ``env_config.pop("screen_size")``
    (the key is the preprocessing's, not ``gymnasium.make``'s), or 84. A ConfigError
    for a value that is not an int of at least 16 (below that a game's ball and
    bullets vanish in the resize), or for one without preprocessing, which would
    otherwise ignore it.

    >>> screen_size_of("ALE/Pong-v5", {"screen_size": 42}, "deepmind")
    42
    >>> screen_size_of("ALE/Pong-v5", {"screen_size": 8}, "deepmind")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: env 'ALE/Pong-v5': env_config screen_size=8 must be an int of at least 16 (84 is the DeepMind default, 42 RLlib's small one)
    """
    if "screen_size" not in env_config:
        return SCREEN_SIZE
    size = env_config.pop("screen_size")
    if preprocessor_pref is None:
        raise ConfigError(f"env {env_id!r}: env_config screen_size={size!r} sizes the "
                          "DeepMind preprocessing, which preprocessor_pref=None turns off; "
                          "drop screen_size or set preprocessor_pref='deepmind'")
    if isinstance(size, bool) or not isinstance(size, (int, np.integer)) or size < 16:
        raise ConfigError(f"env {env_id!r}: env_config screen_size={size!r} must be an int "
                          "of at least 16 (84 is the DeepMind default, 42 RLlib's small one)")
    return int(size)


def wrap_deepmind(env: gym.Env, *, training: bool = True,
                  screen_size: int = SCREEN_SIZE) -> gym.Env:
    """Steps 2 to 5 of the module docstring around an ALE env made with ``frameskip=1``."""
    env = gym.wrappers.AtariPreprocessing(env, noop_max=30, frame_skip=4,
                                          screen_size=screen_size, grayscale_obs=True,
                                          scale_obs=False)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    if training:
        env = EpisodicLifeEnv(env)
        env = gym.wrappers.TransformReward(env, sign)
    return gym.wrappers.FrameStackObservation(env, 4)


def sign(reward: float) -> float:
    """The reward clipped to its sign, -1.0, 0.0 or 1.0 (a module function, not a
    lambda, so a wrapped env pickles).

    >>> sign(7), sign(-0.5), sign(0)
    (1.0, -1.0, 0.0)
    """
    return float(np.sign(reward))


class EpisodicLifeEnv(gym.Wrapper):
    """A life loss ends the episode (``terminated=True``) while the game goes on.

    ``reset()`` after a life loss continues the same game with one no-op step
    (its reward counts in the game's score below this wrapper, not in the
    agent's return); only after the game ended (terminated or truncated below),
    or when given a seed, does it reset the env beneath. Gymnasium has no such
    wrapper (``AtariPreprocessing(terminal_on_life_loss=True)`` resets the whole
    game at every life), so it is written here. Lives come from
    ``env.unwrapped.ale.lives()``.

    If that no-op step itself ends the game (which a game hardly does), the env
    beneath is reset and that step's info, with any ``info["episode"]``, is lost.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        self.lives = 0
        self.game_over = True

    def _ale_lives(self) -> int:
        return int(self.env.unwrapped.ale.lives())

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.game_over = terminated or truncated
        lives = self._ale_lives()
        if 0 < lives < self.lives:
            terminated = True
        self.lives = lives
        return obs, reward, terminated, truncated, info

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if self.game_over or seed is not None:
            obs, info = self.env.reset(seed=seed, options=options)
        else:
            obs, _, terminated, truncated, info = self.env.step(0)
            if terminated or truncated:
                obs, info = self.env.reset(options=options)
        self.game_over = False
        self.lives = self._ale_lives()
        return obs, info


__all__ = ["make_atari", "wrap_deepmind", "EpisodicLifeEnv", "is_atari_id", "import_ale",
           "sign", "PREPROCESSOR_PREFS"]
