"""Rollout operators: where experience enters a plan, and the batch transforms after it.

``rollout_shards`` is the ParallelStream of the remote workers' ``sample()`` calls;
``ParallelRollouts`` gathers it onto the driver (``"bulk_sync"`` or ``"async"``) and
counts what was sampled; ``ConcatBatches``, ``SelectExperiences`` and
``StandardizeFields`` reshape batches on the way to the learner. Every transform
returns new batches and never modifies its input.

>>> import flowrl
>>> from flowrl.policies import PGPolicy
>>> from flowrl.workers import WorkerConfig, WorkerSet
>>> ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=50, seed=0),
...                num_workers=2, backend="local")
>>> stream = ParallelRollouts(ws, mode="bulk_sync").combine(ConcatBatches(min_batch_size=200))
>>> run = flowrl.Plan(stream).compile()
>>> next(run).count, run.metrics.counters["num_steps_sampled"]
(200, 200)
>>> run.stop(); ws.stop()
"""

from __future__ import annotations

import time
from typing import Any, Callable, Iterator, Sequence

import numpy as np

from flowrl.batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch, concat_samples
from flowrl.errors import ConfigError
from flowrl.graph.stream import LocalStream, ParallelStream, from_actors, from_iterable
from flowrl.metrics import (AGENT_STEPS_SAMPLED_COUNTER, SAMPLE_TIMER, STEPS_SAMPLED_COUNTER,
                            get_metrics)
from flowrl.offline.settings import SAMPLER, describe_input

Batch = SampleBatch | MultiAgentBatch

MODES = ("bulk_sync", "async")


def rollout_shards(workers, *, name: str = "rollouts") -> ParallelStream:
    """The remote workers' experience as a ParallelStream: one shard per remote worker.

    Each shard is that worker's ``sample()`` called forever, on the worker (so a
    ``for_each`` here runs shard-side, on the actor). A worker lost mid-run is
    replaced or dropped as the WorkerSet's failure settings say
    (``from_actors(restart=workers.restarter())``; a WorkerSet built elsewhere via
    ``from_existing`` cannot rebuild workers). Touches no metrics. With no
    remote workers there is nothing to shard: a ConfigError says to use
    ``ParallelRollouts``, which then samples the local worker on the driver.

    >>> from flowrl.policies import PGPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=10),
    ...                num_workers=3, backend="local")
    >>> rollout_shards(ws).num_shards
    3
    >>> ws.stop()
    """
    remotes = workers.remote_workers()
    if not remotes:
        raise ConfigError("rollout_shards(workers): the WorkerSet has no remote workers, so "
                          "there are no shards; use ParallelRollouts(workers, ...), which "
                          "samples the local worker on the driver, or set num_workers >= 1")
    return from_actors(remotes, name=name, restart=workers.restarter(),
                       label=input_label(workers))


def input_label(workers) -> str | None:
    """What the workers' ``sample()`` reads, as the plan's DOT shows it on the rollout
    source: None when they step envs (``input="sampler"``), else the dataset and
    where it is (``"reads dataset /data/cartpole (json)"``;
    :func:`~flowrl.offline.settings.describe_input`). A WorkerSet built elsewhere
    (``from_existing``) has no config and counts as stepping envs."""
    config = getattr(workers, "config", None)
    if config is None:
        return None
    return describe_input(getattr(config, "input", SAMPLER), getattr(config, "input_config", {}))


class _CountSampled:
    """Driver-side: add a batch's steps to the sampled counters and SAMPLE_TIMER.

    ``timed=True`` items are ``(batch, seconds)`` pairs measured where the batch
    was sampled; otherwise the timer gets the wall time since the previous batch.
    """

    def __init__(self, timed: bool = False):
        self.timed = timed
        self._last: float | None = None

    def __call__(self, item: Any) -> Batch:
        metrics = get_metrics()
        now = time.perf_counter()
        if self.timed:
            batch, seconds = item
        else:
            batch, seconds = item, (None if self._last is None else now - self._last)
        self._last = now
        metrics.counters[STEPS_SAMPLED_COUNTER] += batch.env_steps()
        metrics.counters[AGENT_STEPS_SAMPLED_COUNTER] += batch.agent_steps()
        if seconds is not None:
            timer = metrics.timers[SAMPLE_TIMER]
            timer.push(seconds)
            timer.push_units_processed(batch.env_steps())
        return batch


def _sample_local_forever(worker) -> Iterator[tuple[Batch, float]]:
    while True:
        start = time.perf_counter()
        batch = worker.sample()
        yield batch, time.perf_counter() - start


def _concat_round(batches: list[Batch]) -> Batch:
    return concat_samples(batches)


def ParallelRollouts(workers, mode: str = "bulk_sync", num_async: int = 1, *,
                     name: str = "rollouts") -> LocalStream:
    """Experience from the workers as a LocalStream of batches on the driver.

    ``mode="bulk_sync"``: one batch per round, the concatenation of one
    ``sample()`` from every remote worker in worker order (``num_workers *
    rollout_fragment_length * num_envs_per_worker`` env steps); a barrier.
    ``mode="async"``: one worker's batch at a time as each arrives, with
    ``num_async`` requests in flight per worker; order across workers is not
    defined. With no remote workers both modes sample the local worker on the
    driver, one ``sample()`` per item. For the raw ParallelStream use
    :func:`rollout_shards` (a return type never depends on a mode string).

    Workers whose ``input`` is a dataset read recorded batches instead of stepping
    envs (:mod:`flowrl.workers.dataset_input`), and the source node's label in the
    plan's DOT says which dataset (:func:`input_label`).

    Metrics: ``STEPS_SAMPLED_COUNTER`` and ``AGENT_STEPS_SAMPLED_COUNTER`` grow by
    each batch's env/agent steps. ``SAMPLE_TIMER`` gets, per batch, the time of
    ``sample()`` when the local worker samples on the driver; with remote workers
    it gets the driver's wall time between consecutive batches (so it includes
    what the consumer did in between, and its throughput is the plan's
    end-to-end sampling rate). Units are env steps.

    >>> from flowrl.policies import PGPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> import flowrl
    >>> ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=100),
    ...                num_workers=0, backend="local")
    >>> run = flowrl.Plan(ParallelRollouts(ws, mode="async")).compile()
    >>> next(run).count, run.metrics.counters["num_steps_sampled"]
    (100, 100)
    >>> run.stop(); ws.stop()
    """
    if mode == "raw":
        raise ConfigError("ParallelRollouts(mode='raw') is not a mode: call "
                          "rollout_shards(workers) for the ParallelStream of the remote "
                          "workers (one shard per worker)")
    if mode not in MODES:
        raise ConfigError(f"ParallelRollouts(mode={mode!r}): unknown mode; use one of "
                          f"{list(MODES)} (or rollout_shards(workers) for the raw shards)")
    if isinstance(num_async, bool) or not isinstance(num_async, int) or num_async < 1:
        raise ConfigError(f"ParallelRollouts(num_async={num_async!r}): must be an int >= 1")
    if not workers.remote_workers():
        local = workers.local_worker()
        return (from_iterable(lambda: _sample_local_forever(local), name=f"{name}.local",
                              label=input_label(workers))
                .for_each(_CountSampled(timed=True), name=f"{name}.count_sampled"))
    shards = rollout_shards(workers, name=name)
    if mode == "bulk_sync":
        gathered = (shards.batch_across_shards(name=f"{name}.batch_across_shards")
                    .for_each(_concat_round, name=f"{name}.concat"))
    else:
        gathered = shards.gather_async(num_async=num_async, name=f"{name}.gather_async")
    return gathered.for_each(_CountSampled(), name=f"{name}.count_sampled")


def synchronous_parallel_sample(workers, remote_fn: Callable[[Any], Any] | None = None
                                ) -> list:
    """One ``sample()`` from every remote worker, as a list in worker order (the
    local worker's one sample, in a list, when there are none, with or without
    ``remote_fn``). With ``remote_fn``, ``[remote_fn(w) for each remote worker]``
    instead of their samples (RLlib 1.x's semantics). A
    plain function, not a stream operator: it blocks until every result is in and
    touches no metrics.

    >>> from flowrl.policies import PGPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=20),
    ...                num_workers=2, backend="local")
    >>> [b.count for b in synchronous_parallel_sample(ws)]
    [20, 20]
    >>> synchronous_parallel_sample(ws, remote_fn=lambda w: w.worker_index)
    [1, 2]
    >>> ws.stop()
    """
    if not workers.remote_workers():  # as the seeds: remote_fn applies to remotes only
        return [workers.local_worker().sample()]
    return workers.foreach_remote_worker(remote_fn if remote_fn is not None else _sample)


def _sample(worker) -> Batch:
    return worker.sample()


class SelectExperiences:
    """``for_each(SelectExperiences(policy_ids))``: keep only those policies' rows.

    A :class:`MultiAgentBatch` keeps the listed policy batches (and its env-step
    count); a plain SampleBatch counts as ``"default_policy"`` and passes through
    if that id is listed, else becomes an empty MultiAgentBatch. Touches no metrics.
    As in RLlib 1.x, ``SelectExperiences(local_worker=w)`` (no ids) selects
    ``w.policies_to_train``, read when the plan is built.

    >>> mb = MultiAgentBatch({"a": SampleBatch(t=[0]), "b": SampleBatch(t=[0, 1])}, 2)
    >>> sorted(SelectExperiences(["b"])(mb).policy_batches)
    ['b']
    """

    def __init__(self, policy_ids: Sequence[str] | None = None, local_worker=None):
        if not policy_ids and local_worker is not None:
            policy_ids = local_worker.policies_to_train
        if isinstance(policy_ids, str) or not policy_ids:
            raise ConfigError(f"SelectExperiences(policy_ids={policy_ids!r}): give a non-empty "
                              "list of policy ids (or local_worker=, whose policies_to_train "
                              "are then selected)")
        self.policy_ids = list(policy_ids)

    def __call__(self, batch: Batch) -> Batch:
        if isinstance(batch, SampleBatch):
            if DEFAULT_POLICY_ID in self.policy_ids:
                return batch
            return MultiAgentBatch({}, batch.env_steps())
        return MultiAgentBatch({pid: b for pid, b in batch.policy_batches.items()
                                if pid in self.policy_ids}, batch.env_steps())


COUNT_STEPS_BY = ("env_steps", "agent_steps")


class ConcatBatches:
    """``combine(ConcatBatches(min_batch_size))``: buffer batches until they hold at
    least ``min_batch_size`` steps, then emit their concatenation (in arrival order).

    Steps are counted by ``count_steps_by``: ``"env_steps"`` or ``"agent_steps"``.
    As in RLlib 1.x the emitted batch may exceed ``min_batch_size`` by up to one
    input batch (100-step fragments and 1000 give exactly 1000); no row is lost or
    duplicated; a partial buffer at the end of the stream is not emitted. Touches
    no metrics.

    >>> concat = ConcatBatches(min_batch_size=3)
    >>> [len(concat(SampleBatch(t=[i, i]))) for i in range(4)]
    [0, 1, 0, 1]
    """

    def __init__(self, min_batch_size: int, count_steps_by: str = "env_steps"):
        if isinstance(min_batch_size, bool) or not isinstance(min_batch_size, int) \
                or min_batch_size < 1:
            raise ConfigError(f"ConcatBatches(min_batch_size={min_batch_size!r}): must be an "
                              "int >= 1")
        if count_steps_by not in COUNT_STEPS_BY:
            raise ConfigError(f"ConcatBatches(count_steps_by={count_steps_by!r}): use one of "
                              f"{list(COUNT_STEPS_BY)}")
        self.min_batch_size = min_batch_size
        self.count_steps_by = count_steps_by
        self.buffer: list[Batch] = []
        self.count = 0

    def __call__(self, batch: Batch) -> list[Batch]:
        steps = batch.env_steps() if self.count_steps_by == "env_steps" else batch.agent_steps()
        self.buffer.append(batch)
        self.count += steps
        if self.count < self.min_batch_size:
            return []
        out = self.buffer[0] if len(self.buffer) == 1 else concat_samples(self.buffer)
        self.buffer, self.count = [], 0
        return [out]


def standardized(x: np.ndarray) -> np.ndarray:
    """``(x - mean(x)) / (std(x) + 1e-8)`` as a new float32 array; ``x`` itself for n <= 1.

    >>> standardized(np.array([1.0, 3.0])).tolist()
    [-1.0, 1.0]
    """
    if len(x) <= 1:
        return x
    x = np.asarray(x, dtype=np.float64)
    return ((x - x.mean()) / (x.std() + 1e-8)).astype(np.float32)


class StandardizeFields:
    """``for_each(StandardizeFields(["advantages"]))``: standardize columns per batch.

    Returns a NEW batch (the input is untouched) whose listed columns are
    ``(x - mean) / (std + 1e-8)``; a batch of <= 1 row passes unchanged. A
    MultiAgentBatch is standardized per policy. A missing column is a ConfigError
    naming it. Touches no metrics.

    >>> b = SampleBatch(advantages=[1.0, 2.0, 3.0])
    >>> out = StandardizeFields(["advantages"])(b)
    >>> round(float(out["advantages"].mean()), 6), b["advantages"].tolist()
    (0.0, [1.0, 2.0, 3.0])
    """

    def __init__(self, fields: Sequence[str]):
        if isinstance(fields, str) or not fields:
            raise ConfigError(f"StandardizeFields(fields={fields!r}): give a non-empty list "
                              "of column names")
        self.fields = list(fields)

    def _one(self, batch: SampleBatch) -> SampleBatch:
        if batch.count <= 1:
            return batch
        missing = [f for f in self.fields if f not in batch]
        if missing:
            raise ConfigError(f"StandardizeFields: the batch has no column(s) {missing}; it "
                              f"has {sorted(batch)}")
        return batch.with_columns(**{f: standardized(batch[f]) for f in self.fields})

    def __call__(self, batch: Batch) -> Batch:
        if isinstance(batch, MultiAgentBatch):
            return MultiAgentBatch({pid: self._one(b) for pid, b in batch.policy_batches.items()},
                                   batch.env_steps())
        return self._one(batch)


__all__ = ["rollout_shards", "ParallelRollouts", "synchronous_parallel_sample",
           "SelectExperiences", "ConcatBatches", "StandardizeFields", "standardized"]
