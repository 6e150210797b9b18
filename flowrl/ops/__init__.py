"""RL operators built on plan streams (RLlib 1.x names and meanings).

Rollouts (:mod:`~flowrl.ops.rollout_ops`), training (:mod:`~flowrl.ops.train_ops`,
:mod:`~flowrl.ops.multi_gpu`), gradients (:mod:`~flowrl.ops.gradient_ops`),
reporting (:mod:`~flowrl.ops.metric_ops`), off-policy estimates
(:mod:`~flowrl.ops.off_policy_ops`), learner threads and their queues
(:mod:`~flowrl.ops.learner_thread`, :mod:`~flowrl.ops.queues`) and replay mix-in
(:mod:`~flowrl.ops.mixin_replay`). Each operator's docstring lists
the counters and timers it touches.
"""

from flowrl.ops.decentralized import ForwardUpdates, LocalComputeUpdates, LocalTrainOneStep
from flowrl.ops.gradient_ops import (ApplyGradients, AsyncGradients, AverageGradients,
                                     ComputeGradients)
from flowrl.ops.learner_thread import LearnerThread
from flowrl.ops.metric_ops import (CollectMetrics, OncePerTimeInterval, OncePerTimestepsElapsed,
                                   StandardMetricsReporting, collect_metrics, summarize_episodes)
from flowrl.ops.mixin_replay import MixInReplay
from flowrl.ops.model_based import set_policy_with_env_fn, sync_ensemble, sync_stats
from flowrl.ops.multi_gpu import MultiGPUTrainOneStep
from flowrl.ops.off_policy_ops import EstimateOffPolicy
from flowrl.ops.queues import Dequeue, Enqueue
from flowrl.ops.replay_ops import (LearningStarts, Replay, StoreToReplayBuffer,
                                   UpdateReplayPriorities, UpdateTargetNetwork)
from flowrl.ops.rollout_ops import (ConcatBatches, ParallelRollouts, SelectExperiences,
                                    StandardizeFields, rollout_shards,
                                    synchronous_parallel_sample)
from flowrl.ops.train_ops import TrainOneStep, UpdateKL, UpdateLR

__all__ = ["Dequeue", "Enqueue", "ConcatBatches", "ParallelRollouts", "SelectExperiences",
           "StandardizeFields", "rollout_shards", "synchronous_parallel_sample",
           "TrainOneStep", "UpdateKL", "UpdateLR", "MultiGPUTrainOneStep", "StandardMetricsReporting",
           "CollectMetrics", "OncePerTimeInterval", "OncePerTimestepsElapsed",
           "ComputeGradients", "AsyncGradients", "ApplyGradients", "AverageGradients",
           "LearnerThread", "MixInReplay", "collect_metrics", "summarize_episodes",
           "LocalTrainOneStep", "LocalComputeUpdates", "ForwardUpdates", "sync_ensemble",
           "sync_stats", "set_policy_with_env_fn", "StoreToReplayBuffer", "LearningStarts",
           "Replay", "UpdateTargetNetwork", "UpdateReplayPriorities", "EstimateOffPolicy"]
