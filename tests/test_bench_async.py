"""The async benchmarks' tables (impala_throughput, apex_throughput, async_cartpole) on
synthetic run records, as ``harness.run_all`` saves them: nothing is run or timed."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import apex_throughput  # noqa: E402
import async_cartpole  # noqa: E402
import impala_throughput  # noqa: E402


def _run(system: str, valid: bool = True, **result) -> dict:
    return {"system": system, "valid": valid, "ok": valid, "result": result}


def _row(out: str, first: str, *, label: str = "") -> str:
    return next(ln for ln in out.splitlines() if ln.startswith(first) and label in ln)


def test_impala_ratios_flag_the_target_and_scaling_is_per_worker(capsys):
    runs = [_run("flowrl-w2", steps_per_s=s, learner_util=0.5) for s in (900, 1000, 1100)]
    runs += [_run("rllib-impala-w2", steps_per_s=500), _run("rllib-appo-w2", steps_per_s=800),
             _run("flowrl-w4", steps_per_s=1500), _run("rllib-impala-w4", steps_per_s=1000),
             _run("rllib-appo-w4", steps_per_s=9999, valid=False)]  # discarded: ignored
    impala_throughput.report(runs, ["flowrl", "rllib-impala", "rllib-appo"], [2, 4])
    out = capsys.readouterr().out
    assert "1,000 [900-1,100]" in _row(out, "flowrl-w2 ")
    assert "0.50 [0.50-0.50]" in _row(out, "flowrl-w2 ")
    ratios = _row(out.split("ratio of median")[1], "2 ")
    assert "2.00x ok" in ratios and "1.25x BELOW" in ratios
    assert "1.50x ok" in _row(out.split("ratio of median")[1], "4 ")
    # per worker: flowrl 1500/4 vs 1000/2 = 0.75; RLlib IMPALA 1000/4 vs 500/2 = 1.00
    scaling = _row(out.split("scaling:")[1], "4 ")
    assert "0.75x" in scaling and "1.00x" in scaling
    assert "rllib-appo-w4   | 0 runs" in out


def test_apex_scaling_against_the_smallest_worker_count(capsys):
    runs = [_run("apex-w2", steps_per_s=400, replayed_per_s=2000, trained_per_s=2000,
                 learner_util=0.1),
            _run("apex-w8", steps_per_s=1200, replayed_per_s=3000, trained_per_s=3000,
                 learner_util=0.4)]
    apex_throughput.report(runs, [2, 4, 8])
    out = capsys.readouterr().out
    assert "0.75x" in _row(out, "apex-w8") and "3,000 [3,000-3,000]" in _row(out, "apex-w8")
    assert "0 runs" in _row(out, "apex-w4")


def test_async_cartpole_keeps_missed_runs_out_of_the_time_to_target(capsys):
    runs = [_run("flowrl-appo", reached=True, train_s=t, from_start_s=t + 10, env_steps=1e5,
                 steps_per_s=1e5 / t, best_mean=460.0, startup_s=10.0) for t in (20.0, 30.0)]
    runs += [_run("flowrl-appo", reached=False, train_s=120.0, env_steps=3e5,
                  steps_per_s=2500.0, best_mean=300.0, startup_s=10.0),
             _run("rllib-appo", reached=True, train_s=50.0, from_start_s=80.0,
                  env_steps=2e5, steps_per_s=4000.0, best_mean=455.0, startup_s=30.0)]
    async_cartpole.report(runs, 450.0)
    out = capsys.readouterr().out
    reached = _row(out, "flowrl-appo ", label="| reached 2/3")
    assert "25.0 [20.0-30.0]" in reached and "35.0 [30.0-40.0]" in reached
    assert "2.29x" in reached  # rllib 80 s / flowrl 35 s from process start
    missed = _row(out, "flowrl-appo ", label="| not reached 1/3")
    assert "120.0 [120.0-120.0] (budget)" in missed and "300.0 [300.0-300.0]" in missed
    assert "reached 0/" not in out


@pytest.mark.parametrize("module,name,expected", [
    (impala_throughput, "flowrl-x2", "expected ENGINE-wN"),
    (apex_throughput, "apex-2", "expected apex-wN"),
    (async_cartpole, "rllib-impala", "choose from"),
])
def test_children_refuse_an_unknown_system(module, name, expected):
    with pytest.raises(SystemExit, match=expected):
        module.child(argparse.Namespace(child=name, seed=0))
