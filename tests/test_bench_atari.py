"""The Atari benchmarks' own logic, in seconds: ``atari_throughput``'s window, its
equal model, its skip reasons and table, ``atari_learning``'s 100-game score curve
and table, and ``pong_ball``'s contrast of the ball. No timing is asserted; the
runs themselves are the lead's (idle machine).
"""

from __future__ import annotations

import argparse
import json
import math
import queue
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import atari_learning  # noqa: E402
import atari_throughput  # noqa: E402
import pong_ball  # noqa: E402


def _run(system: str, seed: int = 0, **result) -> dict:
    return {"system": system, "seed": seed, "valid": True, "ok": True, "timed_out": False,
            "result": result}


class FakeClock:
    def __init__(self):
        self.t = 100.0

    def __call__(self) -> float:
        return self.t


@pytest.mark.timeout(10)
def test_window_counts_only_the_steps_after_the_warmup(monkeypatch):
    clock = FakeClock()
    monkeypatch.setattr(atari_throughput.time, "perf_counter", clock)
    w = atari_throughput.Window(warmup=2.0, seconds=4.0)
    going = []
    for _ in range(10):  # 100 steps every second
        going.append(w.add(100))
        clock.t += 1.0
    # the window opens at t=102 (300 steps so far) and closes at t=106 (700 steps)
    assert going == [True] * 6 + [False] * 4
    r = w.result()
    assert r["window_steps"] == 400 and r["window_s"] == 4.0
    assert r["agent_steps_per_s"] == 100.0 and r["frames_per_s"] == 400.0
    assert r["first_result_s"] >= 0  # from process start, at the first add


@pytest.mark.timeout(10)
def test_window_without_its_end_is_an_error():
    with pytest.raises(RuntimeError, match="did not close"):
        atari_throughput.Window(warmup=0.0, seconds=60.0).result()


@pytest.mark.timeout(120)  # the first test here to import torch and flowrl, on a loaded machine
@pytest.mark.parametrize("model", sorted(atari_throughput.MODELS))
def test_the_plain_loop_runs_flowrl_s_model(model):
    """Equal model: the plain loop's torch CNN has flowrl's layers, weight for weight."""
    import gymnasium as gym
    import numpy as np
    import torch

    from flowrl.models import ModelConfig
    from flowrl.models.visionnet import VisionNetwork
    space = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    ours = VisionNetwork(space, gym.spaces.Discrete(6), 6,
                         ModelConfig.coerce(atari_throughput.flowrl_model(model)), "m")
    plain = atari_throughput.conv_net(model, 4, 6)
    shapes = sorted(tuple(p.shape) for p in plain.parameters())
    assert shapes == sorted(tuple(p.shape) for p in ours.parameters())
    logits, value = plain(torch.zeros(3, 4, 84, 84, dtype=torch.uint8))
    assert tuple(logits.shape) == (3, 6) and tuple(value.shape) == (3,)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("kind", ["ale-raw", "plain-loop", "flowrl-sample"])
def test_the_per_core_loops_step_pong(kind):
    pytest.importorskip("ale_py")
    out = queue.Queue()
    args = {"envs_per_worker": 2, "fragment": 8, "model": "small", "warmup": 0.0,
            "seconds": 0.3}
    atari_throughput._loop_worker(kind, args, 0, out)
    r = out.get_nowait()
    assert r["window_steps"] > 0 and r["frames_per_s"] == pytest.approx(
        4 * r["window_steps"] / r["window_s"])


@pytest.mark.timeout(60)
def test_a_missing_sample_factory_venv_is_skipped_with_the_way_to_make_it(tmp_path):
    reasons = atari_throughput.skip_reasons(["ale-raw", "sf-appo"], str(tmp_path / "python"))
    assert list(reasons) == ["sf-appo"]
    assert "setup_sample_factory.sh" in reasons["sf-appo"]


@pytest.mark.timeout(30)
def test_throughput_table_gives_ratios_targets_and_skips(capsys):
    runs = [_run("ale-raw", frames_per_s=10_000.0), _run("plain-loop", frames_per_s=5_000.0),
            _run("flowrl-sample", frames_per_s=4_000.0),
            _run("flowrl-impala", frames_per_s=4_500.0), _run("flowrl-impala", 1,
                                                                frames_per_s=3_500.0),
            _run("rllib-impala", frames_per_s=1_000.0),
            {"system": "sb3-ppo", "seed": 0, "valid": False, "ok": False, "result": None}]
    systems = ["ale-raw", "plain-loop", "flowrl-sample", "flowrl-impala", "rllib-impala", "sf-appo",
               "sb3-ppo"]
    meta = {"workers": 2, "envs_per_worker": 4, "fragment": 50, "model": "nature"}
    atari_throughput.report(runs, systems, {"sf-appo": "no venv"}, meta)
    lines = capsys.readouterr().out.splitlines()

    def row(name):
        return next(ln for ln in lines if ln.startswith(name))
    assert "4,000 [3,500-4,500]" in row("flowrl-impala") and "0.40" in row("flowrl-impala")
    assert "0.25x" in row("rllib-impala")  # 1,000 / median 4,000
    assert "skipped" in row("sf-appo") and "no venv" in row("sf-appo")
    assert "0 runs (1 failed)" in row("sb3-ppo")
    assert "0.80x" in row("flowrl sampling") and "ok" in row("flowrl sampling")
    assert "4.00x" in row("flowrl IMPALA vs RLlib") and "ok" in row("flowrl IMPALA vs RLlib")
    assert row("flowrl APPO vs Sample Factory").split("|")[1].strip() == "-"


@pytest.mark.timeout(30)
def test_throughput_options():
    args = atari_throughput.parse(["--quick"])
    assert args.seconds <= 4.0 and args.seeds == 1 and args.model == "nature"
    with pytest.raises(SystemExit):
        atari_throughput.parse(["--workers", "0"])
    with pytest.raises(SystemExit):
        atari_throughput.parse(["--model", "resnet"])


@pytest.mark.timeout(30)
def test_setup_sample_factory_script_parses():
    subprocess.run(["bash", "-n", str(ROOT / "benchmarks" / "setup_sample_factory.sh")],
                   check=True, timeout=20)


@pytest.mark.timeout(10)
def test_learning_curve_times_zero_and_the_target_on_full_windows_only(monkeypatch):
    now = [0.0]
    monkeypatch.setattr(atari_learning.harness, "since_start", lambda: now[0])
    c = atari_learning.Curve(target=18.0, every_s=10.0)
    c.add([5.0] * 50)  # a mean of +5 over 50 games is not yet the 100-game measure
    now[0] = 60.0
    c.update(1000)
    assert c.at_zero is None
    c.add([-21.0] * 50)
    now[0] = 65.0
    c.update(2000)  # full window, mean -8; 5 s after the last point: no new point
    assert c.at_zero is None and len(c.points) == 1
    c.add([20.0] * 100)
    now[0] = 120.0
    c.update(9000)
    assert c.at_zero == (120.0, 9000) and c.at_target == (120.0, 9000)
    r = c.result()
    assert r["reached"] and r["final_score"] == 20.0 and r["episodes"] == 200
    assert [p[:2] for p in r["curve"]] == [[60.0, 1000], [120.0, 9000]]


@pytest.mark.timeout(10)
def test_learning_table_keeps_missed_runs_out_of_the_target_times(capsys):
    base = {"to_zero_steps": 2e6, "best_score": 0.0, "steps_per_s": 900.0,
            "env_steps": 4e6, "startup_s": 20.0, "from_start_s": 5400.0, "curve": [
                [60.0, 50_000, -20.5, 30], [2400.0, 2_000_000, 1.0, 900]]}
    runs = [_run("flowrl-impala", 0, **{**base, "reached": True, "to_zero_s": 1800.0,
                                        "to_target_s": 3600.0, "to_target_steps": 3e6,
                                        "final_score": 18.2}),
            _run("flowrl-impala", 1, **{**base, "reached": False, "to_zero_s": 2400.0,
                                        "to_target_s": None, "to_target_steps": None,
                                        "final_score": 12.0}),
            _run("flowrl-ppo", 0, **{**base, "reached": False, "to_zero_s": 2400.0,
                                     "to_target_s": None, "to_target_steps": None,
                                     "final_score": 12.0, "screen_size": 42})]
    atari_learning.report(runs, 18.0, 90.0)
    out = capsys.readouterr().out
    assert "curve flowrl-impala seed 0 (min from start, env steps: score): 1.0 min 0.05M: -20.5" \
        in out
    reached = next(ln for ln in out.splitlines() if "reached 1/2" in ln and "not" not in ln)
    missed = next(ln for ln in out.splitlines() if "not reached 1/2" in ln)
    assert "30.0 [30.0-30.0]" in reached and "60.0 [60.0-60.0]" in reached
    assert "40.0 [40.0-40.0]" in missed and "60.0" not in missed
    # the frame size each system trained on (84 for runs saved before it was recorded)
    assert "| 84x84 " in reached and "| 42x42 " in next(
        ln for ln in out.splitlines() if ln.startswith("flowrl-ppo"))


@pytest.mark.timeout(30)
def test_learning_options():
    args = atari_learning.parse(["--quick"])
    assert args.budget_min == 1.0 and args.seeds == 1 and args.run_timeout == 660.0
    assert atari_learning.spec_path(args, "appo").endswith("tuned_examples/appo-pong.yaml")
    with pytest.raises(SystemExit):
        atari_learning.parse(["--algo", "impala", "ppo", "--config", str(
            ROOT / "tuned_examples" / "impala-pong.yaml")])
    with pytest.raises(SystemExit):
        atari_learning.parse(["--budget-min", "0"])


@pytest.mark.timeout(10)
def test_every_pong_spec_exists_and_a_curve_without_games_has_no_score():
    for algo in atari_learning.ALGOS:
        assert Path(atari_learning.spec_path(argparse.Namespace(config=None), algo)).exists()
    curve = atari_learning.Curve(18, 1)
    curve.update(10)  # no game has ended: the point has no score (null in the JSON)
    empty = curve.result()
    assert math.isnan(empty["best_score"]) and not empty["reached"]
    assert empty["curve"][0][1:] == [10, None, 0]


@pytest.mark.timeout(30)
def test_compare_reads_saved_runs_at_equal_steps_and_minutes(tmp_path, capsys):
    def saved(name, curve, env_steps, from_start_s, valid=True):
        run = {**_run("flowrl-ppo", 0, curve=curve, env_steps=env_steps,
                      from_start_s=from_start_s), "valid": valid}
        path = tmp_path / name
        path.write_text(json.dumps({"commit": "abcdef1234", "runs": [run]}))
        return str(path)

    fast = saved("fast.json", [[600.0, 500_000, -20.0, 10], [1500.0, 1_000_000, -15.0, 90],
                               [2690.0, 2_000_000, -4.0, 400]], 2_010_000, 2700.5)
    short = saved("short.json", [[600.0, 400_000, None, 0], [2000.0, 1_200_000, -19.0, 60]],
                  1_200_000, 2000.0, valid=False)
    atari_learning.main(["--compare", fast, short, "--at-steps", "0.5", "1.1", "2",
                         "--at-min", "45"])
    lines = capsys.readouterr().out.splitlines()
    fast_row = next(ln for ln in lines if ln.startswith("fast.json"))
    short_row = next(ln for ln in lines if ln.startswith("short.json"))
    assert [c.strip() for c in fast_row.split("|")[1:]] == ["abcdef1", "-20.0", "-15.0",
                                                            "-4.0", "-4.0"]
    # no game before 1.2M steps there, and it ended before 2M steps and 45 minutes
    assert "(invalid)" in short_row
    assert [c.strip() for c in short_row.split("|")[1:]] == ["abcdef1", "-", "-", "-", "-"]
    with pytest.raises(SystemExit):
        atari_learning.parse(["--compare", str(tmp_path / "missing.json")])


@pytest.mark.timeout(60)
def test_pong_ball_contrast_is_full_in_the_raw_screen_and_fades_with_the_frame_side(
        tmp_path, capsys):
    pytest.importorskip("ale_py")
    pong_ball.main(["--quick", "--seeds", "1", "--sizes", "84", "42", "--results-dir",
                    str(tmp_path)])
    doc = json.loads(next(tmp_path.glob("pong_ball-*.json")).read_text())
    found = doc["contrast"]
    assert doc["seeds"] == [0] and len(found["raw"]) >= 5
    # the ball (grey 236 in RGB) stands 149 grey levels above Pong's background
    assert set(found["raw"]) == {149}
    assert len(found["84"]) == len(found["42"]) == len(found["raw"])
    assert all(0 < c <= 149 for c in found["84"] + found["42"])
    assert sorted(found["42"])[len(found["42"]) // 2] < sorted(found["84"])[len(found["84"]) // 2]
    assert "42x42 |" in capsys.readouterr().out


TINY_PPO = """algo: ppo
env: ALE/Pong-v5
stop: {timesteps_total: 1000}
config:
  num_workers: 1
  num_envs_per_worker: 2
  rollout_fragment_length: 16
  train_batch_size: 32
  sgd_minibatch_size: 16
  num_sgd_iter: 3
  lr_schedule: [[0, 0.0004], [1000, 0.0]]
  clip_param: 0.1
  vf_clip_param: 0.2
  vf_loss_coeff: 0.25
  entropy_coeff: 0.01
  grad_clip: 0.7
  adam_epsilon: 1.0e-5
  env_config: {screen_size: 42}
  model: {conv_filters: [[16, 4, 2], [32, 4, 2]], post_fcnet_hiddens: [64],
          vf_share_layers: true}
"""


@pytest.mark.timeout(120)
def test_sb3_ppo_takes_every_setting_and_the_cnn_from_the_ppo_spec(tmp_path):
    pytest.importorskip("ale_py")
    pytest.importorskip("stable_baselines3")
    import torch

    from flowrl.models.visionnet import VisionNetwork
    spec = tmp_path / "ppo.yaml"
    spec.write_text(TINY_PPO)
    args = argparse.Namespace(config=str(spec), seed=0)
    _, config = atari_learning.load(args, "ppo")
    algo = atari_learning.sb3_ppo(config, 0, 1000)
    assert (algo.n_envs, algo.n_steps, algo.batch_size, algo.n_epochs) == (2, 16, 16, 3)
    assert (algo.clip_range(1.0), algo.clip_range_vf(1.0)) == (0.1, 0.2)
    assert (algo.vf_coef, algo.ent_coef, algo.max_grad_norm) == (0.25, 0.01, 0.7)
    assert algo.policy.optimizer.defaults["eps"] == 1e-5
    # the spec's schedule over env steps: progress 0.75 left is step 250 of 1,000
    assert algo.lr_schedule(0.75) == pytest.approx(3e-4)
    assert algo.observation_space.shape == (4, 42, 42)
    flowrl_net = VisionNetwork(algo.observation_space, algo.action_space, 6, config.model, "f")
    layers = [type(x).__name__ + str(getattr(x, "weight", torch.empty(0)).shape)
              for x in flowrl_net.trunk]
    assert [type(x).__name__ + str(getattr(x, "weight", torch.empty(0)).shape)
            for x in algo.policy.features_extractor.trunk] == layers
    for head, gain in ((algo.policy.action_net, 0.01), (algo.policy.value_net, 1.0)):
        w = head.weight.detach()  # orthogonal rows of norm ``gain``, as flowrl's heads
        assert torch.allclose(w @ w.T, gain ** 2 * torch.eye(w.shape[0]), atol=1e-6)
        assert not head.bias.detach().any()
    algo.learn(total_timesteps=64)
    assert algo.num_timesteps == 64
    with pytest.raises(SystemExit, match="kl_coeff, model.vf_share_layers"):
        spec.write_text(TINY_PPO.replace("  clip_param", "  kl_coeff: 0.2\n  clip_param")
                        .replace("vf_share_layers: true", "vf_share_layers: false"))
        atari_learning.sb3_ppo(atari_learning.load(args, "ppo")[1], 0, 1000)


def test_sb3_ppo_is_a_system_of_its_own_beside_flowrls():
    args = atari_learning.parse(["--algo", "ppo", "sb3-ppo"])
    assert [atari_learning.system_name(a) for a in args.algo] == ["flowrl-ppo", "sb3-ppo"]
