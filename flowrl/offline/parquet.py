"""Batches as Parquet tables (through pyarrow): one row per agent step.

A column of shape ``(rows,)`` is an Arrow column of its numpy dtype; a column of
shape ``(rows, *shape)`` (observations, images, model state) is Arrow's
fixed-shape tensor column (``arrow.fixed_shape_tensor``) of that dtype and shape,
so images stay uint8 and read back as ``(rows, *shape)`` arrays without copies of
lists. Every row also has ``policy_id`` (a dictionary-encoded string): a file holds
the rows of one policy, ``"default_policy"`` for single-agent data. Columns that are
not numbers or booleans are not written.

pyarrow is an optional dependency (``pip install 'flowrl[offline]'``):
:func:`import_pyarrow` says how to install it.

>>> import numpy as np
>>> from flowrl.batch import SampleBatch
>>> b = SampleBatch(obs=np.zeros((2, 4, 4), np.uint8), actions=[1, 0])
>>> table = to_table(b, "default_policy")
>>> table.num_rows, table.column_names
(2, ['obs', 'actions', 'policy_id'])
>>> pid, back = from_table(table)
>>> pid, back["obs"].shape, back["obs"].dtype
('default_policy', (2, 4, 4), dtype('uint8'))
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowrl.batch import DEFAULT_POLICY_ID, SampleBatch
from flowrl.errors import ConfigError

#: The column naming each row's policy.
POLICY_ID = "policy_id"

#: Parquet codecs ``output_config["compression"]`` takes.
CODECS = ("snappy", "zstd", "gzip", "lz4", "brotli", "none")


def import_pyarrow(where: str) -> Any:
    """``pyarrow`` (with ``pyarrow.parquet`` loaded), or a ConfigError naming
    ``where`` and how to install it."""
    try:
        import pyarrow
        import pyarrow.parquet  # noqa: F401
    except ImportError:
        raise ConfigError(f"{where}: the Parquet format needs pyarrow, which is not installed; "
                          "pip install 'flowrl[offline]' (or pyarrow), or use format='json'"
                          ) from None
    return pyarrow


def _arrow_column(pa: Any, column: np.ndarray) -> Any:
    if column.ndim == 1:
        return pa.array(column)
    if column.shape[0] == 0:  # from_numpy_ndarray needs a row; build the type by hand
        kind = pa.fixed_shape_tensor(pa.from_numpy_dtype(column.dtype), column.shape[1:])
        storage = pa.array([], pa.list_(kind.value_type, int(np.prod(column.shape[1:]))))
        return pa.ExtensionArray.from_storage(kind, storage)
    return pa.FixedShapeTensorArray.from_numpy_ndarray(np.ascontiguousarray(column))


def to_table(batch: SampleBatch, policy_id: str = DEFAULT_POLICY_ID) -> Any:
    """``batch`` as a pyarrow Table (see the module docstring) with every row's
    ``policy_id``."""
    pa = import_pyarrow("Parquet output")
    names, arrays = [], []
    for name, column in batch.items():
        if column.dtype.kind in "biuf":
            names.append(name)
            arrays.append(_arrow_column(pa, column))
    names.append(POLICY_ID)
    arrays.append(pa.DictionaryArray.from_arrays(pa.array(np.zeros(batch.count, np.int32)),
                                                 pa.array([str(policy_id)])))
    return pa.Table.from_arrays(arrays, names=names)


def _numpy_column(pa: Any, column: Any) -> np.ndarray:
    array = column.combine_chunks() if hasattr(column, "combine_chunks") else column
    if isinstance(array.type, pa.FixedShapeTensorType):
        if len(array) == 0:
            return np.zeros((0, *array.type.shape), array.type.value_type.to_pandas_dtype())
        out = array.to_numpy_ndarray()
    else:
        out = array.to_numpy(zero_copy_only=False)
    # numpy views of Arrow's immutable buffers are read-only: torch warns on them and
    # an in-place write would corrupt the table, so a batch gets writable memory (as
    # the JSON reader's do)
    return out if out.flags.writeable else out.copy()


def _policy_ids(pa: Any, column: Any) -> set:
    """The policy ids in a ``policy_id`` column: a dictionary column whose chunks'
    dictionaries hold one id each (what :func:`to_table` writes) is read from them,
    any other by its values."""
    chunks = column.chunks
    if chunks and all(isinstance(c.type, pa.DictionaryType) and len(c.dictionary) == 1
                      for c in chunks):
        return {c.dictionary[0].as_py() for c in chunks if len(c)}
    ids = column.combine_chunks()
    if isinstance(ids.type, pa.DictionaryType):
        ids = ids.dictionary_decode()
    return set(ids.unique().to_pylist())


def from_table(table: Any) -> tuple[str, SampleBatch]:
    """``(policy_id, batch)`` of a table :func:`to_table` wrote (a table without
    ``policy_id`` is the default policy's). A table holding several policies' rows is
    a ValueError."""
    pa = import_pyarrow("Parquet input")
    policy_id = DEFAULT_POLICY_ID
    columns = {}
    for name in table.column_names:
        if name == POLICY_ID:
            found = _policy_ids(pa, table.column(name))
            if len(found) > 1:
                raise ValueError(f"the rows belong to several policies {sorted(found)}; "
                                 "a file holds one policy's rows")
            if found:
                policy_id = str(found.pop())
            continue
        array = _numpy_column(pa, table.column(name))
        if array.dtype.kind in "biuf":
            columns[name] = array
    return policy_id, SampleBatch(columns)


__all__ = ["to_table", "from_table", "import_pyarrow", "POLICY_ID", "CODECS"]
