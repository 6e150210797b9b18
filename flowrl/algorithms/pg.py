"""Vanilla policy gradient (REINFORCE) as a plan.

>>> algo = PG(PGConfig(env="CartPole-v1", rollout_fragment_length=50, train_batch_size=100,
...                    seed=0))
>>> r = algo.train()
>>> r["timesteps_total"], r["training_iteration"]
(100, 1)
>>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass

from flowrl.algorithms.base import Algorithm, AlgorithmConfig
from flowrl.graph.stream import LocalStream
from flowrl.ops import ConcatBatches, ParallelRollouts, StandardMetricsReporting, TrainOneStep
from flowrl.policies import PGPolicy


@dataclass
class PGConfig(AlgorithmConfig):
    """PG hyperparameters; defaults follow RLlib 1.x PG (no remote workers, lr 4e-4,
    200-step fragments and batches, gamma 0.99), except the model: flowrl's default
    MLP is ``fcnet_hiddens=(64, 64)`` (tanh), where RLlib 1.x used ``(256, 256)``.
    Pass ``model=(256, 256)`` for RLlib's network."""

    lr: float = 4e-4
    rollout_fragment_length: int = 200
    train_batch_size: int = 200


class PG(Algorithm):
    """REINFORCE: sample, concatenate to ``train_batch_size``, one gradient step."""

    config_class = PGConfig
    policy_class = PGPolicy
    name = "pg"

    @staticmethod
    def execution_plan(workers, config: PGConfig) -> LocalStream:
        train_op = (ParallelRollouts(workers, mode="bulk_sync")
                    .combine(ConcatBatches(min_batch_size=config.train_batch_size),
                             name="pg/concat_batches")
                    .for_each(TrainOneStep(workers), name="pg/train"))
        return StandardMetricsReporting(
            train_op, workers, min_time_s_per_reporting=config.min_time_s_per_reporting,
            timesteps_per_iteration=config.timesteps_per_iteration)


__all__ = ["PG", "PGConfig"]
