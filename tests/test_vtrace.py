"""V-trace against a plain loop of the paper's definition; MixInReplay properties."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from flowrl.batch import SampleBatch as SB
from flowrl.errors import ConfigError
from flowrl.ops import MixInReplay
from flowrl.policies import vtrace
from flowrl.policies.impala import vtrace_inputs


def paper_vtrace(mu, pi, gamma, r, v, boot, rho_bar, pg_rho_bar):
    """Eq. (1) of Espeholt et al. written out term by term, sequence by sequence."""
    T, B = r.shape
    vs, adv = np.zeros((T, B)), np.zeros((T, B))
    for b in range(B):
        ratio = np.exp(pi[:, b] - mu[:, b])
        values = list(v[:, b]) + [boot[b]]
        for s in range(T):
            total = values[s]
            for t in range(s, T):
                c_prod = np.prod([min(1.0, ratio[i]) for i in range(s, t)])
                disc = np.prod([gamma[i, b] for i in range(s, t)])
                rho_t = min(rho_bar, ratio[t])
                delta = rho_t * (r[t, b] + gamma[t, b] * values[t + 1] - values[t])
                total += disc * c_prod * delta
            vs[s, b] = total
        for s in range(T):
            v_next = vs[s + 1, b] if s + 1 < T else boot[b]
            adv[s, b] = min(pg_rho_bar, ratio[s]) * (r[s, b] + gamma[s, b] * v_next - values[s])
    return vs, adv


@settings(max_examples=30, deadline=None)
@given(T=st.integers(1, 6), B=st.integers(1, 3), seed=st.integers(0, 10_000),
       rho_bar=st.sampled_from([0.5, 1.0, 2.0]), pg_rho_bar=st.sampled_from([0.5, 1.0, 3.0]))
def test_vtrace_matches_the_paper_definition(T, B, seed, rho_bar, pg_rho_bar):
    rng = np.random.default_rng(seed)
    mu, pi = rng.normal(size=(T, B)) - 1, rng.normal(size=(T, B)) - 1
    gamma = rng.choice([0.0, 0.9, 0.99], size=(T, B))
    r, v, boot = rng.normal(size=(T, B)), rng.normal(size=(T, B)), rng.normal(size=B)
    vs, adv = vtrace(mu, pi, gamma, r, v, boot, clip_rho_threshold=rho_bar,
                     clip_pg_rho_threshold=pg_rho_bar)
    want_vs, want_adv = paper_vtrace(mu, pi, gamma, r, v, boot, rho_bar, pg_rho_bar)
    np.testing.assert_allclose(vs, want_vs, rtol=1e-9, atol=1e-9)
    np.testing.assert_allclose(adv, want_adv, rtol=1e-9, atol=1e-9)
    t_vs, t_adv = vtrace(*(torch.tensor(x) for x in (mu, pi, gamma, r, v, boot)),
                         clip_rho_threshold=rho_bar, clip_pg_rho_threshold=pg_rho_bar)
    assert isinstance(t_vs, torch.Tensor) and not t_vs.requires_grad
    np.testing.assert_allclose(t_vs.numpy(), vs, rtol=1e-9)
    np.testing.assert_allclose(t_adv.numpy(), adv, rtol=1e-9)


def test_on_policy_vtrace_is_the_n_step_return():
    # π = μ: ρ = c = 1, so v_s = Σ_t γ^{t-s} r_t + γ^{T-s} V(x_T), whatever V is.
    T, gamma = 4, 0.9
    r = np.array([[1.0], [2.0], [3.0], [4.0]])
    v = np.array([[5.0], [-1.0], [0.5], [2.0]])
    logp = np.full((T, 1), -0.7)
    vs, adv = vtrace(logp, logp, np.full((T, 1), gamma), r, v, np.array([10.0]))
    want = [sum(gamma ** (t - s) * r[t, 0] for t in range(s, T)) + gamma ** (T - s) * 10.0
            for s in range(T)]
    np.testing.assert_allclose(vs[:, 0], want)
    np.testing.assert_allclose(adv[:, 0], r[:, 0] + gamma * np.append(want[1:], 10.0) - v[:, 0])


def test_vtrace_checks_shapes_and_thresholds():
    z = np.zeros((3, 2))
    with pytest.raises(ConfigError, match=r"values has shape \(3, 1\)"):
        vtrace(z, z, z, z, np.zeros((3, 1)), np.zeros(2))
    with pytest.raises(ConfigError, match=r"bootstrap_value has shape \(3,\)"):
        vtrace(z, z, z, z, z, np.zeros(3))
    with pytest.raises(ConfigError, match=r"time-major \[T, B\]"):
        vtrace(z[0], z[0], z[0], z[0], z[0], np.zeros(()))
    with pytest.raises(ConfigError, match=r"clip_rho_threshold=0"):
        vtrace(z, z, z, z, z, np.zeros(2), clip_rho_threshold=0)


def test_flat_rows_with_cuts_equal_time_major_vtrace():
    # Two envs' fragments of T steps, env-major as workers sample them; env 1's
    # episode terminates at step 1. The flat [N, 1] form with bootstrapped cuts
    # must equal V-trace on the [T, B] layout with V(x_T) as bootstrap.
    T, B, gamma = 4, 2, 0.9
    rng = np.random.default_rng(0)
    r, v = rng.normal(size=(T, B)), rng.normal(size=(T, B))
    mu, pi = rng.normal(size=(T, B)) - 1, rng.normal(size=(T, B)) - 1
    term = np.zeros((T, B), bool)
    term[1, 1] = True
    boot = rng.normal(size=B)
    next_v = np.concatenate([v[1:], boot[None]])
    disc = gamma * ~term
    want_vs, want_adv = vtrace(mu, pi, disc, r, v, boot)
    flat = lambda x: torch.tensor(x.T.reshape(-1))  # noqa: E731 - env-major rows
    eps = np.array([[0] * T, [1, 1, 2, 2]]).T
    ts = np.array([[0, 1, 2, 3], [5, 6, 0, 1]]).T
    train = {SB.EPS_ID: flat(eps), SB.T: flat(ts), SB.TERMINATEDS: flat(term),
             SB.TRUNCATEDS: flat(np.zeros((T, B), bool)), SB.REWARDS: flat(r)}
    d, rew = vtrace_inputs(train, flat(next_v * ~term).float(), gamma)
    vs, adv = vtrace(flat(mu)[:, None], flat(pi)[:, None], d.double()[:, None],
                     rew.double()[:, None], flat(v)[:, None], torch.zeros(1, dtype=torch.float64))
    np.testing.assert_allclose(vs[:, 0].numpy(), want_vs.T.reshape(-1), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(adv[:, 0].numpy(), want_adv.T.reshape(-1), rtol=1e-5, atol=1e-5)


@settings(max_examples=40, deadline=None)
@given(num_slots=st.integers(1, 5), proportion=st.sampled_from([0.0, 0.3, 1.0, 2.5]),
       n=st.integers(1, 30), seed=st.integers(0, 1000))
def test_mixin_replay_emits_each_fresh_batch_then_recent_replays(num_slots, proportion, n, seed):
    mix = MixInReplay(num_slots, proportion, seed=seed)
    for i in range(n):
        out = mix(i)
        assert out[0] == i
        assert all(max(0, i - num_slots + 1) <= x <= i for x in out[1:])
        assert len(out) - 1 <= int(np.ceil(proportion))


@pytest.mark.parametrize("proportion", [0.25, 1.0, 1.5])
def test_mixin_replay_mean_matches_the_proportion(proportion):
    mix = MixInReplay(4, proportion, seed=1)
    replays = [len(mix(i)) - 1 for i in range(4000)]
    assert abs(np.mean(replays) - proportion) < 0.05


def test_mixin_replay_rejects_bad_settings():
    with pytest.raises(ConfigError, match="set num_slots > 0"):
        MixInReplay(0, 0.5)
    with pytest.raises(ConfigError, match=r"replay_proportion=-1"):
        MixInReplay(2, -1)
    with pytest.raises(ConfigError, match=r"num_slots=-1"):
        MixInReplay(-1, 0.0)
    assert MixInReplay(0, 0.0)("x") == ["x"]
