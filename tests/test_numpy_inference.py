"""Numpy inference of the built-in models: equal to torch, never stale, switchable.

Also: one-pass postprocessing of back-to-back trajectories equals the
per-trajectory calls it replaces.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest
import torch
from torch import nn

from flowrl.batch import SampleBatch
from flowrl.policies import DQNPolicy, PGPolicy, PPOPolicy
from flowrl.policies.numpy_acting import NumpyMLP, categorical_sample
from flowrl.policies.numpy_acting import NUMPY_MAX_MACS
from flowrl.models import FullyConnectedNetwork, ModelConfig
from flowrl.policies.torch_policy import TorchPolicy
from flowrl.workers import RolloutWorker
from flowrl.workers.sampler import postprocess_trajectories

SB = SampleBatch
BOX = gym.spaces.Box(-1, 1, (4,))


def obs(n, seed=0, dim=4):
    return np.random.default_rng(seed).normal(size=(n, dim)).astype(np.float32)


def torch_outputs(policy, x):
    with torch.inference_mode():
        out, _ = policy.model({"obs_flat": torch.as_tensor(x)}, [], None)
        return out.numpy(), policy.model.value_function().numpy()


def both_paths(policy, x, explore):
    policy.numpy_inference = True
    fast = policy.compute_actions(x, explore)
    policy.numpy_inference = False
    slow = policy.compute_actions(x, explore)
    policy.numpy_inference = True
    return fast, slow


@pytest.mark.parametrize("action_space", [gym.spaces.Discrete(3), gym.spaces.Box(-2, 2, (2,))])
def test_numpy_path_equals_torch_path(action_space):
    p = PPOPolicy(BOX, action_space, seed=3)
    with torch.no_grad():  # a non-trivial policy: larger output weights, a learned log-std
        p.model.pi[-1].weight.mul_(100.0)
        if p.model.log_std is not None:
            p.model.log_std.fill_(-0.5)
    x = obs(9)
    assert p._numpy_snapshot() is not None
    (a_np, e_np), (a_t, e_t) = both_paths(p, x, explore=False)
    np.testing.assert_allclose(a_np, a_t, atol=1e-5)   # the mode
    assert a_np.dtype == a_t.dtype
    for key in (SB.ACTION_DIST_INPUTS, SB.VF_PREDS, SB.ACTION_LOGP):
        np.testing.assert_allclose(e_np[key], e_t[key], atol=1e-5, rtol=1e-5)
        assert e_np[key].dtype == np.float32 and e_np[key].shape == e_t[key].shape
    # sampled actions: their log-probs are the torch distribution's
    actions, extra = p.compute_actions(x, explore=True)
    assert actions.shape == a_t.shape and actions.dtype == a_t.dtype
    inputs = torch.as_tensor(extra[SB.ACTION_DIST_INPUTS])
    dist = p.dist_class(inputs)
    flat = actions if actions.ndim == 1 else actions.reshape(len(x), -1)
    np.testing.assert_allclose(extra[SB.ACTION_LOGP], dist.logp(torch.as_tensor(flat)).numpy(),
                               atol=1e-5)
    logits, values = torch_outputs(p, x)
    np.testing.assert_allclose(p.value(x), values, atol=1e-5)


def test_numpy_path_samples_the_categorical_distribution():
    p = PPOPolicy(BOX, gym.spaces.Discrete(3), seed=0)
    with torch.no_grad():  # fixed probabilities 0.2, 0.3, 0.5 whatever the observation
        p.model.pi[-1].weight.zero_()
        p.model.pi[-1].bias.copy_(torch.log(torch.tensor([0.2, 0.3, 0.5])))
    x = np.zeros((50, 4), np.float32)
    assert p._numpy_snapshot() is not None
    counts = sum(np.bincount(p.compute_actions(x)[0], minlength=3) for _ in range(200))
    expected = np.array([0.2, 0.3, 0.5]) * 200 * 50
    chi2 = float(((counts - expected) ** 2 / expected).sum())
    assert chi2 < 13.8   # chi-square, 2 degrees of freedom, p = 0.001
    # the torch path draws from the same distribution
    p.numpy_inference = False
    big = np.zeros((1000, 4), np.float32)
    counts_t = sum(np.bincount(p.compute_actions(big)[0], minlength=3) for _ in range(10))
    assert float(((counts_t - expected) ** 2 / expected).sum()) < 13.8


def test_two_category_sampling_draws_exactly_what_the_general_rule_draws():
    # a third category with no mass leaves the general rule's arithmetic unchanged
    rng = np.random.default_rng(0)
    for n in (1, 3, 64):
        logits = (rng.normal(size=(n, 2)) * rng.choice([0.1, 5.0, 50.0])).astype(np.float32)
        u = rng.random(n)
        a2, logp2 = categorical_sample(logits, u)
        padded = np.concatenate([logits, np.full((n, 1), -np.inf, np.float32)], axis=1)
        a3, logp3 = categorical_sample(padded, u)
        assert a2.dtype == a3.dtype == np.int64 and logp2.dtype == logp3.dtype == np.float32
        np.testing.assert_array_equal(a2, a3)
        np.testing.assert_array_equal(logp2, logp3)


def test_numpy_path_samples_the_gaussian_distribution():
    p = PPOPolicy(BOX, gym.spaces.Box(-5, 5, (1,)), seed=0)
    with torch.no_grad():
        p.model.pi[-1].weight.zero_()
        p.model.pi[-1].bias.fill_(1.5)
        p.model.log_std.fill_(np.log(0.5))
    a = np.concatenate([p.compute_actions(np.zeros((50, 4), np.float32))[0] for _ in range(200)])
    assert a.shape == (10_000, 1)
    assert abs(a.mean() - 1.5) < 0.03 and abs(a.std() - 0.5) < 0.02


def test_seeded_sampling_is_reproducible_and_restored_by_set_state():
    a, b = (PGPolicy(BOX, gym.spaces.Discrete(2), seed=7) for _ in range(2))
    x = obs(64)
    np.testing.assert_array_equal(a.compute_actions(x)[0], b.compute_actions(x)[0])
    state = a.get_state()
    first = a.compute_actions(x)[0]
    a.compute_actions(x)
    a.set_state(state)
    np.testing.assert_array_equal(a.compute_actions(x)[0], first)


def test_discrete_observations_are_one_hot():
    p = PPOPolicy(gym.spaces.Discrete(5), gym.spaces.Discrete(2), seed=0)
    x = np.array([0, 4, 2, 2])
    (_, e_np), (_, e_t) = both_paths(p, x, explore=False)
    np.testing.assert_allclose(e_np[SB.ACTION_DIST_INPUTS], e_t[SB.ACTION_DIST_INPUTS], atol=1e-6)
    np.testing.assert_allclose(e_np[SB.VF_PREDS], e_t[SB.VF_PREDS], atol=1e-6)


def assert_fresh(p, x):
    """The numpy path computes with the torch model's current weights."""
    logits, values = torch_outputs(p, x)
    _, extra = p.compute_actions(x, explore=False)
    np.testing.assert_allclose(extra[SB.ACTION_DIST_INPUTS], logits, atol=1e-5)
    np.testing.assert_allclose(extra[SB.VF_PREDS], values, atol=1e-5)


def test_never_stale_after_set_weights_training_and_set_state():
    p = PPOPolicy(BOX, gym.spaces.Discrete(2), seed=0, lr=0.05, sgd_minibatch_size=None,
                  num_sgd_iter=2)
    x = obs(5)
    before = p.compute_actions(x, explore=False)[1][SB.VF_PREDS].copy()
    other = PPOPolicy(BOX, gym.spaces.Discrete(2), seed=1)
    p.set_weights(other.get_weights())
    assert_fresh(p, x)
    assert not np.allclose(p.compute_actions(x, explore=False)[1][SB.VF_PREDS], before)
    # a train step (the optimizer updates the parameters in place)
    w = RolloutWorker("CartPole-v1", policy=PPOPolicy, num_envs=2, rollout_fragment_length=20,
                      seed=0, policy_config={"lr": 0.05, "sgd_minibatch_size": None,
                                             "num_sgd_iter": 1})
    pol = w.get_policy()
    y = obs(6, seed=2)
    pre = pol.compute_actions(y, explore=False)[1][SB.VF_PREDS].copy()
    w.learn_on_batch(w.sample())
    assert_fresh(pol, y)
    assert not np.allclose(pol.compute_actions(y, explore=False)[1][SB.VF_PREDS], pre)
    w.stop()
    # a restored checkpoint
    state = other.get_state()
    p.set_state(state)
    assert_fresh(p, x)
    # apply_gradients
    grads, _ = p.compute_gradients(SampleBatch({
        SB.OBS: x, SB.ACTIONS: np.zeros(5, np.int64), SB.ADVANTAGES: np.ones(5, np.float32),
        SB.VALUE_TARGETS: np.ones(5, np.float32), SB.ACTION_LOGP: np.zeros(5, np.float32),
        SB.VF_PREDS: np.zeros(5, np.float32),
        SB.ACTION_DIST_INPUTS: np.zeros((5, 2), np.float32)}))
    p.apply_gradients(grads)
    assert_fresh(p, x)


def test_never_stale_when_parameters_or_modules_are_replaced():
    p = PPOPolicy(BOX, gym.spaces.Discrete(2), seed=0)
    x = obs(5)
    p.compute_actions(x)
    p.model.vf[0].weight.data = torch.randn(64, 4)          # new memory
    assert_fresh(p, x)
    p.model.pi[2] = nn.Linear(64, 64)                       # a new layer
    assert_fresh(p, x)
    p.model.pi[0].bias = nn.Parameter(torch.randn(64))      # a new parameter
    assert_fresh(p, x)
    p.model = FullyConnectedNetwork(BOX, gym.spaces.Discrete(2), 2,     # a new model
                                    ModelConfig(fcnet_hiddens=(8,)), "model")
    assert_fresh(p, x)
    pg = PGPolicy(BOX, gym.spaces.Discrete(2), seed=0)   # no critic: V = 0, no value network
    assert (pg.value(x) == 0).all() and pg.model.vf is None
    assert_fresh(pg, x)


def test_parameter_guard_premise_nn_module_keeps_its_tables_in_private_dicts():
    # ParameterGuard (numpy_acting.py) reads nn.Module's private ``_modules`` and
    # ``_parameters`` dicts, the one private torch API left in flowrl/policies
    # (a walk through named_parameters() on every acting call would cost more than
    # the forward it guards). This fails loudly if torch stops keeping a module's
    # parameters and children there, or stops routing assignments through them.
    premise = ("nn.Module no longer keeps its children in _modules and its parameters in "
               "_parameters: rewrite ParameterGuard (flowrl/policies/numpy_acting.py) "
               "over public APIs (named_children / named_parameters)")
    seq = nn.Sequential(nn.Linear(2, 3), nn.Tanh())
    assert isinstance(seq._modules, dict) and list(seq._modules.values()) == list(seq.children()), \
        premise
    lin = seq[0]
    assert isinstance(lin._parameters, dict), premise
    assert [id(p) for p in lin._parameters.values()] == [id(p) for p in lin.parameters(
        recurse=False)], premise
    new_bias = nn.Parameter(torch.zeros(3))
    lin.bias = new_bias
    assert lin._parameters["bias"] is new_bias, premise
    seq[1] = nn.ReLU()
    assert type(seq._modules["1"]) is nn.ReLU, premise


def test_acting_without_values_checks_only_the_policy_network_yet_is_never_stale():
    p = PPOPolicy(BOX, gym.spaces.Box(-2, 2, (2,)), seed=0)
    x = obs(5)

    def fresh_acting():
        logits, _ = torch_outputs(p, x)
        _, extra = p.compute_actions(x, explore=False, vf_preds=False)
        assert SB.VF_PREDS not in extra
        np.testing.assert_allclose(extra[SB.ACTION_DIST_INPUTS], logits, atol=1e-5)

    fresh_acting()
    snap = p._numpy_cache.snap
    p.model.vf[0].weight.data = torch.randn(64, 4)     # not read by acting: same snapshot
    fresh_acting()
    assert p._numpy_cache.snap is snap
    np.testing.assert_allclose(p.value(x), torch_outputs(p, x)[1], atol=1e-5)  # value rebuilds
    assert p._numpy_cache.snap is not snap
    p.model.pi[2].weight.data = torch.randn(64, 64)    # read by acting: rebuilt
    fresh_acting()
    p.model.pi[4] = nn.Linear(64, 2)
    fresh_acting()
    p.model.log_std = nn.Parameter(torch.full((2,), -1.0))
    fresh_acting()
    p.model.pi = nn.Sequential(nn.Linear(4, 2))
    fresh_acting()


def test_custom_models_use_torch_and_large_batches_stay_on_numpy():
    class Custom(FullyConnectedNetwork):
        def forward(self, input_dict, state, seq_lens):
            out, state = super().forward(input_dict, state, seq_lens)
            return 2.0 * out, state

    p = PPOPolicy(BOX, gym.spaces.Discrete(2), seed=0)
    x = obs(4)
    p.model = Custom(BOX, gym.spaces.Discrete(2), 2, ModelConfig(fcnet_hiddens=(16,)), "m")
    assert p._numpy_snapshot() is None
    assert_fresh(p, x)
    p.model.pi = nn.Sequential(nn.Linear(4, 2), nn.Softplus())  # not a plain Linear/Tanh MLP
    assert NumpyMLP.build(p.model.pi) is None
    # a batch larger than one numpy forward takes is still numpy, in chunks: the
    # torch generator never moves, the numpy one does
    q = PPOPolicy(BOX, gym.spaces.Discrete(2), seed=0)
    rows = (NUMPY_MAX_MACS - 1) // (64 * 64)   # the largest layer is 64 x 64
    assert q._numpy_snapshot().max_rows == rows
    torch_state = q.generator.get_state().clone()
    numpy_state = q._action_rng.bit_generator.state
    q.compute_actions(obs(2 * rows + 3))
    assert torch.equal(q.generator.get_state(), torch_state)
    assert q._action_rng.bit_generator.state != numpy_state
    off = PPOPolicy(BOX, gym.spaces.Discrete(2), seed=0, numpy_inference=False)
    assert off._numpy_snapshot() is None


def test_policy_config_switches_a_worker_to_torch():
    w = RolloutWorker("CartPole-v1", policy=PGPolicy, num_envs=2, rollout_fragment_length=5,
                      seed=0, policy_config={"numpy_inference": False})
    p = w.get_policy()
    assert p.numpy_inference is False
    b = w.sample()
    assert b.count == 10 and p._numpy_cache.snap is None
    w.stop()


@pytest.mark.parametrize("dueling", [True, False])
def test_dqn_q_values_and_epsilon_greedy_are_unchanged(dueling):
    p = DQNPolicy(BOX, gym.spaces.Discrete(3), seed=0, dueling=dueling)
    x = obs(11)
    q_np = p.q_values(x)
    with torch.inference_mode():
        q_t = p.model(torch.as_tensor(x)).numpy()
    np.testing.assert_allclose(q_np, q_t, atol=1e-5)
    p.set_epsilon(0.0)
    actions, extra = p.compute_actions(x)
    np.testing.assert_array_equal(actions, q_t.argmax(axis=1))
    np.testing.assert_allclose(extra[SB.VF_PREDS], q_t.max(axis=1), atol=1e-5)
    # epsilon-greedy draws from the same RNG stream on both paths
    a, b = (DQNPolicy(BOX, gym.spaces.Discrete(3), seed=4, dueling=dueling,
                      numpy_inference=flag) for flag in (True, False))
    for _ in range(3):
        np.testing.assert_array_equal(a.compute_actions(x)[0], b.compute_actions(x)[0])
    assert a.timesteps == b.timesteps == 33
    # staleness: a train step and a target sync
    batch = SampleBatch({SB.OBS: x, SB.ACTIONS: np.zeros(11, np.int64),
                         SB.REWARDS: np.ones(11, np.float32), SB.NEXT_OBS: x,
                         "n_step_discount": np.full(11, 0.9, np.float32)})
    p.learn_on_batch(batch)
    with torch.inference_mode():
        np.testing.assert_allclose(p.q_values(x), p.model(torch.as_tensor(x)).numpy(), atol=1e-5)
    p.set_weights(DQNPolicy(BOX, gym.spaces.Discrete(3), seed=9, dueling=dueling).get_weights())
    with torch.inference_mode():
        np.testing.assert_allclose(p.q_values(x), p.model(torch.as_tensor(x)).numpy(), atol=1e-5)


def trajectories_batch(n, seed):
    rng = np.random.default_rng(seed)
    return SampleBatch({SB.REWARDS: rng.normal(size=n).astype(np.float32),
                        SB.VF_PREDS: rng.normal(size=n).astype(np.float32),
                        SB.TERMINATEDS: rng.random(n) < 0.1,
                        SB.TRUNCATEDS: rng.random(n) < 0.1,
                        SB.BOOTSTRAP_VALUE: rng.normal(size=n).astype(np.float32)})


@pytest.mark.parametrize("policy_class", [PPOPolicy, PGPolicy])
def test_one_pass_postprocessing_equals_per_trajectory(policy_class):
    p = policy_class(BOX, gym.spaces.Discrete(2), gamma=0.9, seed=0,
                     **({"lambda_": 0.8} if policy_class is PPOPolicy else {}))
    batch = trajectories_batch(60, seed=1)
    ends, last_values = [7, 8, 30, 60], [1.5, -2.0, 0.25, 3.0]
    fused = p.postprocess_trajectories(batch, ends, last_values)
    parts = [TorchPolicy.postprocess_trajectory(p, batch.slice(s, e), last_value=v)
             for s, e, v in zip([0, *ends[:-1]], ends, last_values)]
    looped = SampleBatch.concat_samples(parts)
    for key in (SB.ADVANTAGES, SB.VALUE_TARGETS):
        np.testing.assert_array_equal(fused[key], looped[key])


def test_overridden_postprocess_trajectory_is_called_per_trajectory():
    calls = []

    class Custom(PGPolicy):
        def postprocess_trajectory(self, batch, last_value=0.0):
            calls.append((batch.count, last_value))
            return super().postprocess_trajectory(batch, last_value)

    p = Custom(BOX, gym.spaces.Discrete(2), seed=0)
    out = postprocess_trajectories(p, trajectories_batch(10, seed=2), [4, 10], [1.0, 2.0])
    assert calls == [(4, 1.0), (6, 2.0)] and out.count == 10
    # a policy without the one-pass method (DQN) gets the loop too
    d = DQNPolicy(BOX, gym.spaces.Discrete(2), seed=0)
    b = trajectories_batch(10, seed=3).with_columns(
        **{SB.OBS: obs(10), SB.ACTIONS: np.zeros(10, np.int64), SB.NEXT_OBS: obs(10, seed=1)})
    assert postprocess_trajectories(d, b, [5, 10], [0.0, 0.0]).count == 10
