"""On-policy batches leave ``new_obs`` out, and training is bit-identical without it.

PG, A2C, PPO, APPO and IMPALA without V-trace bootstrap from the worker's
``bootstrap_value`` (``trains_on_new_obs`` False), so their batches carry each
observation once; DQN keeps ``new_obs``, and flat V-trace IMPALA/APPO, which
bootstrap from ``V(new_obs)`` on the learner, get only its newest frame
(``new_frame``) and rebuild the stacks they need. The old path
(``new_obs`` in the batch) is a subclass that says ``trains_on_new_obs = True``:
same seed, same sampled columns, same weights after learning, bit for bit, on Pong
frames (uint8, frame-stacked).
"""

from __future__ import annotations

import numpy as np
import pytest

from flowrl.policies import A2CPolicy, APPOPolicy, DQNPolicy, IMPALAPolicy, PGPolicy, PPOPolicy
from flowrl.workers import RolloutWorker

SMALL_CNN = {"conv_filters": [[8, 8, 4], [8, 4, 4]], "post_fcnet_hiddens": [32]}
DROPS = [(PGPolicy, {}), (A2CPolicy, {}), (PPOPolicy, {"num_sgd_iter": 2,
                                                       "sgd_minibatch_size": 8}),
         (APPOPolicy, {}), (IMPALAPolicy, {"vtrace": False})]


def keeping_new_obs(cls):
    """``cls`` as it was before: its batches carry ``new_obs``."""
    return type(f"{cls.__name__}KeepingNewObs", (cls,), {"trains_on_new_obs": True,
                                                         "takes_next_frame": False})


def _worker(cls, config, env="ALE/Pong-v5"):
    return RolloutWorker(env, policy=cls, policy_config={"model": SMALL_CNN, **config},
                         num_envs=2, rollout_fragment_length=8, seed=7, torch_threads=1)


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cls, config", DROPS, ids=[c.__name__ for c, _ in DROPS])
def test_dropping_new_obs_changes_no_weight(cls, config):
    pytest.importorskip("ale_py")
    new, old = _worker(cls, config), _worker(keeping_new_obs(cls), config)
    try:
        for _ in range(2):
            a, b = new.sample(), old.sample()
            assert "new_obs" not in a and b["new_obs"].shape == b["obs"].shape
            assert sorted(a.keys()) == sorted(set(b.keys()) - {"new_obs"})
            for k in a.keys():
                np.testing.assert_array_equal(a[k], b[k], err_msg=k)
            new.learn_on_batch(a)
            old.learn_on_batch(b)
            for pid, w in new.get_weights().items():
                for k, v in w.items():
                    np.testing.assert_array_equal(v, old.get_weights()[pid][k], err_msg=k)
            new.set_weights(new.get_weights())
    finally:
        new.stop()
        old.stop()


@pytest.mark.timeout(120)
def test_an_on_policy_pong_batch_row_is_one_observation():
    pytest.importorskip("ale_py")
    w = _worker(PPOPolicy, {})
    try:
        batch = w.sample()
    finally:
        w.stop()
    per_row = sum(v.nbytes for v in batch.values()) / batch.count
    frames = 4 * 84 * 84
    assert batch["obs"].dtype == np.uint8
    assert frames <= per_row < frames + 200   # the stacked frames once, plus a few scalars


@pytest.mark.timeout(120)
def test_dqn_keeps_new_obs():
    pytest.importorskip("ale_py")
    w = _worker(DQNPolicy, {})
    try:
        batch = w.sample()
    finally:
        w.stop()
    assert batch["new_obs"].shape == batch["obs"].shape


def whole_new_obs(cls):
    """``cls`` as it was before: its batches carry the whole ``new_obs``."""
    return type(f"{cls.__name__}WholeNewObs", (cls,), {"takes_next_frame": False})


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cls, config", [(IMPALAPolicy, {}), (APPOPolicy, {"vtrace": True})],
                         ids=["IMPALA", "APPO-vtrace"])
def test_vtrace_learns_from_the_next_frame_exactly_as_from_new_obs(cls, config):
    pytest.importorskip("ale_py")
    new, old = _worker(cls, config), _worker(whole_new_obs(cls), config)
    try:
        for _ in range(2):
            a, b = new.sample(), old.sample()
            assert "new_obs" not in a and a["new_frame"].shape == (a.count, 84, 84)
            np.testing.assert_array_equal(a["new_frame"], b["new_obs"][:, -1])
            assert sorted(a.keys()) == sorted(set(b.keys()) - {"new_obs"} | {"new_frame"})
            for k in set(a.keys()) - {"new_frame"}:
                np.testing.assert_array_equal(a[k], b[k], err_msg=k)
            new.learn_on_batch(a)
            old.learn_on_batch(b)
            for pid, w in new.get_weights().items():
                for k, v in w.items():
                    np.testing.assert_array_equal(v, old.get_weights()[pid][k], err_msg=k)
        per_row = sum(v.nbytes for v in a.values()) / a.count
        assert per_row < 4 * 84 * 84 + 84 * 84 + 200   # one stack and one frame per row
    finally:
        new.stop()
        old.stop()


def test_envs_that_give_no_frame_stacks_keep_new_obs():
    import gymnasium as gym
    from flowrl.workers.sampler import VectorSampler  # noqa: F401  (the path under test)
    w = RolloutWorker("CartPole-v1", policy=IMPALAPolicy, num_envs=2,
                      rollout_fragment_length=8, seed=0)
    try:
        batch = w.sample()
    finally:
        w.stop()
    assert "new_frame" not in batch and batch["new_obs"].shape == (16, 4)
    assert isinstance(w.env.observation_space, gym.spaces.Box)


def test_policies_say_whether_they_train_on_new_obs():
    import gymnasium as gym
    box, two = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)
    assert PPOPolicy(box, two).trains_on_new_obs is False
    assert IMPALAPolicy(box, two).trains_on_new_obs is True
    assert IMPALAPolicy(box, two, vtrace=False).trains_on_new_obs is False


def test_a_fragment_that_breaks_the_frame_stack_promise_is_an_env_error():
    import gymnasium as gym
    from flowrl.errors import EnvError
    from flowrl.workers.sampler import VectorSampler

    class Noise(gym.Env):
        observation_space = gym.spaces.Box(0, 255, (2, 84, 84), np.uint8)
        action_space = gym.spaces.Discrete(2)

        def reset(self, *, seed=None, options=None):
            super().reset(seed=seed)
            return self.observation_space.sample(), {}

        def step(self, action):
            return self.observation_space.sample(), 0.0, False, False, {}

    venv = gym.vector.SyncVectorEnv([Noise], autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    policy = IMPALAPolicy(Noise.observation_space, Noise.action_space, model=SMALL_CNN, seed=0)
    sampler = VectorSampler(venv, policy, fragment_length=4, seed=0, frame_stacks=True,
                            step_error=lambda e: EnvError(f"env Noise: {e}"))
    with pytest.raises(EnvError, match=r"env Noise: its observations are not frame stacks"):
        sampler.sample()


@pytest.mark.timeout(120)
@pytest.mark.parametrize("cls, config", [(IMPALAPolicy, {}), (APPOPolicy, {"vtrace": True})],
                         ids=["IMPALA", "APPO-vtrace"])
def test_vtrace_targets_on_pong_equal_the_workers_returns_on_policy(cls, config):
    """On on-policy Pong fragments (several envs, fragments cut mid-game, clipped
    rewards), V-trace with rho = 1 is the lambda = 1 return: the learner's targets,
    bootstrapped from stacks it rebuilds from ``new_frame``, equal the workers'
    ``value_targets`` (discounted returns bootstrapped from their own values), and
    the learner's action distribution is the one the workers sampled from."""
    pytest.importorskip("ale_py")
    import torch

    from flowrl.batch import SampleBatch as SB
    from flowrl.batch import concat_samples
    worker = RolloutWorker("ALE/Pong-v5", policy=cls,
                           policy_config={"model": SMALL_CNN, "lambda_": 1.0, **config},
                           num_envs=3, rollout_fragment_length=40, seed=3, torch_threads=1)
    try:
        batch = concat_samples([worker.sample() for _ in range(8)])
        policy = worker.get_policy()
        train = policy._train_tensors(batch)
        with torch.no_grad():
            inputs, values = policy.model_out(train)
            logp = policy.dist_class(inputs).logp(train[SB.ACTIONS])
            vs, _ = policy.vtrace_targets(train, logp, values)
    finally:
        worker.stop()
    assert (batch["rewards"] != 0).any() and "new_obs" not in batch   # points were scored
    assert len(set(batch["eps_id"].tolist())) >= 3                    # several trajectories
    np.testing.assert_allclose(logp.numpy(), batch["action_logp"], atol=1e-6)
    np.testing.assert_allclose(vs.numpy(), batch["value_targets"], atol=1e-5)
