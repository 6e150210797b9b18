"""MARWIL and behaviour cloning (BC) as plans, with RLlib 1.x's semantics.

The workers' batches (sampled, or read from recorded experience) carry each
step's discounted return, computed when they are postprocessed; they are
concatenated into train batches, optionally scored off-policy with the policy as
it stands, and trained on with one step of MARWIL's loss
(:mod:`flowrl.policies.marwil`): advantage-weighted log-likelihood plus a value
loss, or for BC (``beta=0``) the log-likelihood alone.

>>> algo = MARWIL(MARWILConfig(env="CartPole-v1", rollout_fragment_length=100,
...                            train_batch_size=200, seed=0))
>>> r = algo.train()
>>> r["info"]["num_steps_trained"], sorted(r["off_policy_estimation"])
(200, ['is', 'wis'])
>>> "marwil/train" in algo.plan.to_dot()
True
>>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from flowrl.algorithms.base import Algorithm, AlgorithmConfig, LazyClass
from flowrl.algorithms.validators import number, or_none
from flowrl.errors import ConfigError
from flowrl.graph.stream import LocalStream
from flowrl.offline.estimators import required_columns
from flowrl.ops import (ConcatBatches, EstimateOffPolicy, ParallelRollouts,
                        StandardMetricsReporting, TrainOneStep)


@dataclass
class MARWILConfig(AlgorithmConfig):
    """MARWIL hyperparameters (RLlib 1.x names and defaults): ``beta`` (0 is
    behaviour cloning), ``vf_coeff``, ``moving_average_sqd_adv_norm_start``,
    ``moving_average_sqd_adv_norm_update_rate``, ``lr`` 1e-4, 2000-step train
    batches, one SGD step on each, no gradient clipping (``grad_clip`` None), and
    ``postprocess_inputs=True``: batches read from a dataset get their discounted
    returns computed again (a dataset recorded by another algorithm holds its own
    advantages, PPO's GAE say, which MARWIL must not read as returns).

    ``off_policy_estimation_methods`` (RLlib 1.x's ``input_evaluation``; default
    ``["is", "wis"]`` here): estimates of the policy's value from each train batch,
    before it trains, reported under ``result["off_policy_estimation"][method]``; a
    list of names among ``"is"``, ``"wis"``, ``"fqe"``, or a dict of name to
    options (``{"fqe": {"n_iters": 20}}``, :mod:`flowrl.offline.fqe`).
    Single-agent only.

    >>> MARWILConfig(env="CartPole-v1", off_policy_estimation_methods=["dr"])
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: MARWILConfig.off_policy_estimation_methods: unknown method 'dr'; choose among ['is', 'wis', 'fqe']
    """

    lr: float = 1e-4
    train_batch_size: int = 2000
    beta: float = 1.0
    vf_coeff: float = 1.0
    moving_average_sqd_adv_norm_start: float = 100.0
    moving_average_sqd_adv_norm_update_rate: float = 1e-8
    grad_clip: float | None = None
    postprocess_inputs: bool = True
    off_policy_estimation_methods: Any = field(default_factory=lambda: ["is", "wis"])

    checks: ClassVar[dict[str, tuple]] = {
        "beta": number(0), "vf_coeff": number(0),
        "moving_average_sqd_adv_norm_start": number(0, open_lo=True),
        "moving_average_sqd_adv_norm_update_rate": number(0, 1),
        "grad_clip": or_none(number(0, open_lo=True)),
    }


@dataclass
class BCConfig(MARWILConfig):
    """Behaviour cloning: MARWIL's config with ``beta=0`` (required), no off-policy
    estimates by default and ``postprocess_inputs=False`` (BC reads no returns), as
    RLlib 1.x's BC.

    >>> BCConfig(env="CartPole-v1", beta=1.0)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: BCConfig.beta=1.0: behaviour cloning is beta=0; use MARWILConfig for beta > 0
    """

    beta: float = 0.0
    postprocess_inputs: bool = False
    off_policy_estimation_methods: Any = field(default_factory=list)

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.beta != 0:
            raise ConfigError(f"BCConfig.beta={self.beta!r}: behaviour cloning is beta=0; "
                              "use MARWILConfig for beta > 0")


def offline_learning_plan(workers, config: MARWILConfig, name: str, *,
                          estimate: EstimateOffPolicy | None = None) -> LocalStream:
    """MARWIL's and BC's plan: rollouts (or recorded batches) -> train batches ->
    off-policy estimates (when asked; ``estimate`` is the operator to use, else one
    is built from the config) -> one training step; node ids start with ``name``."""
    train_op = ParallelRollouts(workers, mode="bulk_sync").combine(
        ConcatBatches(min_batch_size=config.train_batch_size,
                      count_steps_by=config.count_steps_by), name=f"{name}/concat_batches")
    if config.off_policy_estimation_methods:
        if estimate is None:
            estimate = off_policy_estimator(workers, config)
        train_op = train_op.for_each(estimate, name=f"{name}/estimate_off_policy")
    train_op = train_op.for_each(TrainOneStep(workers), name=f"{name}/train")
    return StandardMetricsReporting(
        train_op, workers, min_time_s_per_reporting=config.min_time_s_per_reporting,
        timesteps_per_iteration=config.timesteps_per_iteration)


def off_policy_estimator(workers, config: MARWILConfig) -> EstimateOffPolicy:
    """The plan's :class:`~flowrl.ops.off_policy_ops.EstimateOffPolicy` for
    ``config.off_policy_estimation_methods``."""
    return EstimateOffPolicy(workers, methods=config.off_policy_estimation_methods,
                             gamma=config.gamma, seed=config.seed)


class MARWIL(Algorithm):
    """Monotonic advantage re-weighted imitation learning; see the module docstring.
    ``algo.off_policy_estimator`` is the plan's off-policy estimation operator (None
    without ``off_policy_estimation_methods``); its state (FQE's fit) goes into
    checkpoints."""

    config_class = MARWILConfig
    policy_class = LazyClass("flowrl.policies.marwil:MARWILPolicy")
    name = "marwil"

    def __init__(self, config: MARWILConfig | None = None, **fields: Any):
        self.off_policy_estimator = None

        def plan(workers, config):
            if config.off_policy_estimation_methods:
                self.off_policy_estimator = off_policy_estimator(workers, config)
            return type(self).execution_plan(workers, config,
                                             estimate=self.off_policy_estimator)

        self.execution_plan = plan  # the built plan's estimator stays reachable for checkpoints
        super().__init__(config, **fields)

    # -- checkpoints ---------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        """The off-policy estimators' state (FQE's fit), when the plan estimates."""
        if self.off_policy_estimator is None:
            return {}
        return {"off_policy_estimation": self.off_policy_estimator.get_state()}

    def restore_extra_state(self, state: dict[str, Any]) -> None:
        if self.off_policy_estimator is not None:
            self.off_policy_estimator.set_state(state.get("off_policy_estimation") or {})

    @classmethod
    def policy_config(cls, config: MARWILConfig) -> dict[str, Any]:
        return {**super().policy_config(config), "beta": config.beta,
                "vf_coeff": config.vf_coeff, "grad_clip": config.grad_clip,
                "moving_average_sqd_adv_norm_start": config.moving_average_sqd_adv_norm_start,
                "moving_average_sqd_adv_norm_update_rate":
                    config.moving_average_sqd_adv_norm_update_rate}

    @classmethod
    def input_columns(cls, config: MARWILConfig) -> tuple[str, ...]:
        """A dataset's columns: the default ones, plus the behaviour's ``action_logp``
        when importance sampling estimates (``"is"``, ``"wis"``) are asked."""
        return (*super().input_columns(config),
                *required_columns(config.off_policy_estimation_methods))

    @staticmethod
    def execution_plan(workers, config: MARWILConfig, *,
                       estimate: EstimateOffPolicy | None = None) -> LocalStream:
        return offline_learning_plan(workers, config, "marwil", estimate=estimate)


class BC(MARWIL):
    """Behaviour cloning: MARWIL with ``beta=0`` and a policy without a value function.

    >>> with BC(env="CartPole-v1", rollout_fragment_length=100, train_batch_size=100,
    ...         seed=0) as algo:
    ...     r = algo.train()
    >>> r["info"]["learner"]["default_policy"]["policy_loss"] > 0
    True
    """

    config_class = BCConfig
    policy_class = LazyClass("flowrl.policies.marwil:BCPolicy")
    name = "bc"

    @staticmethod
    def execution_plan(workers, config: BCConfig, *,
                       estimate: EstimateOffPolicy | None = None) -> LocalStream:
        return offline_learning_plan(workers, config, "bc", estimate=estimate)


__all__ = ["MARWIL", "MARWILConfig", "BC", "BCConfig", "offline_learning_plan",
           "off_policy_estimator"]
