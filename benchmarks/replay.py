"""Prioritized replay throughput: flowrl vs RLlib 2.x vs a plain Python reference.

At capacity ``--capacity`` (default 1M rows of CartPole-sized transitions), each
buffer is filled, then timed on three operations:

- add: ``--add-batch`` rows per call (a rollout fragment) into the full buffer;
- sample: ``sample(--batch)`` (default 512) with importance weights;
- update: ``update_priorities`` of the ``--batch`` rows just sampled.

Buffers, all proportional prioritized replay with alpha 0.6, beta 0.4:

- flowrl: :class:`flowrl.replay.PrioritizedReplayBuffer` (numpy segment trees,
  one numpy call per tree level for a whole batch);
- RLlib 2.x: ``ray.rllib.utils.replay_buffers.PrioritizedReplayBuffer`` (old API
  stack, ``storage_unit="timesteps"``), when RLlib is installed;
- reference: a plain Python sum/min segment tree, one row at a time (what a
  straightforward implementation does; also the model the property tests use).

Printed: operations/s and rows/s per buffer, and flowrl's speed-up over the
others; the target is >= 3x RLlib on sample + update. The reference and RLlib are
filled to ``--fill`` rows (default: the capacity) through their own ``add``, which
for them is slow at 1M rows; ``--fill`` smaller keeps the run short while the
trees keep their full 1M-leaf depth.

    python benchmarks/replay.py                          # capacity 1M, batch 512
    python benchmarks/replay.py --capacity 10000 --reps 5  # a smoke run
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from flowrl.batch import SampleBatch
from flowrl.replay import PrioritizedReplayBuffer

ALPHA, BETA = 0.6, 0.4


def rows(n: int, start: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(start)
    return {"obs": rng.normal(size=(n, 4)).astype(np.float32),
            "new_obs": rng.normal(size=(n, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, n), "rewards": np.ones(n, np.float32),
            "terminateds": np.zeros(n, bool)}


class PythonPrioritized:
    """Plain Python proportional replay: list storage, per-row segment trees."""

    def __init__(self, capacity: int, alpha: float, seed: int = 0):
        self.capacity, self.alpha = capacity, alpha
        size = 1
        while size < capacity:
            size *= 2
        self.size = size
        self.sum = [0.0] * (2 * size)
        self.min = [float("inf")] * (2 * size)
        self.data: list = []
        self.next, self.max_p = 0, 1.0
        import random
        self.rng = random.Random(seed)

    def _set(self, i: int, v: float) -> None:
        j = i + self.size
        self.sum[j] = self.min[j] = v
        j //= 2
        while j:
            self.sum[j] = self.sum[2 * j] + self.sum[2 * j + 1]
            self.min[j] = min(self.min[2 * j], self.min[2 * j + 1])
            j //= 2

    def add(self, batch: dict[str, np.ndarray]) -> None:
        n = len(batch["rewards"])
        for r in range(n):
            row = {k: v[r] for k, v in batch.items()}
            if len(self.data) < self.capacity:
                self.data.append(row)
            else:
                self.data[self.next] = row
            self._set(self.next, self.max_p ** self.alpha)
            self.next = (self.next + 1) % self.capacity

    def _find(self, mass: float) -> int:
        j = 1
        while j < self.size:
            if mass >= self.sum[2 * j] and self.sum[2 * j + 1] > 0:
                mass -= self.sum[2 * j]
                j = 2 * j + 1
            else:
                j = 2 * j
        return j - self.size

    def sample(self, n: int, beta: float):
        total, count = self.sum[1], len(self.data)
        idx = [min(self._find(self.rng.random() * total), count - 1) for _ in range(n)]
        max_w = (self.min[1] / total * count) ** -beta
        weights = [(self.sum[i + self.size] / total * count) ** -beta / max_w for i in idx]
        out = {k: np.stack([self.data[i][k] for i in idx]) for k in self.data[0]}
        out["weights"], out["batch_indexes"] = np.array(weights), np.array(idx)
        return out

    def update_priorities(self, idx, prios) -> None:
        for i, p in zip(idx, prios):
            self._set(int(i), float(p) ** self.alpha)
            self.max_p = max(self.max_p, float(p))


def _time(fn, reps: int) -> float:
    fn()  # warm-up
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t) / reps


def bench(name: str, buf, add, sample, update, args) -> dict:
    out = {"name": name}
    out["add"] = _time(add, args.reps)
    state = {}

    def do_sample():
        state["s"] = sample()

    out["sample"] = _time(do_sample, args.reps)
    out["update"] = _time(lambda: update(state["s"]), args.reps)
    return out


def fill(add_fn, total: int, chunk: int = 50_000) -> float:
    t = time.perf_counter()
    done = 0
    while done < total:
        n = min(chunk, total - done)
        add_fn(rows(n, done), n)
        done += n
    return time.perf_counter() - t


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--capacity", type=int, default=1_000_000)
    p.add_argument("--fill", type=int, default=None, help="rows added before timing "
                   "(default: the capacity) for RLlib and the reference")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--add-batch", type=int, default=200)
    p.add_argument("--reps", type=int, default=50)
    p.add_argument("--only", nargs="*", default=["flowrl", "rllib", "python"])
    args = p.parse_args()
    fill_rows = args.fill or args.capacity
    rng = np.random.default_rng(0)
    fresh = rows(args.add_batch, 10**9)
    results = []

    if "flowrl" in args.only:
        buf = PrioritizedReplayBuffer(args.capacity, alpha=ALPHA, beta=BETA, seed=0)
        s = fill(lambda b, n: buf.add(SampleBatch(b)), args.capacity)
        print(f"flowrl: filled {args.capacity:,} rows in {s:.1f} s")
        fresh_b = SampleBatch(fresh)
        results.append(bench(
            "flowrl", buf, lambda: buf.add(fresh_b), lambda: buf.sample(args.batch),
            lambda s: buf.update_priorities(s["batch_indexes"],
                                            rng.uniform(0.1, 10, args.batch),
                                            row_ids=s["batch_row_ids"]), args))

    if "rllib" in args.only:
        try:
            from ray.rllib.policy.sample_batch import SampleBatch as RSB
            from ray.rllib.utils.replay_buffers.prioritized_replay_buffer import \
                PrioritizedReplayBuffer as RLlibPRB
        except ImportError as e:
            print(f"RLlib not installed ({e}); skipped")
        else:
            rb = RLlibPRB(capacity=args.capacity, storage_unit="timesteps", alpha=ALPHA)
            s = fill(lambda b, n: rb.add(RSB(b)), fill_rows)
            print(f"RLlib: filled {fill_rows:,} rows in {s:.1f} s")
            fresh_r = RSB(fresh)
            results.append(bench(
                "RLlib", rb, lambda: rb.add(fresh_r), lambda: rb.sample(args.batch, beta=BETA),
                lambda s: rb.update_priorities(s["batch_indexes"],
                                               rng.uniform(0.1, 10, args.batch)), args))

    if "python" in args.only:
        pb = PythonPrioritized(args.capacity, ALPHA)
        s = fill(lambda b, n: pb.add(b), fill_rows)
        print(f"python: filled {fill_rows:,} rows in {s:.1f} s")
        results.append(bench(
            "python", pb, lambda: pb.add(fresh), lambda: pb.sample(args.batch, BETA),
            lambda s: pb.update_priorities(s["batch_indexes"], rng.uniform(0.1, 10, args.batch)),
            args))

    print(f"\ncapacity {args.capacity:,}, sample/update batch {args.batch}, add batch "
          f"{args.add_batch}, {args.reps} reps (ms per call; rows/s)")
    print(f"{'buffer':<8} {'add':>16} {'sample':>16} {'update':>16} {'sample+update':>16}")
    for r in results:
        su = r["sample"] + r["update"]
        print(f"{r['name']:<8} {r['add'] * 1e3:7.3f} {args.add_batch / r['add']:8.0f} "
              f"{r['sample'] * 1e3:7.3f} {args.batch / r['sample']:8.0f} "
              f"{r['update'] * 1e3:7.3f} {args.batch / r['update']:8.0f} {su * 1e3:16.3f}")
    base = next((r for r in results if r["name"] == "flowrl"), None)
    if base is not None:
        for r in results:
            if r is base:
                continue
            su = (r["sample"] + r["update"]) / (base["sample"] + base["update"])
            print(f"flowrl vs {r['name']}: add {r['add'] / base['add']:.1f}x, sample "
                  f"{r['sample'] / base['sample']:.1f}x, update {r['update'] / base['update']:.1f}x, "
                  f"sample+update {su:.1f}x" + ("  (target >= 3x)" if r["name"] == "RLlib" else ""))


if __name__ == "__main__":
    main()
