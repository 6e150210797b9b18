"""``get_global_worker()``: the RL name of the shard-side context.

Seed-style shard functions (``rollouts.for_each(train_on_batch)`` calling
``get_global_worker().learn_on_batch(batch)``) ask for the worker they run on
instead of capturing one, so the same function runs on an in-process host and on
a Ray actor. Resolution order: the :func:`~flowrl.current_host` running the call
(a rollout worker, or any duck-typed worker host), else the local worker of the run
whose driver-side operator is executing (an algorithm compiles its plan with its
WorkerSet's local worker).
"""

from __future__ import annotations

from typing import Any

from flowrl.errors import FlowError
from flowrl.runtime.aggregator import AggregatorHost
from flowrl.runtime.context import CURRENT_RUN
from flowrl.runtime.shard_host import CURRENT_HOST, ItemsHost


def get_global_worker() -> Any:
    """The worker hosting the current call.

    Shard-side (a function on ``rollout_shards(workers)``), it is the
    :class:`~flowrl.workers.RolloutWorker` (or duck-typed worker host) running it:
    the actor's own object on Ray, the in-process worker on the local backend.
    Inside a driver-side operator of a plan compiled with
    ``plan.compile(local_worker=w)`` (every algorithm does this with its
    WorkerSet's local worker), it is ``w``. Anywhere else, or on a host that is no
    worker (an aggregator, an item source), it raises :class:`~flowrl.errors.FlowError`.
    Touches no counters or timers.

    >>> import flowrl
    >>> class Worker(flowrl.ShardHost):
    ...     def __init__(self, index): self.worker_index = index
    ...     def shard_items(self): return iter([10, 20])
    >>> s = flowrl.from_actors([Worker(1), Worker(2)]).for_each(
    ...     lambda x: x + get_global_worker().worker_index)
    >>> with flowrl.Plan(s.gather_sync()).compile() as run:
    ...     run.take(4)
    [11, 12, 21, 22]
    >>> local = Worker(0)
    >>> d = flowrl.from_iterable(lambda: [5]).for_each(lambda x: x + get_global_worker().worker_index)
    >>> with flowrl.Plan(d).compile(local_worker=local) as run:
    ...     run.take(1)
    [5]
    """
    host = CURRENT_HOST.get()
    if host is not None:
        if isinstance(host, (AggregatorHost, ItemsHost)):
            raise FlowError(
                f"get_global_worker() was called on {type(host).__name__}, a host flowrl "
                "made for an aggregate() pipeline or an item source, which hosts no worker; "
                "call it in functions on rollout_shards(workers) or in driver-side "
                "operators of an algorithm's plan")
        return host
    run = CURRENT_RUN.get()
    if run is not None:
        if run.local_worker is None:
            raise FlowError(
                "get_global_worker() was called in a driver-side operator of a run compiled "
                "without a local worker; compile with plan.compile(local_worker="
                "workers.local_worker()) (algorithms do this)")
        return run.local_worker
    raise FlowError(
        "get_global_worker() was called outside a running plan; it is only available in "
        "shard-side functions (on rollout_shards(workers)) and in driver-side operators "
        "of an algorithm's plan")
