"""The seeds' sample-only plan: async rollouts of the trainable policies, reported.

No training: experience is collected from every worker as it arrives, filtered to
the trainable policies' rows, and the results report what was sampled.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import run  # noqa: E402

from flowrl.algorithms import AlgorithmConfig, build_algorithm  # noqa: E402
from flowrl.ops import ParallelRollouts, SelectExperiences, StandardMetricsReporting  # noqa: E402
from flowrl.policies import PGPolicy  # noqa: E402


def execution_plan(workers, config: AlgorithmConfig):
    rollouts = ParallelRollouts(workers, mode="async")
    # Collect batches for the trainable policies.
    rollouts = rollouts.for_each(SelectExperiences(workers.trainable_policies()),
                                 name="select_trainable")
    return StandardMetricsReporting(rollouts, workers,
                                    min_time_s_per_reporting=config.min_time_s_per_reporting,
                                    timesteps_per_iteration=config.timesteps_per_iteration)


SampleOnly = build_algorithm("sample_only", AlgorithmConfig, PGPolicy, execution_plan)


def main(argv=None) -> list[dict]:
    return run(SampleOnly, AlgorithmConfig, __doc__, argv, env="CartPole-v1", num_workers=2,
               rollout_fragment_length=50, timesteps_per_iteration=200, seed=0)


if __name__ == "__main__":
    main()
