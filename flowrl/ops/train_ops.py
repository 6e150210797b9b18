"""Training operators: ``TrainOneStep`` and ``UpdateKL`` (driver-side, on the local worker).

The learner is the WorkerSet's local worker: its policies are trained in the
driver process, then their weights are broadcast to the remote workers (one
``ray.put`` per broadcast on Ray; see :meth:`~flowrl.workers.WorkerSet.sync_weights`).
Data-parallel training over several devices is :mod:`flowrl.ops.multi_gpu`.

Learner results are per policy, ``{policy_id: stats}``, for single- and
multi-agent workers alike; the latest is also kept in
``metrics.info[LEARNER_INFO]``.
"""

from __future__ import annotations

from typing import Any, Sequence

import numpy as np

from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError
from flowrl.policies.sgd import check_sgd
from flowrl.metrics import (AGENT_STEPS_TRAINED_COUNTER, LEARN_ON_BATCH_TIMER, LEARNER_INFO,
                            STEPS_TRAINED_COUNTER, STEPS_TRAINED_THIS_ITER_COUNTER,
                            WORKER_UPDATE_TIMER, get_metrics)

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
    return {pid: worker.get_policy(pid).learn_on_batch(
                rows, num_sgd_iter=num_sgd_iter, sgd_minibatch_size=sgd_minibatch_size, rng=rng)
            for pid, rows in policy_batches(worker, batch, policies).items()}


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
    Returns ``(batch, info)`` with ``info = {policy_id: stats}``.

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
        return batch, info


class UpdateKL:
    """``for_each(UpdateKL(workers))`` after a train op: adapt PPO's KL coefficient.

    Takes ``(batch, info)`` (or just ``info``) from :class:`TrainOneStep` and calls
    ``policy.update_kl(info[policy_id]["kl"])`` on each trainable policy of the
    local worker that has ``update_kl`` and a ``kl`` stat; returns its input
    unchanged. The coefficient lives on the policy (and so in checkpoints); the
    remote workers do not need it (it only enters the loss). Touches no metrics.

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
            stats = info.get(pid)
            if stats and "kl" in stats and hasattr(policy, "update_kl"):
                policy.update_kl(stats["kl"])

        self.workers.local_worker().foreach_trainable_policy(update)
        return item


__all__ = ["TrainOneStep", "UpdateKL", "train_policies", "policy_batches",
           "record_trained"]
