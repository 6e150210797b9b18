"""Multi-agent sampling over a list of :class:`~flowrl.workers.MultiAgentEnv` s.

Policy: each env step, the acting agents of all envs are grouped by
``policy_mapping_fn(agent_id)`` and each policy runs ONE batched forward over its
group. A ``sample()`` takes ``rollout_fragment_length`` steps of every env and
returns a :class:`~flowrl.batch.MultiAgentBatch` with ``env_steps = num_envs *
fragment_length``; each policy's rows are grouped per (env, episode, agent)
trajectory in time order and postprocessed by that policy.

Boundaries follow the single-agent sampler: an agent's own terminated/truncated
flag (or the env's ``"__all__"``) ends its trajectory; truncated rows bootstrap
from ``V(final obs)``; trajectories cut by the fragment bootstrap from ``V(obs)``.

State kept between calls: each env's current observations (of agents still
acting), episode id and running per-agent returns; completed episodes are buffered
as ``{"episode_reward", "episode_len", "policy_rewards"}`` dicts.
"""

from __future__ import annotations

from typing import Any, Callable

import gymnasium as gym
import numpy as np

from flowrl.batch import MultiAgentBatch, SampleBatch

SB = SampleBatch
_ROW_KEYS = (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.TERMINATEDS, SB.TRUNCATEDS, SB.NEXT_OBS,
             SB.ACTION_LOGP, SB.VF_PREDS, SB.ACTION_DIST_INPUTS)


class _Trajectory:
    __slots__ = ("pid", "eps_id", "agent_index", "rows", "done")

    def __init__(self, pid: str, eps_id: int, agent_index: int):
        self.pid, self.eps_id, self.agent_index = pid, eps_id, agent_index
        self.rows: list[tuple] = []
        self.done = False


class MultiAgentSampler:
    """Collects :class:`MultiAgentBatch` fragments from ``envs`` with ``policies``."""

    def __init__(self, envs: list, policies: dict[str, Any],
                 policy_mapping_fn: Callable[[Any], str], *, fragment_length: int,
                 seed: int | None, explore: bool = True, eps_id_base: int = 0):
        self.envs, self.policies = envs, policies
        self.policy_mapping_fn = policy_mapping_fn
        self.fragment_length, self.explore = fragment_length, explore
        self._next_eps = eps_id_base
        self._episodes: list[dict] = []
        self._clips = {}
        for pid, p in policies.items():
            if isinstance(p.action_space, gym.spaces.Box):
                self._clips[pid] = (p.action_space.low, p.action_space.high)
        self._state = [self._reset(k, None if seed is None else seed + k)
                       for k in range(len(envs))]

    def _reset(self, k: int, seed: int | None) -> dict:
        obs, _ = self.envs[k].reset(seed=seed)
        eps_id, self._next_eps = self._next_eps, self._next_eps + 1
        return {"obs": obs, "eps_id": eps_id, "t": 0, "traj": {}, "returns": {}}

    def _trajectory(self, k: int, agent) -> _Trajectory:
        st = self._state[k]
        traj = st["traj"].get(agent)
        if traj is None:
            index = self.envs[k].possible_agents.index(agent)
            traj = st["traj"][agent] = _Trajectory(self.policy_mapping_fn(agent),
                                                   st["eps_id"], index)
            self._finished.append(traj)
        return traj

    def sample(self) -> MultiAgentBatch:
        """``fragment_length`` steps of every env, postprocessed per policy."""
        self._finished: list[_Trajectory] = []
        for st in self._state:  # trajectories continue from the last fragment's state
            st["traj"] = {}
        for _ in range(self.fragment_length):
            groups: dict[str, list[tuple[int, Any]]] = {}
            for k, st in enumerate(self._state):
                for agent in st["obs"]:
                    groups.setdefault(self.policy_mapping_fn(agent), []).append((k, agent))
            actions: list[dict] = [{} for _ in self.envs]
            outputs: dict[tuple[int, Any], tuple] = {}
            for pid, members in groups.items():
                obs = np.stack([self._state[k]["obs"][a] for k, a in members])
                acts, extra = self.policies[pid].compute_actions(obs, self.explore)
                clip = self._clips.get(pid)
                env_acts = np.clip(acts, *clip) if clip is not None else acts
                for j, (k, a) in enumerate(members):
                    actions[k][a] = env_acts[j]
                    outputs[(k, a)] = (obs[j], acts[j], extra[SB.ACTION_LOGP][j],
                                       extra[SB.VF_PREDS][j], extra[SB.ACTION_DIST_INPUTS][j])
            for k, env in enumerate(self.envs):
                self._step_env(k, env, actions[k], outputs)
        return self._postprocess()

    def _step_env(self, k: int, env, actions: dict, outputs: dict) -> None:
        st = self._state[k]
        obs, rewards, terms, truncs, _ = env.step(actions)
        all_term, all_trunc = bool(terms.get("__all__")), bool(truncs.get("__all__"))
        next_obs = {}
        for agent in actions:
            o, a, logp, vf, dist = outputs[(k, agent)]
            term = bool(terms.get(agent, False)) or all_term
            trunc = (bool(truncs.get(agent, False)) or all_trunc) and not term
            r = float(rewards.get(agent, 0.0))
            st["returns"][agent] = st["returns"].get(agent, 0.0) + r
            traj = self._trajectory(k, agent)
            traj.rows.append((o, a, r, term, trunc, obs[agent], logp, vf, dist, st["t"]))
            if term or trunc:
                traj.done = True
            else:
                next_obs[agent] = obs[agent]
        st["t"] += 1
        if all_term or all_trunc:
            per_policy: dict[str, float] = {}
            for agent, ret in st["returns"].items():
                pid = self.policy_mapping_fn(agent)
                per_policy[pid] = per_policy.get(pid, 0.0) + ret
            self._episodes.append({"episode_reward": sum(st["returns"].values()),
                                   "episode_len": st["t"], "policy_rewards": per_policy})
            self._state[k] = self._reset(k, None)
        else:
            st["obs"] = next_obs

    def _postprocess(self) -> MultiAgentBatch:
        per_policy: dict[str, list[SampleBatch]] = {}
        for traj in self._finished:
            cols = dict(zip(_ROW_KEYS + (SB.T,), (np.stack(c) for c in zip(*traj.rows))))
            n = len(traj.rows)
            cols[SB.EPS_ID] = np.full(n, traj.eps_id, np.int64)
            cols[SB.AGENT_INDEX] = np.full(n, traj.agent_index, np.int64)
            policy = self.policies[traj.pid]
            values = policy.value(cols[SB.NEXT_OBS])  # bootstrap for truncated / cut ends
            trunc = cols[SB.TRUNCATEDS]
            cols[SB.BOOTSTRAP_VALUE] = np.where(trunc, values, 0.0).astype(np.float32)
            last_value = 0.0 if traj.done else float(values[-1])
            per_policy.setdefault(traj.pid, []).append(
                policy.postprocess_trajectory(SampleBatch(cols), last_value=last_value))
        env_steps = self.fragment_length * len(self.envs)
        return MultiAgentBatch({pid: SampleBatch.concat_samples(bs)
                                for pid, bs in per_policy.items()}, env_steps)

    def episode_stats(self) -> list[dict]:
        """Episodes completed since the last call, oldest first (drains the buffer)."""
        out, self._episodes = self._episodes, []
        return out


__all__ = ["MultiAgentSampler"]
