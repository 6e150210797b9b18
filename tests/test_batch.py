"""SampleBatch / MultiAgentBatch: construction rules and row-preserving operations."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowrl.batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch, concat_samples
from flowrl.errors import ConfigError


def make_batch(n: int, start: int = 0) -> SampleBatch:
    ids = np.arange(start, start + n)
    return SampleBatch({
        SampleBatch.OBS: np.stack([ids, -ids], axis=1).astype(np.float32),
        SampleBatch.ACTIONS: ids % 3,
        SampleBatch.REWARDS: ids.astype(np.float64),
    })


sizes = st.lists(st.integers(0, 12), min_size=0, max_size=6)


def test_column_constants():
    assert (SampleBatch.OBS, SampleBatch.NEXT_OBS, SampleBatch.VF_PREDS) == (
        "obs", "new_obs", "vf_preds")
    assert SampleBatch.ACTION_DIST_INPUTS == "action_dist_inputs"


def test_unequal_lengths_name_the_column():
    with pytest.raises(ConfigError, match="column 'rewards' has 2 rows but column 'obs' has 3"):
        SampleBatch(obs=np.zeros((3, 1)), rewards=[1.0, 2.0])
    b = make_batch(3)
    with pytest.raises(ConfigError, match="'extra' has 4 rows"):
        b["extra"] = np.zeros(4)


def test_scalar_column_rejected():
    with pytest.raises(ConfigError, match="column 'x' is a scalar"):
        SampleBatch(x=1.0)


def test_columns_are_contiguous():
    strided = np.arange(20).reshape(10, 2)[:, 0]
    assert not strided.flags.c_contiguous
    b = SampleBatch(a=strided)
    assert b["a"].flags.c_contiguous
    assert all(v.flags.c_contiguous for v in b.shuffle(seed=0).values())
    assert all(v.flags.c_contiguous for v in concat_samples([b, b]).values())


def test_slicing_and_access():
    b = make_batch(5)
    assert b[1:3].count == 2 and b.slice(1, 3)[SampleBatch.ACTIONS].tolist() == [1, 2]
    assert b[-2:]["rewards"].tolist() == [3.0, 4.0]
    assert len(b) == b.count == b.env_steps() == b.agent_steps() == 5
    with pytest.raises(ConfigError, match="step 1"):
        b[::2]


def test_copy_is_deep_and_shallow_copy_shares():
    b = make_batch(3)
    c = b.copy()
    c["rewards"][0] = 100.0
    assert b["rewards"][0] == 0.0
    s = b.copy(shallow=True)
    assert s["rewards"] is b["rewards"]


@settings(max_examples=50, deadline=None)
@given(sizes)
def test_concat_loses_and_duplicates_no_row(ns):
    parts, start = [], 0
    for n in ns:
        parts.append(make_batch(n, start))
        start += n
    before = [p["rewards"].copy() for p in parts]
    out = concat_samples(parts)
    assert out.count == sum(ns)
    if sum(ns):
        assert out["rewards"].tolist() == list(range(sum(ns)))
        assert out["obs"][:, 1].tolist() == [-float(i) for i in range(sum(ns))]
    for p, r in zip(parts, before):  # inputs untouched
        np.testing.assert_array_equal(p["rewards"], r)


def test_concat_rejects_mismatched_columns():
    with pytest.raises(ConfigError, match="differing: \\['extra'\\]"):
        concat_samples([make_batch(2), make_batch(2).with_columns(extra=[0, 0])])


@settings(max_examples=50, deadline=None)
@given(st.integers(0, 40), st.integers(0, 2**32 - 1))
def test_shuffle_is_a_permutation_and_new(n, seed):
    b = make_batch(n)
    original = b["rewards"].copy()
    s = b.shuffle(seed=seed)
    assert s is not b
    assert sorted(s["rewards"].tolist()) == original.tolist()
    # rows stay aligned across columns
    np.testing.assert_array_equal(s["obs"][:, 0], s["rewards"])
    np.testing.assert_array_equal(b["rewards"], original)
    np.testing.assert_array_equal(s["rewards"], b.shuffle(seed=seed)["rewards"])


def test_shuffle_accepts_generator():
    b = make_batch(10)
    a = b.shuffle(np.random.default_rng(3))["rewards"]
    np.testing.assert_array_equal(a, b.shuffle(3)["rewards"])


@settings(max_examples=40, deadline=None)
@given(st.integers(0, 30), st.integers(1, 8), st.booleans())
def test_minibatches_cover_every_row_once(n, size, drop_last):
    b = make_batch(n)
    mbs = list(b.minibatches(size, seed=0, drop_last=drop_last))
    assert all(m.count == size for m in mbs[:-1])
    rows = [r for m in mbs for r in m["rewards"].tolist()]
    assert len(rows) == len(set(rows))
    expected = (n // size) * size if drop_last else n
    assert len(rows) == expected


def test_minibatch_size_validated():
    with pytest.raises(ConfigError, match="size must be an int >= 1"):
        list(make_batch(3).minibatches(0))


episodes = st.lists(st.integers(1, 6), min_size=0, max_size=6)


@settings(max_examples=50, deadline=None)
@given(episodes)
def test_split_by_episode_round_trips(lengths):
    eps = np.concatenate([[i] * n for i, n in enumerate(lengths)] or [np.zeros(0)])
    t = np.concatenate([np.arange(n) for n in lengths] or [np.zeros(0)])
    b = SampleBatch(eps_id=eps.astype(np.int64), t=t.astype(np.int64))
    parts = b.split_by_episode()
    assert [p.count for p in parts] == lengths
    assert all(len(set(p["eps_id"].tolist())) == 1 for p in parts)
    if lengths:
        back = concat_samples(parts)
        np.testing.assert_array_equal(back["eps_id"], b["eps_id"])
        np.testing.assert_array_equal(back["t"], b["t"])


def test_split_by_episode_without_eps_id_uses_dones():
    b = SampleBatch(terminateds=[False, True, False, False],
                    truncateds=[False, False, False, True], t=[0, 1, 0, 1])
    assert [p["t"].tolist() for p in b.split_by_episode()] == [[0, 1], [0, 1]]
    with pytest.raises(ConfigError, match="needs an 'eps_id' column"):
        SampleBatch(t=[0]).split_by_episode()


def test_multi_agent_batch_counts_and_concat():
    a = MultiAgentBatch({"p0": make_batch(3), "p1": make_batch(1)}, env_steps=3)
    b = MultiAgentBatch({"p0": make_batch(2, 3)}, env_steps=2)
    assert (a.count, a.env_steps(), a.agent_steps()) == (3, 3, 4)
    c = concat_samples([a, b])
    assert isinstance(c, MultiAgentBatch)
    assert (c.env_steps(), c.agent_steps()) == (5, 6)
    assert c.policy_batches["p0"]["rewards"].tolist() == [0, 1, 2, 3, 4]
    mixed = concat_samples([make_batch(2), a])
    assert mixed.policy_batches[DEFAULT_POLICY_ID].count == 2 and mixed.env_steps() == 5


def test_multi_agent_batch_validation():
    with pytest.raises(ConfigError, match="env_steps must be an int >= 0"):
        MultiAgentBatch({}, -1)
    with pytest.raises(ConfigError, match="policy 'p' maps to a dict"):
        MultiAgentBatch({"p": {"obs": [1]}}, 1)


def test_batches_pickle():
    import pickle
    b = make_batch(4)
    c = pickle.loads(pickle.dumps(b))
    np.testing.assert_array_equal(c["obs"], b["obs"])
    m = pickle.loads(pickle.dumps(b.as_multi_agent()))
    assert m.env_steps() == 4
