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


def mean_stats(stats: list[dict[str, float]]) -> dict[str, float]:
    """Key-wise mean of a list of stats dicts (keys missing from some rows are skipped).

    >>> mean_stats([{"kl": 1.0, "loss": 2.0}, {"kl": 3.0, "loss": 4.0}])
    {'kl': 2.0, 'loss': 3.0}
    """
    if not stats:
        return {}
    keys = [k for k in stats[0] if all(k in s for s in stats)]
    return {k: float(np.mean([s[k] for s in stats])) for k in keys}


def do_minibatch_sgd(worker, batch: Batch, *, num_sgd_iter: int, sgd_minibatch_size: int,
                     rng: np.random.Generator, policies: Sequence[str] | None = None
                     ) -> dict[str, dict]:
    """``num_sgd_iter`` epochs over shuffled minibatches of ``sgd_minibatch_size`` rows,
    one ``worker.learn_on_batch`` per minibatch; returns per policy the mean stats of
    the last epoch (as RLlib 1.x). The worker's policies should be built to take one
    step per ``learn_on_batch`` (``num_sgd_iter=1``, whole batch)."""
    info: dict[str, dict] = {}
    for pid, rows in policy_batches(worker, batch, policies).items():
        size = min(sgd_minibatch_size, rows.count) if sgd_minibatch_size > 0 else rows.count
        epoch: list[dict] = []
        for _ in range(num_sgd_iter):
            epoch = []
            for mb in rows.minibatches(size, seed=rng, shuffle=size < rows.count):
                epoch.append(worker.learn_on_batch(MultiAgentBatch({pid: mb}, mb.count),
                                                   policies=[pid])[pid])
        info[pid] = mean_stats(epoch)
    return info


def _check_sgd(op: str, num_sgd_iter: Any, sgd_minibatch_size: Any) -> None:
    if isinstance(num_sgd_iter, bool) or not isinstance(num_sgd_iter, int) or num_sgd_iter < 1:
        raise ConfigError(f"{op}(num_sgd_iter={num_sgd_iter!r}): must be an int >= 1")
    if (isinstance(sgd_minibatch_size, bool) or not isinstance(sgd_minibatch_size, int)
            or sgd_minibatch_size < 0):
        raise ConfigError(f"{op}(sgd_minibatch_size={sgd_minibatch_size!r}): must be an int "
                          ">= 0 (0: the whole batch)")


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

    With ``num_sgd_iter > 1`` or ``sgd_minibatch_size > 0`` it runs minibatch SGD
    (:func:`do_minibatch_sgd`; shuffling seeded by ``seed``), else one
    ``learn_on_batch`` on the whole batch with the policy's own settings. It
    trains exactly ``policies`` (default: the local worker's ``policies_to_train``),
    then remote workers get the new weights of ``policies`` (default: all).
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

    def __init__(self, workers, *, num_sgd_iter: int = 1, sgd_minibatch_size: int = 0,
                 policies: Sequence[str] | None = None, seed: int | None = None):
        _check_sgd("TrainOneStep", num_sgd_iter, sgd_minibatch_size)
        self.workers = workers
        self.num_sgd_iter, self.sgd_minibatch_size = num_sgd_iter, sgd_minibatch_size
        self.policies = list(policies) if policies is not None else None
        self.rng = np.random.default_rng(seed)

    def __call__(self, batch: Batch) -> tuple[Batch, dict]:
        metrics = get_metrics()
        worker = self.workers.local_worker()
        timer = metrics.timers[LEARN_ON_BATCH_TIMER]
        with timer:
            if self.num_sgd_iter > 1 or self.sgd_minibatch_size > 0:
                info = do_minibatch_sgd(worker, batch, num_sgd_iter=self.num_sgd_iter,
                                        sgd_minibatch_size=self.sgd_minibatch_size, rng=self.rng,
                                        policies=self.policies)
            else:
                info = worker.learn_on_batch(batch, policies=self.policies)
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


__all__ = ["TrainOneStep", "UpdateKL", "do_minibatch_sgd", "mean_stats", "policy_batches",
           "record_trained"]
