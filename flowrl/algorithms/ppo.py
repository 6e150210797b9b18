"""PPO (Schulman et al. 2017) as a plan, with defaults tuned to solve CartPole fast.

Bulk-synchronous rollouts are concatenated into a train batch, advantages are
standardized, the learner runs ``num_sgd_iter`` epochs of minibatch SGD on the
clipped surrogate, the KL coefficient adapts, and new weights go to the workers.

>>> algo = PPO(PPOConfig(env="CartPole-v1", num_workers=1, num_envs_per_worker=2,
...                      rollout_fragment_length=32, train_batch_size=128,
...                      sgd_minibatch_size=64, num_sgd_iter=2, seed=0))
>>> r = algo.train()
>>> r["timesteps_total"], r["info"]["num_steps_trained"], "kl" in r["info"]["learner"]["default_policy"]
(128, 128, True)
>>> "ppo" in algo.plan.to_dot()
True
>>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from flowrl.algorithms.base import Algorithm, AlgorithmConfig, LazyClass
from flowrl.algorithms.validators import int_ge, lr_schedule_pairs, number, one_of, or_none
from flowrl.errors import ConfigError
from flowrl.graph.stream import LocalStream
from flowrl.ops import (ConcatBatches, MultiGPUTrainOneStep, ParallelRollouts,
                        StandardizeFields, StandardMetricsReporting, TrainOneStep, UpdateKL,
                        UpdateLR)
from flowrl.ops.train_ops import piecewise_lr
from flowrl.policies.sgd import STANDARDIZE_ADVANTAGES


@dataclass
class PPOConfig(AlgorithmConfig):
    """PPO hyperparameters (RLlib 1.x names). Defaults are tuned for CartPole-v1:
    2 workers x 8 envs x 64-step fragments, 2048-step train batches, 6 epochs of
    256-row minibatches, lr 1e-3, GAE(0.99, 0.95), fused Adam, one torch thread.
    ``lr_schedule`` (RLlib 1.x; None: the constant ``lr``) replaces ``lr`` with a
    piecewise-linear rate over env steps sampled, ``[[0, lr_0], [t_1, lr_1], ...]``,
    applied before each training step (:class:`~flowrl.ops.UpdateLR`).
    ``adam_epsilon`` is Adam's ``eps`` (torch's 1e-8; CleanRL's Atari PPO uses 1e-5).
    ``standardize_advantages``: ``"batch"`` (RLlib 1.x) standardizes the advantages
    of each train batch in the plan, ``"minibatch"`` (CleanRL) those of each SGD
    minibatch in the policy, over the whole minibatch before any split over GPU
    towers.
    ``python benchmarks/ppo_cartpole.py --tuned`` measures how fast they reach a
    train mean of 450 (and ``--matched`` against other libraries at equal work).

    >>> PPOConfig(env="CartPole-v1", sgd_minibatch_size=512, train_batch_size=256)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: PPOConfig.sgd_minibatch_size=512: must be <= train_batch_size (256)
    """

    num_workers: int = 2
    num_envs_per_worker: int = 8
    rollout_fragment_length: int = 64
    train_batch_size: int = 2048
    sgd_minibatch_size: int = 256
    num_sgd_iter: int = 6
    lr: float = 1e-3
    adam_epsilon: float = 1e-8
    gamma: float = 0.99
    lambda_: float = 0.95
    clip_param: float = 0.2
    vf_clip_param: float = 10.0
    vf_loss_coeff: float = 0.5
    entropy_coeff: float = 0.0
    kl_coeff: float = 0.0
    kl_target: float = 0.01
    grad_clip: float | None = 0.5
    lr_schedule: list | None = None
    standardize_advantages: str = "batch"

    checks: ClassVar[dict[str, tuple]] = {
        "sgd_minibatch_size": int_ge(0), "num_sgd_iter": int_ge(1),
        "adam_epsilon": number(0, open_lo=True),
        "lambda_": number(0, 1), "clip_param": number(0, open_lo=True),
        "vf_clip_param": number(0, open_lo=True), "vf_loss_coeff": number(0),
        "entropy_coeff": number(0), "kl_coeff": number(0), "kl_target": number(0, open_lo=True),
        "grad_clip": or_none(number(0, open_lo=True)), "lr_schedule": or_none(lr_schedule_pairs()),
        "standardize_advantages": one_of(STANDARDIZE_ADVANTAGES),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.sgd_minibatch_size > self.train_batch_size:
            raise ConfigError(f"PPOConfig.sgd_minibatch_size={self.sgd_minibatch_size}: must be "
                              f"<= train_batch_size ({self.train_batch_size})")


class PPO(Algorithm):
    """Proximal policy optimisation; see the module docstring."""

    config_class = PPOConfig
    policy_class = LazyClass("flowrl.policies.ppo:PPOPolicy")  # torch: imported when built
    name = "ppo"

    @classmethod
    def policy_config(cls, config: PPOConfig) -> dict[str, Any]:
        # The policy's own learn_on_batch runs the same epochs and minibatches as
        # the plan's train op (both go through the one minibatch-SGD loop).
        lr = piecewise_lr(config.lr_schedule, 0) if config.lr_schedule else config.lr
        return {**super().policy_config(config), "lr": lr, "adam_epsilon": config.adam_epsilon,
                "lambda_": config.lambda_,
                "clip_param": config.clip_param, "vf_clip_param": config.vf_clip_param,
                "vf_loss_coeff": config.vf_loss_coeff, "entropy_coeff": config.entropy_coeff,
                "kl_coeff": config.kl_coeff, "kl_target": config.kl_target,
                "grad_clip": config.grad_clip, "num_sgd_iter": config.num_sgd_iter,
                "sgd_minibatch_size": config.sgd_minibatch_size or None,
                "standardize_advantages": config.standardize_advantages}

    @staticmethod
    def execution_plan(workers, config: PPOConfig) -> LocalStream:
        rollouts = ParallelRollouts(workers, mode="bulk_sync")
        sgd = dict(num_sgd_iter=config.num_sgd_iter,
                   sgd_minibatch_size=config.sgd_minibatch_size, seed=config.seed)
        train_step = (MultiGPUTrainOneStep(workers, num_gpus=config.num_gpus, **sgd)
                      if config.num_gpus > 0 else TrainOneStep(workers, **sgd))
        train_op = rollouts.combine(ConcatBatches(min_batch_size=config.train_batch_size),
                                    name="ppo/concat_batches")
        if config.standardize_advantages == "batch":  # else the policy does, per minibatch
            train_op = train_op.for_each(StandardizeFields(["advantages"]),
                                         name="ppo/standardize")
        train_op = (train_op.for_each(train_step, name="ppo/train")
                    .for_each(UpdateKL(workers), name="ppo/update_kl"))
        if config.lr_schedule:
            train_op = train_op.for_each(UpdateLR(workers, schedule=config.lr_schedule),
                                         name="ppo/update_lr")
        return StandardMetricsReporting(
            train_op, workers, min_time_s_per_reporting=config.min_time_s_per_reporting,
            timesteps_per_iteration=config.timesteps_per_iteration)


__all__ = ["PPO", "PPOConfig"]
