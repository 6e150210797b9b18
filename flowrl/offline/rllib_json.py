"""RLlib 1.x's JSON-lines format: one sampled batch per line.

A line is a JSON object. A single-agent batch is ``{"type": "SampleBatch", column:
value, ...}``; a multi-agent one is ``{"type": "MultiAgentBatch", "count": env_steps,
"policy_batches": {policy_id: {column: value, ...}}}``. A value is a JSON list (one
entry per row), or, for the compressed columns (RLlib's ``output_compress_columns``,
``obs`` and ``new_obs`` by default), a string: the column's numpy array pickled,
compressed with LZ4 (``lz4.frame``) and base64-encoded, which keeps its dtype
(images stay uint8). RLlib 1.x reads every string value as such a packed array.

Done flags: RLlib 1.x has one ``dones`` column (True at a termination or a time
limit). :func:`encode` writes it beside flowrl's ``terminateds`` and ``truncateds``,
so RLlib 1.x and flowrl both read what they need; :func:`decode` of a record without
``terminateds`` takes ``dones`` as terminations, except where a row's
``infos`` say ``"TimeLimit.truncated"`` (gymnasium's old time-limit flag), which are
truncations. Columns that are not numbers (``infos``) are not read. A column written as a list
of floats is read as float32 (flowrl's float columns), one of ints as int64.

Compatibility of the pickles: the arrays :func:`pack` writes unpickle as
``numpy.ndarray(shape, dtype, buffer)`` in every numpy version (numpy 2's own
pickles name ``numpy._core``, which the numpy 1.x under RLlib 1.x cannot import).
:func:`unpack` loads numpy arrays and scalars only: a packed value naming anything
else is refused, so reading a dataset runs no code from it.

>>> import numpy as np
>>> from flowrl.batch import SampleBatch
>>> b = SampleBatch(obs=np.zeros((2, 3), np.uint8), actions=[0, 1], rewards=[1.0, 0.5],
...                 terminateds=[False, True], truncateds=[False, False])
>>> back = decode(encode(b))
>>> back["obs"].dtype, back["actions"].tolist(), back["terminateds"].tolist()
(dtype('uint8'), [0, 1], [False, True])
"""

from __future__ import annotations

import base64
import io
import json
import pickle
from typing import Any, Iterable

import numpy as np

from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError

SB = SampleBatch

#: Columns RLlib 1.x compressed by default (its ``output_compress_columns``).
DEFAULT_COMPRESS_COLUMNS = ("obs", "new_obs")

#: RLlib 1.x's one done flag.
DONES = "dones"


def import_lz4(where: str) -> Any:
    """``lz4.frame``, or a ConfigError naming ``where`` and how to install it."""
    try:
        import lz4.frame
    except ImportError:
        raise ConfigError(f"{where}: packed (compressed) JSON columns need the lz4 package, "
                          "which is not installed; pip install 'flowrl[offline]' (or lz4), "
                          "or write them uncompressed: output_config={'compress_columns': []}"
                          ) from None
    return lz4.frame


class _ArrayPickler(pickle.Pickler):
    """Pickles numpy arrays as ``numpy.ndarray(shape, dtype, bytes)``: loadable by
    numpy 1.x and 2.x alike."""

    def reducer_override(self, obj: Any) -> Any:
        if type(obj) is np.ndarray and obj.dtype.kind != "O":
            return np.ndarray, (obj.shape, obj.dtype.str, np.ascontiguousarray(obj).tobytes())
        return NotImplemented


def _allowed_globals() -> dict[tuple[str, str], Any]:
    # numpy's own reconstructors, found through its public reductions: pickle
    # protocols up to 4 rebuild arrays with multiarray._reconstruct, protocol 5 (RLlib
    # 1.x on Python 3.8+) with numeric._frombuffer; numpy 1.x keeps them under
    # numpy.core, numpy 2.x under numpy._core.
    found = {"_reconstruct": np.zeros(1).__reduce__()[0],
             "scalar": np.float64(0).__reduce__()[0],
             "_frombuffer": np.zeros(1).__reduce_ex__(5)[0]}
    allowed = {("numpy", "ndarray"): np.ndarray, ("numpy", "dtype"): np.dtype}
    for package in ("numpy.core", "numpy._core"):
        for module, name in (("multiarray", "_reconstruct"), ("multiarray", "scalar"),
                             ("numeric", "_frombuffer")):
            allowed[(f"{package}.{module}", name)] = found[name]
    return allowed


_ALLOWED = _allowed_globals()


class _ArrayUnpickler(pickle.Unpickler):
    """Loads numpy arrays, dtypes and scalars; refuses any other global."""

    def find_class(self, module: str, name: str) -> Any:
        try:
            return _ALLOWED[(module, name)]
        except KeyError:
            raise pickle.UnpicklingError(
                f"a packed column names {module}.{name}; only numpy arrays are loaded") from None


def pack(array: np.ndarray) -> str:
    """``array`` pickled, LZ4-compressed and base64-encoded, as RLlib 1.x packs a column.

    >>> unpack(pack(np.arange(3, dtype=np.int16))).tolist()
    [0, 1, 2]
    """
    buf = io.BytesIO()
    _ArrayPickler(buf, protocol=4).dump(np.asarray(array))
    data = import_lz4("RLlib JSON output").compress(buf.getvalue())
    return base64.b64encode(data).decode("ascii")


def unpack(text: str | bytes) -> np.ndarray:
    """The array :func:`pack` (or RLlib 1.x) packed. A value that is not a packed numpy
    array raises ValueError (pickle's and lz4's errors are ValueErrors or pickle errors)."""
    data = import_lz4("RLlib JSON input").decompress(base64.b64decode(text))
    value = _ArrayUnpickler(io.BytesIO(data)).load()
    if isinstance(value, list):  # RLlib could pack a column that was still a list
        value = np.asarray(value)
    if not isinstance(value, np.ndarray):
        raise ValueError(f"a packed column holds a {type(value).__name__}, not a numpy array")
    # pack()'s arrays view the pickle's bytes (read-only): give them writable memory
    return value if value.flags.writeable else value.copy()


def _jsonable(name: str, column: np.ndarray, compress: Iterable[str]) -> Any:
    if name in compress:
        return pack(column)
    return column.tolist()


def _columns_to_json(batch: SampleBatch, compress: Iterable[str]) -> dict[str, Any]:
    out = {name: _jsonable(name, col, compress) for name, col in batch.items()
           if col.dtype.kind in "biuf"}
    if SB.TERMINATEDS in batch:
        done = np.asarray(batch[SB.TERMINATEDS], bool)
        if SB.TRUNCATEDS in batch:
            done = done | np.asarray(batch[SB.TRUNCATEDS], bool)
        out[DONES] = done.tolist()
    return out


def encode(batch: SampleBatch | MultiAgentBatch,
           compress_columns: Iterable[str] = DEFAULT_COMPRESS_COLUMNS) -> str:
    """One JSON line (without the newline) holding ``batch`` in RLlib 1.x's format.

    Columns of numbers and booleans are written (others, such as object arrays, are
    left out); ``compress_columns`` are packed (:func:`pack`), the rest are lists.
    """
    compress = frozenset(compress_columns)
    if isinstance(batch, MultiAgentBatch):
        record = {"type": "MultiAgentBatch", "count": batch.env_steps(),
                  "policy_batches": {pid: _columns_to_json(b, compress)
                                     for pid, b in batch.policy_batches.items()}}
    else:
        record = {"type": "SampleBatch", **_columns_to_json(batch, compress)}
    return json.dumps(record)


def _column(name: str, value: Any) -> np.ndarray | None:
    if isinstance(value, (str, bytes)):
        return unpack(value)
    array = np.asarray(value)
    if array.dtype == np.float64:   # a list of floats: flowrl's float columns are float32
        return array.astype(np.float32)
    return array if array.dtype.kind in "biuf" else None


def _time_limits(infos: Any, n: int) -> np.ndarray:
    out = np.zeros(n, bool)
    if isinstance(infos, list) and len(infos) == n:
        out[:] = [isinstance(i, dict) and bool(i.get("TimeLimit.truncated", False))
                  for i in infos]
    return out


def _columns_from_json(data: dict[str, Any]) -> SampleBatch:
    if not isinstance(data, dict):
        raise ValueError(f"a batch is a {type(data).__name__}, not a JSON object")
    columns = {}
    for name, value in data.items():
        if name == "infos":
            continue
        array = _column(name, value)
        if array is not None:
            columns[name] = array
    dones = columns.pop(DONES, None)
    if dones is not None and SB.TERMINATEDS not in columns:
        dones = dones.astype(bool)
        limits = _time_limits(data.get("infos"), len(dones))
        columns[SB.TERMINATEDS] = dones & ~limits
        columns[SB.TRUNCATEDS] = dones & limits
    return SampleBatch(columns)


def decode(line: str | bytes) -> SampleBatch | MultiAgentBatch:
    """The batch of one line RLlib 1.x (or :func:`encode`) wrote. A line that is not
    such a record raises ValueError saying what is wrong with it."""
    data = json.loads(line)
    if not isinstance(data, dict):
        raise ValueError(f"the line holds a JSON {type(data).__name__}, not a batch object")
    kind = data.pop("type", None)
    if kind == "SampleBatch":
        return _columns_from_json(data)
    if kind == "MultiAgentBatch":
        policies = data.get("policy_batches")
        if not isinstance(policies, dict):
            raise ValueError("a MultiAgentBatch record has no 'policy_batches' object")
        return MultiAgentBatch({str(pid): _columns_from_json(cols)
                                for pid, cols in policies.items()}, int(data.get("count", 0)))
    raise ValueError(f"the record's 'type' is {kind!r}; RLlib's records are 'SampleBatch' or "
                     "'MultiAgentBatch'")


__all__ = ["encode", "decode", "pack", "unpack", "DEFAULT_COMPRESS_COLUMNS", "DONES",
           "import_lz4"]
