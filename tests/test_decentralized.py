"""Decentralized training: ASP deltas, LocalTrainOneStep, LocalComputeUpdates."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

import flowrl
from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError
from flowrl.ops import ForwardUpdates, LocalComputeUpdates, LocalTrainOneStep
from flowrl.policies import PGPolicy
from flowrl.workers import WorkerConfig, WorkerSet

CONFIG = WorkerConfig(rollout_fragment_length=20, seed=0,
                      policy_config={"hidden_sizes": (8,), "lr": 1e-2})


def _batch(policy, n=32, seed=0):
    rng = np.random.default_rng(seed)
    return SampleBatch(obs=rng.normal(size=(n, 4)).astype(np.float32),
                       actions=rng.integers(0, 2, n), advantages=rng.normal(size=n).astype(np.float32))


def test_asp_updates_send_significant_deltas_and_keep_the_rest_pending():
    p = PGPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), hidden_sizes=(8,),
                 lr=1e-2, seed=0)
    w0 = p.get_weights()
    p.set_weights(w0)
    p.learn_on_batch(_batch(p))
    p.asp_accumulate_grads()
    delta = {k: p.get_weights()[k] - w0[k] for k in w0}
    threshold = float(np.median(np.abs(np.concatenate([d.ravel() for d in delta.values()]))))
    updates, nonzero = p.asp_get_updates(threshold)
    for k, d in delta.items():
        big = np.abs(d) > threshold
        np.testing.assert_array_equal(updates[k][big], d[big])
        assert not updates[k][~big].any()
    assert nonzero == sum(int((np.abs(d) > threshold).sum()) for d in delta.values()) > 0
    # what was sent is not sent again; the small rest stays pending until it matters
    assert p.asp_get_updates(threshold)[1] == 0
    rest, n_rest = p.asp_get_updates(0.0)
    assert n_rest > 0
    for k in delta:
        np.testing.assert_allclose(updates[k] + rest[k], delta[k], atol=1e-7)
    # set_weights restarts the count
    p.learn_on_batch(_batch(p, seed=1))
    p.set_weights(w0)
    assert p.asp_get_updates(0.0)[1] == 0


def test_asp_apply_updates_keeps_own_pending_deltas():
    p = PGPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), hidden_sizes=(8,), seed=0)
    w0 = p.get_weights()
    p.set_weights(w0)
    p.learn_on_batch(_batch(p))
    own = {k: p.get_weights()[k] - w0[k] for k in w0}
    other = {k: np.full_like(v, 0.5) for k, v in w0.items()}
    p.asp_apply_updates(other)
    pending, _ = p.asp_get_updates(0.0)
    for k in w0:
        np.testing.assert_allclose(pending[k], own[k], atol=1e-6)
        np.testing.assert_allclose(p.get_weights()[k], w0[k] + own[k] + 0.5, atol=1e-6)


def _check_forwarded(ws):
    """Every remote worker = local worker + its own unsent deltas."""
    local = ws.local_worker().get_weights()["default_policy"]

    def pending_and_weights(worker):
        policy = worker.get_policy()
        return policy.asp_get_updates(0.0)[0], policy.get_weights()

    for pending, weights in ws.foreach_remote_worker(pending_and_weights):
        for k in local:
            np.testing.assert_allclose(weights[k] - pending[k], local[k], atol=1e-5)


def _compute_updates_plan(ws, threshold, gather="gather_async"):
    # gather_sync does not prefetch, so no update is left in flight when the run stops
    updates = getattr(LocalComputeUpdates(ws, threshold), gather)()
    plan = flowrl.Plan(updates.for_each(ForwardUpdates(ws)))
    return plan.compile(seed=0)


def test_local_compute_updates_forwards_deltas_to_everyone_else():
    ws = WorkerSet("CartPole-v1", PGPolicy, CONFIG, num_workers=3, backend="local")
    before = ws.local_worker().get_weights()["default_policy"]
    run = _compute_updates_plan(ws, 1e-3)
    try:
        items = run.take(9)
        assert {info["worker_index"] for info, _ in items} == {1, 2, 3}
        assert all(count == 20 for _, count in items)
        assert run.metrics.counters["num_steps_trained"] == 180
        after = ws.local_worker().get_weights()["default_policy"]
        assert any(not np.array_equal(before[k], after[k]) for k in before)
        _check_forwarded(ws)
    finally:
        run.stop()
        ws.stop()
    with pytest.raises(ConfigError, match="significance_threshold=-1"):
        LocalComputeUpdates(ws, -1)


def test_local_train_one_step_trains_each_worker_on_its_own():
    ws = WorkerSet("CartPole-v1", PGPolicy, CONFIG, num_workers=2, backend="local")
    run = flowrl.Plan(LocalTrainOneStep(ws, num_sgd_iter=2, sgd_minibatch_size=8)
                      .gather_sync()).compile()
    try:
        items = run.take(4)
        assert [i["num_iterations_trained"] for i, _, _ in items] == [1, 1, 2, 2]
        assert all(count == 20 and n == 2 for _, count, n in items)
        assert all("default_policy" in i for i, _, _ in items)
        w1, w2 = ws.foreach_remote_worker(lambda w: w.get_weights()["default_policy"])
        assert any(not np.array_equal(w1[k], w2[k]) for k in w1)  # nobody syncs them
    finally:
        run.stop()
        ws.stop()
    with pytest.raises(ConfigError, match="num_sgd_iter=0"):
        LocalTrainOneStep(ws, num_sgd_iter=0)


@pytest.mark.ray
def test_local_compute_updates_on_ray(ray_session):
    ws = WorkerSet("CartPole-v1", PGPolicy, CONFIG, num_workers=2, backend="ray")
    run = _compute_updates_plan(ws, 1e-3, "gather_sync")
    try:
        items = run.take(6)
        assert [info["worker_index"] for info, _ in items] == [1, 2] * 3
        run.stop()
        _check_forwarded(ws)
    finally:
        run.stop()
        ws.stop()
