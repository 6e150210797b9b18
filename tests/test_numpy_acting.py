"""The built-in policies act through numpy (flowrl/policies/numpy_acting.py) at
every batch size the same way: a batch's actions, log-probs and values are those
of its numpy-sized pieces on the same random streams. Remote workers act through
the real policy; a remote worker's state saved when they acted through numpy
replicas still restores."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError
from flowrl.policies import APPOPolicy, DQNPolicy, IMPALAPolicy, PGPolicy, PPOPolicy
from flowrl.policies.numpy_acting import NumpyMLP, max_rows
from flowrl.workers import RolloutWorker, WorkerConfig, WorkerSet

SB = SampleBatch
BOX4, TWO = gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2)
SPACES = {"box-discrete": (BOX4, gym.spaces.Discrete(3)),
          "box-gaussian": (BOX4, gym.spaces.Box(-2, 2, (2,))),
          "onehot-discrete": (gym.spaces.Discrete(5), TWO)}


def observations(spaces, n, seed=0):
    space = SPACES[spaces][0]
    rng = np.random.default_rng(seed)
    if isinstance(space, gym.spaces.Discrete):
        return rng.integers(0, space.n, n)
    return rng.normal(size=(n, *space.shape)).astype(np.float32)


WIDE = [256, 256]
#: The most rows one numpy forward of a (256, 256) model takes.
WIDE_ROWS = max_rows(NumpyMLP([(np.zeros((256, 256), np.float32), None, None)]))
BATCH_SIZES = sorted({1, 7, 8, 9, WIDE_ROWS - 1, WIDE_ROWS, WIDE_ROWS + 1,
                      2 * WIDE_ROWS + 3, 300} - {0})


@pytest.mark.parametrize("cls", [PGPolicy, PPOPolicy, IMPALAPolicy, APPOPolicy])
@pytest.mark.parametrize("spaces", ["box-discrete", "box-gaussian"])
@pytest.mark.parametrize("explore", [True, False])
def test_numpy_acting_gives_a_batch_what_its_pieces_get_at_every_batch_size(cls, spaces,
                                                                             explore):
    # A fast path that agrees only below some batch size is a bug: test the sizes
    # around the chunk boundary, one after another on the same random streams.
    whole, pieces = (cls(*SPACES[spaces], seed=3, hidden_sizes=WIDE) for _ in range(2))
    assert WIDE_ROWS == 3 and whole._numpy_cache.get(whole.model) is not None
    for step, n in enumerate(BATCH_SIZES):
        x = observations(spaces, n, seed=step)
        a_whole, e_whole = whole.compute_actions(x, explore)
        parts = [pieces.compute_actions(x[i:i + WIDE_ROWS], explore)
                 for i in range(0, n, WIDE_ROWS)]
        np.testing.assert_array_equal(a_whole, np.concatenate([a for a, _ in parts]),
                                      err_msg=f"{n} rows")
        for k in e_whole:
            np.testing.assert_array_equal(e_whole[k], np.concatenate([e[k] for _, e in parts]),
                                          err_msg=f"{k}, {n} rows")
        np.testing.assert_array_equal(e_whole[SB.VF_PREDS], whole.value(x))


@pytest.mark.parametrize("cls", [PPOPolicy, IMPALAPolicy])
def test_a_model_wider_than_the_numpy_budget_acts_a_row_at_a_time(cls):
    # A (512, 512) layer alone is NUMPY_MAX_MACS multiply-adds per row: the chunk size
    # must stay at least one row (it was 0 and every forward raised).
    policy = cls(*SPACES["box-discrete"], seed=3, hidden_sizes=[512, 512])
    assert policy._numpy_cache.get(policy.model).max_rows == 1
    for n in (1, 10):
        actions, extra = policy.compute_actions(observations("box-discrete", n, seed=n), True)
        assert actions.shape == (n,) and extra[SB.VF_PREDS].shape == (n,)


@pytest.mark.parametrize("dueling", [True, False])
def test_dqn_q_values_and_greedy_actions_do_not_depend_on_the_batch_size(dueling):
    # A batch's Q-values are those of its numpy-sized pieces, bit for bit.
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


def test_a_remote_worker_state_saved_by_a_numpy_replica_restores_into_the_policy():
    # Remote workers of older runs acted through numpy replicas and saved only their
    # weights and numpy generators, marked "numpy_replica": a restore sets those and
    # leaves the rest of the policy's state as it is.
    saved = PPOPolicy(*SPACES["box-gaussian"], seed=3)
    x = observations("box-gaussian", 8)
    saved.compute_actions(x)  # its generators have moved on from the seed
    full = saved.get_state()
    state = {"numpy_replica": True, "weights": full["weights"], "np_rng": full["np_rng"],
             "action_rng": full["action_rng"]}
    expected = [saved.compute_actions(x)[0] for _ in range(3)]
    other = PPOPolicy(*SPACES["box-gaussian"], seed=9, kl_coeff=0.3)
    worker = RolloutWorker("CartPole-v1", policy=lambda *_, **__: other, num_envs=1)
    worker.set_state({"policies": {"default_policy": state}, "policies_to_train": []})
    worker.stop()
    assert other.kl_coeff == 0.3
    for k, v in state["weights"].items():
        np.testing.assert_array_equal(other.get_weights()[k], v)
    for a in expected:
        np.testing.assert_array_equal(other.compute_actions(x)[0], a)


def test_remote_workers_act_through_the_real_policy():
    ws = WorkerSet("CartPole-v1", PPOPolicy, WorkerConfig(rollout_fragment_length=8, seed=0),
                   num_workers=1, backend="local")
    try:
        remote = ws.remote_workers()[0]
        assert type(remote.policy_map["default_policy"]) is PPOPolicy
        assert remote.sample().count == 8
    finally:
        ws.stop()


def test_the_removed_numpy_replicas_switch_says_so():
    with pytest.raises(ConfigError, match=r"WorkerConfig\(numpy_replicas=\.\.\.\): this field "
                                          r"was removed.*drop the argument"):
        WorkerConfig(numpy_replicas=False)
