"""Policy lag against throughput for IMPALA/APPO on Pong, by learner queue size and
sample requests in flight: the figures behind their defaults.

Each system is one setting of ``learner_queue_size`` (``q``) and
``max_sample_requests_in_flight_per_worker`` (``r``), named ``qQ-rR``; every run
trains the tuned example (``tuned_examples/impala-pong.yaml``, or ``--config``) with
only those two changed, in a fresh process on an idle CPU (``benchmarks/harness.py``),
for ``--warmup`` seconds and then a ``--seconds`` window. On 2 cores the learner is
the bottleneck at these settings (the table's ``busy`` column is its busy share), so
a batch waits behind the whole queue: the lag should grow with ``q``, and env steps/s
should not, once the queue never runs dry.

Figures per run, from flowrl's own diagnostics (``result["info"]["policy_lag"]``,
``learner_queue``, ``learner_busy_frac``) over the results of the window: policy
lag in learner updates (mean over the trained rows; p95 and max: the largest
per-result p95 and max) and in env steps (mean), the mean number of batches waiting
when the learner took one, the learner's busy share, env steps sampled and trained
per second.

    python benchmarks/policy_lag.py                       # q16-r2 q4-r2 q2-r1 q1-r1, 3 seeds
    python benchmarks/policy_lag.py --systems q16-r2 q2-r1 --seeds 2 --seconds 120
    python benchmarks/policy_lag.py --quick --no-idle-wait   # smoke: 1 seed, short window
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SYSTEMS = ["q16-r2", "q4-r2", "q2-r1", "q1-r1"]
SYSTEM_RE = re.compile(r"^q(\d+)-r(\d+)$")
HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_SPEC = os.path.join(HERE, "..", "tuned_examples", "impala-pong.yaml")


def child(args) -> None:
    m = SYSTEM_RE.match(args.child)
    if not m:
        raise SystemExit(f"unknown system {args.child!r}: expected qQUEUE-rREQUESTS, "
                         "e.g. q16-r2")
    queue, in_flight = int(m.group(1)), int(m.group(2))
    from flowrl.experiment import algorithm_class, load_spec, make_config
    spec = load_spec(args.config)
    config = make_config(spec["algo"], {
        "env": spec["env"], **spec["config"], "seed": args.seed,
        "learner_queue_size": queue, "max_sample_requests_in_flight_per_worker": in_flight,
        "min_time_s_per_reporting": 2.0})
    algo = algorithm_class(spec["algo"])(config)
    out: dict = {"learner_queue_size": queue, "in_flight": in_flight}
    try:
        counters = algo.metrics.counters
        end = time.perf_counter() + args.warmup
        while time.perf_counter() < end:
            algo.train()
        out["warmup_steps"] = counters["num_steps_sampled"]
        s0, tr0 = counters["num_steps_sampled"], counters["num_steps_trained"]
        rows = lag_sum = env_sum = 0.0
        p95 = mx = queue_sum = busy_sum = 0.0
        results = dropped = 0
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            info = algo.train()["info"]
            lag = info.get("policy_lag")
            if lag is not None and lag["rows"]:
                rows += lag["rows"]
                lag_sum += lag["mean"] * lag["rows"]
                env_sum += lag["mean_env_steps"] * lag["rows"]
                p95, mx = max(p95, lag["p95"]), max(mx, lag["max"])
                dropped += lag["dropped"]
            queue_sum += info.get("learner_queue", {}).get("size_mean", 0.0)
            busy_sum += info["learner_busy_frac"]
            results += 1
        wall = time.perf_counter() - t0
        harness.progress(f"{args.child}: {results} results in {wall:.0f} s")
        out.update(
            lag_mean=lag_sum / rows if rows else float("nan"), lag_p95=p95, lag_max=mx,
            lag_env_steps=env_sum / rows if rows else float("nan"), dropped=dropped,
            queue_mean=queue_sum / max(results, 1), busy=busy_sum / max(results, 1),
            steps_per_s=(counters["num_steps_sampled"] - s0) / wall,
            trained_per_s=(counters["num_steps_trained"] - tr0) / wall, window_s=wall)
    finally:
        algo.stop()
    harness.write_result(out)


KEYS = ["lag_mean", "lag_p95", "lag_max", "lag_env_steps", "queue_mean", "busy",
        "steps_per_s", "trained_per_s"]


def report(runs: list[dict], systems: list[str]) -> None:
    groups = {g.system: g for g in harness.summarize(runs, KEYS)}
    rows = []
    base = groups.get(systems[0])
    for system in systems:
        g = groups.get(system)
        if g is None:
            continue
        f = g.figures.get
        ratio = (harness.ratio(f("steps_per_s"), base.figures.get("steps_per_s"))
                 if base is not None else None)
        rows.append([system, g.label, harness.fmt_figure(f("lag_mean"), "{:.1f}"),
                     harness.fmt_figure(f("lag_p95"), "{:.0f}"),
                     harness.fmt_figure(f("lag_max"), "{:.0f}"),
                     harness.fmt_figure(f("lag_env_steps"), "{:,.0f}"),
                     harness.fmt_figure(f("queue_mean"), "{:.1f}"),
                     harness.fmt_figure(f("busy"), "{:.2f}"),
                     harness.fmt_figure(f("steps_per_s"), "{:,.0f}"),
                     harness.fmt_figure(f("trained_per_s"), "{:,.0f}"),
                     "" if ratio is None else f"{ratio:.2f}x"])
    harness.print_table(["system", "runs", "lag mean", "lag p95", "lag max",
                         "lag env steps", "queue", "busy", "env steps/s", "trained/s",
                         f"steps/s vs {systems[0]}"], rows,
                        title="Policy lag (learner updates) and throughput; "
                              "qQ-rR = learner_queue_size Q, R requests in flight per worker")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="+", default=SYSTEMS)
    p.add_argument("--config", default=DEFAULT_SPEC, help="tuned example to train")
    p.add_argument("--seconds", type=float, default=90.0, help="measured window per run")
    p.add_argument("--warmup", type=float, default=30.0,
                   help="seconds trained before the window (the queue fills)")
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, seconds=10.0, warmup=10.0)
    if args.child:
        child(args)
        return
    meta = {"systems": args.systems, "config": os.path.relpath(args.config, HERE),
            "seconds": args.seconds, "warmup": args.warmup}
    runs, meta = harness.run(args, "policy_lag", __file__, args.systems,
                             harness.forward(args, "config", "seconds", "warmup"), meta)
    report(runs, meta["systems"])


if __name__ == "__main__":
    main()
