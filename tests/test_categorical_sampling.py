"""Categorical.sample (inverse CDF): right frequencies, never a zero-mass action, seeded."""

from __future__ import annotations

import numpy as np
import torch

from flowrl.policies.distributions import Categorical


def test_frequencies_match_the_probabilities_and_zero_mass_is_never_drawn():
    probs = torch.tensor([0.1, 0.0, 0.6, 0.3, 0.0])
    n = 200_000
    d = Categorical(probs.log().expand(n, 5))
    counts = np.bincount(d.sample(torch.Generator().manual_seed(0)).numpy(), minlength=5)
    assert counts[1] == 0 and counts[4] == 0
    expected = probs.numpy() * n
    nz = expected > 0
    chi2 = float((((counts[nz] - expected[nz]) ** 2) / expected[nz]).sum())
    assert chi2 < 13.8   # chi-square, 2 degrees of freedom, p = 0.001


def test_each_row_uses_its_own_distribution_and_the_generator_seeds_it():
    logits = torch.tensor([[0.0, 30.0], [30.0, 0.0], [0.0, 0.0]]).repeat(1000, 1)
    a = Categorical(logits).sample(torch.Generator().manual_seed(5))
    b = Categorical(logits).sample(torch.Generator().manual_seed(5))
    assert torch.equal(a, b)
    rows = a.reshape(1000, 3)
    assert (rows[:, 0] == 1).all() and (rows[:, 1] == 0).all()
    assert 400 < int(rows[:, 2].sum()) < 600
