"""Whole episodes on a worker's envs, for evaluation: :func:`play_episodes`.

Policy. Env ``i`` plays the episode indices it is given, one after the other, each
from a fresh reset (``seed + index`` when seeded, so an evaluation repeats
exactly), and stops when it has played them. Every step is one batched policy
forward over the envs still playing, through the samplers' shared step
(:mod:`flowrl.workers.env_loop`): a recurrent policy carries its state per env,
and actions reach the env as that step makes them. An episode longer than
:data:`MAX_EPISODE_STEPS` steps (or the caller's ``max_steps``) is cut there.

State: per env, the episode it plays and its observation (the step keeps the
rest); nothing outlives a call. Who plays which episode is decided above this
layer (:func:`flowrl.ops.evaluation.assign_episodes`).
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from flowrl.errors import ConfigError
from flowrl.workers.env_loop import Acting, Episodes, defers_vf_preds

#: An episode longer than this many steps is cut there (an env without a time
#: limit cannot hang an evaluation).
MAX_EPISODE_STEPS = 100_000


def play_episodes(envs: Sequence[Any], policy, schedule: Sequence[Sequence[int]], *,
                  explore: bool = False, seed: int | None = None,
                  max_steps: int = MAX_EPISODE_STEPS,
                  callbacks: Any = None) -> list[dict[str, Any]]:
    """Play ``schedule[i]`` (episode indices) on ``envs[i]``, every env at once.

    Each episode starts from ``env.reset(seed=seed + index)`` (``seed=None``: no
    reseeding) and runs to termination or truncation, or ``max_steps`` steps.
    Each step is one ``policy.compute_actions`` over the envs still playing,
    taking the mode unless ``explore``; a recurrent policy gets each env's state,
    previous action and reward (zeros at an episode's start). ``Box`` actions are
    clipped to the bounds, ``Discrete`` ones reach the env as ints. Returns
    ``{"episode": index, "episode_reward", "episode_len"}`` per episode, ordered by
    index. Touches no metrics. ``callbacks`` (the worker's
    :class:`~flowrl.callbacks.EpisodeCallbacks`, or None) runs the episode hooks as
    the samplers do, and an episode's custom metrics join its entry.

    >>> import gymnasium as gym
    >>> from flowrl.policies import PGPolicy
    >>> envs = [gym.make("CartPole-v1") for _ in range(2)]
    >>> p = PGPolicy(envs[0].observation_space, envs[0].action_space, seed=0)
    >>> out = play_episodes(envs, p, [[0, 2], [1]], seed=0)
    >>> [e["episode"] for e in out], all(e["episode_len"] > 0 for e in out)
    ([0, 1, 2], True)
    """
    if len(schedule) > len(envs):
        raise ConfigError(f"play_episodes: a schedule for {len(schedule)} envs, but "
                          f"{len(envs)} envs")
    n = len(schedule)
    acting = Acting(policy, envs[0].action_space if envs else None, explore=explore,
                    num_rows=n)
    lean = not acting.recurrent and defers_vf_preds(policy)
    episodes = Episodes(n, callbacks)
    queues = [list(s) for s in schedule]
    obs: list[Any] = [None] * n  # per slot: its current observation
    out: list[dict[str, Any]] = []

    def begin(i: int) -> bool:
        """Slot ``i``'s next episode from a fresh reset; False when it has played all."""
        if not queues[i]:
            return False
        e = queues[i].pop(0)
        obs[i], info = envs[i].reset(seed=None if seed is None else seed + e)
        episodes.begin(i, obs[i], info, episode_id=e)
        return True

    playing = [i for i in range(n) if begin(i)]  # the slots with an episode under way
    while playing:
        actions, extra = acting.act(np.stack([np.asarray(obs[i]) for i in playing]),
                                    lean=lean, rows=playing)
        to_env = acting.to_env(actions)
        rewards = np.zeros(len(playing))
        ended = np.zeros(len(playing), bool)
        still = []
        for row, i in enumerate(playing):
            obs[i], reward, terminated, truncated, info = envs[i].step(to_env[row])
            rewards[row] = reward = float(reward)
            episodes.t[i] += 1
            episodes.ret[i] += reward
            length = int(episodes.t[i])
            ended[row] = done = bool(terminated or truncated or length >= max_steps)
            if episodes.callbacks is not None:
                episodes.step(i, obs[i], actions[row], reward, info, done)
            if not done:
                still.append(i)
                continue
            out.append(episodes.finish(i, {"episode": int(episodes.eps_id[i]),
                                           "episode_reward": float(episodes.ret[i]),
                                           "episode_len": length}))
            if begin(i):
                still.append(i)
        acting.advance(extra, actions, rewards, ended, rows=playing)
        playing = still
    return sorted(out, key=lambda e: e["episode"])


__all__ = ["play_episodes", "MAX_EPISODE_STEPS"]
