"""Off-policy estimation: IS, WIS and FQE against values known in closed form.

The logged data come from a tiny episodic task: ``H`` steps, the observation is
the one-hot step index, action 1 pays 1 and action 0 pays 0. A policy that takes
action 1 with probability ``q`` is worth ``q * Σ_{t<H} γ^t`` exactly. Target
policies are real flowrl policies whose logits are fixed to ``[0, log(q/(1-q))]``.
"""

from __future__ import annotations

import math

import gymnasium as gym
import numpy as np
import pytest

from flowrl.batch import SampleBatch as SB
from flowrl.errors import ConfigError
from flowrl.offline.estimators import (ImportanceSampling, WeightedImportanceSampling,
                                       cumulative_ratios, importance_sampling, method_options,
                                       weighted_importance_sampling)
from flowrl.offline.fqe import FittedQEvaluation, next_observations

H, GAMMA = 5, 0.9


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def true_value(q: float) -> float:
    return q * sum(GAMMA ** t for t in range(H))


def logged(q: float, episodes: int, seed: int = 0) -> SB:
    """``episodes`` episodes of the task acted by the policy taking action 1 with
    probability ``q``, with its ``action_logp``."""
    rng = np.random.default_rng(seed)
    n = episodes * H
    t = np.tile(np.arange(H), episodes)
    actions = (rng.random(n) < q).astype(np.int64)
    return SB(obs=np.eye(H, dtype=np.float32)[t], actions=actions,
              rewards=actions.astype(np.float32), t=t,
              eps_id=np.repeat(np.arange(episodes), H),
              terminateds=t == H - 1, truncateds=np.zeros(n, bool),
              action_logp=np.log(np.where(actions == 1, q, 1 - q)).astype(np.float32))


def fixed_policy(q: float):
    """A PG policy acting with ``P(action 1) = q`` in every state."""
    from flowrl.policies import PGPolicy
    policy = PGPolicy(gym.spaces.Box(0, 1, (H,)), gym.spaces.Discrete(2), seed=0)
    weights = policy.get_weights()
    weights["pi.4.weight"] = np.zeros_like(weights["pi.4.weight"])
    weights["pi.4.bias"] = np.array([0.0, math.log(q / (1 - q))], np.float32)
    policy.set_weights(weights)
    return policy


def test_is_and_wis_estimate_another_policy_within_10_percent():
    data = logged(0.5, 2000)
    for q in (0.8, 0.3):
        target = fixed_policy(q)
        for estimator in (ImportanceSampling(gamma=GAMMA), WeightedImportanceSampling(gamma=GAMMA)):
            est = estimator.estimate(data, target)
            assert est["num_episodes"] == 2000
            assert est["v_behavior"] == pytest.approx(true_value(0.5), rel=0.05)
            assert est["v_target"] == pytest.approx(true_value(q), rel=0.10), (estimator.name, q)
            assert est["v_gain"] == pytest.approx(est["v_target"] / est["v_behavior"])


def test_a_policy_on_its_own_logged_data_is_estimated_at_its_true_return():
    q = 0.7
    data, target = logged(q, 500, seed=3), fixed_policy(q)
    for estimator in (ImportanceSampling(gamma=GAMMA), WeightedImportanceSampling(gamma=GAMMA)):
        est = estimator.estimate(data, target)
        assert est["v_target"] == pytest.approx(est["v_behavior"], rel=1e-5)  # every ratio is 1
        assert est["v_target"] == pytest.approx(true_value(q), rel=0.10)


def test_is_and_wis_closed_form():
    blogp, tlogp = np.log([0.5, 0.5, 0.5]), np.log([1.0, 0.25, 0.5])
    assert cumulative_ratios(blogp, tlogp).tolist() == pytest.approx([2.0, 1.0, 1.0])
    vb, vt = importance_sampling([1.0, 2.0, 4.0], blogp, tlogp, gamma=0.5)
    assert (vb, vt) == pytest.approx((1 + 1 + 1, 2 * 1 + 1 * 0.5 * 2 + 1 * 0.25 * 4))
    # Two one-step episodes: ratios 1.5 and 0.5 average to w = 1, so WIS equals IS here;
    # with ratios 3 and 1 (w = 2) each weight is halved.
    eps = [([2.0], np.log([0.5]), np.log([1.5 * 0.5])), ([2.0], np.log([0.5]), np.log([0.25]))]
    assert [vt for _, vt in weighted_importance_sampling(eps, gamma=1.0)] == \
        pytest.approx([3.0, 1.0])
    eps = [([2.0], np.log([0.25]), np.log([0.75])), ([2.0], np.log([0.5]), np.log([0.5]))]
    assert [vt for _, vt in weighted_importance_sampling(eps, gamma=1.0)] == \
        pytest.approx([3.0, 1.0])


def test_fitted_q_evaluation_learns_the_target_values():
    data = logged(0.5, 400)
    for q in (0.8, 0.2):
        target = fixed_policy(q)
        fqe = FittedQEvaluation(gamma=GAMMA, observation_space=target.observation_space,
                                action_space=target.action_space, n_iters=40,
                                minibatch_size=250, lr=1e-2, seed=0)
        est = fqe.estimate(data, target)
        assert est["v_target"] == pytest.approx(true_value(q), rel=0.10), q
        assert est["v_behavior"] == pytest.approx(true_value(0.5), rel=0.05)
        # Q(s_t, a) = a + γ V(s_{t+1}): the last step pays exactly its action.
        last = fqe.q_values(np.eye(H, dtype=np.float32)[[H - 1]])[0]
        assert last == pytest.approx([0.0, 1.0], abs=0.1)


def test_fqe_successors_come_from_new_obs_or_the_next_row():
    b = SB(obs=np.arange(5.0)[:, None], eps_id=[0, 0, 0, 1, 1], t=[0, 1, 2, 0, 1],
           terminateds=[False, False, True, False, False])
    rows, nxt = next_observations(b)
    assert rows.tolist() == [0, 1, 2, 3]  # row 4 was cut: no successor known
    assert nxt[:, 0].tolist() == [1.0, 2.0, 2.0, 4.0]
    rows, nxt = next_observations(b.with_columns(new_obs=np.arange(5.0)[:, None] + 10))
    assert rows.tolist() == [0, 1, 2, 3, 4] and nxt[:, 0].tolist() == [10, 11, 12, 13, 14]


def test_behaviour_probabilities_are_required_and_rllib_action_prob_is_read():
    data = logged(0.5, 50)
    target = fixed_policy(0.8)
    no_logp = SB({k: v for k, v in data.items() if k != SB.ACTION_LOGP})
    with pytest.raises(ConfigError, match="no 'action_logp' .* column"):
        ImportanceSampling(gamma=GAMMA).estimate(no_logp, target)
    rllib = no_logp.with_columns(action_prob=np.exp(data[SB.ACTION_LOGP]))
    assert ImportanceSampling(gamma=GAMMA).estimate(rllib, target)["v_target"] == \
        pytest.approx(ImportanceSampling(gamma=GAMMA).estimate(data, target)["v_target"])


def test_methods_and_fqe_options_are_checked():
    assert method_options({"fqe": {"n_iters": 3}, "is": None}, "x") == {
        "fqe": {"n_iters": 3}, "is": {}}
    with pytest.raises(ConfigError, match="give a list of method names"):
        method_options("is", "cfg.off_policy_estimation_methods")
    with pytest.raises(ConfigError, match="sums over discrete actions"):
        FittedQEvaluation(gamma=0.9, observation_space=gym.spaces.Box(-1, 1, (2,)),
                          action_space=gym.spaces.Box(-1, 1, (1,)))


def test_log_likelihoods_match_what_acting_recorded_feedforward_and_lstm():
    from flowrl.policies import PGPolicy
    from flowrl.workers import RolloutWorker
    for model in ({}, {"use_lstm": True, "max_seq_len": 7, "lstm_cell_size": 8}):
        worker = RolloutWorker("CartPole-v1", policy=PGPolicy, policy_config={"model": model},
                               rollout_fragment_length=60, seed=0)
        batch = worker.sample()
        logp = worker.get_policy().compute_log_likelihoods(batch)
        assert logp.shape == (batch.count,)
        np.testing.assert_allclose(logp, batch[SB.ACTION_LOGP], atol=1e-5)
        worker.stop()


# -- evaluation on a held-out dataset -------------------------------------------------

def test_evaluation_on_a_held_out_dataset_estimates_without_stepping_any_env(tmp_path):
    from flowrl.algorithms import MARWIL, PG, MARWILConfig, PGConfig
    from test_offline_io import NoSteps, record
    train, _ = record(tmp_path / "train", "parquet", samples=3)
    held_out, _ = record(tmp_path / "held_out", "json", samples=3)
    common = dict(env=NoSteps, input=train, rollout_fragment_length=40, seed=0,
                  evaluation_interval=1, evaluation_duration=3,
                  evaluation_config={"input": held_out})
    with MARWIL(MARWILConfig(train_batch_size=40, **common)) as algo:
        r = algo.train()
        again = algo.evaluate()["evaluation"]
        assert algo.evaluation_workers is None   # nothing plays
    ev = r["evaluation"]
    assert ev["episodes_this_iter"] == 3
    assert set(ev["off_policy_estimation"]) == {"is", "wis"}
    for est in ev["off_policy_estimation"].values():
        assert est["num_episodes"] == 3 and math.isfinite(est["v_target"])
    # The same three episodes, valued by the same logged rewards, at every evaluation.
    assert again["off_policy_estimation"]["is"]["v_behavior"] == pytest.approx(
        ev["off_policy_estimation"]["is"]["v_behavior"])
    # Any algorithm evaluates so; PG's plan itself estimates nothing.
    with PG(PGConfig(train_batch_size=40, off_policy_estimation_methods=["wis", "fqe"],
                     **common)) as algo:
        r = algo.train()
    assert "off_policy_estimation" not in r
    assert set(r["evaluation"]["off_policy_estimation"]) == {"wis", "fqe"}


def test_evaluation_on_a_dataset_is_checked_when_built(tmp_path):
    from flowrl.algorithms import PGConfig
    from test_offline_io import record
    held_out, _ = record(tmp_path, "parquet", samples=1)
    with pytest.raises(ConfigError, match="off_policy_estimation_methods is empty"):
        PGConfig(env="CartPole-v1", evaluation_config={"input": held_out})
    with pytest.raises(ConfigError, match="reads one dataset or plays the env"):
        PGConfig(env="CartPole-v1", off_policy_estimation_methods=["is"],
                 evaluation_config={"input": {"sampler": 0.5, held_out: 0.5}})
    with pytest.raises(ConfigError, match="evaluation_config"):
        PGConfig(env="CartPole-v1", off_policy_estimation_methods=["is"],
                 evaluation_config={"input": str(tmp_path / "nothing-here")})
    assert PGConfig.unknown_field_hint("input_evaluation") == (
        "RLlib 1.x's 'input_evaluation' is 'off_policy_estimation_methods' here")


def test_fqe_fits_carry_on_across_a_checkpoint(tmp_path):
    # FQE's Q-network learns batch after batch, in the plan's estimates and in an
    # evaluation on held-out data; a restored run carries on from the saved fit
    from flowrl.algorithms import MARWIL, MARWILConfig
    from test_offline_io import NoSteps, record
    train, _ = record(tmp_path / "train", "parquet", samples=3)
    held_out, _ = record(tmp_path / "held_out", "json", samples=3)
    config = MARWILConfig(env=NoSteps, input=train, rollout_fragment_length=40,
                          train_batch_size=40, seed=0, off_policy_estimation_methods=["fqe"],
                          evaluation_interval=1, evaluation_duration=3,
                          evaluation_config={"input": held_out})

    def fits(algo):
        return [algo.off_policy_estimator.get_state()["fqe"],
                algo._evaluation.get_state()["fqe"]]

    def same(a, b):
        flat_a, flat_b = _leaves(a), _leaves(b)
        return flat_a.keys() == flat_b.keys() and all(
            np.array_equal(flat_a[k], flat_b[k]) for k in flat_a)

    with MARWIL(config) as algo:
        untrained = fits(algo)
        for _ in range(2):
            algo.train()
        algo.save(str(tmp_path / "ck"))
        saved = fits(algo)
    with MARWIL(config) as fresh:
        fresh.restore(str(tmp_path / "ck"))
        restored = fits(fresh)
    for before, after, start in zip(saved, restored, untrained):
        assert same(before, after) and not same(before, start)
        assert after["rng"] == before["rng"]
    # and the next iteration, on the next batch read (the reader's position is in the
    # checkpoint too), estimates exactly as the saved run goes on to
    with MARWIL(config) as algo:
        algo.train()
        algo.save(str(tmp_path / "ck1"))
        want = algo.train()
    with MARWIL(config) as fresh:
        fresh.restore(str(tmp_path / "ck1"))
        got = fresh.train()
    assert got["off_policy_estimation"]["fqe"] == want["off_policy_estimation"]["fqe"]
    assert (got["evaluation"]["off_policy_estimation"]["fqe"]
            == want["evaluation"]["off_policy_estimation"]["fqe"])


def _leaves(tree, prefix=""):
    """``{path: leaf}`` of a nested dict/list of arrays and numbers."""
    if isinstance(tree, dict):
        return {k: v for key, sub in tree.items() for k, v in _leaves(sub, f"{prefix}/{key}").items()}
    if isinstance(tree, (list, tuple)):
        return {k: v for i, sub in enumerate(tree) for k, v in _leaves(sub, f"{prefix}/{i}").items()}
    return {prefix: np.asarray(tree)}
