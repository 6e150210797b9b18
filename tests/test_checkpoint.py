"""Checkpoints users can trust: atomic writes, discovery, checked loads, full state."""

from __future__ import annotations

import json
import os
import pickle
import random
import subprocess
import sys
import threading

import numpy as np
import pytest
import torch

from flowrl import checkpoint
from flowrl.algorithms import A2C, PG, A2CConfig, PGConfig
from flowrl.errors import ConfigError, FlowError


def snapshot(root) -> dict[str, bytes]:
    """Every file under ``root`` (relative path -> bytes)."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def test_failed_writes_leave_the_previous_checkpoint_byte_identical(tmp_path, monkeypatch):
    ck = tmp_path / "ck"
    checkpoint.write_checkpoint(str(ck), {"v": 1})
    before = snapshot(tmp_path)
    with pytest.raises(FlowError, match="v .*does not pickle"):
        checkpoint.write_checkpoint(str(ck), {"v": threading.Lock()})

    def full_disk(fd):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "fsync", full_disk)
    with pytest.raises(FlowError, match="No space left on device.*unchanged"):
        checkpoint.write_checkpoint(str(ck), {"v": 2})
    with pytest.raises(FlowError, match="No space left"):      # a new directory as well
        checkpoint.write_checkpoint(str(tmp_path / "new"), {"v": 2})
    monkeypatch.undo()
    assert snapshot(tmp_path) == before                       # no temporaries anywhere
    assert sorted(os.listdir(tmp_path)) == ["ck"]
    checkpoint.write_checkpoint(str(ck), {"v": 3})
    assert checkpoint.read_checkpoint(str(ck))["v"] == 3


def test_discovery_ignores_temporaries_and_incomplete_directories(tmp_path):
    for it in (2, 10):
        checkpoint.write_checkpoint(str(tmp_path / checkpoint.checkpoint_name(it)), {"it": it})
    (tmp_path / checkpoint.checkpoint_name(11)).mkdir()        # no state file: incomplete
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                          capture_output=True, text=True).stdout.strip()
    stale = tmp_path / f".checkpoint_000012.tmp-{dead}-0"      # a writer killed mid-save
    stale.mkdir()
    (stale / checkpoint.CHECKPOINT_FILE).write_bytes(b"partial")
    assert os.path.basename(checkpoint.latest_checkpoint(str(tmp_path))) == "checkpoint_000010"
    assert checkpoint.read_checkpoint(str(tmp_path))["it"] == 10
    checkpoint.write_checkpoint(str(tmp_path / checkpoint.checkpoint_name(13)), {"it": 13})
    assert not stale.exists()                                  # cleaned by the next save
    assert checkpoint.prune_checkpoints(str(tmp_path), keep=1) == [
        str(tmp_path / "checkpoint_000002"), str(tmp_path / "checkpoint_000010")]
    assert [os.path.basename(p) for p in checkpoint.list_checkpoints(str(tmp_path))] == [
        "checkpoint_000013"]


@pytest.mark.parametrize("content, reason", [
    (b"", "not valid JSON"), (b"garbage", "not valid JSON"),
    (b'{"format": 2, "state": {"x": [1, 2', "not valid JSON, truncated"),
    (b"[1, 2]", "not a flowrl checkpoint"), (b'{"format": 2}', "no state object"),
    (b'{"format": 99, "state": {}}', "format 99; this flowrl reads format 2"),
    (pickle.dumps({"format": 2}), "is a pickle.*refused unread"),
])
def test_unreadable_checkpoints_are_one_line_config_errors(tmp_path, content, reason):
    (tmp_path / checkpoint.CHECKPOINT_FILE).write_bytes(content)
    with pytest.raises(ConfigError, match=reason) as info:
        checkpoint.read_checkpoint(str(tmp_path))
    assert "\n" not in str(info.value)
    with pytest.raises(ConfigError, match="no such file"):
        checkpoint.read_checkpoint(str(tmp_path / "missing"))


class ExplorationPG(PG):
    """PG with an exploration schedule kept through extra_state."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.epsilon = 1.0

    def extra_state(self):
        return {"epsilon": self.epsilon}

    def restore_extra_state(self, state):
        self.epsilon = state["epsilon"]


def small_pg(**kw):
    return dict(env="CartPole-v1", rollout_fragment_length=25, train_batch_size=50, seed=0, **kw)


def test_save_restore_keeps_rngs_extra_state_and_remote_worker_rngs(tmp_path):
    algo = ExplorationPG(PGConfig(**small_pg(num_workers=1)))
    algo.train()
    algo.epsilon = 0.25
    random.seed(1), np.random.seed(1), torch.manual_seed(1)
    remote_before = algo.workers.remote_workers()[0].get_state()
    algo.save(str(tmp_path / "ck"))
    expected = (random.random(), np.random.rand(), torch.rand(1).item())
    algo.train()
    algo.epsilon = 0.0

    fresh = ExplorationPG(PGConfig(**small_pg(num_workers=1)))
    fresh.restore(str(tmp_path / "ck"))
    assert (random.random(), np.random.rand(), torch.rand(1).item()) == expected
    assert fresh.epsilon == 0.25
    assert fresh.metrics.counters["training_iteration"] == 1
    # the remote worker's numpy generators are restored
    restored = fresh.workers.remote_workers()[0].get_state()["policies"]["default_policy"]
    before = remote_before["policies"]["default_policy"]
    assert restored["np_rng"] == before["np_rng"]
    assert restored["action_rng"] == before["action_rng"]
    assert fresh.train()["training_iteration"] == 2
    for a in (algo, fresh):
        a.stop()


@pytest.mark.parametrize("algorithm", ["pg", "a3c"])
def test_a_restored_run_reports_on_the_saved_runs_step_boundaries(tmp_path, algorithm):
    """With timesteps_per_iteration=1000 and fragments of 100, every iteration of a
    restored run spans 1000 steps, the first included: the reporting filter measures
    from the step counter as restored, not from 0 (which made the first restored
    iteration 100 steps and shifted every later boundary by 100)."""
    from flowrl.experiment import algorithm_class
    cls = algorithm_class(algorithm)
    kw = dict(env="CartPole-v1", timesteps_per_iteration=1000, rollout_fragment_length=100,
              train_batch_size=100, seed=0)
    if algorithm == "a3c":
        kw.update(num_workers=1, backend="local")
    with cls(**kw) as algo:
        saved_at = algo.train()["timesteps_total"]
        algo.save(str(tmp_path / "ck"))
    with cls(**kw) as fresh:
        fresh.restore(str(tmp_path / "ck"))
        results = [fresh.train() for _ in range(2)]
    # A3C's gradients arrive asynchronously, so its iterations may overshoot 1000.
    assert all(r["timesteps_this_iter"] >= 1000 for r in results)
    if algorithm == "pg":
        assert saved_at == 1000
        assert [r["timesteps_total"] for r in results] == [2000, 3000]
        assert [r["timesteps_this_iter"] for r in results] == [1000, 1000]


def optimizer_lrs(algo) -> set[float]:
    return {group["lr"] for group in algo.get_policy().optimizer.param_groups}


def test_restore_trains_at_the_configured_lr_not_the_saved_one(tmp_path):
    """``--restore ... --set lr=X`` (and PBT's mutated rate) must train at X: a torch
    optimizer's state carries the rate of the run that saved it."""
    with PG(PGConfig(**small_pg(lr=1e-3))) as pg:
        pg.train()
        pg.save(str(tmp_path / "ck"))
    with PG(PGConfig(**small_pg(lr=2e-4))) as fresh:
        fresh.restore(str(tmp_path / "ck"))
        assert optimizer_lrs(fresh) == {2e-4}
        assert fresh.train()["info"]["learner"]["default_policy"]["cur_lr"] == pytest.approx(2e-4)


def test_restore_keeps_an_lr_schedules_rate_at_the_saved_step(tmp_path):
    from flowrl.algorithms import PPO, PPOConfig
    schedule = [[0, 1e-3], [10_000, 0.0]]
    config = dict(env="CartPole-v1", train_batch_size=200, sgd_minibatch_size=100,
                  num_sgd_iter=1, seed=0, lr_schedule=schedule)
    with PPO(PPOConfig(**config)) as ppo:
        steps = ppo.train()["timesteps_total"]
        saved = optimizer_lrs(ppo)
        ppo.save(str(tmp_path / "ck"))
    (rate,) = saved
    assert rate == pytest.approx(1e-3 * (1 - steps / 10_000))
    with PPO(PPOConfig(**config)) as fresh:
        fresh.restore(str(tmp_path / "ck"))
        assert optimizer_lrs(fresh) == saved


def test_a_failed_save_raises_and_keeps_the_earlier_checkpoint(tmp_path):
    algo = ExplorationPG(PGConfig(**small_pg()))
    algo.save(str(tmp_path / "ck"))
    before = snapshot(tmp_path)
    algo.extra_state = lambda: {"bad": threading.Lock()}   # something that does not pickle
    with pytest.raises(FlowError, match="extra.bad .*does not pickle.*extra_state"):
        algo.save(str(tmp_path / "ck"))
    assert snapshot(tmp_path) == before
    algo.stop()


def test_restore_refuses_other_algorithms_and_models(tmp_path):
    with PG(PGConfig(**small_pg())) as pg:
        pg.save(str(tmp_path / "pg"))
    with A2C(A2CConfig(env="CartPole-v1", seed=0)) as a2c:
        with pytest.raises(ConfigError, match="from 'pg', not 'a2c'"):
            a2c.restore(str(tmp_path / "pg"))
    with PG(PGConfig(**small_pg(model=(8,)))) as other:
        with pytest.raises(ConfigError, match="model does not fit"):
            other.restore(str(tmp_path / "pg"))
    (tmp_path / "hand").mkdir()
    (tmp_path / "hand" / checkpoint.CHECKPOINT_FILE).write_text(json.dumps(
        {"format": checkpoint.FORMAT_VERSION, "state": {"algorithm": "pg"}}))
    with PG(PGConfig(**small_pg())) as pg:
        with pytest.raises(ConfigError, match="lacks.*not written by Algorithm.save"):
            pg.restore(str(tmp_path / "hand"))


def remote_rngs(algo) -> dict[int, dict]:
    """worker_index -> the sampling RNG state of that remote worker's policy."""
    states = algo.workers.foreach_worker(
        lambda w: (w.worker_index, w.get_state()["policies"]["default_policy"]["np_rng"]))
    return dict(states[1:])


def test_remote_worker_states_are_saved_and_restored_by_worker_index(tmp_path):
    """Worker lists out of index order (a reordered list, a dropped worker) still
    give every worker_index its own saved state."""
    cfg = PGConfig(**small_pg(num_workers=3, ignore_worker_failures=True))
    with ExplorationPG(cfg) as algo:
        algo.train()
        saved = remote_rngs(algo)
        assert len({str(s) for s in saved.values()}) == 3
        algo.workers._remotes.reverse()                    # as if restarts reordered them
        algo.workers._indices.reverse()
        assert algo.workers.worker_indices() == [3, 2, 1] and remote_rngs(algo) == saved
        algo.save(str(tmp_path / "reordered"))
        algo.workers.restart_worker(2, reason="test")     # dropped: remotes are 3 and 1
        algo.save(str(tmp_path / "dropped"))
    for name, expected in (("reordered", saved), ("dropped", {1: saved[1], 3: saved[3]})):
        with ExplorationPG(cfg) as fresh:
            own = remote_rngs(fresh)
            fresh.restore(str(tmp_path / name))
            assert remote_rngs(fresh) == {**own, **expected}, name


def test_a_restored_run_means_its_returns_over_the_saved_window(tmp_path):
    """The 100-episode means of a restored run go on over the episodes before the
    checkpoint: its first result is the mean of the saved window plus the new
    episodes, not of the few new ones alone (which made a resumed learning curve
    jump)."""
    from flowrl.ops.metric_ops import RECENT_EPISODES

    def returns(algo) -> list[float]:
        return [e["episode_reward"] for e in algo.metrics.info[RECENT_EPISODES]]

    kw = dict(env="CartPole-v1", rollout_fragment_length=200, train_batch_size=200, seed=0)
    with PG(PGConfig(**kw)) as algo:
        for _ in range(3):
            algo.train()
        saved = returns(algo)
        algo.save(str(tmp_path / "ck"))
    assert 5 < len(saved) < 100, len(saved)  # short CartPole games: a partial window
    with PG(PGConfig(**{**kw, "seed": 1})) as fresh:
        fresh.restore(str(tmp_path / "ck"))
        assert returns(fresh) == saved
        after = fresh.train()
        window = returns(fresh)
    assert window[:len(saved)] == saved and len(window) == len(saved) + after["episodes_this_iter"]
    assert after["episodes_this_iter"] > 0
    assert after["episode_reward_mean"] == pytest.approx(float(np.mean(window)))
