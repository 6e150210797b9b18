"""Every script in examples/ runs (fast settings: CI=true) and does what it says."""

from __future__ import annotations

import os
import runpy
import shutil
import socket
import subprocess
import sys
import tempfile

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLES = os.path.join(ROOT, "examples")


def run_example(name: str, monkeypatch, *args: str):
    """Run ``examples/<name>`` in this process as ``__main__`` would, returning what
    its ``main()`` returned."""
    monkeypatch.setenv("CI", "true")
    monkeypatch.setattr(sys, "argv", [name, *args])
    namespace = runpy.run_path(os.path.join(EXAMPLES, name), run_name="example")
    return namespace["main"](list(args))


def test_custom_plan(monkeypatch, tmp_path, capsys):
    out = run_example("custom_plan.py", monkeypatch, "--out", str(tmp_path))
    assert out["path"].startswith(str(tmp_path)) and os.path.exists(out["path"])
    items = [x for g in out["groups"] for x in g]
    assert sorted(x for x in items if isinstance(x, int)) == [x * x for x in range(0, 20, 2)]
    assert [x for x in items if isinstance(x, str)] == [f"tick-{i}" for i in range(20)]
    assert out["stats"]["square"]["items_in"] == 20
    assert capsys.readouterr().out.startswith('digraph "custom"')


def test_ppo_by_hand_equals_the_library_ppo(monkeypatch, capsys):
    out = run_example("ppo_by_hand.py", monkeypatch)
    assert out["by_hand"] == out["library"] and len(out["by_hand"]) == 2
    assert "identical: True" in capsys.readouterr().out


def test_tree_aggregation(monkeypatch):
    results = run_example("tree_aggregation.py", monkeypatch)
    assert [r["training_iteration"] for r in results] == [1, 2, 3]
    assert all(r["info"]["num_steps_trained"] >= 200 * r["training_iteration"] for r in results)


def test_learner_thread_keeps_sampling_within_bounds_of_learning(monkeypatch):
    results = run_example("learner_thread.py", monkeypatch)
    trained = [r["info"]["num_steps_trained"] for r in results]
    assert trained == sorted(trained) and trained[-1] > trained[0] > 0
    # bounded queues: sampling runs at most a few batches ahead of the learner
    assert all(r["timesteps_total"] - r["info"]["num_steps_trained"] <= 2000 for r in results)


def test_custom_env_learns(monkeypatch):
    curve = run_example("custom_env.py", monkeypatch)
    assert len(curve) == 4 and curve[-1] > curve[0]



def test_lstm_stateless_cartpole_trains_with_and_without_memory(monkeypatch):
    curves = run_example("lstm_stateless_cartpole.py", monkeypatch)
    assert set(curves) == {"lstm", "no lstm"}
    for curve in curves.values():
        steps = [s for s, _ in curve]
        assert steps == sorted(steps) and steps[-1] >= 6144
        assert all(m > 0 for _, m in curve)   # not NaN: episodes finished every iteration


def test_pixels_trains_a_cnn_on_minatar(monkeypatch):
    pytest.importorskip("minatar")
    out = run_example("pixels.py", monkeypatch)
    assert out["model"] == "VisionNetwork"
    assert out["curve"][-1][0] >= 4096 and all(m >= 0 for _, m in out["curve"])

def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


CLUSTER = """
import sys
from ray.cluster_utils import Cluster
cluster = Cluster(initialize_head=True, head_node_args={
    "num_cpus": 2, "gcs_server_port": int(sys.argv[1]), "include_dashboard": False})
print(cluster.address, flush=True)
sys.stdin.read()            # until the test closes stdin
cluster.shutdown()
"""


@pytest.mark.ray
def test_ray_cluster_example_trains_on_a_cluster_address():
    """A separate head node in a subprocess (its own RAY_TMPDIR, so no other Ray user
    on this machine sees it as "the current cluster"); the example connects by
    address, trains, disconnects; the head is shut down."""
    tmp = tempfile.mkdtemp(prefix="frl")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    env.update(RAY_TMPDIR=tmp, CI="true", PYTHONWARNINGS="ignore")
    head = subprocess.Popen([sys.executable, "-c", CLUSTER, str(_free_port())], env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        address = head.stdout.readline().strip()
        assert address, "the head node did not start"
        out = subprocess.run([sys.executable, os.path.join(EXAMPLES, "ray_cluster.py"),
                              "--address", address], env=env, capture_output=True, text=True,
                             timeout=240)
        assert out.returncode == 0, out.stderr[-3000:]
        assert f"connected to {address}: 1 node(s), 2 CPUs" in out.stdout
        assert "worker 1 on" in out.stdout and "worker 2 on" in out.stdout
        assert "iter   1  steps    128" in out.stdout
    finally:
        head.stdin.close()
        try:
            head.wait(timeout=60)
        except subprocess.TimeoutExpired:
            head.kill()
            head.wait()
        shutil.rmtree(tmp, ignore_errors=True)


def test_custom_model_trains_unchanged(monkeypatch, capsys):
    curve = run_example("custom_model.py", monkeypatch)
    assert len(curve) == 4 and curve[-1] > curve[0]
    assert capsys.readouterr().out.startswith("ResidualMLP on local")
