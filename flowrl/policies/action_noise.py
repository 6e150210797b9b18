"""Exploration for deterministic actors (DDPG, TD3): Gaussian or Ornstein-Uhlenbeck
noise on the actor's actions, as RLlib 1.x's ``GaussianNoise`` and
``OrnsteinUhlenbeckNoise`` explorations.

For the first ``random_timesteps`` steps a policy acts, actions are uniform in
the ``Box`` bounds. After that an exploring action is
``clip(μ(s) + scale(t) · n_t, low, high)`` with ``scale(t)`` linear from
``initial_scale`` to ``final_scale`` over ``scale_timesteps`` steps (counted from
the first step, random ones included) and the noise ``n_t``:

- ``GaussianNoise``: ``n_t ~ N(0, stddev²)``, independent per step;
- ``OrnsteinUhlenbeckNoise``: ``n_t = ou_base_scale · x_t · (high - low)`` with
  ``x_t = x_{t-1} - ou_theta · x_{t-1} + ou_sigma · N(0, 1)``, one process per env
  row, temporally correlated (it is not reset between episodes, as in RLlib 1.x).

Greedy actions (``explore=False``) are ``μ(s)``. Ape-X gives each worker a fixed
scale (:meth:`ActionNoise.set_scale`), as RLlib's per-worker noise did.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from flowrl.errors import ConfigError
from flowrl.policies.maths import linear_schedule

GAUSSIAN = "GaussianNoise"
ORNSTEIN_UHLENBECK = "OrnsteinUhlenbeckNoise"

#: RLlib 1.x's defaults for each noise type (TD3 explores with the first, DDPG the second).
DEFAULTS = {
    GAUSSIAN: {"random_timesteps": 1000, "stddev": 0.1, "initial_scale": 1.0,
               "final_scale": 1.0, "scale_timesteps": 1},
    ORNSTEIN_UHLENBECK: {"random_timesteps": 1000, "ou_base_scale": 0.1, "ou_theta": 0.15,
                         "ou_sigma": 0.2, "initial_scale": 1.0, "final_scale": 0.02,
                         "scale_timesteps": 10000},
}


def noise_settings(config: dict | None, where: str, default_type: str) -> dict[str, Any]:
    """``config`` (an ``exploration_config``) completed with the defaults of its
    ``type`` (``default_type`` when it has none); a ConfigError naming ``where``
    for an unknown type or key, or a value that is not a finite number >= 0.

    >>> noise_settings({"stddev": 0.2}, "TD3Config.exploration_config", GAUSSIAN)["stddev"]
    0.2
    >>> noise_settings({"epsilon": 0.1}, "TD3Config.exploration_config", GAUSSIAN)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: TD3Config.exploration_config has unknown keys ['epsilon'] for GaussianNoise; use ['final_scale', 'initial_scale', 'random_timesteps', 'scale_timesteps', 'stddev', 'type']
    """
    config = dict(config or {})
    kind = config.pop("type", default_type)
    if kind not in DEFAULTS:
        raise ConfigError(f"{where}['type']={kind!r}: choose one of {sorted(DEFAULTS)}")
    unknown = sorted(set(config) - set(DEFAULTS[kind]))
    if unknown:
        raise ConfigError(f"{where} has unknown keys {unknown} for {kind}; use "
                          f"{sorted([*DEFAULTS[kind], 'type'])}")
    settings = {**DEFAULTS[kind], **config}
    for key, value in settings.items():
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not math.isfinite(value) or value < 0:
            raise ConfigError(f"{where}['{key}']={value!r}: must be a finite number >= 0")
    return {"type": kind, **settings}


def ou_step(x: np.ndarray, rng: np.random.Generator, *, theta: float,
            sigma: float) -> np.ndarray:
    """One Ornstein-Uhlenbeck step towards 0: ``x - θ x + σ ε``, ``ε ~ N(0, 1)``
    elementwise (a new array)."""
    return x - theta * x + sigma * rng.standard_normal(x.shape)


class ActionNoise:
    """The exploration of one policy; see the module docstring. ``settings`` from
    :func:`noise_settings`, ``low``/``high`` the flat ``Box`` bounds.

    State (:meth:`get_state`): ``timesteps`` (steps acted while exploring), the
    fixed scale, the OU process and the RNG, so a restored policy explores on as
    the saved one would have.

    >>> noise = ActionNoise(noise_settings({"random_timesteps": 0}, "x", GAUSSIAN),
    ...                     np.array([-1.0]), np.array([1.0]), seed=0)
    >>> a = noise(np.zeros((4, 1), np.float32), explore=True)
    >>> a.shape, bool((np.abs(a) <= 1).all()), noise.timesteps
    ((4, 1), True, 4)
    """

    def __init__(self, settings: dict[str, Any], low: np.ndarray, high: np.ndarray, *,
                 seed: int | None = None):
        self.settings = dict(settings)
        self.low, self.high = np.asarray(low, np.float32), np.asarray(high, np.float32)
        self.rng = np.random.default_rng(seed)
        self.timesteps = 0
        self.fixed_scale: float | None = None
        self.ou_state: np.ndarray | None = None  # (rows, act_dim), made on first use

    def cur_scale(self) -> float:
        """The scale the next exploring action uses."""
        if self.fixed_scale is not None:
            return self.fixed_scale
        s = self.settings
        return linear_schedule(self.timesteps, start=s["initial_scale"], end=s["final_scale"],
                               duration=s["scale_timesteps"])

    def set_scale(self, scale: float | None) -> None:
        """Fix the scale (None returns to the annealed one)."""
        if scale is not None and not (math.isfinite(scale) and scale >= 0):
            raise ConfigError(f"ActionNoise.set_scale({scale!r}): must be a finite number >= 0")
        self.fixed_scale = None if scale is None else float(scale)

    def __call__(self, actions: np.ndarray, *, explore: bool) -> np.ndarray:
        """Exploring actions for the actor's ``(B, act_dim)`` ``actions`` (returned as
        they are without ``explore``); counts ``B`` steps."""
        if not explore:
            return actions
        s = self.settings
        B = len(actions)
        if self.timesteps < s["random_timesteps"]:
            out = self.rng.uniform(self.low, self.high, size=(B, len(self.low)))
        else:
            scale = self.cur_scale()
            if s["type"] == GAUSSIAN:
                noise = scale * s["stddev"] * self.rng.standard_normal((B, len(self.low)))
            else:
                if self.ou_state is None or len(self.ou_state) != B:
                    self.ou_state = np.zeros((B, len(self.low)))
                self.ou_state = ou_step(self.ou_state, self.rng, theta=s["ou_theta"],
                                        sigma=s["ou_sigma"])
                noise = scale * s["ou_base_scale"] * self.ou_state * (self.high - self.low)
            out = np.clip(actions + noise, self.low, self.high)
        self.timesteps += B
        return out.astype(np.float32)

    def get_state(self) -> dict[str, Any]:
        return {"timesteps": self.timesteps, "fixed_scale": self.fixed_scale,
                "ou_state": None if self.ou_state is None else self.ou_state.copy(),
                "rng": self.rng.bit_generator.state}

    def set_state(self, state: dict[str, Any]) -> None:
        self.timesteps, self.fixed_scale = int(state["timesteps"]), state["fixed_scale"]
        ou = state["ou_state"]
        self.ou_state = None if ou is None else np.array(ou)
        self.rng.bit_generator.state = state["rng"]


__all__ = ["ActionNoise", "noise_settings", "ou_step", "GAUSSIAN",
           "ORNSTEIN_UHLENBECK", "DEFAULTS"]
