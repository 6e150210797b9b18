"""Reporting operators: ``StandardMetricsReporting``, ``CollectMetrics`` and the
``OncePerTimeInterval`` / ``OncePerTimestepsElapsed`` filters.

A reporting step turns whatever the train op emits into one result dict (the
keys docs/design.md#results names): episode statistics over the last ``smoothing_window``
completed episodes of every worker (local and remote), the run's counters,
learner stats and timer summary, and the iteration count and total time, which
live in the run's metrics so that ``save``/``restore`` continue them.
"""

from __future__ import annotations

import math
import time
from typing import Any, Sequence

from flowrl.errors import ConfigError
from flowrl.graph.stream import LocalStream
from flowrl.ops.off_policy_ops import OFF_POLICY_ESTIMATION, report_estimates
from flowrl.runtime.calls import CALL_TIMEOUT_S, calls_for
from flowrl.runtime.recovery import LOST_REQUESTS_COUNTER, WORKER_RESTARTS_COUNTER
from flowrl.metrics import (LEARNER_INFO, STEPS_SAMPLED_COUNTER, STEPS_TRAINED_COUNTER,
                            get_metrics, summarize_custom_metrics)

TRAINING_ITERATION = "training_iteration"
EPISODES_TOTAL = "episodes_total"
TIME_TOTAL_S = "time_total_s"
LAST_REPORT_STEPS = "timesteps_at_last_report"
#: ``MetricsContext.info`` key of the episodes in :class:`CollectMetrics`' smoothing
#: window: kept with the run's metrics, so a checkpoint carries them and a restored
#: run's means go on over the same last episodes.
RECENT_EPISODES = "recent_episodes"
LAST_PASS_STEPS = "steps_at_last_pass"


class OncePerTimeInterval:
    """``filter(OncePerTimeInterval(delay_s))``: pass an item if at least ``delay_s``
    seconds passed since the last item it passed (the first always passes;
    ``delay_s=0`` passes everything). Touches no metrics.

    >>> f = OncePerTimeInterval(60)
    >>> f(1), f(2)
    (True, False)
    """

    def __init__(self, delay_s: float):
        if delay_s is None or delay_s < 0:
            raise ConfigError(f"OncePerTimeInterval(delay_s={delay_s!r}): must be >= 0")
        self.delay_s = delay_s
        self._last: float | None = None

    def __call__(self, item: Any) -> bool:
        now = time.perf_counter()
        if self._last is None or now - self._last >= self.delay_s:
            self._last = now
            return True
        return False


class OncePerTimestepsElapsed:
    """``filter(OncePerTimestepsElapsed(n))``: pass an item once ``STEPS_SAMPLED_COUNTER``
    (or ``STEPS_TRAINED_COUNTER`` with ``by_steps_trained``) grew by at least ``n``
    since the last item it passed; ``n <= 0`` passes everything. Reads counters.

    The counter's value at the last pass lives in the run's metrics
    (``info["steps_at_last_pass"]``, keyed ``"<counter>/<n>"``), not in the filter,
    so it survives save/restore: a restored run measures from the counters as
    restored, and its reporting boundaries continue where the saved run's were.
    Two filters on the same counter with the same ``n`` in one run share it.

    >>> import flowrl
    >>> from flowrl.metrics import STEPS_SAMPLED_COUNTER
    >>> def count(x):
    ...     flowrl.get_metrics().counters[STEPS_SAMPLED_COUNTER] += 100
    ...     return x
    >>> s = flowrl.from_iterable(lambda: range(10)).for_each(count)
    >>> flowrl.Plan(s.filter(OncePerTimestepsElapsed(300))).compile().take(3)
    [2, 5, 8]
    """

    def __init__(self, n: int, by_steps_trained: bool = False):
        self.n = n
        self.counter = STEPS_TRAINED_COUNTER if by_steps_trained else STEPS_SAMPLED_COUNTER
        self.key = f"{self.counter}/{n}"

    def __call__(self, item: Any) -> bool:
        if self.n <= 0:
            return True
        metrics = get_metrics()
        now = metrics.counters[self.counter]
        marks = metrics.info.setdefault(LAST_PASS_STEPS, {})
        if now - marks.get(self.key, 0) >= self.n:
            marks[self.key] = now
            return True
        return False


def _episode_stats(worker) -> list[dict]:
    return worker.episode_stats()


def summarize_episodes(episodes: list[dict]) -> dict[str, Any]:
    """Episode statistics over ``episodes`` (dicts as workers' ``episode_stats()`` give).

    ``episode_reward_mean/min/max`` and ``episode_len_mean`` (NaN without episodes)
    and, per policy, ``policy_reward_mean/min/max``: over every (episode, agent)
    that policy played, that agent's return (as RLlib 1.x); empty dicts for
    single-agent episodes. ``custom_metrics`` (``<name>_mean``/``_min``/``_max``)
    and ``hist_stats`` from the episodes' callbacks
    (:func:`~flowrl.metrics.summarize_custom_metrics`; empty dicts without).

    >>> s = summarize_episodes([
    ...     {"episode_reward": 3.0, "episode_len": 2, "policy_rewards": {"a": [1.0, 2.0]}},
    ...     {"episode_reward": 5.0, "episode_len": 4, "policy_rewards": {"a": [5.0]}}])
    >>> s["episode_reward_mean"], s["policy_reward_mean"], s["policy_reward_max"]
    (4.0, {'a': 2.6666666666666665}, {'a': 5.0})
    """
    rewards = [e["episode_reward"] for e in episodes]
    lengths = [e["episode_len"] for e in episodes]
    per_policy: dict[str, list[float]] = {}
    for e in episodes:
        for pid, rs in e.get("policy_rewards", {}).items():
            per_policy.setdefault(pid, []).extend(rs)
    return {
        "episode_reward_mean": _mean(rewards),
        "episode_reward_min": min(rewards) if rewards else math.nan,
        "episode_reward_max": max(rewards) if rewards else math.nan,
        "episode_len_mean": _mean(lengths),
        "policy_reward_mean": {pid: _mean(rs) for pid, rs in per_policy.items()},
        "policy_reward_min": {pid: min(rs) for pid, rs in per_policy.items()},
        "policy_reward_max": {pid: max(rs) for pid, rs in per_policy.items()},
        **summarize_custom_metrics(episodes),
    }


def collect_metrics(local_worker=None, remote_workers: Sequence = ()) -> dict[str, Any]:
    """Episode statistics of the episodes the workers finished since they were last
    asked (a plain function, as RLlib 1.x's ``collect_metrics``).

    Drains ``episode_stats()`` of ``local_worker`` (may be None) and of each remote
    worker (in-process workers or Ray actor handles; each asked at once, then
    each awaited at most :data:`~flowrl.runtime.calls.CALL_TIMEOUT_S`: a dead or
    silent one is a :class:`~flowrl.errors.WorkerError` naming it) and returns
    :func:`summarize_episodes` of them plus ``episodes_this_iter``. Touches no metrics.

    >>> from flowrl.policies import PGPolicy
    >>> from flowrl.workers import RolloutWorker, make_multi_agent
    >>> w = RolloutWorker(make_multi_agent("CartPole-v1", 2), policies={"a": PGPolicy,
    ...                   "b": PGPolicy}, policy_mapping_fn=lambda agent, episode: "ab"[agent],
    ...                   rollout_fragment_length=300, seed=0)
    >>> _ = w.sample()
    >>> r = collect_metrics(w)
    >>> r["episodes_this_iter"] > 0, sorted(r["policy_reward_mean"])
    (True, ['a', 'b'])
    >>> collect_metrics(w)["episodes_this_iter"]
    0
    >>> w.stop()
    """
    episodes = list(local_worker.episode_stats()) if local_worker is not None else []
    asked = [(i, calls_for(w)) for i, w in enumerate(remote_workers, 1)]
    pending = [(i, calls, calls.call(w, "episode_stats"))
               for (i, calls), w in zip(asked, remote_workers)]
    for i, calls, p in pending:
        episodes.extend(calls.get(p, timeout=CALL_TIMEOUT_S, label=f"remote worker {i}",
                                  setting="collect_metrics, CALL_TIMEOUT_S"))
    out = summarize_episodes(episodes)
    out["episodes_this_iter"] = len(episodes)
    return out


class CollectMetrics:
    """``for_each(CollectMetrics(workers))``: one result dict per item (the item is dropped).

    Drains completed episodes from every worker (``foreach_worker``, local first;
    a replacement worker still starting is not waited for: it has none yet) and
    reports over the last ``smoothing_window`` of them: ``episode_reward_mean``
    / ``_min`` / ``_max`` and ``episode_len_mean`` (NaN before any episode ended),
    ``policy_reward_mean`` / ``_min`` / ``_max`` per policy (see
    :func:`summarize_episodes`),
    ``episodes_this_iter``, ``episodes_total``, ``timesteps_total`` (env steps
    sampled), ``timesteps_this_iter``, ``training_iteration``, ``time_this_iter_s``,
    ``time_total_s``, ``num_healthy_workers`` (remote workers now),
    ``num_worker_restarts`` (replacements made), ``num_lost_requests`` (requests to
    lost workers abandoned), ``info`` (every counter plus
    ``learner``: the last learner stats per policy), ``timers``
    (``<name>_time_ms`` / ``<name>_throughput``) and, when the plan estimates
    off-policy (:class:`~flowrl.ops.off_policy_ops.EstimateOffPolicy`),
    ``off_policy_estimation``: per method, the mean of its estimates since the
    last report.

    ``time_this_iter_s`` of the first report counts from when this op was
    created (when the plan was built).

    Metrics: increments the ``training_iteration`` and ``episodes_total`` counters
    and keeps ``info["time_total_s"]``, ``info["timesteps_at_last_report"]`` and
    the smoothing window's episodes, ``info["recent_episodes"]`` (all survive
    save/restore, so a restored run continues them: its first mean is over the same
    last episodes, not over the few a fresh window would hold).

    >>> import flowrl
    >>> from flowrl.ops import ParallelRollouts
    >>> from flowrl.policies import PGPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=200, seed=0),
    ...                num_workers=0, backend="local")
    >>> run = flowrl.Plan(ParallelRollouts(ws).for_each(CollectMetrics(ws))).compile()
    >>> r = next(run)
    >>> r["timesteps_total"], r["training_iteration"], r["episodes_total"] > 0
    (200, 1, True)
    >>> run.stop(); ws.stop()
    """

    def __init__(self, workers, *, smoothing_window: int = 100, wait_s: float | None = None):
        if smoothing_window < 1:
            raise ConfigError(f"CollectMetrics(smoothing_window={smoothing_window!r}): must "
                              "be >= 1")
        if wait_s is not None and not wait_s >= 0:
            raise ConfigError(f"CollectMetrics(wait_s={wait_s!r}): must be None (wait for "
                              "every worker) or a number of seconds >= 0")
        self.workers = workers
        self.wait_s = wait_s
        self.smoothing_window = smoothing_window
        self._carry: dict = {}  # remote worker index -> its pending episode_stats call
        self.episodes: list[dict] = []  # the window, as of the last report
        self._last_time = time.perf_counter()

    def __call__(self, _: Any) -> dict[str, Any]:
        # A replacement still starting has no episodes yet; waiting for it would stall
        # the plan (an async gather's other workers) for its whole start.
        return self._report(self.workers.foreach_worker(_episode_stats, skip_starting=True))

    async def call_async(self, _: Any) -> dict[str, Any]:
        """The same result, awaiting the workers' replies (``for_each(collect.call_async)``).

        :func:`StandardMetricsReporting` uses it: a remote worker answers only after
        the sample requests already queued on it, and meanwhile the run's other
        inputs (an async gather resubmitting to the workers as their fragments
        complete) keep moving instead of stalling on a blocking wait.

        With ``wait_s`` (async plans) a report waits at most that long: a remote
        worker still busy with its queued samples keeps its request pending, and
        its episodes are reported by a later report (never lost, never asked for
        twice); see :meth:`~flowrl.workers.WorkerSet.foreach_worker_async`."""
        if self.wait_s is None:
            per_worker = await self.workers.foreach_worker_async(_episode_stats,
                                                                 skip_starting=True)
        else:
            per_worker = await self.workers.foreach_worker_async(
                _episode_stats, skip_starting=True, wait_s=self.wait_s, carry=self._carry)
        return self._report(per_worker)

    def _report(self, per_worker: list[list[dict]]) -> dict[str, Any]:
        metrics = get_metrics()
        self.workers.recovery.count_in(metrics)  # the set counts in this run's counters
        now = time.perf_counter()
        new = [e for eps in per_worker for e in eps]
        window = metrics.info.setdefault(RECENT_EPISODES, [])
        window.extend(new)
        del window[:max(0, len(window) - self.smoothing_window)]
        self.episodes = window
        counters = metrics.counters
        counters[TRAINING_ITERATION] += 1
        counters[EPISODES_TOTAL] += len(new)
        this_iter, self._last_time = now - self._last_time, now
        metrics.info[TIME_TOTAL_S] = metrics.info.get(TIME_TOTAL_S, 0.0) + this_iter
        steps = counters[STEPS_SAMPLED_COUNTER]
        steps_this_iter = steps - metrics.info.get(LAST_REPORT_STEPS, 0)
        metrics.info[LAST_REPORT_STEPS] = steps
        info = {k: v for k, v in counters.items()}
        info[LEARNER_INFO] = metrics.info.get(LEARNER_INFO, {})
        estimates = report_estimates(metrics)
        return {
            **summarize_episodes(window),
            "episodes_this_iter": len(new),
            "episodes_total": counters[EPISODES_TOTAL],
            "timesteps_total": steps,
            "timesteps_this_iter": steps_this_iter,
            "training_iteration": counters[TRAINING_ITERATION],
            "time_this_iter_s": this_iter,
            "time_total_s": metrics.info[TIME_TOTAL_S],
            "num_healthy_workers": len(self.workers.remote_workers()),
            "num_worker_restarts": counters[WORKER_RESTARTS_COUNTER],
            "num_lost_requests": counters.get(LOST_REQUESTS_COUNTER, 0),
            "info": info,
            "timers": metrics.timer_summary(),
            **({OFF_POLICY_ESTIMATION: estimates} if estimates else {}),
        }


def _mean(xs: list[float]) -> float:
    return float(sum(xs) / len(xs)) if xs else math.nan


#: RLlib 1.x config keys :func:`StandardMetricsReporting` reads from a positional
#: config, by its parameter; older spellings after the current one.
_REPORTING_KEYS = {"timesteps_per_iteration": ("timesteps_per_iteration",),
                   "min_time_s_per_reporting": ("min_time_s_per_reporting", "min_iter_time_s"),
                   "smoothing_window": ("metrics_smoothing_episodes",)}


def _reporting_settings(config: Any, explicit: dict[str, Any]) -> dict[str, Any]:
    """``explicit`` (keywords the caller gave, None for not given) completed from
    ``config`` (any mapping, an :class:`~flowrl.algorithms.AlgorithmConfig` included),
    then from the defaults."""
    defaults = {"timesteps_per_iteration": 0, "min_time_s_per_reporting": 0.0,
                "smoothing_window": 100}
    if config is not None and not (hasattr(config, "get") and hasattr(config, "__contains__")):
        raise ConfigError(f"StandardMetricsReporting(train_op, workers, config={config!r}): "
                          "the third argument is the algorithm's config (a mapping such as "
                          "an AlgorithmConfig or the seeds' config dict); pass settings as "
                          "keywords instead (timesteps_per_iteration=...)")
    out = {}
    for param, default in defaults.items():
        value = explicit[param]
        if value is None and config is not None:
            value = next((config.get(k) for k in _REPORTING_KEYS[param]
                          if config.get(k) is not None), None)
        out[param] = default if value is None else value
    return out


def StandardMetricsReporting(train_op: LocalStream, workers, config: Any = None, *,
                             min_time_s_per_reporting: float | None = None,
                             timesteps_per_iteration: int | None = None,
                             smoothing_window: int | None = None,
                             metrics_wait_s: float | None = None,
                             by_steps_trained: bool = False) -> LocalStream:
    """The stream of result dicts for ``train_op``: one per reporting step.

    ``config`` (optional, third positional as in RLlib 1.x) is the algorithm's
    config read as a mapping when the plan is built: ``timesteps_per_iteration``,
    ``min_time_s_per_reporting`` (or RLlib's older ``min_iter_time_s``) and
    ``metrics_smoothing_episodes`` (the ``smoothing_window``) come from it when
    present. A keyword given explicitly wins over the config; what neither gives
    takes the defaults 0, 0.0 and 100. Unlike RLlib 1.x there is no two-second
    floor on the reporting interval.

    An item of ``train_op`` ends a reporting step once at least
    ``timesteps_per_iteration`` env steps were sampled (rows trained, with
    ``by_steps_trained``: a plan that samples nothing) since the last report
    (:class:`OncePerTimestepsElapsed`) and at least ``min_time_s_per_reporting``
    seconds passed (:class:`OncePerTimeInterval`); :class:`CollectMetrics` then
    builds the result. Items in between are consumed (their training happened)
    and dropped. ``metrics_wait_s`` is CollectMetrics' ``wait_s``: the async
    algorithms pass 0, so a report takes the episode statistics the workers have
    already sent and never waits behind their in-flight fragments.

    >>> import flowrl
    >>> from flowrl.ops import ParallelRollouts
    >>> from flowrl.policies import PGPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=100),
    ...                num_workers=0, backend="local")
    >>> out = StandardMetricsReporting(ParallelRollouts(ws), ws, timesteps_per_iteration=300)
    >>> run = flowrl.Plan(out).compile()
    >>> [r["timesteps_total"] for r in run.take(2)]
    [300, 600]
    >>> run.stop()
    >>> out = StandardMetricsReporting(ParallelRollouts(ws), ws, {"timesteps_per_iteration": 200})
    >>> next(out)["timesteps_total"]
    200
    >>> out.stop(); ws.stop()
    """
    settings = _reporting_settings(config, {
        "timesteps_per_iteration": timesteps_per_iteration,
        "min_time_s_per_reporting": min_time_s_per_reporting,
        "smoothing_window": smoothing_window})
    timesteps_per_iteration = settings["timesteps_per_iteration"]
    min_time_s_per_reporting = settings["min_time_s_per_reporting"]
    smoothing_window = settings["smoothing_window"]
    return (train_op
            .filter(OncePerTimestepsElapsed(timesteps_per_iteration, by_steps_trained),
                    name="report.once_per_timesteps")
            .filter(OncePerTimeInterval(min_time_s_per_reporting), name="report.once_per_interval")
            .for_each(CollectMetrics(workers, smoothing_window=smoothing_window,
                                     wait_s=metrics_wait_s).call_async,
                      name="report.collect_metrics"))


__all__ = ["StandardMetricsReporting", "CollectMetrics", "collect_metrics", "summarize_episodes",
           "OncePerTimeInterval", "OncePerTimestepsElapsed"]
