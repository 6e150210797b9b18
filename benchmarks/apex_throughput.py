"""Ape-X throughput against the number of workers: env steps/s, replay samples/s, trained rows/s.

The env is the fixed-cost CartPole of ``impala_throughput.py``
(``impala_throughput.sleepy_cartpole``: a ``--sleep-ms`` sleep per step, one env per
worker), so the workers, not the machine's cores, bound sampling.

Systems ``apex-wN`` for N in ``--workers`` (default 2 4 8): flowrl Ape-X on Ray
with N rollout workers and 2 replay shards. Every (system, seed) runs in a fresh
process with its own ``ray.init`` sized to the workers, interleaved, on an idle
CPU (``benchmarks/harness.py``). A run trains for ``--warmup`` seconds once the
learner has started (``learning_starts`` rows stored), then counts over a
``--seconds`` window: env steps sampled, rows replayed to the learner and rows
trained per second, and the learner thread's busy fraction (learner
utilization). The baseline is the ideal linear scaling from the smallest worker
count: the table prints env steps/s per worker relative to it (1.00x = linear).

    python benchmarks/apex_throughput.py          # 3 systems x 3 seeds, ~4-5 min idle
    python benchmarks/apex_throughput.py --workers 2 4 8 16
    python benchmarks/apex_throughput.py --quick --no-idle-wait    # smoke, 1 seed at 2 workers
"""

from __future__ import annotations

import argparse
import math
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)
from impala_throughput import (add_window_arguments, parse_window_arguments,  # noqa: E402
                               sleepy_cartpole, window_child_args)
from training import start_ray  # noqa: E402  (stdlib at import)

SYSTEM_RE = re.compile(r"^apex-w(\d+)$")
SHARDS = 2
LEARNING_STARTS = 500


def child(args) -> None:
    m = SYSTEM_RE.match(args.child)
    if not m:
        raise SystemExit(f"unknown system {args.child!r}: expected apex-wN, e.g. apex-w4")
    workers = int(m.group(1))
    out = {"workers": workers, "ray_init_s": start_ray(workers + SHARDS + 2)}
    from flowrl.algorithms import ApeX, ApeXConfig
    algo = ApeX(ApeXConfig(env=sleepy_cartpole, env_config={"sleep_ms": args.sleep_ms},
                           num_workers=workers, num_cpus_per_worker=0, backend="ray",
                           num_replay_buffer_shards=SHARDS,
                           rollout_fragment_length=args.fragment,
                           train_batch_size=args.train_batch, learning_starts=LEARNING_STARTS,
                           buffer_size=100_000,
                           timesteps_per_iteration=args.fragment * workers, seed=args.seed))
    try:
        c = algo.metrics.counters
        deadline = time.perf_counter() + 300
        while c["num_steps_trained"] == 0:
            if time.perf_counter() > deadline:
                raise RuntimeError("Ape-X trained nothing in 300 s")
            algo.train()
        out["first_trained_s"] = harness.since_start()
        end = time.perf_counter() + args.warmup
        while time.perf_counter() < end:
            algo.train()
        s0, r0, t0 = c["num_steps_sampled"], c["num_rows_replayed"], c["num_steps_trained"]
        busy0, start = algo.learner.busy_s, time.perf_counter()
        while time.perf_counter() - start < args.seconds:
            algo.train()
        wall = time.perf_counter() - start
        out.update(steps_per_s=(c["num_steps_sampled"] - s0) / wall,
                   replayed_per_s=(c["num_rows_replayed"] - r0) / wall,
                   trained_per_s=(c["num_steps_trained"] - t0) / wall,
                   learner_util=(algo.learner.busy_s - busy0) / wall, window_s=wall)
    finally:
        algo.stop()
    harness.write_result(out)


KEYS = ["steps_per_s", "replayed_per_s", "trained_per_s", "learner_util", "first_trained_s"]


def report(runs: list[dict], workers) -> None:
    groups = {g.system: g for g in harness.summarize(runs, KEYS)}
    base_n = min(workers)
    base = groups.get(f"apex-w{base_n}")
    rows = []
    for n in workers:
        g = groups.get(f"apex-w{n}")
        if g is None:
            rows.append([f"apex-w{n}", "0 runs", *["-"] * 6])
            continue
        f = g.figures.get
        linear = (harness.ratio(f("steps_per_s"), base.figures.get("steps_per_s")) * base_n / n
                  if base else math.nan)
        rows.append([f"apex-w{n}", g.label, harness.fmt_figure(f("steps_per_s"), "{:,.0f}"),
                     harness.fmt_ratio(linear),
                     harness.fmt_figure(f("replayed_per_s"), "{:,.0f}"),
                     harness.fmt_figure(f("trained_per_s"), "{:,.0f}"),
                     harness.fmt_figure(f("learner_util"), "{:.2f}"),
                     harness.fmt_figure(f("first_trained_s"), "{:.1f}")])
    harness.print_table(["system", "runs", "env steps/s", f"per worker vs w{base_n}",
                         "replay samples (rows)/s", "trained rows/s", "learner utilization",
                         "first trained s"], rows,
                        title="Ape-X on sleepy CartPole: median [min-max] over seeds")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", nargs="+", type=int, default=[2, 4, 8])
    add_window_arguments(p, seconds=10.0, warmup=5.0, train_batch=256,
                         warmup_help="seconds trained after the learner started, before the window")
    args = parse_window_arguments(p, argv)
    if args.child:
        child(args)
        return
    meta = {"workers": args.workers, "seconds": args.seconds, "warmup": args.warmup,
            "sleep_ms": args.sleep_ms, "fragment": args.fragment,
            "train_batch": args.train_batch, "shards": SHARDS,
            "learning_starts": LEARNING_STARTS}
    if not args.report:
        print(f"Ape-X on CartPole + {args.sleep_ms:g} ms/step, fragment {args.fragment}, train "
              f"batch {args.train_batch}, {SHARDS} replay shards; {args.seconds:g} s window after "
              f"{args.warmup:g} s warm-up; {os.cpu_count()} cores", flush=True)
    runs, meta = harness.run(args, "apex_throughput", __file__,
                             [f"apex-w{n}" for n in args.workers], window_child_args(args), meta)
    report(runs, meta["workers"])


if __name__ == "__main__":
    main()
