"""PPO written out by hand as a plan, next to ``flowrl.algorithms.PPO``.

``flowrl.algorithms.PPO`` is nothing more than a typed config, a policy and the
plan below. This script builds that plan from the operators directly, runs it
and ``PPO`` side by side with the same config and seed on the in-process backend,
and prints both learning curves: they are identical, iteration for iteration.

    python examples/ppo_by_hand.py [--iters N]
"""

from __future__ import annotations

import argparse
import os

import flowrl
from flowrl.algorithms import PPO, PPOConfig
from flowrl.ops import (ConcatBatches, ParallelRollouts, StandardizeFields,
                        StandardMetricsReporting, TrainOneStep, UpdateKL)
from flowrl.policies import PPOPolicy
from flowrl.workers import WorkerSet


def ppo_plan(workers: WorkerSet, config: PPOConfig) -> flowrl.Plan:
    # 1. Every worker samples a fragment; bulk_sync concatenates one round (a barrier,
    #    so every batch comes from the weights the learner just broadcast).
    rollouts = ParallelRollouts(workers, mode="bulk_sync")
    train_op = (rollouts
                # 2. Collect rounds until there are train_batch_size env steps.
                .combine(ConcatBatches(min_batch_size=config.train_batch_size),
                         name="ppo/concat_batches")
                # 3. Advantages to mean 0, std 1 (GAE was computed by the workers).
                .for_each(StandardizeFields(["advantages"]), name="ppo/standardize")
                # 4. num_sgd_iter epochs of minibatch SGD on the clipped surrogate; the
                #    new weights go to every remote worker.
                .for_each(TrainOneStep(workers, num_sgd_iter=config.num_sgd_iter,
                                       sgd_minibatch_size=config.sgd_minibatch_size,
                                       seed=config.seed), name="ppo/train")
                # 5. Adapt the KL penalty coefficient from the measured KL.
                .for_each(UpdateKL(workers), name="ppo/update_kl"))
    # 6. One result dict (episode returns, counters, timers) per training step.
    return flowrl.Plan(StandardMetricsReporting(train_op, workers), name="ppo_by_hand")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=2 if os.environ.get("CI") == "true" else 20)
    args = p.parse_args(argv)
    small = os.environ.get("CI") == "true"
    config = PPOConfig(env="CartPole-v1", num_workers=2, seed=0,
                       num_envs_per_worker=2 if small else 8,
                       rollout_fragment_length=32 if small else 64,
                       train_batch_size=128 if small else 2048,
                       sgd_minibatch_size=64 if small else 256,
                       num_sgd_iter=2 if small else 6)

    # By hand: the same workers PPO would build (its policy and policy settings).
    workers = WorkerSet(config.env, PPOPolicy, PPO.worker_config(config),
                        num_workers=config.num_workers, backend="local")
    plan = ppo_plan(workers, config)
    with plan.compile(backend="local", seed=config.seed) as run:
        by_hand = [next(run)["episode_reward_mean"] for _ in range(args.iters)]
    workers.stop()

    # The library's PPO with the same config.
    with PPO(config) as algo:
        library = [algo.train()["episode_reward_mean"] for _ in range(args.iters)]

    print(plan.to_dot().splitlines()[0], f"... {plan.graph.number_of_nodes()} nodes")
    for i, (a, b) in enumerate(zip(by_hand, library), 1):
        print(f"iter {i:3d}  by hand {a:7.2f}  flowrl.algorithms.PPO {b:7.2f}")
    print("identical:", by_hand == library)
    return {"by_hand": by_hand, "library": library}


if __name__ == "__main__":
    main()
