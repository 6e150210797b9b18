"""Remote rollout workers act through numpy replicas of the built-in policies: the
same actions, values and advantages as the real policy at every batch size, no
torch import in the worker until the real policy is asked for (explicitly:
``materialize()``, ``RolloutWorker.get_policy``), and then the real policy with the
replica's weights and random streams in the replica's place."""

from __future__ import annotations

import os
import sys

import gymnasium as gym
import numpy as np
import pytest

from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError
from flowrl.policies import A2CPolicy, APPOPolicy, DQNPolicy, IMPALAPolicy, PGPolicy, PPOPolicy
from flowrl.policies.numpy_acting import NumpyMLP, max_rows
from flowrl.policies.replica import (REPLICA_STATE, NumpyActingPolicy, acting_replica,
                                     set_policy_state)
from flowrl.workers import RolloutWorker, WorkerConfig, WorkerSet
from flowrl.workers.worker_set import _with_acting_replicas

SB = SampleBatch
BOX4, TWO = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
SPACES = {"box-discrete": (BOX4, gym.spaces.Discrete(3)),
          "box-gaussian": (BOX4, gym.spaces.Box(-2, 2, (2,))),
          "onehot-discrete": (gym.spaces.Discrete(5), TWO)}


def pair(cls=PPOPolicy, spaces="box-discrete", seed=3, **kwargs):
    """A real policy and a replica with the same arguments and weights."""
    obs_space, act_space = SPACES[spaces]
    real = cls(obs_space, act_space, seed=seed, **kwargs)
    replica = acting_replica(cls)(obs_space, act_space, seed=seed, **kwargs)
    replica.set_weights(real.get_weights())
    return real, replica


def observations(spaces, n, seed=0):
    space = SPACES[spaces][0]
    rng = np.random.default_rng(seed)
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(0, space.n, n)
    return rng.normal(size=(n, *space.shape)).astype(np.float32)


@pytest.mark.parametrize("spaces", sorted(SPACES))
@pytest.mark.parametrize("explore", [True, False])
def test_replica_acts_exactly_as_the_real_policys_numpy_path(spaces, explore):
    real, replica = pair(spaces=spaces)
    for step in range(5):  # the random streams stay in step call after call
        x = observations(spaces, 8, seed=step)
        a_real, e_real = real.compute_actions(x, explore)
        a_rep, e_rep = replica.compute_actions(x, explore)
        np.testing.assert_array_equal(a_rep, a_real)
        assert sorted(e_rep) == sorted(e_real)
        for k in e_real:
            np.testing.assert_allclose(e_rep[k], e_real[k], rtol=1e-6, atol=1e-6)
    assert not replica.materialized


@pytest.mark.parametrize("cls", [PGPolicy, A2CPolicy, PPOPolicy, IMPALAPolicy, APPOPolicy])
def test_every_built_in_actor_critic_policy_has_a_replica_with_its_settings(cls):
    real, replica = pair(cls, gamma=0.9, lambda_=0.8)
    assert (replica.gamma, replica.lambda_, replica.use_critic) == (0.9, 0.8, real.use_critic)
    x = observations("box-discrete", 200)  # beyond one numpy chunk: the replica splits it
    np.testing.assert_allclose(replica.value(x), real.value(x), rtol=1e-5, atol=1e-5)
    batch = SampleBatch(rewards=np.arange(6, dtype=np.float32),
                        terminateds=np.array([0, 0, 1, 0, 0, 0], bool),
                        vf_preds=np.linspace(0, 1, 6).astype(np.float32))
    for k in (SB.ADVANTAGES, SB.VALUE_TARGETS):
        np.testing.assert_array_equal(
            replica.postprocess_trajectories(batch, [3, 6], [0.0, 2.0])[k],
            real.postprocess_trajectories(batch, [3, 6], [0.0, 2.0])[k])
    assert not replica.materialized


WIDE = [256, 256]
#: The most rows one numpy forward of a (256, 256) model takes (the old torch boundary).
WIDE_ROWS = max_rows(NumpyMLP([(np.zeros((256, 256), np.float32), None, None)]))
BATCH_SIZES = sorted({1, 7, 8, 9, WIDE_ROWS - 1, WIDE_ROWS, WIDE_ROWS + 1,
                      2 * WIDE_ROWS + 3, 300} - {0})


@pytest.mark.parametrize("cls", [PGPolicy, PPOPolicy, IMPALAPolicy, APPOPolicy])
@pytest.mark.parametrize("spaces", ["box-discrete", "box-gaussian"])
@pytest.mark.parametrize("explore", [True, False])
def test_replica_equals_the_real_policy_bit_for_bit_at_every_batch_size(cls, spaces, explore):
    # A fast path that agrees only below some batch size is a bug: test the sizes
    # around the old boundary, one after another on the same random streams.
    real, replica = pair(cls, spaces, hidden_sizes=WIDE)
    assert WIDE_ROWS == 3
    for step, n in enumerate(BATCH_SIZES):
        x = observations(spaces, n, seed=step)
        a_real, e_real = real.compute_actions(x, explore)
        a_rep, e_rep = replica.compute_actions(x, explore)
        np.testing.assert_array_equal(a_rep, a_real, err_msg=f"{n} rows")
        assert sorted(e_rep) == sorted(e_real)
        for k in e_real:
            np.testing.assert_array_equal(e_rep[k], e_real[k], err_msg=f"{k}, {n} rows")
        np.testing.assert_array_equal(replica.value(x), real.value(x), err_msg=f"{n} rows")
        np.testing.assert_array_equal(e_real[SB.VF_PREDS], real.value(x))
    assert not replica.materialized


@pytest.mark.parametrize("cls", [PPOPolicy, IMPALAPolicy])
def test_a_model_wider_than_the_numpy_budget_acts_a_row_at_a_time(cls):
    # A (512, 512) layer alone is NUMPY_MAX_MACS multiply-adds per row: the chunk size
    # must stay at least one row (it was 0 and every forward raised).
    real, replica = pair(cls, "box-discrete", hidden_sizes=[512, 512])
    assert real._numpy_cache.get(real.model).max_rows == 1
    for n in (1, 10):
        x = observations("box-discrete", n, seed=n)
        a_real, e_real = real.compute_actions(x, True)
        a_rep, e_rep = replica.compute_actions(x, True)
        np.testing.assert_array_equal(a_rep, a_real)
        np.testing.assert_array_equal(e_rep[SB.ACTION_LOGP], e_real[SB.ACTION_LOGP])
        np.testing.assert_array_equal(replica.value(x), real.value(x))


@pytest.mark.parametrize("dueling", [True, False])
def test_dqn_q_values_and_greedy_actions_do_not_depend_on_the_batch_size(dueling):
    # DQN has no replica; its acting path must not switch with the batch size either:
    # a batch's Q-values are those of its numpy-sized pieces, bit for bit.
    policy = DQNPolicy(BOX4, gym.spaces.Discrete(3), seed=0, dueling=dueling,
                       hidden_sizes=WIDE, hiddens=WIDE)
    policy.set_epsilon(0.0)
    for n in BATCH_SIZES:
        x = observations("box-discrete", n, seed=n)
        pieces = np.concatenate([policy.q_values(x[i:i + WIDE_ROWS])
                                 for i in range(0, n, WIDE_ROWS)])
        np.testing.assert_array_equal(policy.q_values(x), pieces, err_msg=f"{n} rows")
        actions, extra = policy.compute_actions(x, explore=False)
        np.testing.assert_array_equal(actions, pieces.argmax(axis=1), err_msg=f"{n} rows")
        np.testing.assert_array_equal(extra[SB.ACTION_DIST_INPUTS], pieces)


def test_only_classes_that_opt_in_in_their_own_body_get_a_replica():
    class Sub(PPOPolicy):  # may act differently: does not inherit the opt-in
        pass

    class Acts(PPOPolicy):
        numpy_replica = True

        def compute_actions(self, obs_batch, explore=True, **kwargs):
            return super().compute_actions(obs_batch, explore, **kwargs)

    assert acting_replica(Sub) is None
    assert acting_replica(Acts) is None  # overrides an acting method
    assert acting_replica(DQNPolicy) is None
    assert acting_replica(lambda obs, act, **kw: PPOPolicy(obs, act, **kw)) is None
    assert acting_replica(PPOPolicy).policy_class() is PPOPolicy


def test_a_replica_has_only_its_surface_and_says_how_to_get_the_real_policy():
    real, replica = pair()
    for name in ("kl_coeff", "learn_on_batch", "compute_gradients", "model", "optimizer"):
        with pytest.raises(AttributeError, match=rf"NumpyActingPolicy \(the numpy replica of "
                           rf"PPOPolicy\) has no attribute '{name}'.*replica\.materialize\(\)"
                           r".*RolloutWorker\.get_policy\(\)"):
            getattr(replica, name)
    assert not hasattr(replica, "update_kl") and not replica.materialized
    replica.note = 1  # a plain attribute: it stays on the replica, nothing is built
    assert replica.note == 1 and not replica.materialized


def test_materialize_hands_over_weights_settings_and_random_streams():
    real, replica = pair()
    x = observations("box-discrete", 8)
    for _ in range(3):
        real.compute_actions(x)
        replica.compute_actions(x)
    replica.gamma = 0.5
    inner = replica.materialize()
    assert replica.materialized and type(inner) is PPOPolicy and replica.materialize() is inner
    assert inner.kl_coeff == real.kl_coeff and inner.gamma == 0.5
    for k, v in real.get_weights().items():
        np.testing.assert_array_equal(inner.get_weights()[k], v)
    # the action stream continues where the replica left it
    np.testing.assert_array_equal(inner.compute_actions(x)[0], real.compute_actions(x)[0])
    # and the replica's own methods now reach the real policy: they never disagree
    np.testing.assert_array_equal(replica.compute_actions(x)[0], real.compute_actions(x)[0])
    replica.set_weights(PPOPolicy(*SPACES["box-discrete"], seed=7).get_weights())
    for k, v in replica.get_weights().items():
        np.testing.assert_array_equal(inner.get_weights()[k], v)


def test_a_replica_learns_like_the_real_policy_once_materialized():
    worker = RolloutWorker("CartPole-v1", policy=PGPolicy, num_envs=2, rollout_fragment_length=16,
                           seed=0)
    batch = worker.sample()
    real = PGPolicy(worker.env.observation_space, worker.env.action_space, seed=1)
    replica = acting_replica(PGPolicy)(worker.env.observation_space, worker.env.action_space,
                                       seed=1)
    replica.set_weights(real.get_weights())
    grads_real, _ = real.compute_gradients(batch)
    grads_rep, _ = replica.materialize().compute_gradients(batch)
    assert len(grads_rep) == len(grads_real) == 6
    for g_real, g_rep in zip(grads_real, grads_rep):
        np.testing.assert_allclose(g_rep, g_real, rtol=1e-6)


def test_get_policy_puts_the_real_policy_in_the_replicas_place():
    factory = acting_replica(PPOPolicy)
    worker = RolloutWorker("CartPole-v1", policy=factory, num_envs=2, rollout_fragment_length=8,
                           seed=0)
    twin = RolloutWorker("CartPole-v1", policy=PPOPolicy, num_envs=2, rollout_fragment_length=8,
                         seed=0)
    try:
        weights = twin.get_weights()
        worker.set_weights(weights)
        replica = worker.policy_map["default_policy"]
        assert type(replica) is NumpyActingPolicy
        first = worker.sample()
        np.testing.assert_array_equal(first[SB.ACTIONS], twin.sample()[SB.ACTIONS])
        assert worker.get_weights()["default_policy"].keys() == weights["default_policy"].keys()
        assert not replica.materialized   # weights and sampling use the replica
        real = worker.get_policy()
        assert type(real) is PPOPolicy and replica.materialized
        assert worker.policy_map["default_policy"] is real and worker.sampler.policy is real
        assert worker.foreach_policy(lambda p, pid: p) == [real]
        # it acts on from where the replica was: the same batches as the twin's
        for _ in range(2):
            ours, theirs = worker.sample(), twin.sample()
            for k in (SB.ACTIONS, SB.ACTION_LOGP, SB.VF_PREDS, SB.ADVANTAGES):
                np.testing.assert_array_equal(ours[k], theirs[k], err_msg=k)
        worker.learn_on_batch(first)
        twin.learn_on_batch(first)
        for k, v in twin.get_weights()["default_policy"].items():
            np.testing.assert_array_equal(worker.get_weights()["default_policy"][k], v)
    finally:
        worker.stop()
        twin.stop()


def test_learning_and_user_functions_on_a_worker_get_the_real_policy():
    factory = acting_replica(PGPolicy)
    for call in (lambda w, b: w.learn_on_batch(b), lambda w, b: w.compute_gradients(b),
                 lambda w, b: w.foreach_trainable_policy(lambda p, pid: p.lr)):
        worker = RolloutWorker("CartPole-v1", policy=factory, num_envs=2,
                               rollout_fragment_length=8, seed=0)
        try:
            worker.set_weights({"default_policy": PGPolicy(worker.env.observation_space,
                                                           worker.env.action_space,
                                                           seed=0).get_weights()})
            call(worker, worker.sample())
            assert type(worker.policy_map["default_policy"]) is PGPolicy
        finally:
            worker.stop()


def test_a_replica_checkpoints_its_acting_state_without_building_the_real_policy():
    real, replica = pair(spaces="box-gaussian")
    x = observations("box-gaussian", 8)
    replica.compute_actions(x)  # its generators have moved on from the seed
    state = replica.get_state()
    assert not replica.materialized
    assert state[REPLICA_STATE] is True and sorted(state) == sorted(
        [REPLICA_STATE, "weights", "np_rng", "action_rng"])
    expected = [replica.compute_actions(x)[0] for _ in range(3)]

    # into a fresh replica (another seed, other weights): the same actions follow
    _, fresh = pair(spaces="box-gaussian", seed=9)
    set_policy_state(fresh, state)
    assert not fresh.materialized
    for a in expected:
        np.testing.assert_array_equal(fresh.compute_actions(x)[0], a)
    # into the real class (a run restoring without replicas): weights and the numpy
    # generators, the rest of its state as it was
    other = PPOPolicy(*SPACES["box-gaussian"], seed=9, kl_coeff=0.3)
    set_policy_state(other, state)
    assert other.kl_coeff == 0.3
    for k, v in state["weights"].items():
        np.testing.assert_array_equal(other.get_weights()[k], v)
    for a in expected:
        np.testing.assert_array_equal(other.compute_actions(x)[0], a)
    # into a replica that has materialized: the same, through the real policy
    _, grown = pair(spaces="box-gaussian", seed=9)
    grown.materialize()
    set_policy_state(grown, state)
    for a in expected:
        np.testing.assert_array_equal(grown.compute_actions(x)[0], a)


def test_a_full_policy_state_needs_the_real_policy():
    real, replica = pair()
    state = real.get_state()  # optimizer, torch generator, kl_coeff: the real class's
    real.kl_coeff = 0.9
    assert "optimizer" in state
    with pytest.raises(ConfigError, match=r"NumpyActingPolicy.set_state: this is a full "
                       r"PPOPolicy state .*replica\.materialize\(\)\.set_state\(state\)"):
        replica.set_state(state)
    assert not replica.materialized
    replica.materialize().set_state(state)
    assert replica.materialize().kl_coeff == state["kl_coeff"]
    # a materialized replica checkpoints as the real policy does
    assert sorted(replica.get_state()) == sorted(state)
    # a worker restoring a full state puts the real policy in the replica's place
    worker = RolloutWorker("CartPole-v1", policy=acting_replica(PPOPolicy), num_envs=1,
                           rollout_fragment_length=4, seed=0)
    try:
        full = RolloutWorker("CartPole-v1", policy=PPOPolicy, num_envs=1,
                             rollout_fragment_length=4, seed=5)
        worker.set_state(full.get_state())
        assert type(worker.policy_map["default_policy"]) is PPOPolicy
        full.stop()
    finally:
        worker.stop()


def test_settings_changed_on_the_replica_reach_the_real_policy():
    real, replica = pair()
    replica.gamma, replica.lambda_ = 0.5, 0.25
    assert not replica.materialized
    assert (replica.materialize().gamma, replica.materialize().lambda_) == (0.5, 0.25)


def test_weights_of_another_model_are_refused_by_the_real_policy_by_name():
    _, replica = pair()
    bad = {k: v for k, v in replica.get_weights().items() if not k.startswith("vf.")}
    with pytest.raises(ConfigError, match=r"NumpyActingPolicy\(PPOPolicy\).set_weights: "
                       r"missing \['vf.0.bias'"):
        replica.set_weights(bad)
    wrong_shape = {k: (v[:, :2] if v.ndim == 2 else v) for k, v in replica.get_weights().items()}
    with pytest.raises(ConfigError, match=r"'pi.0.weight' has shape \(64, 2\), expected "
                       r"\(64, 4\)"):
        replica.set_weights(wrong_shape)
    # a first set_weights of another width is refused as the real policy refuses it
    other = PPOPolicy(*SPACES["box-discrete"], hidden_sizes=[32, 32]).get_weights()
    fresh = acting_replica(PPOPolicy)(*SPACES["box-discrete"], seed=0)
    with pytest.raises(ConfigError, match="has shape"):
        fresh.set_weights(other)
    narrow = acting_replica(PPOPolicy)(*SPACES["box-discrete"], seed=0, hidden_sizes=[32, 32])
    narrow.set_weights(other)
    assert not narrow.materialized


def test_a_replica_acts_only_with_weights_and_torch_acting_gets_the_real_policy():
    obs_space, act_space = SPACES["box-discrete"]
    fresh = acting_replica(PPOPolicy)(obs_space, act_space, seed=0)
    x = observations("box-discrete", 4)
    for call in (lambda: fresh.compute_actions(x), lambda: fresh.value(x), fresh.get_weights,
                 fresh.get_state):
        with pytest.raises(ConfigError, match=r"replica of PPOPolicy has no weights yet; call "
                           r"set_weights first .*replica\.materialize\(\)"):
            call()
    assert not fresh.materialized
    forced = acting_replica(PPOPolicy)(obs_space, act_space, seed=0, numpy_inference=False)
    assert type(forced) is PPOPolicy and forced.numpy_inference is False
    dict_obs = gym.spaces.Dict({"x": BOX4})
    with pytest.raises(ConfigError, match="observation space Dict.* is not supported"):
        acting_replica(PPOPolicy)(dict_obs, act_space, seed=0)


def test_remote_workers_act_through_replicas_and_the_local_worker_learns():
    ws = WorkerSet("CartPole-v1", A2CPolicy, WorkerConfig(rollout_fragment_length=8, seed=0,
                                                         num_envs_per_worker=2),
                   num_workers=2, backend="local")
    try:
        assert type(ws.local_worker().get_policy()) is A2CPolicy
        replicas = [w.policy_map["default_policy"] for w in ws.remote_workers()]
        assert all(type(p) is NumpyActingPolicy and not p.materialized for p in replicas)
        batch = ws.remote_workers()[0].sample()
        assert batch.count == 16 and not replicas[0].materialized
        # A3C-style: a remote worker computes gradients; the real policy takes over.
        grads, _ = ws.remote_workers()[0].compute_gradients(batch)
        local, _ = ws.local_worker().compute_gradients(batch)
        assert replicas[0].materialized and not replicas[1].materialized
        assert type(ws.remote_workers()[0].policy_map["default_policy"]) is A2CPolicy
        assert len(grads["default_policy"]) == len(local["default_policy"]) == 12
        for g_remote, g_local in zip(grads["default_policy"], local["default_policy"]):
            np.testing.assert_allclose(g_remote, g_local, rtol=1e-5, atol=1e-7)
    finally:
        ws.stop()


def test_multi_agent_policy_specs_get_replicas_too():
    kwargs = WorkerConfig(policies={"a": PPOPolicy, "b": DQNPolicy},
                          policy_mapping_fn=lambda agent: "a").worker_kwargs(None)
    specs = _with_acting_replicas(kwargs)["policies"]
    assert specs["a"].policy_class == acting_replica(PPOPolicy)
    assert specs["b"].policy_class is DQNPolicy


TORCH_FREE_PREMISE = (
    "a rollout worker acting through numpy replicas imported torch: the replicas' start-up "
    "gain (benchmarks/startup.py) rests on such workers never importing it. Find the import "
    "on the acting path (python -X importtime) and remove it, or drop the replicas")


def test_a_worker_with_replicas_samples_and_checkpoints_without_importing_torch(tmp_path):
    # A fresh interpreter: builds a worker with the replica factory (pickled here, it
    # names the class without importing it), loads weights, samples, saves and
    # restores its state, and reports whether torch got imported.
    import pickle
    import subprocess
    from pathlib import Path

    factory = acting_replica(PPOPolicy)
    weights = PPOPolicy(BOX4, TWO, seed=0).get_weights()
    (tmp_path / "args.pkl").write_bytes(pickle.dumps((factory, weights)))
    script = f"""
import pickle, sys
from flowrl.workers.rollout_worker import RolloutWorker
factory, weights = pickle.loads(open({str(tmp_path / "args.pkl")!r}, "rb").read())
w = RolloutWorker("CartPole-v1", policy=factory, num_envs=4, rollout_fragment_length=70,
                  seed=0, torch_threads=1)
w.set_weights({{"default_policy": weights}})
assert type(w.policy_map["default_policy"]).__name__ == "NumpyActingPolicy"
for _ in range(2):
    assert w.sample().count == 280
w.set_state(w.get_state())
w.sample()
print("torch" in sys.modules)
"""
    root = Path(__file__).resolve().parents[1]
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300, cwd=root, env={**os.environ, "PYTHONPATH": str(root)})
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False", TORCH_FREE_PREMISE


@pytest.mark.ray
def test_a_ray_worker_set_with_replicas_keeps_torch_out_of_its_workers(ray_session):
    ws = WorkerSet("CartPole-v1", PPOPolicy,
                   WorkerConfig(rollout_fragment_length=64, num_envs_per_worker=8, seed=0),
                   num_workers=2, backend="ray")
    try:
        counts = ws.foreach_remote_worker(lambda w: w.sample().count)
        assert counts == [512, 512]
        torch_in = ws.foreach_remote_worker(lambda w: "torch" in sys.modules)
        assert torch_in == [False, False], TORCH_FREE_PREMISE
    finally:
        ws.stop()


@pytest.mark.ray
def test_a_ray_worker_samples_without_torch_and_imports_it_when_it_must_learn(ray_session):
    ray = ray_session
    # Defined here, it pickles by value: a module-level function would make the
    # worker import this test module, and with it torch.
    _torch_loaded = lambda worker: (  # noqa: E731
        "torch" in sys.modules,
        sys.modules["torch"].get_num_threads() if "torch" in sys.modules else None)
    config = WorkerConfig(rollout_fragment_length=8, num_envs_per_worker=2, seed=0)
    kwargs = _with_acting_replicas(config.worker_kwargs(PPOPolicy))
    # Its own runtime env gives the actor a process of its own, fresh from Ray's pool.
    actor = ray.remote(RolloutWorker).options(
        runtime_env={"env_vars": {"FLOWRL_TEST_FRESH_WORKER": "1"}}).remote(
        "CartPole-v1", worker_index=1, torch_threads=1, **kwargs)
    local = RolloutWorker("CartPole-v1", policy=PPOPolicy, policy_config={}, seed=0,
                          num_envs=2, rollout_fragment_length=8)
    try:
        ray.get(actor.set_weights.remote(local.get_weights()), timeout=60)
        batch = ray.get(actor.sample.remote(), timeout=60)
        assert batch.count == 16
        assert ray.get(actor.apply.remote(_torch_loaded), timeout=60) == (False, None)
        stats = ray.get(actor.learn_on_batch.remote(batch), timeout=60)
        assert "default_policy" in stats
        assert ray.get(actor.apply.remote(_torch_loaded), timeout=60) == (True, 1)
    finally:
        ray.kill(actor)
        local.stop()


@pytest.mark.ray
def test_a_ray_worker_set_hands_its_remote_workers_replicas(ray_session):
    ws = WorkerSet("CartPole-v1", PPOPolicy, WorkerConfig(rollout_fragment_length=8, seed=0),
                   num_workers=2, backend="ray")
    try:
        kinds = ws.foreach_worker(lambda w: (
            type(w.policy_map["default_policy"]).__name__,
            getattr(w.policy_map["default_policy"], "materialized", None)))
        assert kinds == [("PPOPolicy", None), ("NumpyActingPolicy", False),
                         ("NumpyActingPolicy", False)]
        weights = ws.foreach_worker(lambda w: w.get_weights()["default_policy"])
        for remote in weights[1:]:  # the replicas have the local worker's weights
            for k, v in weights[0].items():
                np.testing.assert_array_equal(remote[k], v)
    finally:
        ws.stop()


@pytest.mark.ray
def test_saving_and_restoring_a_ray_run_keeps_its_workers_torch_free(ray_session, tmp_path):
    from flowrl.algorithms import PPO, PPOConfig

    def config():
        return PPOConfig(env="CartPole-v1", backend="ray", num_workers=2, seed=0,
                         rollout_fragment_length=32, train_batch_size=128,
                         sgd_minibatch_size=64, num_sgd_iter=1)

    def remote_view(algo):
        return algo.workers.foreach_worker(
            lambda w: (getattr(w.policy_map["default_policy"], "materialized", None),
                       w.policy_map["default_policy"].get_state()["np_rng"]))[1:]

    with PPO(config()) as algo:
        algo.train()
        algo.save(str(tmp_path / "ck"))
        saved = remote_view(algo)
        assert [m for m, _ in saved] == [False, False]
        torch_in = algo.workers.foreach_worker(lambda w: "torch" in sys.modules)[1:]
        assert torch_in == [False, False]
    with PPO(config()) as fresh:
        fresh.restore(str(tmp_path / "ck"))
        assert remote_view(fresh) == saved  # the workers' generators, restored, no torch
        assert fresh.train()["training_iteration"] == 2
        assert [m for m, _ in remote_view(fresh)] == [False, False]


def test_workers_that_learn_from_the_start_get_the_real_policy():
    from flowrl.algorithms import A3C, A3CConfig

    ws = WorkerSet("CartPole-v1", A2CPolicy,
                   WorkerConfig(rollout_fragment_length=8, seed=0, numpy_replicas=False),
                   num_workers=1, backend="local")
    try:
        assert type(ws.remote_workers()[0].get_policy()) is A2CPolicy
    finally:
        ws.stop()
    assert A3C.worker_config(A3CConfig(env="CartPole-v1")).numpy_replicas is False


def test_a_replica_resolves_model_and_hidden_sizes_as_the_real_policy_does():
    # hidden_sizes (a policy config's older spelling) sets the model's fcnet_hiddens
    # for both, so the real policy's weights fit the replica
    obs_space, act_space = SPACES["box-discrete"]
    args = dict(seed=0, model={"fcnet_activation": "relu"}, hidden_sizes=[8])
    real = PPOPolicy(obs_space, act_space, **args)
    replica = acting_replica(PPOPolicy)(obs_space, act_space, **args)
    replica.set_weights(real.get_weights())
    x = observations("box-discrete", 5)
    np.testing.assert_allclose(replica.value(x), real.value(x), rtol=1e-6)


@pytest.mark.parametrize("cls, config", [
    (IMPALAPolicy, {}), (IMPALAPolicy, {"vtrace": False}),
    (APPOPolicy, {}), (APPOPolicy, {"vtrace": True})],
    ids=["impala", "impala-no-vtrace", "appo", "appo-vtrace"])
def test_replica_and_real_policy_workers_give_batches_that_concat(cls, config):
    # IMPALA and APPO decide per instance whether learning reads new_obs (flat
    # V-trace does); a replica built from the same config must decide alike, or a
    # batch from a worker whose real policy took over (get_policy(), a restarted
    # worker) has other columns than one from a replica, and they do not concat.
    ws = WorkerSet("CartPole-v1", cls, WorkerConfig(rollout_fragment_length=8, seed=0,
                                                   policy_config=config),
                   num_workers=2, backend="local")
    try:
        replica_worker, real_worker = ws.remote_workers()
        real = real_worker.get_policy()  # the real policy takes the replica's place
        assert type(real) is cls
        replica = replica_worker.policy_map["default_policy"]
        assert type(replica) is NumpyActingPolicy and not replica.materialized
        assert replica.trains_on_new_obs is real.trains_on_new_obs \
            is cls(BOX4, TWO, **config).trains_on_new_obs
        batches = [replica_worker.sample(), real_worker.sample(), ws.local_worker().sample()]
    finally:
        ws.stop()
    assert sorted(batches[0]) == sorted(batches[1]) == sorted(batches[2])
    assert (SB.NEXT_OBS in batches[0]) is real.trains_on_new_obs
    assert SB.concat_samples(batches).count == sum(b.count for b in batches)


def test_a_new_obs_property_that_reads_more_than_the_settings_gets_no_replica():
    class ReadsItsOptimizer(IMPALAPolicy):
        numpy_replica = True

        @property
        def trains_on_new_obs(self):
            return self.optimizer is not None

    assert acting_replica(ReadsItsOptimizer) is None
    assert acting_replica(IMPALAPolicy, {"vtrace": False}).trains_on_new_obs is False
