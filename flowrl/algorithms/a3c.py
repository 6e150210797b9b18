"""A3C (Mnih et al. 2016) as a plan: asynchronous gradients, applied as they arrive.

Each remote worker samples a fragment, computes the actor-critic gradient on it
with its own copy of the weights and sends it; the driver applies each gradient
as it arrives and sends the new weights back to that worker only:
``AsyncGradients -> ApplyGradients(update_all=False) -> metrics``.

>>> algo = A3C(A3CConfig(env="CartPole-v1", num_workers=2, seed=0))
>>> r = algo.train()
>>> r["info"]["num_steps_trained"] == r["timesteps_total"] > 0
True
>>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from flowrl.algorithms.base import Algorithm, AlgorithmConfig
from flowrl.algorithms.validators import number, or_none
from flowrl.errors import ConfigError
from flowrl.graph.stream import LocalStream
from flowrl.ops import ApplyGradients, AsyncGradients, StandardMetricsReporting
from flowrl.policies import A2CPolicy


@dataclass
class A3CConfig(AlgorithmConfig):
    """A3C hyperparameters (RLlib 1.x names and defaults, except ``lr`` (1e-3;
    RLlib 1e-4), ``num_envs_per_worker`` (4; RLlib 1), ``rollout_fragment_length``
    (20; RLlib 10) and ``min_time_s_per_reporting`` (0.5 s; RLlib 5 s), set so that
    CartPole learns in minutes on a few cores, and the model: ``fcnet_hiddens=(64,
    64)``, where RLlib 1.x used ``(256, 256)``): GAE ``lambda_``, ``vf_loss_coeff``,
    ``entropy_coeff``, ``grad_clip`` (global norm). Needs ``num_workers >= 1``.

    >>> A3CConfig(env="CartPole-v1", num_workers=0)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: A3CConfig.num_workers=0: A3C computes gradients on remote workers; set num_workers >= 1
    """

    num_workers: int = 2
    num_envs_per_worker: int = 4
    rollout_fragment_length: int = 20
    lr: float = 1e-3
    lambda_: float = 1.0
    vf_loss_coeff: float = 0.5
    entropy_coeff: float = 0.01
    grad_clip: float | None = 40.0
    min_time_s_per_reporting: float = 0.5

    checks: ClassVar[dict[str, tuple]] = {
        "lambda_": number(0, 1), "vf_loss_coeff": number(0), "entropy_coeff": number(0),
        "grad_clip": or_none(number(0, open_lo=True)),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.num_workers < 1:
            raise ConfigError(f"{type(self).__name__}.num_workers={self.num_workers}: A3C "
                              "computes gradients on remote workers; set num_workers >= 1")


class A3C(Algorithm):
    """Asynchronous advantage actor-critic; see the module docstring."""

    config_class = A3CConfig
    policy_class = A2CPolicy
    name = "a3c"
    inference_workers = 1  # gradients come from remote workers only

    @classmethod
    def policy_config(cls, config: A3CConfig) -> dict[str, Any]:
        return {**super().policy_config(config), "lambda_": config.lambda_,
                "vf_loss_coeff": config.vf_loss_coeff, "entropy_coeff": config.entropy_coeff,
                "grad_clip": config.grad_clip}

    @staticmethod
    def execution_plan(workers, config: A3CConfig) -> LocalStream:
        grads = AsyncGradients(workers, name="a3c/async_gradients")
        train_op = grads.for_each(ApplyGradients(workers, update_all=False),
                                  name="a3c/apply_gradients")
        return StandardMetricsReporting(
            train_op, workers, min_time_s_per_reporting=config.min_time_s_per_reporting,
            timesteps_per_iteration=config.timesteps_per_iteration,
            metrics_wait_s=0.0)


__all__ = ["A3C", "A3CConfig"]
