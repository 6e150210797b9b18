"""The ``flowrl`` command: train, restore, config files, evaluate, signals."""

from __future__ import annotations

import json
import logging
import os
import pathlib
import pickle
import random
import re
import signal
import subprocess
import sys
import time

import pytest
import yaml

from flowrl import checkpoint
from flowrl.cli import main
from flowrl.loggers import flatten_scalars, read_scalars

FAST_PG = ["--set", "rollout_fragment_length=50", "--set", "train_batch_size=50"]


def snapshot(root) -> dict[str, bytes]:
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = fh.read()
    return out


def results(run_dir) -> list[dict]:
    return [json.loads(line) for line in (run_dir / "result.jsonl").read_text().splitlines()]


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """A PG run of 3 iterations checkpointed every iteration, the last 2 kept."""
    root = tmp_path_factory.mktemp("trained")
    assert main(["train", "pg", "--env", "CartPole-v1", *FAST_PG, "--stop-iters", "3",
                 "--checkpoint-freq", "1", "--keep-checkpoints", "2", "--run-dir", str(root),
                 "--seed", "0", "--quiet"]) == 0
    (run_dir,) = list(root.iterdir())
    return run_dir


def test_train_writes_results_tensorboard_and_kept_checkpoints(trained, capsys):
    assert trained.name.startswith("pg-CartPole-v1-")
    rs = results(trained)
    assert [r["training_iteration"] for r in rs] == [1, 2, 3]
    assert [r["num_checkpoints_skipped"] for r in rs] == [0, 0, 0]
    assert os.listdir(trained / "checkpoint") and sorted(os.listdir(trained / "checkpoint")) == [
        "checkpoint_000002", "checkpoint_000003"]
    # TensorBoard holds exactly the scalars of the JSON lines, at timesteps_total.
    scalars = read_scalars(str(trained))
    expected = {}
    for r in rs:
        for tag, v in flatten_scalars(r).items():
            expected.setdefault(tag, []).append((r["timesteps_total"], pytest.approx(v, rel=1e-6)))
    assert scalars == expected and "episode_reward_mean" in scalars


def test_restore_continues_counters_from_a_checkpoint_directory(trained, tmp_path, capsys):
    assert main(["train", "pg", "--env", "CartPole-v1", *FAST_PG, "--stop-iters", "4",
                 "--restore", str(trained / "checkpoint"), "--run-dir", str(tmp_path),
                 "--quiet", "--no-tensorboard"]) == 0
    (run2,) = list(tmp_path.iterdir())
    (r,) = results(run2)
    assert r["training_iteration"] == 4
    assert r["timesteps_total"] > results(trained)[-1]["timesteps_total"]
    assert "checkpoint_000004" in capsys.readouterr().out


class Marker:
    """Unpickling this creates a file: proof that a restore ran a checkpoint's code."""

    def __init__(self, path):
        self.path = str(path)

    def __reduce__(self):
        return (open, (self.path, "w"))


def add_pickled_extra(ck_dir, obj) -> None:
    """Make checkpoint ``ck_dir`` hold ``obj`` as pickled extra state, as
    Algorithm.save does for an extra_state() value that is not plain data."""
    doc = json.loads((ck_dir / checkpoint.CHECKPOINT_FILE).read_text())
    del doc["sha256"]   # edited by hand: unchecked, as checkpoints written before checksums
    doc["user_state"] = checkpoint.USER_STATE_FILE
    doc["state"]["extra"] = {"schedule": {checkpoint.TAG: "pickled", "key": "0",
                                          "type": "tests.Schedule", "where": "extra.schedule"}}
    (ck_dir / checkpoint.USER_STATE_FILE).write_bytes(pickle.dumps({"0": pickle.dumps(obj)}))
    (ck_dir / checkpoint.CHECKPOINT_FILE).write_text(json.dumps(doc))


@pytest.mark.parametrize("damage, args, reason", [
    ("truncate", [], "cannot read checkpoint"),
    ("format1", [], "format-1 flowrl checkpoint.*not loadable"),
    ("pickled", [], r"extra\.schedule .*saved with pickle.*--restore-allow-pickle"),
    ("none", ["--set", "model=[8]"], "model does not fit"),
    ("none", ["--algo-a2c"], "from 'pg', not 'a2c'"),
])
def test_failed_restore_writes_nothing_not_even_into_its_source(trained, tmp_path, capsys,
                                                                 damage, args, reason):
    """The defect: ``--restore D --checkpoint-dir D`` used to overwrite D on failure."""
    src = tmp_path / "ckpts"
    src.mkdir()
    for name, data in snapshot(trained / "checkpoint").items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    marker = tmp_path / "pwned"
    if damage == "truncate":      # every one: a corrupt newest one gives way to an older one
        for ck in src.iterdir():
            f = ck / checkpoint.CHECKPOINT_FILE
            f.write_bytes(f.read_bytes()[:100])
    if damage == "format1":       # what flowrl wrote before format 2: one pickle
        for ck in src.iterdir():
            for f in ck.iterdir():
                f.unlink()
            (ck / "algorithm_state.pkl").write_bytes(pickle.dumps(Marker(marker)))
    if damage == "pickled":
        add_pickled_extra(src / "checkpoint_000003", Marker(marker))
    algo = "a2c" if "--algo-a2c" in args else "pg"
    args = [a for a in args if a != "--algo-a2c"]
    before = snapshot(src)
    code = main(["train", algo, "--env", "CartPole-v1", *args, "--stop-iters", "5",
                 "--restore", str(src), "--checkpoint-dir", str(src), "--run-dir",
                 str(tmp_path / "runs"), "--quiet"])
    err = capsys.readouterr().err
    assert code == 2 and re.search(reason, err), err
    assert len(err.strip().splitlines()) == 1 and "Traceback" not in err
    assert snapshot(src) == before
    assert not (tmp_path / "runs").exists()
    assert not marker.exists()


def test_restore_allow_pickle_loads_pickled_extra_state(trained, tmp_path, capsys):
    src = tmp_path / "ckpts"
    for name, data in snapshot(trained / "checkpoint").items():
        (src / name).parent.mkdir(parents=True, exist_ok=True)
        (src / name).write_bytes(data)
    marker = tmp_path / "loaded"
    add_pickled_extra(src / "checkpoint_000003", Marker(marker))
    assert main(["train", "pg", "--env", "CartPole-v1", *FAST_PG, "--stop-iters", "4",
                 "--restore", str(src), "--restore-allow-pickle", "--run-dir",
                 str(tmp_path / "runs"), "--quiet", "--no-tensorboard"]) == 0
    assert marker.exists()                      # the user vouched for this checkpoint
    (run,) = list((tmp_path / "runs").iterdir())
    assert [r["training_iteration"] for r in results(run)] == [4]


def test_config_file_and_overrides_with_suggestions(tmp_path, capsys):
    spec = tmp_path / "pg.yaml"
    spec.write_text("algo: pg\nenv: CartPole-v1\nstop: {training_iteration: 1}\n"
                    "config: {train_batch_size: 40, rollout_fragment_length: 40, lr: 0.01}\n")
    assert main(["train", "--config", str(spec), "--set", "model=[16]", "--set", "gamma=0.9",
                 "--run-dir", str(tmp_path / "runs"), "--quiet", "--no-tensorboard"]) == 0
    (run_dir,) = list((tmp_path / "runs").iterdir())
    assert [r["timesteps_total"] for r in results(run_dir)] == [40]
    capsys.readouterr()
    for args, message in [
        (["--set", "lr_rate=0.1"], "unknown field 'lr_rate' in pg config; did you mean 'lr'?"),
        (["--set", "gama=0.9"], "did you mean 'gamma'?"),
        (["--set", "lr"], "write key=value"),
        (["--set", "stop.iterations=3"], "did you mean 'training_iteration'?"),
        (["--set", "gamma=high"], "PGConfig.gamma='high': must be a number"),
    ]:
        assert main(["train", "--config", str(spec), *args, "--quiet"]) == 2
        assert message in capsys.readouterr().err
    bad = tmp_path / "bad.yaml"
    bad.write_text("algo: pg\nenvironment: CartPole-v1\n")
    assert main(["train", "--config", str(bad)]) == 2
    assert "unknown key 'environment'; did you mean 'env'?" in capsys.readouterr().err


PROGRESS_LINE = re.compile(r"^iter (\d+) \| timesteps (\d+) \| mean return (-|[-\d.]+) \| "
                           r"episodes \d+ \| steps/s [\d,]+ \| time \(s\) [\d.]+$")


@pytest.mark.parametrize("text, where", [
    ("algo: pg\nenv: CartPole-v1\nconfig:\n  lr: 0.1: 2\n",
     "line 4, column 10: mapping values are not allowed here; the line reads '  lr: 0.1: 2'"),
    ("algo: pg\nconfig:\n  model: [32, 32\n  lr: 1\n",
     "line 4, column 5: expected ',' or ']', but got ':' (while parsing a flow sequence from "
     "line 3, column 10); the line reads '  lr: 1'"),
    ("algo: pg\nconfig:\n\tlr: 1\n",
     "line 3, column 1: found character '\\t' that cannot start any token (while scanning for "
     "the next token)"),
    ("algo: pg\nenv: 'CartPole-v1\n", "line 3, column 1: found unexpected end of stream "
     "(while scanning a quoted scalar from line 2, column 6); the text ends there"),
    (b"algo: pg\nenv: \x89\n", "line 2, column 6: invalid start byte: save it as UTF-8"),
])
def test_a_config_file_that_is_not_yaml_names_the_line_and_column(text, where, tmp_path, capsys):
    spec = tmp_path / "bad.yaml"
    spec.write_bytes(text if isinstance(text, bytes) else text.encode())
    assert main(["train", "--config", str(spec), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"flowrl: error: --config {str(spec)!r}: not valid YAML at {where}"), err
    assert "Traceback" not in err


def test_a_set_value_that_is_not_yaml_names_the_column_and_how_to_quote_it(capsys):
    assert main(["train", "pg", "--env", "CartPole-v1", "--set", "model=[32, 32"]) == 2
    assert capsys.readouterr().err == (
        "flowrl: error: --set model='[32, 32': not valid YAML at line 1, column 8: expected "
        "',' or ']', but got '<stream end>' (while parsing a flow sequence from line 1, column "
        "1); the line reads '[32, 32'; fix the value, or quote it to pass it as text: --set "
        "'model=\"...\"'\n")
    assert main(["plan", "pg", "--set", "env_config={size: 5"]) == 2
    assert "--set env_config='{size: 5': not valid YAML at line 1, column 9" in \
        capsys.readouterr().err


TUNED = pathlib.Path(__file__).resolve().parents[1] / "tuned_examples"


def train_spec(argv):
    """What ``flowrl train ARGV`` would train and the line it prints first, without
    building or training anything."""
    from flowrl.cli import _layered_spec, _parser
    return _layered_spec(_parser().parse_args(["train", *argv]), None)


@pytest.mark.parametrize("algo", ["ppo", "impala", "appo", "dqn", "apex"])
def test_an_atari_env_starts_from_the_tuned_pong_example(algo):
    pong = yaml.safe_load((TUNED / f"{algo}-pong.yaml").read_text())["config"]
    spec, notice = train_spec([algo, "--env", "ALE/Breakout-v5"])
    assert spec["config"] == pong and spec["env"] == "ALE/Breakout-v5"
    assert notice == (f"ALE/Breakout-v5: using the Atari defaults of "
                      f"{os.path.relpath(TUNED / f'{algo}-pong.yaml')} (its config block); "
                      "--set KEY=VALUE changes one, --config FILE.yaml replaces them")


def test_flags_and_set_override_the_atari_defaults_and_a_config_file_replaces_them(tmp_path):
    pong = yaml.safe_load((TUNED / "ppo-pong.yaml").read_text())["config"]
    spec, _ = train_spec(["ppo", "--set", "env=ALE/Pong-v5", "--num-workers", "1",
                          "--set", "train_batch_size=512", "--set", "model.zero_mean=true"])
    assert spec["env"] == "ALE/Pong-v5"
    assert spec["config"] == {**pong, "num_workers": 1, "train_batch_size": 512,
                              "model": {**pong["model"], "zero_mean": True}}
    own = tmp_path / "own.yaml"
    own.write_text("algo: ppo\nenv: ALE/Pong-v5\nconfig: {lr: 0.001}\n")
    assert train_spec(["--config", str(own)]) == (
        {"algo": "ppo", "env": "ALE/Pong-v5", "stop": {}, "config": {"lr": 0.001}}, None)
    assert train_spec(["ppo", "--env", "CartPole-v1"])[0]["config"] == {}
    spec, notice = train_spec(["a2c", "--env", "ALE/Pong-v5"])
    assert spec["config"] == {} and notice.startswith(
        "ALE/Pong-v5: a2c has no tuned Atari example (a2c-pong.yaml in ")


def test_the_atari_defaults_make_a_valid_config_and_flowrl_train_says_so_first(capsys):
    pytest.importorskip("ale_py")
    from flowrl.experiment import algorithm_class, make_config
    spec, _ = train_spec(["ppo", "--env", "ALE/Pong-v5"])
    config = make_config(algorithm_class("ppo"), {"env": spec["env"], **spec["config"]})
    pong = yaml.safe_load((TUNED / "ppo-pong.yaml").read_text())["config"]
    assert config.train_batch_size == pong["train_batch_size"]
    assert config.model.orthogonal_init is pong["model"]["orthogonal_init"] is True
    assert main(["train", "ppo", "--env", "ALE/Pong-v5", "--set", "lr_rate=1"]) == 2
    first, second = capsys.readouterr().err.splitlines()
    assert first.startswith("ALE/Pong-v5: using the Atari defaults of ")
    assert second.startswith("flowrl: error: unknown field 'lr_rate' in ppo config")


def test_without_a_terminal_each_iteration_is_one_line_and_the_last_names_the_return(
        tmp_path, capsys):
    assert main(["train", "pg", "--env", "CartPole-v1", *FAST_PG, "--stop-iters", "3",
                 "--run-dir", str(tmp_path), "--no-tensorboard"]) == 0
    lines = capsys.readouterr().out.splitlines()   # captured: stdout is not a terminal
    (run_dir,) = list(tmp_path.iterdir())
    rs = results(run_dir)
    assert lines[0] == "flowrl pg CartPole-v1"
    rows = [PROGRESS_LINE.match(line) for line in lines[1:-1]]
    assert all(rows) and len(rows) == 3, lines
    assert [(int(m[1]), int(m[2])) for m in rows] == [
        (r["training_iteration"], r["timesteps_total"]) for r in rs]
    assert rows[-1][3] == f"{rs[-1]['episode_reward_mean']:.1f}"
    assert lines[-1].startswith(f"stopped: training_iteration 3 >= 3; mean return "
                                f"{rs[-1]['episode_reward_mean']:.1f} at iteration 3; results ")


def test_quiet_prints_only_the_last_line_with_the_mean_return(tmp_path, capsys):
    assert main(["train", "pg", "--env", "CartPole-v1", *FAST_PG, "--stop-iters", "2",
                 "--run-dir", str(tmp_path), "--no-tensorboard", "--quiet"]) == 0
    (run_dir,) = list(tmp_path.iterdir())
    mean = results(run_dir)[-1]["episode_reward_mean"]
    (line,) = capsys.readouterr().out.splitlines()
    assert line.startswith(f"stopped: training_iteration 2 >= 2; mean return {mean:.1f} "
                           "at iteration 2; results ")


def _signalled_pg_train(tmp_path, lines: int, signum: int) -> tuple[subprocess.Popen, str,
                                                                       str, list[str]]:
    """A ``flowrl train pg`` subprocess sent ``signum`` once it has printed its title
    and ``lines`` progress lines: ``(process, stdout, stderr, those lines)``."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "flowrl.cli", "train", "pg", "--env", "CartPole-v1", *FAST_PG,
         "--stop-iters", "1000000", "--run-dir", str(tmp_path), "--no-tensorboard"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
        env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        assert proc.stdout.readline() == "flowrl pg CartPole-v1\n"
        progress = [proc.stdout.readline().rstrip("\n") for _ in range(lines)]
        proc.send_signal(signum)
        out, err = proc.communicate(timeout=120)
    finally:
        proc.kill()
    return proc, out, err, progress


def test_progress_lines_reach_a_pipe_while_training_runs(tmp_path):
    """Under nohup or Slurm stdout is a file or a pipe: each line is flushed as it is
    printed, so it can be read while the run goes on (here: before Ctrl-C ends it)."""
    proc, out, err, (first, second) = _signalled_pg_train(tmp_path, 2, signal.SIGINT)
    assert PROGRESS_LINE.match(first)[1] == "1"
    assert PROGRESS_LINE.match(second)[1] == "2"
    assert proc.returncode == 130, err
    assert out.splitlines()[-1].startswith("stopped: interrupted; mean return ")


def test_sigterm_writes_the_final_checkpoint_and_exits_143(tmp_path):
    """What a scheduler sends before it kills a job: handled as Ctrl-C is, so the run
    stops after its iteration with a final checkpoint that can be restored."""
    proc, out, err, (first,) = _signalled_pg_train(tmp_path, 1, signal.SIGTERM)
    assert PROGRESS_LINE.match(first)
    assert proc.returncode == 143, err
    last = out.splitlines()[-1]
    assert last.startswith("stopped: terminated (SIGTERM); mean return "), last
    saved = last.rsplit("checkpoint ", 1)[1]
    assert os.path.isdir(saved) and checkpoint.read_checkpoint(saved)["metrics"]["counters"][
        "training_iteration"] >= 1


def test_stop_time_stops_at_the_first_result_with_time_total_s_past_it(tmp_path, capsys):
    assert main(["train", "pg", "--env", "CartPole-v1", *FAST_PG, "--stop-time", "0.3",
                 "--run-dir", str(tmp_path / "flag"), "--no-tensorboard", "--quiet"]) == 0
    (run_dir,) = list((tmp_path / "flag").iterdir())
    times = [r["time_total_s"] for r in results(run_dir)]
    assert times[-1] >= 0.3 and all(t < 0.3 for t in times[:-1])
    assert "stopped: time_total_s " in capsys.readouterr().out
    spec = tmp_path / "pg.yaml"
    spec.write_text("algo: pg\nenv: CartPole-v1\nstop: {time_total_s: 0.2}\n"
                    "config: {train_batch_size: 50, rollout_fragment_length: 50}\n")
    assert main(["train", "--config", str(spec), "--run-dir", str(tmp_path / "yaml"),
                 "--no-tensorboard", "--quiet"]) == 0
    (run_dir,) = list((tmp_path / "yaml").iterdir())
    times = [r["time_total_s"] for r in results(run_dir)]
    assert times[-1] >= 0.2 and all(t < 0.2 for t in times[:-1])
    capsys.readouterr()
    for args, message in [(["--stop-time", "0"], "time_total_s='0': must be a number of "
                                                 "seconds > 0"),
                          (["--set", "stop.time_total_s=-1"], "must be a number of seconds > 0")]:
        assert main(["train", "pg", "--env", "CartPole-v1", *args, "--quiet"]) == 2
        assert message in capsys.readouterr().err


def test_numbers_yaml_reads_as_strings_are_numbers(tmp_path, capsys):
    spec = tmp_path / "pg.yaml"
    spec.write_text("algo: pg\nenv: CartPole-v1\nstop: {timesteps_total: 1e2}\n"
                    "config: {train_batch_size: 5e1, rollout_fragment_length: 5e1, lr: 1e-2}\n")
    assert main(["train", "--config", str(spec), "--set", "lr=1e-3",
                 "--run-dir", str(tmp_path / "runs"), "--quiet", "--no-tensorboard"]) == 0
    (run_dir,) = list((tmp_path / "runs").iterdir())
    assert [r["timesteps_total"] for r in results(run_dir)] == [50, 100]
    saved = checkpoint.read_checkpoint(str(run_dir / "checkpoint"))["config"]
    assert (saved["lr"], saved["train_batch_size"]) == (0.001, 50)
    assert main(["train", "pg", "--env", "CartPole-v1", *FAST_PG, "--stop-timesteps", "1e2",
                 "--run-dir", str(tmp_path / "flag"), "--quiet", "--no-tensorboard"]) == 0
    (run_dir,) = list((tmp_path / "flag").iterdir())
    assert results(run_dir)[-1]["timesteps_total"] == 100
    capsys.readouterr()
    for args, message in [
        (["--set", "train_batch_size=15e-1"], "PGConfig.train_batch_size='15e-1': must be an "
                                              "int >= 1"),
        (["--stop-timesteps", "1.5"], "timesteps_total='1.5': must be an int >= 1"),
    ]:
        assert main(["train", "pg", "--env", "CartPole-v1", *args, "--quiet"]) == 2
        assert message in capsys.readouterr().err


def test_skipped_checkpoints_are_counted_and_logged_once(tmp_path, caplog, capsys):
    not_a_dir = tmp_path / "file"
    not_a_dir.write_text("")
    with caplog.at_level(logging.WARNING, logger="flowrl.cli"):
        code = main(["train", "pg", "--env", "CartPole-v1", *FAST_PG, "--stop-iters", "3",
                     "--checkpoint-freq", "1", "--checkpoint-dir", str(not_a_dir),
                     "--run-dir", str(tmp_path / "runs"), "--quiet", "--no-tensorboard"])
    assert code == 1 and "cannot save checkpoint" in capsys.readouterr().err   # the final one
    (run_dir,) = list((tmp_path / "runs").iterdir())
    assert [r["num_checkpoints_skipped"] for r in results(run_dir)] == [1, 2, 3]
    skips = [r for r in caplog.records if "skipped" in r.getMessage()]
    assert len(skips) == 1 and "iteration 1" in skips[0].getMessage()


def test_evaluate_prints_mean_and_std(trained, capsys):
    assert main(["evaluate", str(trained / "checkpoint"), "--episodes", "3", "--seed", "0"]) == 0
    out = capsys.readouterr().out
    assert "pg CartPole-v1: 3 episodes, mean return" in out and "+-" in out
    assert main(["evaluate", str(trained), "--episodes", "1"]) == 0     # a run directory
    assert main(["evaluate", str(trained / "nothing")]) == 2
    assert "no checkpoint at" in capsys.readouterr().err


def _wait_for(predicate, proc, what, timeout=120):
    deadline = time.monotonic() + timeout
    while not predicate():
        if proc.poll() is not None:
            raise AssertionError(f"{what}: the process exited with {proc.returncode}: "
                                 f"{proc.stderr.read()}")
        if time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"{what}: timed out")
        time.sleep(0.05)


def test_sigkill_at_any_moment_resumes_and_ctrl_c_checkpoints(tmp_path):
    """A real training process is SIGKILLed at a random moment after its second
    checkpoint; a new one resumes from the latest complete checkpoint with counters
    that only grow; Ctrl-C then writes a final checkpoint and exits 130."""
    ckpts = tmp_path / "ckpts"
    cmd = [sys.executable, "-m", "flowrl.cli", "train", "pg", "--env", "CartPole-v1",
           *FAST_PG, "--stop-iters", "100000", "--checkpoint-freq", "1", "--keep-checkpoints",
           "3", "--checkpoint-dir", str(ckpts), "--quiet", "--no-tensorboard"]
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    first = subprocess.Popen([*cmd, "--run-dir", str(tmp_path / "a"), "--seed", "0"],
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    _wait_for(lambda: len(checkpoint.list_checkpoints(str(ckpts))) >= 2, first, "first run")
    time.sleep(random.Random(0).uniform(0, 0.3))
    first.send_signal(signal.SIGKILL)
    first.wait(timeout=60)
    last = checkpoint.read_checkpoint(str(ckpts))["metrics"]["counters"]

    second = subprocess.Popen([*cmd, "--run-dir", str(tmp_path / "b"), "--restore", str(ckpts)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    run_dir = tmp_path / "b"
    _wait_for(lambda: run_dir.exists() and any(
        (d / "result.jsonl").exists() and (d / "result.jsonl").read_text().count("\n") >= 2
        for d in run_dir.iterdir()), second, "resumed run")
    second.send_signal(signal.SIGINT)
    out, err = second.communicate(timeout=120)
    assert second.returncode == 130, err
    assert "stopped: interrupted" in out
    (d,) = list(run_dir.iterdir())
    rs = results(d)
    iters = [r["training_iteration"] for r in rs]
    assert iters == list(range(last["training_iteration"] + 1, iters[-1] + 1))
    steps = [last["num_steps_sampled"]] + [r["timesteps_total"] for r in rs]
    assert steps == sorted(set(steps))                   # strictly growing
    final = checkpoint.read_checkpoint(str(ckpts))
    assert final["metrics"]["counters"]["training_iteration"] == iters[-1]
    assert len(checkpoint.list_checkpoints(str(ckpts))) == 3
    assert not [n for n in os.listdir(ckpts) if n.startswith(".")]


def test_bad_algo_and_env_exit_2(capsys):
    assert main(["train", "dqnx", "--env", "CartPole-v1"]) == 2
    err = capsys.readouterr().err
    assert "dqnx" in err and "ppo" in err
    assert main(["train", "ppo", "--env", "NoSuchEnv-v0"]) == 2
    assert "NoSuchEnv-v0" in capsys.readouterr().err
    assert main(["train", "ppo"]) == 2
    assert "give the env" in capsys.readouterr().err
    assert main(["train", "ppo", "--env", "CartPole-v1", "--stop-iters", "0"]) == 2
    assert "--stop-iters: 0 is not >= 1" in capsys.readouterr().err


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


FAKE_IMAGES = {"png": b"\x89PNG\r\n\x1a\n", "svg": b"<svg>\n"}


@pytest.mark.parametrize("fmt", ["png", "svg"])
def test_plan_writes_an_image_to_stdout_byte_for_byte(fmt, tmp_path):
    """``flowrl plan ppo --format svg`` (the README's line) without -o: the image's
    bytes on stdout, unchanged. A stand-in ``dot`` on PATH prints a fixed header
    (PNG's, with its CR LF, ^Z and non-UTF-8 byte) and then the DOT file it got."""
    fake = tmp_path / "bin" / "dot"
    fake.parent.mkdir()
    header = "".join(f"\\{b:03o}" for b in FAKE_IMAGES[fmt])
    fake.write_text(f"#!/bin/sh\nprintf '{header}'\ncat \"$2\"\n")
    fake.chmod(0o755)
    out = subprocess.run([sys.executable, "-m", "flowrl.cli", "plan", "ppo", "--format", fmt],
                         capture_output=True, timeout=120, cwd=tmp_path,
                         env={**os.environ, "PYTHONWARNINGS": "ignore",
                              "PATH": f"{fake.parent}{os.pathsep}{os.environ['PATH']}"})
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.startswith(FAKE_IMAGES[fmt] + b"digraph"), out.stdout[:40]
    assert b'"ppo/train"' in out.stdout and b"wrote" not in out.stdout


def test_plan_refuses_png_bytes_on_a_terminal(monkeypatch, capsys):
    monkeypatch.setattr("flowrl.cli._is_terminal", lambda stream: True)
    assert main(["plan", "pg", "--format", "png"]) == 2
    assert "give -o FILE.png or redirect stdout" in capsys.readouterr().err


def test_console_entry_point(tmp_path):
    out = subprocess.run([sys.executable, "-m", "flowrl.cli", "plan", "a2c"],
                         capture_output=True, text=True, timeout=60, cwd=tmp_path,
                         env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("digraph") and "a2c/train" in out.stdout


@pytest.mark.parametrize("algo, node", [("ddpg", "ddpg/train"), ("td3", "td3/train"),
                                        ("apex_ddpg", "apex_ddpg/learning_starts")])
def test_plan_of_a_continuous_action_algorithm_needs_no_env(algo, node, capsys):
    # its example env (Pendulum-v1) stands in for CartPole-v1, which it cannot take
    assert main(["plan", algo]) == 0
    assert f'"{node}"' in capsys.readouterr().out


@pytest.mark.ray
@pytest.mark.timeout(180)
def test_plan_of_ddppo_on_ray_with_a_backend_override(ray_session, capsys):
    # the plan is built on the local backend unless --set backend=... says otherwise;
    # DD-PPO's needs Ray's worker processes
    assert main(["plan", "ddppo", "--num-workers", "1", "--set", "backend=ray"]) == 0
    assert '"ddppo/' in capsys.readouterr().out
    assert main(["plan", "ddppo"]) == 2
    assert "use backend='ray'" in capsys.readouterr().err


def test_plan_with_overrides_shows_the_aggregators_and_catches_typos(capsys):
    assert main(["plan", "impala", "--set", "num_aggregation_workers=1"]) == 0
    dot = capsys.readouterr().out
    assert "subgraph cluster_aggregators" in dot and "learner_thread.inqueue" in dot
    assert main(["plan", "impala", "--set", "num_agregation_workers=1"]) == 2
    assert "did you mean 'num_aggregation_workers'?" in capsys.readouterr().err
