"""flowrl: distributed reinforcement-learning training loops as dataflow plans."""

from flowrl.errors import ConfigError, FlowError, OperatorError, PlanError, WorkerError
from flowrl.graph.shard_host import ShardHost
from flowrl.metrics import MetricsContext, get_metrics


class FlowRLWarning(UserWarning):
    """Warnings flowrl itself emits (the test suite turns them into errors)."""


__version__ = "0.1.0"
