"""Ape-X throughput against the number of workers: env steps/s and replay samples/s.

The env is the IMPALA benchmark's fixed-cost CartPole (``sleepy_cartpole`` from
``impala_throughput.py``: a ``--sleep-ms`` sleep per step), so the workers, not the
driver's cores, bound sampling. For each worker count (default 2, 4, 8) one Ape-X
run on Ray warms up for ``--warmup`` seconds and is then measured over
``--seconds``: env steps sampled, rows replayed to the learner and rows trained per
second, plus the learner thread's busy fraction. The baseline printed beside them
is the ideal linear scaling from the smallest worker count (steps/s per worker).

    python benchmarks/apex_throughput.py                       # 2, 4, 8 workers
    python benchmarks/apex_throughput.py --workers 2 --seconds 5 --warmup 3   # smoke
"""

from __future__ import annotations

import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from impala_throughput import sleepy_cartpole  # noqa: E402


def measure(workers: int, args) -> dict:
    from flowrl.algorithms import ApeX, ApeXConfig
    algo = ApeX(ApeXConfig(env=sleepy_cartpole, env_config={"sleep_ms": args.sleep_ms},
                           num_workers=workers, num_cpus_per_worker=0, backend="ray",
                           rollout_fragment_length=args.fragment,
                           train_batch_size=args.train_batch, learning_starts=500,
                           buffer_size=100_000, timesteps_per_iteration=args.fragment * workers,
                           seed=0))
    try:
        end = time.perf_counter() + args.warmup
        while time.perf_counter() < end:
            algo.train()
        c = algo.metrics.counters
        s0, r0, t0 = c["num_steps_sampled"], c["num_rows_replayed"], c["num_steps_trained"]
        busy0, start = algo.learner.busy_s, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            algo.train()
        wall = time.perf_counter() - start
        return {"steps": (c["num_steps_sampled"] - s0) / wall,
                "replayed": (c["num_rows_replayed"] - r0) / wall,
                "trained": (c["num_steps_trained"] - t0) / wall,
                "learner": (algo.learner.busy_s - busy0) / wall}
    finally:
        algo.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", nargs="*", type=int, default=[2, 4, 8])
    p.add_argument("--seconds", type=float, default=20.0)
    p.add_argument("--warmup", type=float, default=10.0)
    p.add_argument("--sleep-ms", type=float, default=1.0)
    p.add_argument("--fragment", type=int, default=50)
    p.add_argument("--train-batch", type=int, default=256)
    args = p.parse_args()
    import ray
    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    rows = [(n, measure(n, args)) for n in args.workers]
    base_n, base = rows[0]
    print(f"\nApe-X on sleepy CartPole ({args.sleep_ms:g} ms/step), fragment {args.fragment}, "
          f"train batch {args.train_batch}, {os.cpu_count()} CPUs")
    print(f"{'workers':>7} {'env steps/s':>12} {'linear':>8} {'replayed rows/s':>16} "
          f"{'trained rows/s':>15} {'learner busy':>13}")
    for n, r in rows:
        linear = base["steps"] / base_n * n
        print(f"{n:>7} {r['steps']:12.0f} {r['steps'] / linear:7.2f}x {r['replayed']:16.0f} "
              f"{r['trained']:15.0f} {r['learner']:12.0%}")


if __name__ == "__main__":
    main()
