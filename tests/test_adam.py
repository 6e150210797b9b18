"""FusedAdam: torch's fused Adam update, state in torch's layout, no torch._dynamo."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from flowrl.errors import ConfigError
from flowrl.policies.adam import FusedAdam

ROOT = Path(__file__).resolve().parents[1]


def _model(seed: int) -> torch.nn.Module:
    torch.manual_seed(seed)
    return torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Linear(16, 2))


def _train(model, opt, steps: int, seed: int, skip_bias_at: int | None = None) -> None:
    g = torch.Generator().manual_seed(seed)
    for t in range(steps):
        x, y = torch.randn(32, 4, generator=g), torch.randn(32, 2, generator=g)
        opt.zero_grad(set_to_none=True)
        ((model(x) - y) ** 2).mean().backward()
        if t == skip_bias_at:   # a parameter without a gradient skips this step
            model[2].bias.grad = None
        opt.step()


def test_updates_are_identical_to_torch_fused_adam():
    ours, ref = _model(0), _model(0)
    opt_ours = FusedAdam(ours.parameters(), lr=3e-3)
    opt_ref = torch.optim.Adam(ref.parameters(), lr=3e-3, fused=True)
    _train(ours, opt_ours, 25, seed=1, skip_bias_at=3)
    _train(ref, opt_ref, 25, seed=1, skip_bias_at=3)
    for a, b in zip(ours.parameters(), ref.parameters()):
        assert torch.equal(a, b)
    mine, theirs = opt_ours.state_dict(), opt_ref.state_dict()
    assert mine["param_groups"][0].keys() == theirs["param_groups"][0].keys()
    for i, s in theirs["state"].items():
        for k, v in s.items():
            assert torch.equal(mine["state"][i][k], v), (i, k)


def test_state_moves_between_torch_adam_and_fused_adam():
    ref = _model(0)
    opt_ref = torch.optim.Adam(ref.parameters(), lr=1e-2, fused=True)
    _train(ref, opt_ref, 5, seed=2)
    ours = _model(0)
    ours.load_state_dict(ref.state_dict())
    opt_ours = FusedAdam(ours.parameters(), lr=1.0)
    opt_ours.load_state_dict(opt_ref.state_dict())
    assert opt_ours.lr == 1e-2
    _train(ours, opt_ours, 5, seed=3)
    _train(ref, opt_ref, 5, seed=3)
    for a, b in zip(ours.parameters(), ref.parameters()):
        assert torch.equal(a, b)
    back = torch.optim.Adam(_model(0).parameters(), lr=1e-2, fused=True)
    back.load_state_dict(opt_ours.state_dict())
    assert back.state_dict()["state"][0]["step"].item() == 10


def test_step_post_hooks_run_after_each_step_until_removed():
    model = _model(0)
    opt = FusedAdam(model.parameters(), lr=1e-3)
    seen = []
    handle = opt.register_step_post_hook(lambda o, args, kwargs: seen.append(
        int(o.state_dict()["state"][0]["step"])))
    _train(model, opt, 3, seed=0)
    handle.remove()
    _train(model, opt, 2, seed=0)
    assert seen == [1, 2, 3]


def test_state_for_another_model_is_a_config_error():
    opt = FusedAdam(_model(0).parameters(), lr=1e-3)
    other = FusedAdam([torch.nn.Parameter(torch.zeros(3))], lr=1e-3)
    with pytest.raises(ConfigError, match=r"one group of 4.*same model"):
        opt.load_state_dict(other.state_dict())


def test_a_policy_learns_without_importing_torch_dynamo():
    code = ("import sys, numpy as np, gymnasium as gym\n"
            "from flowrl.policies import PPOPolicy\n"
            "from flowrl.batch import SampleBatch as SB\n"
            "p = PPOPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=0)\n"
            "obs = np.random.default_rng(0).normal(size=(16, 3)).astype(np.float32)\n"
            "a, extra = p.compute_actions(obs)\n"
            "b = SB({SB.OBS: obs, SB.ACTIONS: a, SB.REWARDS: np.ones(16, np.float32),\n"
            "        SB.TERMINATEDS: np.zeros(16, bool), **extra})\n"
            "p.learn_on_batch(p.postprocess_trajectory(b))\n"
            "print(sorted(m for m in ('torch._dynamo',) if m in sys.modules))\n")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]"
