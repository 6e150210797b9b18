"""A RolloutWorker sampling Pong with the CNN: ``vector_env`` sync, async and envpool.

Each system is ``<kind>-<N>``: ``RolloutWorker("ALE/Pong-v5", policy=IMPALAPolicy,
num_envs=N, rollout_fragment_length=T, vector_env=kind, torch_threads=1).sample()``
with the DeepMind preprocessing (uint8 ``(4, 84, 84)`` frames) and the catalog's
default CNN for 84x84 (the Nature CNN, acting through torch: one batched forward
over the ``N`` envs per step). ``sync`` steps the envs one after the other in the
worker's process; ``async`` steps them in ``N`` subprocesses at once (gymnasium's
``AsyncVectorEnv``, frames through shared memory) while the worker waits. So
``async`` can use more cores than one; on a machine with fewer idle cores than
``N + 1`` it pays the process switches without the parallelism. ``envpool``
(measured where ``envpool`` imports) steps them in EnvPool's C++ threads with its
own preprocessing (same frame shapes, not the same frames).

One repetition is ``--steps`` env steps (whole ``sample()`` calls of ``N * T``
steps, at least 4,000 steps) after one warm-up ``sample()``. Each system runs in
its own process per seed (``benchmarks/harness.py``), ``--reps`` repetitions each;
reported: env steps/s (median over runs of each run's median) and, per ``N``,
``async / sync`` and ``envpool / sync``.

    python benchmarks/vector_envs.py
    python benchmarks/vector_envs.py --num-envs 8
    python benchmarks/vector_envs.py --quick --no-idle-wait
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

KINDS = ["sync", "async", "envpool"]
MIN_STEPS = 4_000


def systems_for(num_envs: list[int], kinds: list[str]) -> list[str]:
    """``<kind>-<N>`` for every kind and env count.

    >>> systems_for([4, 8], ["sync", "async"])
    ['sync-4', 'async-4', 'sync-8', 'async-8']
    """
    return [f"{kind}-{n}" for n in num_envs for kind in kinds]


def available_kinds() -> list[str]:
    """:data:`KINDS`, without ``envpool`` where it does not import."""
    import importlib.util
    return [k for k in KINDS if k != "envpool" or importlib.util.find_spec("envpool")]


def parse_system(system: str) -> tuple[str, int]:
    """``(kind, num_envs)`` of a system name.

    >>> parse_system("async-8")
    ('async', 8)
    """
    kind, n = system.rsplit("-", 1)
    return kind, int(n)


def child(args) -> None:
    from flowrl.policies import IMPALAPolicy
    from flowrl.workers import RolloutWorker
    kind, n = parse_system(args.child)
    worker = RolloutWorker("ALE/Pong-v5", policy=IMPALAPolicy, num_envs=n,
                           rollout_fragment_length=args.fragment, seed=args.seed,
                           vector_env=kind, torch_threads=1)
    try:
        per_sample = n * args.fragment
        samples = max(1, -(-args.steps // per_sample))
        worker.sample()  # warm-up: buffers, torch kernels
        rates = []
        for _ in range(args.reps):
            start = time.perf_counter()
            for _ in range(samples):
                worker.sample()
            rates.append(samples * per_sample / (time.perf_counter() - start))
    finally:
        worker.stop()
    harness.write_result({"steps_per_s": statistics.median(rates),
                          "steps_per_rep": samples * per_sample, "rates": rates})


def report(runs: list[dict], args) -> None:
    """The table, and ``async / sync`` per env count."""
    groups = {g.system: g for g in harness.summarize(runs, ["steps_per_s"])}
    fig = {k: g.figures.get("steps_per_s") for k, g in groups.items()}
    rows = [[k, groups[k].label, harness.fmt_figure(fig[k], "{:,.0f}")] for k in groups]
    harness.print_table(["system", "runs", "env steps/s"], rows,
                        title=f"ALE/Pong-v5 (DeepMind preprocessing), Nature CNN, fragments "
                              f"of {args.fragment} steps per env, one torch thread")
    for n in args.num_envs:
        base = fig.get(f"sync-{n}")
        for kind in KINDS[1:]:
            if f"{kind}-{n}" in fig and base is not None:
                print(f"{kind}-{n} / sync-{n}: {harness.ratio(fig[f'{kind}-{n}'], base):.2f}x")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--num-envs", type=int, nargs="+", default=[4, 8])
    p.add_argument("--kinds", nargs="+", choices=KINDS, default=None,
                   help="vector_env kinds (default: sync, async, and envpool where installed)")
    p.add_argument("--fragment", type=int, default=50, help="rollout_fragment_length")
    p.add_argument("--steps", type=int, default=MIN_STEPS, help="env steps per repetition")
    p.add_argument("--reps", type=int, default=3, help="repetitions per process")
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    args.kinds = args.kinds or available_kinds()
    harness.shorten_for_quick(args, reps=1, steps=200, fragment=10)
    if not args.quick and args.steps < MIN_STEPS:
        p.error(f"--steps {args.steps}: use at least {MIN_STEPS} env steps per repetition")
    if args.child:
        child(args)
        return
    runs, _ = harness.run(args, "vector_envs", __file__, systems_for(args.num_envs, args.kinds),
                          harness.forward(args, "num_envs", "fragment", "steps", "reps", "quick"),
                          meta=vars(args) | {"results_dir": None})
    report(runs, args)


if __name__ == "__main__":
    main()
