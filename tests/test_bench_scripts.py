"""The benchmark scripts' own reporting and ``run_all.sh``; no timing is asserted.

Each script's table is checked on synthetic run records (as ``harness.run_all``
saves them): runs that missed the target get their own row and never enter the
medians or ratios of the runs that reached it. ``run_all.sh`` must know every
script under ``benchmarks/`` and refuse an unknown name. ``models_throughput``'s
child functions also run, at tiny sizes, for every model (they must give rates
and ratios), and its plain loops are checked to do flowrl's work: same weights,
same sequences, same loss.
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import chaos  # noqa: E402
import compiled_graph  # noqa: E402
import ddppo_cartpole  # noqa: E402
import dqn_cartpole  # noqa: E402
import dqn_pong  # noqa: E402
import gpu_learner  # noqa: E402
import mujoco_offpolicy  # noqa: E402
import mujoco_ppo  # noqa: E402
import offline_reader  # noqa: E402
import pong_curve  # noqa: E402
import profile_impala_pong  # noqa: E402
import ray_overhead  # noqa: E402
import torch_threads  # noqa: E402
import tune_sweep  # noqa: E402
import replay  # noqa: E402
import sac_update_rate  # noqa: E402
import vector_envs  # noqa: E402


def _run(system: str, **result) -> dict:
    return {"system": system, "valid": True, "ok": True, "timed_out": False, "result": result}


def test_replay_reports_flowrl_over_rllib_on_sample_and_update(capsys):
    runs = [_run("flowrl", add_rows_per_s=1e6, sample_per_s=3000, update_per_s=4000,
                 sample_update_per_s=1500, fill_s=1.0, filled_rows=1000),
            _run("rllib", add_rows_per_s=2e4, sample_per_s=90, update_per_s=100,
                 sample_update_per_s=50, fill_s=4.0, filled_rows=1000),
            _run("rllib", add_rows_per_s=2e4, sample_per_s=90, update_per_s=100,
                 sample_update_per_s=70, fill_s=4.0, filled_rows=1000)]
    replay.report(runs, argparse.Namespace(batch=512, capacity=1000, add_batch=200, reps=5))
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("rllib"))
    assert "2 runs" in line and "25.0x" in line  # 1500 / median(50, 70)


def test_vector_envs_reports_async_over_sync_per_env_count(capsys):
    runs = [_run("sync-4", steps_per_s=400.0), _run("async-4", steps_per_s=600.0),
            _run("sync-8", steps_per_s=500.0), _run("async-8", steps_per_s=500.0)]
    vector_envs.report(runs, argparse.Namespace(num_envs=[4, 8], fragment=50))
    out = capsys.readouterr().out
    assert "async-4 / sync-4: 1.50x" in out and "async-8 / sync-8: 1.00x" in out


def test_dqn_keeps_runs_that_missed_out_of_the_reached_medians(capsys):
    runs = [_run("flowrl", reached=True, from_start_s=20.0, train_s=15.0, startup_s=5.0,
                 env_steps=10_000, steps_per_s=666.0, final_mean=460.0),
            _run("sb3", reached=True, from_start_s=40.0, train_s=35.0, startup_s=5.0,
                 env_steps=30_000, steps_per_s=857.0, final_mean=455.0),
            _run("sb3", reached=False, from_start_s=None, train_s=110.0, startup_s=5.0,
                 env_steps=90_000, steps_per_s=818.0, final_mean=120.0)]
    dqn_cartpole.report(runs, 450.0)
    lines = capsys.readouterr().out.splitlines()
    reached = next(ln for ln in lines if ln.startswith("sb3") and "reached 1/2" in ln)
    missed = next(ln for ln in lines if ln.startswith("sb3") and "not reached 1/2" in ln)
    assert "40.0 [40.0-40.0]" in reached and "2.00x" in reached and "2.33x" in reached
    assert "110.0 [110.0-110.0] (budget)" in missed and "2.00x" not in missed


def test_ddppo_ratios_use_reached_runs_for_time_and_all_runs_for_speed(capsys):
    runs = [_run("ddppo", reached=True, train_s=30.0, from_start_s=40.0, startup_s=10.0,
                 env_steps=60_000, steps_per_s=2000.0, final_mean=460.0),
            _run("ppo", reached=True, train_s=60.0, from_start_s=70.0, startup_s=10.0,
                 env_steps=60_000, steps_per_s=1000.0, final_mean=455.0),
            _run("ppo", reached=False, train_s=600.0, from_start_s=None, startup_s=10.0,
                 env_steps=600_000, steps_per_s=1000.0, final_mean=200.0)]
    ddppo_cartpole.report(runs, 450.0)
    out = capsys.readouterr().out
    assert "env steps/s (all runs): 2.00x" in out
    assert f"to 450 (runs that reached it): {30 / 60:.2f}x" in out


def test_chaos_counts_hangs_and_gives_the_slowdown_per_algorithm(capsys):
    base = dict(startup_s=5.0, from_start_s=30.0, final_mean=460.0, lost=0)
    runs = [_run("ppo", reached=True, train_s=20.0, env_steps=50_000, kills=0, restarts=0,
                 hung=0, **base),
            _run("ppo-kills", reached=True, train_s=25.0, env_steps=55_000, kills=2,
                 restarts=2, hung=0, **base),
            _run("ppo-kills", reached=False, train_s=45.0, env_steps=70_000, kills=4,
                 restarts=3, hung=1, **{**base, "from_start_s": None}),
            {"system": "impala-kills", "valid": False, "ok": False, "timed_out": True,
             "result": None}]
    chaos.report(runs, argparse.Namespace(workers=3, target=450.0, kill_every=10.0))
    out = capsys.readouterr().out
    assert "ppo: slowdown (median training time to 450, kills / no kills): 1.25x" in out
    assert "ppo: slowdown" in out and "hangs 1 (target 0)" in out
    kills_row = next(ln for ln in out.splitlines()
                     if ln.startswith("ppo-kills") and "reached 1/2" in ln
                     and "not" not in ln)
    assert "| 2 " in kills_row and "| 2 " in kills_row  # this row's totals: kills, restarts
    missed = next(ln for ln in out.splitlines() if "not reached 1/2" in ln)
    assert "| 4 " in missed and "| 3 " in missed and missed.rstrip().endswith("1")
    assert any(ln.startswith("impala-kills") and "no result" in ln for ln in out.splitlines())
    assert "impala: slowdown" in out and "hangs 1" in out.split("impala: slowdown")[1]
    assert "ppo-kills: per run, median [min-max]: kills 3 [2-4], restarts 2.5 [2-3]" in out


def test_mujoco_ppo_compares_training_time_over_all_runs_and_times_the_target_on_reached_ones(
        capsys):
    def run(system, seed, score, train_s, to_target_s):
        curve = [[100_000 * i, train_s * i / 10, score * i / 10, 0.0] for i in range(1, 11)]
        return {**_run(system, reached=to_target_s is not None, final_score=score,
                       best_score=score, train_s=train_s, from_start_s=train_s + 5,
                       startup_s=5.0, steps_per_s=1e6 / train_s, env_steps=1_000_000,
                       to_target_s=to_target_s, to_target_from_start_s=None, curve=curve),
                "seed": seed}
    runs = [run("flowrl", 0, 2300.0, 600.0, 550.0), run("flowrl", 1, 1500.0, 800.0, None),
            run("sb3", 0, 2250.0, 1400.0, 1350.0)]
    mujoco_ppo.report(runs, "Hopper-v5", 2231.0)
    out = capsys.readouterr().out
    assert "curve flowrl seed 0: 100k: 230 @ 60s; 200k: 460 @ 120s" in out
    summary = out.split("CleanRL's published 1M-step score 2231")[1].splitlines()
    reached = next(ln for ln in summary if ln.startswith("flowrl") and "reached 1/2" in ln)
    missed = next(ln for ln in summary if ln.startswith("flowrl") and "not reached 1/2" in ln)
    assert "2.00x" in reached and "2.00x" in missed  # 1400 / median(600, 800)
    assert "550 [550-550]" in reached and "550" not in missed


def test_mujoco_ppo_prints_a_progress_line_each_time_a_run_passes_100k_steps(capsys):
    tracker = mujoco_ppo.Tracker(target=2231.0)
    tracker.start()
    for steps in range(2048, 430_000, 2048):  # CleanRL's 2048-step iterations
        tracker.add_returns([steps / 1000])
        tracker.after_iteration(steps)
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split("] ")[1].split(" env steps")[0] for ln in lines] == [
        "0.10M", "0.20M", "0.30M", "0.40M"]  # the first iteration at or past each 100k
    assert "0.10M env steps, 49 episodes, score 51" in lines[0]


def test_mujoco_offpolicy_reports_scores_speed_and_the_ratio_to_sb3(capsys):
    def run(system, steps_per_s, score):
        return {"seed": 0, **_run(system, complete=True, env_steps=1000, train_s=1000 / steps_per_s,
                    steps_per_s=steps_per_s, final_score=score, score_300k=score / 2,
                    sittings=2, curve=[[500, 5.0, score / 2], [1000, 10.0, score]])}
    runs = [run("flowrl", 130.0, 2400.0), run("flowrl", 150.0, 2200.0),
            run("sb3", 100.0, 2300.0)]
    mujoco_offpolicy.report(runs, {"algo": "sac", "env": "Hopper-v5"})
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if ln.startswith("flowrl |"))
    assert "1.40x" in line and "2,300" in line  # median 140 / 100; median score
    assert "curve sb3 seed 0 (complete, 2 sittings): 0.5k: 1,150 @ 5s; 1k: 2,300 @ 10s" in out
    assert "CleanRL's 1M-step mean 2310" in out


def test_mujoco_offpolicy_run_state_adds_up_over_sittings(tmp_path):
    first = mujoco_offpolicy.RunState(tmp_path / "run")
    first.add_returns([10.0, 20.0])
    first.advance(600, 6.0, every=500)
    first.save({"steps": 600, "train_s": 6.0})
    again = mujoco_offpolicy.RunState(tmp_path / "run")
    assert again.resumed and again.env_steps == 600 and again.score() == 15.0
    again.add_returns([30.0])
    again.advance(1000, 4.0, every=500)
    again.save({"steps": 400, "train_s": 4.0})
    result = again.result(timesteps=1000)
    assert result["complete"] and result["train_s"] == 10.0 and result["sittings"] == 2
    assert [c[0] for c in result["curve"]] == [600, 1000] and result["final_score"] == 20.0


def test_sac_update_rate_gives_flowrls_ratio_to_the_plain_loop(capsys):
    runs = [_run("flowrl", updates_per_s=90.0), _run("torch", updates_per_s=100.0)]
    sac_update_rate.report(runs, {"batch": 256})
    line = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("flowrl"))
    assert "0.90x" in line


def test_sac_update_rate_children_run_the_same_update_at_tiny_sizes():
    args = argparse.Namespace(seed=0, rows=300, batch=32, warmup=1, updates=2)
    for child in (sac_update_rate.child_flowrl, sac_update_rate.child_torch):
        result = child(args)
        assert result["updates"] == 2 and result["updates_per_s"] > 0


def test_tune_sweep_keeps_sweeps_that_missed_450_out_of_the_time_to_it(capsys):
    runs = [_run("flowrl-tune", reached=True, to_target_s=100.0, from_start_s=110.0,
                 sweep_s=300.0, max_running=2, trials_finished=8, trials_failed=0,
                 best_reward=470.0),
            _run("flowrl-tune", reached=True, to_target_s=140.0, from_start_s=150.0,
                 sweep_s=320.0, max_running=2, trials_finished=8, trials_failed=0,
                 best_reward=460.0),
            _run("flowrl-tune", reached=False, to_target_s=None, from_start_s=None,
                 sweep_s=400.0, max_running=2, trials_finished=8, trials_failed=0,
                 best_reward=300.0)]
    tune_sweep.report(runs)
    lines = capsys.readouterr().out.splitlines()
    reached = next(ln for ln in lines if "reached 2/3" in ln and "not" not in ln)
    missed = next(ln for ln in lines if "not reached 1/3" in ln)
    assert "120.0 [100.0-140.0]" in reached and "310.0 [300.0-320.0]" in reached
    assert "400.0" in missed and "120.0" not in missed


def test_torch_threads_reports_two_threads_over_one_per_algorithm(capsys):
    runs = [_run("ppo-t1", agent_steps_per_s=400.0), _run("ppo-t2", agent_steps_per_s=500.0),
            _run("ppo-t2", agent_steps_per_s=600.0), _run("appo-t1", agent_steps_per_s=800.0)]
    torch_threads.report(runs, ["appo", "ppo"])
    out = capsys.readouterr().out.splitlines()
    ppo = next(ln for ln in out if ln.startswith("ppo"))
    appo = next(ln for ln in out if ln.startswith("appo"))
    assert "1.38x" in ppo        # median(500, 600) / 400
    assert appo.rstrip().endswith("-")   # no 2-thread runs: no ratio


def test_dqn_pong_reports_score_speed_and_replay_memory_per_system(capsys):
    runs = [_run("flowrl", final_score=-5.0, steps_per_s=200.0, bytes_per_transition=14_182,
                 gb_per_million=14.182, peak_rss_gb=3.0, from_start_s=3000.0),
            _run("sb3", final_score=-9.0, steps_per_s=100.0, bytes_per_transition=28_240,
                 gb_per_million=28.24, peak_rss_gb=4.0, from_start_s=6000.0)]
    dqn_pong.report(runs, 2_000_000)
    out = capsys.readouterr().out
    sb3 = next(ln for ln in out.splitlines() if ln.startswith("sb3"))
    assert "score at 2M frames" in out
    assert "-9.0" in sb3 and "0.50x" in sb3 and "28,240" in sb3 and "28.2" in sb3
    assert "100.0" in sb3   # minutes from start


def test_dqn_pong_runs_continue_from_their_newest_complete_checkpoint(tmp_path):
    import os
    import signal
    args = argparse.Namespace(resume_dir=str(tmp_path), child="sb3", seed=1,
                              checkpoint_every=3600.0)
    previous = signal.getsignal(signal.SIGTERM)
    try:
        scores = dqn_pong.Scores(30.0)
        run = dqn_pong.Resume(args, scores)
        assert not run.due() and run.restore(lambda d: pytest.fail("nothing to restore")) == 0
        scores.add([-21.0, -20.0])
        run.save(100, lambda d: (d / "model").write_text("100"))
        scores.add([-19.0])
        scores.point(200)
        run.save(200, lambda d: (d / "model").write_text("200"))
        trained = run.train_s
        run.save(200, lambda d: pytest.fail("saved twice at the same steps"))

        def fails(d):
            (d / "model").write_text("half")
            raise OSError("disk full")
        with pytest.raises(OSError):
            run.save(300, fails)   # the checkpoint at 200 stays in charge
        again = dqn_pong.Scores(30.0)
        resumed = dqn_pong.Resume(args, again)
        loaded = []
        assert resumed.restore(lambda d: loaded.append((d / "model").read_text())) == 200
        assert loaded == ["200"] and list(again.window) == [-21.0, -20.0, -19.0]
        assert again.curve == scores.curve and again.seconds() >= scores.curve[-1][0]
        assert [r[0] for r in resumed.resumed] == [200]
        assert resumed.trained_s() >= trained > 0 and run.trained_s() > trained
        # SIGTERM asks for a checkpoint now, and the run stops after it
        os.kill(os.getpid(), signal.SIGTERM)
        assert resumed.due()
        with pytest.raises(SystemExit, match="stopped by SIGTERM at 400 agent steps"):
            resumed.save(400, lambda d: (d / "model").write_text("400"))
        run_dir = tmp_path / "sb3-seed1"
        assert sorted(p.name for p in run_dir.iterdir()) == ["at-000000400", "latest"]
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_pong_curve_joins_sittings_at_the_restored_steps_and_counts_full_windows(tmp_path):
    """A later sitting restored from a checkpoint at 300 steps: the earlier sitting's
    rows past 300 (trained again) leave the curve; a mark counts only where the
    100-game window is full (a sitting whose checkpoint carried no window starts an
    empty one); the newest checkpoint is the newest sitting's."""
    import json

    def sitting(name, rows, checkpoints=(), window=None):
        run = tmp_path / name / "ppo-ALE_Pong-v5-x"
        run.mkdir(parents=True)
        if window is not None:
            (tmp_path / name / "restored.json").write_text(json.dumps({"window_games": window}))
        before = (rows[0][0] - 100) // 100 * 33  # games when the sitting started
        with open(run / "result.jsonl", "w") as f:
            for steps, score, games in rows:
                f.write(json.dumps({"timesteps_total": steps, "timesteps_this_iter": 100,
                                    "episode_reward_mean": score, "episodes_total": games,
                                    "episodes_this_iter": games - before,
                                    "time_total_s": steps / 10}) + "\n")
                before = games
        for c in checkpoints:
            (run / "checkpoint" / c).mkdir(parents=True)

    sitting("sitting-000", [(100, None, 0), (200, 1.0, 50), (300, -3.0, 99),
                            (400, 19.0, 120), (500, 19.5, 140)], ["checkpoint_000003"])
    sitting("sitting-001", [(400, -2.0, 101), (500, 0.5, 130), (600, 18.0, 160)],  # from 99
            ["checkpoint_000004", "checkpoint_000006"], window=90)
    rows, info = pong_curve.curve(str(tmp_path))
    assert [r[0] for r in rows] == [100, 200, 300, 400, 500, 600]
    assert [r[1] for r in rows][3:] == [-2.0, 0.5, 18.0]
    assert [r[4] for r in rows] == [0, 50, 99, 92, 100, 100]  # 90 restored, then new games
    assert [(i["from_steps"], i["to_steps"]) for i in info] == [(0, 500), (300, 600)]
    hit = pong_curve.marks(rows)  # 1.0 at 200 steps came from 50 games only
    assert hit["0"] == {"steps": 500, "train_s": 50.0}
    assert hit["18"] == {"steps": 600, "train_s": 60.0}
    (tmp_path / "sitting-001" / "restored.json").write_text('{"window_games": 0}')
    rows, _ = pong_curve.curve(str(tmp_path))  # an empty window: 61 games at the end
    assert [r[4] for r in rows][3:] == [2, 31, 61] and pong_curve.marks(rows)["0"] is None
    assert pong_curve.newest_checkpoint(str(tmp_path)).endswith(
        "sitting-001/ppo-ALE_Pong-v5-x/checkpoint/checkpoint_000006")
    assert pong_curve.at_steps(rows)[:2] == [None, None]  # the curve ends before 0.5M


def test_gpu_learner_checks_pass_on_two_cpu_towers(monkeypatch):
    pytest.importorskip("ale_py")
    monkeypatch.setattr(gpu_learner, "CHECKS", [])
    gpu_learner.check_training("ppo", 1, 0, cuda=False, num_gpus=2, num_workers=1,
                               num_envs_per_worker=2, rollout_fragment_length=25,
                               train_batch_size=50, sgd_minibatch_size=25, num_sgd_iter=1)
    status = {c["check"]: c["status"] for c in gpu_learner.CHECKS}
    assert status.pop("ppo: the learner's tower is on CUDA") == "skipped"
    assert len(status) == 3 and set(status.values()) == {"ok"}, gpu_learner.CHECKS


def test_profile_impala_pong_gives_each_part_its_share_of_a_step(capsys):
    parts = dict(ale_us=400.0, preprocess_us=150.0, forward_us=300.0, sampler_us=100.0,
                 serialize_us=30.0, concat_us=20.0)
    runs = [_run("flowrl-impala", **parts, step_us=1000.0, other_share=0.15, learn_us=700.0,
                 steps_per_s=1000.0)]
    profile_impala_pong.report(runs)
    out = capsys.readouterr().out
    assert next(ln for ln in out.splitlines() if ln.startswith("ale")).rstrip().endswith("40%")
    assert next(ln for ln in out.splitlines() if ln.startswith("forward")).rstrip().endswith("30%")
    assert "15.0 [15.0-15.0] % of a step" in out


def test_run_all_knows_every_benchmark_script():
    listed = subprocess.run(["bash", str(ROOT / "benchmarks" / "run_all.sh"), "--list"],
                            capture_output=True, text=True, check=True).stdout.split()
    stems = {name.split("-")[0] for name in listed}
    # harness and training serve the scripts; gpu_learner checks the GPU learner path
    # on a machine with a GPU, cql_probe a checkpoint of offline_cql's: no benchmark
    scripts = {p.stem for p in (ROOT / "benchmarks").glob("*.py")} - {
        "harness", "training", "gpu_learner", "cql_probe"}
    assert scripts <= stems, f"run_all.sh misses {sorted(scripts - stems)}"


@pytest.mark.parametrize("argv", [["nosuch"], ["--only", "replay,nosuch"]])
def test_run_all_refuses_an_unknown_benchmark(argv):
    proc = subprocess.run(["bash", str(ROOT / "benchmarks" / "run_all.sh"), *argv],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2
    assert "unknown benchmark 'nosuch'; choose from: startup" in proc.stderr


def test_ray_overhead_paired_measures_each_system_once_in_every_position():
    import doctest
    assert doctest.testmod(ray_overhead).failed == 0   # take_defaults
    # --paired --quick keeps the quick cap; a given --reps is kept
    args = ray_overhead.argparse.Namespace(paired=True, child=None, items=300, reps=None)
    ray_overhead.take_defaults(args)
    assert (args.items, args.reps) == (300, len(ray_overhead.SYSTEMS))


def test_ray_overhead_paired_compares_flowrl_with_the_hand_loop_it_trails_most(capsys):
    def paired(wait, rr, nret):
        result = {}
        for lay in ray_overhead.LAYOUTS:
            for mode in ray_overhead.MODES:
                cell = f"{mode}_{lay}"
                result.update({f"flowrl:{cell}": 1000.0, f"hand-wait:{cell}": 1000.0 / wait,
                               f"flowrl/hand-wait:{cell}": wait, f"flowrl/hand-rr:{cell}": rr,
                               f"flowrl/hand-nret:{cell}": nret, f"flowrl/hand-one:{cell}": 0.97,
                               f"flowrl/ray.util.iter:{cell}": 1.2,
                               f"latency_ms:flowrl:{cell}": 1.5,
                               f"latency_ms:hand-nret:{cell}": 1.5 * nret,
                               f"cpu_us:flowrl:{cell}": 800.0 * wait,
                               f"driver_us:flowrl:{cell}": 400.0,
                               f"cpu:flowrl/hand-wait:{cell}": 1 / wait,
                               f"cpu:flowrl/hand-rr:{cell}": rr,
                               f"hand-asyncio/hand-wait:{cell}": 0.95,
                               f"flowrl/hand-asyncio:{cell}": wait / 0.95})
        return _run(ray_overhead.PAIRED, **result)
    runs = [paired(1.02, 0.90, 1.10), paired(1.00, 0.96, 1.30), paired(0.98, 0.99, 1.20),
            {"system": ray_overhead.PAIRED, "valid": False, "ok": True, "result": None}]
    ray_overhead.report_paired(runs)
    out = capsys.readouterr().out
    assert "over 3 runs" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("async_skew"))
    assert "1.00x [0.98x-1.02x]" in row and "1.20x [1.10x-1.30x]" in row
    assert "0.97x [0.97x-0.97x]" in row
    assert row.rstrip().endswith("hand-rr 0.96x")
    # hand-asyncio is a reference, not a hand loop flowrl is held to
    assert "hand-asyncio" not in row.split("|")[-1]
    # the event loop's share: the hand loop entering asyncio per fetch, flowrl beside it
    loop = [ln for ln in out.splitlines() if ln.startswith("async_skew")][1]
    cells = [c.strip() for c in loop.split("|")]
    assert cells[1:] == ["0.95x [0.95x-0.95x]", "1.05x [1.03x-1.07x]"]
    # the latency table: one column per system, "-" where a system has no figure
    lat = [ln for ln in out.splitlines() if ln.startswith("async_skew")][2]
    cells = [c.strip() for c in lat.split("|")]
    assert cells[1 + ray_overhead.SYSTEMS.index("flowrl")] == "1.50 [1.50-1.50]"
    assert cells[1 + ray_overhead.SYSTEMS.index("hand-nret")] == "1.80 [1.65-1.95]"
    assert cells[1 + ray_overhead.SYSTEMS.index("hand-one")] == "-"
    # the CPU table: flowrl's session and driver CPU per item, its CPU ratio per hand loop
    cpu = [ln for ln in out.splitlines() if ln.startswith("async_skew")][3]
    cells = [c.strip() for c in cpu.split("|")]
    assert cells[1:3] == ["800 [784-816]", "400 [400-400]"]
    assert cells[3:] == ["1.00x [0.98x-1.02x]", "-", "0.96x [0.90x-0.99x]", "-"]


def test_ray_overhead_table_shows_hand_asyncio_but_never_counts_it_a_hand_loop(capsys):
    def run(system, rate):
        return _run(system, **{f"{m}_{lay}": rate for lay in ray_overhead.LAYOUTS
                               for m in ray_overhead.MODES})
    # hand-asyncio is the fastest here, yet "best hand" is the best of the hand loops
    runs = [run("flowrl", 900.0), run("hand-wait", 1000.0), run("hand-one", 800.0),
            run("hand-asyncio", 1200.0), run("ray.util.iter", 750.0)]
    ray_overhead.report(runs)
    out = capsys.readouterr().out
    row = next(ln for ln in out.splitlines() if ln.startswith("sync_skew"))
    cells = [c.strip() for c in row.split("|")]
    column = {s: cells[1 + i] for i, s in enumerate(ray_overhead.SYSTEMS)}
    assert column["hand-asyncio"].startswith("1,200") and column["hand-rr"] == "-"
    assert cells[-3:] == ["hand-wait", "0.90x", "1.20x"]


def test_compiled_graph_reports_each_system_against_ordinary_actor_calls(capsys):
    def paired(compiled):
        result = {}
        for lay in compiled_graph.LAYOUTS:
            result.update({f"actor-calls:{lay}": 1000.0, f"compiled:{lay}": 1000.0 * compiled,
                           f"compiled/actor-calls:{lay}": compiled,
                           f"flowrl/actor-calls:{lay}": 1.0, f"compile_s:{lay}": 0.2})
        return _run(compiled_graph.PAIRED, **result)
    runs = [paired(3.0), paired(2.0), {"system": compiled_graph.PAIRED, "valid": False,
                                       "ok": False, "result": None}]
    compiled_graph.report(runs)
    out = capsys.readouterr().out
    assert "over 2 runs" in out
    row = next(ln for ln in out.splitlines() if ln.startswith("1cpu"))
    cells = [c.strip() for c in row.split("|")]
    assert cells[1] == "1,000 [1,000-1,000]"                      # actor-calls items/s
    assert cells[3] == "2,500 [2,000-3,000]"                      # compiled items/s
    assert "2.50x [2.00x-3.00x]" in cells and "1.00x [1.00x-1.00x]" in cells
    assert cells[-1] == "0.20 [0.20-0.20]"
    assert cells.count("-") == 5  # no figures given: flowrl items/s, compiled-2, +graph


def test_impala_fairness_reports_worker_shares_lag_and_the_bottleneck_per_run(capsys):
    import impala_fairness

    def run(seed, steps, lag, queue_mean):
        total = sum(steps)
        figures = {f"steps_w{i}": n for i, n in enumerate(steps, 1)}
        figures.update({f"share_w{i}": n / total for i, n in enumerate(steps, 1)})
        return {**_run("flowrl-w3", **figures, min_share=min(steps) / total,
                       # as saved: an infinite ratio is null in the JSON
                       max_min_ratio=max(steps) / min(steps) if min(steps) else None,
                       lag_mean=lag[0], lag_p50=lag[1], lag_p95=lag[2], lag_max=lag[3],
                       steps_per_s=1000.0, trained_per_s=990.0, learner_util=0.97,
                       queue_mean=queue_mean, queue_size=16, flowrl_path="/old/flowrl",
                       flowrl_commit="ee894dc"), "seed": seed}
    runs = [run(0, [6000, 3000, 3000], (10.5, 10, 17, 23), 15.2),
            run(1, [12000, 0, 0], (3.0, 2, 8, 9), 4.0),
            run(2, [4000, 4000, 2000], (20.0, 20, 30, 40), 12.0),
            {"system": "flowrl-w3", "seed": 3, "valid": False, "ok": False, "result": None}]
    impala_fairness.report(runs, {"workers": 3, "updates": 200, "label": "before",
                                  "sgd_iter": 8})
    out = capsys.readouterr().out
    assert "over 200 learner updates" in out and "(8 per train batch)" in out
    assert "label before; flowrl imported from: /old/flowrl (commit ee894dc)" in out
    rows = [[c.strip() for c in ln.split("|")] for ln in out.splitlines()
            if ln.startswith("flowrl-w3")]
    per_run = {cells[1]: cells[2:] for cells in rows if cells[2] in ("ok", "no result")}
    assert per_run["0"] == ["ok", "6,000", "3,000", "3,000", "2.00", "10.5", "10", "17",
                            "23", "1,000", "0.97", "15.2/16", "learner"]
    assert per_run["1"][1:5] == ["12,000", "0", "0", "inf"]     # a worker got nothing
    assert per_run["1"][-1] == "samplers"                        # its queue stayed short
    assert per_run["3"][:2] == ["no result", "-"]
    cells = next(cells for cells in rows if cells[1].endswith("runs"))
    assert cells[1] == "3 runs"
    assert cells[2] == "2.00 [2.00-2.00]"   # max/min: the inf run is left out
    assert cells[3] == "0.20 [0.00-0.25]"   # min share: all three runs
    assert cells[4] == "10.5 [3.0-20.0]" and cells[6] == "23 [9-40]"


def test_impala_fairness_probe_tags_rows_and_counts_each_fragment_once_with_its_lag():
    import types

    import impala_fairness as fb
    import numpy as np

    from flowrl.batch import DEFAULT_POLICY_ID
    from flowrl.workers import RolloutWorker
    probe = fb.probe_policy_class()

    def worker(index):
        return RolloutWorker(env="CartPole-v1", policy=probe, num_envs=2,
                             rollout_fragment_length=10, worker_index=index, seed=0,
                             policy_config={"hidden_sizes": (8,)})
    learner, sampler = worker(0), worker(2)
    assert fb.tag_workers(types.SimpleNamespace(
        foreach_worker=lambda fn: [fn(w) for w in (learner, sampler)])) == [0, 2]
    sampler.set_weights(learner.get_weights())
    first = sampler.sample()
    assert set(first[fb.VERSION_COL]) == {0} and set(first[fb.WORKER_COL]) == {2}
    learner.learn_on_batch(first)
    learner.learn_on_batch(first)  # a second pass over the same batch
    sampler.set_weights(learner.get_weights())
    second = sampler.sample()
    learner.learn_on_batch(second)
    policy = learner.get_policy()
    assert policy.version == 3 and sampler.get_policy().behaviour_version == 2
    assert policy.records == [(0, {2: 20}, {0: 20}), (1, {}, {1: 20}), (2, {2: 20}, {0: 20})]
    figures = fb.window_figures(policy.records, 1, 3, workers=2)
    assert (figures["steps_w1"], figures["steps_w2"], figures["updates"]) == (0, 20, 2)
    assert figures["lag_mean"] == 0.5 and figures["max_min_ratio"] == math.inf
    assert np.all(first[fb.FRAGMENT_COL] == 1) and np.all(second[fb.FRAGMENT_COL] == 2)
    weights = learner.get_weights()[DEFAULT_POLICY_ID]
    del weights[fb.VERSION_KEY]
    with pytest.raises(RuntimeError, match="weights without '__probe_version__'"):
        sampler.get_policy().set_weights(weights)


def test_models_throughput_measures_both_systems_of_every_model_and_reports_ratios(
        capsys, one_torch_thread):
    import models_throughput as mt
    sizes = mt.setups(quick=True, lstm_cell=16, num_envs=2, fragment=16)
    runs = []
    for model in mt.MODELS:
        for impl in mt.IMPLS:
            result = mt.measure(f"{impl}-{model}", sizes[model], seed=0, reps=1)
            assert result["sample_steps_per_s"] > 0 and result["learn_rows_per_s"] > 0
            assert result["batch_rows"] == 32
            runs.append(_run(f"{impl}-{model}", **result))
    ratios = mt.report(runs, mt.MODELS, sizes)
    out = capsys.readouterr().out
    for model in mt.MODELS:
        assert all(0 < r < math.inf for r in ratios[model].values())
        row = next(ln for ln in out.splitlines() if ln.startswith(f"{model} "))
        assert row.count("x ok") + row.count("x BELOW") == 2
        assert next(ln for ln in out.splitlines() if ln.startswith(f"flowrl-{model} "))


def test_models_throughput_flags_ratios_below_target_and_missing_systems(capsys):
    import models_throughput as mt
    runs = [_run("raw-mlp", sample_steps_per_s=1000.0, learn_rows_per_s=2000.0),
            _run("flowrl-mlp", sample_steps_per_s=950.0, learn_rows_per_s=1800.0),
            _run("flowrl-mlp", sample_steps_per_s=850.0, learn_rows_per_s=1800.0),
            _run("raw-cnn", sample_steps_per_s=100.0, learn_rows_per_s=50.0)]
    ratios = mt.report(runs, ["mlp", "cnn"], mt.setups())
    out = capsys.readouterr().out
    assert ratios["mlp"] == {"sample_steps_per_s": 0.9, "learn_rows_per_s": 0.9}
    row = next(ln for ln in out.splitlines() if ln.startswith("mlp "))
    assert "0.90x ok" in row and "0.90x BELOW" in row  # targets 0.9 and 0.95
    assert "900 [850-950]" in next(ln for ln in out.splitlines() if ln.startswith("flowrl-mlp"))
    assert "0 runs" in next(ln for ln in out.splitlines() if ln.startswith("flowrl-cnn"))
    assert math.isnan(ratios["cnn"]["sample_steps_per_s"])


def test_models_throughput_raw_learner_trains_on_what_flowrl_trains_on(one_torch_thread):
    """Equal work: the raw loop's model starts from the policy's weights, its padded
    sequences are flowrl's, and its PPO loss on them is flowrl's."""
    import models_throughput as mt
    import numpy as np
    import torch
    sizes = mt.setups(quick=True, lstm_cell=16, num_envs=3, fragment=40)
    for model in ("mlp", "lstm"):
        setup = sizes[model]
        worker = mt.flowrl_worker(setup, seed=1)
        batch = worker.sample()
        policy = worker.get_policy()
        raw = mt.RawLearner(setup, policy.observation_space, policy.action_space, seed=1)
        for a, b in zip(raw.model.state_dict().values(), policy.model.state_dict().values()):
            assert torch.equal(a, b)
        cols = mt.raw_columns(batch, setup)
        train = policy._train_tensors(batch)
        with torch.no_grad():
            expected = float(policy._loss(train)[0])
            if setup.recurrent:
                _, lens, padded = mt.cut_and_pad(cols, setup.num_envs, setup.fragment, 20)
                assert np.array_equal(lens, train["seq_lens"].numpy())
                assert np.array_equal(padded["obs"], train["obs"].numpy())
                assert np.array_equal(padded["h"], train["state_in_0"].numpy())
                data = {k: torch.as_tensor(v) for k, v in padded.items()}
                flat = {k: v.reshape(-1, *v.shape[2:]) for k, v in data.items()
                        if k not in ("h", "c")}
                logits, _ = raw.model({"obs": flat["obs"], "obs_flat": flat["obs"]},
                                      [data["h"], data["c"]], torch.as_tensor(lens))
                got = raw.loss(logits, raw.model.value_function(), flat, flat["mask"])
            else:
                data = {k: torch.as_tensor(v) for k, v in cols.items()}
                logits, _ = raw.model({"obs": data["obs"], "obs_flat": data["obs"]}, [], None)
                got = raw.loss(logits, raw.model.value_function(), data)
        assert float(got) == pytest.approx(expected, rel=1e-5)
        worker.stop()


def test_evaluation_overhead_compares_the_same_ppo_with_and_without_parallel_evaluation():
    import evaluation_overhead as bench
    plain, evaluated = (bench.config_for(s, 0, quick=True) for s in bench.SYSTEMS)
    assert plain.evaluation_interval is None and evaluated.evaluation_interval == 1
    assert evaluated.evaluation_parallel_to_training and evaluated.evaluation_num_workers == 1
    same = {k: getattr(plain, k) for k in ("num_workers", "train_batch_size", "lr", "backend")}
    assert same == {k: getattr(evaluated, k) for k in same}


def _loc_flagged(self):
    """Doc."""
    if not self.config.enable_env_runner_and_connector_v2:
        return self._old_api_stack()  # never taken with the defaults
    # the default path
    result = self._helper(1,
                          2)
    return result


class _LocBase:
    def training_step(self):
        return self._helper(0)

    def _helper(self, x):
        y = x + 1
        return y

    def _unused(self):
        return 0


class _LocChild(_LocBase):
    def training_step(self):
        if self.config.enable_rl_module_and_learner:
            return super().training_step()
        self._unused()
        return None


def test_loc_counts_logical_lines_of_the_default_path_without_docstring_or_comments():
    import loc
    # `if` header, the assignment wrapped over two lines, the return: 3 logical lines
    assert loc.body_lines(_loc_flagged) == (3, 4)
    assert loc.body_lines(_LocBase._helper) == (2, 2)


def test_loc_follows_self_and_super_calls_to_the_algorithms_own_functions():
    import loc
    own = lambda fn: fn.__module__ == __name__  # noqa: E731
    fns = loc.closure(_LocChild.training_step, _LocChild, own)
    # super() resolves past the defining class; _unused is called only on the path
    # the default flags do not take, so it is not reached
    assert fns == [_LocChild.training_step, _LocBase.training_step, _LocBase._helper]
    row = loc.count(_LocChild.training_step, _LocChild, own)
    assert [f["logical"] for f in row["functions"]] == [2, 1, 2] and row["logical"] == 5


def test_loc_counts_every_flowrl_algorithm_with_the_helpers_of_its_module():
    import loc
    rows = {algo: loc.flowrl_row(algo) for algo in loc.RLLIB}
    assert set(rows) == {"pg", "a2c", "a3c", "ppo", "appo", "impala", "dqn", "apex", "ddppo"}
    assert all(r["logical"] > 0 and r["physical"] >= r["logical"] for r in rows.values())
    names = [f["name"] for f in rows["impala"]["functions"]]
    assert names[0].endswith("IMPALA.execution_plan")
    assert any(n.endswith("impala.async_learner_plan") for n in names)
    # library code (operators, the base class) is not the algorithm's own
    assert not any(".ops." in n or ".base." in n for r in rows.values()
                   for n in (f["name"] for f in r["functions"]))


def test_offline_reader_reports_flowrl_over_plain_per_format(capsys):
    runs = [_run("flowrl-parquet", rows_per_s=900.0), _run("plain-parquet", rows_per_s=1000.0),
            _run("flowrl-json", rows_per_s=300.0), _run("plain-json", rows_per_s=200.0)]
    offline_reader.report(runs, argparse.Namespace(rows=1000, batch=100, obs_shape=[4]))
    out = capsys.readouterr().out
    assert "flowrl-parquet / plain-parquet: 0.90x" in out and "flowrl-json / plain-json: 1.50x" in out


@pytest.mark.parametrize("fmt", ["parquet", "json"])
def test_offline_reader_plain_loops_read_every_row_flowrl_wrote(tmp_path, fmt):
    offline_reader.write_dataset(str(tmp_path), fmt, 1000, 64, (2, 3), seed=0)
    pieces = (offline_reader.plain_parquet_pieces if fmt == "parquet"
              else offline_reader.plain_json_pieces)(str(tmp_path))
    assert offline_reader.plain_pass(pieces, 300) == 1000
    parts = list((offline_reader.plain_parquet_pieces if fmt == "parquet"
                  else offline_reader.plain_json_pieces)(str(tmp_path)))
    assert parts[0]["obs"].dtype.name == "uint8" and parts[0]["obs"].shape[1:] == (2, 3)


def test_offline_cartpole_reports_the_three_targets_and_marwil_over_bc(capsys):
    import offline_cartpole as bench
    runs = [{"system": "flowrl", "seed": s, "valid": True, "result": {
        "reached": s == 0, "ppo_env_steps": 1e5, "expert_train_mean": 470.0,
        "expert_rows": 1e5, "random_rows": 5e4, "bc_expert_eval": 480.0 - 100 * s,
        "marwil_mixed_eval": 300.0, "bc_mixed_eval": 150.0, "marwil_over_bc": 2.0,
        "is_rel_error": 0.02, "wis_rel_error": 0.01, "offline_env_steps": 0}}
        for s in (0, 1)]
    bench.report(runs)
    out = capsys.readouterr().out
    assert "reached 1/2" in out and "2.00x" in out and "480.0" in out


def test_offline_cql_reports_cql_next_to_bc_and_the_behaviour_return(capsys):
    import offline_cql as bench
    runs = [{"system": "flowrl", "seed": s, "valid": True, "result": {
        "complete": s == 0, "stage": "done" if s == 0 else "cql", "reached": s == 0,
        "sac_env_steps": 2e5, "behaviour_train_score": 1150.0, "dataset_rows": 1e6,
        "behaviour_return": 1100.0, "cql_eval": 1650.0 if s == 0 else None,
        "bc_eval": 1050.0 if s == 0 else None, "cql_over_behaviour": 1.5,
        "cql_over_bc": 1650.0 / 1050.0, "offline_env_steps": 0}} for s in (0, 1)]
    bench.report(runs, "Hopper-v5")
    out = capsys.readouterr().out
    assert "seed 1: stopped at stage 'cql', resumable" in out
    assert "reached 1/2" in out and "1,650.0" in out and "1.50x" in out and "1.57x" in out


def test_offline_cql_progress_survives_a_new_sitting(tmp_path):
    import offline_cql as bench
    p = bench.Progress(tmp_path / "seed0")
    assert p["stage"] == "behaviour" and p["dataset_rows"] is None
    p.save(stage="dataset", dataset_rows=5000)
    again = bench.Progress(tmp_path / "seed0")
    assert again["stage"] == "dataset" and again["dataset_rows"] == 5000


def test_offline_cql_shows_progress_within_a_stage_at_most_once_a_minute(capsys):
    import offline_cql as bench
    sitting = bench.Sitting(None)
    sitting.progress("SAC 1,000 steps")          # under a minute since the sitting began
    sitting.last_progress -= 61
    sitting.progress("SAC 2,000 steps")
    sitting.progress("SAC 3,000 steps")          # the minute starts again
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == 1 and lines[0].endswith("] SAC 2,000 steps")


def test_offline_cql_redo_from_discards_a_stage_and_the_later_ones(tmp_path):
    import offline_cql as bench
    p = bench.Progress(tmp_path / "seed0")
    for name in ("sac", "data", "cql"):
        (p.dir / name).mkdir(parents=True)
    (p.dir / "behaviour_weights.npz").write_bytes(b"w")
    p.save(stage="bc", sac_env_steps=50000, sac_window=[1.0], behaviour_train_score=1.0,
           behaviour_eval=900.0, dataset_rows=10, behaviour_return=5.0, cql_updates=7,
           cql_eval=3.0, cql_learner=[{"updates": 7, "mean_q": 1.0}], offline_env_steps=0)
    bench.redo_from(p, "dataset")
    again = bench.Progress(tmp_path / "seed0")
    assert again["stage"] == "dataset" and again["dataset_rows"] is None
    assert again["cql_eval"] is None and not (p.dir / "data").exists()
    assert again["cql_learner"] is None
    assert not (p.dir / "cql").exists() and again["behaviour_eval"] == 900.0
    bench.redo_from(again, "behaviour")   # SAC trains on from its checkpoint
    again = bench.Progress(tmp_path / "seed0")
    assert again["stage"] == "behaviour" and again["behaviour_eval"] is None
    assert again["sac_env_steps"] == 50000 and again["sac_window"] == [1.0]
    assert (p.dir / "sac").exists() and not (p.dir / "behaviour_weights.npz").exists()
    with pytest.raises(SystemExit, match="has not reached that stage"):
        bench.redo_from(again, "cql")


def test_offline_cql_refuses_to_continue_a_stage_trained_with_other_settings(tmp_path):
    import offline_cql as bench
    p = bench.Progress(tmp_path / "seed0")
    p.save(stage="cql", cql_updates=100, cql_settings=bench.stage_settings("cql"))
    bench.check_settings(p, "cql")   # the same settings: goes on
    older = {**bench.stage_settings("cql"), "Q_model": {"fcnet_hiddens": [256, 256]}}
    p.save(cql_settings=older)
    with pytest.raises(SystemExit, match=r"other settings \(Q_model differ\); pass "
                                         r"--redo-from cql"):
        bench.check_settings(p, "cql")
    p.save(cql_updates=0)   # nothing trained yet: nothing to mix
    bench.check_settings(p, "cql")


def test_offline_cql_keeps_the_learners_numeric_figures_for_its_curve():
    import offline_cql as bench
    result = {"info": {"learner": {"default_policy": {
        "mean_q": 201.5, "cql_loss": 3, "name": "x", "bad": math.nan}}}}
    assert bench.learner_figures(result) == {"mean_q": 201.5, "cql_loss": 3.0}


def test_offline_cql_asking_for_more_updates_reopens_a_finished_stage(tmp_path):
    import offline_cql as bench
    p = bench.Progress(tmp_path / "seed0")
    (p.dir / "cql").mkdir(parents=True)
    p.save(stage="done", cql_updates=60000, cql_eval=800.0, bc_updates=50000, bc_eval=1500.0)
    bench.reopen_to_extend(p, {"cql": 60000, "bc": 50000})   # nothing more asked
    assert p["stage"] == "done"
    bench.reopen_to_extend(p, {"cql": 100000, "bc": 50000})
    again = bench.Progress(tmp_path / "seed0")
    assert again["stage"] == "cql" and again["cql_eval"] is None
    assert again["cql_updates"] == 60000 and again["bc_eval"] == 1500.0
    p.save(stage="done", cql_eval=900.0)
    with pytest.raises(SystemExit, match="without a checkpoint to continue from"):
        bench.reopen_to_extend(p, {"cql": 60000, "bc": 80000})   # no bc/ checkpoint


def test_cql_probe_rates_the_data_the_actor_and_random_actions(tmp_path):
    import cql_probe
    import numpy as np
    import gymnasium as gym
    import pyarrow as pa
    import pyarrow.parquet as pq

    from flowrl.policies.cql import CQLPolicy
    # two files; in the first, rows 0-1 are one episode (row 1 starts from row 0's new_obs)
    obs = np.array([[0.0, 0.0], [1.0, 1.0], [5.0, 5.0]], np.float32)
    new_obs = np.array([[1.0, 1.0], [2.0, 2.0], [6.0, 6.0]], np.float32)
    for i in range(2):
        pq.write_table(pa.table({"obs": list(obs), "actions": [np.zeros(1, np.float32)] * 3,
                                 "new_obs": list(new_obs), "rewards": [1.0, 1.0, 2.0]}),
                       tmp_path / f"part-{i}.parquet")
    rows = cql_probe.load_rows(tmp_path, gamma=0.5)
    np.testing.assert_allclose(rows["returns"], [1.5, 1.0, 2.0] * 2)
    assert rows["obs"].shape == (6, 2) and rows["actions"].shape == (6, 1)
    with pytest.raises(SystemExit, match="no Parquet files"):
        cql_probe.load_rows(tmp_path / "missing", gamma=0.5)
    policy = CQLPolicy(gym.spaces.Box(-10, 10, (2,)), gym.spaces.Box(-1, 1, (1,)), seed=0,
                       Q_model=[8], policy_model=[8])
    figures = cql_probe.probe(policy, rows["obs"], rows["actions"], rows["returns"])
    assert figures["observed_return"] == pytest.approx(1.5)
    assert 0.0 <= figures["greedy_above_data"] <= 1.0 and figures["greedy_gap"] >= 0.0
    assert {"q_data", "q_greedy", "q_sample", "q_uniform", "corr_q_return"} <= set(figures)


def test_cql_probe_evaluates_a_bc_checkpoint_and_refuses_other_algorithms(tmp_path, capsys):
    import json
    import shutil

    import cql_probe
    import offline_cql

    from flowrl.algorithms import BC, BCConfig
    from flowrl.checkpoint import write_checkpoint
    # an offline_cql.py seed directory: data/ (Pendulum's shipped dataset) and bc/
    shutil.copytree(ROOT / "tuned_examples" / "data" / "pendulum-sac-replay", tmp_path / "data")
    algo = BC(BCConfig(env="Pendulum-v1", input=str(tmp_path / "data"), seed=0,
                       **offline_cql.BC_SETTINGS))
    try:
        algo.save(str(tmp_path / "bc"))
    finally:
        algo.stop()
    cql_probe.main([str(tmp_path / "bc"), "--state-dir", str(tmp_path), "--env", "Pendulum-v1",
                    "--episodes", "2", "--results-dir", str(tmp_path / "results")])
    (saved,) = (tmp_path / "results").glob("cql_probe-*.json")
    doc = json.loads(saved.read_text())
    figures = doc["figures"]
    assert figures["algorithm"] == "bc" and "q_data" not in figures   # evaluated only
    assert -2000.0 < figures["eval_reward_min"] <= figures["eval_reward_mean"] < 0.0
    assert figures["eval_len_mean"] == 200.0 and doc["settings"]["lr"] == 1e-3
    assert "algorithm: bc" in capsys.readouterr().out
    write_checkpoint(str(tmp_path / "pg"), {"algorithm": "pg", "worker": {}})
    with pytest.raises(SystemExit, match="a pg checkpoint; cql_probe reads the CQL and BC"):
        cql_probe.main([str(tmp_path / "pg"), "--state-dir", str(tmp_path)])
