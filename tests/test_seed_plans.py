"""Every execution plan of the seeds, written in flowrl under examples/seed_plans/, runs."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

PLANS = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "seed_plans")


def _load(name):
    spec = importlib.util.spec_from_file_location(f"seed_plan_{name}",
                                                  os.path.join(PLANS, f"{name}.py"))
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name, trains", [
    ("sample_only", False), ("ppo", True), ("tree_aggregation", True),
    ("local_train_one_step", True), ("local_compute_updates", True), ("async_gradients", True),
])
def test_seed_plan_runs(name, trains):
    module = _load(name)
    results = module.main(["--iters", "2"])
    last = results[-1]
    assert last["training_iteration"] == 2
    assert last["timesteps_total"] > results[0]["timesteps_total"] > 0
    assert (last["info"].get("num_steps_trained", 0) > 0) == trains
    assert last["episodes_total"] > 0


def test_seed_ppo_plan_with_the_multi_gpu_train_op():
    results = _load("ppo").main(["--iters", "1"], simple_optimizer=False)
    assert results[0]["info"]["num_steps_trained"] == 256
    assert "kl" in results[0]["info"]["learner"]["default_policy"]
