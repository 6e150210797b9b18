"""MARWIL and BC: postprocessed returns, the loss in closed form, masking of
recurrent padding, learning from in-memory batches, and the algorithms' plan,
results, checkpoints, CLI and backends."""

from __future__ import annotations

import json
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from flowrl.algorithms import BC, MARWIL, BCConfig, MARWILConfig
from flowrl.batch import SampleBatch as SB
from flowrl.errors import ConfigError
from flowrl.models.sequences import SEQ_MASK
from flowrl.policies.marwil import BCPolicy, MARWILPolicy

FAST = dict(env="CartPole-v1", rollout_fragment_length=100, train_batch_size=200, seed=0)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


def box_policy(cls=MARWILPolicy, **kwargs):
    return cls(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), seed=0, **kwargs)


def test_postprocessing_gives_discounted_returns_bootstrapped_with_v():
    p = box_policy(gamma=0.5)
    b = SB(rewards=np.ones(3, np.float32), terminateds=np.zeros(3, bool),
           vf_preds=np.array([9.0, 9.0, 9.0], np.float32))
    out = p.postprocess_trajectory(b, last_value=2.0)
    # G_2 = 1 + 0.5 * 2, G_1 = 1 + 0.5 * G_2, ...: returns, not GAE, despite the critic.
    assert out[SB.ADVANTAGES].tolist() == [2.0, 2.0, 2.0]
    assert out[SB.VALUE_TARGETS].tolist() == [2.0, 2.0, 2.0]
    done = SB(rewards=np.ones(2, np.float32), terminateds=np.array([False, True]),
              vf_preds=np.zeros(2, np.float32))
    assert p.postprocess_trajectory(done, last_value=5.0)[SB.ADVANTAGES].tolist() == [1.5, 1.0]


def test_loss_in_closed_form_and_the_moving_average_norm():
    p = box_policy(beta=2.0, vf_coeff=0.3, moving_average_sqd_adv_norm_start=4.0,
                   moving_average_sqd_adv_norm_update_rate=0.5)
    rng = np.random.default_rng(0)
    b = SB(obs=rng.uniform(-1, 1, (5, 2)).astype(np.float32), actions=np.array([0, 1, 1, 0, 1]),
           advantages=rng.normal(0, 2, 5).astype(np.float32))
    logp = p.compute_log_likelihoods(b).astype(np.float64)
    adv = b[SB.ADVANTAGES] - p.value(b[SB.OBS]).astype(np.float64)
    norm = 4.0 + 0.5 * ((adv ** 2).mean() - 4.0)
    expected = (-(np.exp(2.0 * adv / (1e-8 + math.sqrt(norm))) * logp).mean()
                + 0.3 * 0.5 * (adv ** 2).mean())
    loss, stats = p.loss_on(p.model, p.load_batch(b).tensors())
    assert float(loss.detach()) == pytest.approx(expected, rel=1e-5)
    assert float(stats["moving_average_sqd_adv_norm"]) == pytest.approx(norm, rel=1e-5)
    assert float(p.sqd_adv_norm) == pytest.approx(norm, rel=1e-5)


def test_bc_is_marwil_with_beta_zero_and_has_no_value_function():
    bc, marwil = box_policy(BCPolicy), box_policy(beta=0.0)
    assert bc.model.vf is None and marwil.model.vf is not None
    b = SB(obs=np.zeros((3, 2), np.float32), actions=np.array([0, 1, 1]))
    bc_loss, _ = bc.loss_on(bc.model, bc.load_batch(b).tensors())
    m_loss, stats = marwil.loss_on(marwil.model, marwil.load_batch(b).tensors())
    expected = -bc.compute_log_likelihoods(b).mean()
    assert float(bc_loss.detach()) == pytest.approx(expected, rel=1e-6)
    assert float(m_loss.detach()) == pytest.approx(-marwil.compute_log_likelihoods(b).mean(), rel=1e-6)
    assert "vf_loss" not in stats
    with pytest.raises(ConfigError, match="behaviour cloning is beta=0"):
        box_policy(BCPolicy, beta=1.0)


def lstm_batch_and_policies():
    """A sampled CartPole batch cut into padded sequences, and two identical MARWIL
    LSTM policies (one per loss computation)."""
    from flowrl.workers import RolloutWorker
    model = {"use_lstm": True, "max_seq_len": 8, "lstm_cell_size": 6}
    cfg = dict(model=model, moving_average_sqd_adv_norm_update_rate=0.5, seed=0)
    worker = RolloutWorker("CartPole-v1", policy=MARWILPolicy, policy_config=cfg,
                           rollout_fragment_length=60, num_envs=2, seed=0)
    batch = worker.sample()
    worker.stop()
    space = (gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2))
    return batch, MARWILPolicy(*space, **cfg), MARWILPolicy(*space, **cfg)


def loss_and_grads(policy, tensors):
    policy.model.zero_grad(set_to_none=True)
    loss, stats = policy.loss_on(policy.model, tensors)
    loss.backward()
    grads = [p.grad.clone() for p in policy.model.parameters() if p.grad is not None]
    return float(loss.detach()), {k: float(v) for k, v in stats.items()}, grads


def test_recurrent_padding_never_enters_the_loss():
    batch, p1, p2 = lstm_batch_and_policies()
    tensors = p1.load_batch(batch).tensors()
    mask = tensors[SEQ_MASK]
    pad = ~mask.bool()
    assert pad.any(), "the batch must hold padded sequences"
    changed = dict(tensors)
    gen = torch.Generator().manual_seed(1)
    for k, v in tensors.items():
        if k == SEQ_MASK or k.startswith("state_in_") or tuple(v.shape[:2]) != tuple(mask.shape):
            continue  # the mask itself, and what each sequence starts from
        if k in (SB.ACTIONS, SB.PREV_ACTIONS):  # other valid actions
            noise = torch.randint(0, 2, v.shape, generator=gen).to(v.dtype)
        elif v.dtype == torch.bool:
            noise = torch.randint(0, 2, v.shape, generator=gen).bool()
        else:
            noise = (torch.randn(v.shape, generator=gen) * 1e4).to(v.dtype)
        where = pad.reshape(*pad.shape, *[1] * (v.dim() - 2)).expand(v.shape)
        changed[k] = torch.where(where, noise, v)
    loss1, stats1, grads1 = loss_and_grads(p1, tensors)
    loss2, stats2, grads2 = loss_and_grads(p2, changed)
    assert math.isfinite(loss1)
    assert loss2 == pytest.approx(loss1, rel=1e-6)
    assert stats2 == pytest.approx(stats1, rel=1e-6)
    assert float(p2.sqd_adv_norm) == pytest.approx(float(p1.sqd_adv_norm), rel=1e-6)
    for g1, g2 in zip(grads1, grads2):
        torch.testing.assert_close(g2, g1, rtol=1e-5, atol=1e-7)
    # ...while a real row's return does move it (the check can fail).
    real = dict(tensors)
    real[SB.ADVANTAGES] = torch.where(mask.bool(), tensors[SB.ADVANTAGES] + 5.0,
                                      tensors[SB.ADVANTAGES])
    _, p3, _ = lstm_batch_and_policies()
    assert loss_and_grads(p3, real)[0] != pytest.approx(loss1, rel=1e-3)


def expert_cartpole_batch(steps: int, seed: int = 0) -> SB:
    """Steps of a scripted CartPole controller (push toward the pole's fall), with
    eps_id, t and terminateds, as a recorded dataset would hold them."""
    env = gym.make("CartPole-v1")
    obs, _ = env.reset(seed=seed)
    cols = {k: [] for k in ("obs", "actions", "rewards", "eps_id", "t", "terminateds")}
    eps, t = 0, 0
    for _ in range(steps):
        action = int(obs[2] + 0.5 * obs[3] > 0)
        nxt, reward, term, trunc, _ = env.step(action)
        for k, v in zip(cols, (obs, action, reward, eps, t, term)):
            cols[k].append(v)
        obs, t = nxt, t + 1
        if term or trunc:
            obs, _ = env.reset()
            eps, t = eps + 1, 0
    return SB(obs=np.array(cols["obs"], np.float32), actions=np.array(cols["actions"]),
              rewards=np.array(cols["rewards"], np.float32), eps_id=np.array(cols["eps_id"]),
              t=np.array(cols["t"]), terminateds=np.array(cols["terminateds"]))


def test_bc_clones_a_scripted_expert_from_an_in_memory_batch():
    data = expert_cartpole_batch(2000)
    policy = BCPolicy(gym.spaces.Box(-np.inf, np.inf, (4,)), gym.spaces.Discrete(2), lr=3e-3,
                      seed=0)
    for _ in range(150):
        policy.learn_on_batch(data)
    held_out = expert_cartpole_batch(500, seed=1)
    actions, _ = policy.compute_actions(held_out[SB.OBS], explore=False)
    assert (actions == held_out[SB.ACTIONS]).mean() > 0.95


def test_marwil_prefers_the_better_logged_action_where_bc_copies_the_mix():
    rng = np.random.default_rng(0)
    actions = rng.integers(0, 2, 400)
    data = SB(obs=np.zeros((400, 2), np.float32), actions=actions,
              rewards=(actions == 1).astype(np.float32), terminateds=np.ones(400, bool))
    p_good = {}
    for name, cls, extra in (("bc", BCPolicy, {}),
                             ("marwil", MARWILPolicy, dict(
                                 beta=1.0, moving_average_sqd_adv_norm_start=0.25,
                                 moving_average_sqd_adv_norm_update_rate=0.1))):
        policy = box_policy(cls, lr=1e-2, gamma=0.99, **extra)
        train = policy.postprocess_trajectory(data)
        for _ in range(200):
            policy.learn_on_batch(train)
        probe = SB(obs=np.zeros((1, 2), np.float32), actions=np.array([1]))
        p_good[name] = float(np.exp(policy.compute_log_likelihoods(probe))[0])
    assert abs(p_good["bc"] - actions.mean()) < 0.05
    assert p_good["marwil"] > 0.75


def test_marwil_trains_on_samples_and_reports_estimates_and_evaluation():
    with MARWIL(MARWILConfig(**FAST, evaluation_interval=1, evaluation_duration=2,
                             off_policy_estimation_methods=["is", "wis", "fqe"])) as algo:
        r = algo.train()
    learner = r["info"]["learner"]["default_policy"]
    assert {"policy_loss", "vf_loss", "moving_average_sqd_adv_norm",
            "vf_explained_var"} <= set(learner)
    assert set(r["off_policy_estimation"]) == {"is", "wis", "fqe"}
    for est in r["off_policy_estimation"].values():
        assert {"v_behavior", "v_target", "v_gain", "num_episodes"} <= set(est)
        assert est["num_episodes"] >= 1
    # The policy before this step acted every row: IS's ratios are all 1.
    is_ = r["off_policy_estimation"]["is"]
    assert is_["v_target"] == pytest.approx(is_["v_behavior"], rel=1e-4)
    assert r["evaluation"]["episodes_this_iter"] == 2
    assert "off_policy_estimation_time_ms" in r["timers"]


def test_bc_has_no_estimates_by_default_and_its_plan_names_it():
    with BC(BCConfig(**FAST)) as algo:
        r = algo.train()
        dot = algo.plan.to_dot()
    assert "off_policy_estimation" not in r
    assert "bc/train" in dot and "estimate_off_policy" not in dot
    assert "vf_loss" not in r["info"]["learner"]["default_policy"]


def test_checkpoint_keeps_the_moving_average_norm(tmp_path):
    cfg = MARWILConfig(**FAST, moving_average_sqd_adv_norm_update_rate=0.5,
                       off_policy_estimation_methods=[])
    with MARWIL(cfg) as algo:
        algo.train()
        norm = float(algo.get_policy().sqd_adv_norm)
        assert norm != pytest.approx(100.0)
        algo.save(str(tmp_path))
        weights = algo.get_policy().get_weights()
    with MARWIL.from_checkpoint(str(tmp_path)) as restored:
        assert float(restored.get_policy().sqd_adv_norm) == pytest.approx(norm)
        for k, v in restored.get_policy().get_weights().items():
            np.testing.assert_array_equal(v, weights[k])
        assert restored.train()["training_iteration"] == 2


def test_config_errors_name_the_field():
    with pytest.raises(ConfigError, match=r"BCConfig.beta=0.5: behaviour cloning is beta=0"):
        BCConfig(env="CartPole-v1", beta=0.5)
    with pytest.raises(ConfigError, match=r"MARWILConfig.beta=-1: must be a number >= 0"):
        MARWILConfig(env="CartPole-v1", beta=-1)
    with pytest.raises(ConfigError, match="unknown method 'dm'"):
        MARWILConfig(env="CartPole-v1", off_policy_estimation_methods=["is", "dm"])
    with pytest.raises(ConfigError, match="sums over discrete actions"):
        MARWIL(env="Pendulum-v1", off_policy_estimation_methods=["fqe"])


def test_cli_trains_bc_and_marwil(tmp_path):
    from flowrl.cli import main
    for algo in ("bc", "marwil"):
        run = tmp_path / algo
        assert main(["train", algo, "--env", "CartPole-v1", "--set",
                     "rollout_fragment_length=100", "--set", "train_batch_size=100",
                     "--stop-iters", "1", "--run-dir", str(run), "--quiet",
                     "--no-tensorboard"]) == 0
        (run_dir,) = list(run.iterdir())
        last = json.loads((run_dir / "result.jsonl").read_text().splitlines()[-1])
        assert last["training_iteration"] == 1


@pytest.mark.ray
def test_marwil_on_ray_workers(ray_session):
    with MARWIL(MARWILConfig(**{**FAST, "train_batch_size": 100}, num_workers=1,
                             backend="ray")) as algo:
        r = algo.train()
    assert r["info"]["num_steps_trained"] >= 100
    assert r["off_policy_estimation"]["wis"]["num_episodes"] >= 1


# -- from recorded datasets -----------------------------------------------------------

def test_bc_and_marwil_train_from_a_recorded_dataset_without_stepping_the_env(tmp_path):
    from test_offline_io import NoSteps, record
    data, _ = record(tmp_path, "parquet", samples=6)   # PPO's rows: GAE advantages
    for cls, config_cls, extra in ((BC, BCConfig, {}),
                                   (MARWIL, MARWILConfig, dict(
                                       off_policy_estimation_methods=["is", "wis", "fqe"]))):
        algo = cls(config_cls(env=NoSteps, input=data, rollout_fragment_length=40,
                              train_batch_size=80, seed=0, **extra))
        try:
            before = algo.get_policy().get_weights()
            r = [algo.train() for _ in range(2)][-1]
            after = algo.get_policy().get_weights()
            assert any(not np.array_equal(before[k], after[k]) for k in before)
            assert r["info"]["num_steps_trained"] >= 160
            assert f"reads dataset {data}" in algo.plan.to_dot()
        finally:
            algo.stop()
    assert set(r["off_policy_estimation"]) == {"is", "wis", "fqe"}
    for est in r["off_policy_estimation"].values():
        assert est["num_episodes"] >= 1 and math.isfinite(est["v_target"])


def test_marwil_recomputes_returns_of_recorded_data(tmp_path):
    """PPO recorded GAE advantages; MARWIL (postprocess_inputs=True by default) reads
    discounted returns in their place."""
    from flowrl.policies.maths import discounted_returns
    from test_offline_io import record
    data, _ = record(tmp_path, "parquet", samples=2)
    algo = MARWIL(MARWILConfig(env="CartPole-v1", input=data, rollout_fragment_length=40,
                               gamma=0.5, seed=0))
    try:
        checked = 0
        for episode in algo.workers.local_worker().sample().split_by_episode():
            if episode["t"][0] == 0 and episode["terminateds"][-1]:
                expected = discounted_returns(episode["rewards"], episode["terminateds"],
                                              0.0, gamma=0.5)
                np.testing.assert_allclose(episode[SB.ADVANTAGES], expected, rtol=1e-6)
                checked += 1
        assert checked >= 1
    finally:
        algo.stop()


def test_a_dataset_without_behaviour_logp_is_refused_when_is_is_asked(tmp_path):
    from flowrl.offline.writer import DatasetWriter
    from test_offline_io import record
    _, batches = record(tmp_path, "parquet", samples=1)
    data = str(tmp_path / "no_logp")
    writer = DatasetWriter(data, format="parquet")
    writer.write(SB({k: v for k, v in batches[0].items() if k != SB.ACTION_LOGP}))
    writer.close()
    MARWIL(MARWILConfig(env="CartPole-v1", input=data, off_policy_estimation_methods=[],
                        seed=0)).stop()
    with pytest.raises(ConfigError, match="action_logp.*MARWIL"):
        MARWIL(MARWILConfig(env="CartPole-v1", input=data, seed=0))


def test_cli_stops_an_offline_run_on_its_evaluation_mean(tmp_path, monkeypatch):
    # run from elsewhere: the example's relative dataset path is found beside it
    import os
    from flowrl.cli import main
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    monkeypatch.chdir(tmp_path)
    assert main(["train", "--config", os.path.join(root, "tuned_examples", "bc-cartpole.yaml"),
                 "--set", "evaluation_interval=2",
                 "--set", "evaluation_duration=1", "--set", "train_batch_size=500",
                 "--set", "stop.evaluation/episode_reward_mean=1", "--run-dir", str(tmp_path),
                 "--quiet", "--no-tensorboard"]) == 0
    (run_dir,) = list(tmp_path.iterdir())
    lines = [json.loads(x) for x in (run_dir / "result.jsonl").read_text().splitlines()]
    assert [r["training_iteration"] for r in lines] == [1, 2]   # stopped at the first evaluation
    assert lines[-1]["episode_reward_mean"] is None   # training played no episode (NaN in JSON)
    assert lines[-1]["evaluation"]["episode_reward_mean"] >= 1
