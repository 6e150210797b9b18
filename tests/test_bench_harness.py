"""The benchmark harness's pure logic: run order, foreign-load detection, statistics.

These never time anything; they check the rules the harness applies to figures.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import harness  # noqa: E402
from harness import Sample  # noqa: E402


def test_interleaved_order_runs_every_pair_once_and_rotates_the_first_system():
    order = harness.interleaved_order(["a", "b", "c"], [0, 1, 2, 3])
    assert sorted(order) == sorted((s, k) for s in "abc" for k in range(4))
    firsts = [order[i * 3][0] for i in range(4)]
    assert firsts == ["a", "b", "c", "a"]
    # seeds are not mixed: all of seed k come before any of seed k+1
    assert [k for _, k in order] == sorted(k for _, k in order)


def test_foreign_intervals_subtract_own_cpu_and_never_go_negative():
    samples = [Sample(0.0, 10.0, 5.0), Sample(0.5, 11.0, 5.5), Sample(1.0, 11.2, 6.0)]
    assert harness.foreign_intervals(samples) == [(0.5, 1.0), (0.5, 0.0)]


def test_overlap_flags_a_short_burst_that_the_mean_hides():
    quiet, burst = (1.0, 0.0), (1.0, 1.5)
    intervals = [quiet] * 28 + [burst] * 2
    assert harness.mean_load(intervals) == pytest.approx(0.1)
    reason = harness.overlap_reason(intervals, mean_cores=0.2, peak_cores=0.5, window_s=2.0)
    assert reason is not None and "peaked at 1.50" in reason
    # a single sample above the peak limit, averaged over a 4 s window, is tolerated
    assert harness.overlap_reason([quiet] * 28 + [burst], mean_cores=0.2, peak_cores=0.5,
                                  window_s=4.0) is None


def test_overlap_flags_steady_background_load_by_its_mean():
    intervals = [(0.5, 0.3)] * 40
    reason = harness.overlap_reason(intervals, mean_cores=0.1, peak_cores=0.5, window_s=2.0)
    assert reason is not None and reason.startswith("mean foreign load 0.30")


def test_clean_run_is_not_overlapped():
    intervals = [(0.5, 0.02)] * 40 + [(0.5, 0.2)]
    assert harness.overlap_reason(intervals, mean_cores=0.1, peak_cores=0.5,
                                  window_s=2.0) is None


def test_median_range_ignores_missing_and_nonfinite_values():
    assert harness.median_range([5.0, None, math.inf, 1.0, 3.0]) == (3.0, 1.0, 5.0)
    assert harness.median_range([None, math.nan]) is None
    assert harness.median_range([1.0, 2.0, 3.0, 10.0]) == (2.5, 1.0, 10.0)


def _run(system, reached, sps, t, valid=True):
    result = {"sps": sps, "t": t}
    if reached is not None:
        result["reached"] = reached
    return {"system": system, "valid": valid, "result": result}


def test_summary_never_mixes_reached_and_not_reached_runs():
    runs = [_run("x", True, 100, 10.0), _run("x", False, 900, 99.0), _run("x", True, 300, 30.0),
            _run("x", False, 700, 77.0), _run("x", True, 200, 20.0)]
    reached, missed = harness.summarize(runs, ["sps", "t"], target_keys=["t"])
    assert (reached.label, reached.n, reached.reached) == ("reached 3/5", 3, True)
    assert reached.figures == {"sps": (200, 100, 300), "t": (20.0, 10.0, 30.0)}
    assert (missed.label, missed.n, missed.reached) == ("not reached 2/5", 2, False)
    assert missed.figures == {"sps": (800, 700, 900)}  # no time-to-target for misses


def test_summary_reports_zero_reached_without_target_figures():
    runs = [_run("x", False, 10, 1.0), _run("x", False, 20, 2.0)]
    groups = harness.summarize(runs, ["sps", "t"], target_keys=["t"])
    assert [g.label for g in groups] == ["reached 0/2", "not reached 2/2"]
    assert groups[0].figures == {}


def test_summary_skips_invalid_runs_and_keeps_system_order():
    runs = [_run("b", None, 1, 0), _run("a", None, 2, 0), _run("b", None, 1000, 0, valid=False),
            _run("b", None, 3, 0)]
    groups = harness.summarize(runs, ["sps"])
    assert [(g.system, g.label, g.figures["sps"]) for g in groups] == [
        ("b", "2 runs", (2.0, 1, 3)), ("a", "1 runs", (2, 2, 2))]


@given(st.lists(st.tuples(st.booleans(), st.floats(0.1, 1e4)), min_size=1, max_size=12))
def test_summary_groups_partition_the_valid_runs(data):
    runs = [_run("s", r, v, v) for r, v in data]
    groups = harness.summarize(runs, ["sps", "t"], target_keys=["t"])
    assert sum(g.n for g in groups) == len(data)
    hit = [v for r, v in data if r]
    if hit:
        med, lo, hi = groups[0].figures["t"]
        assert (lo, hi) == (min(hit), max(hit))
        assert lo <= med <= hi
    for g in groups[1:]:
        assert "t" not in g.figures
        assert g.figures["sps"][1] == min(v for r, v in data if not r)


def test_ratio_of_medians_is_nan_when_a_side_is_missing():
    assert harness.ratio((6.0, 1, 9), (2.0, 2, 2)) == 3.0
    assert math.isnan(harness.ratio(None, (2.0, 2, 2)))
    assert math.isnan(harness.ratio((1.0, 1, 1), (0.0, 0, 0)))


def test_tree_cpu_counts_a_busy_child_process():
    proc = subprocess.Popen([sys.executable, "-c",
                             "import time\nt=time.process_time()\n"
                             "while time.process_time()-t < 0.3: pass\nprint('done')"],
                            stdout=subprocess.PIPE, text=True)
    tree = harness.TreeCpu([proc.pid])
    assert proc.pid in tree.members()
    seen = 0.0
    while proc.poll() is None:
        seen = tree.read()
        time.sleep(0.02)
    proc.wait()
    assert proc.stdout.read().strip() == "done"
    assert seen > 0.0
    assert tree.members() == set()


def test_machine_busy_is_monotonic():
    a = harness.machine_busy_s()
    sum(range(200_000))
    assert harness.machine_busy_s() >= a >= 0


def test_settings_default_to_strict_idle_waiting_and_five_seeds():
    import argparse
    p = argparse.ArgumentParser()
    harness.add_arguments(p)
    s = harness.settings_from(p.parse_args([]))
    assert s.idle_wait is True and s.seeds == [0, 1, 2, 3, 4]
    assert s.results_dir == harness.RESULTS_DIR
    q = harness.settings_from(p.parse_args(["--quick", "--no-idle-wait"]))
    assert q.idle_wait is False and q.seeds == [0, 1]
    assert q.results_dir == harness.RESULTS_DIR / "smoke"


@pytest.mark.parametrize("argv", [["--seeds", "0"], ["--max-attempts", "0"],
                                  ["--seeds", "-2"], ["--max-attempts", "two"]])
def test_a_count_that_would_run_nothing_is_refused_by_name(argv, capsys):
    import argparse
    p = argparse.ArgumentParser(prog="bench")
    harness.add_arguments(p)
    with pytest.raises(SystemExit):
        p.parse_args(argv)
    err = capsys.readouterr().err
    assert f"argument {argv[0]}" in err and ("run nothing" in err or "whole number" in err)
    assert harness.settings_from(p.parse_args(["--seeds", "1"])).seeds == [0]


def test_quick_caps_options_and_forward_gives_the_child_the_same_values():
    import argparse
    p = argparse.ArgumentParser()
    p.add_argument("--max-steps", type=int, default=300_000)
    p.add_argument("--budget", type=float, default=None)
    p.add_argument("--envs", type=int, nargs="+", default=[4, 8])
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(["--quick", "--max-steps", "1000"])
    harness.shorten_for_quick(args, seeds=1, max_steps=5000, budget=12.0)
    assert (args.max_steps, args.budget, args.seeds) == (1000, 12.0, 1)
    flags = harness.forward(args, "max_steps", "budget", "envs", "quick", "no_idle_wait")
    assert flags == ["--max-steps", "1000", "--budget", "12.0", "--envs", "4", "8", "--quick"]
    child = p.parse_args(flags)
    assert (child.max_steps, child.budget, child.envs, child.quick) == (1000, 12.0, [4, 8], True)
    full = p.parse_args([])
    harness.shorten_for_quick(full, seeds=1, max_steps=5000)
    assert (full.max_steps, full.seeds) == (300_000, None)  # no --quick: nothing changes


def test_run_with_report_returns_the_saved_runs_and_settings(tmp_path, capsys):
    import argparse
    import json
    saved = tmp_path / "saved.json"
    saved.write_text(json.dumps({"benchmark": "b", "started_utc": "x", "meta": {"target": 195},
                                 "runs": [{"system": "a", "valid": True, "result": {}}]}))
    p = argparse.ArgumentParser()
    harness.add_arguments(p)
    runs, meta = harness.run(p.parse_args(["--report", str(saved)]), "b", "bench.py", ["a"],
                             meta={"target": 450})
    assert meta == {"target": 195} and [r["system"] for r in runs] == ["a"]
    assert "nothing was run" in capsys.readouterr().out


def test_harness_doctests_hold():
    import doctest
    assert doctest.testmod(harness).failed == 0


def test_runs_started_in_the_same_second_get_their_own_results_files(tmp_path):
    # Two side-by-side runs of dqn_pong once wrote one file, the second over the first.
    first = harness.reserve_path(tmp_path, "dqn_pong", "20261203T205344Z")
    second = harness.reserve_path(tmp_path, "dqn_pong", "20261203T205344Z")
    third = harness.reserve_path(tmp_path, "dqn_pong", "20261203T205344Z")
    assert [p.name for p in (first, second, third)] == [
        "dqn_pong-20261203T205344Z.json", "dqn_pong-20261203T205344Z-2.json",
        "dqn_pong-20261203T205344Z-3.json"]
    assert all(p.exists() for p in (first, second, third))


def test_run_all_records_a_failed_child_and_a_good_one(tmp_path, capsys):
    script = tmp_path / "bench.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
        "import harness\n"
        "system = sys.argv[sys.argv.index('--child') + 1]\n"
        "harness.progress('halfway')\n"
        "if system == 'bad':\n"
        "    raise SystemExit('broken on purpose')\n"
        "harness.write_result({'value': 7, 'from_start_s': harness.since_start()})\n")
    s = harness.Settings(seeds=[0], idle_wait=False, results_dir=tmp_path / "out",
                         sample_interval=0.05, run_timeout=60)
    runs, path = harness.run_all("t", str(script), ["good", "bad"], s)
    good, bad = runs
    assert good["valid"] and good["result"]["value"] == 7
    assert 0 < good["result"]["from_start_s"] < good["wall_s"] + 1
    assert not bad["ok"] and not bad["valid"] and "broken on purpose" in bad["log_tail"]
    assert re.search(r"\[0\.0 min\] halfway", bad["log_tail"])
    assert path.exists() and os.path.getsize(path) > 0
    # each run's output went to a log file named as it started, removed once it ended
    logs = re.findall(r"(good|bad) seed 0: running; its output: tail -f (\S+)",
                      capsys.readouterr().out)
    assert [system for system, _ in logs] == ["good", "bad"]
    assert not any(os.path.exists(log) for _, log in logs)


@pytest.mark.parametrize("resumable", [False, True])
def test_an_overlapped_sitting_of_a_resumable_run_is_not_repeated(tmp_path, monkeypatch,
                                                                   capsys, resumable):
    # Each child is one sitting: it advances a state file, as mujoco_offpolicy.py's runs
    # do. Repeating a discarded sitting would train the next one, so a resumable run is
    # recorded as discarded once; other runs are repeated up to max_attempts.
    state = tmp_path / "sittings"
    script = tmp_path / "bench.py"
    script.write_text(
        "import sys\n"
        f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
        "import harness\n"
        f"with open({str(state)!r}, 'a') as f:\n"
        "    f.write('sitting\\n')\n"
        "harness.write_result({'value': 1})\n")
    monkeypatch.setattr(harness, "wait_for_idle", lambda s, log=print: 0.0)
    monkeypatch.setattr(harness, "overlap_reason", lambda *a, **k: "load on purpose")
    s = harness.Settings(seeds=[0], results_dir=tmp_path / "out", sample_interval=0.05,
                         run_timeout=60, max_attempts=3)
    runs, _ = harness.run_all("t", str(script), ["one"], s, resumable=resumable)
    sittings = state.read_text().splitlines()
    assert len(sittings) == len(runs) == (1 if resumable else 3)
    assert all(r["ok"] and not r["valid"] for r in runs)
    assert ("not repeated" in capsys.readouterr().out) == resumable


def test_run_child_kills_what_a_finished_run_left_behind(tmp_path):
    script = tmp_path / "bench.py"
    script.write_text(
        "import subprocess, sys, time\n"
        f"sys.path.insert(0, {str(ROOT / 'benchmarks')!r})\n"
        "import harness\n"
        "p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep(120)'])\n"
        "time.sleep(0.5)\n"
        "harness.write_result({'left': p.pid})\n")
    s = harness.Settings(seeds=[0], idle_wait=False, results_dir=tmp_path / "out",
                         sample_interval=0.1, run_timeout=60)
    rec = harness.run_child(str(script), "x", 0, [], s)
    assert rec["ok"], rec["log_tail"]
    left = rec["result"]["left"]

    def state():
        try:
            return Path(f"/proc/{left}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return None

    deadline = time.time() + 10
    while state() not in (None, "Z") and time.time() < deadline:
        time.sleep(0.05)
    assert state() in (None, "Z")  # killed (a zombie until its new parent reaps it)


_SPAWNER = r"""
import os, subprocess, sys, time
burn = "import time\nt = time.process_time()\nwhile time.process_time() - t < {}: pass\n"
flag = sys.argv[1]
if os.fork() == 0:            # a double-forked orphan: leaves the tree, stays in the session
    if os.fork() == 0:
        exec(burn.format(0.2))
        open(flag, "w").write(repr(time.process_time()))
        time.sleep(1.0)       # sampled alive after its work
        os._exit(0)
    os._exit(0)
os.wait()
for _ in range(10):           # short-lived children, most of them between two samples
    subprocess.run([sys.executable, "-c", burn.format(0.08)], check=True)
while not os.path.exists(flag):
    time.sleep(0.05)
t = os.times()
print(t.user + t.system + t.children_user + t.children_system, flush=True)
sys.stdin.read()              # stay alive until the test took its last sample
"""


def test_tree_cpu_counts_exited_children_and_orphans_of_the_run(tmp_path):
    flag = tmp_path / "orphan-cpu"
    proc = subprocess.Popen([sys.executable, "-c", _SPAWNER, str(flag)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True, start_new_session=True)
    tree = harness.TreeCpu([proc.pid], sessions=[proc.pid])
    first = tree.read()
    try:
        import selectors
        sel = selectors.DefaultSelector()
        sel.register(proc.stdout, selectors.EVENT_READ)
        while not sel.select(timeout=0.5):  # sampled like the harness does; a hang is
            tree.read()                     # caught by the pytest timeout
        own = float(proc.stdout.readline())
        time.sleep(0.3)
        counted = tree.read() - first
    finally:
        proc.stdin.close()
        proc.wait()
    orphan = float(flag.read_text())
    expected = own + orphan                 # the spawner with its reaped children, + orphan
    assert orphan >= 0.2 and own >= 10 * 0.08
    assert 0.9 * expected <= counted <= 1.1 * expected + 0.1
