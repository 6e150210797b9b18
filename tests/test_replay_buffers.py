"""Replay buffers and segment trees against plain-Python models (Hypothesis)."""

from __future__ import annotations

import collections
import math

import gymnasium as gym
import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError
from flowrl.replay import MinTree, PrioritizedReplayBuffer, ReplayBuffer, SumTree
from flowrl.replay.frames import OTHER_COLUMNS_BYTES, row_bytes

SETTINGS = settings(max_examples=30, deadline=None)


# -- segment trees ------------------------------------------------------------------
@SETTINGS
@given(cap=st.integers(1, 40),
       writes=st.lists(st.lists(st.tuples(st.integers(0, 39), st.floats(0.01, 100.0)),
                                min_size=1, max_size=12), min_size=1, max_size=6))
def test_trees_match_plain_model(cap, writes):
    s, m = SumTree(cap), MinTree(cap)
    model: dict[int, float] = {}
    for write in writes:
        write = [(i % cap, v) for i, v in write]
        idx = np.array([i for i, _ in write])
        vals = np.array([v for _, v in write])
        s.set(idx, vals)
        m.set(idx, vals)
        for i, v in write:  # a later duplicate wins, as in a Python loop
            model[i] = v
    assert math.isclose(s.total(), sum(model.values()), rel_tol=1e-9)
    assert m.min() == min(model.values())
    # prefix-sum descent equals a linear scan of the leaves
    leaves = [model.get(i, 0.0) for i in range(cap)]
    cum = np.cumsum(leaves)
    masses = np.linspace(0, s.total(), 17, endpoint=False)
    expect = [int(np.searchsorted(cum, x, side="right")) for x in masses]
    got = s.find_prefix_sum(masses).tolist()
    for g, e, x in zip(got, expect, masses):
        assert g == e or math.isclose(cum[g - 1] if g else 0.0, x, rel_tol=1e-9)
        assert leaves[g] > 0


# -- ring overwrite -----------------------------------------------------------------
@SETTINGS
@given(cap=st.integers(1, 20), sizes=st.lists(st.integers(0, 30), min_size=1, max_size=8),
       prioritized=st.booleans())
def test_ring_overwrite_keeps_the_last_capacity_rows(cap, sizes, prioritized):
    buf = PrioritizedReplayBuffer(cap, seed=0) if prioritized else ReplayBuffer(cap, seed=0)
    model: collections.deque = collections.deque(maxlen=cap)
    slots: list = [None] * cap
    nxt, total = 0, 0
    for n in sizes:
        rows = list(range(total, total + n))
        buf.add(SampleBatch(obs=np.array(rows, dtype=np.int64)) if n else SampleBatch(obs=np.zeros(0, np.int64)))
        for r in rows:  # the plain model: one row at a time into a ring
            model.append(r)
            slots[nxt] = r
            nxt = (nxt + 1) % cap
        total += n
    assert len(buf) == len(model)
    if not model:
        return
    state = buf.get_state()
    assert sorted(state["columns"]["obs"].tolist()) == sorted(model)
    assert state["columns"]["obs"].tolist() == slots[:len(model)]
    sample = buf.sample(50)
    assert set(sample["obs"].tolist()) <= set(model)
    # row ids are insertion numbers, and each sampled row sits in the slot it claims
    assert sample["batch_row_ids"].tolist() == sample["obs"].tolist()
    assert [slots[i] for i in sample["batch_indexes"]] == sample["obs"].tolist()


# -- prioritized sampling ------------------------------------------------------------
@SETTINGS
@given(prios=st.lists(st.floats(0.05, 10.0), min_size=1, max_size=8),
       alpha=st.sampled_from([0.0, 0.5, 0.6, 1.0, 2.0]), seed=st.integers(0, 100))
def test_sampling_frequencies_are_proportional_to_p_alpha(prios, alpha, seed):
    n = len(prios)
    buf = PrioritizedReplayBuffer(n + 3, alpha=alpha, beta=0.4, seed=seed)
    buf.add(SampleBatch(obs=np.arange(n)))
    buf.update_priorities(np.arange(n), np.array(prios))
    draws = 20000
    counts = np.bincount(buf.sample(draws)["obs"], minlength=n) / draws
    pa = np.array(prios) ** alpha
    expect = pa / pa.sum()
    tol = 5 * np.sqrt(expect * (1 - expect) / draws) + 1e-3
    assert np.all(np.abs(counts - expect) <= tol), (counts, expect)


@SETTINGS
@given(prios=st.lists(st.floats(0.05, 10.0), min_size=1, max_size=10),
       alpha=st.sampled_from([0.3, 0.6, 1.0]), beta=st.sampled_from([0.0, 0.4, 1.0]),
       extra=st.integers(0, 5))
def test_importance_weights_match_the_formula(prios, alpha, beta, extra):
    n = len(prios)
    buf = PrioritizedReplayBuffer(n + extra, alpha=alpha, beta=0.9, seed=1)
    buf.add(SampleBatch(obs=np.arange(n)))
    buf.update_priorities(np.arange(n), np.array(prios))
    s = buf.sample(64, beta=beta)
    pa = np.array(prios) ** alpha
    P = pa / pa.sum()
    w_all = (n * P) ** -beta
    expect = w_all[s["obs"]] / w_all.max()
    np.testing.assert_allclose(s["weights"], expect, rtol=1e-5)


def test_new_rows_get_the_largest_priority_seen_and_given_priorities_count():
    buf = PrioritizedReplayBuffer(10, alpha=1.0, seed=0)
    buf.add(SampleBatch(obs=[0, 1]))
    buf.update_priorities(np.array([0]), np.array([7.0]))
    buf.add(SampleBatch(obs=[2]))
    assert buf._sum.get(np.array([2])).tolist() == [7.0]
    buf.add(SampleBatch(obs=[3, 4]), priorities=np.array([0.5, 9.0]))
    assert buf._sum.get(np.array([3, 4])).tolist() == [0.5, 9.0]
    assert buf.stats()["max_priority"] == 9.0


# -- bad input never corrupts a tree ----------------------------------------------------
@pytest.mark.parametrize("indexes, priorities, match", [
    ([0, 1], [1.0, float("nan")], "finite and > 0"),
    ([0, 1], [1.0, 0.0], "finite and > 0"),
    ([0, 1], [1.0, -2.0], "finite and > 0"),
    ([0, 1], [1.0, float("inf")], "finite and > 0"),
    ([0, -1], [1.0, 1.0], r"must lie in \[0, 8\)"),
    ([0, 8], [1.0, 1.0], r"must lie in \[0, 8\)"),
    ([0, 5], [1.0, 1.0], "never filled"),
    ([0, 1], [1.0], "2 rows"),
])
def test_bad_priority_updates_raise_and_leave_the_trees_alone(indexes, priorities, match):
    buf = PrioritizedReplayBuffer(8, seed=0)
    buf.add(SampleBatch(obs=[0, 1, 2, 3]))
    before = buf.get_state()
    tree, mtree = buf._sum.tree.copy(), buf._min.tree.copy()
    with pytest.raises(ValueError, match=match):
        buf.update_priorities(np.array(indexes), np.array(priorities))
    np.testing.assert_array_equal(buf._sum.tree, tree)
    np.testing.assert_array_equal(buf._min.tree, mtree)
    assert buf.get_state()["max_priority"] == before["max_priority"]


@pytest.mark.parametrize("make, match", [
    (lambda: ReplayBuffer(0), r"ReplayBuffer\(capacity=0\): must be an int >= 1"),
    (lambda: PrioritizedReplayBuffer(-3), r"capacity=-3"),
    (lambda: PrioritizedReplayBuffer(10, alpha=-0.1), r"alpha=-0.1\): must be a finite number >= 0"),
    (lambda: PrioritizedReplayBuffer(10, beta=float("nan")), r"beta=nan"),
    (lambda: ReplayBuffer(2.5), r"capacity=2.5"),
])
def test_bad_construction_is_a_config_error(make, match):
    with pytest.raises(ConfigError, match=match):
        make()


def test_bad_adds_and_samples():
    buf = PrioritizedReplayBuffer(4, seed=0)
    with pytest.raises(ValueError, match="the buffer is empty"):
        buf.sample(2)
    buf.add(SampleBatch(obs=[0, 1]))
    with pytest.raises(ConfigError, match=r"but the buffer stores \['obs'\] \(new: \['x'\], "
                                          r"missing: \['obs'\]\)"):
        buf.add(SampleBatch(x=[0]))
    with pytest.raises(ValueError, match="finite and > 0"):
        buf.add(SampleBatch(obs=[2]), priorities=np.array([0.0]))
    assert len(buf) == 2  # the rejected rows were not written
    with pytest.raises(ConfigError, match="n=0"):
        buf.sample(0)
    with pytest.raises(ConfigError, match="drop them first"):
        buf.add(SampleBatch(obs=[1], weights=[1.0]))


# -- stale priorities -----------------------------------------------------------------
def test_priorities_for_overwritten_rows_are_dropped_and_counted():
    buf = PrioritizedReplayBuffer(4, alpha=1.0, seed=0)
    buf.add(SampleBatch(obs=[0, 1, 2, 3]))
    s = buf.sample(16)
    buf.add(SampleBatch(obs=[4, 5]))  # overwrites slots 0 and 1
    before = buf._sum.get(np.array([0, 1])).copy()
    written = buf.update_priorities(s["batch_indexes"], np.full(16, 50.0),
                                    row_ids=s["batch_row_ids"])
    stale = int(np.isin(s["batch_indexes"], [0, 1]).sum())
    assert written == 16 - stale
    assert buf.stats()["num_stale_priority_updates"] == stale
    np.testing.assert_array_equal(buf._sum.get(np.array([0, 1])), before)


# -- checkpoints ----------------------------------------------------------------------
@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_a_restored_buffer_draws_what_the_original_would(cls):
    buf = cls(16, seed=3)
    for i in range(5):
        buf.add(SampleBatch(obs=np.arange(i * 5, i * 5 + 5), r=np.ones(5, np.float32)))
        buf.sample(3)
    if cls is PrioritizedReplayBuffer:
        s = buf.sample(8)
        buf.update_priorities(s["batch_indexes"], np.arange(1, 9, dtype=float))
    state = buf.get_state()
    other = cls(16, seed=99)
    other.set_state(state)
    a, b = buf.sample(32), other.sample(32)
    for k in a.keys():
        np.testing.assert_array_equal(a[k], b[k])
    assert buf.stats() == other.stats()
    with pytest.raises(ConfigError, match="capacity 16, this one has 8"):
        cls(8).set_state(state)


# -- frame-stacked observations: one frame per row -------------------------------------
def _stacked_episodes(rng, lengths, k=4, size=3):
    """Rows of episodes of stacked frames as an Atari env gives them (reset frames
    repeated at the start), with unique frame contents."""
    obs, new_obs, counter = [], [], 0
    for length in lengths:
        frames = [rng.integers(0, 255, (size, size), dtype=np.uint8) for _ in range(length + 1)]
        stack = [frames[0]] * k
        for t in range(length):
            nxt = stack[1:] + [frames[t + 1]]
            obs.append(np.stack(stack))
            new_obs.append(np.stack(nxt))
            stack = nxt
            counter += 1
    return np.stack(obs), np.stack(new_obs)


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_frame_stacks_are_stored_once_and_rebuilt_exactly_through_wraparound(cls):
    rng = np.random.default_rng(0)
    obs, new_obs = _stacked_episodes(rng, [7, 3, 12, 1, 9, 20, 5], size=12)
    n = len(obs)
    capacity = 23
    buf, plain = cls(capacity, seed=1), cls(capacity, seed=1, dedup_frames=False)
    ids = np.arange(n)
    for lo in range(0, n, 5):   # batches of 5 rows, wrapping the ring several times
        part = SampleBatch(obs=obs[lo:lo + 5], new_obs=new_obs[lo:lo + 5], t=ids[lo:lo + 5])
        buf.add(part)
        plain.add(part)
        stored = min(lo + 5, n)
        got = buf.sample(64)
        t = got["t"]
        assert (t >= stored - capacity).all() and (t < stored).all()
        np.testing.assert_array_equal(got["obs"], obs[t])
        np.testing.assert_array_equal(got["new_obs"], new_obs[t])
    # a frame a row plus whole stacks for the first 3 rows of each episode, against 8
    assert buf.stats()["bytes_per_row"] < plain.stats()["bytes_per_row"] / 2
    # a checkpoint round trip keeps every row
    again = cls(capacity, seed=1)
    again.set_state(buf.get_state())
    s = again.sample(64)
    np.testing.assert_array_equal(s["obs"], obs[s["t"]])
    np.testing.assert_array_equal(s["new_obs"], new_obs[s["t"]])


def test_a_long_episode_costs_one_frame_a_row_and_old_checkpoints_still_load():
    rng = np.random.default_rng(2)
    size = 30
    obs, new_obs = _stacked_episodes(rng, [150, 90], size=size)
    buf = ReplayBuffer(200, seed=0)
    for lo in range(0, len(obs), 7):   # the ring wraps; batches split episodes
        buf.add(SampleBatch(obs=obs[lo:lo + 7], new_obs=new_obs[lo:lo + 7],
                            t=np.arange(lo, min(lo + 7, len(obs)))))
    frame = size * size
    # a frame, 24 bytes of ids and depth, the t column, and the whole stacks of the
    # first rows of an episode and the next frames of its last rows, spread thin
    assert buf.stats()["bytes_per_row"] < 1.25 * frame
    assert len(buf._frames.next_frames) == 2   # the end of each episode, the newest row
    got = buf.sample(300)
    np.testing.assert_array_equal(got["obs"], obs[got["t"]])
    np.testing.assert_array_equal(got["new_obs"], new_obs[got["t"]])
    # a checkpoint of the earlier format, where every row kept its next frame
    state = buf.get_state()
    t = state["columns"]["t"]   # the row each slot holds
    del state["frames"]["next_frame_slots"], state["frames"]["next_frames"]
    state["frames"]["next_frame"] = new_obs[t][:, -1]
    again = ReplayBuffer(200, seed=0)
    again.set_state(state)
    assert again.stats()["bytes_per_row"] == buf.stats()["bytes_per_row"]
    _, rebuilt = again._frames.read(np.arange(len(t)))
    np.testing.assert_array_equal(rebuilt, new_obs[t])


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_frame_stacks_added_one_row_at_a_time(cls):
    # a custom loop that adds each transition as it comes (this used to fail on the
    # first row: an empty comparison of the rows within the batch)
    obs, new_obs = _stacked_episodes(np.random.default_rng(3), [5, 4], size=4)
    buf = cls(6, seed=0)
    for i in range(len(obs)):
        buf.add(SampleBatch(obs=obs[i:i + 1], new_obs=new_obs[i:i + 1], t=np.arange(i, i + 1)))
        got = buf.sample(40)
        np.testing.assert_array_equal(got["obs"], obs[got["t"]])
        np.testing.assert_array_equal(got["new_obs"], new_obs[got["t"]])


@pytest.mark.parametrize("cls", [ReplayBuffer, PrioritizedReplayBuffer])
def test_n_step_rows_are_stored_one_frame_a_row_too(cls):
    # Ape-X's rows: new_obs is the stack 3 steps on (fewer at an episode's or a
    # fragment's end), from fragments of 20 steps of two envs, env-major
    from flowrl.policies.dqn import n_step_transitions
    rng = np.random.default_rng(4)
    size, frag = 30, 20
    frame = size * size
    envs = [_stacked_episodes(rng, lengths, size=size) for lengths in ([70, 50], [45, 75])]
    ends = [np.isin(np.arange(120), np.cumsum(lengths) - 1) for lengths in ([70, 50], [45, 75])]
    buf = cls(100, seed=0)
    want_obs, want_new = [], []
    for lo in range(0, 120, frag):
        parts = []
        for (obs, new_obs), end in zip(envs, ends):
            _, last, _ = n_step_transitions(np.zeros(frag), end[lo:lo + frag],
                                            np.zeros(frag, bool), n=3, gamma=0.99)
            parts.append((obs[lo:lo + frag], new_obs[lo:lo + frag][last]))
        obs = np.concatenate([p[0] for p in parts])
        new_obs = np.concatenate([p[1] for p in parts])
        first = len(want_obs)
        want_obs.extend(obs)
        want_new.extend(new_obs)
        buf.add(SampleBatch(obs=obs, new_obs=new_obs, t=np.arange(first, len(want_obs))))
        got = buf.sample(200)
        np.testing.assert_array_equal(got["obs"], np.stack(want_obs)[got["t"]])
        np.testing.assert_array_equal(got["new_obs"], np.stack(want_new)[got["t"]])
    # a frame a row, and per fragment the whole stacks of its first 3 rows and the
    # next frame of its last one (8 frames a row stored whole): what the build-time
    # memory check counts for fragments of 20 from several envs
    space = gym.spaces.Box(0, 255, (4, size, size), np.uint8)
    counted = row_bytes(space, run_length=frag, frame_stacks=True)
    assert counted - OTHER_COLUMNS_BYTES < buf.stats()["bytes_per_row"] < counted < 2 * frame
    assert not buf._frames.next_anchors


@settings(max_examples=60, deadline=None)
@given(seed=st.integers(0, 2**16), n=st.integers(1, 5), capacity=st.integers(1, 40),
       frag=st.integers(1, 12), values=st.integers(1, 3))
def test_frame_stack_storage_is_exact_for_any_episodes_n_and_ring(seed, n, capacity, frag,
                                                                  values):
    # frames of 2 pixels from a tiny alphabet, so unrelated stacks often look alike
    from flowrl.policies.dqn import n_step_transitions
    rng = np.random.default_rng(seed)
    lengths = rng.integers(1, 15, size=4).tolist()
    obs, new_obs = _stacked_episodes(rng, lengths, k=3, size=1)
    obs, new_obs = obs % values, new_obs % values
    end = np.isin(np.arange(len(obs)), np.cumsum(lengths) - 1)
    buf = ReplayBuffer(capacity, seed=0)
    want_new = []
    for lo in range(0, len(obs), frag):
        _, last, _ = n_step_transitions(np.zeros(len(end[lo:lo + frag])), end[lo:lo + frag],
                                        np.zeros(len(end[lo:lo + frag]), bool), n=n,
                                        gamma=0.9)
        want_new.extend(new_obs[lo:lo + frag][last])
        hi = len(want_new)
        buf.add(SampleBatch(obs=obs[lo:hi], new_obs=np.stack(want_new[lo:]),
                            t=np.arange(lo, hi)))
        if buf._frames is None:
            continue   # the first batch held no one-frame shift: stored whole
        slots = np.arange(len(buf))
        got_obs, got_new = buf._frames.read(slots)
        t = buf._columns["t"][slots]
        np.testing.assert_array_equal(got_obs, obs[t])
        np.testing.assert_array_equal(got_new, np.stack(want_new)[t])


def test_the_memory_check_counts_whole_stacks_where_envs_take_turns():
    from flowrl.algorithms.apex import ApeXConfig
    from flowrl.algorithms.dqn import DQNConfig, replay_run_length
    from flowrl.replay.frames import check_replay_memory
    one_env = DQNConfig(env="CartPole-v1", rollout_fragment_length=4)
    apex = ApeXConfig(env="CartPole-v1", num_workers=2, num_envs_per_worker=4,
                      rollout_fragment_length=20)
    assert replay_run_length(one_env) is None and replay_run_length(apex) == 20
    pong = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    with pytest.raises(ConfigError, match=r"ApeXConfig\.buffer_size=500000: the replay buffer "
                                          r"needs about 5\.5 GiB \(11,899 bytes a row\)"):
        check_replay_memory("ApeXConfig.buffer_size", 500_000, [pong], available=5 * 2**30,
                            run_length=replay_run_length(apex), frame_stacks=True)
    assert check_replay_memory("DQNConfig.buffer_size", 500_000, [pong], available=5 * 2**30,
                               run_length=replay_run_length(one_env),
                               frame_stacks=True) == 500_000 * 7312


def test_rows_that_are_not_frame_stacks_are_kept_whole():
    rng = np.random.default_rng(1)
    obs, new_obs = _stacked_episodes(rng, [6, 6])
    new_obs[3] = rng.integers(0, 255, new_obs[3].shape, dtype=np.uint8)  # breaks the shift
    obs[8] = rng.integers(0, 255, obs[8].shape, dtype=np.uint8)          # breaks the chain
    buf = ReplayBuffer(8, seed=0)
    buf.add(SampleBatch(obs=obs[:2], new_obs=new_obs[:2], t=np.arange(2)))  # stacks
    buf.add(SampleBatch(obs=obs[2:], new_obs=new_obs[2:], t=np.arange(2, 12)))
    got = buf.sample(100)
    np.testing.assert_array_equal(got["obs"], obs[got["t"]])
    np.testing.assert_array_equal(got["new_obs"], new_obs[got["t"]])
