"""RL maths against hand-computed closed-form answers and a plain-Python model."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowrl.errors import ConfigError
from flowrl.policies.maths import discounted_returns, explained_variance, gae


def test_discounted_returns_closed_form():
    # constant reward 1, no boundary, bootstrap 0: G_t = (1 - γ^(T-t)) / (1 - γ)
    g = 0.9
    out = discounted_returns(np.ones(5), np.zeros(5, bool), 0.0, gamma=g)
    np.testing.assert_allclose(out, [(1 - g ** (5 - t)) / (1 - g) for t in range(5)], rtol=1e-6)


def test_discounted_returns_bootstrap_and_boundaries():
    r = [1.0, 2.0, 3.0, 4.0]
    term = [False, True, False, False]
    trunc = [False, False, True, False]
    boot = [0.0, 0.0, 10.0, 0.0]
    out = discounted_returns(r, term, 100.0, gamma=0.5, truncateds=trunc, bootstrap_values=boot)
    # t=3: 4 + .5*100; t=2: truncated -> 3 + .5*10; t=1: terminal -> 2; t=0: 1 + .5*2
    assert out.tolist() == [2.0, 2.0, 8.0, 54.0]


def test_gae_lambda_one_equals_returns_minus_values():
    rng = np.random.default_rng(0)
    r, v = rng.normal(size=7), rng.normal(size=7)
    term = np.array([0, 0, 1, 0, 0, 0, 0], bool)
    adv, vt = gae(r, v, term, 0.7, gamma=0.95, lam=1.0)
    ret = discounted_returns(r, term, 0.7, gamma=0.95)
    np.testing.assert_allclose(adv, ret - v, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(vt, ret, rtol=1e-5, atol=1e-5)


def test_gae_lambda_zero_is_td_error():
    r = np.array([1.0, 0.0, 2.0])
    v = np.array([0.5, 1.0, 1.5])
    adv, _ = gae(r, v, [False, False, False], 3.0, gamma=0.9, lam=0.0)
    np.testing.assert_allclose(adv, [1 + 0.9 * 1.0 - 0.5, 0 + 0.9 * 1.5 - 1.0, 2 + 0.9 * 3 - 1.5], rtol=1e-6)


def test_gae_hand_computed_with_truncation():
    # γ = 0.5, λ = 0.5; episode A: steps 0-1 truncated at 1 (V(final)=2);
    # episode B: step 2, cut by fragment end (last_value = 4)
    r, v = [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]
    adv, vt = gae(r, v, [False, False, False], 4.0, gamma=0.5, lam=0.5,
                  truncateds=[False, True, False], bootstrap_values=[0.0, 2.0, 0.0])
    d1 = 1 + 0.5 * 2.0 - 1.0      # 1.0
    d0 = 1 + 0.5 * 1.0 - 1.0      # 0.5
    d2 = 1 + 0.5 * 4.0 - 1.0      # 2.0
    np.testing.assert_allclose(adv, [d0 + 0.25 * d1, d1, d2])
    np.testing.assert_allclose(vt, np.array(adv) + 1.0)


def test_terminated_wins_over_truncated():
    adv, _ = gae([1.0], [0.0], [True], 0.0, gamma=0.9, lam=0.9,
                 truncateds=[True], bootstrap_values=[50.0])
    assert adv.tolist() == [1.0]


def model_gae(r, v, done_term, done_trunc, boot, last, gamma, lam):
    """Plain-Python per-step model of GAE."""
    T = len(r)
    adv = [0.0] * T
    nxt = 0.0
    for t in reversed(range(T)):
        if done_term[t]:
            nv, carry = 0.0, 0.0
        elif done_trunc[t]:
            nv, carry = boot[t], 0.0
        elif t == T - 1:
            nv, carry = last, 0.0
        else:
            nv, carry = v[t + 1], nxt
        adv[t] = r[t] + gamma * nv - v[t] + gamma * lam * carry
        nxt = adv[t]
    return adv


floats = st.floats(-5, 5, allow_nan=False)


@settings(max_examples=60, deadline=None)
@given(st.integers(1, 12).flatmap(lambda n: st.tuples(
    st.lists(floats, min_size=n, max_size=n), st.lists(floats, min_size=n, max_size=n),
    st.lists(st.booleans(), min_size=n, max_size=n), st.lists(st.booleans(), min_size=n, max_size=n),
    st.lists(floats, min_size=n, max_size=n), floats)))
def test_gae_matches_model_and_vectorised_form(case):
    r, v, term, trunc, boot, last = case
    trunc_only = [b and not a for a, b in zip(term, trunc)]
    adv, _ = gae(r, v, term, last, gamma=0.9, lam=0.8, truncateds=trunc, bootstrap_values=boot)
    expected = model_gae(r, v, term, trunc_only, boot, last, 0.9, 0.8)
    np.testing.assert_allclose(adv, expected, rtol=1e-4, atol=1e-4)
    # (T, 2) input: each column is the same independent trajectory
    two = lambda x: np.stack([x, x], axis=1)
    adv2, _ = gae(two(r), two(v), two(term), np.array([last, last]), gamma=0.9, lam=0.8,
                  truncateds=two(trunc), bootstrap_values=two(boot))
    np.testing.assert_allclose(adv2[:, 0], adv, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(adv2[:, 1], adv, rtol=1e-5, atol=1e-5)


def test_shape_errors_name_the_argument():
    with pytest.raises(ConfigError, match="terminateds has shape"):
        gae([1.0, 2.0], [0.0, 0.0], [False], 0.0, gamma=0.9, lam=0.9)
    with pytest.raises(ConfigError, match="last_value has shape"):
        discounted_returns(np.ones((3, 2)), np.zeros((3, 2)), 0.0, gamma=0.9)
    with pytest.raises(ConfigError, match="bootstrap_values is None"):
        discounted_returns([1.0], [False], 0.0, gamma=0.9, truncateds=[True])


def test_explained_variance():
    y = np.array([1.0, 2.0, 3.0, 4.0])
    assert explained_variance(y, y) == 1.0
    assert explained_variance(np.full(4, y.mean()), y) == 0.0
    assert explained_variance(-10 * y, y) == -1.0
    assert explained_variance([1.0, 1.0], [1.0, 1.0]) == 1.0
