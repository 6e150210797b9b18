"""Torch policies: acting on both space kinds, losses that learn, KL rule, weights and state."""

from __future__ import annotations

import copy

import gymnasium as gym
import numpy as np
import pytest
import torch

from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError
from flowrl.policies import A2CPolicy, DQNPolicy, PGPolicy, PPOPolicy

SB = SampleBatch
BOX_OBS = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
DISCRETE = gym.spaces.Discrete(3)
BOX_ACT = gym.spaces.Box(-2.0, 2.0, (2,), np.float32)


def fixed_batch(policy, n=256, seed=0):
    """A trajectory of random observations with the policy's own actions, postprocessed."""
    rng = np.random.default_rng(seed)
    obs = rng.uniform(-1, 1, size=(n, *policy.observation_space.shape)).astype(np.float32)
    actions, extra = policy.compute_actions(obs)
    terminateds = np.zeros(n, bool)
    terminateds[n // 2 - 1] = terminateds[-1] = True
    # reward depends on the action, so there is something to learn
    first = actions if actions.ndim == 1 else actions[:, 0]
    rewards = (first == 0).astype(np.float32) if actions.ndim == 1 else -np.abs(first - 1.0)
    batch = SampleBatch({SB.OBS: obs, SB.ACTIONS: actions, SB.REWARDS: rewards,
                         SB.TERMINATEDS: terminateds, SB.TRUNCATEDS: np.zeros(n, bool),
                         **extra})
    return policy.postprocess_trajectory(batch, last_value=0.0)


def batch_loss(policy, batch):
    with torch.no_grad():
        loss, _ = policy.loss(policy._train_tensors(batch))
    return float(loss)


@pytest.mark.parametrize("action_space", [DISCRETE, BOX_ACT], ids=["discrete", "box"])
@pytest.mark.parametrize("cls,kwargs", [
    (PGPolicy, dict(lr=1e-2)),
    (A2CPolicy, dict(lr=1e-2)),
    (PPOPolicy, dict(lr=1e-3, num_sgd_iter=2, sgd_minibatch_size=64)),
], ids=["pg", "a2c", "ppo"])
def test_each_loss_decreases_on_a_fixed_batch(cls, kwargs, action_space):
    policy = cls(BOX_OBS, action_space, hidden_sizes=(32,), seed=1, **kwargs)
    batch = fixed_batch(policy)
    before = batch_loss(policy, batch)
    for _ in range(5):
        stats = policy.learn_on_batch(batch)
    assert batch_loss(policy, batch) < before
    assert np.isfinite(stats["total_loss"]) and stats["cur_lr"] == kwargs["lr"]


def test_compute_actions_shapes_and_extras():
    for space, shape in ((DISCRETE, (5,)), (BOX_ACT, (5, 2))):
        p = A2CPolicy(BOX_OBS, space, seed=0)
        obs = np.zeros((5, 4), np.float32)
        actions, extra = p.compute_actions(obs)
        assert actions.shape == shape
        assert extra[SB.ACTION_LOGP].shape == extra[SB.VF_PREDS].shape == (5,)
        width = 3 if space is DISCRETE else 4
        assert extra[SB.ACTION_DIST_INPUTS].shape == (5, width)
        assert all(isinstance(v, np.ndarray) for v in extra.values())
        np.testing.assert_allclose(p.value(obs), extra[SB.VF_PREDS])


def test_discrete_observations_are_one_hot():
    p = PGPolicy(gym.spaces.Discrete(5), DISCRETE, seed=0)
    actions, _ = p.compute_actions(np.array([0, 4, 2]))
    assert actions.shape == (3,) and set(actions.tolist()) <= {0, 1, 2}


def test_explore_false_is_deterministic_and_seeding_repeats():
    a = PPOPolicy(BOX_OBS, DISCRETE, seed=3)
    b = PPOPolicy(BOX_OBS, DISCRETE, seed=3)
    obs = np.random.default_rng(0).uniform(size=(50, 4)).astype(np.float32)
    np.testing.assert_array_equal(a.compute_actions(obs)[0], b.compute_actions(obs)[0])
    m1, m2 = a.compute_actions(obs, explore=False)[0], a.compute_actions(obs, explore=False)[0]
    np.testing.assert_array_equal(m1, m2)


def test_kl_adaptation_rule():
    p = PPOPolicy(BOX_OBS, DISCRETE, kl_coeff=0.2, kl_target=0.01)
    assert p.update_kl(0.021) == pytest.approx(0.3)     # > 2 * target: x1.5
    assert p.update_kl(0.02) == pytest.approx(0.3)      # within band: unchanged
    assert p.update_kl(0.0049) == pytest.approx(0.15)   # < target / 2: x0.5
    assert p.update_kl(0.005) == pytest.approx(0.15)


def test_ppo_stats_report_kl_for_update_kl():
    p = PPOPolicy(BOX_OBS, DISCRETE, lr=1e-2, num_sgd_iter=3, sgd_minibatch_size=64, seed=0)
    stats = p.learn_on_batch(fixed_batch(p))
    assert stats["kl"] > 0 and stats["cur_kl_coeff"] == pytest.approx(0.2)
    assert {"policy_loss", "vf_loss", "entropy", "vf_explained_var", "grad_gnorm"} <= set(stats)


def test_weights_round_trip():
    a = A2CPolicy(BOX_OBS, BOX_ACT, seed=0)
    b = A2CPolicy(BOX_OBS, BOX_ACT, seed=1)
    obs = np.ones((3, 4), np.float32)
    assert not np.allclose(a.value(obs), b.value(obs))
    w = a.get_weights()
    assert all(isinstance(v, np.ndarray) for v in w.values())
    b.set_weights(w)
    np.testing.assert_array_equal(a.value(obs), b.value(obs))
    w["pi.0.weight"][:] = 0.0  # a copy: the policy is not affected
    assert not np.all(a.get_weights()["pi.0.weight"] == 0.0)


def test_set_weights_rejects_foreign_weights():
    a = A2CPolicy(BOX_OBS, DISCRETE, hidden_sizes=(8,))
    with pytest.raises(ConfigError, match="has shape"):
        a.set_weights(A2CPolicy(BOX_OBS, DISCRETE, hidden_sizes=(9,)).get_weights())
    with pytest.raises(ConfigError, match="missing \\['vf"):
        a.set_weights(PGPolicy(BOX_OBS, DISCRETE, hidden_sizes=(8,)).get_weights())


def test_state_round_trip_resumes_identically():
    kwargs = dict(lr=1e-2, num_sgd_iter=2, sgd_minibatch_size=32, seed=0)
    a = PPOPolicy(BOX_OBS, DISCRETE, **kwargs)
    batch = fixed_batch(a)
    a.learn_on_batch(batch)
    a.update_kl(1.0)
    b = PPOPolicy(BOX_OBS, DISCRETE, **{**kwargs, "seed": 9})
    b.set_state(a.get_state())
    assert b.kl_coeff == a.kl_coeff
    a.learn_on_batch(batch)
    b.learn_on_batch(batch)
    for k, v in a.get_weights().items():
        np.testing.assert_allclose(v, b.get_weights()[k], rtol=1e-6, atol=1e-7)


def test_compute_then_apply_gradients_equals_one_learn_step():
    a = A2CPolicy(BOX_OBS, DISCRETE, lr=1e-2, seed=0)
    b = A2CPolicy(BOX_OBS, DISCRETE, lr=1e-2, seed=0)
    batch = fixed_batch(a)
    w0 = a.get_weights()
    grads, stats = a.compute_gradients(batch)
    assert len(grads) == len(list(a.model.parameters())) and "grad_gnorm" in stats
    for k, v in a.get_weights().items():  # computing gradients changes nothing
        np.testing.assert_array_equal(v, w0[k])
    a.apply_gradients(grads)
    b.learn_on_batch(batch)
    for k, v in a.get_weights().items():
        np.testing.assert_allclose(v, b.get_weights()[k], rtol=1e-5, atol=1e-6)
    with pytest.raises(ConfigError, match="gradients for"):
        a.apply_gradients(grads[:-1])


def test_grad_clip_bounds_the_norm():
    p = A2CPolicy(BOX_OBS, DISCRETE, grad_clip=1e-3, seed=0)
    grads, stats = p.compute_gradients(fixed_batch(p))
    total = np.sqrt(sum(float((g ** 2).sum()) for g in grads))
    assert stats["grad_gnorm"] > 1e-3 and total == pytest.approx(1e-3, rel=1e-3)


def test_postprocess_uses_gae_and_bootstrap():
    p = A2CPolicy(BOX_OBS, DISCRETE, gamma=0.5, lambda_=1.0)
    b = SampleBatch({SB.REWARDS: [1.0, 1.0], SB.VF_PREDS: [0.0, 0.0],
                     SB.TERMINATEDS: [False, False], SB.TRUNCATEDS: [False, True],
                     SB.BOOTSTRAP_VALUE: [0.0, 2.0]})
    out = p.postprocess_trajectory(b, last_value=100.0)
    assert out[SB.VALUE_TARGETS].tolist() == [2.0, 2.0]  # G_1 = 1 + .5 * 2, G_0 = 1 + .5 * G_1
    assert SB.ADVANTAGES not in b  # input untouched
    pg = PGPolicy(BOX_OBS, DISCRETE, gamma=0.5).postprocess_trajectory(
        b.with_columns(**{SB.TRUNCATEDS: [False, False]}), last_value=0.0)
    assert pg[SB.ADVANTAGES].tolist() == [1.5, 1.0]


@pytest.mark.parametrize("kwargs,field", [
    (dict(lr=0.0), "lr"), (dict(gamma=1.5), "gamma"), (dict(num_sgd_iter=0), "num_sgd_iter"),
    (dict(hidden_sizes=(0,)), "hidden_sizes")])
def test_bad_hyperparameters_raise_config_error(kwargs, field):
    with pytest.raises(ConfigError, match=field):
        A2CPolicy(BOX_OBS, DISCRETE, **kwargs)


def test_unsupported_space():
    with pytest.raises(ConfigError, match="action space"):
        PGPolicy(BOX_OBS, gym.spaces.MultiBinary(3))


@pytest.mark.parametrize("make", [
    lambda: PPOPolicy(BOX_OBS, DISCRETE, lr=0.01, seed=0),
    lambda: DQNPolicy(BOX_OBS, DISCRETE, lr=0.01, seed=0),
], ids=["ppo", "dqn"])
def test_the_optimizer_is_a_torch_optimizer_that_lr_schedulers_drive(make):
    policy = make()
    opt = policy.optimizer
    assert isinstance(opt, torch.optim.Optimizer)
    assert opt.defaults["lr"] == 0.01 and opt.param_groups[0]["lr"] == 0.01
    scheduler = torch.optim.lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
    if isinstance(policy, DQNPolicy):
        x = np.random.default_rng(0).normal(size=(8, 4)).astype(np.float32)
        batch = SampleBatch({SB.OBS: x, SB.ACTIONS: np.zeros(8, np.int64),
                             SB.REWARDS: np.ones(8, np.float32), SB.NEXT_OBS: x,
                             "n_step_discount": np.full(8, 0.9, np.float32)})
    else:
        batch = fixed_batch(policy, n=64)
    before = policy.get_weights()
    assert policy.learn_on_batch(batch)["cur_lr"] == 0.01
    assert any(not np.array_equal(v, before[k]) for k, v in policy.get_weights().items())
    scheduler.step()
    assert opt.param_groups[0]["lr"] == 0.005 and opt.defaults["lr"] == 0.01
    assert policy.learn_on_batch(batch)["cur_lr"] == 0.005
    # the optimizer state (Adam's moments and step count) round-trips through get_state
    clone = make()
    clone.set_state(policy.get_state())
    saved, restored = opt.state_dict(), clone.optimizer.state_dict()
    assert restored["param_groups"][0]["lr"] == 0.005
    assert saved["state"].keys() == restored["state"].keys() and saved["state"]
    for key, moments in saved["state"].items():
        for name, value in moments.items():
            assert torch.equal(restored["state"][key][name], value), (key, name)


def test_the_policies_adam_updates_exactly_as_torch_adam():
    from flowrl.policies.torch_policy import make_adam
    torch.manual_seed(0)
    ours_model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ref_model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    ref_model.load_state_dict(ours_model.state_dict())
    ours = make_adam(ours_model.parameters(), 0.01)
    ref = torch.optim.Adam(ref_model.parameters(), lr=0.01, fused=True)
    assert isinstance(ours, torch.optim.Adam) and ours.defaults == ref.defaults
    x = torch.randn(16, 4)
    for _ in range(5):
        for model, opt in ((ours_model, ours), (ref_model, ref)):
            opt.zero_grad()
            model(x).pow(2).mean().backward()
            opt.step()
            assert all(p.grad is not None for p in model.parameters())
    for a, b in zip(ours_model.parameters(), ref_model.parameters()):
        assert torch.equal(a, b)
    for sa, sb in zip(ours.state_dict()["state"].values(), ref.state_dict()["state"].values()):
        assert all(torch.equal(sa[k], sb[k]) for k in ("step", "exp_avg", "exp_avg_sq"))
    assert ours.state_dict()["param_groups"] == ref.state_dict()["param_groups"]
    # a state loaded into ours continues exactly as torch's own optimizer does
    ours.load_state_dict(copy.deepcopy(ref.state_dict()))  # not sharing its tensors
    for model, opt in ((ours_model, ours), (ref_model, ref)):
        opt.zero_grad()
        model(x).pow(2).mean().backward()
        opt.step()
    assert all(torch.equal(a, b) for a, b in zip(ours_model.parameters(), ref_model.parameters()))


def test_learning_imports_no_torch_dynamo():
    # The reason the policies' Adam calls torch's wrapped methods (start-up, the first
    # checkpoint): if a torch release moves the wrappers, or anything on the learning
    # or checkpoint path imports torch._dynamo again, this fails and the cost is back.
    import subprocess
    import sys
    import textwrap
    code = textwrap.dedent("""
        import sys
        import gymnasium as gym
        import numpy as np
        from flowrl.batch import SampleBatch
        from flowrl.policies import PPOPolicy
        p = PPOPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
        n = 64
        batch = SampleBatch({"obs": np.zeros((n, 4), np.float32), "actions": np.zeros(n, np.int64),
                             "action_logp": np.full(n, -0.69, np.float32),
                             "advantages": np.ones(n, np.float32),
                             "value_targets": np.ones(n, np.float32),
                             "vf_preds": np.zeros(n, np.float32),
                             "action_dist_inputs": np.zeros((n, 2), np.float32)})
        p.learn_on_batch(batch)
        p.optimizer.zero_grad()
        state = p.get_state()          # a checkpoint's save and restore
        PPOPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)).set_state(state)
        print("torch._dynamo" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", "learning or checkpointing imported torch._dynamo"


class _MatrixActions(gym.Env):
    """Rewards actions near a fixed 2x2 matrix; records the shape of every action it gets."""

    observation_space = gym.spaces.Box(-1.0, 1.0, (3,), np.float32)
    action_space = gym.spaces.Box(-1.0, 1.0, (2, 2), np.float32)
    target = np.array([[0.5, -0.5], [0.25, 0.0]], np.float32)
    shapes: list = []

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(3, np.float32), {}

    def step(self, action):
        type(self).shapes.append(np.shape(action))
        self.t += 1
        reward = -float(np.square(np.asarray(action) - self.target).sum())
        return np.full(3, self.t / 8, np.float32), reward, self.t == 8, False, {}


def test_ppo_trains_on_a_rank_2_box_action_space():
    from flowrl.algorithms import PPO, PPOConfig
    _MatrixActions.shapes = []
    # create_env_on_driver: the learner's own worker samples the batch checked below
    algo = PPO(PPOConfig(env=lambda cfg: _MatrixActions(), num_workers=1, num_envs_per_worker=2,
                         rollout_fragment_length=16, train_batch_size=64,
                         sgd_minibatch_size=32, num_sgd_iter=2, model=(16,), seed=0,
                         create_env_on_driver=True))
    try:
        result = algo.train()
        policy = algo.get_policy()
        batch = algo.workers.local_worker().sample()
    finally:
        algo.stop()
    assert result["info"]["num_steps_trained"] == 64
    assert np.isfinite(result["info"]["learner"]["default_policy"]["total_loss"])
    assert _MatrixActions.shapes and set(_MatrixActions.shapes) == {(2, 2)}
    assert batch[SB.ACTIONS].shape == (batch.count, 2, 2)
    # The learner scores the sampled actions as the acting policy did.
    dist = policy.dist_class(torch.as_tensor(batch[SB.ACTION_DIST_INPUTS]))
    np.testing.assert_allclose(dist.logp(torch.as_tensor(batch[SB.ACTIONS])).numpy(),
                               batch[SB.ACTION_LOGP], rtol=1e-5, atol=1e-5)
