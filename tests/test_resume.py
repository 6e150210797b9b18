"""Checkpoints in daily use: checksums, a corrupt newest checkpoint, ``flowrl train
--restore PATH`` alone, resumed runs appending to their run directory, restores
with another env."""

from __future__ import annotations

import json
import logging
import os

import numpy as np
import pytest

from flowrl import checkpoint
from flowrl.algorithms import PG
from flowrl.cli import main
from flowrl.errors import ConfigError

FAST = ["--set", "rollout_fragment_length=50", "--set", "train_batch_size=50", "--quiet"]


class Schedule:
    """Extra state that only pickle stores (user_state.pkl)."""

    def __init__(self, steps):
        self.steps = steps


def flip(file, old: bytes, new: bytes) -> None:
    data = file.read_bytes()
    assert data.count(old) == 1
    file.write_bytes(data.replace(old, new))


def flip_last_byte(file) -> None:
    data = bytearray(file.read_bytes())
    data[-1] ^= 0x01
    file.write_bytes(bytes(data))


def write(path, value: int):
    checkpoint.write_checkpoint(str(path), {"x": value, "w": np.full(4, float(value)),
                                            "schedule": Schedule(value)})
    return path


# -- checksums -----------------------------------------------------------------------
@pytest.mark.parametrize("damaged", ["state.json", "arrays.safetensors", "user_state.pkl"])
def test_a_changed_byte_in_any_file_is_a_config_error_naming_it(tmp_path, damaged):
    """Each change leaves a file that parses (JSON, safetensors, pickle), so only the
    checksum can tell: before checksums these loaded silently."""
    ck = write(tmp_path / "ck", 5)
    if damaged == "state.json":
        flip(ck / damaged, b'"x":5', b'"x":7')
    else:
        flip_last_byte(ck / damaged)
    with pytest.raises(ConfigError, match=rf"checkpoint file '[^']*/ck/{damaged}' is corrupt: its "
                       r"SHA-256 is not the one recorded when it was saved") as info:
        checkpoint.read_checkpoint(str(ck), allow_pickle=True)
    assert "\n" not in str(info.value)


def test_checkpoints_written_before_checksums_still_load(tmp_path):
    ck = write(tmp_path / "ck", 5)
    doc = json.loads((ck / checkpoint.CHECKPOINT_FILE).read_text())
    assert set(doc["sha256"]) == {"state.json", "arrays.safetensors", "user_state.pkl"}
    del doc["sha256"]
    (ck / checkpoint.CHECKPOINT_FILE).write_text(json.dumps(doc))
    state = checkpoint.read_checkpoint(str(ck), allow_pickle=True)
    assert state["x"] == 5 and state["w"].tolist() == [5.0] * 4 and state["schedule"].steps == 5


def test_an_unknown_entry_in_state_json_is_corruption(tmp_path):
    """A changed byte in an entry's name would otherwise hide the checksums."""
    ck = write(tmp_path / "ck", 5)
    flip(ck / checkpoint.CHECKPOINT_FILE, b'"sha256"', b'"sha257"')
    with pytest.raises(ConfigError, match="is corrupt: unknown entry 'sha257'"):
        checkpoint.read_checkpoint(str(ck))


# -- a corrupt newest checkpoint -----------------------------------------------------
def test_a_corrupt_newest_checkpoint_gives_way_to_the_newest_good_one(tmp_path, caplog):
    d = tmp_path / "ckpts"
    for n in (1, 2, 3):
        write(d / checkpoint.checkpoint_name(n), n)
    flip_last_byte(d / "checkpoint_000003" / "arrays.safetensors")          # a checksum
    (d / "checkpoint_000002" / checkpoint.CHECKPOINT_FILE).write_bytes(b'{"format": 2, "st')
    with caplog.at_level(logging.WARNING, logger="flowrl.checkpoint"):
        state = checkpoint.read_checkpoint(str(d))
    assert state["x"] == 1 and state["path"].endswith("checkpoint_000001/state.json")
    (record,) = caplog.records                                  # one warning, naming all
    assert ("skipping corrupt checkpoints" in record.getMessage()
            and all(f"checkpoint_00000{n}'" in record.getMessage() for n in (1, 2, 3)))
    assert "using '" + str(d / "checkpoint_000001") + "'" in record.getMessage()
    # One checkpoint named explicitly is that checkpoint or an error.
    with pytest.raises(ConfigError, match="checkpoint_000003/arrays.safetensors' is corrupt"):
        checkpoint.read_checkpoint(str(d / "checkpoint_000003"))
    with pytest.raises(ConfigError, match="not valid JSON, truncated or corrupt"):
        checkpoint.read_checkpoint(str(d / "checkpoint_000002" / checkpoint.CHECKPOINT_FILE))
    # None that reads: the newest's reason, and that the others are corrupt too.
    flip_last_byte(d / "checkpoint_000001" / "arrays.safetensors")
    with pytest.raises(ConfigError, match=r"checkpoint_000003/arrays.safetensors' is corrupt.*; "
                       r"the 2 older checkpoints in .* are corrupt too"):
        checkpoint.read_checkpoint(str(d))


def test_a_refused_newest_checkpoint_is_not_skipped(tmp_path):
    """Only corruption gives way: a checkpoint refused by design (another format)
    is an error, not a reason to load an older one silently."""
    d = tmp_path / "ckpts"
    for n in (1, 2):
        write(d / checkpoint.checkpoint_name(n), n)
    flip(d / "checkpoint_000002" / checkpoint.CHECKPOINT_FILE, b'"format":2', b'"format":3')
    with pytest.raises(ConfigError, match="has checkpoint format 3"):
        checkpoint.read_checkpoint(str(d))
def test_train_restores_the_newest_good_checkpoint_of_a_run(tmp_path, caplog):
    runs = tmp_path / "runs"
    assert main(["train", "pg", "--env", "CartPole-v1", *FAST, "--stop-iters", "2",
                 "--checkpoint-freq", "1", "--run-dir", str(runs), "--no-tensorboard"]) == 0
    (run,) = runs.iterdir()
    flip_last_byte(run / "checkpoint" / "checkpoint_000002" / "arrays.safetensors")
    with caplog.at_level(logging.WARNING, logger="flowrl.checkpoint"):
        assert main(["train", "--restore", str(run), "--stop-iters", "3", *FAST,
                     "--no-tensorboard"]) == 0
    (record,) = [r for r in caplog.records if r.name == "flowrl.checkpoint"]
    assert "checkpoint_000002' (checkpoint file" in record.getMessage()
    assert "using '" + str(run / "checkpoint" / "checkpoint_000001") + "'" in record.getMessage()
    iterations = [json.loads(line)["training_iteration"]
                  for line in (run / "result.jsonl").read_text().splitlines()]
    assert iterations == [1, 2, 2, 3]            # resumed after iteration 1, same run


# -- flowrl train --restore PATH alone, appending to its run ----------------------------
@pytest.fixture(scope="module")
def run(tmp_path_factory):
    """A PG run of 2 iterations on CartPole with a config of its own (lr, model,
    gamma, seed), checkpointed every iteration."""
    root = tmp_path_factory.mktemp("runs")
    assert main(["train", "pg", "--env", "CartPole-v1", *FAST, "--set", "lr=0.003",
                 "--set", "model=[16]", "--set", "gamma=0.95", "--stop-iters", "2",
                 "--checkpoint-freq", "1", "--run-dir", str(root), "--seed", "3"]) == 0
    (run_dir,) = root.iterdir()
    return run_dir


def copy_run(run_dir, to):
    import shutil
    shutil.copytree(run_dir, to)
    return to


def results(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "result.jsonl").read_text().splitlines()]


def test_restore_alone_takes_algo_env_and_config_from_the_checkpoint_and_appends(
        run, tmp_path, capsys):
    from flowrl.loggers import read_scalars
    mine = copy_run(run, tmp_path / "run")
    events = sorted(p.name for p in mine.iterdir() if p.name.startswith("events."))
    assert main(["train", "--restore", str(mine / "checkpoint" / "checkpoint_000002"),
                 "--stop-iters", "3", "--quiet"]) == 0
    out = capsys.readouterr().out
    assert f"results {mine / 'result.jsonl'}" in out and "checkpoint_000003" in out
    assert [r["training_iteration"] for r in results(mine)] == [1, 2, 3]   # one result.jsonl
    assert sorted(os.listdir(mine / "checkpoint")) == [
        "checkpoint_000001", "checkpoint_000002", "checkpoint_000003"]
    assert not (tmp_path / "runs").exists() and sorted(os.listdir(tmp_path)) == ["run"]
    new_events = [p.name for p in mine.iterdir() if p.name.startswith("events.")]
    assert len(new_events) == len(events) + 1          # one TensorBoard run: the same dir
    steps = [s for s, _ in read_scalars(str(mine))["training_iteration"]]
    assert steps == sorted(steps) and len(steps) == 3
    config = checkpoint.read_checkpoint(str(mine))["config"]
    assert (config["lr"], list(config["model"]["fcnet_hiddens"]), config["gamma"],
            config["seed"], config["env"]) == (0.003, [16], 0.95, 3, "CartPole-v1")


def test_explicit_options_override_the_checkpoints_config(run, tmp_path):
    mine = copy_run(run, tmp_path / "run")
    assert main(["train", "--restore", str(mine), "--set", "lr=0.0005", "--stop-iters", "3",
                 "--quiet", "--no-tensorboard"]) == 0
    config = checkpoint.read_checkpoint(str(mine))["config"]
    assert (config["lr"], list(config["model"]["fcnet_hiddens"]), config["gamma"]) == (
        0.0005, [16], 0.95)
    # --set model.x changes one key of the saved model; a model that does not fit the
    # weights is refused before anything is written.
    before = sorted(os.listdir(mine / "checkpoint"))
    assert main(["train", "--restore", str(mine), "--set", "model.fcnet_hiddens=[8]",
                 "--stop-iters", "4", "--quiet"]) == 2
    assert sorted(os.listdir(mine / "checkpoint")) == before


def test_restore_outside_a_run_directory_starts_a_new_one(run, tmp_path):
    import shutil
    ckpts = tmp_path / "elsewhere"
    shutil.copytree(run / "checkpoint", ckpts)
    assert main(["train", "--restore", str(ckpts), "--stop-iters", "3", "--run-dir",
                 str(tmp_path / "runs"), "--quiet", "--no-tensorboard"]) == 0
    (new,) = (tmp_path / "runs").iterdir()
    assert new.name.startswith("pg-CartPole-v1-")
    assert [r["training_iteration"] for r in results(new)] == [3]
    # --run-dir asks for a new run even for a checkpoint inside one.
    mine = copy_run(run, tmp_path / "run")
    assert main(["train", "--restore", str(mine), "--stop-iters", "3", "--run-dir",
                 str(tmp_path / "other"), "--quiet", "--no-tensorboard"]) == 0
    assert [r["training_iteration"] for r in results(mine)] == [1, 2]
    (other,) = (tmp_path / "other").iterdir()
    assert [r["training_iteration"] for r in results(other)] == [3]


def test_restore_alone_says_what_to_give_when_the_checkpoint_has_no_usable_config(
        tmp_path, capsys):
    from flowrl.algorithms import PG
    with PG(env="CartPole-v1", train_batch_size=50, rollout_fragment_length=50,
            seed=0) as algo:
        algo.save(str(tmp_path / "ck"))
    doc = json.loads((tmp_path / "ck" / "state.json").read_text())
    doc["state"]["config"] = None                       # a config that could not be stored
    del doc["sha256"]
    (tmp_path / "ck" / "state.json").write_text(json.dumps(doc))
    assert main(["train", "--restore", str(tmp_path / "ck"), "--stop-iters", "2"]) == 2
    assert ("holds no config" in (err := capsys.readouterr().err)
            and "give the algorithm and the env on the command line" in err)
    assert main(["train", "pg", "--env", "CartPole-v1", "--restore", str(tmp_path / "ck"),
                 "--stop-iters", "2", "--run-dir", str(tmp_path / "runs"), *FAST]) == 0


# -- restoring with another env ------------------------------------------------------
def test_restoring_with_another_env_names_both_envs_and_the_spaces_that_differ(tmp_path,
                                                                             capsys):
    with PG(env="CartPole-v1", train_batch_size=50, rollout_fragment_length=50,
            seed=0) as algo:
        algo.save(str(tmp_path / "ck"))
    expected = (r"the checkpoint was trained on env 'CartPole-v1' and this config's env is "
                r"'Acrobot-v1', and policy 'default_policy' sees other spaces: observation "
                r"space Box\(.*\(4,\), float32\) there, Box\(.*\(6,\), float32\) here; action "
                r"space Discrete\(2\) there, Discrete\(3\) here; restore it with the env")
    with PG(env="Acrobot-v1", train_batch_size=50, rollout_fragment_length=50) as other:
        with pytest.raises(ConfigError, match=expected):
            other.restore(str(tmp_path / "ck"))
    with pytest.raises(ConfigError, match=expected):
        PG.from_checkpoint(str(tmp_path / "ck"), env="Acrobot-v1")
    assert main(["train", "--restore", str(tmp_path / "ck"), "--env", "Acrobot-v1",
                 "--stop-iters", "2", "--run-dir", str(tmp_path / "runs")]) == 2
    err = capsys.readouterr().err
    assert "'CartPole-v1' and this config's env is 'Acrobot-v1'" in err
    assert not (tmp_path / "runs").exists()
    # A checkpoint written before spaces were recorded: the model does not fit, and
    # the message still names both envs.
    doc = json.loads((tmp_path / "ck" / "state.json").read_text())
    del doc["state"]["spaces"], doc["sha256"]
    (tmp_path / "ck" / "state.json").write_text(json.dumps(doc))
    with PG(env="Acrobot-v1", train_batch_size=50, rollout_fragment_length=50) as other:
        with pytest.raises(ConfigError, match="trained on env 'CartPole-v1' and this config's "
                           "env is 'Acrobot-v1', and its model does not fit"):
            other.restore(str(tmp_path / "ck"))
