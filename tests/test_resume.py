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
