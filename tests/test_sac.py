"""SAC: the squashed Gaussian, action bounds, the updates, the plan on both backends,
checkpoints, bad input; and the NaN-loss stop every algorithm shares."""

from __future__ import annotations

import json
import math
import os

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flowrl.algorithms import PPO, SAC, PPOConfig, SACConfig
from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError, DivergedError
from flowrl.policies import SACPolicy, SquashedGaussian
from flowrl.policies.continuous import soft_update, to_env_actions, to_unit_actions
from flowrl.policies.dqn import N_STEP_DISCOUNT
from flowrl.policies.numpy_acting import squashed_gaussian_act

SB = SampleBatch
OBS = gym.spaces.Box(-1, 1, (3,), np.float32)
SMALL = dict(Q_model=[16], policy_model=[16], seed=0)


@pytest.fixture(autouse=True)
def one_torch_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _batch(n=32, action_space=gym.spaces.Box(-2, 2, (1,)), seed=0, reward=None):
    rng = np.random.default_rng(seed)
    if isinstance(action_space, gym.spaces.Discrete):
        actions = rng.integers(0, action_space.n, n)
    else:
        actions = rng.uniform(action_space.low, action_space.high,
                              (n, *action_space.shape)).astype(np.float32)
    rewards = rng.normal(size=n) if reward is None else np.full(n, reward)
    return SampleBatch(obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32), actions=actions,
                       rewards=rewards.astype(np.float32),
                       new_obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32),
                       terminateds=np.zeros(n, bool),
                       **{N_STEP_DISCOUNT: np.full(n, 0.99, np.float32)})


# -- the squashed Gaussian -----------------------------------------------------------------
def test_squashed_gaussian_density_is_torchs_tanh_transformed_normal():
    g = torch.Generator().manual_seed(0)
    inputs = torch.randn(64, 6, generator=g)
    d = SquashedGaussian(inputs)
    a, logp = d.rsample_logp(g)
    reference = torch.distributions.TransformedDistribution(
        torch.distributions.Normal(d.mean, d.std), [torch.distributions.TanhTransform()])
    inside = a.abs().max(-1).values < 0.999  # atanh loses precision at the edges
    assert inside.sum() > 40
    assert torch.allclose(logp[inside], reference.log_prob(a).sum(-1)[inside], atol=1e-3)
    assert torch.allclose(d.logp(a)[inside], logp[inside], atol=1e-3)
    assert bool((a.abs() <= 1).all())  # tanh rounds to ±1 in float32 far out


def test_squashed_gaussian_gradients_flow_through_the_sample():
    inputs = torch.zeros(4, 2, requires_grad=True)
    a, logp = SquashedGaussian(inputs).rsample_logp(torch.Generator().manual_seed(1))
    (a.sum() + logp.sum()).backward()
    assert inputs.grad is not None and bool((inputs.grad[:, 0] != 0).all())


def test_numpy_acting_draws_from_the_same_density():
    inputs = np.random.default_rng(0).normal(size=(200, 4)).astype(np.float32)
    a, logp = squashed_gaussian_act(inputs, True, np.random.default_rng(1), (-5.0, 2.0))
    inside = np.abs(a).max(-1) < 0.999
    torch_logp = SquashedGaussian(torch.as_tensor(inputs)).logp(torch.as_tensor(a)).numpy()
    np.testing.assert_allclose(logp[inside], torch_logp[inside], atol=2e-3)
    mode, _ = squashed_gaussian_act(inputs, False, np.random.default_rng(1), (-5.0, 2.0))
    np.testing.assert_allclose(mode, np.tanh(inputs[:, :2]), atol=1e-6)


@settings(max_examples=50, deadline=None)
@given(low=st.floats(-100, 10), width=st.floats(0.01, 100),
       unit=st.lists(st.floats(-1, 1), min_size=1, max_size=8))
def test_env_and_unit_actions_are_inverse_and_env_actions_stay_in_bounds(low, width, unit):
    lo, hi = np.float32([low]), np.float32([low + width])
    u = np.float32(unit)[:, None]
    env = to_env_actions(u, lo, hi)
    assert (env >= lo).all() and (env <= hi).all()
    np.testing.assert_allclose(to_unit_actions(env, lo, hi), u, atol=1e-3 * max(1, abs(low)))


# -- the policy ----------------------------------------------------------------------------
@pytest.mark.parametrize("explore", [True, False])
def test_actions_stay_within_the_bounds_even_for_extreme_outputs(explore):
    space = gym.spaces.Box(np.float32([-3.0, 0.5]), np.float32([1.0, 0.75]))
    p = SACPolicy(OBS, space, **SMALL)
    with torch.no_grad():
        p.model.policy[-1].bias.copy_(torch.tensor([50.0, -50.0, 2.0, 2.0]))
    actions, extra = p.compute_actions(np.random.default_rng(0).uniform(-1, 1, (256, 3)), explore)
    assert actions.shape == (256, 2) and actions.dtype == np.float32
    assert (actions >= space.low).all() and (actions <= space.high).all()
    assert np.allclose(actions[:, 0], 1.0) and np.allclose(actions[:, 1], 0.5)
    assert np.isfinite(extra[SB.ACTION_LOGP]).all()


def test_numpy_and_torch_acting_agree():
    space = gym.spaces.Box(-2, 2, (2,))
    a, b = SACPolicy(OBS, space, **SMALL), SACPolicy(OBS, space, **SMALL, numpy_inference=False)
    obs = np.random.default_rng(0).uniform(-1, 1, (16, 3)).astype(np.float32)
    for explore in (True, False):
        (xa, ea), (xb, eb) = a.compute_actions(obs, explore), b.compute_actions(obs, explore)
        np.testing.assert_allclose(xa, xb, atol=1e-5)
        np.testing.assert_allclose(ea[SB.ACTION_LOGP], eb[SB.ACTION_LOGP], atol=1e-4)


def test_target_entropy_auto_and_the_soft_target_update():
    box = SACPolicy(OBS, gym.spaces.Box(-1, 1, (3,)), **SMALL)
    disc = SACPolicy(OBS, gym.spaces.Discrete(4), **SMALL)
    assert box.target_entropy == -3.0
    assert disc.target_entropy == pytest.approx(0.98 * math.log(4))
    before = [t.clone() for t in box.target_critics.parameters()]
    box.learn_on_batch(_batch(action_space=gym.spaces.Box(-1, 1, (3,))))
    box.update_target()
    for old, new, online in zip(before, box.target_critics.parameters(),
                                box.model.critics.parameters()):
        assert torch.allclose(new, 0.995 * old + 0.005 * online.detach(), atol=1e-6)
    a, b = torch.nn.Linear(2, 2), torch.nn.Linear(2, 2)
    soft_update(a, b, 1.0)
    assert torch.equal(a.weight, b.weight)


@pytest.mark.parametrize("space", [gym.spaces.Box(-2, 2, (1,)), gym.spaces.Discrete(3)],
                         ids=["box", "discrete"])
def test_updates_move_the_critics_to_the_targets_and_each_optimizer_its_own_part(space):
    p = SACPolicy(OBS, space, **SMALL, critic_learning_rate=1e-2, twin_q=True)
    batch = _batch(action_space=space, reward=1.0)
    batch[N_STEP_DISCOUNT] = np.zeros(batch.count, np.float32)  # y = r = 1
    alpha0 = p.alpha
    first = p.learn_on_batch(batch)
    for _ in range(150):
        stats = p.learn_on_batch(batch)
    assert stats["mean_td_error"] < 0.2 * first["mean_td_error"]
    assert abs(stats["mean_q"] - 1.0) < 0.15
    assert p.alpha != alpha0
    assert set(p.optimizers) == {"actor", "critic", "entropy"}
    for name, params in (("actor", p.model.policy.parameters()),
                         ("critic", p.model.critics.parameters()),
                         ("entropy", [p.model.log_alpha])):
        owned = {id(q) for g in p.optimizers[name].param_groups for q in g["params"]}
        assert owned == {id(q) for q in params}


def test_discrete_sac_prefers_the_paying_arm():
    space = gym.spaces.Discrete(2)
    p = SACPolicy(OBS, space, **SMALL, actor_learning_rate=1e-2, critic_learning_rate=1e-2)
    rng = np.random.default_rng(0)
    obs = np.zeros((64, 3), np.float32)
    actions = rng.integers(0, 2, 64)
    batch = SampleBatch(obs=obs, actions=actions, rewards=(actions == 1).astype(np.float32),
                        new_obs=obs, terminateds=np.ones(64, bool),
                        **{N_STEP_DISCOUNT: np.zeros(64, np.float32)})
    for _ in range(200):
        p.learn_on_batch(batch)
    _, extra = p.compute_actions(obs[:1], explore=False)
    logits = extra[SB.ACTION_DIST_INPUTS][0]
    assert logits[1] > logits[0] + 0.5


def test_state_round_trip_continues_identically():
    space = gym.spaces.Box(-2, 2, (1,))
    a = SACPolicy(OBS, space, **SMALL)
    a.learn_on_batch(_batch())
    b = SACPolicy(OBS, space, Q_model=[16], policy_model=[16], seed=5)
    b.set_state(a.get_state())
    assert a.learn_on_batch(_batch(seed=1)) == b.learn_on_batch(_batch(seed=1))
    a.update_target(), b.update_target()
    for x, y in zip(a.target_critics.parameters(), b.target_critics.parameters()):
        assert torch.equal(x, y)


# -- bad input ----------------------------------------------------------------------------
def test_unsupported_spaces_and_fields_are_config_errors():
    with pytest.raises(ConfigError, match=r"SAC: the env's action space MultiDiscrete"):
        SACPolicy(OBS, gym.spaces.MultiDiscrete([2, 2]))
    with pytest.raises(ConfigError, match=r"SAC: the action space Box\(-inf, inf.*infinite bounds"):
        SACPolicy(OBS, gym.spaces.Box(-np.inf, np.inf, (2,)))
    with pytest.raises(ConfigError, match=r"observation space .*not supported"):
        SACPolicy(gym.spaces.Box(0, 255, (84, 84, 3), np.uint8), gym.spaces.Discrete(2))
    with pytest.raises(ConfigError, match=r"SACConfig.optimization has unknown keys"):
        SACConfig(env="Pendulum-v1", optimization={"lr": 1e-3})
    with pytest.raises(ConfigError, match=r"SACConfig.Q_model.use_lstm: not supported"):
        SACConfig(env="Pendulum-v1", Q_model={"use_lstm": True})
    with pytest.raises(ConfigError, match=r"SACConfig.tau=0: must be"):
        SACConfig(env="Pendulum-v1", tau=0)
    with pytest.raises(ConfigError, match=r"SACConfig.target_entropy='high'"):
        SACConfig(env="Pendulum-v1", target_entropy="high")
    config = SACConfig(env="Pendulum-v1", optimization={"actor_learning_rate": "1e-3"})
    assert config.optimization["actor_learning_rate"] == 1e-3
    assert config.optimization["critic_learning_rate"] == 3e-4
    with pytest.raises(ConfigError, match=r"SAC: the env's action space MultiDiscrete"):
        SAC(SACConfig(env="MultiDiscreteEnv", env_config={}, **SMALL))


class MultiDiscreteEnv(gym.Env):
    observation_space = OBS
    action_space = gym.spaces.MultiDiscrete([2, 2])

    def __init__(self, config=None):
        pass

    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        return np.zeros(3, np.float32), 0.0, True, False, {}


gym.register("MultiDiscreteEnv", entry_point=MultiDiscreteEnv)


# -- the algorithm --------------------------------------------------------------------------
PENDULUM = dict(env="Pendulum-v1", learning_starts=500, train_batch_size=128,
                Q_model=[64, 64], policy_model=[64, 64], timesteps_per_iteration=1000,
                optimization={"actor_learning_rate": 1e-3, "critic_learning_rate": 1e-3,
                              "entropy_learning_rate": 1e-3},
                evaluation_interval=1, evaluation_duration=5, seed=0)


def _learns_pendulum(config: SACConfig) -> list[float]:
    """Evaluation means (greedy, 5 episodes) after each 1000 steps until one reaches -200
    (random play scores about -1200), at most 8000 steps."""
    seen = []
    with SAC(config) as algo:
        for _ in range(8):
            seen.append(algo.train()["evaluation"]["episode_reward_mean"])
            if seen[-1] >= -200:
                break
    return seen


# Pendulum to -200 on each backend is a learning threshold, so a slow test (as TD3's
# and Ape-X TD3's); the default suite checks the updates themselves (the update and
# discrete-arm tests above) and the Ray path's mechanics (below).
@pytest.mark.slow
@pytest.mark.timeout(300)
def test_sac_learns_pendulum_on_the_embedded_backend():
    seen = _learns_pendulum(SACConfig(**PENDULUM))
    assert seen[-1] >= -200, seen


@pytest.mark.slow
@pytest.mark.ray
@pytest.mark.timeout(300)
def test_sac_learns_pendulum_with_ray_workers(ray_session):
    # 4-step fragments from the remote worker, trained 4 steps each (training_intensity
    # 128 = the embedded run's one 128-row step per env step): a Ray call per 4 steps
    seen = _learns_pendulum(SACConfig(**PENDULUM, num_workers=1, backend="ray",
                                      rollout_fragment_length=4, training_intensity=128))
    assert seen[-1] >= -200, seen


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_sac_trains_on_a_ray_workers_samples_and_syncs_its_weights(ray_session):
    # the default suite's check of the Ray path (the learning run above is slow): the
    # remote worker's fragments fill the buffer, training_intensity sets the train
    # steps, and the worker acts with the weights trained
    config = SACConfig(env="Pendulum-v1", num_workers=1, backend="ray", learning_starts=64,
                       train_batch_size=32, rollout_fragment_length=16,
                       training_intensity=64, timesteps_per_iteration=256, **SMALL)
    with SAC(config) as algo:
        r = algo.train()
        sampled, trained = r["info"]["num_steps_sampled"], r["info"]["num_steps_trained"]
        assert sampled >= 256 and len(algo.local_replay_buffer) == sampled
        # 64 rows trained per row sampled past learning_starts, to within one fragment's share
        assert abs(trained - 64 * (sampled - 64)) <= 64 * 16, (trained, sampled)
        local = algo.get_policy().get_weights()
        [remote] = algo.workers.foreach_remote_worker(lambda w: w.get_policy().get_weights())
    assert local.keys() == remote.keys()
    for k in local:
        np.testing.assert_array_equal(local[k], remote[k])



def test_plan_is_dqns_replay_plan_with_a_soft_update_per_train_step():
    with SAC(SACConfig(env="Pendulum-v1", learning_starts=32, train_batch_size=16,
                       timesteps_per_iteration=64, prioritized_replay=True, **SMALL)) as algo:
        r = algo.train()
        dot = algo.plan.to_dot()
        counters = algo.metrics.counters
        trained = counters["num_steps_trained"] // 16
        assert counters["num_target_updates"] == trained > 0
        assert counters["num_priority_updates"] == counters["num_steps_trained"]
    for node in ("sac/store", "sac/replay", "sac/train", "sac/update_priorities",
                 "sac/update_target"):
        assert node in dot
    stats = r["info"]["learner"]["default_policy"]
    assert {"critic_loss", "actor_loss", "alpha_loss", "alpha_value", "entropy"} <= set(stats)


def test_checkpoint_round_trip_keeps_weights_optimizers_and_the_buffer(tmp_path):
    config = SACConfig(env="Pendulum-v1", learning_starts=64, train_batch_size=32,
                       timesteps_per_iteration=128, checkpoint_replay_buffer=True, **SMALL)
    with SAC(config) as algo:
        algo.train()
        algo.save(str(tmp_path / "c"))
        state = algo.get_policy().get_state()
        rows = algo.local_replay_buffer.sample(16)["batch_row_ids"].tolist()
        steps = algo.metrics.counters["num_steps_sampled"]
        after = algo.get_policy().learn_on_batch(_batch())
    with SAC(config.replace(seed=3)) as restored:
        restored.restore(str(tmp_path / "c"))
        p = restored.get_policy()
        for key in ("weights", "target"):
            for k, v in state[key].items():
                np.testing.assert_array_equal(p.get_state()[key][k], v)
        assert restored.local_replay_buffer.sample(16)["batch_row_ids"].tolist() == rows
        assert restored.metrics.counters["num_steps_sampled"] == steps
        assert p.learn_on_batch(_batch()) == after
        assert restored.evaluate()["evaluation"]["episodes_this_iter"] == 10


def test_cli_trains_sac(tmp_path):
    from flowrl.cli import main
    assert main(["train", "sac", "--env", "Pendulum-v1", "--stop-iters", "1", "--run-dir",
                 str(tmp_path), "--seed", "0", "--quiet", "--set", "learning_starts=50",
                 "--set", "Q_model=[16]", "--set", "policy_model=[16]"]) == 0
    (run_dir,) = list(tmp_path.iterdir())
    (line,) = (run_dir / "result.jsonl").read_text().splitlines()
    assert json.loads(line)["info"]["num_steps_trained"] > 0


# -- a NaN loss stops every algorithm --------------------------------------------------------
class NaNRewardsAfter(gym.Wrapper):
    """Pendulum whose rewards are NaN from its ``after``-th step on."""

    def __init__(self, config):
        super().__init__(gym.make("Pendulum-v1"))
        self.after, self.steps = config["after"], 0

    def step(self, action):
        obs, r, term, trunc, info = self.env.step(action)
        self.steps += 1
        return obs, (math.nan if self.steps > self.after else r), term, trunc, info


NAN_CASES = [
    pytest.param(SAC, SACConfig, dict(learning_starts=50, train_batch_size=32,
                                      timesteps_per_iteration=100, **SMALL), id="sac"),
    pytest.param(PPO, PPOConfig, dict(train_batch_size=100, rollout_fragment_length=100,
                                      sgd_minibatch_size=50, model=[16], seed=0), id="ppo"),
]


@pytest.mark.parametrize("algo_cls, config_cls, fields", NAN_CASES)
def test_a_nan_loss_stops_training_and_keeps_the_last_good_checkpoint(
        algo_cls, config_cls, fields, tmp_path):
    config = config_cls(env=NaNRewardsAfter, env_config={"after": 250}, **fields)
    path = str(tmp_path / "good")
    with algo_cls(config) as algo:
        algo.train()
        algo.save(path)
        saved = _files(path)
        with pytest.raises(DivergedError, match=r"loss '\w*loss' of policy 'default_policy' "
                                                r"is nan at training iteration \d+"):
            for _ in range(10):
                algo.train()
        iteration = algo.metrics.counters["training_iteration"]
        assert 2 <= iteration <= 4
        with pytest.raises(DivergedError, match="not saved"):
            algo.save(path)
        with pytest.raises(DivergedError):
            algo.train()
    assert _files(path) == saved


def _files(root: str) -> dict[str, bytes]:
    out = {}
    for d, _, names in os.walk(root):
        for name in names:
            with open(os.path.join(d, name), "rb") as f:
                out[os.path.relpath(os.path.join(d, name), root)] = f.read()
    return out


def test_from_checkpoint_acts_within_the_bounds_and_exports(tmp_path):
    from flowrl.algorithms import Algorithm
    from flowrl.export import to_torchscript
    config = SACConfig(env="Pendulum-v1", learning_starts=32, train_batch_size=16,
                       timesteps_per_iteration=64, **SMALL)
    with SAC(config) as algo:
        algo.train()
        algo.save(str(tmp_path / "c"))
    with Algorithm.from_checkpoint(str(tmp_path / "c")) as algo:
        action = algo.compute_single_action(np.array([1.0, 0.0, 0.5], np.float32))
        assert action.shape == (1,) and -2.0 <= float(action[0]) <= 2.0
        policy = algo.get_policy()
        module = torch.jit.load(to_torchscript(policy, str(tmp_path / "pi.pt")))
        obs = np.random.default_rng(0).uniform(-1, 1, (5, 3)).astype(np.float32)
        _, extra = policy.compute_actions(obs, explore=False)
        np.testing.assert_allclose(module(torch.as_tensor(obs)).detach().numpy(),
                                   extra[SB.ACTION_DIST_INPUTS], atol=1e-5)
        greedy = 2.0 * np.tanh(extra[SB.ACTION_DIST_INPUTS][:1, :1])
        np.testing.assert_allclose(algo.compute_single_action(obs[0]), greedy[0], atol=1e-5)
