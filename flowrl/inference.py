"""Acting outside the training loop: observations in, actions for the env out.

:meth:`Algorithm.compute_single_action <flowrl.algorithms.Algorithm.compute_single_action>`
(RLlib 1.x's) and :meth:`Algorithm.predict <flowrl.algorithms.Algorithm.predict>`
(Stable-Baselines3's) call :func:`compute_single_action` and :func:`predict` here
with the driver's policy.

Observations are what the env the algorithm builds from its config returns: for
``ALE/`` ids the DeepMind preprocessing's stacked frames
(:func:`flowrl.envs.make_atari`), not raw screens. The one step the rollout workers
add after the env, flattening ``Dict`` and ``Tuple`` observations (gymnasium's
``FlattenObservation``), is applied here too when the driver's worker has the env;
flowrl has no observation filter. An observation that does not fit the policy's
observation space is a ConfigError (a ValueError) naming the shape it takes.

Actions come back as the env takes them, as the samplers hand them over:
``Discrete`` as a Python int (a batch: int64), ``Box`` clipped to the bounds. The
policy acts greedily (the distribution's mode) unless asked to explore; exploring
draws from the policy's own seeded generator and, for DQN, counts exploration
steps, as acting in a worker does. Nothing else changes: no counter, no weights.

>>> from flowrl.algorithms import PG, PGConfig
>>> algo = PG(PGConfig(env="CartPole-v1", seed=0))
>>> action = algo.compute_single_action([0.0, 0.1, 0.0, -0.1])
>>> action in (0, 1)
True
>>> actions, state = algo.predict([[0.0, 0.1, 0.0, -0.1]] * 3)
>>> actions.shape, state
((3,), None)
>>> algo.compute_single_action([0.0, 0.1])
Traceback (most recent call last):
...
flowrl.errors.ConfigError: PG.compute_single_action: an observation of shape (2,) does not fit the observation space Box (4,) float32: give one observation of shape (4,)
>>> algo.stop()
"""

from __future__ import annotations

from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from flowrl.errors import ConfigError
from flowrl.workers.env_loop import defers_vf_preds, env_actions


def _flatten_like_workers(env: Any, obs: Any) -> Any:
    """``obs`` flattened as the workers flatten it when ``env`` (the driver's worker's
    env, or None) is a ``FlattenObservation``: one dict/tuple observation, or a list
    of them."""
    if not isinstance(env, gym.wrappers.FlattenObservation):
        return obs
    if isinstance(obs, (dict, tuple)):
        return env.observation(obs)
    if isinstance(obs, list) and obs and isinstance(obs[0], (dict, tuple)):
        return np.stack([env.observation(o) for o in obs])
    return obs


def _describe(space: gym.Space) -> str:
    """``space`` in a few words: ``Box (4,) float32``, ``Discrete(3)``."""
    if isinstance(space, gym.spaces.Box):
        return f"Box {space.shape} {space.dtype}"
    return str(space)


def observation_rows(space: gym.Space, obs: Any, where: str, *,
                     batch: bool = True) -> tuple[np.ndarray, bool]:
    """``(rows, single)``: ``obs`` as a ``(B, *shape)`` array in the space's dtype, and
    whether it was one observation (then ``B`` is 1). ``batch=False`` takes one
    observation only. A ConfigError naming ``where`` and the shape the space takes
    for anything else: another shape, floats for an integer space (uint8 frames),
    a ``Discrete`` value out of range.

    >>> rows, single = observation_rows(gym.spaces.Box(0, 1, (2,)), [0.5, 0.5], "here")
    >>> rows.shape, rows.dtype, single
    ((1, 2), dtype('float32'), True)
    >>> observation_rows(gym.spaces.Discrete(3), [0, 2, 1], "here")[0]
    array([0, 2, 1])
    """
    shape = tuple(space.shape or ())
    try:
        arr = np.asarray(obs)
    except ValueError:  # ragged nested lists
        arr = np.asarray(obs, dtype=object)
    batch_shape = f"(B, {', '.join(map(str, shape))})" if shape else "(B,)"
    want = f"one observation of shape {shape}" + (f" or a batch {batch_shape}" if batch else "")
    if arr.dtype == object or not (arr.dtype.kind in "biuf"):
        raise ConfigError(f"{where}: an observation of type {type(obs).__name__} does not fit "
                          f"the observation space {_describe(space)}: give {want}")
    if arr.shape == shape:
        single, arr = True, arr[None]
    elif batch and arr.ndim == len(shape) + 1 and arr.shape[1:] == shape:
        single = False
    else:
        raise ConfigError(f"{where}: an observation of shape {arr.shape} does not fit the "
                          f"observation space {_describe(space)}: give {want}")
    dtype = np.dtype(space.dtype) if space.dtype is not None else np.dtype(np.float32)
    if dtype.kind in "iu" and arr.dtype.kind == "f":
        raise ConfigError(f"{where}: observations of dtype {arr.dtype} for the observation space "
                          f"{_describe(space)}, which holds {dtype}: give the env's own {dtype} "
                          "observations (image frames unscaled)")
    arr = arr.astype(dtype, copy=False)
    if isinstance(space, gym.spaces.Discrete) and (
            (arr < space.start).any() or (arr >= space.start + space.n).any()):
        raise ConfigError(f"{where}: observation {arr.tolist() if not single else arr[0]} is "
                          f"outside the observation space {_describe(space)}: give ints from "
                          f"{space.start} to {space.start + space.n - 1}")
    return arr, single


def _state_rows(policy: Any, state: Sequence[Any] | None, n: int, single: bool,
                where: str) -> list[np.ndarray]:
    """A recurrent policy's state as ``(B, ...)`` arrays: ``state`` (one observation's
    parts, or a batch's) or, for None, the initial state."""
    initial = [np.asarray(s, np.float32) for s in policy.get_initial_state()]
    if state is None:
        return [np.repeat(s[None], n, axis=0) for s in initial]
    state = list(state)
    shapes = [s.shape for s in initial]
    if len(state) != len(initial):
        raise ConfigError(f"{where}: state has {len(state)} parts; this policy's state has "
                          f"{len(initial)}, of shapes {shapes} (give None for the initial state)")
    rows = []
    for k, (part, first) in enumerate(zip(state, initial)):
        part = np.asarray(part, np.float32)
        want = first.shape if single else (n, *first.shape)
        if part.shape != want:
            raise ConfigError(f"{where}: state[{k}] has shape {part.shape}; it takes {want} "
                              "(the state_out of the previous call; None for the initial state)")
        rows.append(part[None] if single else part)
    return rows


def _act(policy: Any, rows: np.ndarray, explore: bool, state_rows: list[np.ndarray],
         prev_action: Any, prev_reward: Any, single: bool) -> tuple[np.ndarray, list]:
    """One batched forward: ``(actions, state_out)`` (``state_out`` empty unless the
    policy is recurrent)."""
    if not getattr(policy, "is_recurrent", False):
        lean = {"vf_preds": False} if defers_vf_preds(policy) else {}
        actions, _ = policy.compute_actions(rows, explore, **lean)
        return actions, []
    prev_actions = prev_rewards = None
    if prev_action is not None or prev_reward is not None:
        n = len(rows)
        space = policy.action_space
        prev_actions = (np.zeros((n, *(space.shape or ())), space.dtype) if prev_action is None
                        else np.asarray(prev_action, space.dtype).reshape(
                            (n, *(space.shape or ()))))
        prev_rewards = (np.zeros(n, np.float32) if prev_reward is None
                        else np.asarray(prev_reward, np.float32).reshape(n))
    actions, extra = policy.compute_actions(rows, explore, state_batches=state_rows,
                                            prev_actions=prev_actions, prev_rewards=prev_rewards)
    state_out = [np.asarray(extra[f"state_out_{k}"]) for k in range(len(state_rows))]
    return actions, [s[0] for s in state_out] if single else state_out


def compute_single_action(policy: Any, obs: Any, state: Sequence[Any] | None = None, *,
                          explore: bool = False, prev_action: Any = None,
                          prev_reward: float | None = None, env: Any = None,
                          where: str = "compute_single_action") -> Any:
    """The action for one observation ``obs``; see the module docstring.

    A recurrent policy returns ``(action, state_out)``: it starts from ``state``
    (None: the initial state; else the ``state_out`` of the previous step) and
    takes the previous step's ``prev_action`` and ``prev_reward`` (None: zeros, as
    at an episode's start). Any other policy returns the action alone and takes no
    state (None or ``[]``). ``env`` is the driver's worker's env, whose
    observation flattening is applied (None: none). ConfigError naming ``where``
    for an observation or a state that does not fit.
    """
    rows, _ = observation_rows(policy.observation_space, _flatten_like_workers(env, obs),
                               where, batch=False)
    recurrent = bool(getattr(policy, "is_recurrent", False))
    if not recurrent and state is not None and len(state):
        raise ConfigError(f"{where}: state given, but this policy is not recurrent; leave "
                          "state None")
    state_rows = _state_rows(policy, state, 1, True, where) if recurrent else []
    actions, state_out = _act(policy, rows, explore, state_rows, prev_action, prev_reward,
                              single=True)
    action = env_actions(policy.action_space, actions)[0]
    return (action, state_out) if recurrent else action


def predict(policy: Any, obs: Any, state: Sequence[Any] | None = None,
            episode_start: Any = None, deterministic: bool = True, *,
            prev_action: Any = None, prev_reward: Any = None, env: Any = None,
            where: str = "predict") -> tuple[Any, list | None]:
    """``(actions, state)`` for one observation or a batch ``(B, *obs_shape)``, as
    Stable-Baselines3's ``predict``: one observation gives one action (as
    :func:`compute_single_action` does), a batch an array of ``B``. ``state`` is None
    for a policy that is not recurrent; a recurrent one takes and returns its state
    (one observation's parts, or ``(B, ...)`` arrays for a batch; None: the initial
    state), and rows whose ``episode_start`` (a bool, or ``B`` of them) is true
    start again from the initial state. ``deterministic`` takes the mode (False
    samples). ``prev_action`` and ``prev_reward`` are as for
    :func:`compute_single_action`, one per row.
    """
    rows, single = observation_rows(policy.observation_space, _flatten_like_workers(env, obs),
                                    where)
    recurrent = bool(getattr(policy, "is_recurrent", False))
    if not recurrent and state is not None and len(state):
        raise ConfigError(f"{where}: state given, but this policy is not recurrent; leave "
                          "state None")
    state_rows: list[np.ndarray] = []
    if recurrent:
        state_rows = _state_rows(policy, state, len(rows), single, where)
        if episode_start is not None and state is not None:
            starts = np.broadcast_to(np.asarray(episode_start, bool), (len(rows),))
            initial = _state_rows(policy, None, len(rows), single, where)
            state_rows = [np.where(starts.reshape(-1, *([1] * (s.ndim - 1))), s0, s)
                          for s, s0 in zip(state_rows, initial)]
    actions, state_out = _act(policy, rows, not deterministic, state_rows, prev_action,
                              prev_reward, single)
    out = env_actions(policy.action_space, actions)
    out = out[0] if single else np.asarray(out)
    return out, (state_out if recurrent else None)


__all__ = ["compute_single_action", "predict", "observation_rows"]
