"""Tree aggregation over rollout workers (the IMPALA pattern).

Four rollout workers are split round-robin into two groups; each group is gathered
by its own aggregator (an actor beside the driver on Ray, an in-process object on
the local backend), which concatenates its workers' fragments into train-sized
batches. The driver gathers the aggregators' batches as they complete and trains
on them, so it handles a few large batches instead of many small ones.

    python examples/tree_aggregation.py [--backend local|ray] [--iters N]
"""

from __future__ import annotations

import argparse
import os

import flowrl
from flowrl.algorithms import A2C, A2CConfig
from flowrl.batch import SampleBatch
from flowrl.metrics import STEPS_SAMPLED_COUNTER
from flowrl.ops import ConcatBatches, StandardMetricsReporting, TrainOneStep, rollout_shards
from flowrl.policies import A2CPolicy
from flowrl.workers import WorkerSet


def count_sampled(batch: SampleBatch) -> SampleBatch:
    """Driver-side: count the env steps that reached the learner (results use it)."""
    flowrl.get_metrics().counters[STEPS_SAMPLED_COUNTER] += batch.count
    return batch


def build_plan(workers: WorkerSet, *, num_aggregators: int, batch_size: int) -> flowrl.Plan:
    # One shard per remote worker: each is that worker's sample() called forever.
    shards = rollout_shards(workers)
    # Each aggregator runs this pipeline over its group's local stream.
    aggregated = shards.aggregate(
        num_aggregators,
        lambda group: group.combine(ConcatBatches(min_batch_size=batch_size),
                                    name="concat_on_aggregator"),
        name="aggregators")
    train_op = (aggregated.gather_async()            # big batches, as they complete
                .for_each(count_sampled, name="count_sampled")
                .for_each(TrainOneStep(workers), name="train"))
    return flowrl.Plan(StandardMetricsReporting(train_op, workers), name="tree_aggregation")


def main(argv=None) -> list:
    small = os.environ.get("CI") == "true"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--backend", default="local", choices=["local", "ray"])
    p.add_argument("--iters", type=int, default=3 if small else 30)
    args = p.parse_args(argv)
    config = A2CConfig(env="CartPole-v1", num_envs_per_worker=2, rollout_fragment_length=25,
                       seed=0, backend=args.backend, num_workers=4)
    if args.backend == "ray":
        import ray
        ray.init(ignore_reinit_error=True, include_dashboard=False)
    workers = WorkerSet(config.env, A2CPolicy, A2C.worker_config(config),
                        num_workers=config.num_workers, backend=args.backend)
    plan = build_plan(workers, num_aggregators=2, batch_size=200)
    results = []
    with plan.compile(seed=0) as run:
        for _ in range(args.iters):
            r = next(run)
            results.append(r)
            print(f"iter {r['training_iteration']:3d}  steps {r['timesteps_total']:6d}  "
                  f"mean return {r['episode_reward_mean']:6.1f}")
        stats = run.stats()
    workers.stop()
    print("batches from the aggregators:", stats["aggregators.gather_async"]["items_out"])
    return results


if __name__ == "__main__":
    main()
