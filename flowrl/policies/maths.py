"""Pure RL maths in paper notation: discounted returns, GAE, explained variance.

Arrays are time-major: ``rewards`` has shape ``(T, ...)`` where ``T`` is the number
of timesteps and ``...`` are optional batch axes (e.g. ``(T, N)`` for ``N``
vectorised envs); ``last_value`` has the trailing shape ``(...)``.

Episode boundaries inside the ``T`` steps are marked per step:

- ``terminateds[t]``: the episode ended in a terminal state at step ``t``; nothing
  is bootstrapped past it (``V(s_{t+1}) = 0``).
- ``truncateds[t]`` (optional): the episode was cut by a time limit at ``t``; the
  return is bootstrapped from ``bootstrap_values[t] = V(s_{t+1})``, the value of the
  episode's final observation, and nothing flows back from step ``t+1`` (which
  belongs to the next episode).
- ``last_value``: ``V(s_T)`` for a trajectory cut by the end of the fragment.

A step that is both terminated and truncated counts as terminated.

Both :func:`discounted_returns` and :func:`gae` reduce to the reverse linear
recurrence ``y_t = x_t + a_t * y_{t+1}``, solved by :func:`_reverse_scan`.
"""

from __future__ import annotations

import numpy as np

from flowrl.errors import ConfigError


def _reverse_scan(x: np.ndarray, a: np.ndarray, y_end) -> np.ndarray:
    """``y_t = x_t + a_t y_{t+1}`` for t = T-1..0 with ``y_T = y_end``; shapes (T, ...)."""
    if x.ndim == 1:  # a loop over python floats beats one over numpy scalars
        xs, as_, out = x.tolist(), a.tolist(), [0.0] * len(x)
        y = float(y_end)
        for t in range(len(xs) - 1, -1, -1):
            y = xs[t] + as_[t] * y
            out[t] = y
        return np.asarray(out, dtype=np.float32)
    out = np.empty(x.shape, dtype=np.float32)
    y = np.asarray(y_end, dtype=np.float64)
    for t in range(len(x) - 1, -1, -1):
        y = x[t] + a[t] * y
        out[t] = y
    return out


def _boundaries(rewards, terminateds, truncateds, bootstrap_values, last_value):
    rewards = np.asarray(rewards, dtype=np.float64)
    if rewards.ndim == 0:
        raise ConfigError("rewards must have a leading time axis, shape (T, ...)")
    term = np.asarray(terminateds, dtype=bool)
    trunc = (np.zeros_like(term) if truncateds is None
             else np.asarray(truncateds, dtype=bool) & ~term)
    last_value = np.asarray(last_value, dtype=np.float64)
    for name, arr in (("terminateds", term), ("truncateds", trunc)):
        if arr.shape != rewards.shape:
            raise ConfigError(
                f"{name} has shape {arr.shape} but rewards has {rewards.shape}; "
                "give one flag per reward")
    if last_value.shape != rewards.shape[1:]:
        raise ConfigError(
            f"last_value has shape {last_value.shape} but must be {rewards.shape[1:]} "
            "(rewards.shape[1:]), one bootstrap value per trajectory")
    if bootstrap_values is None:
        if trunc.any():
            raise ConfigError(
                "truncateds has set flags but bootstrap_values is None; pass "
                "bootstrap_values[t] = V(final observation) for truncated steps")
        boot = np.zeros_like(rewards)
    else:
        boot = np.asarray(bootstrap_values, dtype=np.float64)
        if boot.shape != rewards.shape:
            raise ConfigError(
                f"bootstrap_values has shape {boot.shape} but rewards has {rewards.shape}")
    return rewards, term, trunc, boot, last_value


def discounted_returns(rewards, terminateds, last_value=0.0, *, gamma: float,
                       truncateds=None, bootstrap_values=None) -> np.ndarray:
    """Discounted returns ``G_t = r_t + γ G_{t+1}`` cut at episode boundaries.

    Shapes: ``rewards``, ``terminateds``, ``truncateds``, ``bootstrap_values``:
    ``(T, ...)``; ``last_value``: ``(...)``. Returns float32 ``(T, ...)``.

    ``G_t = r_t`` where terminated, ``r_t + γ bootstrap_values[t]`` where truncated,
    and ``G_{T} = last_value``.

    >>> discounted_returns([1.0, 1.0, 1.0], [False, False, False], 0.0, gamma=0.5).tolist()
    [1.75, 1.5, 1.0]
    >>> discounted_returns([1.0, 1.0, 1.0], [False, True, False], 4.0, gamma=0.5).tolist()
    [1.5, 1.0, 3.0]
    """
    r, term, trunc, boot, last_value = _boundaries(
        rewards, terminateds, truncateds, bootstrap_values, last_value)
    x = r + gamma * np.where(trunc, boot, 0.0)
    a = gamma * ~(term | trunc)
    return _reverse_scan(x, a.astype(np.float64), last_value)


def gae(rewards, values, terminateds, last_value=0.0, *, gamma: float, lam: float,
        truncateds=None, bootstrap_values=None) -> tuple[np.ndarray, np.ndarray]:
    """Generalised advantage estimation (Schulman et al. 2016).

    ``δ_t = r_t + γ V(s_{t+1}) - V(s_t)`` and ``Â_t = δ_t + γλ Â_{t+1}``, where
    ``V(s_{t+1})`` is ``values[t+1]`` inside an episode, 0 after a terminal step,
    ``bootstrap_values[t]`` after a truncated step and ``last_value`` after step
    ``T-1``; the ``Â`` recursion is cut at every episode end.

    Shapes: ``rewards``, ``values`` (``V(s_t)``), ``terminateds``, ``truncateds``,
    ``bootstrap_values``: ``(T, ...)``; ``last_value``: ``(...)``.
    Returns ``(advantages, value_targets)``, both float32 ``(T, ...)``, with
    ``value_targets = advantages + values`` (the λ-return).

    >>> adv, vt = gae([1.0, 1.0], [0.5, 0.5], [False, True], 0.0, gamma=0.5, lam=1.0)
    >>> adv.tolist(), vt.tolist()
    ([1.0, 0.5], [1.5, 1.0])
    """
    r, term, trunc, boot, last_value = _boundaries(
        rewards, terminateds, truncateds, bootstrap_values, last_value)
    v = np.asarray(values, dtype=np.float64)
    if v.shape != r.shape:
        raise ConfigError(f"values has shape {v.shape} but rewards has {r.shape}")
    next_v = np.concatenate([v[1:], last_value[None]], axis=0)
    next_v = np.where(term, 0.0, np.where(trunc, boot, next_v))
    delta = r + gamma * next_v - v
    a = gamma * lam * ~(term | trunc)
    advantages = _reverse_scan(delta, a.astype(np.float64), np.zeros_like(last_value))
    return advantages, (advantages + v).astype(np.float32)


def explained_variance(y_pred, y_true) -> float:
    """``1 - Var[y_true - y_pred] / Var[y_true]``, clipped below at -1 (as RLlib).

    1 is a perfect prediction, 0 no better than the mean. A constant ``y_true``
    gives 1.0 when predicted exactly, else -1.0.

    >>> explained_variance([1.0, 2.0, 3.0], [1.0, 2.0, 3.0])
    1.0
    >>> explained_variance([2.0, 2.0, 2.0], [1.0, 2.0, 3.0])
    0.0
    """
    y_pred = np.asarray(y_pred, dtype=np.float64)
    y_true = np.asarray(y_true, dtype=np.float64)
    var_y = float(np.var(y_true))
    var_diff = float(np.var(y_true - y_pred))
    if var_y == 0.0:
        return 1.0 if var_diff == 0.0 else -1.0
    return max(-1.0, 1.0 - var_diff / var_y)


def linear_schedule(t: float, *, start: float, end: float, duration: float) -> float:
    """A value going linearly from ``start`` (at ``t = 0``) to ``end`` (at ``t =
    duration``), then staying at ``end`` (``end`` throughout when ``duration <= 0``):
    DQN's epsilon, DDPG's noise scale.

    >>> [linear_schedule(t, start=1.0, end=0.0, duration=100) for t in (0, 50, 500)]
    [1.0, 0.5, 0.0]
    """
    if duration <= 0:
        return end
    return start + min(1.0, t / duration) * (end - start)


__all__ = ["discounted_returns", "gae", "explained_variance", "linear_schedule"]
