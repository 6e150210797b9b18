"""IMPALA (Espeholt et al. 2018) as a plan: actors sample, one learner thread trains.

The plan reads like the paper. Remote workers (the actors) sample with the
weights they last received; their fragments are gathered as they complete
(``max_sample_requests_in_flight_per_worker`` requests in flight each), or, with
``num_aggregation_workers``, through that many aggregator actors beside the driver
that concatenate and replay per group; train batches of ``train_batch_size`` steps
(with ``replay_proportion`` replayed ones mixed in) go into the learner thread's
queue. The learner trains with V-trace off-policy corrections; each result comes
back through a second queue, and the workers that produced the batch get the
learner's weights (refreshed every ``broadcast_interval`` updates). Both halves run
concurrently: ``Concurrently([enqueue, dequeue], mode="async", output_indexes=[1])``.

>>> algo = IMPALA(IMPALAConfig(env="CartPole-v1", num_workers=2, train_batch_size=100,
...                            rollout_fragment_length=50, seed=0))
>>> r = algo.train()
>>> r["info"]["num_steps_trained"] >= 100, "learner_thread" in algo.plan.to_dot()
(True, True)
>>> algo.stop()
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any, ClassVar

from flowrl.algorithms.base import Algorithm, AlgorithmConfig
from flowrl.algorithms.validators import boolean, int_ge, number, or_none
from flowrl.batch import concat_samples
from flowrl.errors import ConfigError
from flowrl.graph.stream import Concurrently, LocalStream
from flowrl.metrics import (AGENT_STEPS_SAMPLED_COUNTER, AGENT_STEPS_TRAINED_COUNTER,
                            LEARN_ON_BATCH_TIMER, LEARNER_INFO, STEPS_SAMPLED_COUNTER,
                            STEPS_TRAINED_COUNTER, WORKER_UPDATE_TIMER, get_metrics)
from flowrl.ops import (Dequeue, Enqueue, LearnerThread, MixInReplay, ParallelRollouts,
                        StandardMetricsReporting, rollout_shards)
from flowrl.ops.gradient_ops import send_weights
from flowrl.ops.learner_thread import LEARNER_QUEUE_TIMEOUT_S
from flowrl.policies import IMPALAPolicy


@dataclass
class IMPALAConfig(AlgorithmConfig):
    """IMPALA hyperparameters: RLlib 1.x names and defaults, except ``num_gpus`` (0;
    RLlib 1), ``min_time_s_per_reporting`` (0: a result per learner step; RLlib
    10 s), ``learner_queue_size`` (4, bounding the policy lag; RLlib 16) and the model
    (``fcnet_hiddens=(64, 64)``; RLlib ``(256, 256)``).

    Sampling: ``rollout_fragment_length``, ``num_workers`` (>= 1),
    ``num_envs_per_worker``, ``max_sample_requests_in_flight_per_worker``,
    ``num_aggregation_workers`` (0: gather on the driver; at most ``num_workers``).
    Replay: ``replay_proportion`` replayed batches per fresh one from
    ``replay_buffer_num_slots`` slots. Learner: ``train_batch_size``,
    ``num_sgd_iter`` passes per batch, ``minibatch_buffer_size``,
    ``learner_queue_size``, ``learner_queue_timeout`` (s), ``num_gpus`` and
    ``num_data_loader_buffers`` (towers and parallel loaders; CPU fake towers
    without a GPU), ``broadcast_interval``. Loss: ``vtrace``,
    ``vtrace_clip_rho_threshold``, ``vtrace_clip_pg_rho_threshold``, ``lr``,
    ``vf_loss_coeff``, ``entropy_coeff``, ``grad_clip``. ``max_policy_lag`` (None:
    off): the learner drops rows acted by weights more than this many learner updates
    old (replayed rows included), see ``result["info"]["policy_lag"]``.

    >>> IMPALAConfig(env="CartPole-v1", num_data_loader_buffers=2, minibatch_buffer_size=4)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: IMPALAConfig.minibatch_buffer_size=4: must be <= num_data_loader_buffers (2) with multi-tower loading (num_gpus > 0 or num_data_loader_buffers > 1); lower minibatch_buffer_size or raise num_data_loader_buffers
    """

    num_workers: int = 2
    rollout_fragment_length: int = 50
    train_batch_size: int = 500
    lr: float = 5e-4
    num_data_loader_buffers: int = 1
    minibatch_buffer_size: int = 1
    num_sgd_iter: int = 1
    # 4, not RLlib's 16: when the learner is the bottleneck a batch waits behind the whole
    # queue; 4 halved the lag (187 -> 92 updates) at equal env steps/s in
    # benchmarks/policy_lag.py, and bounded APPO's on Pong (docs/benchmarks.md).
    learner_queue_size: int = 4
    learner_queue_timeout: float = LEARNER_QUEUE_TIMEOUT_S
    max_sample_requests_in_flight_per_worker: int = 2
    broadcast_interval: int = 1
    num_aggregation_workers: int = 0
    replay_proportion: float = 0.0
    replay_buffer_num_slots: int = 0
    vtrace: bool = True
    vtrace_clip_rho_threshold: float | None = 1.0
    vtrace_clip_pg_rho_threshold: float | None = 1.0
    grad_clip: float | None = 40.0
    vf_loss_coeff: float = 0.5
    entropy_coeff: float = 0.01

    has_learner_queue: ClassVar[bool] = True  # takes max_policy_lag
    checks: ClassVar[dict[str, tuple]] = {
        "num_data_loader_buffers": int_ge(1), "minibatch_buffer_size": int_ge(1),
        "num_sgd_iter": int_ge(1), "learner_queue_size": int_ge(1),
        "learner_queue_timeout": number(0, open_lo=True),
        "max_sample_requests_in_flight_per_worker": int_ge(1),
        "broadcast_interval": int_ge(1), "num_aggregation_workers": int_ge(0),
        "replay_proportion": number(0), "replay_buffer_num_slots": int_ge(0),
        "vtrace": boolean(), "vtrace_clip_rho_threshold": or_none(number(0, open_lo=True)),
        "vtrace_clip_pg_rho_threshold": or_none(number(0, open_lo=True)),
        "grad_clip": or_none(number(0, open_lo=True)), "vf_loss_coeff": number(0),
        "entropy_coeff": number(0),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        if self.num_workers < 1:
            raise ConfigError(f"{name}.num_workers={self.num_workers}: the actors sample on "
                              "remote workers; set num_workers >= 1")
        if self.multi_tower and self.minibatch_buffer_size > self.num_data_loader_buffers:
            raise ConfigError(
                f"{name}.minibatch_buffer_size={self.minibatch_buffer_size}: must be <= "
                f"num_data_loader_buffers ({self.num_data_loader_buffers}) with multi-tower "
                "loading (num_gpus > 0 or num_data_loader_buffers > 1); lower "
                "minibatch_buffer_size or raise num_data_loader_buffers")
        if self.num_aggregation_workers > self.num_workers:
            raise ConfigError(
                f"{name}.num_aggregation_workers={self.num_aggregation_workers}: must be <= "
                f"num_workers ({self.num_workers}); each aggregator serves at least one worker")
        if self.replay_proportion > 0 and self.replay_buffer_num_slots == 0:
            raise ConfigError(
                f"{name}.replay_proportion={self.replay_proportion}: needs "
                "replay_buffer_num_slots > 0 to replay from; set both or neither")

    @property
    def multi_tower(self) -> bool:
        """Whether the learner loads batches onto towers (``num_gpus > 0`` or
        ``num_data_loader_buffers > 1``)."""
        return self.num_gpus > 0 or self.num_data_loader_buffers > 1


# -- the plan's operators ------------------------------------------------------------

class ConcatWithSources:
    """``combine``: ``(source_actor, batch)`` pairs -> ``(sources, train batch)`` once
    ``min_batch_size`` env steps are buffered (``sources``: the distinct workers
    that sampled it, in arrival order). Touches no metrics."""

    def __init__(self, min_batch_size: int):
        self.min_batch_size = min_batch_size
        self.sources: list[Any] = []
        self.batches: list[Any] = []
        self.count = 0

    def __call__(self, item: tuple[Any, Any]) -> list[tuple[tuple, Any]]:
        actor, batch = item
        if not any(actor is s for s in self.sources):
            self.sources.append(actor)
        self.batches.append(batch)
        self.count += batch.env_steps()
        if self.count < self.min_batch_size:
            return []
        out = self.batches[0] if len(self.batches) == 1 else concat_samples(self.batches)
        sources = tuple(self.sources)
        self.sources, self.batches, self.count = [], [], 0
        return [(sources, out)]


class MixInReplayWithSources:
    """``combine``: ``(sources, batch)`` -> itself plus replayed ``((), batch)`` pairs
    (:class:`~flowrl.ops.MixInReplay`); replays have no producing worker to answer."""

    def __init__(self, num_slots: int, replay_proportion: float, seed: int | None = None):
        self.mix = MixInReplay(num_slots, replay_proportion, seed=seed)

    def __call__(self, item: tuple[tuple, Any]) -> list[tuple[tuple, Any]]:
        sources, batch = item
        out = self.mix(batch)
        return [(sources, out[0])] + [((), b) for b in out[1:]]


class AggregatorPipeline:
    """What each aggregator runs over its group: concatenate to train batches and mix
    in replay (its own buffer), keeping the producing workers with each batch."""

    def __init__(self, train_batch_size: int, num_slots: int, replay_proportion: float,
                 seed: int | None):
        self.train_batch_size, self.num_slots = train_batch_size, num_slots
        self.replay_proportion, self.seed = replay_proportion, seed

    def __call__(self, group: LocalStream) -> LocalStream:
        return (group.zip_with_source_actor(name="impala/aggregator/zip_source")
                .combine(ConcatWithSources(self.train_batch_size),
                         name="impala/aggregator/concat_batches")
                .combine(MixInReplayWithSources(self.num_slots, self.replay_proportion,
                                                self.seed),
                         name="impala/aggregator/mixin_replay"))


class CountAggregatedSampled:
    """Driver-side after tree aggregation: count the fresh (not replayed) steps."""

    def __call__(self, item: tuple[tuple, Any]) -> tuple[tuple, Any]:
        sources, batch = item
        if sources:
            metrics = get_metrics()
            metrics.counters[STEPS_SAMPLED_COUNTER] += batch.env_steps()
            metrics.counters[AGENT_STEPS_SAMPLED_COUNTER] += batch.agent_steps()
        return item


class StartLearner:
    """Start the learner thread with the first item (building a plan starts nothing),
    and fail the run at once if it has died since."""

    def __init__(self, learner: LearnerThread):
        self.learner = learner

    def __call__(self, item: Any) -> Any:
        learner = self.learner
        if learner.ident is None and not learner.stopped:
            learner.start()
        learner.check()
        return item


class RecordLearnerResult:
    """Driver-side after Dequeue: trained counters, learner info and timing.

    Metrics: ``STEPS_TRAINED_COUNTER`` (and agent steps) grow by each result's
    count; ``info[LEARNER_INFO]`` is its stats; ``LEARN_ON_BATCH_TIMER`` gets the
    learner thread's training time since the previous result (units: steps), so
    results carry ``learn_time_ms``/``learn_throughput``. The answer to a batch
    whose rows were all too stale (``max_policy_lag``) trained nothing and records
    nothing.
    """

    def __init__(self, learner: LearnerThread):
        self.learner = learner
        self._busy = 0.0

    def __call__(self, item: tuple) -> tuple:
        count, info = item[0], item[1]
        if not info:
            return item
        metrics = get_metrics()
        metrics.counters[STEPS_TRAINED_COUNTER] += count
        metrics.counters[AGENT_STEPS_TRAINED_COUNTER] += count
        metrics.info[LEARNER_INFO] = info
        busy = self.learner.busy_s
        timer = metrics.timers[LEARN_ON_BATCH_TIMER]
        timer.push(busy - self._busy)
        timer.push_units_processed(count)
        self._busy = busy
        return item


class BroadcastUpdateLearnerWeights:
    """Driver-side after Dequeue: the producing workers of each trained batch get the
    learner's weights and their policy versions, a snapshot refreshed every
    ``broadcast_interval`` updates, and at once after the learner's weights were set
    from outside (a restore: :attr:`~flowrl.ops.LearnerThread.weights_epoch`).

    Metrics: ``WORKER_UPDATE_TIMER``; counters ``num_weight_broadcasts`` (sends) and
    ``num_weight_syncs`` (snapshots taken)."""

    def __init__(self, learner: LearnerThread, workers, broadcast_interval: int):
        self.learner, self.workers = learner, workers
        self.broadcast_interval = broadcast_interval
        self.since = 0
        self.weights: Any = None
        self.versions: dict[str, int] | None = None
        self.epoch = learner.weights_epoch

    def __call__(self, item: tuple) -> tuple:
        sources = item[2] if len(item) > 2 else ()
        metrics = get_metrics()
        learner = self.learner
        self.since += 1
        with metrics.timers[WORKER_UPDATE_TIMER]:
            if (self.weights is None or self.epoch != learner.weights_epoch
                    or (self.since >= self.broadcast_interval and learner.weights_updated)):
                learner.weights_updated = False  # before the read: a newer update sets it
                self.epoch = learner.weights_epoch
                # never waits for an update
                self.weights, self.versions = learner.latest_snapshot()
                self.since = 0
                metrics.counters["num_weight_syncs"] += 1
            if sources:
                send_weights(self.weights, sources, self.versions)
                metrics.counters["num_weight_broadcasts"] += len(sources)
        return item


class ReportLearnerDiagnostics:
    """After the reporting op: each result gets the learner thread's figures since the
    previous result (:meth:`~flowrl.ops.LearnerThread.diagnostics`) in
    ``result["info"]``: ``policy_lag``, ``learner_queue``, ``learner_busy_frac``.
    Dropped rows add up in the counter ``num_policy_lag_dropped``; an iteration that
    dropped more than half of its rows warns, naming ``max_policy_lag``."""

    def __init__(self, learner: LearnerThread, where: str):
        self.learner, self.where = learner, where
        self.last: dict[str, Any] = {}

    def node_stats(self) -> dict[str, str]:
        """The last result's figures, for ``Run.stats()`` and the plan's DOT."""
        figures, out = self.last, {}
        lag = figures.get("policy_lag")
        if lag is not None:
            out["policy lag"] = (f"mean {lag['mean']:.1f}, p95 {lag['p95']:.0f}, max "
                                 f"{lag['max']:.0f} updates; dropped {lag['dropped']}")
        queue = figures.get("learner_queue")
        if queue is not None:
            out["learner queue"] = f"mean {queue['size_mean']:.1f}, max {queue['size_max']}"
        if "learner_busy_frac" in figures:
            out["learner busy"] = f"{100 * figures['learner_busy_frac']:.0f}%"
        return out

    def __call__(self, result: dict) -> dict:
        figures = self.last = self.learner.diagnostics()
        lag = figures.get("policy_lag")
        if lag is not None and lag["dropped"]:
            counters = get_metrics().counters
            counters["num_policy_lag_dropped"] += lag["dropped"]
            result["info"]["num_policy_lag_dropped"] = counters["num_policy_lag_dropped"]
            taken = lag["taken"]
            if lag["dropped"] * 2 > taken:
                logging.getLogger("flowrl").warning(
                    "%s: the learner dropped %d of the %d rows it took this iteration as "
                    "staler than max_policy_lag=%s; raise max_policy_lag, or lower "
                    "learner_queue_size or max_sample_requests_in_flight_per_worker so that "
                    "samples wait less", self.where, lag["dropped"], taken,
                    self.learner.max_policy_lag)
        result["info"].update(figures)
        return result


def make_learner_thread(workers, config: IMPALAConfig, name: str) -> LearnerThread:
    """The learner thread an IMPALA-family config asks for (not started)."""
    return LearnerThread(
        workers.local_worker(), minibatch_buffer_size=config.minibatch_buffer_size,
        num_sgd_iter=config.num_sgd_iter, learner_queue_size=config.learner_queue_size,
        learner_queue_timeout=config.learner_queue_timeout, num_gpus=config.num_gpus,
        num_data_loader_buffers=config.num_data_loader_buffers, seed=config.seed,
        max_policy_lag=config.max_policy_lag, name=f"{name}/learner_thread")


def gather_experiences(workers, config: IMPALAConfig, name: str) -> LocalStream:
    """``(sources, train batch)`` pairs: directly, or through tree aggregation."""
    if config.num_aggregation_workers > 0:
        pipeline = AggregatorPipeline(config.train_batch_size, config.replay_buffer_num_slots,
                                      config.replay_proportion, config.seed)
        return (rollout_shards(workers, name=f"{name}/rollouts")
                .aggregate(config.num_aggregation_workers, pipeline, name=f"{name}/aggregate")
                .gather_async(num_async=1, name=f"{name}/aggregate.gather_async")
                .for_each(CountAggregatedSampled(), name=f"{name}/count_sampled"))
    return (ParallelRollouts(workers, mode="async",
                             num_async=config.max_sample_requests_in_flight_per_worker,
                             name=f"{name}/rollouts")
            .zip_with_source_actor(name=f"{name}/zip_source")
            .combine(ConcatWithSources(config.train_batch_size), name=f"{name}/concat_batches")
            .combine(MixInReplayWithSources(config.replay_buffer_num_slots,
                                            config.replay_proportion, config.seed),
                     name=f"{name}/mixin_replay"))


def async_learner_plan(workers, config: IMPALAConfig, learner: LearnerThread,
                       name: str, after_train=None) -> LocalStream:
    """The IMPALA-family plan around ``learner`` (see the module docstring)."""
    label = (f"learner thread {learner.label!r} (learner_queue_timeout="
             f"{config.learner_queue_timeout:g})")
    enqueue_op = (gather_experiences(workers, config, name)
                  .for_each(StartLearner(learner), name=f"{name}/start_learner")
                  .for_each(Enqueue(learner.inqueue, check=learner.check, label=label),
                            name=f"{name}/learner_thread.inqueue"))
    dequeue_op = (Dequeue(learner.outqueue, check=learner.check, label=label,
                          name=f"{name}/learner_thread.outqueue")
                  .for_each(RecordLearnerResult(learner), name=f"{name}/record_trained"))
    if after_train is not None:
        dequeue_op = dequeue_op.for_each(after_train, name=f"{name}/after_train")
    dequeue_op = dequeue_op.for_each(
        BroadcastUpdateLearnerWeights(learner, workers, config.broadcast_interval),
        name=f"{name}/broadcast_weights")
    merged = Concurrently([enqueue_op, dequeue_op], mode="async", output_indexes=[1])
    return StandardMetricsReporting(
        merged, workers, min_time_s_per_reporting=config.min_time_s_per_reporting,
        timesteps_per_iteration=config.timesteps_per_iteration,
        metrics_wait_s=0.0).for_each(ReportLearnerDiagnostics(learner, name),
                                     name=f"{name}/learner_diagnostics")


class IMPALA(Algorithm):
    """Importance-weighted actor-learner architecture; see the module docstring.

    ``algo.learner_thread`` is the :class:`~flowrl.ops.LearnerThread`; ``stop()``
    ends it with the run and the workers.
    """

    config_class = IMPALAConfig
    policy_class = IMPALAPolicy
    name = "impala"
    inference_workers = 1  # the actors sample on remote workers only

    @classmethod
    def policy_config(cls, config: IMPALAConfig) -> dict[str, Any]:
        return {**super().policy_config(config), "vtrace": config.vtrace,
                "vtrace_clip_rho_threshold": config.vtrace_clip_rho_threshold,
                "vtrace_clip_pg_rho_threshold": config.vtrace_clip_pg_rho_threshold,
                "vf_loss_coeff": config.vf_loss_coeff, "entropy_coeff": config.entropy_coeff,
                "grad_clip": config.grad_clip}

    def execution_plan(self, workers, config: IMPALAConfig) -> LocalStream:
        self.learner_thread = make_learner_thread(workers, config, self.name)
        return async_learner_plan(workers, config, self.learner_thread, self.name)

    def save(self, path: str) -> str:
        """A checkpoint (see :meth:`Algorithm.save`), taken between learner updates."""
        with self.learner_thread.lock:
            return super().save(path)

    def restore_state(self, state: dict[str, Any], where: str | None = None) -> None:
        """Apply a checkpoint read by :meth:`Algorithm.restore` or
        :meth:`Algorithm.from_checkpoint` between learner updates."""
        with self.learner_thread.lock:
            super().restore_state(state, where)
            self.learner_thread.weights_changed()

    @classmethod
    def inference_config(cls, config: IMPALAConfig) -> IMPALAConfig:
        """:meth:`Algorithm.inference_config`, and no aggregation workers."""
        return super().inference_config(config.replace(num_aggregation_workers=0))

    def stop(self) -> None:
        """Stop the run, the learner thread and the workers (idempotent)."""
        learner = getattr(self, "learner_thread", None)
        try:
            super().stop()
        finally:
            if learner is not None:
                learner.stop()


__all__ = ["IMPALA", "IMPALAConfig", "async_learner_plan", "gather_experiences",
           "make_learner_thread"]
