"""Decentralized training: every remote worker trains on its own samples.

``LocalTrainOneStep`` and ``LocalComputeUpdates`` return the per-worker
ParallelStream, as in the seeds: the training runs shard-side, on the worker that
sampled (found with :func:`~flowrl.workers.get_global_worker`), and only small
results travel. ``LocalComputeUpdates`` follows ASP (approximate synchronous
parallel) training: a worker sends only the significant part of its parameter
change (``|delta| > significance_threshold``), the rest keeps accumulating, and
:class:`ForwardUpdates` on the driver adds what arrives to the local worker and
every other remote worker.

State: the shard functions count each worker's training iterations
(``num_iterations_trained`` in the info, keyed by ``worker_index``) and keep one
seeded minibatch RNG per worker; the policies keep their ASP base and pending
deltas (:mod:`flowrl.policies.asp`), which the seeds' plans read through the
policies' ``asp_*`` methods as these operators do.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError
from flowrl.graph.stream import ParallelStream
from flowrl.metrics import (AGENT_STEPS_SAMPLED_COUNTER, LEARNER_INFO, STEPS_SAMPLED_COUNTER,
                            STEPS_TRAINED_COUNTER, WORKER_UPDATE_TIMER, get_metrics)
from flowrl.ops.rollout_ops import rollout_shards
from flowrl.ops.train_ops import train_policies
from flowrl.runtime.global_worker import get_global_worker  # at import: see gradient_ops

Batch = SampleBatch | MultiAgentBatch


class _LocalTrain:
    """Shard-side: train the hosting worker on its own batch."""

    def __init__(self, num_sgd_iter: int, sgd_minibatch_size: int):
        self.num_sgd_iter, self.sgd_minibatch_size = num_sgd_iter, sgd_minibatch_size
        self.iterations: dict[int, int] = {}
        self.rngs: dict[int, np.random.Generator] = {}

    def __call__(self, samples: Batch) -> tuple[dict, int, int]:
        worker = get_global_worker()
        index = worker.worker_index
        if self.num_sgd_iter > 1 or self.sgd_minibatch_size > 0:
            rng = self.rngs.setdefault(index, np.random.default_rng(worker.seed))
            info = train_policies(worker, samples, num_sgd_iter=self.num_sgd_iter,
                                  sgd_minibatch_size=self.sgd_minibatch_size, rng=rng)
        else:
            info = worker.learn_on_batch(samples)
        self.iterations[index] = self.iterations.get(index, 0) + 1
        info = {**info, "num_iterations_trained": self.iterations[index]}
        return info, samples.env_steps(), self.num_sgd_iter


def LocalTrainOneStep(workers, num_sgd_iter: int = 1, sgd_minibatch_size: int = 0,
                      *, name: str = "local_train") -> ParallelStream:
    """Each remote worker trains on the batches it samples; nothing is synced.

    Items (per shard, on the worker) are ``(info, count, num_sgd_iter)``: ``info``
    is ``{policy_id: stats}`` plus ``num_iterations_trained`` (that worker's
    count), ``count`` the batch's env steps. With ``num_sgd_iter > 1`` or
    ``sgd_minibatch_size > 0`` it runs minibatch SGD, else one
    ``learn_on_batch``. Touches no metrics (it runs shard-side).

    >>> import flowrl
    >>> from flowrl.policies import PGPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=20, seed=0),
    ...                num_workers=2, backend="local")
    >>> run = flowrl.Plan(LocalTrainOneStep(ws).gather_sync()).compile()
    >>> [(info["num_iterations_trained"], count) for info, count, _ in run.take(3)]
    [(1, 20), (1, 20), (2, 20)]
    >>> run.stop(); ws.stop()
    """
    if isinstance(num_sgd_iter, bool) or not isinstance(num_sgd_iter, int) or num_sgd_iter < 1:
        raise ConfigError(f"LocalTrainOneStep(num_sgd_iter={num_sgd_iter!r}): must be an "
                          "int >= 1")
    if isinstance(sgd_minibatch_size, bool) or not isinstance(sgd_minibatch_size, int) \
            or sgd_minibatch_size < 0:
        raise ConfigError(f"LocalTrainOneStep(sgd_minibatch_size={sgd_minibatch_size!r}): "
                          "must be an int >= 0 (0: the whole batch)")
    return rollout_shards(workers, name=f"{name}.rollouts").for_each(
        _LocalTrain(num_sgd_iter, sgd_minibatch_size), name=name)


class _ComputeUpdates:
    """Shard-side: train, then hand out the significant parameter deltas."""

    def __init__(self, threshold: float):
        self.threshold = threshold
        self.iterations: dict[int, int] = {}

    def __call__(self, samples: Batch) -> tuple[dict, dict, int, int]:
        worker = get_global_worker()
        _asp(worker)
        info = worker.learn_on_batch(samples)
        worker.foreach_trainable_policy(lambda p, pid: p.asp_accumulate_grads())
        index = worker.worker_index
        self.iterations[index] = self.iterations.get(index, 0) + 1
        info = {**info, "num_iterations_trained": self.iterations[index],
                "worker_index": index}
        updates = {pid: worker.get_policy(pid).asp_get_updates(self.threshold)
                   for pid in worker.policies_to_train}
        return updates, info, samples.env_steps(), 1


def _asp(worker) -> None:
    for pid in worker.policies_to_train:
        policy = worker.get_policy(pid)
        if not (hasattr(policy, "asp_accumulate_grads") and hasattr(policy, "asp_get_updates")):
            raise ConfigError(f"LocalComputeUpdates: policy {pid!r} ({type(policy).__name__}) "
                              "has no asp_accumulate_grads()/asp_get_updates(threshold); use a "
                              "TorchPolicy or implement them")
        policy.asp_accumulate_grads()  # starts the base at the current weights if unset


def LocalComputeUpdates(workers, significance_threshold: float, *,
                        name: str = "local_compute_updates") -> ParallelStream:
    """Each remote worker trains on its own batches and emits its significant deltas.

    Items (per shard) are ``(updates, info, count, 1)`` with ``updates[pid] =
    ({param: delta, zero where |delta| <= significance_threshold}, num_nonzero)``
    for each trainable policy; deltas count from the policy's last
    ``set_weights`` (what was sent before is not sent again; what was not
    significant keeps accumulating). ``info`` is ``{policy_id: stats}`` plus
    ``num_iterations_trained`` and ``worker_index``. Follow it with
    ``gather_async()`` and :class:`ForwardUpdates`. Touches no metrics.

    >>> import flowrl
    >>> from flowrl.policies import PGPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=20, seed=0),
    ...                num_workers=2, backend="local")
    >>> plan = flowrl.Plan(LocalComputeUpdates(ws, 1e-4).gather_async().for_each(ForwardUpdates(ws)))
    >>> run = plan.compile()
    >>> info, count = next(run)
    >>> count, run.metrics.counters["num_steps_trained"]
    (20, 20)
    >>> run.stop(); ws.stop()
    """
    if isinstance(significance_threshold, bool) or not isinstance(
            significance_threshold, (int, float)) or significance_threshold < 0:
        raise ConfigError(f"LocalComputeUpdates(significance_threshold="
                          f"{significance_threshold!r}): must be a number >= 0")
    return rollout_shards(workers, name=f"{name}.rollouts").for_each(
        _ComputeUpdates(float(significance_threshold)), name=name)


def _apply_updates(worker, updates: dict[str, tuple[dict, int]]) -> None:
    for pid, (deltas, _) in updates.items():
        worker.get_policy(pid).asp_apply_updates(deltas)


class ForwardUpdates:
    """``for_each(ForwardUpdates(workers))`` after ``LocalComputeUpdates(...).gather_async()``:
    add each worker's significant deltas to the local worker and forward them to
    every OTHER remote worker (one ``ray.put`` per item; not awaited, actor calls
    run in order). Returns ``(info, count)``.

    Metrics: ``STEPS_SAMPLED_COUNTER``, ``AGENT_STEPS_SAMPLED_COUNTER`` and
    ``STEPS_TRAINED_COUNTER`` grow by ``count``; ``info[LEARNER_INFO]`` is the
    item's info; ``WORKER_UPDATE_TIMER`` times the forwarding.
    """

    def __init__(self, workers):
        self.workers = workers

    def __call__(self, item: tuple[dict, dict, int, Any]) -> tuple[dict, int]:
        updates, info, count, _ = item
        metrics = get_metrics()
        metrics.counters[STEPS_SAMPLED_COUNTER] += count
        metrics.counters[AGENT_STEPS_SAMPLED_COUNTER] += count
        metrics.counters[STEPS_TRAINED_COUNTER] += count
        metrics.info[LEARNER_INFO] = info
        with metrics.timers[WORKER_UPDATE_TIMER]:
            _apply_updates(self.workers.local_worker(), updates)
            self.workers.apply_to_remotes(_apply_updates, updates,
                                          skip=info.get("worker_index"))
        return info, count


__all__ = ["LocalTrainOneStep", "LocalComputeUpdates", "ForwardUpdates"]
