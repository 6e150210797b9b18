"""The seeds' ``AsyncGradients`` plan: workers compute gradients, the driver applies them.

Each remote worker samples and computes gradients on its own batch; the driver
applies each as it arrives and sends the new weights back to that worker only
(A3C).
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import run  # noqa: E402

from flowrl.algorithms import A2CConfig, build_algorithm  # noqa: E402
from flowrl.ops import ApplyGradients, AsyncGradients, StandardMetricsReporting  # noqa: E402
from flowrl.policies import A2CPolicy  # noqa: E402


def execution_plan(workers, config: A2CConfig):
    grads = AsyncGradients(workers)
    train_op = grads.for_each(ApplyGradients(workers, update_all=False), name="apply_gradients")
    return StandardMetricsReporting(train_op, workers,
                                    timesteps_per_iteration=config.timesteps_per_iteration)


AsyncGrads = build_algorithm("async_gradients", A2CConfig, A2CPolicy, execution_plan)


def main(argv=None) -> list[dict]:
    return run(AsyncGrads, A2CConfig, __doc__, argv, env="CartPole-v1", num_workers=2,
               rollout_fragment_length=50, timesteps_per_iteration=200, seed=0)


if __name__ == "__main__":
    main()
