"""flowrl: distributed reinforcement-learning training loops as dataflow plans.

>>> import flowrl
>>> plan = flowrl.Plan(flowrl.from_range(6, num_shards=3).for_each(lambda x: x * x).gather_sync())
>>> with plan.compile() as run:
...     run.take(6)
[0, 4, 16, 1, 9, 25]
"""

from flowrl.errors import ConfigError, FlowError, OperatorError, PlanError, WorkerError
from flowrl.graph import (Concurrently, LocalStream, ParallelStream, Plan, from_actors,
                          from_items, from_iterable, from_iterators, from_range)
from flowrl.metrics import MetricsContext, get_metrics
from flowrl.runtime.shard_host import ShardHost, current_host


class FlowRLWarning(UserWarning):
    """Warnings flowrl itself emits (the test suite turns them into errors)."""


__version__ = "0.1.0"

__all__ = ["ConfigError", "FlowError", "OperatorError", "PlanError", "WorkerError",
           "Concurrently", "LocalStream", "ParallelStream", "Plan", "ShardHost",
           "from_actors", "from_items", "from_iterable", "from_iterators", "from_range",
           "MetricsContext", "get_metrics", "current_host", "FlowRLWarning"]
