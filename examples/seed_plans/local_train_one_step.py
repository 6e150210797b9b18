"""The seeds' ``LocalTrainOneStep`` plan: every remote worker trains on its own samples.

Nothing is synced: each worker keeps its own policy. The driver only counts what
the workers sampled and trained, and reports their episodes.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import count_sampled, run  # noqa: E402

from flowrl.algorithms import AlgorithmConfig, build_algorithm  # noqa: E402
from flowrl.metrics import LEARNER_INFO, STEPS_TRAINED_COUNTER, get_metrics  # noqa: E402
from flowrl.ops import LocalTrainOneStep, StandardMetricsReporting  # noqa: E402
from flowrl.policies import PGPolicy  # noqa: E402


def record(item):
    info, count, _num_sgd_iter = item
    count_sampled(count)
    metrics = get_metrics()
    metrics.counters[STEPS_TRAINED_COUNTER] += count
    metrics.info[LEARNER_INFO] = info
    return item


def execution_plan(workers, config: AlgorithmConfig):
    train_op = (LocalTrainOneStep(workers, num_sgd_iter=1, sgd_minibatch_size=0)
                .gather_async(name="local_train.gather_async")
                .for_each(record, name="record"))
    return StandardMetricsReporting(train_op, workers,
                                    timesteps_per_iteration=config.timesteps_per_iteration)


LocalTrain = build_algorithm("local_train_one_step", AlgorithmConfig, PGPolicy, execution_plan)


def main(argv=None) -> list[dict]:
    return run(LocalTrain, AlgorithmConfig, __doc__, argv, env="CartPole-v1", num_workers=2,
               rollout_fragment_length=100, timesteps_per_iteration=400, seed=0)


if __name__ == "__main__":
    main()
