"""Reading a recorded dataset into train batches: flowrl's reader vs a plain loop.

Each child writes a dataset of ``--rows`` rows (CartPole-sized by default;
``--obs-shape 84 84 4`` for uint8 frames) with flowrl's ``DatasetWriter``, in
``--fragment``-row batches (one Parquet row group, one JSON line each), then times
``--reps`` passes reading every row into train batches of ``--batch`` rows. Only the
reading is timed. Systems:

- ``flowrl-parquet`` / ``flowrl-json``: a ``RolloutWorker`` whose ``input`` is the
  dataset, ``sample()`` after ``sample()`` (``rollout_fragment_length=--batch``):
  the path a plan's rollout source takes (reader, casts, batch assembly);
- ``plain-parquet``: pyarrow's ``ParquetFile.read_row_group`` over every file, each
  column to numpy (``to_numpy_ndarray`` for tensor columns), concatenated per
  train batch;
- ``plain-json``: every line ``json.loads``-ed, packed columns unpacked
  (base64, LZ4, pickle), lists to numpy, concatenated per train batch.

Reported: rows/s (median over runs of each run's median pass) and flowrl / plain
per format; the target is >= 0.9x.

    python benchmarks/offline_reader.py
    python benchmarks/offline_reader.py --obs-shape 84 84 4 --rows 50000
    python benchmarks/offline_reader.py --quick --no-idle-wait
"""

from __future__ import annotations

import argparse
import base64
import glob
import json
import os
import pickle
import statistics
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

FORMATS = ["parquet", "json"]
SYSTEMS = [f"{kind}-{fmt}" for fmt in FORMATS for kind in ("flowrl", "plain")]
TARGET = 0.9


def write_dataset(path: str, fmt: str, rows: int, fragment: int, obs_shape: tuple, seed: int):
    """``rows`` rows in ``fragment``-row batches, written by flowrl's DatasetWriter."""
    import numpy as np

    from flowrl.batch import SampleBatch
    from flowrl.offline.writer import DatasetWriter
    rng = np.random.default_rng(seed)
    images = len(obs_shape) > 1
    writer = DatasetWriter(path, format=fmt, max_rows_per_file=20 * fragment)
    for start in range(0, rows, fragment):
        n = min(fragment, rows - start)
        obs = (rng.integers(0, 255, (n, *obs_shape), dtype=np.uint8) if images
               else rng.normal(size=(n, *obs_shape)).astype(np.float32))
        writer.write(SampleBatch(
            obs=obs, new_obs=obs, actions=rng.integers(0, 2, n), rewards=np.ones(n, np.float32),
            terminateds=np.zeros(n, bool), truncateds=np.zeros(n, bool),
            action_logp=np.full(n, -0.69, np.float32), eps_id=np.full(n, start // 500),
            t=np.arange(start, start + n), agent_index=np.zeros(n, np.int64)))
    writer.close()


def spaces_env(obs_shape: tuple):
    """An env class with the dataset's spaces (a reading worker never steps it)."""
    import gymnasium as gym
    import numpy as np
    images = len(obs_shape) > 1
    space = (gym.spaces.Box(0, 255, obs_shape, np.uint8) if images
             else gym.spaces.Box(-np.inf, np.inf, obs_shape, np.float32))

    class Spaces(gym.Env):
        observation_space, action_space = space, gym.spaces.Discrete(2)

        def __init__(self, config=None):
            pass

        def reset(self, *, seed=None, options=None):
            return space.sample(), {}

        def step(self, action):
            raise RuntimeError("the benchmark reads; it never steps")
    return Spaces


def concat(parts: list[dict]) -> dict:
    import numpy as np
    return {k: np.concatenate([p[k] for p in parts]) for k in parts[0]}


def plain_parquet_pieces(path: str):
    """Every row group of the directory's Parquet files, as numpy column dicts."""
    import pyarrow as pa
    import pyarrow.parquet as pq
    for f in sorted(glob.glob(os.path.join(path, "*.parquet"))):
        pf = pq.ParquetFile(f)
        for i in range(pf.num_row_groups):
            table = pf.read_row_group(i)
            cols = {}
            for name in table.column_names:
                col = table.column(name).combine_chunks()
                if isinstance(col.type, pa.FixedShapeTensorType):
                    cols[name] = col.to_numpy_ndarray()
                elif not isinstance(col.type, pa.DictionaryType):
                    cols[name] = col.to_numpy(zero_copy_only=False)
            yield cols


def plain_json_pieces(path: str):
    """Every line of the directory's JSON files, as numpy column dicts."""
    import lz4.frame
    import numpy as np
    for f in sorted(glob.glob(os.path.join(path, "*.json"))):
        with open(f, "rb") as fh:
            for line in fh:
                record = json.loads(line)
                record.pop("type")
                yield {k: (pickle.loads(lz4.frame.decompress(base64.b64decode(v)))
                           if isinstance(v, str) else np.asarray(v)) for k, v in record.items()}


def plain_pass(pieces, batch: int) -> int:
    """Rows read in one pass of ``pieces``, assembled into ``batch``-row batches."""
    rows, parts, held = 0, [], 0
    for cols in pieces:
        n = len(cols["t"])
        parts.append(cols)
        held += n
        if held >= batch:
            rows += len(concat(parts)["t"])
            parts, held = [], 0
    if parts:
        rows += len(concat(parts)["t"])
    return rows


def child(args) -> None:
    kind, fmt = args.child.split("-")
    obs_shape = tuple(args.obs_shape)
    with tempfile.TemporaryDirectory() as path:
        write_dataset(path, fmt, args.rows, args.fragment, obs_shape, args.seed)
        rates = []
        if kind == "plain":
            pieces = plain_parquet_pieces if fmt == "parquet" else plain_json_pieces
            for _ in range(args.reps):
                start = time.perf_counter()
                rows = plain_pass(pieces(path), args.batch)
                rates.append(rows / (time.perf_counter() - start))
        else:
            from flowrl.policies import PGPolicy
            from flowrl.workers import RolloutWorker
            worker = RolloutWorker(spaces_env(obs_shape), policy=PGPolicy, seed=args.seed,
                                   rollout_fragment_length=args.batch, input=path,
                                   input_config={"format": fmt})
            for _ in range(args.reps):
                start, rows = time.perf_counter(), 0
                while rows < args.rows:
                    rows += worker.sample().count
                rates.append(rows / (time.perf_counter() - start))
            worker.stop()
    harness.write_result({"rows_per_s": statistics.median(rates)})


def report(runs: list[dict], args) -> None:
    groups = {g.system: g for g in harness.summarize(runs, ["rows_per_s"])}
    fig = {k: g.figures.get("rows_per_s") for k, g in groups.items()}
    rows = [[k, g.label, harness.fmt_figure(fig[k], "{:,.0f}")] for k, g in groups.items()]
    harness.print_table(["system", "runs", "rows/s"], rows,
                        title=f"reading {args.rows:,} rows of obs shape {tuple(args.obs_shape)} "
                              f"into {args.batch}-row train batches: median [min-max]")
    for fmt in FORMATS:
        if f"flowrl-{fmt}" in fig and f"plain-{fmt}" in fig:
            ratio = harness.ratio(fig[f"flowrl-{fmt}"], fig[f"plain-{fmt}"])
            print(f"flowrl-{fmt} / plain-{fmt}: {harness.fmt_ratio(ratio)} "
                  f"(target >= {TARGET}x)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--rows", type=int, default=200_000)
    p.add_argument("--fragment", type=int, default=200)
    p.add_argument("--batch", type=int, default=4000)
    p.add_argument("--obs-shape", type=int, nargs="+", default=[4])
    p.add_argument("--reps", type=int, default=3)
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, seeds=1, rows=4000, batch=1000, reps=1)
    if args.child:
        child(args)
        return
    options = ("rows", "fragment", "batch", "obs_shape", "reps")
    runs, meta = harness.run(args, "offline_reader", __file__, args.systems,
                             harness.forward(args, *options),
                             meta={k: getattr(args, k) for k in options})
    report(runs, argparse.Namespace(**meta))


if __name__ == "__main__":
    main()
