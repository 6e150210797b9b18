"""Minari datasets read from a local directory (``input_config={"format": "minari"}``).

A Minari dataset on disk is a directory whose ``data/`` holds ``metadata.json`` and
one sub-directory per episode; either directory names it. Each episode is one
piece of the dataset: ``T`` steps become ``T`` rows, ``obs`` the first ``T``
observations and ``new_obs`` the last ``T``, with ``actions``, ``rewards``
(float32), ``terminateds``, ``truncateds``, ``eps_id`` (the episode's id), ``t`` and
``agent_index`` (0). Episodes with dict or tuple observations or actions are not
read (flowrl's batches hold arrays).

Reading goes through the ``minari`` package (``pip install 'flowrl[minari]'``),
imported when a dataset is opened; finding one needs only its ``metadata.json``.
Nothing is downloaded.
"""

from __future__ import annotations

import glob
import json
import os
from typing import Any, Sequence

import numpy as np

from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError


def import_minari(where: str) -> Any:
    """The ``minari`` package, or a ConfigError naming ``where`` and how to install it."""
    try:
        import minari
    except ImportError:
        raise ConfigError(f"{where}: reading a Minari dataset needs the minari package, which "
                          "is not installed; pip install 'flowrl[minari]'") from None
    return minari


def data_directory(path: str) -> str | None:
    """The ``data/`` directory of the Minari dataset at ``path`` (the dataset's own
    directory or its ``data/``), or None when ``path`` is not one."""
    for candidate in (os.path.join(path, "data"), path):
        meta = os.path.join(candidate, "metadata.json")
        if os.path.isfile(meta):
            try:
                with open(meta, encoding="utf-8") as f:
                    if "dataset_id" in json.load(f):
                        return candidate
            except (OSError, ValueError):
                return None
    return None


def dataset_directories(paths: Sequence[str]) -> list[str]:
    """The Minari datasets ``paths`` name (each a dataset directory or a glob of them),
    as their ``data/`` directories, in order."""
    found: list[str] = []
    for path in paths:
        path = os.path.expanduser(str(path))
        for candidate in [path] if os.path.isdir(path) else sorted(glob.glob(path)):
            data = data_directory(candidate)
            if data is not None and data not in found:
                found.append(data)
    return found


def open_dataset(path: str, where: str) -> Any:
    """The ``MinariDataset`` whose ``data/`` directory is ``path``."""
    return import_minari(where).MinariDataset(path)


def episode_indices(dataset: Any) -> list[int]:
    """The dataset's episode indices, in order."""
    return [int(i) for i in dataset.episode_indices]


def _array(value: Any, what: str) -> np.ndarray:
    if isinstance(value, (dict, tuple)):
        raise ValueError(f"its {what} are a {type(value).__name__} of arrays; flowrl reads "
                         "Minari episodes whose observations and actions are arrays")
    return np.asarray(value)


def episode_batch(dataset: Any, index: int) -> SampleBatch:
    """Episode ``index`` of ``dataset`` as rows (see the module docstring)."""
    (episode,) = dataset.iterate_episodes([index])
    observations = _array(episode.observations, "observations")
    actions = _array(episode.actions, "actions")
    n = len(actions)
    return SampleBatch(
        obs=observations[:n], new_obs=observations[1:n + 1], actions=actions,
        rewards=np.asarray(episode.rewards, np.float32),
        terminateds=np.asarray(episode.terminations, bool),
        truncateds=np.asarray(episode.truncations, bool),
        eps_id=np.full(n, int(episode.id), np.int64), t=np.arange(n, dtype=np.int64),
        agent_index=np.zeros(n, np.int64))


__all__ = ["import_minari", "data_directory", "dataset_directories", "open_dataset",
           "episode_indices", "episode_batch"]
