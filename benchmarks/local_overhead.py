"""Driver-side overhead: a 6-operator chain on flowrl's local backend vs ray.util.iter,
built-in map/filter and plain generators.

The same chain runs over the same ``--items`` integers in each system:

- ``flowrl``: ``from_iterable -> op1..op6`` compiled on the local backend, per-node
  stats on (as every run keeps them);
- ``ray.util.iter``: ``LocalIterator`` with the same operators (what RLlib 1.x used);
- ``builtin``: ``map``/``filter`` and ``itertools`` (batch: ``islice`` chunks,
  flatten: ``chain.from_iterable``): the floor for a pull-based chain in Python;
- ``plain``: one generator function per operator.

Two chains, both quoted: ``maps`` (for_each x5 and a filter: one-to-one operators,
which flowrl fuses into one call per item) and ``mixed`` (for_each, filter,
batch(16), flatten, for_each, for_each: batch/flatten end a fused run).

Each system runs in its own process per seed (``benchmarks/harness.py``), and
inside it the two chains alternate for ``--reps`` repetitions. The output is
collected into a list inside the timed region and checked afterwards: count and
an order-sensitive checksum must agree across every system and repetition.
Reported: input items/s (median over runs of each run's median) and flowrl's
ratio to each other system.

    python benchmarks/local_overhead.py
    python benchmarks/local_overhead.py --quick --no-idle-wait
"""

from __future__ import annotations

import argparse
import itertools
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SYSTEMS = ["flowrl", "ray.util.iter", "builtin", "plain"]
BASELINES = ["ray.util.iter", "builtin", "plain"]


def f1(x): return x + 1
def f2(x): return x * 3
def f3(x): return x - 2
def f4(x): return x ^ 5
def f5(x): return x + 7
def keep(x): return x % 7 != 0


CHAINS = {
    "maps": [("for_each", f1), ("for_each", f2), ("filter", keep), ("for_each", f3),
             ("for_each", f4), ("for_each", f5)],
    "mixed": [("for_each", f1), ("filter", keep), ("batch", 16), ("flatten", None),
              ("for_each", f2), ("for_each", f3)],
}


def checksum(values) -> int:
    """Order-sensitive checksum of a sequence of ints."""
    acc = 0
    for v in values:
        acc = (acc * 1_000_003 + v) % (2 ** 61 - 1)
    return acc


def apply_ops(stream, chain):
    for op, arg in chain:
        stream = getattr(stream, op)() if arg is None else getattr(stream, op)(arg)
    return stream


def run_flowrl(n, chain):
    import flowrl
    run = flowrl.Plan(apply_ops(flowrl.from_iterable(lambda: range(n)), chain)).compile("local")
    return list(run)


def run_ray_iter(n, chain):
    from ray.util.iter import LocalIterator
    from ray.util.iter_metrics import SharedMetrics
    it = LocalIterator(lambda timeout=None: iter(range(n)), SharedMetrics())
    return list(apply_ops(it, chain))


def _chunks(it, k):
    it = iter(it)
    return iter(lambda: list(itertools.islice(it, k)), [])


def run_builtin(n, chain):
    it = range(n)
    for op, arg in chain:
        if op == "for_each":
            it = map(arg, it)
        elif op == "filter":
            it = filter(arg, it)
        elif op == "batch":
            it = _chunks(it, arg)
        else:
            it = itertools.chain.from_iterable(it)
    return list(it)


def run_plain(n, chain):
    def for_each(it, fn):
        for x in it:
            yield fn(x)

    def filter_(it, fn):
        for x in it:
            if fn(x):
                yield x

    def batch(it, k):
        buf = []
        for x in it:
            buf.append(x)
            if len(buf) == k:
                yield buf
                buf = []
        if buf:
            yield buf

    def flatten(it, _):
        for x in it:
            yield from x

    impl = {"for_each": for_each, "filter": filter_, "batch": batch, "flatten": flatten}
    it = iter(range(n))
    for op, arg in chain:
        it = impl[op](it, arg)
    return list(it)


RUNNERS = {"flowrl": run_flowrl, "ray.util.iter": run_ray_iter, "builtin": run_builtin,
           "plain": run_plain}


def child(args) -> None:
    import warnings
    warnings.simplefilter("ignore")
    fn = RUNNERS[args.child]
    fn(1000, CHAINS["maps"])  # warm-up: imports
    rates = {c: [] for c in CHAINS}
    sums: dict[str, set] = {c: set() for c in CHAINS}
    for rep in range(args.reps):
        order = list(CHAINS) if rep % 2 == 0 else list(reversed(CHAINS))
        for name in order:
            start = time.perf_counter()
            out = fn(args.items, CHAINS[name])
            rates[name].append(args.items / (time.perf_counter() - start))
            sums[name].add((len(out), checksum(out)))
    result = {}
    for name in CHAINS:
        if len(sums[name]) != 1:
            raise SystemExit(f"{args.child}: chain {name} gave different outputs across "
                             f"repetitions: {sums[name]}")
        (count, check), = sums[name]
        result.update({f"{name}_items_per_s": statistics.median(rates[name]),
                       f"{name}_count": count, f"{name}_checksum": check})
    harness.write_result(result)


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--items", type=int, default=300_000)
    p.add_argument("--reps", type=int, default=5, help="repetitions per process")
    harness.add_arguments(p)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, items=20_000, reps=2)
    if args.child:
        child(args)
        return
    runs, _ = harness.run(args, "local_overhead", __file__, args.systems,
                          harness.forward(args, "items", "reps"),
                          meta={"items": args.items, "reps": args.reps})
    for name in CHAINS:
        outputs = {(r["result"][f"{name}_count"], r["result"][f"{name}_checksum"])
                   for r in runs if r.get("valid")}
        if len(outputs) != 1:
            raise SystemExit(f"chain {name}: systems disagree on the output (count, "
                             f"checksum): {sorted(outputs)}")
        print(f"chain {name}: every system produced {next(iter(outputs))[0]:,} items, "
              f"checksum {next(iter(outputs))[1]}")
    keys = [f"{c}_items_per_s" for c in CHAINS]
    groups = {g.system: g for g in harness.summarize(runs, keys)}
    rows = []
    for name in CHAINS:
        key = f"{name}_items_per_s"
        fig = {sname: g.figures.get(key) for sname, g in groups.items()}
        rows.append([name, *(harness.fmt_figure(fig.get(sname), "{:,.0f}") for sname in SYSTEMS),
                     *(f"{harness.ratio(fig.get('flowrl'), fig.get(b)):.2f}x" for b in BASELINES)])
    harness.print_table(["chain", *SYSTEMS, *(f"flowrl/{b}" for b in BASELINES)], rows,
                        title=f"input items/s, median [min-max], {args.items:,} items, "
                              f"runs per system: {[g.n for g in groups.values()]}")


if __name__ == "__main__":
    main()
