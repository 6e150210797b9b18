"""Ape-X (Horgan et al. 2018): distributed prioritized replay as a plan.

Many epsilon-greedy rollout workers (worker ``i`` of ``N`` explores with
``0.4 ** (1 + 7 i / (N - 1))``) compute initial priorities for their rows
(worker-side prioritization) and send them, round-robin, to
``num_replay_buffer_shards`` replay actors on the driver's node
(``algo.replay_actors``). The actors' replayed batches feed a learner thread
through a bounded queue; its TD errors flow back as priorities to the actor each
batch came from. A worker gets fresh weights once it has sampled
``max_weight_sync_delay`` steps since its last update (if the learner changed
them). Three branches interleaved by ``Concurrently(mode="round_robin")``:

- store: async rollouts -> weight sync to the producing worker -> store -> gate
  (:class:`~flowrl.ops.LearningStarts`);
- replay: replay actors' shards -> ``zip_with_source_actor`` -> Enqueue to the learner;
- update: Dequeue from the learner -> priorities back
  (:class:`~flowrl.ops.UpdateReplayPriorities`) -> target update -> reporting.

The weights are integers ``[s, k, k]`` from ``training_intensity`` (see
:func:`apex_weights`): each turn stores ``s`` rollout fragments, sends ``k``
replayed batches to the learner and takes ``k`` results back, so the learner
trains while the driver stores and replays, and never falls behind by more than
the batches of one turn (equal replay and result weights keep the learner's
queue bounded by the plan itself, on every backend).

Per-worker cost is kept low for many workers on few cores: workers reserve
``num_cpus_per_worker=0.25`` CPUs, run one torch thread, and sample short fragments.

>>> algo = ApeX(ApeXConfig(env="CartPole-v1", num_workers=2, learning_starts=100,
...                        timesteps_per_iteration=400, seed=0))
>>> r = algo.train()
>>> r["timesteps_total"] >= 400, len(algo.replay_actors)
(True, 2)
>>> algo.stop()
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import Any, ClassVar

from flowrl.algorithms.base import Algorithm
from flowrl.algorithms.dqn import (DQN, DQNConfig, check_replay_fits, indexed_exploration_states,
                                   restore_exploration)
from flowrl.algorithms.validators import int_ge, number
from flowrl.errors import ConfigError
from flowrl.graph.stream import Concurrently, LocalStream
from flowrl.metrics import (LEARNER_INFO, STEPS_TRAINED_COUNTER, WORKER_UPDATE_TIMER,
                            get_metrics)
from flowrl.ops import (Dequeue, Enqueue, LearnerThread, LearningStarts, ParallelRollouts, Replay,
                        StandardMetricsReporting, StoreToReplayBuffer, UpdateReplayPriorities,
                        UpdateTargetNetwork)
from flowrl.ops.learner_thread import LEARNER_QUEUE_TIMEOUT_S
from flowrl.replay import ReplayCalls, create_replay_actors
from flowrl.runtime.calls import calls_for


def apex_epsilon(i: int, n: int) -> float:
    """Exploration epsilon of remote worker ``i`` (0-based) of ``n``: ``0.4 ** (1 + 7 i / (n - 1))``
    (0.4 for a single worker).

    >>> [round(apex_epsilon(i, 3), 4) for i in range(3)]
    [0.4, 0.0162, 0.0007]
    """
    if n <= 1:
        return 0.4
    return 0.4 ** (1 + 7 * i / (n - 1))


@dataclass
class ApexSettings:
    """Ape-X's settings (RLlib 1.x names), added to an off-policy config by
    inheriting from this class first (``class ApeXConfig(ApexSettings, DQNConfig)``).

    ``num_replay_buffer_shards`` replay actors share ``buffer_size`` rows;
    ``learning_starts`` rows per actor before replay; ``max_weight_sync_delay``
    env steps a worker samples between weight updates;
    ``learner_queue_size`` / ``learner_queue_timeout`` bound the learner thread's
    input queue and how long it may starve; ``max_sample_requests_in_flight_per_worker``
    the rollouts asked of each worker at once. Sampling is on remote workers only
    (``num_workers >= 1``); ``single_process`` names the algorithm to use without them.
    """

    single_process: ClassVar[str] = "DQN"

    num_workers: int = 4
    num_envs_per_worker: int = 1
    num_cpus_per_worker: float = 0.25
    rollout_fragment_length: int = 50
    num_replay_buffer_shards: int = 2
    worker_side_prioritization: bool = True
    max_weight_sync_delay: int = 400
    learner_queue_size: int = 16
    learner_queue_timeout: float = LEARNER_QUEUE_TIMEOUT_S
    max_sample_requests_in_flight_per_worker: int = 2

    checks: ClassVar[dict[str, tuple]] = {
        "num_replay_buffer_shards": int_ge(1), "max_weight_sync_delay": int_ge(1),
        "learner_queue_size": int_ge(1), "learner_queue_timeout": number(0, open_lo=True),
        "max_sample_requests_in_flight_per_worker": int_ge(1),
    }

    def __post_init__(self) -> None:
        super().__post_init__()  # the config class after this one in the MRO
        name = type(self).__name__
        if self.num_workers < 1:
            raise ConfigError(f"{name}.num_workers=0: Ape-X samples on remote workers; "
                              f"set num_workers >= 1 (or use {self.single_process})")
        per_shard = self.buffer_size // self.num_replay_buffer_shards
        if self.learning_starts > per_shard:
            raise ConfigError(f"{name}.learning_starts={self.learning_starts}: must be <= "
                              f"buffer_size / num_replay_buffer_shards ({per_shard}), the "
                              "rows each replay actor holds; replay could never start")


@dataclass
class ApeXConfig(ApexSettings, DQNConfig):
    """Ape-X DQN hyperparameters (RLlib 1.x names): :class:`ApexSettings` on top of
    :class:`DQNConfig`. ``training_intensity`` sets how many replayed batches go to
    the learner per stored rollout fragment (see :func:`apex_weights`).

    >>> ApeXConfig(env="CartPole-v1", num_replay_buffer_shards=0)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: ApeXConfig.num_replay_buffer_shards=0: must be an int >= 1
    """

    train_batch_size: int = 256
    buffer_size: int = 100000
    learning_starts: int = 1000
    n_step: int = 3
    lr: float = 1e-3
    target_network_update_freq: int = 10000
    timesteps_per_iteration: int = 5000


def apex_weights(config: ApexSettings) -> list[int]:
    """Integer round-robin weights ``[store, replay, learner results]`` for
    ``training_intensity`` (rows trained per row sampled; None: one train batch per
    rollout fragment). Rounded to integers so that every replayed batch sent in
    a turn is taken back in the same turn.

    >>> apex_weights(ApeXConfig(env="CartPole-v1"))
    [1, 1, 1]
    >>> apex_weights(ApeXConfig(env="CartPole-v1", training_intensity=1.28))
    [4, 1, 1]
    """
    if not config.training_intensity:
        return [1, 1, 1]
    fragment = config.rollout_fragment_length * config.num_envs_per_worker
    ratio = config.training_intensity * fragment / config.train_batch_size
    if ratio >= 1:
        k = max(1, round(ratio))
        return [1, k, k]
    return [max(1, round(1 / ratio)), 1, 1]


class ApeXLearnerThread(LearnerThread):
    """The :class:`~flowrl.ops.LearnerThread` that also returns each replayed batch's
    TD errors, so priorities find their way back.

    ``inqueue`` items are ``(replay_actor, batch)``; ``outqueue`` gets ``(count,
    info, (replay_actor, batch, td_errors))`` with ``td_errors`` (policy id ->
    signed errors after the step) computed under the learner's ``lock``, which
    driver-side code holds to read or change the policies (weight broadcasts,
    target updates). ``weights_version`` counts updates. Called as a plan op
    (before ``Enqueue``), it starts itself with the first item, so building a plan
    starts nothing. Failures (starvation past ``learner_queue_timeout``, an error
    in training) surface through :meth:`check` as FlowErrors naming the thread.
    """

    def __init__(self, local_worker, *, learner_queue_size: int = 16,
                 learner_queue_timeout: float = LEARNER_QUEUE_TIMEOUT_S):
        super().__init__(local_worker, learner_queue_size=learner_queue_size,
                         learner_queue_timeout=learner_queue_timeout, name="apex-learner")
        self.weights_version = 0

    def _train(self, item: Any) -> tuple[int, dict, Any]:
        count, info, actor = super()._train(item)
        worker = self.local_worker
        td = {pid: worker.get_policy(pid).compute_td_error(rows)
              for pid, rows in item.per_policy.items()}
        self.weights_version += 1
        return count, info, (actor, item.batch, td)

    def __call__(self, item: Any) -> Any:
        if self.ident is None and not self.stopped:
            self.start()
        return item


class UpdateWorkerWeights:
    """Store-branch op of Ape-X: items ``(worker, batch)``; once ``worker`` sampled
    ``max_weight_sync_delay`` steps since its last update and the learner changed
    the weights, send it the learner's weights as of its last finished update
    (:meth:`~flowrl.ops.LearnerThread.latest_weights`, which never waits for the
    update in progress; ``ray.put`` once per weights version). Returns the batch.

    Metrics: ``WORKER_UPDATE_TIMER``; counter ``num_weight_broadcasts``.
    """

    def __init__(self, learner: ApeXLearnerThread, workers, max_weight_sync_delay: int):
        self.learner, self.workers = learner, workers
        self.delay = max_weight_sync_delay
        self.steps: dict[int, int] = {}
        self._version = -1
        self._weights: Any = None
        self._versions: tuple = ()  # (the weights' versions,) or () for a worker without

    def __call__(self, item: tuple) -> Any:
        worker, batch = item
        key = id(worker)
        self.steps[key] = self.steps.get(key, 0) + batch.count
        if self.steps[key] >= self.delay:
            metrics = get_metrics()
            with metrics.timers[WORKER_UPDATE_TIMER]:
                if self._version != self.learner.weights_version:
                    self._version = self.learner.weights_version  # before the read, as
                    weights, versions = self.learner.latest_snapshot()  # a newer update
                    self._weights = self.workers.calls.put(weights)      # bumps it
                    self._versions = () if versions is None else (versions,)
                self.workers.calls.call(worker, "set_weights", self._weights, *self._versions)
            self.steps[key] = 0
            metrics.counters["num_weight_broadcasts"] += 1
        return batch


class _RecordLearnerOutput:
    """Update-branch op: count what the learner trained, keep its stats, and pass
    on ``(replay_actor, batch, td_errors, info)``."""

    def __call__(self, item: tuple) -> tuple:
        count, info, (actor, batch, td) = item
        metrics = get_metrics()
        metrics.counters[STEPS_TRAINED_COUNTER] += count
        metrics.info[LEARNER_INFO] = info
        return actor, batch, td, info


class ApeX(DQN):
    """Distributed prioritized replay; see the module docstring. ``algo.replay_actors``
    are the replay actors, ``algo.learner`` the learner thread.

    Subclasses run another off-policy algorithm on the same plan (see
    :class:`~flowrl.algorithms.apex_ddpg.ApexDDPG`): they set the config and policy
    classes, ``policy_config`` and :meth:`set_worker_exploration`; node ids start
    with their ``name``."""

    config_class = ApeXConfig
    name = "apex"
    inference_workers = 1  # sampling happens on remote workers only

    def __init__(self, config: ApeXConfig | None = None, **fields: Any):
        self.replay_actors: list = []
        self.learner: ApeXLearnerThread | None = None

        def plan(workers, config):
            return type(self).execution_plan(workers, config, algo=self)

        self.execution_plan = plan
        self.local_replay_buffer = None
        try:
            Algorithm.__init__(self, config, **fields)
        except BaseException:
            self._stop_replay()
            raise

    @staticmethod
    def set_worker_exploration(policy, amount: float) -> None:
        """Give a remote worker's ``policy`` its exploration ``amount``
        (:func:`apex_epsilon` of its index): DQN's epsilon."""
        policy.set_epsilon(amount)

    @classmethod
    def _explore_per_worker(cls, worker, n: int) -> None:
        if worker.worker_index > 0:
            amount = apex_epsilon(worker.worker_index - 1, n)
            for p in worker.policy_map.values():
                cls.set_worker_exploration(p, amount)

    @classmethod
    def execution_plan(cls, workers, config: ApexSettings, *,
                       algo: "ApeX | None" = None) -> LocalStream:
        """Store, replay and learn as three branches (see the module docstring)."""
        name, n = cls.name, config.num_workers
        workers.foreach_worker(functools.partial(cls._explore_per_worker, n=n))
        shards = config.num_replay_buffer_shards
        check_replay_fits(workers, config)
        actors = create_replay_actors(
            shards, capacity=config.buffer_size // shards, backend=workers.backend,
            prioritized=config.prioritized_replay, alpha=config.prioritized_replay_alpha,
            beta=config.prioritized_replay_beta, eps=config.prioritized_replay_eps,
            learning_starts=config.learning_starts, train_batch_size=config.train_batch_size,
            seed=config.seed, name=f"{name}/replay")
        learner = ApeXLearnerThread(workers.local_worker(),
                                    learner_queue_size=config.learner_queue_size,
                                    learner_queue_timeout=config.learner_queue_timeout)
        if algo is not None:
            algo.replay_actors, algo.learner = actors, learner

        store = StoreToReplayBuffer(actors=actors)
        store_op = (ParallelRollouts(workers, mode="async",
                                     num_async=config.max_sample_requests_in_flight_per_worker,
                                     name=f"{name}/rollouts")
                    .zip_with_source_actor(name=f"{name}/zip_worker")
                    .for_each(UpdateWorkerWeights(learner, workers, config.max_weight_sync_delay),
                              name=f"{name}/update_worker_weights")
                    .for_each(store, name=f"{name}/store")
                    .filter(LearningStarts(store, config.learning_starts),
                            name=f"{name}/learning_starts"))
        replay_op = (Replay(actors=actors, num_async=4, name=f"{name}/replay")
                     .zip_with_source_actor(name=f"{name}/zip_replay_actor")
                     .for_each(learner, name=f"{name}/start_learner")
                     .for_each(Enqueue(learner.inqueue), name=f"{name}/enqueue"))
        update_op = (Dequeue(learner.outqueue, check=learner.check, name=f"{name}/dequeue")
                     .for_each(_RecordLearnerOutput(), name=f"{name}/record_learner")
                     .for_each(UpdateReplayPriorities(actors=actors,
                                                      eps=config.prioritized_replay_eps),
                               name=f"{name}/update_priorities")
                     .for_each(UpdateTargetNetwork(workers, config.target_network_update_freq,
                                                   by_steps_trained=True, lock=learner.lock),
                               name=f"{name}/update_target"))
        merged = Concurrently([store_op, replay_op, update_op], mode="round_robin",
                              output_indexes=[2],
                              round_robin_weights=apex_weights(config),
                              name=f"{name}/concurrently")
        return StandardMetricsReporting(
            merged, workers, min_time_s_per_reporting=config.min_time_s_per_reporting,
            timesteps_per_iteration=config.timesteps_per_iteration,
            metrics_wait_s=0.0)

    # -- checkpoints and stopping ----------------------------------------------------
    def extra_state(self) -> dict:
        """Exploration state of every worker and, with ``checkpoint_replay_buffer``,
        every replay actor's buffer."""
        state: dict[str, Any] = {"exploration": self.workers.foreach_worker(
            indexed_exploration_states)}
        if self.config.checkpoint_replay_buffer and self.replay_actors:
            state["replay_actors"] = ReplayCalls(self.replay_actors).call_all("get_state")
        return state

    def restore_extra_state(self, state: dict) -> None:
        if self.learner is not None:
            self.learner.weights_changed()  # its snapshot predates the restored weights
        restore_exploration(self.workers, state.get("exploration"))
        saved = state.get("replay_actors")
        if saved:
            if len(saved) != len(self.replay_actors):
                raise ConfigError(f"{self.name}.restore: the checkpoint holds {len(saved)} replay "
                                  f"actors, this run has {len(self.replay_actors)}; use the "
                                  "same num_replay_buffer_shards")
            calls = ReplayCalls(self.replay_actors)
            for i, s in enumerate(saved):
                calls.call(i, "set_state", s)

    def _stop_replay(self) -> None:
        if self.learner is not None:
            self.learner.stop()
        actors, self.replay_actors = self.replay_actors, []
        for a in actors:
            calls_for(a).kill(a)

    def stop(self) -> None:
        """Stop the run, the learner thread, the replay actors and the workers."""
        run = getattr(self, "_run", None)
        if run is not None:
            run.stop()
        self._stop_replay()
        self.workers.stop()
        self._stop_evaluation()


__all__ = ["ApeX", "ApeXConfig", "ApexSettings", "ApeXLearnerThread", "UpdateWorkerWeights",
           "apex_epsilon", "apex_weights"]
