"""Multi-agent sampling over a list of :class:`~flowrl.workers.MultiAgentEnv` s.

Policy: ``policy_mapping_fn(agent_id, episode)`` is called once per agent per
episode, the first time the agent acts, and the answer is kept in the
:class:`Episode` until the episode ends; every row of that agent in that episode
carries ``eps_id == episode.episode_id`` and goes to the policy that acted. Each
env step, the acting agents of ALL envs are grouped by their policy and each
policy runs ONE batched forward over its group. A ``sample()`` takes
``rollout_fragment_length`` steps of every env and returns a
:class:`~flowrl.batch.MultiAgentBatch` with ``env_steps = num_envs *
fragment_length``; each policy's rows are grouped per (env, episode, agent)
trajectory in time order and postprocessed by that policy.

Boundaries follow the single-agent sampler: an agent's own terminated/truncated
flag (or the env's ``"__all__"``) ends its trajectory; truncated rows bootstrap
from ``V(final obs)``; trajectories cut by the fragment bootstrap from ``V(obs)``
(one batched value call per policy per fragment).

State kept between calls: each env's current observations (of agents still
acting), its :class:`Episode` and step count; completed episodes are buffered
as ``{"episode_reward", "episode_len", "policy_rewards", "agent_rewards"}``
dicts (``policy_rewards[pid]`` lists the return of each agent that policy played)
until :meth:`MultiAgentSampler.episode_stats` drains them.

Callbacks (``callbacks``, an :class:`~flowrl.callbacks.EpisodeCallbacks`, or None):
each episode's start runs once its env was reset (the first ones at the first
``sample()``), its step after each env step (the agents' latest observation,
action, reward and info recorded in the :class:`Episode` first), its end after
its last step; an ended episode's entry then also holds the custom metrics the
callbacks set (:meth:`Episode.finished_stats`).
"""

from __future__ import annotations

import inspect
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError, OperatorError
from flowrl.workers.episode import Episode
from flowrl.workers.sampler import defers_vf_preds, postprocess_trajectories

SB = SampleBatch


def as_mapping_fn(fn: Callable[..., str] | None) -> Callable[[Any, Any], str] | None:
    """``fn`` as a two-argument ``(agent_id, episode)`` mapping.

    Accepts the DESIGN signature ``fn(agent_id, episode)`` and the older
    one-argument ``fn(agent_id)`` (as in RLlib 1.x tests).

    >>> as_mapping_fn(lambda agent: "p")(0, None)
    'p'
    """
    if fn is None:
        return None
    if not callable(fn):
        raise ConfigError(f"policy_mapping_fn={fn!r}: must be a callable "
                          "(agent_id, episode) -> policy id")
    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # builtins without a signature: assume the new form
        return fn
    try:
        sig.bind(None, None)
        return fn
    except TypeError:
        pass
    try:
        sig.bind(None)
    except TypeError:
        raise ConfigError(f"policy_mapping_fn {fn!r} takes neither (agent_id, episode) nor "
                          "(agent_id); give fn(agent_id, episode) -> policy id") from None
    return lambda agent_id, episode: fn(agent_id)


def spaces_match(a: gym.Space, b: gym.Space) -> bool:
    """Whether a policy built for space ``a`` can act on / read ``b`` (same type,
    shape and, for Discrete, ``n``; bounds may differ)."""
    if type(a) is not type(b) or a.shape != b.shape:
        return False
    return not isinstance(a, gym.spaces.Discrete) or int(a.n) == int(b.n)


class _Rows:
    """One policy's rows of a fragment.

    The forward inputs and outputs are appended once per step as arrays (one row
    per acting agent of that policy): ``obs``, ``actions`` and the ``extra``
    dicts of ``compute_actions``. As the envs step, each row appends its
    ``rewards`` and trajectory index (``traj``) in the same order; a row that ends
    its agent's trajectory is listed in ``dones`` as ``(row, terminated,
    truncated)``. An agent acts on every env step from its trajectory's first row
    until it is done, so ``t`` and the next observation are not stored per row:
    ``t`` counts on from the trajectory's first step, and within a trajectory
    ``s_{t+1}`` is the next row's ``obs`` (the last one is kept with the
    trajectory).
    """

    __slots__ = ("obs", "actions", "extras", "rewards", "traj", "dones")

    def __init__(self):
        self.obs, self.actions, self.extras = [], [], []
        self.rewards: list[float] = []
        self.traj: list[int] = []
        self.dones: list[tuple[int, bool, bool]] = []


class MultiAgentSampler:
    """Collects :class:`MultiAgentBatch` fragments from ``envs`` with ``policies``.

    ``policy_mapping_fn(agent_id, episode) -> policy id`` (see :class:`Episode`);
    a policy id not in ``policies`` is an OperatorError naming the agent and id.
    ``num_forwards`` counts the policies' ``compute_actions`` calls.

    Actions reach the env as Python ints for ``Discrete`` policies (the type
    ``Discrete.contains`` checks first) and as numpy rows otherwise (``Box``
    actions clipped to the policy's bounds); the batch keeps the policy's numpy
    actions, unclipped. ``callbacks``: see the module docstring.
    """

    def __init__(self, envs: list, policies: dict[str, Any],
                 policy_mapping_fn: Callable[[Any, Episode], str], *, fragment_length: int,
                 seed: int | None, explore: bool = True, eps_id_base: int = 0,
                 callbacks: Any = None):
        self.envs, self.policies = envs, policies
        self.callbacks = callbacks
        self._started = False  # whether the first episodes' starts ran
        self.policy_mapping_fn = as_mapping_fn(policy_mapping_fn)
        self.fragment_length, self.explore = fragment_length, explore
        self._next_eps = eps_id_base
        self._episodes: list[dict] = []
        self._checked: set[tuple[Any, str]] = set()
        self._clips = {pid: (p.action_space.low, p.action_space.high)
                       for pid, p in policies.items()
                       if isinstance(p.action_space, gym.spaces.Box)}
        self._discrete = {pid for pid, p in policies.items()
                          if isinstance(p.action_space, gym.spaces.Discrete)}
        self._agent_index = [{a: i for i, a in enumerate(env.possible_agents)} for env in envs]
        self._obs: list[dict] = []
        self._episode: list[Episode] = []
        self.num_forwards = 0
        for k in range(len(envs)):
            self._obs.append({})
            self._episode.append(None)  # type: ignore[arg-type]
            self._reset(k, None if seed is None else seed + k)

    def _map(self, agent_id: Any, episode: Episode) -> str:
        pid = self.policy_mapping_fn(agent_id, episode)
        if pid not in self.policies:
            raise OperatorError(
                f"policy_mapping_fn(agent_id={agent_id!r}) returned policy id {pid!r}, which "
                f"is not one of the worker's policies {sorted(self.policies)}; return one of "
                "them or add it to multiagent.policies")
        if (agent_id, pid) not in self._checked:
            env = self.envs[episode.env_index]
            policy = self.policies[pid]
            for what in ("observation", "action"):
                mine = getattr(policy, f"{what}_space")
                theirs = getattr(env, f"{what}_spaces")[agent_id]
                if not spaces_match(mine, theirs):
                    raise ConfigError(
                        f"agent {agent_id!r} has {what} space {theirs} but policy_mapping_fn "
                        f"sent it to policy {pid!r}, built for {mine}; map it to a policy "
                        "with matching spaces")
            self._checked.add((agent_id, pid))
        return pid

    def _reset(self, k: int, seed: int | None) -> None:
        obs, infos = self.envs[k].reset(seed=seed)
        episode = self._episode[k] = Episode(self._next_eps, k, self._map)
        self._next_eps += 1
        self._obs[k] = obs
        if self.callbacks is not None:
            for agent, o in obs.items():
                episode._last[agent] = (o, None, 0.0, infos.get(agent, {}))
            if self._started:
                self.callbacks.start(episode)

    def sample(self) -> MultiAgentBatch:
        """``fragment_length`` steps of every env, postprocessed per policy."""
        if self.callbacks is not None and not self._started:
            self._started = True
            for episode in self._episode:
                self.callbacks.start(episode)
        rows: dict[str, _Rows] = {}
        # [pid, eps_id, agent_index, first t, done, env, agent(, final obs once done)]
        trajs: list[list] = []
        traj_of: list[dict] = [{} for _ in self.envs]  # per env: agent -> trajectory index
        policies, explore, clips = self.policies, self.explore, self._clips
        discrete = self._discrete
        deferred = {pid for pid, p in policies.items() if defers_vf_preds(p)}
        n_envs, env_obs, episodes = len(self.envs), self._obs, self._episode
        env_range = range(n_envs)
        for _ in range(self.fragment_length):
            # Group the acting agents of all envs by policy: ONE forward per policy.
            groups: dict[str, tuple[list, list, list]] = {}  # pid -> (obs, env, agent)
            for k in env_range:
                episode = episodes[k]
                cached = episode._policies
                for agent, o in env_obs[k].items():
                    pid = cached.get(agent)
                    if pid is None:
                        pid = episode.policy_for(agent)
                    g = groups.get(pid)
                    if g is None:
                        g = groups[pid] = ([], [], [])
                    g[0].append(o)
                    g[1].append(k)
                    g[2].append(agent)
            actions: list[dict] = [{} for _ in env_range]
            for pid, (obs_list, ks, agents) in groups.items():
                obs = np.array(obs_list)  # np.stack costs several times more on short lists
                acts, extra = (policies[pid].compute_actions(obs, explore, vf_preds=False)
                               if pid in deferred else policies[pid].compute_actions(obs, explore))
                self.num_forwards += 1
                clip = clips.get(pid)
                env_acts = (np.asarray(acts).tolist() if pid in discrete
                            else np.clip(acts, *clip) if clip is not None else acts)
                if n_envs == 1:
                    actions[0].update(zip(agents, env_acts))
                else:
                    for k, agent, act in zip(ks, agents, env_acts):
                        actions[k][agent] = act
                r = rows.get(pid)
                if r is None:
                    r = rows[pid] = _Rows()
                r.obs.append(obs)
                r.actions.append(acts)
                r.extras.append(extra)
            # Each env appends its rows' outcomes to their policy's rows: within one
            # policy, env order then agent order is the order of that policy's group.
            for k in env_range:
                self._step_env(k, actions[k], rows, trajs, traj_of[k])
        return self._postprocess(rows, trajs, deferred)

    def _step_env(self, k: int, actions: dict, rows: dict, trajs: list,
                  traj_of: dict) -> None:
        episode = self._episode[k]
        obs, rewards, terms, truncs, infos = self.envs[k].step(actions)
        t = episode.length
        returns = episode.agent_rewards
        mapped = episode._policies
        for agent in actions:
            r = float(rewards.get(agent, 0.0))
            returns[agent] = returns.get(agent, 0.0) + r
            pid = mapped[agent]
            ti = traj_of.get(agent)
            if ti is None:
                ti = traj_of[agent] = len(trajs)
                trajs.append([pid, episode.episode_id, self._agent_index[k][agent], t, False,
                              k, agent])
            rw = rows[pid]
            rw.rewards.append(r)
            rw.traj.append(ti)
        episode.length = t + 1
        if len(obs) != len(actions) or obs.keys() != actions.keys():
            missing = [a for a in actions if a not in obs]
            if missing:
                raise OperatorError(
                    f"{type(self.envs[k]).__name__}.step returned no observation for agent "
                    f"{missing[0]!r}, which acted; a MultiAgentEnv returns an obs for every "
                    "agent in the actions (its final one when the agent is done)")
            obs = {a: obs[a] for a in actions}
        if self.callbacks is not None:
            last = episode._last
            for agent, o in obs.items():
                last[agent] = (o, actions.get(agent), float(rewards.get(agent, 0.0)),
                               infos.get(agent, {}))
            self.callbacks.step(episode)
        if not (any(terms.values()) or any(truncs.values())):
            self._obs[k] = obs
            return
        all_term, all_trunc = bool(terms.get("__all__")), bool(truncs.get("__all__"))
        next_obs = {}
        for agent, o in obs.items():
            term = all_term or bool(terms.get(agent))
            trunc = not term and (all_trunc or bool(truncs.get(agent)))
            if term or trunc:
                ti = traj_of[agent]
                trajs[ti][4] = True
                trajs[ti].append(o)  # the final observation
                rw = rows[mapped[agent]]
                row = len(rw.traj) - 1  # the agent's row is among this step's last ones
                while rw.traj[row] != ti:
                    row -= 1
                rw.dones.append((row, term, trunc))
            else:
                next_obs[agent] = o
        if all_term or all_trunc:
            per_policy: dict[str, list[float]] = {}
            for agent, ret in returns.items():
                per_policy.setdefault(mapped[agent], []).append(ret)
            entry = {
                "episode_reward": float(sum(returns.values())), "episode_len": episode.length,
                "policy_rewards": per_policy,
                "agent_rewards": {a: (mapped[a], ret) for a, ret in returns.items()}}
            if self.callbacks is not None:
                self.callbacks.end(episode)
                entry.update(episode.finished_stats())
            self._episodes.append(entry)
            traj_of.clear()
            self._reset(k, None)
        else:
            self._obs[k] = next_obs

    def _postprocess(self, rows: dict[str, _Rows], trajs: list,
                     deferred: set[str]) -> MultiAgentBatch:
        out = {}
        info = np.asarray([t[1:4] for t in trajs], np.int64).reshape(-1, 3)
        for pid, r in rows.items():
            policy = self.policies[pid]
            n = len(r.traj)
            terms, truncs = np.zeros(n, bool), np.zeros(n, bool)
            for i, term, trunc in r.dones:
                terms[i], truncs[i] = term, trunc
            traj = np.asarray(r.traj, np.int64)
            order = np.argsort(traj, kind="stable")  # trajectory-major, time order kept
            traj = traj[order]
            obs = np.concatenate(r.obs)[order]
            ends = np.append(np.flatnonzero(traj[1:] != traj[:-1]) + 1, n)
            starts = np.append(0, ends[:-1])
            # s_{t+1} is the next row's obs inside a trajectory; at its end, the final
            # obs (done) or the agent's current one (cut by the fragment).
            next_obs = np.empty_like(obs)
            next_obs[:-1] = obs[1:]
            cut = []
            for e in ends.tolist():
                _, _, _, _, done, k, agent, *final = trajs[traj[e - 1]]
                cut.append(not done)
                next_obs[e - 1] = final[0] if done else self._obs[k][agent]
            cut = np.asarray(cut, bool)
            cols = {SB.OBS: obs,
                    SB.ACTIONS: np.concatenate(r.actions)[order],
                    SB.REWARDS: np.asarray(r.rewards, np.float32)[order],
                    SB.TERMINATEDS: terms[order],
                    SB.TRUNCATEDS: truncs[order],
                    SB.NEXT_OBS: next_obs,
                    # first step of the trajectory + rows since its first row
                    SB.T: info[traj, 2] + np.arange(n) - np.repeat(starts, ends - starts)}
            for key in r.extras[0]:
                cols[key] = np.concatenate([e[key] for e in r.extras])[order]
            cols[SB.EPS_ID] = info[traj, 0]
            cols[SB.AGENT_INDEX] = info[traj, 1]
            # One value call per policy: truncated rows and the last row of each cut trajectory.
            need = cols[SB.TRUNCATEDS] & ~cols[SB.TERMINATEDS]
            need[ends[cut] - 1] = True
            idx = np.flatnonzero(need)
            values = np.zeros(n, np.float32)
            if pid in deferred:  # vf_preds V(s_t) of every row, in the same value call
                v = policy.value(np.concatenate([obs, next_obs[idx]]))
                cols[SB.VF_PREDS] = v[:n]
                values[idx] = v[n:]
            elif len(idx):
                values[idx] = policy.value(next_obs[idx])
            cols[SB.BOOTSTRAP_VALUE] = np.where(cols[SB.TRUNCATEDS], values, 0.0).astype(np.float32)
            last_values = np.where(cut, values[ends - 1], 0.0).tolist()
            out[pid] = postprocess_trajectories(policy, SampleBatch(cols), ends, last_values)
        env_steps = self.fragment_length * len(self.envs)
        return MultiAgentBatch(out, env_steps)

    def episode_stats(self) -> list[dict]:
        """Episodes completed since the last call, oldest first (drains the buffer)."""
        out, self._episodes = self._episodes, []
        return out


__all__ = ["MultiAgentSampler", "Episode", "as_mapping_fn", "spaces_match"]
