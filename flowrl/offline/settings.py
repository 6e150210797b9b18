"""The offline settings of a config, checked and read: ``input``, ``input_config``,
``output_config``.

``input`` (RLlib 1.x's setting) is ``"sampler"`` (step the envs), a dataset (a path,
a glob, or a list of them), or a dict mixing sources by probability, as RLlib 1.x's
mixed input: ``{"sampler": 0.5, "/data/expert": 0.5}`` (each key ``"sampler"`` or a
path; probabilities >= 0 adding up to 1). :func:`input_sources` reads it into
``(source, probability)`` pairs, a source being ``"sampler"`` or a tuple of paths.

>>> input_sources("sampler", "input")
[('sampler', 1.0)]
>>> input_sources(["/d/a.json", "/d/b.json"], "input")
[(('/d/a.json', '/d/b.json'), 1.0)]
>>> input_sources({"sampler": 0.25, "/d": 0.75}, "input")
[('sampler', 0.25), (('/d',), 0.75)]
>>> input_sources({"sampler": 0.5, "/d": 0.6}, "input")
Traceback (most recent call last):
...
flowrl.errors.ConfigError: input={'sampler': 0.5, '/d': 0.6}: the probabilities add up to 1.1; make them add up to 1
"""

from __future__ import annotations

import math
import os
from typing import Any

from flowrl.errors import ConfigError
from flowrl.offline.parquet import CODECS
from flowrl.offline.reader import EXTENSIONS, INPUT_FORMATS, ON_ERROR, list_files
from flowrl.offline.rllib_json import DEFAULT_COMPRESS_COLUMNS
from flowrl.offline.writer import DEFAULT_MAX_ROWS_PER_FILE, OUTPUT_FORMATS

SAMPLER = "sampler"

Source = str | tuple[str, ...]


def input_sources(value: Any, where: str) -> list[tuple[Source, float]]:
    """``input`` as ``(source, probability)`` pairs; see the module docstring."""
    if isinstance(value, (str, os.PathLike)):
        value = str(value)
        return [(SAMPLER if value == SAMPLER else (value,), 1.0)]
    if isinstance(value, (list, tuple)) and value and all(
            isinstance(p, (str, os.PathLike)) for p in value):
        if SAMPLER in value:
            raise ConfigError(f"{where}={value!r}: 'sampler' is no path; to mix it with data "
                              "give a dict of probabilities, {'sampler': 0.5, PATH: 0.5}")
        return [(tuple(str(p) for p in value), 1.0)]
    if isinstance(value, dict) and value:
        out: list[tuple[Source, float]] = []
        for key, p in value.items():
            if not isinstance(key, (str, os.PathLike)):
                raise ConfigError(f"{where}: key {key!r} is no source; the keys are 'sampler' "
                                  "or paths")
            if isinstance(p, bool) or not isinstance(p, (int, float)) or not 0 <= p <= 1:
                raise ConfigError(f"{where}[{key!r}]={p!r}: a probability is a number in "
                                  "[0, 1]")
            out.append((SAMPLER if key == SAMPLER else (str(key),), float(p)))
        total = sum(p for _, p in out)
        if not math.isclose(total, 1.0, abs_tol=1e-6):
            raise ConfigError(f"{where}={value!r}: the probabilities add up to {total:g}; "
                              "make them add up to 1")
        return out
    raise ConfigError(f"{where}={value!r}: give 'sampler', a path, a list of paths, or a dict "
                      "{'sampler' or PATH: probability}")


def dataset_format(paths: tuple[str, ...], format: str | None, where: str) -> str:
    """``format``, or when None the one the files' name endings say (a file, or the
    files of a directory or glob): a ConfigError when they say none or several."""
    if format is not None:
        return format
    found = set()
    for fmt in INPUT_FORMATS:
        try:
            files = list_files(paths, fmt, where)
        except ConfigError:
            continue
        if fmt not in EXTENSIONS or any(f.endswith(EXTENSIONS[fmt]) for f in files):
            found.add(fmt)   # (a file named directly is listed whatever its name ends with)
    if len(found) == 1:
        return found.pop()
    known = ", ".join(e for fmt in EXTENSIONS for e in EXTENSIONS[fmt]) + " or Minari"
    if not found:
        raise ConfigError(f"{where}={list(paths)!r}: no dataset files there (no {known} "
                          "files, or the path does not exist); give a directory, file or "
                          "glob of recorded files, or set input_config['format']")
    raise ConfigError(f"{where}={list(paths)!r}: holds files of several formats "
                      f"{sorted(found)}; set input_config['format']")


def _check_keys(config: Any, defaults: dict, where: str) -> dict:
    if not isinstance(config, dict):
        raise ConfigError(f"{where}={config!r}: must be a dict with keys among "
                          f"{sorted(defaults)}")
    unknown = sorted(set(config) - set(defaults), key=str)
    if unknown:
        raise ConfigError(f"{where}: unknown key {unknown[0]!r}; the keys are {sorted(defaults)}")
    return {**defaults, **config}


def check_output_config(config: Any, where: str) -> dict:
    """``output_config`` with its defaults filled in: ``format`` (``"parquet"``),
    ``max_rows_per_file`` (:data:`~flowrl.offline.writer.DEFAULT_MAX_ROWS_PER_FILE`),
    ``compression`` (the Parquet codec, ``"snappy"``) and ``compress_columns`` (the
    JSON columns packed with LZ4, RLlib's ``["obs", "new_obs"]``); a bad value is a
    ConfigError naming the key.

    >>> check_output_config({"format": "json"}, "output_config")["max_rows_per_file"]
    100000
    >>> check_output_config({"format": "csv"}, "output_config")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: output_config['format']='csv': choose one of ['parquet', 'json']
    """
    out = _check_keys(config, {"format": "parquet", "max_rows_per_file": DEFAULT_MAX_ROWS_PER_FILE,
                               "compression": "snappy",
                               "compress_columns": list(DEFAULT_COMPRESS_COLUMNS)}, where)
    if out["format"] not in OUTPUT_FORMATS:
        raise ConfigError(f"{where}['format']={out['format']!r}: choose one of "
                          f"{list(OUTPUT_FORMATS)}")
    rows = out["max_rows_per_file"]
    if isinstance(rows, bool) or not isinstance(rows, int) or rows < 1:
        raise ConfigError(f"{where}['max_rows_per_file']={rows!r}: must be an int >= 1")
    if out["compression"] not in CODECS:
        raise ConfigError(f"{where}['compression']={out['compression']!r}: choose one of "
                          f"{list(CODECS)}")
    columns = out["compress_columns"]
    if not isinstance(columns, (list, tuple)) or not all(isinstance(c, str) for c in columns):
        raise ConfigError(f"{where}['compress_columns']={columns!r}: must be a list of "
                          "column names")
    out["compress_columns"] = list(columns)
    return out


def check_input_config(config: Any, where: str) -> dict:
    """``input_config`` with its defaults filled in: ``format`` (None: from the file
    names), ``shuffle`` (False) and ``on_error`` (``"raise"``); a bad value is a
    ConfigError naming the key.

    >>> check_input_config({"shuffle": True}, "input_config")
    {'format': None, 'shuffle': True, 'on_error': 'raise'}
    """
    out = _check_keys(config, {"format": None, "shuffle": False, "on_error": "raise"}, where)
    if out["format"] is not None and out["format"] not in INPUT_FORMATS:
        raise ConfigError(f"{where}['format']={out['format']!r}: choose one of "
                          f"{list(INPUT_FORMATS)}")
    if not isinstance(out["shuffle"], bool):
        raise ConfigError(f"{where}['shuffle']={out['shuffle']!r}: must be True or False")
    if out["on_error"] not in ON_ERROR:
        raise ConfigError(f"{where}['on_error']={out['on_error']!r}: choose one of "
                          f"{list(ON_ERROR)}")
    return out


def describe_input(value: Any, input_config: dict) -> str | None:
    """How a plan's DOT names what its rollout workers read: None for ``"sampler"``,
    else the datasets and their share.

    >>> describe_input({"sampler": 0.5, "/d/x": 0.5}, {"format": "json"})
    'samples envs 50%, reads dataset /d/x (json) 50%'
    """
    sources = input_sources(value, "input")
    if sources == [(SAMPLER, 1.0)]:
        return None
    parts = []
    for source, p in sources:
        share = "" if p == 1.0 else f" {100 * p:g}%"
        if source == SAMPLER:
            parts.append(f"samples envs{share}")
            continue
        try:
            kind = f" ({dataset_format(source, input_config.get('format'), 'input')})"
        except ConfigError:
            kind = ""
        parts.append(f"reads dataset {', '.join(source)}{kind}{share}")
    return ", ".join(parts)


__all__ = ["input_sources", "dataset_format", "check_output_config", "check_input_config",
           "describe_input", "SAMPLER"]
