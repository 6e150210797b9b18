"""``Episode``: one env episode as the policy mapping and the callbacks see it.

Every env-stepping loop uses this one type. The multi-agent sampler makes one per
episode always (``policy_mapping_fn(agent_id, episode)`` takes it); the
single-agent sampler and evaluation make them only when episode callbacks are
configured (:class:`~flowrl.callbacks.DefaultCallbacks`), so the default path
tracks episodes in numpy arrays (:class:`~flowrl.workers.env_loop.Episodes`) and
builds no Python object per episode.

What a callback may use (RLlib 1.x names): ``episode_id`` (the rows' ``eps_id``),
``env_index``, ``length`` (env steps so far), ``agent_rewards`` (agent id ->
return so far), ``total_reward``, ``custom_metrics`` (name -> number, reported as
``custom_metrics/<name>_mean``/``_min``/``_max``), ``hist_data`` (name -> list of
numbers, reported in ``hist_stats``), ``user_data`` (free storage for the
episode), ``policy_for(agent_id)`` and ``last_observation_for`` /
``last_action_for`` / ``last_reward_for`` / ``last_info_for``. A single-agent
episode has the one agent :data:`SINGLE_AGENT_ID` (RLlib 1.x's ``"agent0"``).
"""

from __future__ import annotations

from typing import Any, Callable

from flowrl.errors import OperatorError

#: The agent id of a single-agent env's episode (RLlib 1.x's dummy agent id).
SINGLE_AGENT_ID = "agent0"


class Episode:
    """One env episode; see the module docstring.

    ``mapping(agent_id, episode) -> policy id`` answers :meth:`policy_for`, once per
    agent (cached). The ``last_*_for`` accessors answer for the latest env step
    (after a reset: the first observation, action None, reward 0.0); samplers
    record them (:meth:`record`) only when episode callbacks are configured, else
    they are None.

    >>> e = Episode(7, 0, lambda agent, episode: f"p{agent % 2}")
    >>> e.policy_for(3), e.policy_for(3), e.episode_id
    ('p1', 'p1', 7)
    >>> e.user_data["seen"] = [1]; e.custom_metrics["score"] = 2
    >>> e.finished_stats()
    {'custom_metrics': {'score': 2.0}}
    """

    __slots__ = ("episode_id", "env_index", "length", "agent_rewards", "custom_metrics",
                 "user_data", "hist_data", "_mapping", "_policies", "_last")

    def __init__(self, episode_id: int, env_index: int, mapping: Callable[[Any, "Episode"], str]):
        self.episode_id, self.env_index = episode_id, env_index
        self.length = 0
        self.agent_rewards: dict[Any, float] = {}
        self.custom_metrics: dict[str, Any] = {}
        self.user_data: dict[str, Any] = {}
        self.hist_data: dict[str, Any] = {}
        self._mapping = mapping
        self._policies: dict[Any, str] = {}
        # agent id -> (obs, action, reward, info) of the latest step (callbacks only)
        self._last: dict[Any, tuple] = {}

    def policy_for(self, agent_id: Any = SINGLE_AGENT_ID) -> str:
        """The policy id of ``agent_id`` in this episode (maps it on first use)."""
        pid = self._policies.get(agent_id)
        if pid is None:
            pid = self._policies[agent_id] = self._mapping(agent_id, self)
        return pid

    @property
    def agent_policies(self) -> dict[Any, str]:
        """Agent id -> policy id for the agents mapped so far (a copy)."""
        return dict(self._policies)

    @property
    def total_reward(self) -> float:
        """The sum of every agent's return so far."""
        return float(sum(self.agent_rewards.values()))

    def last_observation_for(self, agent_id: Any = SINGLE_AGENT_ID) -> Any:
        """``agent_id``'s latest observation (the final one once it is done)."""
        return self._latest(agent_id, 0)

    def last_action_for(self, agent_id: Any = SINGLE_AGENT_ID) -> Any:
        """The action ``agent_id`` took at the latest step (None before its first)."""
        return self._latest(agent_id, 1)

    def last_reward_for(self, agent_id: Any = SINGLE_AGENT_ID) -> float | None:
        """The reward ``agent_id`` got at the latest step (0.0 before its first)."""
        return self._latest(agent_id, 2)

    def last_info_for(self, agent_id: Any = SINGLE_AGENT_ID) -> dict | None:
        """The info dict the env returned for ``agent_id`` at the latest step."""
        info = self._latest(agent_id, 3)
        return info() if callable(info) else info

    def record(self, agent_id: Any, obs: Any, action: Any, reward: float | None,
               info: Any) -> None:
        """Set what the ``last_*_for(agent_id)`` accessors answer: the latest env step
        of ``agent_id`` (after a reset: its first observation, action None, reward
        0.0). ``info`` may be a zero-argument callable, called only when asked.
        Samplers call it (with callbacks only).

        >>> e = Episode(0, 0, lambda agent, episode: "p")
        >>> e.record("a", [1.0], 2, 0.5, lambda: {"k": 1})
        >>> e.last_action_for("a"), e.last_info_for("a")
        (2, {'k': 1})
        """
        self._last[agent_id] = (obs, action, reward, info)

    def _latest(self, agent_id: Any, k: int) -> Any:
        last = self._last.get(agent_id)
        return None if last is None else last[k]

    def finished_stats(self) -> dict[str, dict]:
        """What this episode adds to its ``episode_stats()`` entry once it ended:
        ``custom_metrics`` (name -> float) and ``hist_data`` (name -> list of
        floats), each only when the callbacks set some. A value that is not a
        number is an OperatorError naming the metric."""
        out: dict[str, dict] = {}
        if self.custom_metrics:
            out["custom_metrics"] = {str(k): _number(f"episode.custom_metrics[{k!r}]", v)
                                     for k, v in self.custom_metrics.items()}
        if self.hist_data:
            out["hist_data"] = {
                str(k): [_number(f"episode.hist_data[{k!r}]", x)
                         for x in (v if isinstance(v, (list, tuple)) else [v])]
                for k, v in self.hist_data.items()}
        return out


def _number(where: str, value: Any) -> float:
    try:
        return float(value)
    except (TypeError, ValueError):
        raise OperatorError(f"{where} = {value!r} ({type(value).__name__}) is not a number; "
                            "callbacks may store numbers only there (keep other data in "
                            "episode.user_data)") from None


def merge_finished_stats(first: dict, then: dict) -> dict:
    """``finished_stats()`` of two episodes reported as one (Atari lives of one game):
    a custom metric set in both takes ``then``'s value; histogram data is joined.

    >>> merge_finished_stats({"custom_metrics": {"a": 1.0, "b": 2.0}, "hist_data": {"h": [1.0]}},
    ...                      {"custom_metrics": {"a": 3.0}, "hist_data": {"h": [2.0]}})
    {'custom_metrics': {'a': 3.0, 'b': 2.0}, 'hist_data': {'h': [1.0, 2.0]}}
    """
    out = {"custom_metrics": {**first.get("custom_metrics", {}),
                              **then.get("custom_metrics", {})},
           "hist_data": dict(first.get("hist_data", {}))}
    for k, v in then.get("hist_data", {}).items():
        out["hist_data"][k] = out["hist_data"].get(k, []) + v
    return {k: v for k, v in out.items() if v}


__all__ = ["Episode", "SINGLE_AGENT_ID", "merge_finished_stats"]
