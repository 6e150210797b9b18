"""``DatasetWriter``: a rollout worker's sampled batches, written to files.

Policy: every batch handed to :meth:`DatasetWriter.write` is appended to the
worker's current file, which is closed once it holds ``max_rows_per_file`` rows
(a single-agent batch is split between two files to keep that bound; a
multi-agent JSON record is one line and is never split). A file is written under
a hidden temporary name (``.<name>.tmp``) in the output directory and renamed to
its real name only once it is complete, flushed and synced, so readers, which
skip hidden files, never see a half-written file, even when the process is
killed mid-write (what is lost then is the open file's rows).

Parquet row groups: consecutive batches of a stream are gathered into one row
group of at least :data:`ROWS_PER_GROUP` rows (a file's last group may hold fewer),
so an algorithm that samples a row at a time (SAC's one-step fragments) does not
write a row group, with its per-group metadata, per row. A row group is the piece a
reader shards and shuffles.

File names: ``output-<time>_worker-<index>_<token>_<n>.json`` (RLlib 1.x's
pattern plus a token unique to the writer, so restarted workers never collide)
and, for Parquet, one series of files per policy,
``output-<time>_worker-<index>_<token>_<policy>_<n>.parquet``.

State: the open files (one, or one per policy for Parquet), the rows in each and
the count of files finished (``files_written``). :meth:`close` finishes the open
files; a writer closed and written to again opens new files.

>>> import os, tempfile
>>> from flowrl.batch import SampleBatch
>>> d = tempfile.mkdtemp()
>>> w = DatasetWriter(d, format="json", max_rows_per_file=3, worker_index=1)
>>> w.write(SampleBatch(obs=[[0.0], [1.0]], actions=[0, 1]))
>>> w.write(SampleBatch(obs=[[2.0], [3.0]], actions=[1, 1]))
>>> w.close()
>>> len([f for f in os.listdir(d) if f.endswith(".json")]), w.files_written
(2, 2)
"""

from __future__ import annotations

import os
import re
import time
import uuid
from typing import Any, Iterable

from flowrl.batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch
from flowrl.offline import rllib_json
from flowrl.offline.parquet import import_pyarrow, to_table

#: ``output_config["format"]`` choices.
OUTPUT_FORMATS = ("parquet", "json")
#: Default bound on a file's rows (``output_config["max_rows_per_file"]``).
DEFAULT_MAX_ROWS_PER_FILE = 100_000
#: The fewest rows a Parquet row group gathers before it is written (see above).
ROWS_PER_GROUP = 64


def _safe(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.-]", "-", name)


class _OpenFile:
    """One file being written under its temporary name."""

    def __init__(self, directory: str, name: str):
        self.final = os.path.join(directory, name)
        self.temp = os.path.join(directory, f".{name}.tmp")
        self.rows = 0
        self.handle: Any = None   # a text file (JSON) or a pyarrow ParquetWriter
        self.schema: Any = None
        self.gathered: list = []  # Parquet tables not yet written as a row group
        self.gathered_rows = 0

    def write_gathered(self) -> None:
        """Write the gathered Parquet tables as one row group."""
        if self.gathered:
            pa = import_pyarrow("DatasetWriter")
            self.handle.write_table(pa.concat_tables(self.gathered))
            self.gathered, self.gathered_rows = [], 0

    def finish(self) -> None:
        """Close the file, sync it and give it its real name."""
        if self.schema is not None:
            self.write_gathered()
            self.handle.close()
            fd = os.open(self.temp, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)
        else:
            self.handle.flush()
            os.fsync(self.handle.fileno())
            self.handle.close()
        os.replace(self.temp, self.final)


class DatasetWriter:
    """Writes batches into directory ``path``; see the module docstring.

    ``format``: ``"parquet"`` or ``"json"`` (RLlib 1.x's JSON lines,
    :mod:`flowrl.offline.rllib_json`). ``compression``: the Parquet codec (one of
    :data:`~flowrl.offline.parquet.CODECS`). ``compress_columns``: the JSON columns
    packed with LZ4 (RLlib's ``output_compress_columns``). ``worker_index`` goes into
    the file names.
    """

    def __init__(self, path: str, *, format: str = "parquet",
                 max_rows_per_file: int = DEFAULT_MAX_ROWS_PER_FILE,
                 compression: str = "snappy",
                 compress_columns: Iterable[str] = rllib_json.DEFAULT_COMPRESS_COLUMNS,
                 worker_index: int = 0):
        if format == "parquet":
            import_pyarrow("DatasetWriter(format='parquet')")
        elif list(compress_columns):
            rllib_json.import_lz4("DatasetWriter(format='json')")
        os.makedirs(path, exist_ok=True)
        self.path = path
        self.format = format
        self.max_rows_per_file = max_rows_per_file
        self.compression = compression
        self.compress_columns = tuple(compress_columns)
        self.prefix = (f"output-{time.strftime('%Y-%m-%d_%H-%M-%S')}_worker-{worker_index}_"
                       f"{uuid.uuid4().hex[:8]}")
        self.files_written = 0
        self._open: dict[str, _OpenFile] = {}
        self._numbers: dict[str, int] = {}

    def _file(self, stream: str) -> _OpenFile:
        f = self._open.get(stream)
        if f is None:
            n = self._numbers.get(stream, 0)
            self._numbers[stream] = n + 1
            part = "" if stream == "" else f"{_safe(stream)}_"
            ext = "json" if self.format == "json" else "parquet"
            f = self._open[stream] = _OpenFile(self.path, f"{self.prefix}_{part}{n}.{ext}")
        return f

    def _finish(self, stream: str) -> None:
        f = self._open.pop(stream, None)
        if f is not None and f.handle is not None:
            f.finish()
            self.files_written += 1

    def write(self, batch: SampleBatch | MultiAgentBatch) -> None:
        """Append ``batch`` (see the module docstring for where its rows go)."""
        if self.format == "json":
            if isinstance(batch, MultiAgentBatch):
                self._append_json(batch, "")
            else:
                self._split(batch, "", self._append_json)
        elif isinstance(batch, MultiAgentBatch):
            for pid, rows in sorted(batch.policy_batches.items()):
                self._split(rows, pid, self._append_parquet)
        else:
            self._split(batch, DEFAULT_POLICY_ID, self._append_parquet)

    def _split(self, batch: SampleBatch, stream: str, append) -> None:
        start = 0
        while start < batch.count:
            room = self.max_rows_per_file - self._file(stream).rows
            end = min(batch.count, start + room)
            append(batch.slice(start, end), stream)
            start = end

    def _append_json(self, batch: SampleBatch | MultiAgentBatch, stream: str) -> None:
        f = self._file(stream)
        if f.handle is None:
            f.handle = open(f.temp, "w", encoding="utf-8")
        f.handle.write(rllib_json.encode(batch, self.compress_columns))
        f.handle.write("\n")
        f.rows += batch.agent_steps()
        if f.rows >= self.max_rows_per_file:
            self._finish(stream)

    def _append_parquet(self, batch: SampleBatch, pid: str) -> None:
        table = to_table(batch, pid)
        f = self._file(pid)
        if f.handle is not None and not table.schema.equals(f.schema):
            self._finish(pid)     # the columns changed: a file holds one schema
            f = self._file(pid)
        if f.handle is None:
            pq = import_pyarrow("DatasetWriter").parquet
            f.schema = table.schema
            f.handle = pq.ParquetWriter(f.temp, table.schema, compression=self.compression)
        f.gathered.append(table)
        f.gathered_rows += table.num_rows
        f.rows += table.num_rows
        if f.gathered_rows >= ROWS_PER_GROUP:
            f.write_gathered()
        if f.rows >= self.max_rows_per_file:
            self._finish(pid)

    def close(self) -> None:
        """Finish every open file (each gets its real name)."""
        for stream in list(self._open):
            self._finish(stream)


__all__ = ["DatasetWriter", "OUTPUT_FORMATS", "DEFAULT_MAX_ROWS_PER_FILE", "ROWS_PER_GROUP"]
