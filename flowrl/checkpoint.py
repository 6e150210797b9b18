"""Checkpoint files on disk: a format that runs no code when read, atomic durable
writes, discovery, pruning and checked loads.

Layout (format 2). One checkpoint is a directory holding

- ``state.json`` (:data:`CHECKPOINT_FILE`): ``{"format": 2, "state": ..., "arrays":
  NAME|null, "user_state": NAME|null, "sha256": {...}}``: the state as plain JSON
  data, encoded by :mod:`flowrl.state_codec` (tuples, dicts with non-string keys,
  numpy scalars are tagged objects ``{"__flowrl__": KIND, ...}``; an array or
  tensor is a reference by key into the arrays file), and the SHA-256 of every
  data file (by name) and of the document itself (``"state.json"``: the compact
  JSON of every entry but ``sha256``);
- ``arrays.safetensors``: every numpy array and torch tensor of the state (dtypes
  kept; bfloat16 stored as its int16 bits), present when there is one;
- ``user_state.pkl``: only when the state holds objects that are neither plain data
  nor arrays (say an ``extra_state()`` returning a custom class, or a config with an
  env-creator function): those objects, cloudpickled. Reading it can run code, so
  :func:`read_checkpoint` loads it only with ``allow_pickle=True``; without, each
  such object reads back as a :class:`PickledValue` placeholder.

Reading never unpickles anything else: ``state.json`` is parsed as JSON, the arrays
file by safetensors, and a pickle placed under either name (or a format-1
``algorithm_state.pkl``) is refused with a ConfigError before a byte of it is
loaded. A *checkpoint directory* (the CLI's ``--checkpoint-dir``) holds numbered
checkpoints, ``checkpoint_000012/``, the number being the training iteration. A
Ray Tune trial (:mod:`flowrl.tune`) keeps each checkpoint one level down, in
``checkpoint_NNNNNN/algorithm/`` (:data:`TUNE_SUBDIR`; Tune numbers them from 0
in the order they were taken); discovery finds those too.

Policy. A write never exposes a partial checkpoint, and never touches the previous
one until the new one is complete and on disk:

- the state is encoded first (JSON text, array bytes, pickles): a state that cannot
  be stored fails before the disk is touched;
- a new checkpoint directory is written aside as a hidden sibling
  (``.checkpoint_000012.tmp-<pid>-<n>``), its files and the directory fsynced, then
  renamed into place and the parent fsynced;
- into an existing checkpoint directory the data files are written aside, fsynced
  and moved in under names the current ``state.json`` does not use; ``os.replace``
  of ``state.json`` (the commit) then switches to them, the directory and its
  parent are fsynced, and the files the old ``state.json`` named are removed. A
  reader sees the old checkpoint or the new one, never a mix.

A failure before the commit removes what it wrote and raises a
:class:`~flowrl.errors.FlowError` naming the path and saying the previous
checkpoint is unchanged (it is byte-identical). A failure after the commit (an
fsync) raises a FlowError saying the new checkpoint replaced the previous one but
may not survive a crash. A process killed mid-write leaves at most a hidden
temporary beside the checkpoints (:func:`latest_checkpoint` ignores it and the next
:func:`write_checkpoint` there removes temporaries whose process is gone) or an
unreferenced data file inside one (removed by the next write into it).

Loads (:func:`read_checkpoint`) turn every way a checkpoint can be bad (missing,
not a checkpoint, truncated, another format, a pickle) into a
:class:`~flowrl.errors.ConfigError` with a one-line reason. A file whose bytes
changed on disk is found by its SHA-256 and called corrupt, naming the file;
checkpoints written before checksums (no ``sha256`` entry) load unchecked. Given a
directory of numbered checkpoints (or a run directory, or a Tune trial's), a load
whose newest checkpoint is corrupt (unreadable, truncated, a checksum that
differs, a data file missing) takes the newest one that reads, and logs one
warning (logger ``flowrl.checkpoint``) naming the corrupt ones and the one used;
a path naming one checkpoint loads that one or fails.

An algorithm's checkpoint (``Algorithm.save``) holds the driver worker's state,
the remote workers' states by ``worker_index``, the run's metrics, the global RNG
states (:func:`global_rng_state`), the config's fields (:func:`config_fields`),
the spaces each policy was built for (:func:`policy_spaces_text`) and the
algorithm's extra state. :func:`check_algorithm_state` checks one before a
restore, :func:`saved_config` rebuilds its config and
:func:`restore_local_worker` gives its state to the driver's worker, naming both
envs when the spaces or the model differ.

>>> import tempfile, os
>>> import numpy as np
>>> d = tempfile.mkdtemp()
>>> write_checkpoint(os.path.join(d, checkpoint_name(3)),
...                  {"x": 1, "w": np.arange(3.0), "rng": (3, (1, 2), None)}).endswith(
...     "checkpoint_000003/state.json")
True
>>> sorted(os.listdir(os.path.join(d, "checkpoint_000003")))
['arrays.safetensors', 'state.json']
>>> state = read_checkpoint(d)
>>> state["x"], state["w"], state["rng"], os.path.basename(latest_checkpoint(d))
(1, array([0., 1., 2.]), (3, (1, 2), None), 'checkpoint_000003')
"""

from __future__ import annotations

import hashlib
import itertools
import json
import logging
import os
import pickle
import re
import shutil
from typing import Any

import numpy as np

from flowrl.errors import ConfigError, FlowError
from flowrl.state_codec import (TAG, PickledValue, StateError, decode_state, encode_state,
                                find_pickled)

CHECKPOINT_FILE = "state.json"
ARRAYS_FILE = "arrays.safetensors"
USER_STATE_FILE = "user_state.pkl"
LEGACY_FILE = "algorithm_state.pkl"   # format 1: a pickle, refused unread
#: Where a Ray Tune trial's checkpoint directory holds flowrl's checkpoint.
TUNE_SUBDIR = "algorithm"
FORMAT_VERSION = 2
_NAME = re.compile(r"^checkpoint_(\d+)$")
_TMP = re.compile(r"^\..+\.tmp-(\d+)-\d+$")
_DATA = re.compile(r"^(arrays(\.\d+)?\.safetensors|user_state(\.\d+)?\.pkl)$")
_counter = itertools.count()
#: The entries of a ``state.json`` document.
_DOC_KEYS = ("format", "state", "arrays", "user_state", "sha256")
log = logging.getLogger("flowrl.checkpoint")


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def _document_sha256(doc: dict[str, Any]) -> str:
    """The SHA-256 of ``doc``'s entries but ``sha256``, as compact JSON: what a
    ``state.json`` records of itself (parsing and dumping again gives the same
    text, so it needs no copy of the original bytes)."""
    rest = {k: v for k, v in doc.items() if k != "sha256"}
    return _sha256(json.dumps(rest, separators=(",", ":")).encode())


# -- writing -----------------------------------------------------------------------
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


def _remove(path: str) -> None:
    if os.path.isdir(path) and not os.path.islink(path):
        shutil.rmtree(path, ignore_errors=True)
    elif os.path.lexists(path):
        os.remove(path)


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
            _remove(os.path.join(parent, name))
            removed.append(name)
    return removed


def _free_name(directory: str, default: str) -> str:
    """``default`` (``arrays.safetensors``) or the first ``arrays.N.safetensors``
    not present in ``directory``."""
    stem, ext = default.split(".", 1)
    for n in itertools.count():
        name = default if n == 0 else f"{stem}.{n}.{ext}"
        if not os.path.lexists(os.path.join(directory, name)):
            return name
    raise AssertionError("unreachable")


def write_checkpoint(path: str, state: dict[str, Any]) -> str:
    """Atomically and durably write ``state`` as the checkpoint directory ``path``;
    returns its ``state.json``. See the module docstring for the layout and policy.
    Raises FlowError (the OS or pickling error chained) when the write fails,
    saying whether the previous checkpoint is unchanged."""
    path = os.path.abspath(path)
    if os.path.exists(path) and not os.path.isdir(path):
        raise ConfigError(f"checkpoint path {path!r} is a file; give a directory")
    if not isinstance(state, dict) or not all(type(k) is str for k in state):
        raise ConfigError(f"write_checkpoint({path!r}): the state must be a dict with str "
                          f"keys, got {type(state).__name__}")
    body, arrays, user = encode_state(state, path)
    doc: dict[str, Any] = {"format": FORMAT_VERSION, "state": body}
    parent, base = os.path.split(path)
    aside: list[str] = []      # written so far, removed unless committed
    committed = False
    try:
        if not os.path.isdir(parent):
            os.makedirs(parent, exist_ok=True)
            _fsync_dir(os.path.dirname(parent))
        remove_stale_temporaries(parent)
        overwrite = os.path.isdir(path)
        target = path if overwrite else _tmp_name(parent, base)
        if not overwrite:
            os.mkdir(target)
            aside.append(target)
        sums: dict[str, str] = {}
        for key, default, data in (("arrays", ARRAYS_FILE, arrays),
                                   ("user_state", USER_STATE_FILE, user)):
            doc[key] = None if data is None else _free_name(target, default)
            if data is None:
                continue
            sums[doc[key]] = _sha256(data)
            if overwrite:      # aside first, so a killed write leaves nothing inside
                tmp = _tmp_name(parent, f"{base}.{doc[key]}")
                aside.append(tmp)
                _write_file(tmp, data)
                os.replace(tmp, os.path.join(path, doc[key]))
                aside[-1] = os.path.join(path, doc[key])
            else:
                _write_file(os.path.join(target, doc[key]), data)
        doc["sha256"] = {CHECKPOINT_FILE: _document_sha256(doc), **sums}
        text = json.dumps(doc, separators=(",", ":")).encode()
        if overwrite:
            tmp = _tmp_name(parent, f"{base}.{CHECKPOINT_FILE}")
            aside.append(tmp)
            _write_file(tmp, text)
            _fsync_dir(path)
            _fsync_dir(parent)
            os.replace(tmp, os.path.join(path, CHECKPOINT_FILE))
        else:
            _write_file(os.path.join(target, CHECKPOINT_FILE), text)
            _fsync_dir(target)
            os.rename(target, path)
        committed = True
        if overwrite:
            _fsync_dir(path)
        _fsync_dir(parent)
    except OSError as e:
        if committed:
            raise FlowError(f"checkpoint {path!r} was written and replaced the previous one "
                            f"(if any), but syncing it to disk failed: {e.strerror or e}; it may "
                            "not survive a crash or power loss: check the disk and save "
                            "again") from e
        raise FlowError(f"cannot save checkpoint {path!r}: {e.strerror or e}; the previous "
                        "checkpoint (if any) is unchanged") from e
    finally:
        if not committed:
            for p in aside:
                _remove(p)
    if overwrite:   # files the previous state.json named; best effort, nothing reads them
        keep = {doc["arrays"], doc["user_state"]}
        for name in os.listdir(path):
            if (_DATA.match(name) or name == LEGACY_FILE) and name not in keep:
                try:
                    os.remove(os.path.join(path, name))
                except OSError:
                    pass    # an unreferenced file; the next write into path retries
    return os.path.join(path, CHECKPOINT_FILE)


# -- discovery and reading ---------------------------------------------------------
def _state_file(directory: str) -> str | None:
    """The ``state.json`` of the checkpoint in ``directory``: its own, or that of the
    flowrl checkpoint inside a Ray Tune checkpoint (``algorithm/state.json``); None
    when there is neither."""
    for file in (os.path.join(directory, CHECKPOINT_FILE),
                 os.path.join(directory, TUNE_SUBDIR, CHECKPOINT_FILE)):
        if os.path.isfile(file):
            return file
    return None


def list_checkpoints(directory: str) -> list[str]:
    """Complete numbered checkpoints in ``directory``, oldest first (by number): flowrl's
    ``checkpoint_NNNNNN/state.json`` and a Ray Tune trial's
    ``checkpoint_NNNNNN/algorithm/state.json``. A numbered directory with neither
    (never the case for flowrl's own writes; a format-1 checkpoint is one) and hidden
    temporaries are left out."""
    if not os.path.isdir(directory):
        return []
    found = []
    for name in os.listdir(directory):
        m = _NAME.match(name)
        if m and _state_file(os.path.join(directory, name)) is not None:
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


def _legacy_error(file: str) -> ConfigError:
    return ConfigError(
        f"{file!r} is a format-1 flowrl checkpoint (a pickle); this flowrl reads format "
        f"{FORMAT_VERSION} and does not load it: unpickling a file can run any code its "
        "author put in it, so format 1 is not loadable here (and the flowrl that wrote it "
        "cannot convert it): train again and save with this version")


def _find_legacy(path: str) -> str | None:
    """A format-1 state file at ``path``, in its numbered checkpoints or in its
    ``checkpoint/`` subdirectory's (the newest), or None."""
    for directory in (path, os.path.join(path, "checkpoint")):
        if os.path.isfile(os.path.join(directory, LEGACY_FILE)):
            return os.path.join(directory, LEGACY_FILE)
        if os.path.isdir(directory):
            numbered = sorted(n for n in os.listdir(directory) if _NAME.match(n))
            for name in reversed(numbered):
                if os.path.isfile(os.path.join(directory, name, LEGACY_FILE)):
                    return os.path.join(directory, name, LEGACY_FILE)
    return None


def _candidates(path: str) -> tuple[list[str], bool]:
    """The ``state.json`` files :func:`read_checkpoint` may load for ``path``, newest
    first, and whether ``path`` is a directory of numbered checkpoints (where a
    corrupt newest one gives way to an older one) rather than one checkpoint."""
    if os.path.isfile(path):
        name = os.path.basename(path)
        if name == LEGACY_FILE:
            raise _legacy_error(path)
        if name != CHECKPOINT_FILE:
            raise ConfigError(f"{path!r} is not a checkpoint's {CHECKPOINT_FILE}; give the "
                              "checkpoint directory")
        return [path], False
    if not os.path.isdir(path):
        raise ConfigError(f"no checkpoint at {path!r}: no such file or directory")
    file = _state_file(path)
    if file is not None:
        return [file], False
    numbered = list_checkpoints(path) or list_checkpoints(os.path.join(path, "checkpoint"))
    if not numbered:
        legacy = _find_legacy(path)
        if legacy is not None:
            raise _legacy_error(legacy)
        raise ConfigError(f"no checkpoint at {path!r}: it holds neither {CHECKPOINT_FILE} nor "
                          "a complete checkpoint_NNNNNN/ directory (for a Ray Tune "
                          "experiment, give one trial's directory)")
    return [_state_file(d) for d in reversed(numbered)], True


def resolve_checkpoint(path: str) -> str:
    """The ``state.json`` behind ``path``: that file, a checkpoint directory, a Ray
    Tune checkpoint directory (its ``algorithm/``), a directory of numbered
    checkpoints (its latest complete one: a ``--checkpoint-dir``, or a Tune trial's
    directory), or a ``flowrl train`` run directory (the latest in its
    ``checkpoint/``). ConfigError with a one-line reason when there is none, or
    only format-1 ones. (:func:`read_checkpoint` takes an older one of a directory
    when this one is corrupt.)

    >>> import tempfile
    >>> trial = tempfile.mkdtemp()
    >>> for n in (0, 1):
    ...     _ = write_checkpoint(os.path.join(trial, checkpoint_name(n), TUNE_SUBDIR), {"n": n})
    >>> os.path.relpath(resolve_checkpoint(trial), trial)
    'checkpoint_000001/algorithm/state.json'
    """
    return _candidates(path)[0][0]


def run_directory(path: str) -> str | None:
    """The ``flowrl train`` run directory that the checkpoint behind ``path``
    (:func:`resolve_checkpoint`) was written into, ``<run>/checkpoint/checkpoint_NNNNNN/``
    with ``<run>/result.jsonl`` beside it; None for a checkpoint anywhere else (a
    ``--checkpoint-dir``, a Tune trial, a copy).

    >>> import tempfile
    >>> run = tempfile.mkdtemp()
    >>> _ = write_checkpoint(os.path.join(run, "checkpoint", checkpoint_name(2)), {"n": 2})
    >>> run_directory(run) is None       # no result.jsonl: not a run directory
    True
    >>> open(os.path.join(run, "result.jsonl"), "w").close()
    >>> run_directory(os.path.join(run, "checkpoint")) == run
    True
    """
    from flowrl.loggers import RESULT_FILE
    checkpoint_dir = os.path.dirname(os.path.abspath(resolve_checkpoint(path)))
    parent = os.path.dirname(checkpoint_dir)
    run = os.path.dirname(parent)
    if (_NAME.match(os.path.basename(checkpoint_dir)) and os.path.basename(parent) == "checkpoint"
            and os.path.isfile(os.path.join(run, RESULT_FILE))):
        return run
    return None


class _Corrupt(Exception):
    """A checkpoint whose files do not read back as they were written (truncated,
    bytes changed, a file missing); :func:`read_checkpoint` turns it into a
    ConfigError, after trying older checkpoints of a directory."""


def _read_bytes(file: str) -> bytes:
    try:
        with open(file, "rb") as f:
            return f.read()
    except OSError as e:
        raise _Corrupt(f"cannot read checkpoint {file!r}: {e.strerror or e}") from None


def _check_sha256(data: bytes, sums: dict | None, name: str, file: str) -> None:
    if sums is None:
        return      # written before checksums
    if sums.get(name) != _sha256(data):
        raise _Corrupt(f"checkpoint file {file!r} is corrupt: its SHA-256 is not the one "
                       "recorded when it was saved (its bytes changed on disk); restore an "
                       "older checkpoint or copy this one again")


def _named_file(directory: str, doc: dict, key: str, file: str) -> str | None:
    """The data file ``doc[key]`` names, checked to be one of ours inside ``directory``."""
    name = doc.get(key)
    if name is None:
        return None
    if not isinstance(name, str) or not _DATA.match(name):
        raise _Corrupt(f"cannot read checkpoint {file!r}: its {key!r} entry {name!r} is "
                       "not a checkpoint data file name")
    return os.path.join(directory, name)


def read_checkpoint(path: str, *, allow_pickle: bool = False) -> dict[str, Any]:
    """Load the checkpoint behind ``path`` (see :func:`resolve_checkpoint`); the dict
    gains ``"path"`` (its ``state.json``). Nothing read can run code, except
    ``user_state.pkl`` with ``allow_pickle=True`` (only for a checkpoint you trust);
    without it, objects stored there read back as :class:`PickledValue`. Every file
    is checked against the SHA-256 its ``state.json`` recorded (when it has any).

    When ``path`` is a directory of numbered checkpoints (a run directory, a Tune
    trial's) and the newest is corrupt, the newest that reads is loaded and one
    warning names the corrupt ones and the one used. ConfigError, one line, when
    it cannot be read or is not a flowrl checkpoint (for a directory: when no
    checkpoint in it reads).

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> for n in (1, 2):
    ...     _ = write_checkpoint(os.path.join(d, checkpoint_name(n)), {"n": n})
    >>> newest = os.path.join(d, checkpoint_name(2))
    >>> with open(os.path.join(newest, CHECKPOINT_FILE), "rb") as f:
    ...     text = f.read()
    >>> with open(os.path.join(newest, CHECKPOINT_FILE), "wb") as f:    # one byte changed
    ...     _ = f.write(text.replace(b'"n":2', b'"n":7'))
    >>> read_checkpoint(d)["n"]            # the newest that reads (a warning names both)
    1
    >>> try:
    ...     read_checkpoint(newest)        # this checkpoint and no other
    ... except ConfigError as e:
    ...     print(str(e).split(": ", 1)[1])
    its SHA-256 is not the one recorded when it was saved (its bytes changed on disk); restore an older checkpoint or copy this one again
    """
    files, several = _candidates(path)
    corrupt: list[tuple[str, str]] = []
    for file in files:
        try:
            state = _read_one(file, allow_pickle)
        except _Corrupt as e:
            if not several:
                raise ConfigError(str(e)) from None
            corrupt.append((os.path.dirname(file), str(e)))
            continue
        if corrupt:
            names = ", ".join(repr(d) for d, _ in corrupt)
            log.warning("skipping corrupt checkpoint%s %s (%s); using %r, the newest "
                        "checkpoint in %r that reads", "s" if len(corrupt) > 1 else "",
                        names, corrupt[0][1], os.path.dirname(file), path)
        return state
    older = (f"; the {len(corrupt) - 1} older checkpoints in {path!r} are corrupt too"
             if len(corrupt) > 1 else "")
    raise ConfigError(f"{corrupt[0][1]}{older}")


def _read_one(file: str, allow_pickle: bool) -> dict[str, Any]:
    """Load the checkpoint whose ``state.json`` is ``file`` (see
    :func:`read_checkpoint`); _Corrupt when its files do not read back as written,
    ConfigError when they are not loadable by design (a pickle, another format)."""
    directory = os.path.dirname(file)
    raw = _read_bytes(file)
    if raw[:1] == b"\x80":   # pickle protocol 2+; never loaded
        raise ConfigError(f"{file!r} is a pickle, not a flowrl checkpoint's JSON; refused "
                          "unread (unpickling can run any code)")
    try:
        doc = json.loads(raw.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError) as e:
        reason = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise _Corrupt(f"cannot read checkpoint {file!r}: not valid JSON, truncated or "
                       f"corrupt ({reason})") from None
    if not isinstance(doc, dict) or "format" not in doc:
        raise _Corrupt(f"{file!r} is not a flowrl checkpoint (no format version)")
    if doc["format"] != FORMAT_VERSION:
        raise ConfigError(f"{file!r} has checkpoint format {doc['format']!r}; this flowrl "
                          f"reads format {FORMAT_VERSION}")
    unknown = sorted(set(doc) - set(_DOC_KEYS))
    if unknown:
        raise _Corrupt(f"checkpoint file {file!r} is corrupt: unknown entry {unknown[0]!r} "
                       f"(a flowrl checkpoint holds {list(_DOC_KEYS)})")
    sums = doc.get("sha256")
    if sums is not None:
        if not isinstance(sums, dict):
            raise _Corrupt(f"checkpoint file {file!r} is corrupt: its sha256 entry is not a "
                           "mapping of file names to digests")
        if sums.get(CHECKPOINT_FILE) != _document_sha256(doc):
            raise _Corrupt(f"checkpoint file {file!r} is corrupt: its SHA-256 is not the one "
                           "recorded when it was saved (its bytes changed on disk); restore "
                           "an older checkpoint or copy this one again")
    if not isinstance(doc.get("state"), dict):
        raise _Corrupt(f"{file!r} is not a flowrl checkpoint (no state object)")
    arrays_file = _named_file(directory, doc, "arrays", file)
    user_file = _named_file(directory, doc, "user_state", file)
    arrays: dict[str, np.ndarray] = {}
    if arrays_file is not None:
        import safetensors
        import safetensors.numpy
        data = _read_bytes(arrays_file)
        _check_sha256(data, sums, doc["arrays"], arrays_file)
        try:
            arrays = safetensors.numpy.load(data)
        except (safetensors.SafetensorError, ValueError, TypeError) as e:
            raise _Corrupt(f"cannot read checkpoint {arrays_file!r}: not a safetensors "
                           f"file, truncated or corrupt ({str(e).splitlines()[0]})") from None
    pickled = None
    if user_file is not None and allow_pickle:
        data = _read_bytes(user_file)
        _check_sha256(data, sums, doc["user_state"], user_file)
        try:
            pickled = pickle.loads(data)  # allowed: the caller trusts it
        except Exception as e:  # whatever a corrupt pickle raises
            raise _Corrupt(f"cannot read checkpoint {user_file!r}: {type(e).__name__}: "
                           f"{str(e).splitlines()[0] if str(e) else 'corrupt'}") from None
        if not isinstance(pickled, dict):
            raise _Corrupt(f"cannot read checkpoint {user_file!r}: not a user-state file")
    try:
        state = decode_state(doc["state"], arrays, pickled, user_file)
    except StateError as e:
        raise _Corrupt(f"cannot read checkpoint {file!r}: {e}") from None
    state["path"] = file
    return state


__all__ = ["CHECKPOINT_FILE", "ARRAYS_FILE", "USER_STATE_FILE", "FORMAT_VERSION", "TAG",
           "TUNE_SUBDIR",
           "PickledValue", "find_pickled", "encode_state", "checkpoint_name",
           "write_checkpoint", "read_checkpoint", "resolve_checkpoint", "run_directory",
           "list_checkpoints",
           "latest_checkpoint", "prune_checkpoints", "remove_stale_temporaries",
           "global_rng_state", "set_global_rng_state", "config_fields", "saved_config",
           "check_algorithm_state", "policy_spaces_text", "restore_local_worker"]


# -- what an algorithm's checkpoint holds ------------------------------------------------
# ``Algorithm.save`` writes ``{"algorithm": name, "worker": the driver worker's state,
# "remote_workers": {worker_index: state}, "metrics", "rng": global_rng_state(),
# "seeds", "config": config_fields(config), "spaces": policy_spaces_text(local),
# "extra": extra_state()}``, and ``"evaluation"`` (a held-out-dataset evaluation's
# estimators) where there is one; the functions below build and check those entries.

def global_rng_state() -> dict[str, Any]:
    """The process's python, numpy and torch global RNG states (the ``rng`` entry)."""
    import random

    import torch
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state().numpy().copy()}


def set_global_rng_state(state: dict[str, Any] | None) -> None:
    """Restore what :func:`global_rng_state` returned (nothing for None or empty)."""
    if not state:
        return
    import random

    import torch
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(torch.tensor(state["torch"]))


def config_fields(config: Any) -> dict[str, Any] | None:
    """The fields of ``config`` (an AlgorithmConfig) for a checkpoint (``flowrl
    evaluate`` rebuilds the config from them), or None when one of them can be
    neither stored nor pickled. Fields that are functions or classes (an env
    creator, a mapping function) end up in the checkpoint's ``user_state.pkl``; model
    configs (``model``, SAC's ``Q_model``...) are stored as dicts of their fields."""
    import dataclasses

    from flowrl.models.config import ModelConfig
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}
    fields = {k: v.to_dict() if isinstance(v, ModelConfig) else v for k, v in fields.items()}
    try:
        encode_state(fields)
    except FlowError:
        return None
    return fields


def saved_config(cls: type, state: dict[str, Any], where: str) -> Any:
    """The config of algorithm class ``cls`` rebuilt from a checkpoint's ``state``
    (what :func:`config_fields` stored), validated as any config is. A ConfigError
    naming ``where`` when the checkpoint holds none, when a field was pickled and
    the checkpoint was read without ``allow_pickle``, or when this flowrl's config
    refuses it. ``Algorithm.from_checkpoint`` and
    :func:`flowrl.evaluation.load_for_evaluation` both use it."""
    fields = state.get("config")
    if not isinstance(fields, dict):
        raise ConfigError(f"{where}: the checkpoint holds no config (it could not be stored "
                          "when saved); build the algorithm from its config and call "
                          "restore() instead")
    pickled = find_pickled(fields)
    if pickled is not None:
        raise ConfigError(f"{where}: its config field {pickled.where} ({pickled.type_name}) "
                          "was saved with pickle, and unpickling can run any code: pass "
                          "allow_pickle=True (CLI: --allow-pickle) only for a checkpoint you "
                          "trust")
    try:
        return cls.config_class(**fields)
    except (TypeError, FlowError) as e:
        raise ConfigError(f"{where}: its config cannot be rebuilt here "
                          f"({type(e).__name__}: {e})") from None


def check_algorithm_state(state: dict[str, Any], name: str, where: str) -> dict[int, Any]:
    """Check that ``state`` (as :func:`read_checkpoint` returns it) is a checkpoint of
    algorithm ``name`` written by ``Algorithm.save`` and holds nothing still pickled;
    return its remote workers' states by ``worker_index``. A ConfigError naming
    ``where`` otherwise.

    >>> check_algorithm_state({"algorithm": "ppo", "worker": {"policies": {}},
    ...                        "metrics": {}}, "ppo", "restore")
    {}
    >>> check_algorithm_state({"algorithm": "dqn"}, "ppo", "restore")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: restore: the checkpoint is from 'dqn', not 'ppo'
    """
    if state.get("algorithm") != name:
        raise ConfigError(f"{where}: the checkpoint is from {state.get('algorithm')!r}, "
                          f"not {name!r}")
    missing = sorted({"worker", "metrics"} - set(state))
    if missing or not isinstance(state["worker"], dict) or "policies" not in state["worker"]:
        raise ConfigError(f"{where}: the checkpoint lacks {missing or ['worker.policies']}; "
                          "it was not written by Algorithm.save()")
    remotes = state.get("remote_workers") or {}
    if not isinstance(remotes, dict):
        raise ConfigError(f"{where}: the checkpoint's remote_workers is not a mapping of "
                          "worker_index to state; it was not written by Algorithm.save()")
    for part in ("worker", "remote_workers", "metrics", "rng", "extra", "evaluation"):
        found = find_pickled(state.get(part))
        if found is not None:
            raise ConfigError(
                f"{where}: {found.where} ({found.type_name}) was saved with pickle in "
                f"{found.file}, and unpickling can run any code: pass allow_pickle=True "
                "(CLI: --restore-allow-pickle) only for a checkpoint from a source you "
                "trust, or make extra_state() return plain data and arrays")
    return remotes


def _env_text(env: Any) -> str:
    """How restore errors name an env: an id quoted, a creator by its name, an env
    read back from a checkpoint's pickle by its type."""
    from flowrl.workers.rollout_worker import describe_env
    return env.type_name if isinstance(env, PickledValue) else describe_env(env)


def policy_spaces_text(local: Any) -> dict[str, dict[str, str]]:
    """``{policy_id: {"observation_space": ..., "action_space": ...}}`` of the
    driver's worker ``local``, as text (``str`` of each gymnasium space): what a
    checkpoint records of the env its policies were built for."""
    return {pid: {"observation_space": str(obs), "action_space": str(act)}
            for pid, (obs, act) in local.policy_spaces().items()}


def restore_local_worker(local: Any, state: dict[str, Any], where: str, env: Any) -> None:
    """Give the driver's worker ``local`` a checkpoint's ``worker`` state (weights,
    optimizer and RNG states of its policies), ``state`` being the whole checkpoint
    and ``env`` the config's env. A ConfigError naming ``where`` when the
    checkpoint's policies differ from the worker's; when the spaces its policies
    were built for (``state["spaces"]``) differ, naming the env of the checkpoint
    and of the config and the spaces that differ; when the model does not fit,
    naming both envs where they differ (checkpoints without spaces).
    :meth:`Algorithm.restore` and :func:`flowrl.evaluation.load_for_evaluation`
    both use it."""
    worker_state = state["worker"]
    saved_policies = set(worker_state["policies"])
    if saved_policies != set(local.policy_map):
        raise ConfigError(f"{where}: the checkpoint has policies {sorted(saved_policies)}, "
                          f"this algorithm {sorted(local.policy_map)}")
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    trained_on = (f"env {_env_text(config['env'])}" if config.get("env") is not None
                  else "an env it does not name")
    here = f"this config's env is {_env_text(env)}"
    saved_spaces = state.get("spaces") if isinstance(state.get("spaces"), dict) else {}
    for pid, spaces in sorted(policy_spaces_text(local).items()):
        saved = saved_spaces.get(pid)
        if not isinstance(saved, dict):
            continue          # a checkpoint written before spaces were recorded
        differ = [f"{key.replace('_', ' ')} {saved.get(key)} there, {spaces[key]} here"
                  for key in ("observation_space", "action_space") if saved.get(key) != spaces[key]]
        if differ:
            raise ConfigError(f"{where}: the checkpoint was trained on {trained_on} and "
                              f"{here}, and policy {pid!r} sees other spaces: "
                              f"{'; '.join(differ)}; restore it with the env (and env_config) "
                              "it was trained on, or train a new policy for this env")
    try:
        local.set_state(worker_state)
    except ConfigError as e:
        if config.get("env") is not None and config.get("env") != env:
            raise ConfigError(f"{where}: the checkpoint was trained on {trained_on} and "
                              f"{here}, and its model does not fit ({e}); restore it with the "
                              "env it was trained on") from None
        raise ConfigError(f"{where}: the checkpoint's model does not fit this config "
                          f"({e}); use the model settings it was trained with") from None
