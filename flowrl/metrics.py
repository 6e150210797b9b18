"""Per-run metrics: counters, timers, info, and the ``get_metrics()`` accessor.

Each compiled run owns exactly one :class:`MetricsContext`. The runtime makes it
current (through a ``contextvars.ContextVar``) while driver-side operators run, so
an operator can call :func:`get_metrics` without any global state; anywhere else
(shard-side code, module level, another run's thread) the call raises
:class:`~flowrl.errors.FlowError`.

>>> m = MetricsContext()
>>> m.counters[STEPS_SAMPLED_COUNTER] += 200
>>> with m.timers[SAMPLE_TIMER]:
...     pass
>>> m.timers[SAMPLE_TIMER].count
1
>>> fresh = MetricsContext(); fresh.restore(m.save()); fresh.counters[STEPS_SAMPLED_COUNTER]
200
"""

from __future__ import annotations

import collections
import contextvars
import copy
import math
import time
from typing import Any

from flowrl.errors import FlowError

STEPS_SAMPLED_COUNTER = "num_steps_sampled"
STEPS_TRAINED_COUNTER = "num_steps_trained"
AGENT_STEPS_SAMPLED_COUNTER = "num_agent_steps_sampled"
AGENT_STEPS_TRAINED_COUNTER = "num_agent_steps_trained"
STEPS_TRAINED_THIS_ITER_COUNTER = "num_steps_trained_this_iter"
NUM_TARGET_UPDATES = "num_target_updates"
LAST_TARGET_UPDATE_TS = "last_target_update_ts"

SAMPLE_TIMER = "sample"
LEARN_ON_BATCH_TIMER = "learn"
GRAD_WAIT_TIMER = "grad_wait"
APPLY_GRADS_TIMER = "apply_grad"
COMPUTE_GRADS_TIMER = "compute_grads"
WORKER_UPDATE_TIMER = "update"
LOAD_BATCH_TIMER = "load"

LEARNER_INFO = "learner"


class Timer:
    """Wall-clock timer over a sliding window of the last ``window`` samples.

    Use as a context manager, or ``push`` durations measured elsewhere. Units
    processed (steps, items) pushed with ``push_units_processed`` give
    ``mean_throughput`` in units per second.

    >>> t = Timer()
    >>> t.push(0.5); t.push_units_processed(100)
    >>> t.mean, t.mean_throughput
    (0.5, 200.0)
    """

    def __init__(self, window: int = 100):
        self._times: collections.deque[float] = collections.deque(maxlen=window)
        self._units: collections.deque[float] = collections.deque(maxlen=window)
        self.count = 0
        self.total = 0.0
        self._start: float | None = None

    def __enter__(self) -> "Timer":
        self._start = time.perf_counter()
        return self

    def __exit__(self, *exc) -> None:
        self.push(time.perf_counter() - self._start)
        self._start = None

    def push(self, seconds: float) -> None:
        self._times.append(seconds)
        self.count += 1
        self.total += seconds

    def push_units_processed(self, units: float) -> None:
        self._units.append(units)

    @property
    def mean(self) -> float:
        return sum(self._times) / len(self._times) if self._times else 0.0

    @property
    def mean_units_processed(self) -> float:
        return sum(self._units) / len(self._units) if self._units else 0.0

    @property
    def mean_throughput(self) -> float:
        busy = sum(self._times)
        return sum(self._units) / busy if busy > 0 else 0.0


class MetricsContext:
    """Counters (int), timers (:class:`Timer`), info (dict) and ``current_actor``.

    ``current_actor`` is the source actor (Ray handle, or in-process host) of the
    item being processed, set by gathers for driver-side operators.
    ``save()``/``restore()`` round-trip counters and info (timers are transient).
    """

    def __init__(self) -> None:
        self.counters: collections.defaultdict[str, int] = collections.defaultdict(int)
        self.timers: collections.defaultdict[str, Timer] = collections.defaultdict(Timer)
        self.info: dict[str, Any] = {}
        self.current_actor: Any = None

    def save(self) -> dict:
        return {"counters": dict(self.counters), "info": copy.deepcopy(self.info)}

    def restore(self, state: dict) -> None:
        self.counters = collections.defaultdict(int, state.get("counters", {}))
        self.info = copy.deepcopy(state.get("info", {}))

    def timer_summary(self) -> dict[str, float]:
        """``<name>_time_ms`` and, where units were pushed, ``<name>_throughput``."""
        out: dict[str, float] = {}
        for name, timer in sorted(self.timers.items()):
            out[f"{name}_time_ms"] = round(1000 * timer.mean, 3)
            if timer.mean_units_processed:
                out[f"{name}_throughput"] = round(timer.mean_throughput, 3)
        return out


#: The current run's metrics (what :func:`get_metrics` returns); the runtime sets it
#: around driver-side operator calls (:class:`using_metrics`).
CURRENT_METRICS: contextvars.ContextVar[MetricsContext | None] = contextvars.ContextVar(
    "flowrl_metrics", default=None)


def get_metrics() -> MetricsContext:
    """The metrics of the run whose driver-side operator is executing now.

    Raises :class:`FlowError` outside such a call (shard-side code, module level).

    >>> try:
    ...     get_metrics()
    ... except FlowError as e:
    ...     print("FlowError")
    FlowError
    """
    ctx = CURRENT_METRICS.get()
    if ctx is None:
        raise FlowError(
            "get_metrics() was called outside a driver-side operator call; it is only "
            "available inside functions that a running plan calls on the driver "
            "(for_each/filter/... on a LocalStream)")
    return ctx


class using_metrics:
    """Make ``metrics`` current for the duration of a ``with`` block (runtime use).

    ``using_metrics(None)`` hides any current context (used around shard-side work
    that runs in-process, so it sees what it would see on an actor).
    """

    __slots__ = ("_metrics", "_token")

    def __init__(self, metrics: MetricsContext | None):
        self._metrics = metrics

    def __enter__(self) -> MetricsContext | None:
        self._token = CURRENT_METRICS.set(self._metrics)
        return self._metrics

    def __exit__(self, *exc) -> None:
        CURRENT_METRICS.reset(self._token)



def summarize_custom_metrics(episodes: list[dict]) -> dict[str, dict]:
    """``custom_metrics`` (``<name>_mean``/``_min``/``_max`` over the episodes that set
    ``name``, NaN values left out as RLlib 1.x did; all three NaN when every value
    was NaN) and ``hist_stats`` (``name`` -> the episodes' ``hist_data`` joined in
    order) of ``episode_stats()`` entries.

    >>> summarize_custom_metrics([{"custom_metrics": {"x": 1.0}}, {},
    ...                           {"custom_metrics": {"x": 3.0}, "hist_data": {"h": [5.0]}}])
    {'custom_metrics': {'x_mean': 2.0, 'x_min': 1.0, 'x_max': 3.0}, 'hist_stats': {'h': [5.0]}}
    """
    values: dict[str, list[float]] = {}
    hist: dict[str, list[float]] = {}
    for e in episodes:
        for k, v in e.get("custom_metrics", {}).items():
            values.setdefault(k, []).append(v)
        for k, v in e.get("hist_data", {}).items():
            hist.setdefault(k, []).extend(v)
    custom: dict[str, float] = {}
    for k, vs in values.items():
        kept = [v for v in vs if not math.isnan(v)]
        custom[f"{k}_mean"] = sum(kept) / len(kept) if kept else math.nan
        custom[f"{k}_min"] = min(kept) if kept else math.nan
        custom[f"{k}_max"] = max(kept) if kept else math.nan
    return {"custom_metrics": custom, "hist_stats": hist}
