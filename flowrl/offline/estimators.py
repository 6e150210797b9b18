"""Off-policy estimation: the value of a target policy π from steps a behaviour
policy μ logged (RLlib 1.x's ``is`` and ``wis``; ``fqe`` is in :mod:`flowrl.offline.fqe`).

Per logged episode (a run of rows with one ``eps_id``; a piece of an episode
counts from its first row), with ``ρ_k = π(a_k|s_k) / μ(a_k|s_k)`` and the
cumulative ratio ``p_t = ρ_0 ρ_1 ... ρ_t``:

- ``v_behavior = Σ_t γ^t r_t``, the logged discounted return;
- importance sampling (step-wise IS): ``v_target = Σ_t γ^t p_t r_t``;
- weighted IS: ``v_target = Σ_t γ^t (p_t / w_t) r_t``, where ``w_t`` is the mean of
  ``p_t`` over the episodes of the same estimate that reach step ``t``; biased,
  with far less variance than IS.

μ's log-probabilities come from the batch's ``action_logp`` column (RLlib 1.x's
JSON files carry ``action_prob``, read as its log); π's from
``policy.compute_log_likelihoods(batch)``. An estimate reports the means over
its episodes of ``v_behavior`` and ``v_target``, their standard deviations
(``v_behavior_std``, ``v_target_std``), ``v_gain = v_target / v_behavior`` (of the
means) and ``num_episodes``. The maths are the pure functions
:func:`importance_sampling` and :func:`weighted_importance_sampling`; the
estimators (:class:`ImportanceSampling`, :class:`WeightedImportanceSampling`)
only read batches and policies for them.
"""

from __future__ import annotations

import math
from typing import Any, Mapping, Sequence

import numpy as np

from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError

SB = SampleBatch
#: The estimate methods, by the name ``off_policy_estimation_methods`` gives them.
METHODS = ("is", "wis", "fqe")
#: RLlib 1.x's column of the behaviour policy's action probabilities.
ACTION_PROB = "action_prob"
#: The column a batch gets with the target policy's log-likelihoods of its actions.
TARGET_LOGP = "target_logp"


def discounts(n: int, gamma: float) -> np.ndarray:
    """``[1, γ, γ², ..., γ^(n-1)]`` as float64.

    >>> discounts(3, 0.5).tolist()
    [1.0, 0.5, 0.25]
    """
    return gamma ** np.arange(n, dtype=np.float64)


def cumulative_ratios(behaviour_logp, target_logp) -> np.ndarray:
    """``p_t = Π_{k<=t} π(a_k|s_k) / μ(a_k|s_k)`` for one episode, float64 ``(T,)``,
    from the log-probabilities ``(T,)`` of its logged actions.

    >>> cumulative_ratios(np.log([0.5, 0.5]), np.log([1.0, 0.25])).tolist()
    [2.0, 1.0]
    """
    diff = np.asarray(target_logp, np.float64) - np.asarray(behaviour_logp, np.float64)
    return np.exp(np.cumsum(diff))


def importance_sampling(rewards, behaviour_logp, target_logp, *,
                        gamma: float) -> tuple[float, float]:
    """``(v_behavior, v_target)`` of one episode by step-wise importance sampling:
    ``Σ_t γ^t r_t`` and ``Σ_t γ^t p_t r_t``. Shapes ``(T,)``.

    >>> importance_sampling([1.0, 1.0], np.log([0.5, 0.5]), np.log([1.0, 0.5]), gamma=1.0)
    (2.0, 4.0)
    """
    r = np.asarray(rewards, np.float64)
    g = discounts(len(r), gamma)
    p = cumulative_ratios(behaviour_logp, target_logp)
    return float((g * r).sum()), float((g * p * r).sum())


def weighted_importance_sampling(episodes: Sequence[tuple[Any, Any, Any]], *,
                                 gamma: float) -> list[tuple[float, float]]:
    """``(v_behavior, v_target)`` per episode by step-wise weighted importance
    sampling over ``episodes``, each ``(rewards, behaviour_logp, target_logp)`` of
    shape ``(T_i,)``: ``p_t`` is divided by ``w_t``, the mean of ``p_t`` over the
    episodes that reach step ``t`` (so the mean over episodes of the weights at
    each step is 1).

    >>> eps = [([1.0], np.log([0.5]), np.log([0.75])), ([0.0], np.log([0.5]), np.log([0.25]))]
    >>> weighted_importance_sampling(eps, gamma=1.0)
    [(1.0, 1.5), (0.0, 0.0)]
    """
    ratios = [cumulative_ratios(b, t) for _, b, t in episodes]
    horizon = max((len(p) for p in ratios), default=0)
    total, count = np.zeros(horizon), np.zeros(horizon)
    for p in ratios:
        total[:len(p)] += p
        count[:len(p)] += 1
    w = total / np.maximum(count, 1)
    out = []
    for (rewards, _, _), p in zip(episodes, ratios):
        r = np.asarray(rewards, np.float64)
        g = discounts(len(r), gamma)
        weights = np.divide(p, w[:len(p)], out=np.zeros_like(p), where=w[:len(p)] > 0)
        out.append((float((g * r).sum()), float((g * weights * r).sum())))
    return out


def summarize_estimates(pairs: Sequence[tuple[float, float]]) -> dict[str, float]:
    """What an estimate reports from ``(v_behavior, v_target)`` per episode: the
    means, their standard deviations, ``v_gain`` (ratio of the means; NaN when
    ``v_behavior`` is 0) and ``num_episodes``.

    >>> summarize_estimates([(1.0, 2.0), (3.0, 4.0)])["v_gain"]
    1.5
    """
    if not pairs:
        return {"v_behavior": math.nan, "v_target": math.nan, "v_gain": math.nan,
                "v_behavior_std": math.nan, "v_target_std": math.nan, "num_episodes": 0}
    arr = np.asarray(pairs, np.float64)
    vb, vt = arr.mean(axis=0)
    return {"v_behavior": float(vb), "v_target": float(vt),
            "v_gain": float(vt / vb) if vb != 0 else math.nan,
            "v_behavior_std": float(arr[:, 0].std()), "v_target_std": float(arr[:, 1].std()),
            "num_episodes": len(arr)}


def behaviour_logp(batch: SampleBatch, where: str) -> np.ndarray:
    """The behaviour policy's log-probabilities of ``batch``'s actions: its
    ``action_logp`` column, or the log of RLlib 1.x's ``action_prob``; a ConfigError
    naming ``where`` without either."""
    if SB.ACTION_LOGP in batch:
        return np.asarray(batch[SB.ACTION_LOGP], np.float64)
    if ACTION_PROB in batch:
        with np.errstate(divide="ignore"):
            return np.log(np.asarray(batch[ACTION_PROB], np.float64))
    raise ConfigError(f"{where}: the batch has no 'action_logp' (or 'action_prob') column, "
                      "the behaviour policy's log-probability of each logged action, which "
                      "importance sampling weighs by; record the data with a flowrl sampler "
                      f"(it writes action_logp) or add the column (columns: {sorted(batch)})")


def with_target_logp(batch: SampleBatch, policy: Any) -> SampleBatch:
    """``batch`` plus :data:`TARGET_LOGP`, ``policy``'s log-likelihoods of its actions."""
    return batch.with_columns(**{TARGET_LOGP: policy.compute_log_likelihoods(batch)})


class ImportanceSampling:
    """Step-wise importance sampling (``"is"``): ``estimate(batch, policy)`` returns
    :func:`summarize_estimates` of :func:`importance_sampling` over ``batch``'s
    episodes. Keeps no state.

    >>> class Halves:  # a target policy taking every logged action with probability 1/2
    ...     def compute_log_likelihoods(self, batch):
    ...         return np.log(np.full(batch.count, 0.5))
    >>> b = SB(eps_id=[0, 0, 1], rewards=[1.0, 1.0, 1.0], action_logp=np.log([0.25, 0.5, 1.0]))
    >>> ImportanceSampling(gamma=1.0).estimate(b, Halves())["v_target"]
    2.25
    """

    name = "is"

    def __init__(self, *, gamma: float):
        if not 0 <= gamma <= 1:
            raise ConfigError(f"{type(self).__name__}(gamma={gamma!r}): must be in [0, 1]")
        self.gamma = gamma

    def episodes(self, batch: SampleBatch, policy: Any) -> list[tuple[Any, Any, Any]]:
        """``(rewards, behaviour_logp, target_logp)`` of each episode in ``batch``."""
        where = f"off-policy estimate {self.name!r}"
        blogp = behaviour_logp(batch, where)
        batch = with_target_logp(batch.with_columns(**{SB.ACTION_LOGP: blogp}), policy)
        return [(e[SB.REWARDS], e[SB.ACTION_LOGP], e[TARGET_LOGP])
                for e in batch.split_by_episode()]

    def pairs(self, batch: SampleBatch, policy: Any) -> list[tuple[float, float]]:
        """``(v_behavior, v_target)`` per episode of ``batch``."""
        return [importance_sampling(r, b, t, gamma=self.gamma)
                for r, b, t in self.episodes(batch, policy)]

    def estimate(self, batch: SampleBatch, policy: Any) -> dict[str, float]:
        return summarize_estimates(self.pairs(batch, policy))


class WeightedImportanceSampling(ImportanceSampling):
    """Step-wise weighted importance sampling (``"wis"``) over the episodes of each
    batch it is given (:func:`weighted_importance_sampling`). Keeps no state.

    >>> class Halves:
    ...     def compute_log_likelihoods(self, batch):
    ...         return np.log(np.full(batch.count, 0.5))
    >>> b = SB(eps_id=[0, 1], rewards=[2.0, 0.0], action_logp=np.log([0.25, 1.0]))
    >>> WeightedImportanceSampling(gamma=1.0).estimate(b, Halves())["v_target"]
    1.6
    """

    name = "wis"

    def pairs(self, batch: SampleBatch, policy: Any) -> list[tuple[float, float]]:
        return weighted_importance_sampling(self.episodes(batch, policy), gamma=self.gamma)


def method_options(methods: Any, where: str) -> dict[str, dict[str, Any]]:
    """``off_policy_estimation_methods`` as ``{method: options}``: a list of names
    (each with no options) or a dict of name to options (``{"fqe": {"n_iters":
    10}}``); a ConfigError naming ``where`` for anything else.

    >>> method_options(["is", "fqe"], "x")
    {'is': {}, 'fqe': {}}
    >>> method_options(["isx"], "cfg")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: cfg: unknown method 'isx'; choose among ['is', 'wis', 'fqe']
    """
    if isinstance(methods, Mapping):
        table = dict(methods)
    elif isinstance(methods, (list, tuple)) and all(isinstance(m, str) for m in methods):
        table = {m: {} for m in methods}
    else:
        raise ConfigError(f"{where}={methods!r}: give a list of method names among "
                          f"{list(METHODS)}, or a dict of name to options")
    for name, options in table.items():
        if name not in METHODS:
            raise ConfigError(f"{where}: unknown method {name!r}; choose among {list(METHODS)}")
        if options is None:
            table[name] = {}
        elif not isinstance(options, Mapping):
            raise ConfigError(f"{where}[{name!r}]={options!r}: give a dict of options")
        else:
            table[name] = dict(options)
    return table


def make_estimator(method: str, options: Mapping[str, Any], *, gamma: float, policy: Any,
                   seed: int | None = None) -> Any:
    """The estimator ``method`` names (:data:`METHODS`) for ``policy``, built with
    ``options`` (FQE's: :class:`flowrl.offline.fqe.FittedQEvaluation`); a ConfigError
    for an option it does not take."""
    if method == "fqe":
        from flowrl.offline.fqe import FittedQEvaluation
        cls, kwargs = FittedQEvaluation, {"seed": seed, **options,
                                           "observation_space": policy.observation_space,
                                           "action_space": policy.action_space}
    else:
        cls = ImportanceSampling if method == "is" else WeightedImportanceSampling
        kwargs = dict(options)
    try:
        return cls(gamma=gamma, **kwargs)
    except TypeError as e:
        raise ConfigError(f"off_policy_estimation_methods[{method!r}]: {e}") from None


def required_columns(methods: Any) -> tuple[str, ...]:
    """The columns a dataset needs for ``methods`` beyond observations, actions,
    rewards and ends: the behaviour's ``action_logp`` for ``"is"`` and ``"wis"``.

    >>> required_columns(["wis"]), required_columns({"fqe": {}})
    (('action_logp',), ())
    """
    return (SB.ACTION_LOGP,) if {"is", "wis"} & set(method_options(methods, "methods")) else ()


def make_estimators(methods: Any, *, gamma: float, policy: Any, seed: int | None = None,
                    where: str = "off_policy_estimation_methods") -> dict[str, Any]:
    """``{method: estimator}`` for ``methods`` (a list of names or a dict of name to
    options, :func:`method_options`), each built by :func:`make_estimator`."""
    return {name: make_estimator(name, options, gamma=gamma, policy=policy, seed=seed)
            for name, options in method_options(methods, where).items()}


def estimators_state(estimators: dict[str, Any]) -> dict[str, Any]:
    """``{method: state}`` of those of ``estimators`` that learn as they estimate
    (FQE's fit, :meth:`~flowrl.offline.fqe.FittedQEvaluation.get_state`), for
    checkpoints; the others keep no state."""
    return {name: est.get_state() for name, est in estimators.items()
            if hasattr(est, "get_state")}


def restore_estimators(estimators: dict[str, Any], state: dict[str, Any]) -> None:
    """Restore what :func:`estimators_state` returned; a method without saved state
    (added since the checkpoint) starts afresh."""
    for name, est in estimators.items():
        if name in state and hasattr(est, "set_state"):
            est.set_state(state[name])


def whole_episodes(batch: SampleBatch, limit: int | None = None) -> SampleBatch:
    """``batch``'s rows regrouped into whole episodes: each ``eps_id``'s rows
    together, in ``t`` order, episodes in the order they first appear; only the
    first ``limit`` episodes (all with None). A dataset recorded by several envs
    interleaves their episodes' pieces; estimates want each episode in one piece.

    >>> b = SampleBatch(eps_id=[4, 9, 4, 9, 7], t=[0, 0, 1, 1, 0], rewards=[1, 2, 3, 4, 5])
    >>> whole_episodes(b)["rewards"].tolist(), whole_episodes(b, 1)["t"].tolist()
    ([1, 3, 2, 4, 5], [0, 1])
    """
    if SB.EPS_ID not in batch:
        return batch if limit is None else SampleBatch.concat_samples(
            batch.split_by_episode()[:limit])
    eps = np.asarray(batch[SB.EPS_ID])
    ids, first, inverse = np.unique(eps, return_index=True, return_inverse=True)
    rank_of = np.empty(len(ids), np.int64)   # an episode's place by first appearance
    rank_of[np.argsort(first, kind="stable")] = np.arange(len(ids))
    rank = rank_of[inverse.reshape(-1)]
    t = np.asarray(batch[SB.T]) if SB.T in batch else np.arange(len(eps))
    rows = np.lexsort((t, rank))
    rows = rows[rank[rows] < (len(ids) if limit is None else limit)]
    return SampleBatch({k: np.asarray(v)[rows] for k, v in batch.items()})


__all__ = ["METHODS", "ImportanceSampling", "WeightedImportanceSampling", "importance_sampling",
           "weighted_importance_sampling", "cumulative_ratios", "summarize_estimates",
           "method_options", "make_estimator", "make_estimators", "behaviour_logp",
           "required_columns", "estimators_state", "restore_estimators",
           "whole_episodes"]
