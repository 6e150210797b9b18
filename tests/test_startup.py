"""Start-up paths: light imports, and remote workers created in parallel."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from flowrl.errors import EnvError
from flowrl.policies import PGPolicy
from flowrl.workers import WorkerConfig, WorkerSet

ROOT = Path(__file__).resolve().parents[1]


def test_queue_and_rollout_ops_import_without_torch_or_ray():
    """`import flowrl.ops` (queues, rollouts, metrics) must not pay for torch or Ray."""
    code = ("import sys, flowrl, flowrl.ops; "
            "print(sorted(m for m in ('torch', 'ray', 'gymnasium') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"


def _driver_only_env(driver_pid):
    def create(env_config):
        if os.getpid() != driver_pid:
            raise RuntimeError("this env only builds on the driver")
        import gymnasium as gym
        return gym.make("CartPole-v1")
    return create


@pytest.mark.ray
def test_remote_worker_whose_env_fails_to_build_names_the_env_and_worker(ray_session):
    with pytest.raises(EnvError, match=r"env _driver_only_env\.create raised RuntimeError in "
                                       r"its constructor on worker 1: this env only builds"):
        WorkerSet(_driver_only_env(os.getpid()), PGPolicy,
                  WorkerConfig(rollout_fragment_length=8, num_cpus_per_worker=0),
                  num_workers=1, backend="ray")


@pytest.mark.ray
def test_ray_workers_are_ready_with_the_local_weights_when_the_set_is_built(ray_session):
    ray = ray_session
    ws = WorkerSet("CartPole-v1", PGPolicy,
                   WorkerConfig(rollout_fragment_length=8, seed=3, num_cpus_per_worker=0),
                   num_workers=2, backend="ray")
    try:
        local = ws.local_worker().get_weights()["default_policy"]
        remote = ray.get([w.get_weights.remote() for w in ws.remote_workers()])
        for weights in remote:
            assert sorted(weights["default_policy"]) == sorted(local)
            for k, v in local.items():
                assert (weights["default_policy"][k] == v).all()
    finally:
        ws.stop()
