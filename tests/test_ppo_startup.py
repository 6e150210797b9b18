"""PPO's start-up path: a torch-free algorithm import, and the policy's import
overlapping ``ray.init`` (which stays on the main thread)."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from flowrl.algorithms import base

ROOT = Path(__file__).resolve().parents[1]


def test_importing_ppo_does_not_import_torch_until_it_is_built():
    code = ("import sys; from flowrl.algorithms import PPO, PPOConfig; "
            "print('torch' in sys.modules); "
            "from flowrl.policies import PPOPolicy; print(PPO.policy_class is PPOPolicy)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["False", "True"]


def test_algorithms_package_resolves_every_name_lazily():
    import flowrl.algorithms as algorithms
    assert sorted(algorithms.ALGORITHMS) == ["a2c", "a3c", "apex", "apex_ddpg", "appo", "bc",
                                             "cql", "ddpg", "ddppo", "dqn", "impala",
                                             "marwil", "pg", "ppo", "sac", "td3"]
    assert all(hasattr(algorithms, name) for name in algorithms.__all__)
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchAlgo'"):
        algorithms.NoSuchAlgo  # noqa: B018


class _FakeRay:
    """Stands in for the ``ray`` module: records how ``ray.init`` was called."""

    def __init__(self, probe: str):
        self.calls: list[dict] = []
        self.probe = probe

    def is_initialized(self) -> bool:
        return False

    def init(self, **kwargs):
        # the preload runs meanwhile, in its own thread; wait until it has imported
        for _ in range(200):
            if self.probe in sys.modules:
                break
            threading.Event().wait(0.05)
        self.calls.append({**kwargs, "main": threading.current_thread() is threading.main_thread(),
                           "preloaded": self.probe in sys.modules})


@pytest.fixture
def probe_module(tmp_path, monkeypatch):
    name = "flowrl_preload_probe"
    (tmp_path / f"{name}.py").write_text(
        "import threading\nTHREAD = threading.current_thread().name\n")
    (tmp_path / "flowrl_preload_broken.py").write_text("raise ImportError('broken on purpose')\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield name
    for mod in (name, "flowrl_preload_broken"):
        sys.modules.pop(mod, None)


@pytest.mark.parametrize("address,expect", [
    (None, {"address": None, "num_cpus": 3, "include_dashboard": False}),
    ("local", {"address": "local", "num_cpus": 3, "include_dashboard": False}),
    ("10.0.0.1:6379", {"address": "10.0.0.1:6379"}),
])
def test_ensure_ray_inits_on_the_main_thread_while_the_preload_imports(
        monkeypatch, probe_module, address, expect):
    fake = _FakeRay(probe_module)
    monkeypatch.setitem(sys.modules, "ray", fake)
    if address is None:
        monkeypatch.delenv("RAY_ADDRESS", raising=False)
    else:
        monkeypatch.setenv("RAY_ADDRESS", address)
    base.ensure_ray(3.5, preload=["flowrl_preload_broken", probe_module]
                    if address == "local" else [probe_module])
    (call,) = fake.calls
    assert {k: call[k] for k in expect} == expect
    assert call["log_to_driver"] is False and call["main"] and call["preloaded"]
    if address and address != "local":
        assert "num_cpus" not in call and "include_dashboard" not in call
    assert sys.modules[probe_module].THREAD == "flowrl-preload"


def test_a_preload_that_fails_is_reported_by_the_callers_own_import(monkeypatch, probe_module):
    fake = _FakeRay(probe_module)
    monkeypatch.setitem(sys.modules, "ray", fake)
    monkeypatch.delenv("RAY_ADDRESS", raising=False)
    base.ensure_ray(1, preload=["flowrl_preload_broken", probe_module])
    assert len(fake.calls) == 1 and "flowrl_preload_broken" not in sys.modules
    with pytest.raises(ImportError, match="broken on purpose"):
        import flowrl_preload_broken  # noqa: F401
