"""What evaluation during training costs: PPO training env steps/s with and without it.

Systems, each PPO on CartPole-v1 on the Ray backend with 2 rollout workers, the
same hyperparameters and seeds:

- ``no-eval``: no evaluation;
- ``eval-parallel``: ``evaluation_interval=1``, ``evaluation_duration=10``,
  ``evaluation_num_workers=1``, ``evaluation_parallel_to_training=True`` (the
  evaluation worker plays its episodes while the training step runs).

Reported: training env steps/s over ``--iters`` iterations after the first (the
first pays start-up), and ``eval-parallel / no-eval`` (issue 25's target: >= 0.9x).
On 2 cores the evaluation worker competes with the rollout workers and the
learner for CPU, so the ratio shows what evaluating every iteration costs where
cores are scarce.

    python benchmarks/evaluation_overhead.py
    python benchmarks/evaluation_overhead.py --quick --no-idle-wait
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SYSTEMS = ["no-eval", "eval-parallel"]


def config_for(system: str, seed: int, quick: bool):
    """The PPOConfig of ``system``."""
    from flowrl.algorithms import PPOConfig
    evaluation = {}
    if system == "eval-parallel":
        evaluation = dict(evaluation_interval=1, evaluation_duration=10,
                          evaluation_num_workers=1, evaluation_parallel_to_training=True)
    return PPOConfig(env="CartPole-v1", backend="ray", num_workers=2, seed=seed,
                     rollout_fragment_length=256 if quick else 1000,
                     train_batch_size=512 if quick else 4000,
                     sgd_minibatch_size=128, num_sgd_iter=5 if quick else 10, **evaluation)


def run(system: str, seed: int, iters: int, quick: bool) -> dict:
    """Train ``iters + 1`` iterations; env steps/s over all but the first."""
    from flowrl.algorithms import PPO
    with PPO(config_for(system, seed, quick)) as algo:
        first = algo.train()
        start = time.perf_counter()
        for _ in range(iters):
            result = algo.train()
        elapsed = time.perf_counter() - start
    steps = result["timesteps_total"] - first["timesteps_total"]
    evaluated = result.get("evaluation", {}).get("episodes_this_iter", 0)
    return {"steps_per_s": steps / elapsed, "train_steps": steps, "seconds": elapsed,
            "eval_episodes_last_iter": evaluated}


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--iters", type=int, default=8, help="timed iterations per run")
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, iters=2)
    if args.child:
        harness.write_result(run(args.child, args.seed, args.iters, args.quick))
        return
    runs, _ = harness.run(args, "evaluation_overhead", __file__, args.systems,
                          harness.forward(args, "iters", "quick"),
                          meta=vars(args) | {"results_dir": None})
    groups = {g.system: g for g in harness.summarize(runs, ["steps_per_s"])}
    fig = {k: g.figures.get("steps_per_s") for k, g in groups.items()}
    rows = [[k, groups[k].label, harness.fmt_figure(fig[k], "{:,.0f}")] for k in groups]
    harness.print_table(["system", "runs", "training env steps/s"], rows,
                        title=f"PPO CartPole-v1, Ray, 2 rollout workers, {args.iters} timed "
                              "iterations per run")
    if "eval-parallel" in fig and "no-eval" in fig:
        ratio = harness.ratio(fig["eval-parallel"], fig["no-eval"])
        print(f"eval-parallel / no-eval: {ratio:.2f}x (target >= 0.9x)")


if __name__ == "__main__":
    main()
