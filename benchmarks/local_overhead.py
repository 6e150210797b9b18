"""Driver-side overhead: a 6-operator chain on flowrl's local backend vs alternatives.

Runs the same chain, in one process, over the same items:

- flowrl: ``from_iterable -> op1..op6`` compiled on the local backend, per-node stats on;
- ray.util.iter: ``LocalIterator`` with the same operators (what RLlib 1.x used);
- plain generators: the lower bound.

Two chains: ``maps`` (six one-to-one operators: for_each x5 and a filter, which
flowrl fuses into one call per item) and ``mixed`` (for_each, filter, batch,
flatten, for_each, for_each: batch/flatten break fusion). Prints items/s (median
of ``--repeats``) and the ratio of flowrl to each baseline.

    python benchmarks/local_overhead.py [--items 300000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import flowrl


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


def apply_ops(stream, chain):
    for op, arg in chain:
        stream = getattr(stream, op)() if arg is None else getattr(stream, op)(arg)
    return stream


def run_flowrl(n, chain):
    run = flowrl.Plan(apply_ops(flowrl.from_iterable(lambda: range(n)), chain)).compile("local")
    count = sum(1 for _ in run)
    assert run.stats()  # per-node stats were kept
    return count


def run_ray_iter(n, chain):
    from ray.util.iter import LocalIterator
    from ray.util.iter_metrics import SharedMetrics
    it = LocalIterator(lambda timeout=None: iter(range(n)), SharedMetrics())
    return sum(1 for _ in apply_ops(it, chain))


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
    return sum(1 for _ in it)


def measure(fn, n, chain, repeats):
    rates, counts = [], set()
    for _ in range(repeats):
        start = time.perf_counter()
        counts.add(fn(n, chain))
        rates.append(n / (time.perf_counter() - start))
    if len(counts) != 1:
        raise RuntimeError(f"{fn.__name__} produced different counts: {counts}")
    return statistics.median(rates), counts.pop()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=300_000)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args(argv)
    warnings.simplefilter("ignore")
    print(f"{args.items} items per run, median of {args.repeats} runs (items/s in)")
    print(f"{'chain':8s} {'flowrl':>12s} {'ray.util.iter':>14s} {'plain gen':>12s} "
          f"{'vs ray.util.iter':>17s} {'vs plain':>9s}")
    for name, chain in CHAINS.items():
        flow, c1 = measure(run_flowrl, args.items, chain, args.repeats)
        ray_it, c2 = measure(run_ray_iter, args.items, chain, args.repeats)
        plain, c3 = measure(run_plain, args.items, chain, args.repeats)
        if not c1 == c2 == c3:
            raise RuntimeError(f"chains disagree on output size: {c1}, {c2}, {c3}")
        print(f"{name:8s} {flow:12,.0f} {ray_it:14,.0f} {plain:12,.0f} "
              f"{flow / ray_it:16.2f}x {flow / plain:8.2f}x")


if __name__ == "__main__":
    main()
