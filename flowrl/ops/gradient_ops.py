"""Gradient operators: compute gradients where the data is, apply them on the learner.

``ComputeGradients`` runs shard-side (on the worker that sampled the batch) or
driver-side (on the local worker) and turns a batch into ``(grads, count)``;
``AsyncGradients`` is the A3C source: gradients from the remote workers as each
finishes; ``ApplyGradients`` applies them on the local worker and sends the new
weights back (to every worker, or only to the one that produced them);
``AverageGradients`` averages a list of them (synchronous data-parallel SGD).

Workers are duck-typed: anything with ``sample()``, ``compute_gradients(batch) ->
(grads, info)``, ``apply_gradients(grads)``, ``get_weights()`` and
``set_weights(w)`` (a :class:`~flowrl.ShardHost` when it is a shard) works, in
process or as a Ray actor. Gradients are any nest of dicts, lists and numpy arrays.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import numpy as np

from flowrl.errors import ConfigError, FlowError
from flowrl.graph.stream import LocalStream
from flowrl.metrics import (APPLY_GRADS_TIMER, COMPUTE_GRADS_TIMER, GRAD_WAIT_TIMER,
                            LEARNER_INFO, STEPS_SAMPLED_COUNTER, STEPS_TRAINED_COUNTER,
                            WORKER_UPDATE_TIMER, get_metrics)
from flowrl.ops.rollout_ops import rollout_shards
from flowrl.runtime.calls import calls_for
# Imported here, not on first use: a shard's stage is unpickled at install, which all
# shards finish before the first pull, so no shard's first gradient waits on an import
# while another shard's are served (docs/design.md, "Fair gathers").
from flowrl.runtime.global_worker import get_global_worker


class GradientsItem(tuple):
    """``(grads, count)``, plus ``info`` (the worker's stats) and ``seconds`` (time of
    ``compute_gradients``) as attributes; unpacks like the plain pair."""

    def __new__(cls, grads: Any, count: int, info: Any = None, seconds: float = 0.0):
        self = super().__new__(cls, (grads, count))
        self.info, self.seconds = info, seconds
        return self

    def __getnewargs__(self):
        return self[0], self[1], self.info, self.seconds


def _hosting_worker(fallback) -> Any:
    try:
        return get_global_worker()
    except FlowError:
        if fallback is None:
            raise
    if fallback is None:
        raise FlowError("ComputeGradients: no hosting worker here; use it shard-side "
                        "(rollout_shards(workers).for_each(ComputeGradients(workers))) or give "
                        "it the WorkerSet when it runs on the driver")
    return fallback.local_worker()


class ComputeGradients:
    """``for_each(ComputeGradients(workers))``: batch -> ``(grads, count)``.

    Shard-side (over :func:`~flowrl.ops.rollout_shards`) the gradients are computed
    by the worker hosting the shard; driver-side, by ``workers.local_worker()``.
    Weights do not change. The pair is a :class:`GradientsItem` carrying the
    worker's stats (``info``) and the compute time (``seconds``). Driver-side it
    records ``COMPUTE_GRADS_TIMER`` (units: env steps) and ``info[LEARNER_INFO]``;
    shard-side no metrics exist, and :func:`AsyncGradients` records them on arrival.

    >>> import flowrl
    >>> from flowrl.ops import ParallelRollouts
    >>> from flowrl.policies import A2CPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> ws = WorkerSet("CartPole-v1", A2CPolicy, WorkerConfig(rollout_fragment_length=16, seed=0),
    ...                num_workers=0, backend="local")
    >>> run = flowrl.Plan(ParallelRollouts(ws).for_each(ComputeGradients(ws))).compile()
    >>> grads, count = next(run)
    >>> sorted(grads), count, run.metrics.timers["compute_grads"].count
    (['default_policy'], 16, 1)
    >>> run.stop(); ws.stop()
    """

    def __init__(self, workers=None):
        self.workers = workers

    def __getstate__(self):
        # Shipped to the shards: the hosting worker is found there, not carried.
        return {"workers": None}

    def __call__(self, batch) -> GradientsItem:
        worker = _hosting_worker(self.workers)
        start = time.perf_counter()
        grads, info = worker.compute_gradients(batch)
        seconds = time.perf_counter() - start
        count = batch.env_steps() if hasattr(batch, "env_steps") else batch.count
        item = GradientsItem(grads, count, info, seconds)
        try:
            metrics = get_metrics()
        except FlowError:  # shard-side: no metrics here
            return item
        timer = metrics.timers[COMPUTE_GRADS_TIMER]
        timer.push(seconds)
        timer.push_units_processed(count)
        metrics.info[LEARNER_INFO] = info
        return item


class _RecordGradients:
    """Driver-side end of :func:`AsyncGradients`: counters, learner info, timers."""

    def __init__(self):
        self._since: float | None = None

    def __call__(self, item: GradientsItem) -> tuple[Any, int]:
        metrics = get_metrics()
        now = time.perf_counter()
        grads, count = item
        metrics.counters[STEPS_SAMPLED_COUNTER] += count
        info = getattr(item, "info", None)
        if info is not None:
            metrics.info[LEARNER_INFO] = info
        seconds = getattr(item, "seconds", None)
        if seconds:
            compute = metrics.timers[COMPUTE_GRADS_TIMER]
            compute.push(seconds)
            compute.push_units_processed(count)
        if self._since is not None:
            metrics.timers[GRAD_WAIT_TIMER].push(now - self._since)
        self._since = time.perf_counter()
        return item


def AsyncGradients(workers, *, name: str = "async_gradients") -> LocalStream:
    """Gradients computed on the remote workers, yielded as each completes (A3C).

    Each remote worker samples, computes gradients on its own batch
    (:class:`ComputeGradients`, shard-side) and sends ``(grads, count)``; the stream
    yields them in completion order, with ``get_metrics().current_actor`` set to
    the producing worker (so :class:`ApplyGradients` with ``update_all=False`` can
    answer it alone). Workers should start in sync (a :class:`~flowrl.workers.WorkerSet`
    syncs at creation; call ``sync_weights()`` on one made with ``from_existing``).

    Metrics: ``STEPS_SAMPLED_COUNTER`` grows by each count; ``info[LEARNER_INFO]``
    is the last worker's stats; ``COMPUTE_GRADS_TIMER`` gets the time spent in
    ``compute_gradients`` on the worker; ``GRAD_WAIT_TIMER`` the time the driver
    waited for each next gradient.

    >>> import flowrl
    >>> from flowrl.policies import A2CPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> ws = WorkerSet("CartPole-v1", A2CPolicy, WorkerConfig(rollout_fragment_length=8, seed=0),
    ...                num_workers=2, backend="local")
    >>> run = flowrl.Plan(AsyncGradients(ws)).compile()
    >>> [count for _, count in run.take(3)], run.metrics.counters["num_steps_sampled"]
    ([8, 8, 8], 24)
    >>> run.stop(); ws.stop()
    """
    shards = rollout_shards(workers, name=name).for_each(
        ComputeGradients(), name=f"{name}.compute_gradients")
    return (shards.gather_async(num_async=1, name=f"{name}.gather_async")
            .for_each(_RecordGradients(), name=f"{name}.record"))


def _get_weights(worker, policies: Sequence[str]) -> Any:
    return worker.get_weights(list(policies)) if policies else worker.get_weights()


def send_weights(weights: Any, actors: Sequence[Any],
                 versions: dict[str, int] | None = None) -> None:
    """Give ``weights`` to each worker in ``actors``: in-process workers get
    ``set_weights(weights)``; Ray actors ``set_weights.remote(ref)`` with ONE
    ``ray.put`` shared by all of them (not awaited: actor calls run in submission
    order, so each actor's next sample uses the new weights). With ``versions``
    (``{pid: version}``) the call is ``set_weights(weights, versions)``
    (:meth:`~flowrl.workers.RolloutWorker.set_weights`)."""
    extra = () if versions is None else (versions,)
    shared: dict[str, Any] = {}  # calls name -> weights as their calls share them
    for actor in actors:
        calls = calls_for(actor)
        if calls.name not in shared:
            shared[calls.name] = calls.put(weights)
        calls.call(actor, "set_weights", shared[calls.name], *extra)


class ApplyGradients:
    """``for_each(ApplyGradients(workers, policies=(), update_all=True))``.

    Applies each ``(grads, count)`` on the local worker, then sends the new weights
    (of ``policies``; all when empty) to every remote worker (``update_all=True``)
    or only to ``get_metrics().current_actor``, the worker that computed them
    (``update_all=False``: A3C). Returns the item unchanged.

    Metrics: ``STEPS_TRAINED_COUNTER`` grows by ``count``; ``APPLY_GRADS_TIMER``
    (units: steps) around the apply, ``WORKER_UPDATE_TIMER`` around the weight
    send.

    >>> import flowrl, numpy as np
    >>> from flowrl.policies import A2CPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> ws = WorkerSet("CartPole-v1", A2CPolicy, WorkerConfig(rollout_fragment_length=8, seed=0),
    ...                num_workers=2, backend="local")
    >>> plan = flowrl.Plan(AsyncGradients(ws).for_each(ApplyGradients(ws, update_all=False)))
    >>> run = plan.compile(); _ = run.take(4)
    >>> run.metrics.counters["num_steps_trained"], run.metrics.timers["apply_grad"].count
    (32, 4)
    >>> run.stop(); ws.stop()
    """

    def __init__(self, workers, policies: Sequence[str] = (), update_all: bool = True):
        if isinstance(policies, str):
            raise ConfigError(f"ApplyGradients(policies={policies!r}): give a list of policy "
                              "ids (or () for all)")
        if not isinstance(update_all, bool):
            raise ConfigError(f"ApplyGradients(update_all={update_all!r}): must be True "
                              "(broadcast to every worker) or False (only the producer)")
        self.workers = workers
        self.policies = list(policies)
        self.update_all = update_all

    def __call__(self, item: tuple[Any, int]) -> tuple[Any, int]:
        metrics = get_metrics()
        grads, count = item
        local = self.workers.local_worker()
        timer = metrics.timers[APPLY_GRADS_TIMER]
        with timer:
            local.apply_gradients(grads)
        timer.push_units_processed(count)
        metrics.counters[STEPS_TRAINED_COUNTER] += count
        remotes = self.workers.remote_workers()
        if remotes:
            targets = remotes if self.update_all else [metrics.current_actor]
            if targets == [None]:
                raise FlowError("ApplyGradients(update_all=False): no current actor; put it "
                                "right after AsyncGradients (or a gather) so each item's "
                                "producing worker is known")
            with metrics.timers[WORKER_UPDATE_TIMER]:
                send_weights(_get_weights(local, self.policies), targets)
        return item


def _mean_tree(items: list[Any]) -> Any:
    first = items[0]
    if isinstance(first, dict):
        return {k: _mean_tree([x[k] for x in items]) for k in first}
    if isinstance(first, (list, tuple)):
        return type(first)(_mean_tree(list(xs)) for xs in zip(*items))
    return np.mean(np.stack([np.asarray(x) for x in items]), axis=0)


class AverageGradients:
    """``for_each(AverageGradients())``: a list of ``(grads, count)`` -> ``(mean grads,
    total count)``.

    A plain element-wise mean over the list (RLlib 1.x summed despite the name);
    gradients may be nests of dicts, lists and arrays of the same structure.
    Touches no metrics.

    >>> g, n = AverageGradients()([([np.array([1.0, 2.0])], 10), ([np.array([3.0, 4.0])], 30)])
    >>> g[0].tolist(), n
    ([2.0, 3.0], 40)
    """

    def __call__(self, items: Sequence[tuple[Any, int]]) -> tuple[Any, int]:
        if not items:
            raise ConfigError("AverageGradients got an empty list; feed it rounds of "
                              "(grads, count) pairs, e.g. from batch_across_shards()")
        return _mean_tree([g for g, _ in items]), int(sum(c for _, c in items))


__all__ = ["ComputeGradients", "AsyncGradients", "ApplyGradients", "AverageGradients",
           "GradientsItem", "send_weights"]
