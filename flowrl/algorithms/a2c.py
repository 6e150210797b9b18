"""Synchronous advantage actor-critic (A2C) as a plan.

>>> algo = A2C(A2CConfig(env="CartPole-v1", num_envs_per_worker=1, rollout_fragment_length=20,
...                      train_batch_size=40, seed=0))
>>> r = algo.train()
>>> r["timesteps_total"], sorted(r["info"]["learner"]["default_policy"])[:2]
(40, ['cur_lr', 'entropy'])
>>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from flowrl.algorithms.base import Algorithm, AlgorithmConfig
from flowrl.algorithms.validators import number, or_none
from flowrl.graph.stream import LocalStream
from flowrl.ops import ConcatBatches, ParallelRollouts, StandardMetricsReporting, TrainOneStep
from flowrl.policies import A2CPolicy


@dataclass
class A2CConfig(AlgorithmConfig):
    """A2C hyperparameters (RLlib 1.x names): GAE ``lambda_``, ``vf_loss_coeff``,
    ``entropy_coeff``, ``grad_clip`` (global norm)."""

    num_envs_per_worker: int = 8
    rollout_fragment_length: int = 20
    train_batch_size: int = 500
    lr: float = 7e-4
    lambda_: float = 1.0
    vf_loss_coeff: float = 0.5
    entropy_coeff: float = 0.01
    grad_clip: float | None = 40.0

    checks: ClassVar[dict[str, tuple]] = {
        "lambda_": number(0, 1), "vf_loss_coeff": number(0), "entropy_coeff": number(0),
        "grad_clip": or_none(number(0, open_lo=True)),
    }


class A2C(Algorithm):
    """Sample in bulk, concatenate to ``train_batch_size``, one actor-critic step."""

    config_class = A2CConfig
    policy_class = A2CPolicy
    name = "a2c"

    @classmethod
    def policy_config(cls, config: A2CConfig) -> dict[str, Any]:
        return {**super().policy_config(config), "lambda_": config.lambda_,
                "vf_loss_coeff": config.vf_loss_coeff, "entropy_coeff": config.entropy_coeff,
                "grad_clip": config.grad_clip}

    @staticmethod
    def execution_plan(workers, config: A2CConfig) -> LocalStream:
        train_op = (ParallelRollouts(workers, mode="bulk_sync")
                    .combine(ConcatBatches(min_batch_size=config.train_batch_size),
                             name="a2c/concat_batches")
                    .for_each(TrainOneStep(workers), name="a2c/train"))
        return StandardMetricsReporting(
            train_op, workers, min_time_s_per_reporting=config.min_time_s_per_reporting,
            timesteps_per_iteration=config.timesteps_per_iteration)


__all__ = ["A2C", "A2CConfig"]
