"""Driver torch threads for the Pong examples: env steps/s of IMPALA, APPO and PPO
from ``tuned_examples/<algo>-pong.yaml`` with the driver's ``torch_threads`` at 1
and at 2 (every Ray rollout worker keeps one thread, ``WorkerConfig``'s
``remote_torch_threads=1``: one worker process per core).

What the choice rests on: IMPALA and APPO learn on a thread beside the samplers,
so a second learner thread competes with them for the same cores; PPO alternates,
sampling while its learner waits and learning while its workers wait, so during
SGD the workers' cores are free. Each seed of each system runs in a fresh process
on an idle CPU (``benchmarks/harness.py``); steps are counted over ``--seconds``
after ``--warmup`` seconds from the first result.

    python benchmarks/torch_threads.py                     # 3 algorithms x 2 settings x 3 seeds
    python benchmarks/torch_threads.py --algos ppo --seeds 5
    python benchmarks/torch_threads.py --quick --no-idle-wait   # smoke: 1 seed, short windows
"""

from __future__ import annotations

import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)
from atari_throughput import Window, add_window_arguments, check_window_arguments  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = ["impala", "appo", "ppo"]
THREADS = [1, 2]


def system_name(algo: str, threads: int) -> str:
    return f"{algo}-t{threads}"


def child(args) -> None:
    algo_name, _, threads = args.child.rpartition("-t")
    import ray

    from flowrl.experiment import algorithm_class, load_spec, make_config
    spec = load_spec(os.path.join(ROOT, "tuned_examples", f"{algo_name}-pong.yaml"))
    config = make_config(spec["algo"], {"env": spec["env"], **spec["config"],
                                        "seed": args.seed, "torch_threads": int(threads)})
    ray.init(address="local", num_cpus=config.num_workers + 2, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    algo = algorithm_class(spec["algo"])(config)
    try:
        window, last = Window(args.warmup, args.seconds), 0
        while True:
            now = int(algo.train()["timesteps_total"])
            if now and not window.add(now - last):
                break
            last = now
        result = window.result()
    finally:
        algo.stop()
        ray.shutdown()
    harness.write_result(result)


def report(runs: list[dict], algos) -> None:
    groups = {g.system: g for g in harness.summarize(runs, ["agent_steps_per_s"])}

    def steps(algo, n):
        g = groups.get(system_name(algo, n))
        return g.figures.get("agent_steps_per_s") if g else None

    rows = []
    for algo in algos:
        one, two = steps(algo, 1), steps(algo, 2)
        x = harness.ratio(two, one)
        rows.append([algo, harness.fmt_figure(one, "{:,.0f}"), harness.fmt_figure(two, "{:,.0f}"),
                     harness.fmt_ratio(x)])
    harness.print_table(["algorithm", "torch_threads=1", "torch_threads=2", "2 / 1"], rows,
                        title=f"ALE/Pong-v5 env steps/s from tuned_examples/<algo>-pong.yaml, "
                              f"{os.cpu_count()} CPUs, driver torch threads (Ray workers: 1 "
                              "each): median [min-max] over seeds")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algos", nargs="+", default=ALGOS, choices=ALGOS)
    add_window_arguments(p, seconds=45.0, warmup=20.0)
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    check_window_arguments(p, args)
    return args


def main(argv=None) -> None:
    args = parse(argv)
    if args.child:
        child(args)
        return
    systems = [system_name(a, n) for a in args.algos for n in THREADS]
    meta = {"algos": args.algos, "threads": THREADS, "seconds": args.seconds,
            "warmup": args.warmup}
    runs, meta = harness.run(args, "torch_threads", __file__, systems,
                             harness.forward(args, "seconds", "warmup"), meta)
    report(runs, meta["algos"])


if __name__ == "__main__":
    main()
