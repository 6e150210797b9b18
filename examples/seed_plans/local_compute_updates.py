"""The seeds' ``LocalComputeUpdates`` plan: ASP training without a central learner.

Each remote worker trains on its own samples and sends only the significant part
of its parameter change; the driver adds it to its copy and forwards it to the
other workers (``ForwardUpdates``).
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import run  # noqa: E402

from flowrl.algorithms import AlgorithmConfig, build_algorithm  # noqa: E402
from flowrl.algorithms.validators import number  # noqa: E402
from flowrl.ops import ForwardUpdates, LocalComputeUpdates, StandardMetricsReporting  # noqa: E402
from flowrl.policies import PGPolicy  # noqa: E402


@dataclass
class ASPConfig(AlgorithmConfig):
    """Adds ``significance_threshold``: deltas at or below it stay on the worker."""

    significance_threshold: float = 1e-4
    checks = {"significance_threshold": number(0)}


def execution_plan(workers, config: ASPConfig):
    train_op = (LocalComputeUpdates(workers, config.significance_threshold)
                .gather_async(name="asp.gather_async")
                .for_each(ForwardUpdates(workers), name="forward_updates"))
    return StandardMetricsReporting(train_op, workers,
                                    timesteps_per_iteration=config.timesteps_per_iteration)


ASP = build_algorithm("local_compute_updates", ASPConfig, PGPolicy, execution_plan)


def main(argv=None) -> list[dict]:
    return run(ASP, ASPConfig, __doc__, argv, env="CartPole-v1", num_workers=2,
               rollout_fragment_length=100, timesteps_per_iteration=400, lr=1e-2, seed=0)


if __name__ == "__main__":
    main()
