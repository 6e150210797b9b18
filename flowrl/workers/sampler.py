"""Single-agent sampling: ``N`` envs stepped as one gymnasium vector env.

Policy: each vector step runs ONE batched policy forward for all ``N`` envs; a
``sample()`` takes ``T = rollout_fragment_length`` vector steps and returns
``N * T`` rows, env-major (env 0's ``T`` steps in time order, then env 1's ...),
postprocessed by the policy (advantages, value targets) trajectory by trajectory.

Episode boundaries: the vector env uses ``AutoresetMode.SAME_STEP``, so the step
that ends an episode returns the next episode's first observation as ``obs`` and
the real final observation in ``infos["final_obs"]``. Every row is therefore a real
transition ``(s_t, a_t, r_t, s_{t+1})``: ``new_obs`` holds the final observation on
done rows, and no transition spans two episodes. A truncated episode bootstraps
from ``V(final obs)``; a fragment that cuts an episode bootstraps from ``V(s_T)``
(both in column ``bootstrap_value`` of the row they follow). Both come from one
batched value call at the end of ``sample()``. A policy whose
``trains_on_new_obs`` is False (PG, A2C, PPO, IMPALA and APPO without flat
V-trace) gets batches without the ``new_obs`` column: it postprocesses and learns
from ``bootstrap_value``, so an image batch carries each observation once. A
policy that reads ``new_obs`` but says ``takes_next_frame`` (flat V-trace IMPALA
and APPO) gets, from envs that give frame stacks (``frame_stacks``: every row's
``new_obs`` its ``obs`` shifted by one frame, checked on every fragment), only the
newest frame of each ``new_obs`` (column ``new_frame``) and rebuilds the stacks
it needs.

Each vector step is the shared env-stepping loop's step
(:mod:`flowrl.workers.env_loop`): :class:`~flowrl.workers.env_loop.Acting` acts
(one batched forward), gives the actions as the envs take them and carries a
recurrent policy's state; :class:`~flowrl.workers.env_loop.Episodes` counts each
env's episode and runs the episode callbacks. This module adds what only
fragments need: the ``(T, N)`` buffers, the bootstrap values and the
postprocessing.

Recurrent policies (``policy.is_recurrent``): each env's model state and previous
action and reward are carried from step to step and reset at episode starts; the
batch records ``state_in_*``/``state_out_*`` (the state before and after each
step), ``prev_actions`` and ``prev_rewards`` per row; values for bootstrapping are
computed from the state after the step before them.

State kept between calls: the current observations and the vector env's reset
infos, the :class:`~flowrl.workers.env_loop.Acting` and
:class:`~flowrl.workers.env_loop.Episodes` (``acting``, ``episodes``: per env the
episode id, step within the episode and running return). Completed episodes are
buffered as ``{"episode_reward", "episode_len"}`` dicts until
:meth:`VectorSampler.episode_stats` drains them. Numpy buffers of shape
``(T, N, ...)`` are allocated once and reused.

Callbacks (``callbacks``, an :class:`~flowrl.callbacks.EpisodeCallbacks`, or None):
only then is there an :class:`~flowrl.workers.Episode` per env, recording each
step's observation, action, reward and info (the info is read from the vector
env's only when a callback asks); the episode hooks run (starts at the first
``sample()``, a step after every vector step, an end when the episode ends, then
the next episode's start) and the episode's custom metrics join its entry.
Without callbacks none of this runs. With ``episode_infos`` the callbacks see
the training episodes (Atari: lives) and a reported game carries the custom
metrics of its lives (a later life's value of a metric replaces an earlier one's).
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from flowrl.batch import SampleBatch
from flowrl.errors import FlowError
from flowrl.replay.frames import is_frame_stack
from flowrl.workers.env_loop import Acting, Episodes, defers_vf_preds

SB = SampleBatch


def postprocess_trajectories(policy, batch: SampleBatch, ends, last_values) -> SampleBatch:
    """``policy``'s postprocessing of trajectories stored back to back in ``batch``.

    Trajectory ``i`` is rows ``ends[i-1]:ends[i]`` with ``last_values[i]`` its
    bootstrap value ``V(s_T)`` (ignored where its last row ends an episode). Uses
    the policy's ``postprocess_trajectories`` when it has one (one pass for all
    trajectories), else ``postprocess_trajectory`` per slice, concatenated.

    >>> from flowrl.policies import PGPolicy
    >>> p = PGPolicy(gym.spaces.Box(-1, 1, (1,)), gym.spaces.Discrete(2), gamma=0.5)
    >>> b = SampleBatch(rewards=np.ones(3, np.float32), terminateds=np.zeros(3, bool))
    >>> postprocess_trajectories(p, b, [1, 3], [0.0, 4.0])["value_targets"].tolist()
    [1.0, 2.5, 3.0]
    """
    fused = getattr(policy, "postprocess_trajectories", None)
    if fused is not None:
        return fused(batch, ends, last_values)
    bounds = [0, *(int(e) for e in ends)]
    parts = [policy.postprocess_trajectory(batch.slice(s, e), last_value=float(v))
             for s, e, v in zip(bounds[:-1], bounds[1:], last_values)]
    return parts[0] if len(parts) == 1 else SampleBatch.concat_samples(parts)


class VectorSampler:
    """Collects postprocessed fragments from ``venv`` with ``policy``.

    ``venv`` must be a gymnasium vector env in ``SAME_STEP`` autoreset mode;
    ``eps_id_base`` makes episode ids unique across workers. ``episode_infos``: the
    reported episodes are the ones the envs report in ``info["episode"]``
    (gymnasium's ``RecordEpisodeStatistics`` beneath wrappers that end training
    episodes early or change rewards, as Atari's episodic life and reward
    clipping do: whole games, raw scores) instead of the sampler's own counts.
    ``num_forwards`` counts the policy's ``compute_actions`` calls. ``Discrete`` actions
    reach the envs as Python ints, ``Box`` actions as numpy rows clipped to the
    bounds (:meth:`~flowrl.workers.env_loop.Acting.to_env`); the batch keeps the
    policy's numpy actions.
    ``callbacks``: see the module docstring. ``step_error(e)``, when given, is the
    error to raise (``e`` chained) for an exception ``e`` of the vector env's
    ``step`` that is not a FlowError (a worker's names the env and the worker).
    ``frame_stacks``: the envs give uint8 frame stacks, every ``new_obs`` its ``obs``
    shifted by one frame (the DeepMind Atari preprocessing); only then may a batch
    carry ``new_frame`` for ``new_obs`` (see the module docstring), the same columns
    from every fragment of every worker. A fragment that breaks the promise is an
    error (``step_error``'s), never a batch with other columns. ``record_new_obs``:
    every batch has ``new_obs``, whatever the policy trains on (a worker recording a
    dataset: ``output``).
    """

    def __init__(self, venv: gym.vector.VectorEnv, policy, *, fragment_length: int,
                 seed: int | None, explore: bool = True, eps_id_base: int = 0,
                 episode_infos: bool = False, callbacks: Any = None,
                 step_error: Callable[[Exception], Exception] | None = None,
                 frame_stacks: bool = False, record_new_obs: bool = False):
        self.venv = venv
        self.record_new_obs = record_new_obs
        self.step_error = step_error
        self.frame_stacks = frame_stacks
        self.episode_infos = episode_infos
        self.num_envs, self.fragment_length = venv.num_envs, fragment_length
        self._obs, self._reset_infos = venv.reset(seed=seed)
        #: the policy acting for the envs (state per env for a recurrent policy)
        self.acting = Acting(policy, venv.single_action_space, explore=explore,
                             num_rows=self.num_envs)
        #: each env's episode: id, steps, return (and its Episode with callbacks)
        self.episodes = Episodes(self.num_envs, callbacks, first_id=eps_id_base)
        self._started = False  # whether the first episodes' start hooks ran
        self._episodes: list[dict] = []
        self._buf: dict[str, np.ndarray] | None = None
        self._buf_deferred: bool | None = None

    @property
    def policy(self):
        """The acting policy."""
        return self.acting.policy

    @property
    def callbacks(self) -> Any:
        """The :class:`~flowrl.callbacks.EpisodeCallbacks` the sampler runs, or None."""
        return self.episodes.callbacks

    @property
    def num_forwards(self) -> int:
        """The policy's ``compute_actions`` calls so far."""
        return self.acting.num_forwards

    def _allocate(self, actions: np.ndarray, extra: dict) -> dict[str, np.ndarray]:
        T, N = self.fragment_length, self.num_envs

        def like(x: np.ndarray) -> np.ndarray:
            return np.empty((T, *x.shape), dtype=x.dtype)

        buf = {SB.OBS: like(self._obs), SB.NEXT_OBS: like(self._obs),
               SB.ACTIONS: like(actions),
               SB.REWARDS: np.empty((T, N), np.float32),
               SB.TERMINATEDS: np.empty((T, N), bool),
               SB.TRUNCATEDS: np.empty((T, N), bool),
               SB.EPS_ID: np.empty((T, N), np.int64),
               SB.T: np.empty((T, N), np.int64)}
        buf.update({k: like(v) for k, v in extra.items()})
        buf.setdefault(SB.VF_PREDS, np.empty((T, N), np.float32))
        if self.acting.recurrent:
            buf.update({f"state_in_{i}": like(s) for i, s in enumerate(self.acting.state)})
            buf[SB.PREV_ACTIONS] = like(actions)
            buf[SB.PREV_REWARDS] = np.empty((T, N), np.float32)
        return buf

    def sample(self) -> SampleBatch:
        """``num_envs * fragment_length`` postprocessed rows, env-major."""
        venv, T, acting, episodes = self.venv, self.fragment_length, self.acting, self.episodes
        obs = self._obs
        eps_id, ep_t, ep_ret = episodes.eps_id, episodes.t, episodes.ret
        defer = defers_vf_preds(acting.policy)
        buf = self._buf if self._buf_deferred == defer else None
        recurrent = acting.recurrent
        callbacks = episodes.callbacks
        if callbacks is not None and not self._started:
            self._started = True
            for i in range(self.num_envs):
                episodes.start(i, obs[i], functools.partial(vector_info, self._reset_infos, i))
        for step in range(T):
            actions, extra = acting.act(obs, lean=defer)
            if buf is None:
                buf = self._buf = self._allocate(actions, extra)
                self._buf_deferred = defer
            if recurrent:
                for i, s in enumerate(acting.state):
                    buf[f"state_in_{i}"][step] = s
                buf[SB.PREV_ACTIONS][step] = acting.prev_actions
                buf[SB.PREV_REWARDS][step] = acting.prev_rewards
            try:
                next_obs, rewards, terms, truncs, infos = venv.step(acting.to_env(actions))
            except FlowError:
                raise
            except Exception as e:
                if self.step_error is None:
                    raise
                raise self.step_error(e) from e
            buf[SB.OBS][step] = obs
            buf[SB.ACTIONS][step] = actions
            buf[SB.REWARDS][step] = rewards
            buf[SB.TERMINATEDS][step] = terms
            buf[SB.TRUNCATEDS][step] = truncs
            buf[SB.EPS_ID][step] = eps_id
            buf[SB.T][step] = ep_t
            for k, v in extra.items():
                buf[k][step] = v
            new_obs = buf[SB.NEXT_OBS][step]
            new_obs[...] = next_obs
            ep_t += 1
            ep_ret += rewards
            done = terms | truncs
            acting.advance(extra, actions, rewards, done)
            if callbacks is not None:
                final, final_info = infos.get("final_obs"), infos.get("final_info", {})
                for i, ended in enumerate(done.tolist()):
                    episodes.step(i, final[i] if ended else next_obs[i], actions[i],
                                  float(rewards[i]), functools.partial(
                                      vector_info, final_info if ended else infos, i), ended)
            if done.any():
                final = infos["final_obs"]
                final_info = infos.get("final_info", {}) if self.episode_infos else {}
                games = final_info.get("_episode")
                for i in np.flatnonzero(done).tolist():
                    new_obs[i] = final[i]
                    entry = None
                    if not self.episode_infos:
                        entry = {"episode_reward": float(ep_ret[i]), "episode_len": int(ep_t[i])}
                    elif games is not None and games[i]:
                        game = final_info["episode"]
                        entry = {"episode_reward": float(game["r"][i]),
                                 "episode_len": int(game["l"][i])}
                    entry = episodes.finish(i, entry)
                    if entry is not None:
                        self._episodes.append(entry)
                    episodes.begin(i, next_obs[i], functools.partial(vector_info, infos, i))
            obs = next_obs
        self._obs = obs
        return self._postprocess(buf, defer)

    def _postprocess(self, buf: dict[str, np.ndarray], deferred: bool) -> SampleBatch:
        T, N = self.fragment_length, self.num_envs
        trunc_only = buf[SB.TRUNCATEDS] & ~buf[SB.TERMINATEDS]
        steps, envs = np.nonzero(trunc_only)
        # ONE value call: V(s_T) per env, V(final obs) of truncated rows, and with
        # deferred vf_preds V(s_t) of every row.
        parts = [self._obs, buf[SB.NEXT_OBS][steps, envs]]
        if deferred:
            parts.append(buf[SB.OBS].reshape(T * N, *buf[SB.OBS].shape[2:]))
        acting = self.acting
        if acting.recurrent:  # each from the state after the step before it
            values = self.policy.value(
                np.concatenate(parts),
                state_batches=[np.concatenate([s, buf[f"state_out_{i}"][steps, envs]])
                               for i, s in enumerate(acting.state)],
                prev_actions=np.concatenate([acting.prev_actions,
                                             buf[SB.ACTIONS][steps, envs]]),
                prev_rewards=np.concatenate([acting.prev_rewards,
                                             buf[SB.REWARDS][steps, envs]]))
        else:
            values = self.policy.value(np.concatenate(parts))
        if deferred:
            buf[SB.VF_PREDS][...] = values[-T * N:].reshape(T, N)
            values = values[:-T * N]
        bootstrap = np.zeros((T, N), np.float32)
        bootstrap[steps, envs] = values[N:]
        # The fragment's last step, where the episode goes on: V(s_T).
        open_end = ~(buf[SB.TERMINATEDS][T - 1] | buf[SB.TRUNCATEDS][T - 1])
        bootstrap[T - 1, open_end] = values[:N][open_end]
        # Env-major rows: env i's T steps are rows i*T .. (i+1)*T - 1, one trajectory.
        # (copies: the buffers are reused by the next sample())
        keep_new_obs = self.record_new_obs or getattr(self.policy, "trains_on_new_obs", True)
        next_frame = keep_new_obs and not self.record_new_obs and self.frame_stacks \
            and getattr(self.policy, "takes_next_frame", False)
        if next_frame and not is_frame_stack(
                buf[SB.OBS].reshape(T * N, *buf[SB.OBS].shape[2:]),
                buf[SB.NEXT_OBS].reshape(T * N, *buf[SB.OBS].shape[2:])):
            error = ValueError("its observations are not frame stacks (a new_obs is not its "
                               "obs shifted by one frame), which frame_stacks=True promised")
            raise error if self.step_error is None else self.step_error(error)
        columns = {k: v.swapaxes(0, 1).copy().reshape(N * T, *v.shape[2:])
                   for k, v in buf.items()
                   if k != SB.NEXT_OBS or (keep_new_obs and not next_frame)}
        if next_frame:
            frames = buf[SB.NEXT_OBS][:, :, -1]
            columns[SB.NEXT_FRAME] = frames.swapaxes(0, 1).copy().reshape(N * T, *frames.shape[2:])
        columns[SB.BOOTSTRAP_VALUE] = bootstrap.T.reshape(-1)
        columns[SB.AGENT_INDEX] = np.zeros(N * T, np.int64)
        return postprocess_trajectories(self.policy, SampleBatch(columns),
                                        np.arange(1, N + 1) * T, values[:N].tolist())

    def episode_stats(self) -> list[dict]:
        """Episodes completed since the last call, oldest first (drains the buffer)."""
        out, self._episodes = self._episodes, []
        return out


def vector_info(infos: dict, i: int) -> dict:
    """Env ``i``'s info from a gymnasium vector env's ``infos`` (arrays with ``_key``
    masks; the autoreset's ``final_obs``/``final_info`` left out).

    >>> vector_info({"x": np.array([1, 2]), "_x": np.array([False, True]),
    ...              "d": {"y": np.array([3, 4]), "_y": np.array([True, True])},
    ...              "_d": np.array([True, True])}, 1)
    {'x': np.int64(2), 'd': {'y': np.int64(4)}}
    """
    out = {}
    for k, v in infos.items():
        if k.startswith("_") or k in ("final_obs", "final_info"):
            continue
        mask = infos.get("_" + k)
        if mask is not None and not mask[i]:
            continue
        out[k] = vector_info(v, i) if isinstance(v, dict) else v[i]
    return out


__all__ = ["VectorSampler", "postprocess_trajectories", "vector_info"]
