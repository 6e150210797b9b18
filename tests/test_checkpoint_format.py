"""Checkpoint format 2: plain JSON + safetensors that run no code when read, pickled
user state only on request, and durable writes (fsync before success)."""

from __future__ import annotations

import collections
import json
import os
import pickle
import random

import numpy as np
import pytest
import torch

from flowrl import checkpoint, state_codec
from flowrl.algorithms import PG, PGConfig
from flowrl.errors import ConfigError, FlowError


def test_every_kind_of_state_round_trips_with_its_types(tmp_path):
    rng = np.random.default_rng(7)
    random.seed(3)
    np.random.seed(3)
    arrays = {name: np.arange(6).astype(dtype).reshape(2, 3)
              for name, dtype in state_codec.SAFE_DTYPES.items()}
    state = {
        "arrays": arrays, "empty": np.zeros((0, 4), np.float32), "zero_d": np.array(2.5),
        "strided": np.arange(10.0)[::3],
        "scalars": [np.float32(0.1), np.int64(-3), np.bool_(True), np.uint8(255)],
        "tensor": torch.arange(4.0, requires_grad=True) * 2,
        "bf16": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
        "optimizer": {"state": {0: {"step": np.array(3.0), "exp_avg": np.ones(2)}},
                      "param_groups": [{"params": [0], "betas": (0.9, 0.999), "lr": 1e-3}]},
        "pcg64": rng.bit_generator.state,     # ints beyond 64 bits
        "python_rng": random.getstate(),      # tuple of (int, tuple of 625 ints, None)
        "numpy_rng": np.random.get_state(),   # tuple holding an array
        "odd_keys": {(1, "a"): None, 2: "two", None: [], 1.5: {}},
        "tag_key": {checkpoint.TAG: "not a tag", "x": 1},
        "ordered": collections.OrderedDict(b=1, a=2),
        "floats": [float("nan"), float("inf"), -0.0, 10**30],
    }
    checkpoint.write_checkpoint(str(tmp_path / "ck"), state)
    assert sorted(os.listdir(tmp_path / "ck")) == ["arrays.safetensors", "state.json"]
    back = checkpoint.read_checkpoint(str(tmp_path / "ck"))
    for name, a in arrays.items():
        assert back["arrays"][name].dtype == a.dtype and (back["arrays"][name] == a).all()
    assert back["empty"].shape == (0, 4) and back["zero_d"].shape == ()
    assert back["strided"].tolist() == [0.0, 3.0, 6.0, 9.0]
    assert [(type(v), v) for v in back["scalars"]] == [(type(v), v) for v in state["scalars"]]
    assert torch.equal(back["tensor"], torch.tensor([0.0, 2.0, 4.0, 6.0]))
    assert back["bf16"].dtype == torch.bfloat16 and torch.equal(back["bf16"], state["bf16"])
    assert back["optimizer"]["param_groups"] == state["optimizer"]["param_groups"]
    assert list(back["optimizer"]["state"]) == [0]
    assert back["pcg64"] == state["pcg64"] and back["python_rng"] == state["python_rng"]
    random.setstate(back["python_rng"])            # accepted as the live state
    np.random.set_state(back["numpy_rng"])
    assert np.random.rand() == (np.random.set_state(state["numpy_rng"]), np.random.rand())[1]
    assert back["odd_keys"] == state["odd_keys"] and back["tag_key"] == state["tag_key"]
    assert list(back["ordered"]) == ["b", "a"]
    assert np.isnan(back["floats"][0]) and back["floats"][1:] == [float("inf"), -0.0, 10**30]


class Schedule:
    """A user object only pickle can store."""

    def __init__(self, eps: float):
        self.eps = eps


def test_other_objects_go_to_user_state_pkl_read_only_with_allow_pickle(tmp_path):
    checkpoint.write_checkpoint(str(tmp_path / "ck"), {"extra": {"s": Schedule(0.3)}, "n": 1})
    assert sorted(os.listdir(tmp_path / "ck")) == ["state.json", "user_state.pkl"]
    safe = checkpoint.read_checkpoint(str(tmp_path / "ck"))
    placeholder = safe["extra"]["s"]
    assert isinstance(placeholder, checkpoint.PickledValue)
    assert placeholder.where == "extra.s" and placeholder.type_name.endswith(".Schedule")
    assert placeholder.file.endswith("user_state.pkl")
    assert checkpoint.find_pickled(safe) is placeholder
    trusted = checkpoint.read_checkpoint(str(tmp_path / "ck"), allow_pickle=True)
    assert isinstance(trusted["extra"]["s"], Schedule) and trusted["extra"]["s"].eps == 0.3


class Marker:
    """Unpickling this creates a file: proof that a checkpoint ran code."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def hostile_checkpoints(root, marker) -> dict[str, tuple[str, str]]:
    """name -> (checkpoint path, expected reason) for checkpoints whose pickle
    payload would create ``marker`` if anything unpickled it."""
    payload = pickle.dumps(Marker(marker))
    out = {}

    def make(name, files, reason):
        d = root / name
        d.mkdir(parents=True)
        for fname, data in files.items():
            (d / fname).write_bytes(data if isinstance(data, bytes) else json.dumps(data).encode())
        out[name] = (str(d), reason)

    make("pickle_as_json", {"state.json": payload}, "is a pickle.*refused unread")
    make("protocol0_as_json", {"state.json": pickle.dumps(Marker(marker), protocol=0)},
         "not valid JSON")
    ref = {"format": 2, "arrays": "arrays.safetensors", "user_state": None,
           "state": {"w": {checkpoint.TAG: "ndarray", "key": "0"}}}
    make("pickle_as_arrays", {"state.json": ref, "arrays.safetensors": payload},
         "not a safetensors file")
    make("format1", {"algorithm_state.pkl": payload}, "format-1 flowrl checkpoint")
    make("runs/checkpoint/checkpoint_000004", {"algorithm_state.pkl": payload},
         "format-1 flowrl checkpoint")
    out["format1_run_dir"] = (str(root / "runs"), "format-1 flowrl checkpoint")
    out["format1_file"] = (str(root / "format1" / "algorithm_state.pkl"),
                           "format-1.*not loadable here.*train again")
    make("path_trick", {"state.json": {**ref, "arrays": None, "user_state": "../evil.pkl"},
                        "user_state.pkl": payload}, "'../evil.pkl' is not a checkpoint data")
    make("unknown_tag", {"state.json": {**ref, "arrays": None,
                                        "state": {"x": {checkpoint.TAG: "eval"}}}},
         "unknown tag __flowrl__='eval'")
    make("deep", {"state.json": b'{"format": 2, "state": {"x": ' + b"[" * 200000 + b"]" * 200000
                  + b"}}"}, "cannot read checkpoint")
    return out


def test_hostile_checkpoints_are_refused_without_running_their_pickles(tmp_path):
    marker = tmp_path / "pwned"
    for name, (path, reason) in hostile_checkpoints(tmp_path / "ck", marker).items():
        with pytest.raises(ConfigError, match=reason) as info:
            checkpoint.read_checkpoint(path)
        assert "\n" not in str(info.value), name
        with pytest.raises(ConfigError):
            checkpoint.read_checkpoint(path, allow_pickle=True)   # none of them names user state
        assert not marker.exists(), name
    Marker(marker).__reduce__()[0](marker, "w").close()   # the payload does work when run
    assert marker.exists()


def test_pickled_user_state_runs_nothing_until_allow_pickle(tmp_path):
    marker = tmp_path / "pwned"
    with PG(PGConfig(env="CartPole-v1", rollout_fragment_length=25, train_batch_size=25,
                     seed=0)) as algo:
        algo.train()
        algo.extra_state = lambda: {"schedule": Marker(marker)}
        algo.save(str(tmp_path / "ck"))
        assert not marker.exists()
        assert os.path.isfile(tmp_path / "ck" / checkpoint.USER_STATE_FILE)
    with PG(PGConfig(env="CartPole-v1", rollout_fragment_length=25, train_batch_size=25,
                     seed=0)) as fresh:
        before = fresh.get_policy().get_weights()
        with pytest.raises(ConfigError, match=r"extra\.schedule \(.*Marker\) was saved with "
                           r"pickle in .*user_state.pkl.*allow_pickle=True"):
            fresh.restore(str(tmp_path / "ck"))
        assert not marker.exists()
        assert fresh.metrics.counters["training_iteration"] == 0       # nothing restored
        assert all((w == before[k]).all() for k, w in fresh.get_policy().get_weights().items())
        fresh.restore(str(tmp_path / "ck"), allow_pickle=True)
        assert marker.exists()                                         # the caller's choice
        assert fresh.metrics.counters["training_iteration"] == 1


def test_a_pg_checkpoint_is_plain_data_and_arrays(tmp_path):
    with PG(PGConfig(env="CartPole-v1", rollout_fragment_length=25, train_batch_size=25,
                     num_workers=1, seed=0)) as algo:
        algo.train()
        algo.save(str(tmp_path / "ck"))
    assert sorted(os.listdir(tmp_path / "ck")) == ["arrays.safetensors", "state.json"]
    state = checkpoint.read_checkpoint(str(tmp_path / "ck"))
    assert checkpoint.find_pickled(state) is None
    assert state["config"]["model"]["fcnet_hiddens"] == [64, 64]
    assert list(state["remote_workers"]) == [1]


# -- durability ---------------------------------------------------------------------
def record_os_calls(monkeypatch, fail_fsync_after_commit=False):
    """Log fsyncs (by path) and renames; optionally fail every fsync after the rename
    that commits a checkpoint (of a directory, or onto a state.json)."""
    events = []
    real_fsync, real_rename, real_replace = os.fsync, os.rename, os.replace

    def committed():
        return any(e[0] == "rename" and (e[2].endswith("/" + checkpoint.CHECKPOINT_FILE)
                                         or os.path.basename(e[2]).startswith("ck"))
                   for e in events)

    def fsync(fd):
        path = os.readlink(f"/proc/self/fd/{fd}")
        if fail_fsync_after_commit and committed():
            raise OSError(5, "Input/output error")
        events.append(("fsync", path))
        return real_fsync(fd)

    def rename(src, dst, _real=real_rename):
        _real(src, dst)
        events.append(("rename", os.fspath(src), os.fspath(dst)))

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "rename", rename)
    monkeypatch.setattr(os, "replace", lambda s, d: rename(s, d, _real=real_replace))
    return events


def final_name(path, later_events):
    for e in later_events:
        if e[0] == "rename" and (path == e[1] or path.startswith(e[1] + "/")):
            path = e[2] + path[len(e[1]):]
    return path


@pytest.mark.parametrize("overwrite", [False, True])
def test_files_directory_and_parent_are_fsynced_before_success(tmp_path, monkeypatch,
                                                               overwrite):
    ck = str(tmp_path / "ck")
    if overwrite:
        checkpoint.write_checkpoint(ck, {"w": np.zeros(3), "s": Schedule(1.0)})
    events = record_os_calls(monkeypatch)
    checkpoint.write_checkpoint(ck, {"w": np.ones(3), "s": Schedule(2.0)})
    monkeypatch.undo()
    renames = [i for i, e in enumerate(events) if e[0] == "rename"]
    commit = renames[-1]
    assert final_name(events[commit][2], []) in (ck, os.path.join(ck, "state.json"))
    synced = {final_name(e[1], events[i + 1:]) for i, e in enumerate(events[:commit])
              if e[0] == "fsync"}
    files = {os.path.join(ck, f) for f in os.listdir(ck)}
    assert files == {os.path.join(ck, f) for f in
                     ("state.json", "arrays.safetensors" if not overwrite else
                      "arrays.1.safetensors", "user_state.pkl" if not overwrite else
                      "user_state.1.pkl")}
    assert files <= synced                       # every file on disk before the commit
    assert ck in synced                          # and the directory's entries
    after = {e[1] for e in events[commit + 1:] if e[0] == "fsync"}
    assert str(tmp_path) in after and (ck in after or not overwrite)
    back = checkpoint.read_checkpoint(ck, allow_pickle=True)
    assert back["w"].tolist() == [1.0, 1.0, 1.0] and back["s"].eps == 2.0


@pytest.mark.parametrize("overwrite", [False, True])
def test_an_fsync_failing_after_the_rename_does_not_claim_the_old_checkpoint_is_kept(
        tmp_path, monkeypatch, overwrite):
    ck = str(tmp_path / "ck")
    if overwrite:
        checkpoint.write_checkpoint(ck, {"v": 1})
    record_os_calls(monkeypatch, fail_fsync_after_commit=True)
    with pytest.raises(FlowError, match="was written and replaced the previous one.*"
                       "Input/output error.*may not survive a crash") as info:
        checkpoint.write_checkpoint(ck, {"v": 2})
    assert "unchanged" not in str(info.value)
    monkeypatch.undo()
    assert checkpoint.read_checkpoint(ck)["v"] == 2


def test_overwrites_keep_only_the_files_the_new_state_names(tmp_path):
    ck = str(tmp_path / "ck")
    checkpoint.write_checkpoint(ck, {"w": np.zeros(2), "s": Schedule(1.0)})
    checkpoint.write_checkpoint(ck, {"w": np.ones(2)})
    assert sorted(os.listdir(ck)) == ["arrays.1.safetensors", "state.json"]
    checkpoint.write_checkpoint(ck, {"w": np.full(2, 2.0)})
    assert sorted(os.listdir(ck)) == ["arrays.safetensors", "state.json"]
    assert checkpoint.read_checkpoint(ck)["w"].tolist() == [2.0, 2.0]
    assert not [n for n in os.listdir(tmp_path) if n.startswith(".")]


def make_cartpole(env_config):
    import gymnasium as gym
    return gym.make("CartPole-v1")


def test_evaluation_loads_a_config_with_functions_only_with_allow_pickle(tmp_path):
    from flowrl.evaluation import load_for_evaluation
    with PG(PGConfig(env=make_cartpole, rollout_fragment_length=25, train_batch_size=25,
                     seed=0)) as algo:
        algo.train()
        algo.save(str(tmp_path / "ck"))
    state = checkpoint.read_checkpoint(str(tmp_path / "ck"))
    assert checkpoint.find_pickled(state).where == "config.env"
    with pytest.raises(ConfigError, match=r"config field config\.env \(builtins\.function\) was "
                       r"saved with pickle.*allow_pickle=True \(CLI: --allow-pickle\)"):
        load_for_evaluation(str(tmp_path / "ck"))
    with PG(PGConfig(env=make_cartpole, seed=0)) as restoring:   # restore needs no config
        restoring.restore(str(tmp_path / "ck"))
        assert restoring.metrics.counters["training_iteration"] == 1
    loaded = load_for_evaluation(str(tmp_path / "ck"), allow_pickle=True)
    try:
        assert loaded.config.env is make_cartpole and loaded.config.train_batch_size == 25
        assert loaded.metrics.counters["training_iteration"] == 1
    finally:
        loaded.stop()
