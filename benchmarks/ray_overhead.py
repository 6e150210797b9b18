"""What flowrl's Ray backend costs over a hand-written Ray loop and over ray.util.iter.

Identical trivial actors each return a fresh 200x4 float32 numpy batch per item.
In ONE Ray session (``ray.init(num_cpus=2)``) the same actors are read by:

- flowrl ``from_actors(actors).gather_async(num_async=2)`` / ``.gather_sync()``
  (``backend="ray"``);
- a hand-written Ray loop per mode: async keeps two ``sample.remote()`` calls in
  flight per actor and does one batched ``ray.wait`` per step (non-blocking first,
  then blocking for one); sync does ``ray.get([a.sample.remote() for a in actors])``
  rounds;
- ``ray.util.iter.from_actors(actors).gather_async(num_async=2)`` / ``.gather_sync()``.

Each measurement times ``--items`` items after a short warm-up; the modes are
interleaved per repetition and the median of ``--runs`` repetitions is reported
as items/s, with flowrl's ratio to the hand-written loop and to ray.util.iter.

Run: ``python benchmarks/ray_overhead.py [--actors 4] [--items 4000] [--runs 7]``
"""

from __future__ import annotations

import argparse
import statistics
import time
import warnings

import numpy as np
import ray
from ray.util.iter import ParallelIteratorWorker
from ray.util.iter import from_actors as iter_from_actors

import flowrl

warnings.filterwarnings("ignore", category=DeprecationWarning)

WARMUP = 50


class BenchActor(flowrl.ShardHost, ParallelIteratorWorker):
    """One item = one fresh (200, 4) float32 batch; readable by all three drivers."""

    def __init__(self):
        ParallelIteratorWorker.__init__(self, self._forever, repeat=False)

    def sample(self) -> np.ndarray:
        return np.ones((200, 4), dtype=np.float32)

    def _forever(self):
        while True:
            yield self.sample()

    def shard_items(self):
        return self._forever()


def timed(it, n: int) -> float:
    """Items/s of pulling ``n`` items from iterator ``it`` (after a warm-up)."""
    for _ in range(WARMUP):
        next(it)
    t = time.perf_counter()
    for _ in range(n):
        next(it)
    return n / (time.perf_counter() - t)


def flowrl_rate(actors, mode: str, n: int) -> float:
    s = flowrl.from_actors(actors)
    out = s.gather_async(num_async=2) if mode == "async" else s.gather_sync()
    with flowrl.Plan(out).compile(backend="ray") as run:
        return timed(run, n)


def hand_async(actors):
    pending = {}
    for _ in range(2):
        for a in actors:
            pending[a.sample.remote()] = a
    while True:
        refs = list(pending)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if not ready:
            ready, _ = ray.wait(refs, num_returns=1)
        for ref, value in zip(ready, ray.get(ready)):
            a = pending.pop(ref)
            pending[a.sample.remote()] = a
            yield value


def hand_sync(actors):
    while True:
        yield from ray.get([a.sample.remote() for a in actors])


def hand_rate(actors, mode: str, n: int) -> float:
    gen = hand_async(actors) if mode == "async" else hand_sync(actors)
    try:
        return timed(gen, n)
    finally:
        gen.close()


def iter_rate(actors, mode: str, n: int) -> float:
    par = iter_from_actors(actors)
    it = par.gather_async(num_async=2) if mode == "async" else par.gather_sync()
    return timed(iter(it), n)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--actors", type=int, default=4)
    ap.add_argument("--items", type=int, default=4000)
    ap.add_argument("--runs", type=int, default=7)
    args = ap.parse_args()

    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    actors = [ray.remote(num_cpus=0)(BenchActor).remote() for _ in range(args.actors)]
    ray.get([a.flowrl_ping.remote() for a in actors])

    drivers = {"flowrl": flowrl_rate, "hand-written": hand_rate, "ray.util.iter": iter_rate}
    rates = {(d, m): [] for d in drivers for m in ("async", "sync")}
    for _ in range(args.runs):
        for mode in ("async", "sync"):
            for d, fn in drivers.items():
                rates[d, mode].append(fn(actors, mode, args.items))

    print(f"{args.actors} actors, 200x4 float32 per item, {args.items} items x {args.runs} "
          "runs, ray.init(num_cpus=2); median items/s")
    print(f"{'mode':<7}{'flowrl':>10}{'hand':>10}{'ray.iter':>10}"
          f"{'flowrl/hand':>13}{'flowrl/iter':>13}")
    for mode, label in (("async", "gather_async(num_async=2)"), ("sync", "gather_sync")):
        med = {d: statistics.median(rates[d, mode]) for d in drivers}
        print(f"{mode:<7}{med['flowrl']:>10.0f}{med['hand-written']:>10.0f}"
              f"{med['ray.util.iter']:>10.0f}{med['flowrl'] / med['hand-written']:>13.2f}"
              f"{med['flowrl'] / med['ray.util.iter']:>13.2f}   {label}")
    ray.shutdown()


if __name__ == "__main__":
    main()
