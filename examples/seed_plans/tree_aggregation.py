"""The seeds' tree-aggregation sampler (``gather_experiences_tree_aggregation``).

Remote workers are split round-robin among ``num_aggregation_workers``
aggregators that live beside the driver; each gathers its group's batches and
concatenates them to ``train_batch_size`` rows; the driver gathers the
aggregators' batches as they complete, counts them as sampled and trains.
"""

from __future__ import annotations

import os
import sys
from dataclasses import dataclass

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

from _common import count_sampled, run  # noqa: E402

from flowrl.algorithms import A2CConfig, build_algorithm  # noqa: E402
from flowrl.algorithms.validators import int_ge  # noqa: E402
from flowrl.ops import (ConcatBatches, StandardMetricsReporting, TrainOneStep,  # noqa: E402
                        rollout_shards)
from flowrl.policies import A2CPolicy  # noqa: E402


@dataclass
class TreeConfig(A2CConfig):
    """A2C's config plus ``num_aggregation_workers``."""

    num_aggregation_workers: int = 2
    checks = {"num_aggregation_workers": int_ge(1)}


def record_steps_sampled(batch):
    count_sampled(batch.count)
    return batch


def gather_experiences_tree_aggregation(workers, config: TreeConfig):
    # Divide the workers between aggregators (round-robin) and let each aggregator
    # concatenate its group's batches into train-sized ones.
    return (rollout_shards(workers)
            .aggregate(config.num_aggregation_workers,
                       lambda group: group.combine(
                           ConcatBatches(min_batch_size=config.train_batch_size),
                           name="aggregator/concat"),
                       name="aggregators")
            .gather_async(name="aggregators.gather_async")
            .for_each(record_steps_sampled, name="record_steps_sampled"))


def execution_plan(workers, config: TreeConfig):
    train_op = gather_experiences_tree_aggregation(workers, config).for_each(
        TrainOneStep(workers), name="train")
    return StandardMetricsReporting(train_op, workers,
                                    timesteps_per_iteration=config.timesteps_per_iteration)


TreeAggregation = build_algorithm("tree_aggregation", TreeConfig, A2CPolicy, execution_plan)


def main(argv=None) -> list[dict]:
    return run(TreeAggregation, TreeConfig, __doc__, argv, env="CartPole-v1", num_workers=4,
               rollout_fragment_length=25, train_batch_size=100, seed=0)


if __name__ == "__main__":
    main()
