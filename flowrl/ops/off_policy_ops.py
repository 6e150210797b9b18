"""``EstimateOffPolicy``: off-policy estimates of the learner's policy on each batch
the plan trains on, reported under ``result["off_policy_estimation"]``.

Each batch is estimated with the local worker's policy as it is before the batch
trains it (the target π), against the logged behaviour μ
(:mod:`flowrl.offline.estimators`, :mod:`flowrl.offline.fqe`). The estimates wait in
the run's metrics (``info["off_policy_estimates"]``) until the next report, where
:class:`~flowrl.ops.metric_ops.CollectMetrics` puts their mean per method into the
result (:func:`report_estimates`) and clears them.
"""

from __future__ import annotations

import math
from typing import Any

from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError
from flowrl.metrics import get_metrics
from flowrl.offline.estimators import (estimators_state, make_estimators, method_options,
                                       restore_estimators)

#: ``MetricsContext.info`` key of the estimates made since the last report.
OFF_POLICY_ESTIMATES = "off_policy_estimates"
#: The result key the estimates are reported under.
OFF_POLICY_ESTIMATION = "off_policy_estimation"
#: The timer around estimating (``off_policy_estimation_time_ms`` in results).
ESTIMATE_TIMER = "off_policy_estimation"


class EstimateOffPolicy:
    """``for_each(EstimateOffPolicy(workers, methods=["is", "wis"], gamma=0.99))``
    before a train op: estimates each batch (see the module docstring) and passes
    it on unchanged.

    ``methods``: a list of names among ``"is"``, ``"wis"``, ``"fqe"``, or a dict of
    name to options (:func:`~flowrl.offline.estimators.method_options`);
    ``policy_id``: the policy estimated (its rows of a multi-agent batch);
    ``seed`` seeds FQE's network and minibatches. The estimators are built now, so
    a method the policy cannot take (FQE with a continuous action space) is a
    ConfigError when the plan is built.

    Metrics: appends to ``info["off_policy_estimates"]`` (per method, one dict per
    batch); timer ``off_policy_estimation`` (units: rows estimated).

    State: the estimators that learn as they go (FQE's fit) give theirs through
    :meth:`get_state`, which an algorithm puts into its checkpoints.

    >>> import flowrl
    >>> from flowrl.ops import ParallelRollouts
    >>> from flowrl.policies import PGPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=100,
    ...                seed=0), num_workers=0, backend="local")
    >>> run = flowrl.Plan(ParallelRollouts(ws).for_each(
    ...     EstimateOffPolicy(ws, methods=["is"], gamma=0.99))).compile()
    >>> _ = next(run)
    >>> est = report_estimates(run.metrics)["is"]
    >>> round(est["v_target"] / est["v_behavior"], 4)   # its own data: every ratio is 1
    1.0
    >>> run.stop(); ws.stop()
    """

    def __init__(self, workers, *, methods: Any, gamma: float,
                 policy_id: str = "default_policy", seed: int | None = None):
        table = method_options(methods, "EstimateOffPolicy(methods)")
        if not table:
            raise ConfigError("EstimateOffPolicy(methods=[]): give at least one method, or "
                              "leave the operator out of the plan")
        self.workers, self.policy_id = workers, policy_id
        self.estimators = make_estimators(table, gamma=gamma, seed=seed,
                                          policy=workers.local_worker().get_policy(policy_id))

    def get_state(self) -> dict[str, Any]:
        """The estimators' state (:func:`~flowrl.offline.estimators.estimators_state`)."""
        return estimators_state(self.estimators)

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned."""
        restore_estimators(self.estimators, state)

    def __call__(self, batch: SampleBatch | MultiAgentBatch) -> Any:
        rows = batch
        if isinstance(batch, MultiAgentBatch):
            rows = batch.policy_batches.get(self.policy_id)
            if rows is None or rows.count == 0:
                return batch
        policy = self.workers.local_worker().get_policy(self.policy_id)
        metrics = get_metrics()
        pending = metrics.info.setdefault(OFF_POLICY_ESTIMATES, {})
        timer = metrics.timers[ESTIMATE_TIMER]
        with timer:
            for name, estimator in self.estimators.items():
                pending.setdefault(name, []).append(estimator.estimate(rows, policy))
        timer.push_units_processed(rows.count)
        return batch


def mean_estimates(estimates: list[dict[str, float]]) -> dict[str, float]:
    """One method's estimates of several batches as one: each figure's mean over
    the batches, weighted by their ``num_episodes`` (NaN figures left out; the
    standard deviations too, so they stay per-batch figures), ``v_gain`` the ratio
    of the mean ``v_target`` to the mean ``v_behavior``, and the total
    ``num_episodes``.

    >>> mean_estimates([{"v_behavior": 2.0, "v_target": 1.0, "num_episodes": 1},
    ...                 {"v_behavior": 2.0, "v_target": 4.0, "num_episodes": 3}])
    {'v_behavior': 2.0, 'v_target': 3.25, 'num_episodes': 4, 'v_gain': 1.625}
    """
    out: dict[str, float] = {}
    weights = [e.get("num_episodes", 1) for e in estimates]
    for key in dict.fromkeys(k for e in estimates for k in e):
        if key == "num_episodes":
            continue
        pairs = [(e[key], w) for e, w in zip(estimates, weights)
                 if key in e and not math.isnan(e[key]) and w > 0]
        total = sum(w for _, w in pairs)
        out[key] = sum(v * w for v, w in pairs) / total if total else math.nan
    out["num_episodes"] = int(sum(weights))
    if "v_behavior" in out and "v_target" in out:
        out["v_gain"] = (out["v_target"] / out["v_behavior"] if out["v_behavior"] != 0
                         else math.nan)
    return out


def report_estimates(metrics) -> dict[str, dict[str, float]]:
    """``{method: mean estimate}`` of the estimates ``metrics`` holds since the last
    report (:func:`mean_estimates`), which it clears; empty when there are none."""
    pending = metrics.info.pop(OFF_POLICY_ESTIMATES, None) or {}
    return {name: mean_estimates(estimates) for name, estimates in pending.items()
            if estimates}


__all__ = ["EstimateOffPolicy", "report_estimates", "mean_estimates", "OFF_POLICY_ESTIMATION"]
