"""The ``flowrl`` command."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from flowrl.cli import main


def test_train_writes_jsonl_and_checkpoint_and_restores(tmp_path, capsys):
    args = ["train", "ppo", "--env", "CartPole-v1", "--num-workers", "1", "--stop-iters", "2",
            "--run-dir", str(tmp_path), "--seed", "0", "--quiet"]
    assert main(args) == 0
    (run_dir,) = list(tmp_path.iterdir())
    assert run_dir.name.startswith("ppo-CartPole-v1-")
    lines = (run_dir / "result.jsonl").read_text().splitlines()
    results = [json.loads(line) for line in lines]
    assert [r["training_iteration"] for r in results] == [1, 2]
    assert results[-1]["timesteps_total"] > 0
    ckpt = run_dir / "checkpoint"
    assert (ckpt / "algorithm_state.pkl").exists()
    assert "stopped: training_iteration 2 >= 2" in capsys.readouterr().out

    again = tmp_path / "again"
    assert main(["train", "ppo", "--env", "CartPole-v1", "--num-workers", "1", "--stop-iters",
                 "3", "--restore", str(ckpt), "--run-dir", str(again), "--quiet"]) == 0
    (run2,) = list(again.iterdir())
    resumed = [json.loads(line) for line in (run2 / "result.jsonl").read_text().splitlines()]
    assert [r["training_iteration"] for r in resumed] == [3]


def test_bad_algo_and_env_exit_2(capsys):
    assert main(["train", "dqnx", "--env", "CartPole-v1"]) == 2
    err = capsys.readouterr().err
    assert "dqnx" in err and "ppo" in err
    assert main(["train", "ppo", "--env", "NoSuchEnv-v0"]) == 2
    assert "NoSuchEnv-v0" in capsys.readouterr().err
    assert main(["train", "ppo"]) == 2          # --env is required (argparse usage error)


def test_plan_writes_dot(tmp_path):
    out = tmp_path / "x.dot"
    assert main(["plan", "ppo", "-o", str(out)]) == 0
    text = out.read_text()
    assert text.startswith("digraph") and "ppo/train" in text


def test_plan_svg_or_clear_error(tmp_path, capsys):
    out = tmp_path / "x.svg"
    code = main(["plan", "pg", "--format", "svg", "-o", str(out)])
    if code == 0:
        assert out.read_text().lstrip().startswith("<?xml")
    else:
        assert code == 1 and "graphviz" in capsys.readouterr().err.lower()


def test_console_entry_point(tmp_path):
    out = subprocess.run([sys.executable, "-m", "flowrl.cli", "plan", "a2c"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("digraph") and "a2c/train" in out.stdout
