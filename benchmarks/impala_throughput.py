"""IMPALA env steps/s against the number of workers: flowrl next to RLlib 2.58 IMPALA and APPO.

The env is CartPole with a fixed sleep per vector step (``--sleep-ms``, default
1 ms; one env per worker), so the workers, not the machine's cores, bound
sampling: steps/s should grow linearly with workers until the learner saturates.

Systems, for each worker count N of ``--workers`` (default 2 4 8; add 16 where
memory allows), all at equal settings (``rollout_fragment_length``,
``train_batch_size``, one env per worker, no CPUs reserved per worker):

- ``flowrl-wN``: flowrl IMPALA on Ray, gathering directly on the driver;
- ``flowrl-agg-wN``: the same with tree aggregation (``num_aggregation_workers``
  = max(1, N // 4));
- ``rllib-impala-wN`` / ``rllib-appo-wN``: RLlib IMPALA / APPO (new API stack).

Every (system, seed) runs in a fresh process with its own ``ray.init`` sized to
the workers, interleaved with the others, on an idle CPU (``benchmarks/harness.py``).
A run trains for ``--warmup`` seconds once sampling has begun, then counts over
a ``--seconds`` window: env steps sampled per second, rows trained per second
and, for flowrl, the learner thread's busy fraction (learner utilization). The
tables print median [min-max] per system, the ratio flowrl / RLlib IMPALA and
flowrl / RLlib APPO per worker count (target >= 1.5x), and the scaling per
worker against the smallest worker count.

The module also holds what the other async benchmarks share (``apex_throughput.py``
and ``impala_fairness.py`` import it): the fixed-cost env and the window options.

    python benchmarks/impala_throughput.py        # 12 systems x 3 seeds, ~15 min idle
                                                  # (36 fresh processes, mostly start-up)
    python benchmarks/impala_throughput.py --workers 2 4 8 16
    python benchmarks/impala_throughput.py --quick --no-idle-wait   # smoke, 1 seed at 2 workers
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
from training import build_rllib, find_metric, start_ray  # noqa: E402  (stdlib at import)


# -- shared with apex_throughput.py and impala_fairness.py (stdlib-only at import) ----
def sleepy_cartpole(env_config: dict):
    """CartPole-v1 whose ``step`` first sleeps ``env_config["sleep_ms"]`` (default 1 ms).

    With one env per worker every vector step pays the sleep, so sampling is
    bound by the number of workers rather than by the machine's cores.
    """
    import gymnasium as gym

    sleep_s = float(env_config.get("sleep_ms", 1.0)) / 1000.0

    class Sleepy(gym.Wrapper):
        def step(self, action):
            time.sleep(sleep_s)
            return self.env.step(action)

    return Sleepy(gym.make("CartPole-v1"))


ENGINES = ["flowrl", "flowrl-agg", "rllib-impala", "rllib-appo"]
SYSTEM_RE = re.compile(r"^(flowrl|flowrl-agg|rllib-impala|rllib-appo)-w(\d+)$")
TARGET_RATIO = 1.5


def systems_for(engines, workers) -> list[str]:
    return [f"{e}-w{n}" for n in workers for e in engines]


def aggregators_for(workers: int) -> int:
    return max(1, workers // 4)


# -- children --------------------------------------------------------------------------
def child_flowrl(args, workers: int, aggregators: int) -> dict:
    from flowrl.algorithms import IMPALA, IMPALAConfig
    out = {"ray_init_s": start_ray(workers + aggregators + 2)}
    config = IMPALAConfig(env=sleepy_cartpole, env_config={"sleep_ms": args.sleep_ms},
                          num_workers=workers, num_envs_per_worker=1,
                          rollout_fragment_length=args.fragment,
                          train_batch_size=args.train_batch, num_cpus_per_worker=0,
                          num_aggregation_workers=aggregators, backend="ray", seed=args.seed)
    algo = IMPALA(config)
    try:
        c = algo.metrics.counters
        while c["num_steps_sampled"] == 0:
            algo.train()
        out["first_result_s"] = harness.since_start()
        end = time.perf_counter() + args.warmup
        while time.perf_counter() < end:
            algo.train()
        learner = algo.learner_thread
        s0, tr0, busy0 = c["num_steps_sampled"], c["num_steps_trained"], learner.busy_s
        t0 = time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            algo.train()
        wall = time.perf_counter() - t0
        out.update(steps_per_s=(c["num_steps_sampled"] - s0) / wall,
                   trained_per_s=(c["num_steps_trained"] - tr0) / wall,
                   learner_util=(learner.busy_s - busy0) / wall, window_s=wall)
    finally:
        algo.stop()
    return out


def child_rllib(args, name: str, workers: int) -> dict:
    out = {"ray_init_s": start_ray(workers + 2)}
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.tune.registry import register_env
    register_env("sleepy_cartpole", sleepy_cartpole)
    cls = {"impala": IMPALAConfig, "appo": APPOConfig}[name]
    config = (cls().environment("sleepy_cartpole", env_config={"sleep_ms": args.sleep_ms})
              .env_runners(num_env_runners=workers, num_envs_per_env_runner=1,
                           rollout_fragment_length=args.fragment, num_cpus_per_env_runner=0)
              .training(train_batch_size_per_learner=args.train_batch)
              .reporting(min_time_s_per_iteration=0.5)
              .debugging(seed=args.seed))
    algo = build_rllib(config)

    def sampled(r: dict) -> float:
        return find_metric(r, "num_env_steps_sampled_lifetime")

    def trained(r: dict) -> float:  # its name differs between RLlib versions
        return (find_metric(r, "num_env_steps_trained_lifetime")
                or find_metric(r, "num_module_steps_trained_lifetime"))

    try:
        r = algo.train()
        deadline = time.perf_counter() + 300
        while not sampled(r):  # RLlib's env runners take a while to start sampling
            if time.perf_counter() > deadline:
                raise RuntimeError(f"RLlib {name} sampled nothing in 300 s")
            r = algo.train()
        out["first_result_s"] = harness.since_start()
        end = time.perf_counter() + args.warmup
        while time.perf_counter() < end:
            r = algo.train()
        s0, tr0, t0 = sampled(r), trained(r), time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            r = algo.train()
        wall = time.perf_counter() - t0
        out.update(steps_per_s=(sampled(r) - s0) / wall, window_s=wall)
        if trained(r):
            out["trained_per_s"] = (trained(r) - tr0) / wall
    finally:
        algo.stop()
    return out


def child(args) -> None:
    m = SYSTEM_RE.match(args.child)
    if not m:
        raise SystemExit(f"unknown system {args.child!r}: expected ENGINE-wN with ENGINE one "
                         f"of {ENGINES}, e.g. flowrl-agg-w4")
    engine, workers = m.group(1), int(m.group(2))
    if engine == "flowrl":
        result = child_flowrl(args, workers, 0)
    elif engine == "flowrl-agg":
        result = child_flowrl(args, workers, aggregators_for(workers))
    else:
        result = child_rllib(args, engine.split("-", 1)[1], workers)
    result["workers"] = workers
    harness.write_result(result)


# -- report -----------------------------------------------------------------------------
KEYS = ["steps_per_s", "trained_per_s", "learner_util", "first_result_s", "ray_init_s"]


def report(runs: list[dict], engines, workers) -> None:
    groups = {g.system: g for g in harness.summarize(runs, KEYS)}
    rows = []
    for system in systems_for(engines, workers):
        g = groups.get(system)
        if g is None:
            rows.append([system, "0 runs", "-", "-", "-", "-"])
            continue
        f = g.figures.get
        rows.append([system, g.label, harness.fmt_figure(f("steps_per_s"), "{:,.0f}"),
                     harness.fmt_figure(f("trained_per_s"), "{:,.0f}"),
                     harness.fmt_figure(f("learner_util"), "{:.2f}"),
                     harness.fmt_figure(f("first_result_s"), "{:.1f}")])
    harness.print_table(["system", "runs", "env steps/s", "trained rows/s",
                         "learner utilization", "first result s"], rows,
                        title="IMPALA throughput on sleepy CartPole: median [min-max] over "
                              "seeds (learner utilization: flowrl's learner thread busy "
                              "fraction in the window)")

    def sps(engine: str, n: int):
        g = groups.get(f"{engine}-w{n}")
        return g.figures.get("steps_per_s") if g else None

    def fmt_ratio(x: float, target: float | None = None) -> str:
        if math.isnan(x):
            return "-"
        mark = "" if target is None else (" ok" if x >= target else " BELOW")
        return f"{x:.2f}x{mark}"

    rows = []
    for n in workers:
        row = [str(n)]
        for ours in ("flowrl", "flowrl-agg"):
            for theirs in ("rllib-impala", "rllib-appo"):
                row.append(fmt_ratio(harness.ratio(sps(ours, n), sps(theirs, n)),
                                     TARGET_RATIO))
        rows.append(row)
    harness.print_table(["workers", "flowrl / RLlib IMPALA", "flowrl / RLlib APPO",
                         "flowrl-agg / RLlib IMPALA", "flowrl-agg / RLlib APPO"], rows,
                        title=f"ratio of median env steps/s at equal settings "
                              f"(target >= {TARGET_RATIO}x)")

    base_n = min(workers)
    rows = []
    for n in workers:
        row = [str(n)]
        for e in engines:
            a, b = sps(e, n), sps(e, base_n)
            per_worker = (harness.ratio(a, b) * base_n / n) if a and b else math.nan
            row.append(fmt_ratio(per_worker))
        rows.append(row)
    harness.print_table(["workers", *engines], rows,
                        title=f"scaling: env steps/s per worker relative to {base_n} workers "
                              "(1.00x = linear)")


# -- options shared with apex_throughput.py -------------------------------------------
def add_window_arguments(p: argparse.ArgumentParser, *, seconds: float, warmup: float,
                         train_batch: int, warmup_help: str) -> None:
    """The fixed-cost env and measured-window options, and the harness's."""
    p.add_argument("--seconds", type=float, default=seconds, help="measured window per run")
    p.add_argument("--warmup", type=float, default=warmup, help=warmup_help)
    p.add_argument("--sleep-ms", type=float, default=1.0)
    p.add_argument("--fragment", type=int, default=50)
    p.add_argument("--train-batch", type=int, default=train_batch)
    harness.add_arguments(p, default_seeds=3)


def parse_window_arguments(p: argparse.ArgumentParser, argv) -> argparse.Namespace:
    """Parse; ``--quick`` shortens the window, keeps 2 workers and 1 seed by default."""
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, seeds=1, seconds=3.0, warmup=2.0)
    if args.quick and args.workers == [2, 4, 8]:
        args.workers = [2]
    return args


def window_child_args(args: argparse.Namespace) -> list[str]:
    """The options a child run gets from :func:`add_window_arguments`'s."""
    return harness.forward(args, "seconds", "warmup", "sleep_ms", "fragment", "train_batch")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--engines", nargs="+", default=ENGINES, choices=ENGINES)
    add_window_arguments(p, seconds=8.0, warmup=3.0, train_batch=500,
                         warmup_help="seconds trained after sampling began, before the window")
    args = parse_window_arguments(p, argv)
    if args.child:
        child(args)
        return
    meta = {"workers": args.workers, "engines": args.engines, "seconds": args.seconds,
            "warmup": args.warmup, "sleep_ms": args.sleep_ms, "fragment": args.fragment,
            "train_batch": args.train_batch}
    if not args.report:
        print(f"env: CartPole + {args.sleep_ms:g} ms/step, 1 env per worker, fragment "
              f"{args.fragment}, train batch {args.train_batch}; {args.seconds:g} s window after "
              f"{args.warmup:g} s warm-up; {os.cpu_count()} cores", flush=True)
    runs, meta = harness.run(args, "impala_throughput", __file__,
                             systems_for(args.engines, args.workers), window_child_args(args),
                             meta)
    report(runs, meta["engines"], meta["workers"])


if __name__ == "__main__":
    main()
