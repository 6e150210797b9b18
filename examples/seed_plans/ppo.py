"""The seeds' two PPO plans: select, concatenate, standardize, train, update KL.

``simple_optimizer=True`` trains with ``TrainOneStep`` (num_sgd_iter epochs of
minibatches); otherwise with ``MultiGPUTrainOneStep`` over ``num_gpus`` devices
(CPU towers when there are none), as the seeds' newer plan. Batch sizes count
``multiagent["count_steps_by"]``. Results pass through a check that warns (a log
line) when episode rewards dwarf ``vf_clip_param``, as the seeds do.
"""

from __future__ import annotations

import logging
import os
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import run  # noqa: E402

from flowrl.algorithms import PPOConfig, build_algorithm  # noqa: E402
from flowrl.ops import (ConcatBatches, MultiGPUTrainOneStep, ParallelRollouts,  # noqa: E402
                        SelectExperiences, StandardizeFields, StandardMetricsReporting,
                        TrainOneStep, UpdateKL)
from flowrl.policies import PPOPolicy  # noqa: E402

logger = logging.getLogger(__name__)


@dataclass
class SeedPPOConfig(PPOConfig):
    """PPO's config plus the seeds' ``simple_optimizer`` switch."""

    simple_optimizer: bool = True


def warn_about_bad_reward_scales(vf_clip_param: float, result: dict) -> dict:
    """Log a warning when the mean episode reward is far above ``vf_clip_param``
    (value targets would be clipped); returns ``result``."""
    reward = result.get("episode_reward_mean")
    if reward == reward and reward is not None and abs(reward) > 100 * vf_clip_param:
        logger.warning("episode_reward_mean %.1f is far above vf_clip_param=%s; scale "
                       "rewards or raise vf_clip_param", reward, vf_clip_param)
    return result


def execution_plan(workers, config: SeedPPOConfig):
    rollouts = ParallelRollouts(workers, mode="bulk_sync")
    # Collect batches for the trainable policies.
    rollouts = rollouts.for_each(SelectExperiences(workers.trainable_policies()),
                                 name="ppo/select")
    # Concatenate the SampleBatches into one.
    rollouts = rollouts.combine(ConcatBatches(min_batch_size=config.train_batch_size,
                                              count_steps_by=config.count_steps_by),
                                name="ppo/concat_batches")
    # Standardize advantages.
    rollouts = rollouts.for_each(StandardizeFields(["advantages"]), name="ppo/standardize")
    # One training step on the combined + standardized batch.
    sgd = dict(num_sgd_iter=config.num_sgd_iter, sgd_minibatch_size=config.sgd_minibatch_size,
               seed=config.seed)
    if config.simple_optimizer:
        train_op = rollouts.for_each(TrainOneStep(workers, **sgd), name="ppo/train")
    else:
        train_op = rollouts.for_each(
            MultiGPUTrainOneStep(workers, num_gpus=config.num_gpus, **sgd), name="ppo/train")
    # Update KL after each round of training.
    train_op = (train_op.for_each(lambda t: t[1], name="ppo/info")
                .for_each(UpdateKL(workers), name="ppo/update_kl"))
    return (StandardMetricsReporting(train_op, workers,
                                     min_time_s_per_reporting=config.min_time_s_per_reporting,
                                     timesteps_per_iteration=config.timesteps_per_iteration)
            .for_each(lambda result: warn_about_bad_reward_scales(config.vf_clip_param, result),
                      name="ppo/warn_about_bad_reward_scales"))


SeedPPO = build_algorithm("seed_ppo", SeedPPOConfig, PPOPolicy, execution_plan)


def main(argv=None, simple_optimizer: bool = True) -> list[dict]:
    return run(SeedPPO, SeedPPOConfig, __doc__, argv, env="CartPole-v1", num_workers=2,
               num_envs_per_worker=2, rollout_fragment_length=64, train_batch_size=256,
               sgd_minibatch_size=64, num_sgd_iter=4, seed=0, simple_optimizer=simple_optimizer)


if __name__ == "__main__":
    main()
