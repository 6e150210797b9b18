"""``DatasetReader``: recorded batches read back, piece by piece, sharded and shuffled.

A dataset is the files that ``paths`` name (each a file, a directory, whose files
of the format are taken, or a glob); hidden files (a writer's unfinished
``.*.tmp``) are never read. Each file is cut into *pieces*, the units read and
shuffled: a line of a JSON file (one recorded batch), a row group of a Parquet
file (written batches gathered to at least
:data:`~flowrl.offline.writer.ROWS_PER_GROUP` rows, or a file's last rows). A Minari dataset
(:mod:`flowrl.offline.minari_data`) counts as one file whose pieces are its
episodes. A piece keeps its rows in the order
they were recorded, so trajectories stay in time order for postprocessing.

Policy:

- Sharding: the pieces of all files, in file order, are numbered ``0, 1, ...``;
  shard ``k`` of ``n`` reads the pieces whose number is ``k`` modulo ``n``. The
  shards of one dataset are disjoint and together read every piece once per pass.
- Passes: a pass reads the shard's pieces once; :meth:`DatasetReader.batches`
  reads passes forever. With ``shuffle`` every pass reads them in another order,
  a permutation drawn from ``seed`` and the pass number (the same in every
  process, so sharding stays disjoint).
- Errors: a file that cannot be opened or parsed, or a piece that cannot be
  decoded, is skipped with a :class:`~flowrl.FlowRLWarning` naming it
  (``on_error="skip"``) or raises a ConfigError naming it (``on_error="raise"``).

- Position: :meth:`DatasetReader.batches` records where it is, ``(pass, pieces
  of the pass taken)`` in ``position``, and starts from such a position when given
  one, so a checkpointed run reads on from where it was instead of from the start.

State: the file list, each file's pieces (found when the reader is built: a
Parquet file's footer, a JSON file's line offsets), open file handles, the
pieces skipped so far (``skipped``) and ``position``.

>>> import tempfile
>>> from flowrl.batch import SampleBatch
>>> from flowrl.offline.writer import DatasetWriter
>>> d = tempfile.mkdtemp()
>>> w = DatasetWriter(d, format="json", max_rows_per_file=4)
>>> for i in range(3):
...     w.write(SampleBatch(t=[2 * i, 2 * i + 1]))
>>> w.close()
>>> first, second = (DatasetReader([d], format="json", shard_index=k, num_shards=2)
...                  for k in (0, 1))
>>> [b["t"].tolist() for b in first.read_pass(0)], [b["t"].tolist() for b in second.read_pass(0)]
([[0, 1], [4, 5]], [[2, 3]])
"""

from __future__ import annotations

import glob
import os
import warnings
from typing import Any, Iterator, Sequence

import numpy as np

from flowrl.batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError
from flowrl.offline import minari_data, rllib_json
from flowrl.offline.parquet import from_table, import_pyarrow

#: ``input_config["format"]`` choices (``"minari"``: a Minari dataset's directory,
#: :mod:`flowrl.offline.minari_data`).
INPUT_FORMATS = ("parquet", "json", "minari")
#: ``input_config["on_error"]`` choices.
ON_ERROR = ("skip", "raise")
#: The file name ending each format's files have in a directory.
EXTENSIONS = {"parquet": (".parquet",), "json": (".json", ".jsonl")}

Batch = SampleBatch | MultiAgentBatch


def list_files(paths: Sequence[str], format: str, where: str) -> list[str]:
    """The files ``paths`` name, in order (a directory's and a glob's sorted): each
    path is a file, a directory (its non-hidden files ending as the format's do) or
    a glob. No file at all is a ConfigError naming ``where`` and the paths.

    >>> list_files(["/nonexistent/*.json"], "json", "input")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: input=['/nonexistent/*.json']: no json files there; give a directory of .json or .jsonl files, a file or a glob that matches some
    """
    if format == "minari":
        files = minari_data.dataset_directories(paths)
        if not files:
            raise ConfigError(f"{where}={list(paths)!r}: no Minari dataset there; give a "
                              "dataset's directory (the one holding data/metadata.json) or a "
                              "glob of them")
        return files
    files: list[str] = []
    for path in paths:
        path = os.path.expanduser(str(path))
        if os.path.isdir(path):
            found = sorted(os.path.join(path, f) for f in os.listdir(path)
                           if not f.startswith(".") and f.endswith(EXTENSIONS[format])
                           and os.path.isfile(os.path.join(path, f)))
        elif os.path.isfile(path):
            found = [path]
        else:
            found = sorted(f for f in glob.glob(path) if os.path.isfile(f))
        files += [f for f in found if f not in files]
    if not files:
        ends = " or ".join(EXTENSIONS[format])
        raise ConfigError(f"{where}={list(paths)!r}: no {format} files there; give a directory "
                          f"of {ends} files, a file or a glob that matches some")
    return files


def _json_offsets(path: str) -> list[int]:
    offsets, pos = [], 0
    with open(path, "rb") as f:
        for line in f:
            if line.strip():
                offsets.append(pos)
            pos += len(line)
    return offsets


class DatasetReader:
    """Reads the files ``paths`` name as batches; see the module docstring.

    ``format``: ``"parquet"``, ``"json"`` or ``"minari"``. ``shard_index``/``num_shards``: which
    pieces this reader reads (``0``/``1``: all). ``where`` names the setting in
    messages (``"AlgorithmConfig.input"``).
    """

    def __init__(self, paths: Sequence[str], *, format: str = "parquet", shuffle: bool = False,
                 seed: int | None = None, on_error: str = "raise", shard_index: int = 0,
                 num_shards: int = 1, where: str = "input"):
        if format not in INPUT_FORMATS:
            raise ConfigError(f"{where}: format={format!r}; choose one of {list(INPUT_FORMATS)}")
        if on_error not in ON_ERROR:
            raise ConfigError(f"{where}: on_error={on_error!r}; choose one of {list(ON_ERROR)}")
        if not 0 <= shard_index < num_shards:
            raise ConfigError(f"{where}: shard {shard_index} of {num_shards} does not exist")
        if format == "parquet":
            import_pyarrow(where)
        elif format == "minari":
            minari_data.import_minari(where)
        self.paths = [str(p) for p in paths]
        self.format, self.shuffle, self.seed, self.on_error = format, shuffle, seed, on_error
        self.shard_index, self.num_shards, self.where = shard_index, num_shards, where
        self.files = list_files(self.paths, format, where)
        self.skipped: list[str] = []
        self.position: tuple[int, int] = (0, 0)
        self._handles: dict[str, Any] = {}
        #: ``(file, key)`` of every piece of the dataset (key: a JSON line's offset,
        #: a Parquet row group's index), in file order.
        self.pieces: list[tuple[str, int]] = []
        for path in self.files:
            keys = self._guard(path, None, lambda p=path: self._keys(p))
            self.pieces += [(path, k) for k in keys or ()]

    def _keys(self, path: str) -> list[int]:
        if self.format == "json":
            return _json_offsets(path)
        if self.format == "minari":
            return minari_data.episode_indices(self._open(path))
        return list(range(self._open(path).num_row_groups))

    def _open(self, path: str) -> Any:
        """The open Parquet file or Minari dataset at ``path`` (opened once)."""
        handle = self._handles.get(path)
        if handle is None:
            if self.format == "minari":
                handle = minari_data.open_dataset(path, self.where)
            else:
                handle = import_pyarrow(self.where).parquet.ParquetFile(path)
            self._handles[path] = handle
        return handle

    def _guard(self, path: str, key: int | None, fn) -> Any:
        """``fn()``, where an error reading the file is skipped (warned) or raised as
        a ConfigError naming the file, per ``on_error``."""
        try:
            return fn()
        except ConfigError:
            raise
        except Exception as e:  # a corrupt file: pyarrow, json, lz4, pickle, OS errors
            where = path if key is None else f"{path} ({self._piece_name(key)})"
            what = f"{type(e).__name__}: {e}"
            if self.on_error == "raise":
                raise ConfigError(f"{self.where}: cannot read {where}: {what}; fix or remove "
                                  "the file, or set input_config={'on_error': 'skip'} to skip "
                                  "what cannot be read") from e
            self.skipped.append(where)
            from flowrl import FlowRLWarning
            warnings.warn(f"{self.where}: skipped {where}, which cannot be read ({what})",
                          FlowRLWarning, stacklevel=2)
            return None

    def _piece_name(self, key: int) -> str:
        return {"json": f"line at byte {key}", "parquet": f"row group {key}",
                "minari": f"episode {key}"}[self.format]

    def shard(self) -> list[tuple[str, int]]:
        """This reader's pieces, in file order."""
        return self.pieces[self.shard_index::self.num_shards]

    def pass_order(self, pass_index: int) -> list[int]:
        """The numbers of the shard's pieces in the order pass ``pass_index`` reads
        them (shuffled with ``shuffle``: drawn from ``seed`` and ``pass_index``)."""
        order = list(range(len(self.pieces)))
        if self.shuffle:
            rng = np.random.default_rng([self.seed or 0, pass_index])
            order = rng.permutation(len(self.pieces)).tolist()
        return order[self.shard_index::self.num_shards]

    def _read(self, number: int) -> Batch | None:
        path, key = self.pieces[number]
        return self._guard(path, key, lambda: self.read_piece(path, key))

    def read_pass(self, pass_index: int = 0) -> Iterator[Batch]:
        """The shard's pieces once, as batches, in :meth:`pass_order`. Unreadable
        pieces are skipped or raise, per ``on_error``."""
        for number in self.pass_order(pass_index):
            batch = self._read(number)
            if batch is not None:
                yield batch

    def batches(self, position: tuple[int, int] = (0, 0)) -> Iterator[Batch]:
        """Passes over the shard, forever, from ``position``: ``(pass, pieces of that
        pass already taken)``, as ``self.position`` records it while this runs (a
        piece counts once its batch is handed out, or once it is skipped). A
        ConfigError when a whole pass yields nothing (every piece of the shard
        skipped, or a shard with no piece)."""
        pass_index, start = (int(v) for v in position)
        self.position = (pass_index, start)
        while True:
            order, empty = self.pass_order(pass_index), True
            for n in range(start, len(order)):
                batch = self._read(order[n])
                self.position = (pass_index, n + 1)
                if batch is not None:
                    empty = False
                    yield batch
            if empty and start == 0:
                raise ConfigError(
                    f"{self.where}: shard {self.shard_index} of {self.num_shards} read nothing "
                    f"from {self.paths} ({len(self.pieces)} readable pieces in "
                    f"{len(self.files)} files, {len(self.skipped)} skipped); give more data "
                    "or fewer workers (each reads a disjoint share)")
            pass_index, start = pass_index + 1, 0

    def read_piece(self, path: str, key: int) -> Batch:
        """The batch piece ``key`` of file ``path`` holds (errors are the format's)."""
        if self.format == "json":
            f = self._handles.get(path)
            if f is None:
                f = self._handles[path] = open(path, "rb")
            f.seek(key)
            return rllib_json.decode(f.readline())
        if self.format == "minari":
            return minari_data.episode_batch(self._open(path), key)
        pid, rows = from_table(self._open(path).read_row_group(key))
        if pid == DEFAULT_POLICY_ID:
            return rows
        return MultiAgentBatch({pid: rows}, distinct_steps(rows))

    def first_batch(self, path: str) -> Batch | None:
        """The first readable piece of ``path`` (None when it has none)."""
        for piece_path, key in self.pieces:
            if piece_path == path:
                batch = self._guard(path, key, lambda k=key: self.read_piece(path, k))
                if batch is not None:
                    return batch
        return None

    def close(self) -> None:
        """Close the open files."""
        for handle in self._handles.values():
            close = getattr(handle, "close", None)
            if close is not None:
                close()
        self._handles = {}


def distinct_steps(rows: SampleBatch) -> int:
    """The env steps a policy's rows cover: distinct ``(eps_id, t)`` pairs (the row
    count without those columns).

    >>> distinct_steps(SampleBatch(eps_id=[1, 1, 1], t=[0, 0, 1]))
    2
    """
    if "eps_id" not in rows or "t" not in rows:
        return rows.count
    pairs = np.stack([np.asarray(rows["eps_id"], np.int64), np.asarray(rows["t"], np.int64)], 1)
    return int(len(np.unique(pairs, axis=0)))


__all__ = ["DatasetReader", "list_files", "distinct_steps", "INPUT_FORMATS", "ON_ERROR"]
