"""Model-based hooks and the Dyna-style example plan."""

from __future__ import annotations

import importlib.util
import os

import numpy as np
import pytest

import flowrl
from flowrl.errors import ConfigError
from flowrl.ops import set_policy_with_env_fn
from flowrl.ops.model_based import ensemble_weights

EXAMPLE = os.path.join(os.path.dirname(__file__), os.pardir, "examples", "model_based.py")


def _example():
    spec = importlib.util.spec_from_file_location("model_based_example", EXAMPLE)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_dyna_plan_syncs_models_and_stats_and_the_model_loss_falls():
    ex = _example()
    workers = ex.make_workers("local", num_workers=2, seed=0)
    try:
        local = workers.local_worker().get_policy()
        assert local.termination_fn is ex.CartPoleWithModelFns.termination_fn
        remotes = workers.remote_workers()
        assert all(w.get_policy().reward_fn is not None for w in remotes)
        run = flowrl.Plan(ex.build(workers)).compile(seed=0)
        losses = []
        for _ in range(3):
            result = next(run)
            losses.append(result["dynamics_loss"])
            assert result["imagined_steps"] > 0
            want = ensemble_weights(workers.local_worker())["default_policy"]
            norms = local.dynamics_model.normalizations
            for w in remotes:
                got = ensemble_weights(w)["default_policy"]
                assert all(np.array_equal(want[k], got[k]) for k in want)
                theirs = w.get_policy().dynamics_model.normalizations
                assert all(np.array_equal(norms[k], theirs[k]) for k in norms)
        run.stop()
        assert losses[-1] < 0.5 * losses[0], losses
    finally:
        workers.stop()


def test_set_policy_with_env_fn_rejects_unknown_types():
    ex = _example()
    workers = ex.make_workers("local", num_workers=0)
    try:
        assert set_policy_with_env_fn(workers, "dynamics") == 0  # the env has none
        with pytest.raises(ConfigError, match="fn_type='value'"):
            set_policy_with_env_fn(workers, "value")
    finally:
        workers.stop()
