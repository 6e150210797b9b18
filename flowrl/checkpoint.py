"""Checkpoint files on disk: atomic writes, discovery, pruning and checked loads.

Layout. One checkpoint is a directory holding one file, ``algorithm_state.pkl``
(a pickled dict with a ``format`` version). A *checkpoint directory* (the CLI's
``--checkpoint-dir``) holds numbered checkpoints, ``checkpoint_000012/``, the
number being the training iteration it was taken at.

Policy. A write never exposes a partial file and never touches the previous
checkpoint until the new one is complete:

- the state is pickled to bytes first (an unpicklable state fails before the disk
  is touched);
- a new checkpoint directory is written aside as a hidden sibling
  (``.checkpoint_000012.tmp-<pid>-<n>``), its file and the directory fsynced, then
  renamed into place and the parent fsynced;
- an existing checkpoint directory gets its file replaced by ``os.replace`` from a
  hidden sibling file, so a reader sees the old bytes or the new ones, never a mix.

On any failure the temporary is removed and a :class:`~flowrl.errors.FlowError`
naming the path is raised; the previous checkpoint stays byte-identical and no
temporary is left inside it. A process killed mid-write leaves at most a hidden
temporary beside the checkpoints: :func:`latest_checkpoint` ignores it and the
next :func:`write_checkpoint` into that directory removes temporaries whose
process is gone.

Loads (:func:`read_checkpoint`) turn every way a file can be bad (missing, not a
checkpoint, truncated, from another flowrl format) into a
:class:`~flowrl.errors.ConfigError` with a one-line reason.

>>> import tempfile, os
>>> d = tempfile.mkdtemp()
>>> write_checkpoint(os.path.join(d, checkpoint_name(3)), {"x": 1}).endswith(
...     "checkpoint_000003/algorithm_state.pkl")
True
>>> read_checkpoint(d)["x"], os.path.basename(latest_checkpoint(d))
(1, 'checkpoint_000003')
"""

from __future__ import annotations

import itertools
import os
import pickle
import re
import shutil
from typing import Any

from flowrl.errors import ConfigError, FlowError

CHECKPOINT_FILE = "algorithm_state.pkl"
FORMAT_VERSION = 1
_NAME = re.compile(r"^checkpoint_(\d+)$")
_TMP = re.compile(r"^\..+\.tmp-(\d+)-\d+$")
_counter = itertools.count()


def checkpoint_name(iteration: int) -> str:
    """The directory name of the checkpoint taken at ``iteration``.

    >>> checkpoint_name(12)
    'checkpoint_000012'
    """
    return f"checkpoint_{int(iteration):06d}"


def _fsync_dir(path: str) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _write_file(path: str, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)
        f.flush()
        os.fsync(f.fileno())


def _tmp_name(parent: str, base: str) -> str:
    return os.path.join(parent, f".{base}.tmp-{os.getpid()}-{next(_counter)}")


def _pid_alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_temporaries(parent: str) -> list[str]:
    """Remove hidden temporaries in ``parent`` left by processes that are gone
    (a writer killed mid-save); returns the names removed."""
    removed = []
    if not os.path.isdir(parent):
        return removed
    for name in os.listdir(parent):
        m = _TMP.match(name)
        if m and int(m.group(1)) != os.getpid() and not _pid_alive(int(m.group(1))):
            path = os.path.join(parent, name)
            shutil.rmtree(path) if os.path.isdir(path) else os.remove(path)
            removed.append(name)
    return removed


def write_checkpoint(path: str, state: dict[str, Any]) -> str:
    """Atomically write ``state`` as the checkpoint directory ``path``; returns the
    file written. See the module docstring for the policy. Raises FlowError (the
    OS or pickling error chained) when the write fails."""
    path = os.path.abspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"checkpoint path {path!r} is a file; give a directory")
    try:
        data = pickle.dumps({"format": FORMAT_VERSION, **state},
                            protocol=pickle.HIGHEST_PROTOCOL)
    except Exception as e:
        raise FlowError(f"cannot save checkpoint {path!r}: its state does not pickle "
                        f"({type(e).__name__}: {e}); make extra_state() return picklable "
                        "data") from e
    parent, base = os.path.split(path)
    tmp = None
    try:
        os.makedirs(parent, exist_ok=True)
        remove_stale_temporaries(parent)
        if os.path.isdir(path):
            tmp = _tmp_name(parent, base + "." + CHECKPOINT_FILE)
            _write_file(tmp, data)
            os.replace(tmp, os.path.join(path, CHECKPOINT_FILE))
            tmp = None
            _fsync_dir(path)
        else:
            tmp = _tmp_name(parent, base)
            os.mkdir(tmp)
            _write_file(os.path.join(tmp, CHECKPOINT_FILE), data)
            _fsync_dir(tmp)
            os.rename(tmp, path)
            tmp = None
            _fsync_dir(parent)
    except OSError as e:
        raise FlowError(f"cannot save checkpoint {path!r}: {e.strerror or e}; the previous "
                        "checkpoint (if any) is unchanged") from e
    finally:
        if tmp is not None and os.path.lexists(tmp):
            shutil.rmtree(tmp, ignore_errors=True) if os.path.isdir(tmp) else os.remove(tmp)
    return os.path.join(path, CHECKPOINT_FILE)


def list_checkpoints(directory: str) -> list[str]:
    """Complete numbered checkpoints in ``directory``, oldest first (by iteration).
    A numbered directory without its state file (never the case for flowrl's own
    writes) and hidden temporaries are left out."""
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        m = _NAME.match(name)
        if m and os.path.isfile(os.path.join(directory, name, CHECKPOINT_FILE)):
            found.append((int(m.group(1)), os.path.join(directory, name)))
    return [p for _, p in sorted(found)]


def latest_checkpoint(directory: str) -> str | None:
    """The newest complete checkpoint in ``directory``, or None."""
    found = list_checkpoints(directory)
    return found[-1] if found else None


def prune_checkpoints(directory: str, keep: int) -> list[str]:
    """Delete all but the newest ``keep`` numbered checkpoints; returns those deleted."""
    if not isinstance(keep, int) or keep < 1:
        raise ConfigError(f"keep={keep!r}: keep at least 1 checkpoint")
    old = list_checkpoints(directory)[:-keep]
    for p in old:
        shutil.rmtree(p)
    return old


def resolve_checkpoint(path: str) -> str:
    """The state file behind ``path``: a state file, a checkpoint directory, a
    directory of numbered checkpoints (its latest complete one), or a
    ``flowrl train`` run directory (the latest in its ``checkpoint/``).
    ConfigError with a one-line reason when there is none."""
    if os.path.isfile(path):
        return path
    if not os.path.isdir(path):
        raise ConfigError(f"no checkpoint at {path!r}: no such file or directory")
    file = os.path.join(path, CHECKPOINT_FILE)
    if os.path.isfile(file):
        return file
    latest = latest_checkpoint(path) or latest_checkpoint(os.path.join(path, "checkpoint"))
    if latest is None:
        raise ConfigError(f"no checkpoint at {path!r}: it holds neither {CHECKPOINT_FILE} nor "
                          "a complete checkpoint_NNNNNN/ directory")
    return os.path.join(latest, CHECKPOINT_FILE)


def read_checkpoint(path: str) -> dict[str, Any]:
    """Load the checkpoint behind ``path`` (see :func:`resolve_checkpoint`); the
    dict gains ``"path"`` (the file read). ConfigError, one line, when it cannot be
    read or is not a flowrl checkpoint."""
    file = resolve_checkpoint(path)
    try:
        with open(file, "rb") as f:
            state = pickle.load(f)
    except (OSError, EOFError, pickle.UnpicklingError, AttributeError, ImportError,
            IndexError, TypeError, ValueError, MemoryError) as e:
        raise ConfigError(f"cannot read checkpoint {file!r}: {type(e).__name__}: "
                          f"{str(e).splitlines()[0] if str(e) else 'corrupt or truncated'}") \
            from None
    if not isinstance(state, dict) or "format" not in state:
        raise ConfigError(f"{file!r} is not a flowrl checkpoint (no format version)")
    if state["format"] != FORMAT_VERSION:
        raise ConfigError(f"{file!r} has checkpoint format {state['format']!r}; this flowrl "
                          f"reads format {FORMAT_VERSION}")
    state["path"] = file
    return state


__all__ = ["CHECKPOINT_FILE", "checkpoint_name", "write_checkpoint", "read_checkpoint",
           "resolve_checkpoint", "list_checkpoints", "latest_checkpoint",
           "prune_checkpoints", "remove_stale_temporaries"]
