"""Prioritized replay throughput: flowrl vs RLlib 2.x vs a plain Python reference.

Systems (each seed of each in a fresh process, interleaved, on an idle CPU; see
``benchmarks/harness.py``), all proportional prioritized replay with alpha 0.6,
beta 0.4, at capacity ``--capacity`` (default 1M rows of CartPole-sized
transitions):

- ``flowrl``: :class:`flowrl.replay.PrioritizedReplayBuffer` (numpy segment
  trees, one numpy call per tree level for a whole batch);
- ``rllib``: RLlib 2.x ``ray.rllib.utils.replay_buffers.PrioritizedReplayBuffer``
  (old API stack, ``storage_unit="timesteps"``);
- ``reference``: a plain Python sum/min segment tree updated one row at a time
  (what a straightforward implementation does).

Each buffer is filled (flowrl to the capacity; RLlib and the reference to
``--fill`` rows, default 100k, because their own ``add`` keeps one Python object
per row, which at 1M rows is slow and takes several GB; their trees keep the full
capacity's depth, and flowrl's fuller storage does not make its sampling
cheaper), then each operation is repeated for ``--reps`` calls:

- add: ``--add-batch`` rows per call (a rollout fragment) -> ``add_rows_per_s``;
- sample: ``sample(--batch)`` (default 512) with importance weights ->
  ``sample_per_s`` (calls/s);
- update: ``update_priorities`` of the ``--batch`` rows just sampled ->
  ``update_per_s`` (calls/s);
- sample + update, one after the other -> ``sample_update_per_s`` (calls/s).

The table gives the median [min-max] over seeds per system and flowrl's ratio to
each other system; the target is flowrl/RLlib >= 3x on sample + update.

    python benchmarks/replay.py                         # 3 seeds x 3 systems, about 2 min idle
    python benchmarks/replay.py --quick --no-idle-wait  # smoke run (capacity 20k)
    python benchmarks/replay.py --report benchmarks/results/replay-<stamp>.json
"""

from __future__ import annotations

import argparse
import os
import random
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)

ALPHA, BETA = 0.6, 0.4
SYSTEMS = ["flowrl", "rllib", "reference"]
BASELINE = "rllib"
KEYS = ["add_rows_per_s", "sample_per_s", "update_per_s", "sample_update_per_s", "fill_s",
        "filled_rows"]


def rows(n: int, start: int = 0) -> dict:
    """``n`` CartPole-sized transitions (seeded by ``start``)."""
    import numpy as np
    rng = np.random.default_rng(start)
    return {"obs": rng.normal(size=(n, 4)).astype(np.float32),
            "new_obs": rng.normal(size=(n, 4)).astype(np.float32),
            "actions": rng.integers(0, 2, n), "rewards": np.ones(n, np.float32),
            "terminateds": np.zeros(n, bool)}


class PythonPrioritized:
    """Plain Python proportional replay: list storage, per-row sum/min segment trees."""

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
        self.rng = random.Random(seed)

    def _set(self, i: int, v: float) -> None:
        j = i + self.size
        self.sum[j] = self.min[j] = v
        j //= 2
        while j:
            self.sum[j] = self.sum[2 * j] + self.sum[2 * j + 1]
            self.min[j] = min(self.min[2 * j], self.min[2 * j + 1])
            j //= 2

    def add(self, batch: dict) -> None:
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

    def sample(self, n: int, beta: float) -> dict:
        import numpy as np
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


def _per_s(fn, reps: int) -> float:
    """Calls per second of ``fn`` over ``reps`` calls (after one warm-up call)."""
    fn()
    t = time.perf_counter()
    for _ in range(reps):
        fn()
    return reps / (time.perf_counter() - t)


def _fill(add_fn, total: int, chunk: int = 50_000) -> float:
    t = time.perf_counter()
    done = 0
    while done < total:
        n = min(chunk, total - done)
        add_fn(rows(n, done))
        done += n
    return time.perf_counter() - t


def _buffer(system: str, args):
    """``(fill_rows, add(dict), sample(), update(sample))`` for ``system``."""
    import numpy as np
    rng = np.random.default_rng(args.seed)
    if system == "flowrl":
        from flowrl.batch import SampleBatch
        from flowrl.replay import PrioritizedReplayBuffer
        buf = PrioritizedReplayBuffer(args.capacity, alpha=ALPHA, beta=BETA, seed=args.seed)
        return (args.capacity, lambda b: buf.add(SampleBatch(b)),
                lambda: buf.sample(args.batch),
                lambda s: buf.update_priorities(s["batch_indexes"],
                                                rng.uniform(0.1, 10, args.batch),
                                                row_ids=s["batch_row_ids"]))
    if system == "rllib":
        from ray.rllib.policy.sample_batch import SampleBatch as RSB
        from ray.rllib.utils.replay_buffers.prioritized_replay_buffer import \
            PrioritizedReplayBuffer as RLlibPRB
        rb = RLlibPRB(capacity=args.capacity, storage_unit="timesteps", alpha=ALPHA)
        return (min(args.fill, args.capacity), lambda b: rb.add(RSB(b)),
                lambda: rb.sample(args.batch, beta=BETA),
                lambda s: rb.update_priorities(s["batch_indexes"],
                                               rng.uniform(0.1, 10, args.batch)))
    if system == "reference":
        pb = PythonPrioritized(args.capacity, ALPHA, seed=args.seed)
        return (min(args.fill, args.capacity), pb.add, lambda: pb.sample(args.batch, BETA),
                lambda s: pb.update_priorities(s["batch_indexes"],
                                               rng.uniform(0.1, 10, args.batch)))
    raise SystemExit(f"unknown system {system!r}; choose from {SYSTEMS}")


def child(args) -> None:
    fill_rows, add, sample, update = _buffer(args.child, args)
    out = {"fill_s": _fill(add, fill_rows), "filled_rows": fill_rows}
    fresh = rows(args.add_batch, 10**9 + args.seed)
    out["add_rows_per_s"] = _per_s(lambda: add(fresh), args.reps) * args.add_batch
    state = {"s": sample()}

    def do_sample():
        state["s"] = sample()

    out["sample_per_s"] = _per_s(do_sample, args.reps)
    out["update_per_s"] = _per_s(lambda: update(state["s"]), args.reps)
    out["sample_update_per_s"] = _per_s(lambda: update(sample()), args.reps)
    harness.write_result(out)


def report(runs: list[dict], args) -> None:
    groups = harness.summarize(runs, KEYS)
    flowrl = next((g for g in groups if g.system == "flowrl"), None)

    def vs_flowrl(g):
        key = "sample_update_per_s"
        return ("-" if flowrl is None or g is flowrl else
                f"{harness.ratio(flowrl.figures.get(key), g.figures.get(key)):.1f}x")

    harness.print_groups(groups, [
        ("add rows/s", "add_rows_per_s", "{:,.0f}"),
        (f"sample({args.batch})/s", "sample_per_s", "{:,.0f}"),
        (f"update_priorities({args.batch})/s", "update_per_s", "{:,.0f}"),
        ("sample+update/s", "sample_update_per_s", "{:,.0f}"),
        ("flowrl/this sample+update", vs_flowrl), ("filled rows", "filled_rows", "{:,.0f}"),
        ("fill s", "fill_s", "{:,.1f}")],
        title=f"prioritized replay, capacity {args.capacity:,}, add batch {args.add_batch}, "
              f"{args.reps} calls per figure: median [min-max] (target flowrl/{BASELINE} "
              ">= 3x on sample+update)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--capacity", type=int, default=1_000_000)
    p.add_argument("--fill", type=int, default=100_000,
                   help="rows added before timing for rllib and reference (flowrl: capacity)")
    p.add_argument("--batch", type=int, default=512)
    p.add_argument("--add-batch", type=int, default=200)
    p.add_argument("--reps", type=int, default=50)
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, capacity=20_000, fill=20_000, reps=5)
    if args.child:
        child(args)
        return
    options = ("capacity", "fill", "batch", "add_batch", "reps")
    runs, meta = harness.run(args, "replay", __file__, args.systems,
                             harness.forward(args, *options),
                             meta={k: getattr(args, k) for k in options})
    report(runs, argparse.Namespace(**meta))


if __name__ == "__main__":
    main()
