"""Result logging for a training run: ``result.jsonl`` and TensorBoard event files.

:class:`ResultLogger` writes every result dict twice into the run directory: as
one JSON line of ``result.jsonl`` (the whole nested dict; NaN becomes ``null``) and
as TensorBoard scalars through tensorboardX (no TensorFlow needed), one scalar per
numeric leaf of that same JSON, tagged by its path (``info/learner/default_policy/kl``)
at step ``timesteps_total``. So the event file holds exactly the scalars of the
JSON line. :func:`read_scalars` reads an event file back without TensorBoard. To
watch them: ``pip install 'flowrl[tensorboard]'``, then ``tensorboard --logdir runs``.

>>> import tempfile
>>> d = tempfile.mkdtemp()
>>> with ResultLogger(d) as log:
...     log.log({"training_iteration": 1, "timesteps_total": 10, "info": {"kl": 0.5},
...              "episode_reward_mean": float("nan"), "note": "text"})
>>> read_scalars(d)
{'info/kl': [(10, 0.5)], 'timesteps_total': [(10, 10.0)], 'training_iteration': [(10, 1.0)]}
"""

from __future__ import annotations

import glob
import json
import math
import os
import struct
from typing import Any

RESULT_FILE = "result.jsonl"


def jsonable(x: Any, *, keep_nan: bool = False) -> Any:
    """``x`` with numpy scalars as Python numbers, tuples as lists, NaN as None and
    dict keys as strings: what ``result.jsonl`` holds. ``keep_nan`` keeps NaN a
    float (Ray Tune's schedulers need a metric that is a number in every result).

    >>> import numpy as np
    >>> jsonable({"a": np.float32(0.5), 1: (np.int64(2), float("nan"))})
    {'a': 0.5, '1': [2, None]}
    >>> jsonable([np.nan], keep_nan=True)
    [nan]
    """
    if isinstance(x, dict):
        return {str(k): jsonable(v, keep_nan=keep_nan) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [jsonable(v, keep_nan=keep_nan) for v in x]
    if hasattr(x, "item") and not isinstance(x, (str, bytes)):
        try:
            x = x.item()
        except (TypeError, ValueError):  # a non-scalar array
            return jsonable(x.tolist(), keep_nan=keep_nan)
    if isinstance(x, float) and math.isnan(x) and not keep_nan:
        return None
    return x


def flatten_scalars(result: dict, prefix: str = "") -> dict[str, float]:
    """Numeric leaves of ``jsonable(result)`` keyed by their ``/``-joined path
    (bools, strings, None and lists are not scalars).

    >>> flatten_scalars({"a": 1, "b": {"c": 2.5, "d": None, "e": True}})
    {'a': 1.0, 'b/c': 2.5}
    """
    out: dict[str, float] = {}
    for k, v in jsonable(result).items():
        tag = f"{prefix}{k}"
        if isinstance(v, dict):
            out.update(flatten_scalars(v, tag + "/"))
        elif isinstance(v, (int, float)) and not isinstance(v, bool):
            out[tag] = float(v)
    return out


class ResultLogger:
    """Appends results to ``<run_dir>/result.jsonl`` and to a TensorBoard event file
    in ``run_dir`` (``tensorboard=False`` for JSON only). ``close()`` (or the
    ``with`` block) flushes both.

    A run directory that already holds results (a resumed run) keeps them: lines
    are appended to its ``result.jsonl``, and the new event file goes beside the
    old ones under a name of its own (tensorboardX names files by the second and
    would overwrite one of the same second), so TensorBoard shows one run."""

    def __init__(self, run_dir: str, tensorboard: bool = True):
        os.makedirs(run_dir, exist_ok=True)
        self.run_dir = run_dir
        self._json = open(os.path.join(run_dir, RESULT_FILE), "a")
        self._tb = None
        if tensorboard:
            from tensorboardX import SummaryWriter
            earlier = glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))
            self._tb = SummaryWriter(logdir=run_dir, flush_secs=5,
                                     filename_suffix=f".{len(earlier)}" if earlier else "")

    def log(self, result: dict) -> None:
        """Write one result (a JSON line, and its scalars to TensorBoard)."""
        data = jsonable(result)
        self._json.write(json.dumps(data) + "\n")
        self._json.flush()
        if self._tb is not None:
            step = int(data.get("timesteps_total") or data.get("training_iteration") or 0)
            for tag, value in flatten_scalars(data).items():
                self._tb.add_scalar(tag, value, global_step=step)
            self._tb.flush()

    def close(self) -> None:
        """Flush and close both files (idempotent)."""
        if not self._json.closed:
            self._json.close()
        if self._tb is not None:
            self._tb.close()
            self._tb = None

    def __enter__(self) -> "ResultLogger":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _records(path: str):
    # TFRecord framing: u64 length, u32 length crc, payload, u32 payload crc.
    with open(path, "rb") as f:
        while True:
            header = f.read(12)
            if len(header) < 12:
                return
            (length,) = struct.unpack("<Q", header[:8])
            payload = f.read(length)
            f.read(4)
            if len(payload) < length:
                return
            yield payload


def read_scalars(run_dir: str) -> dict[str, list[tuple[int, float]]]:
    """Every scalar in the TensorBoard event files of ``run_dir``: tag -> list of
    ``(step, value)`` in write order (tags sorted)."""
    from tensorboardX.proto import event_pb2
    out: dict[str, list[tuple[int, float]]] = {}
    for path in sorted(glob.glob(os.path.join(run_dir, "events.out.tfevents.*"))):
        for payload in _records(path):
            event = event_pb2.Event()
            event.ParseFromString(payload)
            for value in event.summary.value:
                if value.HasField("simple_value"):
                    out.setdefault(value.tag, []).append((event.step, value.simple_value))
    return dict(sorted(out.items()))


__all__ = ["ResultLogger", "RESULT_FILE", "jsonable", "flatten_scalars", "read_scalars"]
