"""Multi-agent sampling over a list of :class:`~flowrl.envs.MultiAgentEnv` s.

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

Turn-based envs. The agents that act on a step are those the env last returned
an observation for (and that are not done). An agent that acted and got no
observation back *waits*: its row stays open until its next observation, which
is that row's ``new_obs`` (so within a trajectory ``s_{t+1}`` is always the next
row's ``obs``). Rewards the env gives a waiting agent (or any agent with an open
row that did not act on that step) are added to that open row, so nothing it was
owed is lost. A waiting agent that is done (its own flag or ``"__all__"``) closes
its trajectory on that open row: with the final observation if the env gave one,
else with the row's own ``obs`` as ``new_obs`` (a truncated row then bootstraps
from the value of the last state the agent saw). A row still waiting when the
fragment ends is carried into the next fragment (its reward is not final yet);
the rows before it end there as a cut trajectory bootstrapping from the carried
row's ``obs``. ``t`` is the env step at which the agent acted. Rewards for an
agent before its first action in an episode, or after it is done, belong to no
row and are dropped (they do not count in ``agent_rewards`` either). An env step
that returns observations only for agents that are done (and no ``"__all__"``)
leaves nobody to act: as in RLlib 1.x, the env's next step takes an empty action
dict, and so on until an agent can act again; such a step counts as an env step
(in ``episode_len``, ``t`` and the batch's ``env_steps``) like any other. An env
step that returns no observation at all without ending the episode is an
OperatorError: nobody could act next.

State kept between calls: each env's current observations (of agents about to
act) and the agents already done in its episode; the
:class:`~flowrl.workers.env_loop.Episodes` (``episodes``: per env its
:class:`Episode`, id and step count); the rows still waiting for an observation
(carried into the next fragment); completed episodes are buffered as
``{"episode_reward", "episode_len", "policy_rewards", "agent_rewards"}`` dicts
(``policy_rewards[pid]`` lists the return of each agent that policy played)
until :meth:`MultiAgentSampler.episode_stats` drains them.

The shared env-stepping loop's parts (:mod:`flowrl.workers.env_loop`) act
(:class:`~flowrl.workers.env_loop.Acting`, one per policy: the forward, the
actions as the env takes them) and track the episodes
(:class:`~flowrl.workers.env_loop.Episodes`: ids, steps, the Episode the policy
mapping reads, the episode entries and callbacks); this module adds what only
multi-agent envs need: the grouping by policy, turn-taking, the agents' returns
(which rewards a waiting agent is owed) and the per-policy rows.

Callbacks (``callbacks``, an :class:`~flowrl.callbacks.EpisodeCallbacks`, or None):
each episode's start runs once its env was reset (the first ones at the first
``sample()``), its step after each env step (the agents' latest observation,
action, reward and info recorded in the :class:`Episode` first), its end after
its last step; an ended episode's entry then also holds the custom metrics the
callbacks set (:meth:`Episode.finished_stats`). Within a step the envs take
their turns in order: env 0's step hook (then, if its episode ended, its end
hook and its next episode's start hook), then env 1's, ...
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Any, Callable

import gymnasium as gym
import numpy as np

from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError, OperatorError
from flowrl.workers.env_loop import Acting, Episodes, defers_vf_preds
from flowrl.workers.episode import Episode
from flowrl.workers.sampler import postprocess_trajectories

SB = SampleBatch


class PolicyMapping(dict):
    """A fixed ``{agent_id: policy_id}`` table used as ``policy_mapping_fn(agent_id,
    episode)``: how a YAML spec, which holds no Python callables, maps agents to
    policies. An agent missing from the table is a ConfigError naming it.

    >>> PolicyMapping({0: "p0", 1: "p1"})(1, None)
    'p1'
    """

    def __call__(self, agent_id: Any, episode: Any = None) -> str:
        try:
            return self[agent_id]
        except (KeyError, TypeError):
            raise ConfigError(f"multiagent.policy_mapping_fn={dict(self)!r} maps no policy "
                              f"to agent {agent_id!r}; add {agent_id!r}: <policy id>") from None


def as_mapping_fn(fn: Callable[..., str] | dict | None) -> Callable[[Any, Any], str] | None:
    """``fn`` as a two-argument ``(agent_id, episode)`` mapping.

    Accepts the documented signature ``fn(agent_id, episode)``, the older one-argument
    ``fn(agent_id)`` (as in RLlib 1.x tests) and a ``{agent_id: policy_id}`` dict
    (a :class:`PolicyMapping`).

    >>> as_mapping_fn(lambda agent: "p")(0, None), as_mapping_fn({0: "q"})(0, None)
    ('p', 'q')
    """
    if fn is None:
        return None
    if isinstance(fn, dict):
        return fn if isinstance(fn, PolicyMapping) else PolicyMapping(fn)
    if not callable(fn):
        raise ConfigError(f"policy_mapping_fn={fn!r}: must be a callable "
                          "(agent_id, episode) -> policy id or an {agent_id: policy_id} dict")
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
    ``rewards``, the env step ``t`` it acted on and its trajectory index
    (``traj``) in the same order; a row that ends its agent's trajectory is listed
    in ``dones`` as ``(row, terminated, truncated)``. Within a trajectory
    ``s_{t+1}`` is the next row's ``obs``, so the next observation is not stored
    per row (the last one is kept with the trajectory).
    """

    __slots__ = ("obs", "actions", "extras", "rewards", "t", "traj", "dones")

    def __init__(self):
        self.obs, self.actions, self.extras = [], [], []
        self.rewards: list[float] = []
        self.t: list[int] = []
        self.traj: list[int] = []
        self.dones: list[tuple[int, bool, bool]] = []


class _Traj:
    """One agent's trajectory within one fragment: its policy, ``eps_id``,
    ``agent_index``, env and agent; once it ends, ``done`` and the ``final_obs``
    (None when the env gave none); ``carried`` is the row (of this fragment) still
    waiting for an observation when the fragment ended."""

    __slots__ = ("pid", "eps_id", "agent_index", "env", "agent", "done", "final_obs", "carried")

    def __init__(self, pid: str, eps_id: int, agent_index: int, env: int, agent: Any):
        self.pid, self.eps_id, self.agent_index, self.env, self.agent = (
            pid, eps_id, agent_index, env, agent)
        self.done = False
        self.final_obs: Any = None
        self.carried: int | None = None


@dataclass(slots=True)
class _Carried:
    """A row that waited for its agent's next observation past a fragment's end."""

    env: int
    agent: Any
    pid: str
    obs: np.ndarray
    action: np.ndarray
    extra: dict
    reward: float
    t: int
    eps_id: int
    agent_index: int


class MultiAgentSampler:
    """Collects :class:`MultiAgentBatch` fragments from ``envs`` with ``policies``.

    ``policy_mapping_fn(agent_id, episode) -> policy id`` (see :class:`Episode`);
    a policy id not in ``policies`` is an OperatorError naming the agent and id.
    ``num_forwards`` counts the policies' ``compute_actions`` calls.

    Actions reach the env as Python ints for ``Discrete`` policies (the type
    ``Discrete.contains`` checks first) and as numpy rows otherwise (``Box``
    actions clipped to the policy's bounds:
    :meth:`~flowrl.workers.env_loop.Acting.to_env`); the batch keeps the policy's
    numpy actions, unclipped. ``callbacks``: see the module docstring.
    """

    def __init__(self, envs: list, policies: dict[str, Any],
                 policy_mapping_fn: Callable[[Any, Episode], str], *, fragment_length: int,
                 seed: int | None, explore: bool = True, eps_id_base: int = 0,
                 callbacks: Any = None):
        self.envs, self.policies = envs, policies
        self._started = False  # whether the first episodes' starts ran
        self.policy_mapping_fn = as_mapping_fn(policy_mapping_fn)
        self.fragment_length, self.explore = fragment_length, explore
        #: each env's episode (an Episode: the policy mapping reads it), its id and steps
        self.episodes = Episodes(len(envs), callbacks, first_id=eps_id_base, mapping=self._map)
        self._episodes: list[dict] = []
        self._checked: set[tuple[Any, str]] = set()
        # per policy: its acting (actions reach the env in the policy's action space)
        self._acting = {pid: Acting(p, p.action_space, explore=explore)
                        for pid, p in policies.items()}
        self._agent_index = [{a: i for i, a in enumerate(env.possible_agents)} for env in envs]
        self._done_agents: list[set] = [set() for _ in envs]  # per env: agents done in it
        self._carry: list[_Carried] = []
        self._obs: list[dict] = []  # per env: the observations of the agents about to act
        self._reset_infos: list[dict] = []  # per env: its first reset's infos
        for k, env in enumerate(envs):
            obs, infos = env.reset(seed=None if seed is None else seed + k)
            self._obs.append(obs)
            self._reset_infos.append(infos)

    @property
    def callbacks(self) -> Any:
        """The :class:`~flowrl.callbacks.EpisodeCallbacks` the sampler runs, or None."""
        return self.episodes.callbacks

    @property
    def num_forwards(self) -> int:
        """The policies' ``compute_actions`` calls so far."""
        return sum(a.num_forwards for a in self._acting.values())

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

    def _reset(self, k: int) -> None:
        """Env ``k``'s next episode (its first episode began with the sampler)."""
        obs, infos = self.envs[k].reset(seed=None)
        self._obs[k] = obs
        self._done_agents[k].clear()
        self.episodes.begin(k, obs, infos)

    def _start_fragment(self, rows: dict, trajs: list, traj_of: list, open_rows: list) -> None:
        """Put the rows carried from the last fragment first in this one's."""
        for c in self._carry:
            r = rows.get(c.pid)
            if r is None:
                r = rows[c.pid] = _Rows()
            r.obs.append(c.obs[None])
            r.actions.append(c.action[None])
            r.extras.append({key: v[None] for key, v in c.extra.items()})
            ti = traj_of[c.env][c.agent] = len(trajs)
            trajs.append(_Traj(c.pid, c.eps_id, c.agent_index, c.env, c.agent))
            open_rows[c.env][c.agent] = (c.pid, len(r.traj))
            r.rewards.append(c.reward)
            r.t.append(c.t)
            r.traj.append(ti)
        self._carry = []

    def sample(self) -> MultiAgentBatch:
        """``fragment_length`` steps of every env, postprocessed per policy."""
        episodes = self.episodes
        if not self._started:
            self._started = True
            for k, infos in enumerate(self._reset_infos):
                episodes.start(k, self._obs[k], infos)
        rows: dict[str, _Rows] = {}
        trajs: list[_Traj] = []
        traj_of: list[dict] = [{} for _ in self.envs]  # per env: agent -> trajectory index
        # per env: agent -> (pid, row) of its open row (its next observation not yet seen)
        open_rows: list[dict] = [{} for _ in self.envs]
        self._start_fragment(rows, trajs, traj_of, open_rows)
        acting = self._acting
        deferred = {pid for pid, p in self.policies.items() if defers_vf_preds(p)}
        n_envs, env_obs, live = len(self.envs), self._obs, episodes.live
        env_range = range(n_envs)
        for _ in range(self.fragment_length):
            # Group the acting agents of all envs by policy: ONE forward per policy.
            groups: dict[str, tuple[list, list, list]] = {}  # pid -> (obs, env, agent)
            for k in env_range:
                policy_for = live[k].policy_for
                for agent, o in env_obs[k].items():
                    pid = policy_for(agent)
                    g = groups.get(pid)
                    if g is None:
                        g = groups[pid] = ([], [], [])
                    g[0].append(o)
                    g[1].append(k)
                    g[2].append(agent)
            actions: list[dict] = [{} for _ in env_range]
            for pid, (obs_list, ks, agents) in groups.items():
                obs = np.array(obs_list)  # np.stack costs several times more on short lists
                a = acting[pid]
                acts, extra = a.act(obs, lean=pid in deferred)
                env_acts = a.to_env(acts)
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
                self._step_env(k, actions[k], rows, trajs, traj_of[k], open_rows[k])
        # A row whose agent is still waiting for an observation is not complete yet.
        carried: dict[str, list[int]] = {}
        for k in env_range:
            for agent, (pid, row) in open_rows[k].items():
                if agent not in env_obs[k]:
                    trajs[traj_of[k][agent]].carried = row
                    carried.setdefault(pid, []).append(row)
        return self._postprocess(rows, trajs, deferred, carried)

    def _step_env(self, k: int, actions: dict, rows: dict, trajs: list,
                  traj_of: dict, open_rows: dict) -> None:
        episodes = self.episodes
        episode = episodes.live[k]
        obs, rewards, terms, truncs, infos = self.envs[k].step(actions)
        t = int(episodes.t[k])
        returns = episode.agent_rewards
        policy_for = episode.policy_for
        for agent in actions:
            r = float(rewards.get(agent, 0.0))
            returns[agent] = returns.get(agent, 0.0) + r
            pid = policy_for(agent)
            ti = traj_of.get(agent)
            if ti is None:
                ti = traj_of[agent] = len(trajs)
                trajs.append(_Traj(pid, episode.episode_id, self._agent_index[k][agent], k, agent))
            rw = rows[pid]
            open_rows[agent] = (pid, len(rw.traj))
            rw.rewards.append(r)
            rw.t.append(t)
            rw.traj.append(ti)
        if rewards.keys() != actions.keys():  # rewards for agents that did not act now
            for agent, r in rewards.items():
                held = open_rows.get(agent) if agent not in actions else None
                if held is not None:  # it waits: the reward belongs to its open row
                    rows[held[0]].rewards[held[1]] += float(r)
                    returns[agent] += float(r)
        episodes.t[k] = t + 1
        all_term, all_trunc = bool(terms.get("__all__")), bool(truncs.get("__all__"))
        entry = episodes.step_agents(k, obs, actions, rewards, infos, all_term or all_trunc)
        done_agents = self._done_agents[k]
        if all_term or all_trunc or any(terms.values()) or any(truncs.values()):
            for agent in [*open_rows, *(a for a in obs if a not in open_rows)]:
                term = all_term or bool(terms.get(agent))
                trunc = not term and (all_trunc or bool(truncs.get(agent)))
                if not (term or trunc):
                    continue
                done_agents.add(agent)
                held = open_rows.pop(agent, None)
                if held is None:  # done before acting in this episode: nothing to close
                    continue
                traj = trajs[traj_of[agent]]
                traj.done = True
                traj.final_obs = obs.get(agent)  # None: closes on its last row's obs
                rows[held[0]].dones.append((held[1], term, trunc))
        if entry is not None:  # the episode ended
            self._episodes.append(entry)
            traj_of.clear()
            open_rows.clear()
            self._reset(k)
            return
        if not obs:
            raise OperatorError(
                f"{type(self.envs[k]).__name__}.step returned no observation for any agent "
                "and did not end the episode ('__all__'), so no agent can act next; return "
                "an observation for the agent(s) whose turn it is")
        if done_agents:  # none left (done agents' obs only): the next step is an empty one
            obs = {a: o for a, o in obs.items() if a not in done_agents}
        self._obs[k] = obs

    def _postprocess(self, rows: dict[str, _Rows], trajs: list[_Traj], deferred: set[str],
                     carried: dict[str, list[int]]) -> MultiAgentBatch:
        out = {}
        info = np.asarray([(tr.eps_id, tr.agent_index) for tr in trajs],
                          np.int64).reshape(-1, 2)
        for pid, r in rows.items():
            policy = self.policies[pid]
            n_all = len(r.traj)
            terms, truncs = np.zeros(n_all, bool), np.zeros(n_all, bool)
            for i, term, trunc in r.dones:
                terms[i], truncs[i] = term, trunc
            traj = np.asarray(r.traj, np.int64)
            obs_all = np.concatenate(r.obs)
            actions_all = np.concatenate(r.actions)
            extras_all = {key: np.concatenate([e[key] for e in r.extras]) for key in r.extras[0]}
            rewards_all = np.asarray(r.rewards, np.float32)
            keep = np.ones(n_all, bool)
            for row in carried.get(pid, ()):
                keep[row] = False
                tr = trajs[r.traj[row]]
                self._carry.append(_Carried(
                    env=tr.env, agent=tr.agent, pid=pid, obs=obs_all[row],
                    action=actions_all[row], extra={key: v[row] for key, v in extras_all.items()},
                    reward=float(r.rewards[row]), t=r.t[row], eps_id=tr.eps_id,
                    agent_index=tr.agent_index))
            # trajectory-major, time order kept; rows carried to the next fragment left out
            order = np.argsort(traj, kind="stable")
            order = order[keep[order]]
            n = len(order)
            if n == 0:
                continue
            traj = traj[order]
            obs = obs_all[order]
            ends = np.append(np.flatnonzero(traj[1:] != traj[:-1]) + 1, n)
            # s_{t+1} is the next row's obs inside a trajectory; at its end, the final
            # obs (done; the row's own obs when the env gave none), the carried row's
            # obs (cut while the agent waited) or the agent's current one (cut).
            next_obs = np.empty_like(obs)
            next_obs[:-1] = obs[1:]
            cut = []
            for e in ends.tolist():
                tr = trajs[traj[e - 1]]
                cut.append(not tr.done)
                if tr.done:
                    next_obs[e - 1] = obs[e - 1] if tr.final_obs is None else tr.final_obs
                elif tr.carried is not None:
                    next_obs[e - 1] = obs_all[tr.carried]
                else:
                    next_obs[e - 1] = self._obs[tr.env][tr.agent]
            cut = np.asarray(cut, bool)
            cols = {SB.OBS: obs,
                    SB.ACTIONS: actions_all[order],
                    SB.REWARDS: rewards_all[order],
                    SB.TERMINATEDS: terms[order],
                    SB.TRUNCATEDS: truncs[order],
                    SB.NEXT_OBS: next_obs,
                    SB.T: np.asarray(r.t, np.int64)[order]}
            for key, v in extras_all.items():
                cols[key] = v[order]
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
