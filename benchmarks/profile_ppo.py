"""Where a PPO iteration's time goes, on both backends, at the --matched settings.

For ``flowrl-local`` and ``flowrl-ray`` (2 workers x 8 envs x 128 steps = 2048
env steps per iteration, 6 epochs of 256-row minibatches; one fresh process per
seed through ``benchmarks/harness.py``), after ``--warmup`` iterations it times
``--iters`` iterations and splits each into:

- ``learn_ms``: minibatch SGD on the driver (flowrl's ``learn`` timer);
- ``update_ms``: the weight broadcast to the workers (``update`` timer);
- ``rest_ms``: everything else: sampling (on the workers, or in-process on the
  local backend), moving batches to the driver, concatenation, standardization.

It also reports what the driver-side batch copies cost per iteration, in CPU
microseconds (best decile of 200 repetitions of each, on a real 2048-row batch):
a pickle-5 round trip (what Ray does to a batch), concatenating two rounds,
standardizing advantages, one epoch's shuffle.

    python benchmarks/profile_ppo.py
    python benchmarks/profile_ppo.py --quick --no-idle-wait
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SYSTEMS = ["flowrl-local", "flowrl-ray"]
KEYS = ["iter_ms", "learn_ms", "update_ms", "rest_ms", "steps_per_s", "pickle_us", "concat_us",
        "standardize_us", "shuffle_us"]


def _cpu_us(fn, n: int = 200) -> float:
    times = []
    for _ in range(n):
        t = time.process_time_ns()
        fn()
        times.append(time.process_time_ns() - t)
    times.sort()
    return times[len(times) // 10] / 1e3


def child(args) -> None:
    import pickle

    from flowrl.algorithms import PPO, PPOConfig
    from flowrl.batch import concat_samples
    from flowrl.ops import StandardizeFields
    backend = args.child.split("-", 1)[1]
    algo = PPO(PPOConfig(env="CartPole-v1", backend=backend, seed=args.seed,
                         rollout_fragment_length=128, train_batch_size=2048,
                         vf_clip_param=1e6,  # no value clipping; the config takes no inf
                         create_env_on_driver=True))  # the driver's worker samples a batch below
    for _ in range(args.warmup):
        algo.train()
    walls, learn, update, steps = [], [], [], []
    for _ in range(args.iters):
        t = time.perf_counter()
        r = algo.train()
        walls.append((time.perf_counter() - t) * 1e3)
        learn.append(r["timers"].get("learn_time_ms", math.nan))
        update.append(r["timers"].get("update_time_ms", 0.0))
        steps.append(r["info"]["num_steps_trained_this_iter"]
                     if "num_steps_trained_this_iter" in r["info"] else 2048)
    half = algo.workers.local_worker().sample()  # 1024 rows: one worker's share
    batch = concat_samples([half, half])
    algo.stop()
    out = {"iter_ms": statistics.median(walls), "learn_ms": statistics.median(learn),
           "update_ms": statistics.median(update),
           "steps_per_s": 1e3 * sum(steps) / sum(walls),
           "pickle_us": _cpu_us(lambda: pickle.loads(pickle.dumps(batch, protocol=5))),
           "concat_us": _cpu_us(lambda: concat_samples([half, half])),
           "standardize_us": _cpu_us(lambda: StandardizeFields(["advantages"])(batch)),
           "shuffle_us": _cpu_us(lambda: batch.shuffle(0))}
    out["rest_ms"] = out["iter_ms"] - out["learn_ms"] - out["update_ms"]
    harness.write_result(out)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--warmup", type=int, default=2)
    p.add_argument("--iters", type=int, default=10)
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, warmup=1, iters=2)
    if args.child:
        child(args)
        return
    runs, _ = harness.run(args, "profile_ppo", __file__, args.systems,
                          harness.forward(args, "warmup", "iters"))
    harness.print_groups(harness.summarize(runs, KEYS), [(k, k, "{:,.1f}") for k in KEYS],
                         title="per PPO iteration of 2048 env steps, median [min-max]; "
                               "*_us: CPU microseconds of one driver-side copy")


if __name__ == "__main__":
    main()
