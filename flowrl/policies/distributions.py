"""Action distributions built from a policy network's output (``action_dist_inputs``).

Sampling takes an explicit ``torch.Generator`` so a seeded policy samples the same
actions every run. Shapes: ``inputs`` is ``(B, D)``; ``logp``/``entropy``/``kl``
return ``(B,)``.

>>> g = torch.Generator().manual_seed(0)
>>> d = Categorical(torch.tensor([[0.0, 10.0]]))
>>> d.deterministic_sample().tolist(), d.sample(g).tolist()
([1], [1])
"""

from __future__ import annotations

import math

import torch

_HALF_LOG_2PI_E = 0.5 * math.log(2 * math.pi * math.e)
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


class Categorical:
    """Categorical over ``D`` actions from unnormalised logits ``(B, D)``.

    >>> d = Categorical(torch.zeros(1, 4))
    >>> round(d.entropy().item(), 4) == round(math.log(4), 4), d.logp(torch.tensor([2])).exp().item()
    (True, 0.25)
    """

    def __init__(self, inputs: torch.Tensor):
        self.inputs = inputs
        self.log_probs = torch.log_softmax(inputs, dim=-1)

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        """One action per row, by inverse CDF: the number of categories whose
        cumulative probability is below ``u ~ U(0, 1]`` (scaled by the row's total, so
        rounding never yields a category past the last one with mass). Exact, seeded
        by ``generator``, and cheaper than ``torch.multinomial`` for small batches."""
        cdf = self.log_probs.exp().cumsum(-1)
        u = torch.rand(cdf.shape[:-1] + (1,), generator=generator, dtype=cdf.dtype)
        return (cdf < (1.0 - u) * cdf[..., -1:]).sum(-1)

    def deterministic_sample(self) -> torch.Tensor:
        return self.log_probs.argmax(dim=-1)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        return self.log_probs.gather(-1, actions.long().unsqueeze(-1)).squeeze(-1)

    def entropy(self) -> torch.Tensor:
        return -(self.log_probs.exp() * self.log_probs).sum(-1)

    def kl(self, other: "Categorical") -> torch.Tensor:
        """``KL(self || other)``."""
        return (self.log_probs.exp() * (self.log_probs - other.log_probs)).sum(-1)


class DiagGaussian:
    """Diagonal Gaussian; ``inputs`` is ``(B, 2D)``: means then log standard deviations.

    >>> d = DiagGaussian(torch.zeros(1, 2))
    >>> round(d.logp(torch.zeros(1, 1)).item(), 4) == round(-_HALF_LOG_2PI, 4)
    True
    """

    def __init__(self, inputs: torch.Tensor):
        self.inputs = inputs
        self.mean, self.log_std = torch.chunk(inputs, 2, dim=-1)
        self.std = self.log_std.exp()

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        noise = torch.randn(self.mean.shape, generator=generator, dtype=self.mean.dtype)
        return self.mean + self.std * noise

    def deterministic_sample(self) -> torch.Tensor:
        return self.mean

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        z = (actions - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.log_std - _HALF_LOG_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + _HALF_LOG_2PI_E).sum(-1)

    def kl(self, other: "DiagGaussian") -> torch.Tensor:
        """``KL(self || other)``."""
        return (other.log_std - self.log_std
                + (self.std.pow(2) + (self.mean - other.mean).pow(2))
                / (2.0 * other.std.pow(2)) - 0.5).sum(-1)


__all__ = ["Categorical", "DiagGaussian"]
