"""DQN as a plan: sample into a replay buffer, replay train batches, update the target.

Two branches interleaved by ``Concurrently(mode="round_robin")``: rollouts ->
:class:`~flowrl.ops.StoreToReplayBuffer` (gated by
:class:`~flowrl.ops.LearningStarts`), and :func:`~flowrl.ops.Replay` ->
``TrainOneStep`` -> :class:`~flowrl.ops.UpdateReplayPriorities` ->
:class:`~flowrl.ops.UpdateTargetNetwork`. The round-robin weights come from
``training_intensity`` (rows trained per row sampled): a rollout round stores
``fragment = rollout_fragment_length * num_envs_per_worker * max(num_workers, 1)``
rows and a train step uses ``train_batch_size``, so the natural intensity is
``train_batch_size / fragment`` and the weights are ``[1, intensity / natural]``
(or ``[natural / intensity, 1]`` below 1; fractions round stochastically).

>>> algo = DQN(DQNConfig(env="CartPole-v1", learning_starts=64, timesteps_per_iteration=128,
...                      seed=0))
>>> r = algo.train()
>>> r["timesteps_total"] >= 128, r["info"]["num_steps_trained"] > 0
(True, True)
>>> algo.local_replay_buffer.stats()["num_entries"] == r["timesteps_total"]
True
>>> algo.stop()
"""

from __future__ import annotations

import functools
import math
from dataclasses import dataclass, field
from typing import Any, ClassVar

from flowrl.algorithms.base import Algorithm, AlgorithmConfig
from flowrl.algorithms.validators import MAX_MAGNITUDE, int_ge, number, or_none, str_dict
from flowrl.config_text import read_numbers
from flowrl.errors import ConfigError
from flowrl.graph.stream import Concurrently, LocalStream
from flowrl.ops import (LearningStarts, ParallelRollouts, Replay, StandardMetricsReporting,
                        StoreToReplayBuffer, TrainOneStep, UpdateReplayPriorities,
                        UpdateTargetNetwork)
from flowrl.policies.dqn import DEFAULT_EXPLORATION, DQNPolicy
from flowrl.replay import PrioritizedReplayBuffer, ReplayBuffer
from flowrl.replay.frames import check_replay_memory
from flowrl.workers.rollout_worker import stacks_frames


@dataclass
class ReplayConfig(AlgorithmConfig):
    """The replay settings every Q-learning algorithm's config shares (DQN, Ape-X,
    SAC), RLlib 1.x names: ``buffer_size``, ``prioritized_replay`` (with
    ``prioritized_replay_alpha/beta/eps``), ``learning_starts`` (<= ``buffer_size``),
    ``target_network_update_freq``, ``n_step``, ``training_intensity`` (None:
    natural; sets the store/train ratio, :func:`round_robin_weights`),
    ``timesteps_per_iteration``, ``worker_side_prioritization`` and
    ``checkpoint_replay_buffer`` (put the buffer into checkpoints). Each algorithm's
    config sets its own defaults.
    """

    buffer_size: int = 50000
    prioritized_replay: bool = True
    prioritized_replay_alpha: float = 0.6
    prioritized_replay_beta: float = 0.4
    prioritized_replay_eps: float = 1e-6
    learning_starts: int = 1000
    target_network_update_freq: int = 500
    n_step: int = 1
    training_intensity: float | None = None
    timesteps_per_iteration: int = 1000
    worker_side_prioritization: bool = False
    checkpoint_replay_buffer: bool = False

    checks: ClassVar[dict[str, tuple]] = {
        "buffer_size": int_ge(1), "learning_starts": int_ge(0),
        "prioritized_replay_alpha": number(0), "prioritized_replay_beta": number(0),
        "prioritized_replay_eps": number(0), "target_network_update_freq": int_ge(0),
        "n_step": int_ge(1), "training_intensity": or_none(number(0, open_lo=True)),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.learning_starts > self.buffer_size:
            raise ConfigError(f"{type(self).__name__}.learning_starts={self.learning_starts}: "
                              f"must be <= buffer_size ({self.buffer_size}); replay could "
                              "never start")


@dataclass
class DQNConfig(ReplayConfig):
    """DQN hyperparameters, RLlib 1.x names and the defaults RLlib 1.x gave the same
    settings (buffer, replay, exploration, ``lr``, ``n_step``...), except the network sizes:
    ``hiddens=(64,)`` (RLlib ``[256]``) and the torso ``fcnet_hiddens=(64, 64)``
    (RLlib ``(256, 256)``). The replay settings are :class:`ReplayConfig`'s.

    ``model`` is the Q torso (ReLU MLP over ``fcnet_hiddens``, the CNN for images;
    ``use_lstm`` and custom models are refused), ``hiddens`` the head layers; ``exploration_config``
    holds ``initial_epsilon``, ``final_epsilon``, ``epsilon_timesteps``.

    >>> DQNConfig(env="CartPole-v1", buffer_size=100, learning_starts=500)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: DQNConfig.learning_starts=500: must be <= buffer_size (100); replay could never start
    """

    num_workers: int = 0
    rollout_fragment_length: int = 4
    train_batch_size: int = 32
    lr: float = 5e-4
    hiddens: tuple = (64,)
    double_q: bool = True
    dueling: bool = True
    grad_clip: float | None = 40.0
    exploration_config: dict = field(default_factory=lambda: dict(DEFAULT_EXPLORATION))

    checks: ClassVar[dict[str, tuple]] = {
        "grad_clip": or_none(number(0, open_lo=True)),
        "exploration_config": or_none(str_dict()),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        hiddens = self.hiddens
        if not isinstance(hiddens, (list, tuple)) or not all(
                isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in hiddens):
            raise ConfigError(f"{name}.hiddens={hiddens!r}: give the head layer sizes, e.g. "
                              "(64,) (or () for none)")
        self.hiddens = tuple(hiddens)
        if self.model.use_lstm or self.model.custom_model is not None:
            field_ = "use_lstm=True" if self.model.use_lstm else "custom_model"
            raise ConfigError(f"{name}.model.{field_}: not supported; DQN and Ape-X learn from "
                              "replayed single transitions with their own Q network: use a "
                              "feed-forward model (model.fcnet_hiddens, or model.conv_filters "
                              "for images), or a recurrent algorithm (PPO, IMPALA, APPO, A2C, "
                              "A3C, PG)")
        # read_numbers: epsilon_timesteps: 1e5 in YAML is a string
        explore = {**DEFAULT_EXPLORATION, **read_numbers(self.exploration_config or {})}
        unknown = sorted(set(explore) - set(DEFAULT_EXPLORATION) - {"type"})
        if unknown:
            raise ConfigError(f"{name}.exploration_config has unknown keys {unknown}; use "
                              f"{sorted(DEFAULT_EXPLORATION)}")
        def number(v: Any) -> bool:
            return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)

        if not (all(number(explore[k]) for k in DEFAULT_EXPLORATION)
                and 0 <= explore["initial_epsilon"] <= 1 and 0 <= explore["final_epsilon"] <= 1
                and 0 <= explore["epsilon_timesteps"] <= MAX_MAGNITUDE):
            raise ConfigError(f"{name}.exploration_config={self.exploration_config!r}: "
                              "epsilons must be numbers in [0, 1] and epsilon_timesteps a "
                              f"number in [0, {MAX_MAGNITUDE:g}]")
        self.exploration_config = {k: explore[k] for k in DEFAULT_EXPLORATION}


def round_robin_weights(config: ReplayConfig) -> list[float]:
    """``[store, train]`` weights for ``training_intensity`` (see the module docstring).

    >>> round_robin_weights(DQNConfig(env="CartPole-v1", training_intensity=16))
    [1, 2.0]
    >>> round_robin_weights(DQNConfig(env="CartPole-v1", training_intensity=2))
    [4.0, 1]
    """
    if not config.training_intensity:
        return [1, 1]
    fragment = (config.rollout_fragment_length * config.num_envs_per_worker
                * max(config.num_workers, 1))
    natural = config.train_batch_size / fragment
    ratio = config.training_intensity / natural
    return [1, ratio] if ratio >= 1 else [1 / ratio, 1]


def make_buffer(config: ReplayConfig, capacity: int | None = None, seed: int | None = None):
    """The replay buffer a replay config asks for: with ``multiagent`` policies, a dict of
    one buffer per trained policy id."""
    policies = config.multiagent.get("policies")
    if policies and capacity is None:
        ids = config.multiagent.get("policies_to_train") or list(policies)
        return {pid: make_buffer(config, config.buffer_size, seed) for pid in ids}
    capacity = capacity or config.buffer_size
    seed = config.seed if seed is None else seed
    if config.prioritized_replay:
        return PrioritizedReplayBuffer(capacity, alpha=config.prioritized_replay_alpha,
                                       beta=config.prioritized_replay_beta,
                                       eps=config.prioritized_replay_eps, seed=seed)
    return ReplayBuffer(capacity, seed=seed)


def replay_spaces(workers, config: ReplayConfig) -> list:
    """The observation space of each replay buffer a DQN config makes (one per trained
    policy with ``multiagent`` policies), from the local worker's policies."""
    policies = workers.local_worker().policy_map
    if config.multiagent.get("policies"):
        ids = config.multiagent.get("policies_to_train") or list(policies)
        return [policies[pid].observation_space for pid in ids if pid in policies]
    return [p.observation_space for p in policies.values()]


def replay_run_length(config: ReplayConfig) -> int | None:
    """How many rows stored in a row continue each other: a rollout fragment where
    several envs take turns, else None (one env: whole episodes)."""
    envs = max(1, config.num_workers) * config.num_envs_per_worker
    return config.rollout_fragment_length if envs > 1 else None


def check_replay_fits(workers, config: ReplayConfig) -> int:
    """The bytes the replay buffers of ``config`` need (:func:`check_replay_memory`:
    one buffer per trained policy, rows arriving in :func:`replay_run_length` runs,
    one frame a row where the env gives frame stacks); a ConfigError naming
    ``buffer_size`` when they exceed the memory available."""
    return check_replay_memory(f"{type(config).__name__}.buffer_size", config.buffer_size,
                               replay_spaces(workers, config),
                               run_length=replay_run_length(config),
                               frame_stacks=stacks_frames(config.env, config.preprocessor_pref))


def replay_train_op(workers, config: ReplayConfig, buffer, *, name: str,
                    target_by_steps_trained: bool = False) -> LocalStream:
    """The learning branch of a replay plan, its nodes named ``<name>/...``: replay a
    ``train_batch_size`` batch from ``buffer`` -> train on it -> send its priorities
    back (with ``prioritized_replay``) -> update the target networks
    (``target_network_update_freq`` counted in steps sampled, or in steps trained
    with ``target_by_steps_trained``)."""
    replay_op = (Replay(local_buffer=buffer, batch_size=config.train_batch_size,
                        name=f"{name}/replay")
                 .for_each(TrainOneStep(workers), name=f"{name}/train"))
    if config.prioritized_replay:
        replay_op = replay_op.for_each(
            UpdateReplayPriorities(workers, local_buffer=buffer,
                                   eps=config.prioritized_replay_eps),
            name=f"{name}/update_priorities")
    return replay_op.for_each(
        UpdateTargetNetwork(workers, config.target_network_update_freq,
                            by_steps_trained=target_by_steps_trained),
        name=f"{name}/update_target")


def replay_plan(workers, config: ReplayConfig, local_buffer=None, *, name: str,
                target_by_steps_trained: bool = False) -> LocalStream:
    """The plan of the module docstring, its nodes named ``<name>/...``: store
    rollouts (once ``learning_starts`` rows are in, replay may start) and, in turn by
    ``training_intensity``, replay a batch -> train on it -> send its priorities back
    (with ``prioritized_replay``) -> update the target networks
    (``target_network_update_freq`` counted in steps sampled, or in steps trained
    with ``target_by_steps_trained``). ``local_buffer`` defaults to
    :func:`make_buffer` of ``config``."""
    buffer = local_buffer if local_buffer is not None else make_buffer(config)
    store = StoreToReplayBuffer(local_buffer=buffer)
    store_op = (ParallelRollouts(workers, mode="bulk_sync")
                .for_each(store, name=f"{name}/store")
                .filter(LearningStarts(store, config.learning_starts),
                        name=f"{name}/learning_starts"))
    replay_op = replay_train_op(workers, config, buffer, name=name,
                                target_by_steps_trained=target_by_steps_trained)
    train_op = Concurrently([store_op, replay_op], mode="round_robin", output_indexes=[1],
                            round_robin_weights=round_robin_weights(config),
                            name=f"{name}/concurrently")
    return StandardMetricsReporting(
        train_op, workers, min_time_s_per_reporting=config.min_time_s_per_reporting,
        timesteps_per_iteration=config.timesteps_per_iteration)


class DQN(Algorithm):
    """Deep Q-learning; see the module docstring. ``algo.local_replay_buffer`` is the
    buffer the plan stores into."""

    config_class = DQNConfig
    policy_class = DQNPolicy
    name = "dqn"

    def __init__(self, config: DQNConfig | None = None, **fields: Any):
        self.local_replay_buffer = None

        def plan(workers, config):
            check_replay_fits(workers, config)
            self.local_replay_buffer = make_buffer(config)
            return type(self).execution_plan(workers, config,
                                             local_buffer=self.local_replay_buffer)

        self.execution_plan = plan  # the built plan's buffer stays reachable for checkpoints
        super().__init__(config, **fields)

    @classmethod
    def policy_config(cls, config: DQNConfig) -> dict[str, Any]:
        return {"model": config.model, "hiddens": config.hiddens, "lr": config.lr,
                "gamma": config.gamma, "n_step": config.n_step, "double_q": config.double_q,
                "dueling": config.dueling, "grad_clip": config.grad_clip,
                "exploration_config": config.exploration_config,
                "worker_side_prioritization": config.worker_side_prioritization,
                "prioritized_replay_eps": config.prioritized_replay_eps}

    @staticmethod
    def execution_plan(workers, config: DQNConfig, *, local_buffer=None) -> LocalStream:
        return replay_plan(workers, config, local_buffer, name="dqn")

    # -- checkpoints ---------------------------------------------------------------
    def extra_state(self) -> dict:
        """Every worker's exploration state and, with ``checkpoint_replay_buffer``,
        the replay buffer."""
        state: dict[str, Any] = {"exploration": self.workers.foreach_worker(
            indexed_exploration_states)}
        buf = self.local_replay_buffer
        if self.config.checkpoint_replay_buffer and buf is not None:
            state["replay_buffer"] = ({pid: b.get_state() for pid, b in buf.items()}
                                      if isinstance(buf, dict) else buf.get_state())
        return state

    def restore_extra_state(self, state: dict) -> None:
        restore_exploration(self.workers, state.get("exploration"))
        if "replay_buffer" in state and self.local_replay_buffer is not None:
            saved, buf = state["replay_buffer"], self.local_replay_buffer
            if isinstance(buf, dict):
                for pid, b in buf.items():
                    b.set_state(saved[pid])
            else:
                buf.set_state(saved)


def exploration_states(worker) -> dict:
    """``{policy_id: exploration state}`` of ``worker``'s policies that explore."""
    return {pid: p.exploration_state() for pid, p in worker.policy_map.items()
            if hasattr(p, "exploration_state")}


def indexed_exploration_states(worker) -> list:
    """``[worker_index, exploration_states(worker)]``: what a checkpoint keeps per
    worker, keyed by index (a restored set's workers may be in another order, and
    a worker that did not answer is missing, so positions say nothing)."""
    return [worker.worker_index, exploration_states(worker)]


def restore_exploration(workers, states: list | None) -> None:
    """Give each worker the exploration state saved under its ``worker_index``
    (``states``: :func:`indexed_exploration_states` of the saved workers). A worker
    with no saved state keeps its own; remote calls are bounded by the set's timeout."""
    if not states:
        return
    by_index = {int(idx): s for idx, s in states if s}
    local = workers.local_worker()
    if by_index.get(local.worker_index):
        _set_exploration(local, by_index[local.worker_index])
    if any(idx in by_index for idx in workers.worker_indices()):
        workers.foreach_remote_worker(functools.partial(_set_own_exploration, by_index))


def _set_exploration(worker, states: dict) -> None:
    for pid, s in states.items():
        worker.get_policy(pid).set_exploration_state(s)


def _set_own_exploration(by_index: dict, worker) -> None:
    states = by_index.get(worker.worker_index)
    if states:
        _set_exploration(worker, states)


__all__ = ["DQN", "DQNConfig", "ReplayConfig", "replay_plan", "replay_train_op", "round_robin_weights",
           "make_buffer", "exploration_states",
           "indexed_exploration_states", "restore_exploration", "replay_run_length",
           "check_replay_fits"]
