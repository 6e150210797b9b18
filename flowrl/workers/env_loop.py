"""The env-stepping loop every sampler shares: acting, and episodes with their callbacks.

Three loops step envs: the single-agent sampler (a vector env, fixed fragments),
the multi-agent sampler (dict envs, one forward per policy) and evaluation (whole
episodes on each env slot). Each step of each of them is the same four moves, and
each move lives here once:

1. act: :meth:`Acting.act`, one batched ``compute_actions`` for the rows that act
   (a recurrent policy gets each row's state, previous action and reward);
2. the actions as the env takes them: :func:`env_actions` (``Discrete`` as
   Python ints, ``Box`` clipped to the bounds; the batch keeps the policy's
   actions, unclipped);
3. step the env(s): the sampler's own (a vector env, dict envs, single envs);
4. after the step: :meth:`Acting.advance` carries the recurrent state (reset
   where an episode ended), :class:`Episodes` counts each env slot's episode
   (id, steps, return; a multi-agent episode's returns per agent) and runs the
   episode callbacks (:class:`~flowrl.callbacks.EpisodeCallbacks`) on its
   :class:`~flowrl.workers.Episode`, which a multi-agent env's policy mapping
   reads too.

What the samplers keep apart is what they record: the single-agent sampler's
``(T, N)`` buffers, the multi-agent sampler's per-policy rows and turn-taking,
evaluation's per-episode results.

State. :class:`Acting`: the policy, its forward count and, for a recurrent
policy, per row the state the next step starts from and the previous action and
reward (zeros at an episode's start; the previous actions are None until the
first step, which the policy reads as zeros). :class:`Episodes`: per env slot
the episode id, steps so far and return (numpy arrays), the slot's
:class:`~flowrl.workers.Episode` (with callbacks, or a multi-agent env's policy
mapping; a multi-agent episode's returns per agent live there) and, for envs
that report whole games over several training episodes (Atari lives), the
custom metrics of the game's earlier lives. A single-agent env without callbacks
makes no Episode object.
"""

from __future__ import annotations

from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np

from flowrl.workers.episode import SINGLE_AGENT_ID, Episode, merge_finished_stats


def defers_vf_preds(policy) -> bool:
    """Whether a sampler may act with ``compute_actions(..., vf_preds=False)`` and fill
    the ``vf_preds`` column with one ``policy.value`` call per fragment instead of one
    value forward per step.

    True for policies whose ``compute_actions`` and ``value`` are
    :class:`~flowrl.policies.TorchPolicy`'s own and whose value network is separate
    from the policy network (the built-in MLP: values cost no extra policy
    forward); a policy that overrides either, or
    whose ``compute_actions`` was replaced on the instance, is called as before.
    The weights do not change within a ``sample()`` call, so the column holds the
    same values either way (up to float rounding).

    >>> from flowrl.policies import DQNPolicy, PPOPolicy
    >>> box, two = gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2)
    >>> defers_vf_preds(PPOPolicy(box, two)), defers_vf_preds(DQNPolicy(box, two))
    (True, False)
    """
    from flowrl.policies.torch_policy import TorchPolicy
    cls = type(policy)
    return (isinstance(policy, TorchPolicy) and cls.compute_actions is TorchPolicy.compute_actions
            and cls.value is TorchPolicy.value and "compute_actions" not in vars(policy)
            and policy.separate_value_network)


def env_actions(space: gym.Space, actions: Any) -> Any:
    """A batch of a policy's actions as an env with action space ``space`` takes them:
    ``Discrete`` as a list of Python ints (the type ``Discrete.contains`` checks
    first), ``Box`` clipped to the bounds, others as they are. The samplers hand
    these to the envs and keep the policy's own actions in the batch;
    :mod:`flowrl.inference` returns them to the caller.

    >>> env_actions(gym.spaces.Discrete(3), np.array([2, 0]))
    [2, 0]
    >>> env_actions(gym.spaces.Box(-1.0, 1.0, (2,)), np.array([[0.5, 3.0]]))
    array([[0.5, 1. ]])
    """
    if isinstance(space, gym.spaces.Discrete):
        return np.asarray(actions).tolist()
    if isinstance(space, gym.spaces.Box):
        return np.clip(actions, space.low, space.high)
    return actions


class Acting:
    """``policy`` acting for ``num_rows`` env rows (env slots), one batched forward a step.

    ``action_space`` is the space the env takes actions in (:meth:`to_env`).
    ``num_forwards`` counts the ``compute_actions`` calls. A recurrent policy
    (``policy.is_recurrent``) needs ``num_rows``: its state, previous action and
    reward are kept per row, and :meth:`advance` moves them on after each step.

    >>> from flowrl.policies import PGPolicy
    >>> box, two = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)
    >>> acting = Acting(PGPolicy(box, two, seed=0), two, explore=False)
    >>> actions, extra = acting.act(np.zeros((4, 3), np.float32))
    >>> acting.to_env(actions) == actions.tolist(), acting.num_forwards
    (True, 1)
    """

    def __init__(self, policy, action_space: gym.Space, *, explore: bool, num_rows: int = 0):
        self.policy, self.explore = policy, explore
        self.num_forwards = 0
        self.action_space = action_space
        self.recurrent = bool(getattr(policy, "is_recurrent", False))
        if self.recurrent:
            self.initial = [np.asarray(s) for s in policy.get_initial_state()]
            #: per row: the state its next step starts from (one array per state part)
            self.state = [np.repeat(s[None], num_rows, axis=0) for s in self.initial]
            self.prev_actions: np.ndarray | None = None
            self.prev_rewards = np.zeros(num_rows, np.float32)

    def act(self, obs: np.ndarray, *, lean: bool = False,
            rows: Sequence[int] | None = None) -> tuple[Any, dict]:
        """``policy.compute_actions`` for ``obs``, the observations of ``rows`` (None:
        every row, in order). ``lean`` acts with ``vf_preds=False`` (see
        :func:`defers_vf_preds`; ignored for a recurrent policy, which gets its
        rows' state, previous actions and rewards instead)."""
        self.num_forwards += 1
        if not self.recurrent:
            if lean:
                return self.policy.compute_actions(obs, self.explore, vf_preds=False)
            return self.policy.compute_actions(obs, self.explore)
        state, prev_a, prev_r = self.state, self.prev_actions, self.prev_rewards
        if rows is not None:
            state = [s[rows] for s in state]
            prev_a = None if prev_a is None else prev_a[rows]
            prev_r = prev_r[rows]
        actions, extra = self.policy.compute_actions(
            obs, self.explore, state_batches=state, prev_actions=prev_a, prev_rewards=prev_r)
        if self.prev_actions is None:
            shape = (len(self.prev_rewards), *np.shape(actions)[1:])
            self.prev_actions = np.zeros(shape, np.asarray(actions).dtype)
        return actions, extra

    def to_env(self, actions: Any) -> Any:
        """A batch of the policy's actions as the env takes them (:func:`env_actions`)."""
        return env_actions(self.action_space, actions)

    def advance(self, extra: dict, actions: Any, rewards: Any, done: np.ndarray,
                rows: Sequence[int] | None = None) -> None:
        """After an env step of ``rows`` (None: every row): a recurrent policy's rows
        start their next step from ``extra``'s ``state_out_*``, ``actions`` and
        ``rewards``, or from the initial state and zeros where ``done`` (a bool per
        acting row) ended the episode. Nothing to do for other policies."""
        if not self.recurrent:
            return
        if rows is None:
            self.state = [extra[f"state_out_{i}"].copy() for i in range(len(self.state))]
            self.prev_actions = np.array(actions)
            self.prev_rewards = np.asarray(rewards, np.float32).copy()
            ended: Any = done
        else:
            rows = np.asarray(rows, np.int64)
            for i, s in enumerate(self.state):
                s[rows] = extra[f"state_out_{i}"]
            self.prev_actions[rows] = actions
            self.prev_rewards[rows] = rewards
            ended = rows[done]
        if np.any(done):
            for s, init in zip(self.state, self.initial):
                s[ended] = init
            self.prev_actions[ended] = 0
            self.prev_rewards[ended] = 0.0


class Episodes:
    """The episodes of ``num_slots`` env slots: per slot its episode id (``eps_id``)
    and steps so far (``t``), the :class:`~flowrl.workers.Episode` where one is
    kept, and the episode hooks of ``callbacks`` (an
    :class:`~flowrl.callbacks.EpisodeCallbacks`, or None).

    Single-agent envs (``mapping`` None) also count each slot's return (``ret``)
    and keep an Episode only with callbacks; its one agent
    (:data:`~flowrl.workers.episode.SINGLE_AGENT_ID`) plays the callbacks' one
    policy. Multi-agent envs give ``mapping``, the ``policy_mapping_fn(agent_id,
    episode)``: every slot's episode is then an Episode (the mapping reads it), and
    its ``agent_rewards`` hold each agent's return, which the sampler adds up (it
    knows which rewards a waiting agent is owed).

    Slot ``i`` starts with episode id ``first_id + i``; :meth:`begin` gives the
    next episode the next free id unless told one. The counts are numpy arrays
    the samplers update in place (``t += 1``, ``ret += rewards``). Hooks:
    :meth:`begin` (or :meth:`start`, for a slot's first episode) runs the start
    hook; :meth:`step` (single agent) or :meth:`step_agents` (multi-agent) the
    step hook and, where the step ended the episode, the end hook.

    >>> eps = Episodes(2, None, first_id=10)
    >>> eps.t += 1; eps.ret += [1.0, 2.0]
    >>> eps.finish(1, {"episode_reward": float(eps.ret[1])}); eps.begin(1, None, {})
    {'episode_reward': 2.0}
    >>> eps.eps_id.tolist(), eps.t.tolist()
    ([10, 12], [1, 0])
    """

    def __init__(self, num_slots: int, callbacks: Any, *, first_id: int = 0,
                 mapping: Callable[[Any, Episode], str] | None = None):
        self.eps_id = np.arange(num_slots, dtype=np.int64) + first_id
        self.next_id = first_id + num_slots
        self.t = np.zeros(num_slots, dtype=np.int64)
        self.ret = np.zeros(num_slots, dtype=np.float64)
        self.callbacks = callbacks
        self.multi_agent = mapping is not None
        if mapping is None and callbacks is not None:
            pid = next(iter(callbacks.policies))
            mapping = lambda agent_id, episode: pid  # noqa: E731
        self.mapping = mapping
        #: whether every episode is an Episode (callbacks, or a mapping that reads it)
        self.keeps_episodes = mapping is not None
        #: per slot: its Episode (kept ones only; None before its start)
        self.live: list[Episode | None] = [None] * num_slots
        self._ended: dict[int, dict] = {}  # slot -> finished_stats(), of this step's end
        self._carried: dict[int, dict] = {}  # slot -> stats of lives not yet reported

    def begin(self, i: int, obs: Any, info: Any, episode_id: int | None = None) -> None:
        """A new episode in slot ``i`` from its first observation and info (single
        agent: a dict, or a callable returning one when a callback asks; multi-agent:
        dicts by agent id): its id, zero counts, and its Episode and start hook
        (:meth:`start`)."""
        if episode_id is None:
            episode_id, self.next_id = self.next_id, self.next_id + 1
        self.eps_id[i] = episode_id
        self.t[i] = 0
        self.ret[i] = 0.0
        if self.keeps_episodes:
            self.start(i, obs, info)

    def start(self, i: int, obs: Any, info: Any) -> None:
        """Slot ``i``'s current episode as an Episode, its first observations recorded
        and its start hook run (both with callbacks only). The samplers call it for
        their first episodes at the first ``sample()``, after the worker that owns
        them is built (the hooks get the worker)."""
        episode = self.live[i] = Episode(int(self.eps_id[i]), i, self.mapping)
        if self.callbacks is None:
            return
        if self.multi_agent:
            for agent, o in obs.items():
                episode.record(agent, o, None, 0.0, info.get(agent, {}))
        else:
            episode.record(SINGLE_AGENT_ID, obs, None, 0.0, info)
        self.callbacks.start(episode)

    def step(self, i: int, obs: Any, action: Any, reward: float, info: Any,
             ended: bool) -> None:
        """Slot ``i``'s single-agent step (counted already) into its Episode, then its
        step hook, and where it ``ended`` the episode its end hook (callbacks only;
        :meth:`finish` adds the custom metrics to the episode's entry)."""
        episode = self.live[i]
        episode.length = int(self.t[i])
        episode.agent_rewards[SINGLE_AGENT_ID] = float(self.ret[i])
        episode.record(SINGLE_AGENT_ID, obs, action, reward, info)
        self.callbacks.step(episode)
        if ended:
            self._end(i, episode)

    def step_agents(self, i: int, obs: dict, actions: dict, rewards: dict, infos: dict,
                    ended: bool) -> dict | None:
        """Slot ``i``'s multi-agent env step (counted already: ``t`` and the acting
        agents' returns): its Episode's ``length``, and with callbacks each agent that
        acted or got an observation recorded (an agent with no new observation keeps
        its last one), then the step hook. Where the step ``ended`` the episode,
        returns its entry: ``episode_reward`` (the sum of the agents' returns),
        ``episode_len``, ``policy_rewards`` (policy id -> the return of each agent it
        played), ``agent_rewards`` (agent id -> (policy id, return)), and with
        callbacks, after the end hook, the custom metrics it set; else None."""
        episode = self.live[i]
        episode.length = int(self.t[i])
        callbacks = self.callbacks
        if callbacks is not None:
            for agent in {*obs, *actions}:
                episode.record(agent, obs[agent] if agent in obs
                               else episode.last_observation_for(agent), actions.get(agent),
                               float(rewards.get(agent, 0.0)), infos.get(agent, {}))
            callbacks.step(episode)
        if not ended:
            return None
        returns, policy_for = episode.agent_rewards, episode.policy_for
        per_policy: dict[str, list[float]] = {}
        for agent, ret in returns.items():
            per_policy.setdefault(policy_for(agent), []).append(ret)
        entry = {"episode_reward": float(sum(returns.values())), "episode_len": int(self.t[i]),
                 "policy_rewards": per_policy,
                 "agent_rewards": {a: (policy_for(a), ret) for a, ret in returns.items()}}
        if callbacks is not None:
            self._end(i, episode)
        return self.finish(i, entry)

    def _end(self, i: int, episode: Episode) -> None:
        self.callbacks.end(episode)
        self._ended[i] = episode.finished_stats()

    def finish(self, i: int, entry: dict | None) -> dict | None:
        """Slot ``i``'s ended episode's ``entry`` (its statistics), with the custom
        metrics its callbacks set. ``entry`` None: the episode is one life of a game
        reported later; its metrics are carried to the game's entry."""
        if self.callbacks is None:
            return entry
        stats = self._ended.pop(i)
        carried = self._carried.pop(i, None)
        if carried is not None:
            stats = merge_finished_stats(carried, stats)
        if entry is not None:
            entry.update(stats)
        elif stats:
            self._carried[i] = stats
        return entry


__all__ = ["Acting", "Episodes", "defers_vf_preds", "env_actions"]
