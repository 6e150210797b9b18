"""Training operators: ``TrainOneStep``, ``UpdateKL`` and ``UpdateLR`` (driver-side, on the
local worker).

The learner is the WorkerSet's local worker: its policies are trained in the
driver process, then their weights are broadcast to the remote workers (one
``ray.put`` per broadcast on Ray; see :meth:`~flowrl.workers.WorkerSet.sync_weights`).
Data-parallel training over several devices is :mod:`flowrl.ops.multi_gpu`.

Learner results are per policy, ``{policy_id: stats}``, for single- and
multi-agent workers alike; the latest is also kept in
``metrics.info[LEARNER_INFO]`` (and so in results under ``info/learner``). The
train ops hand them on with each policy's stats also under ``"learner_stats"``
(:func:`with_learner_stats`), where RLlib 1.x's put them, so that ops ported from
RLlib run as written.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError
from flowrl.policies.sgd import check_sgd
from flowrl.metrics import (AGENT_STEPS_TRAINED_COUNTER, LEARN_ON_BATCH_TIMER, LEARNER_INFO,
                            STEPS_SAMPLED_COUNTER, STEPS_TRAINED_COUNTER,
                            STEPS_TRAINED_THIS_ITER_COUNTER, WORKER_UPDATE_TIMER, get_metrics)

Batch = SampleBatch | MultiAgentBatch


def policy_batches(worker, batch: Batch, policies: Sequence[str] | None = None
                   ) -> dict[str, SampleBatch]:
    """``{policy_id: rows}`` of ``batch`` for ``policies`` (default: the ones ``worker``
    trains), non-empty ones only."""
    if isinstance(batch, SampleBatch):
        if len(worker.policy_map) != 1:
            raise ConfigError("a plain SampleBatch is ambiguous for a worker with policies "
                              f"{sorted(worker.policy_map)}; pass a MultiAgentBatch")
        batch = batch.as_multi_agent(next(iter(worker.policy_map)))
    trained = worker.policies_to_train if policies is None else policies
    return {pid: b for pid, b in batch.policy_batches.items()
            if pid in trained and b.count > 0}


def train_policies(worker, batch: Batch, *, num_sgd_iter: int | None = None,
                   sgd_minibatch_size: int | None = None,
                   rng: np.random.Generator | None = None,
                   policies: Sequence[str] | None = None) -> dict[str, dict]:
    """Train ``policies`` (default: ``worker``'s trainable ones) on their rows of
    ``batch``: ``{pid: stats}``.

    Each policy runs the one minibatch-SGD loop
    (:func:`~flowrl.policies.sgd.minibatch_sgd`) through its ``learn_on_batch``;
    ``num_sgd_iter``/``sgd_minibatch_size``/``rng`` override the policy's own
    settings where given. Without overrides this is ``worker.learn_on_batch(batch)``,
    so any worker with that method (a duck-typed one) can be trained.
    """
    if num_sgd_iter is None and sgd_minibatch_size is None:
        if policies is None:
            return worker.learn_on_batch(batch)
        return worker.learn_on_batch(batch, policies=policies)
    stats = {pid: worker.get_policy(pid).learn_on_batch(
                 rows, num_sgd_iter=num_sgd_iter, sgd_minibatch_size=sgd_minibatch_size, rng=rng)
             for pid, rows in policy_batches(worker, batch, policies).items()}
    count_updates = getattr(worker, "count_updates", None)  # a duck-typed worker keeps
    if count_updates is not None:                            # no policy versions
        count_updates(stats)
    return stats


LEARNER_STATS_KEY = "learner_stats"


def with_learner_stats(info: dict[str, Any]) -> dict[str, Any]:
    """``info`` (``{policy_id: stats}``) with each policy's stats also under
    ``"learner_stats"``, where RLlib 1.x's train ops put them: code ported from RLlib
    that reads ``info[pid]["learner_stats"]["kl"]`` (RLlib's own ``UpdateKL`` does) and
    flowrl code that reads ``info[pid]["kl"]`` both work. Stats that already hold
    ``"learner_stats"`` are kept as they are; ``info`` is not changed.

    >>> with_learner_stats({"default_policy": {"kl": 0.5}})
    {'default_policy': {'kl': 0.5, 'learner_stats': {'kl': 0.5}}}
    """
    return {pid: {**stats, LEARNER_STATS_KEY: stats}
            if isinstance(stats, dict) and LEARNER_STATS_KEY not in stats else stats
            for pid, stats in info.items()}


def record_trained(metrics, batch: Batch, info: dict, workers,
                   policies: Sequence[str] | None) -> None:
    """Counters, learner info and the weight broadcast shared by the train operators."""
    metrics.counters[STEPS_TRAINED_COUNTER] += batch.env_steps()
    metrics.counters[STEPS_TRAINED_THIS_ITER_COUNTER] = batch.env_steps()
    metrics.counters[AGENT_STEPS_TRAINED_COUNTER] += batch.agent_steps()
    metrics.info[LEARNER_INFO] = info
    if workers.remote_workers():
        with metrics.timers[WORKER_UPDATE_TIMER]:
            workers.sync_weights(policies)


class TrainOneStep:
    """``for_each(TrainOneStep(workers, ...))``: train the local worker on each batch.

    Each trainable policy runs the one minibatch-SGD loop
    (:func:`~flowrl.policies.sgd.minibatch_sgd`): ``num_sgd_iter`` epochs over
    minibatches of ``sgd_minibatch_size`` rows (0: the whole batch; shuffling seeded
    by ``seed``). Left as None, both come from the policy's own settings. It trains
    exactly ``policies`` (default: the local worker's ``policies_to_train``), then
    remote workers get the new weights of ``policies`` (default: all).
    Returns ``(batch, info)`` with ``info = {policy_id: stats}``, each policy's stats
    also under ``"learner_stats"`` as RLlib 1.x has them (:func:`with_learner_stats`);
    ``info[LEARNER_INFO]``, which results report, holds the stats without it.

    Metrics: ``LEARN_ON_BATCH_TIMER`` ("learn", units: env steps),
    ``STEPS_TRAINED_COUNTER``, ``STEPS_TRAINED_THIS_ITER_COUNTER``,
    ``AGENT_STEPS_TRAINED_COUNTER``, ``info[LEARNER_INFO]``, and
    ``WORKER_UPDATE_TIMER`` around the weight broadcast.

    >>> import flowrl
    >>> from flowrl.ops import ParallelRollouts
    >>> from flowrl.policies import PGPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=32, seed=0),
    ...                num_workers=1, backend="local")
    >>> run = flowrl.Plan(ParallelRollouts(ws).for_each(TrainOneStep(ws))).compile()
    >>> batch, info = next(run)
    >>> sorted(info), run.metrics.counters["num_steps_trained"], run.metrics.timers["learn"].count
    (['default_policy'], 32, 1)
    >>> run.stop(); ws.stop()
    """

    def __init__(self, workers, *, num_sgd_iter: int | None = None,
                 sgd_minibatch_size: int | None = None,
                 policies: Sequence[str] | None = None, seed: int | None = None):
        if num_sgd_iter is not None or sgd_minibatch_size is not None:
            num_sgd_iter = 1 if num_sgd_iter is None else num_sgd_iter
            sgd_minibatch_size = 0 if sgd_minibatch_size is None else sgd_minibatch_size
            check_sgd("TrainOneStep", num_sgd_iter, sgd_minibatch_size)
        self.workers = workers
        self.num_sgd_iter, self.sgd_minibatch_size = num_sgd_iter, sgd_minibatch_size
        self.policies = list(policies) if policies is not None else None
        self.rng = np.random.default_rng(seed)

    def __call__(self, batch: Batch) -> tuple[Batch, dict]:
        metrics = get_metrics()
        worker = self.workers.local_worker()
        timer = metrics.timers[LEARN_ON_BATCH_TIMER]
        with timer:
            info = train_policies(worker, batch, num_sgd_iter=self.num_sgd_iter,
                                  sgd_minibatch_size=self.sgd_minibatch_size, rng=self.rng,
                                  policies=self.policies)
        timer.push_units_processed(batch.env_steps())
        record_trained(metrics, batch, info, self.workers, self.policies)
        return batch, with_learner_stats(info)


class UpdateKL:
    """``for_each(UpdateKL(workers))`` after a train op: adapt PPO's KL coefficient.

    Takes ``(batch, info)`` (or just ``info``) from :class:`TrainOneStep` and calls
    ``policy.update_kl(info[policy_id]["kl"])`` on each trainable policy of the
    local worker that has ``update_kl`` and a ``kl`` stat (also read from
    ``info[policy_id]["learner_stats"]["kl"]``, RLlib 1.x's shape, so a ported train
    op can feed it); returns its input unchanged. The coefficient lives on the
    policy (and so in checkpoints); the remote workers do not need it (it only
    enters the loss). Touches no metrics.

    >>> from flowrl.policies import PPOPolicy
    >>> from flowrl.workers import WorkerSet
    >>> ws = WorkerSet("CartPole-v1", PPOPolicy, num_workers=0, backend="local")
    >>> _ = UpdateKL(ws)((None, {"default_policy": {"kl": 1.0}}))
    >>> round(ws.local_worker().get_policy().kl_coeff, 3)
    0.3
    >>> ws.stop()
    """

    def __init__(self, workers):
        self.workers = workers

    def __call__(self, item: Any) -> Any:
        info = item[1] if isinstance(item, tuple) else item

        def update(policy, pid):
            stats = info.get(pid) or {}
            stats = stats.get(LEARNER_STATS_KEY, stats)
            if "kl" in stats and hasattr(policy, "update_kl"):
                policy.update_kl(stats["kl"])

        self.workers.local_worker().foreach_trainable_policy(update)
        return item


def piecewise_lr(schedule: Sequence[Sequence[float]], timestep: float) -> float:
    """The learning rate of RLlib 1.x's ``lr_schedule`` at ``timestep``.

    ``schedule`` is ``[[t_0, lr_0], [t_1, lr_1], ...]`` with ``t_0 = 0 < t_1 < ...``
    (:class:`~flowrl.algorithms.PPOConfig` checks it); between two points the rate
    is interpolated linearly, after the last one it stays at the last rate.

    >>> piecewise_lr([[0, 3e-4], [1000, 0.0]], 250)
    0.000225
    >>> piecewise_lr([[0, 3e-4], [1000, 0.0]], 5000)
    0.0
    """
    ts, lrs = zip(*schedule)
    return float(np.interp(timestep, ts, lrs))


class UpdateLR:
    """``for_each(UpdateLR(workers, schedule=...))`` after a train op: set the learning
    rate the next training step uses, as RLlib 1.x's ``lr_schedule`` does.

    The rate is :func:`piecewise_lr` of ``schedule`` at the env steps sampled so
    far (``STEPS_SAMPLED_COUNTER``); it is written into every parameter group of
    the optimizer of each trainable policy of the local worker (the learner;
    remote workers only act), and with ``remote_learners=True`` of every remote
    worker too (DD-PPO, whose remote workers train: one call per worker, each
    bounded by ``sample_timeout_s``). In a bulk-synchronous plan the batch sampled from
    timestep ``t`` on is trained with the rate at ``t`` (CleanRL's annealing:
    iteration ``i`` uses ``lr * (1 - (i - 1) / N)`` for ``[[0, lr], [N * batch, 0]]``).
    The policy reports the rate it trained with as ``cur_lr``. Reads counters;
    returns its input unchanged.

    >>> import flowrl
    >>> from flowrl.policies import PPOPolicy
    >>> from flowrl.workers import WorkerSet
    >>> ws = WorkerSet("CartPole-v1", PPOPolicy, num_workers=0, backend="local")
    >>> def sampled(x):
    ...     flowrl.get_metrics().counters["num_steps_sampled"] += 250
    ...     return x
    >>> s = flowrl.from_iterable(lambda: range(2)).for_each(sampled)
    >>> s = s.for_each(UpdateLR(ws, schedule=[[0, 1e-3], [1000, 0.0]]))
    >>> _ = flowrl.Plan(s).compile().take(2)
    >>> ws.local_worker().get_policy().optimizer.param_groups[0]["lr"]
    0.0005
    >>> ws.stop()
    """

    def __init__(self, workers, *, schedule: Sequence[Sequence[float]],
                 remote_learners: bool = False):
        if not schedule:
            raise ConfigError("UpdateLR(schedule=...): give [[timestep, lr], ...] pairs")
        self.workers = workers
        self.schedule = [(float(t), float(lr)) for t, lr in schedule]
        self.remote_learners = remote_learners

    def __call__(self, item: Any) -> Any:
        set_lr = _SetLR(piecewise_lr(self.schedule, get_metrics().counters[STEPS_SAMPLED_COUNTER]))
        set_lr(self.workers.local_worker())
        if self.remote_learners:
            self.workers.foreach_remote_worker(set_lr)
        return item


class _SetLR:
    """``fn(worker)``: set the learning rate of the worker's trainable policies
    (a class, not a closure, so that it pickles to Ray workers)."""

    def __init__(self, lr: float):
        self.lr = lr

    def __call__(self, worker) -> None:
        def update(policy, pid):
            for group in policy.optimizer.param_groups:
                group["lr"] = self.lr

        worker.foreach_trainable_policy(update)


__all__ = ["TrainOneStep", "UpdateKL", "UpdateLR", "piecewise_lr", "train_policies",
           "policy_batches", "record_trained", "with_learner_stats", "LEARNER_STATS_KEY"]
