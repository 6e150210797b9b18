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

import gymnasium as gym
import numpy as np
import torch

from flowrl.errors import ConfigError

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
    Samples are ``(B, D)``; ``logp`` takes actions of any shape with ``D`` numbers per
    row, e.g. ``(B, 2, 2)`` for a ``Box`` of shape ``(2, 2)`` as acting returns them.

    >>> d = DiagGaussian(torch.zeros(1, 2))
    >>> round(d.logp(torch.zeros(1, 1)).item(), 4) == round(-_HALF_LOG_2PI, 4)
    True
    >>> d = DiagGaussian(torch.zeros(3, 8))
    >>> bool((d.logp(torch.ones(3, 2, 2)) == d.logp(torch.ones(3, 4))).all())
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
        z = (actions.reshape(self.mean.shape) - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.log_std - _HALF_LOG_2PI).sum(-1)

    def entropy(self) -> torch.Tensor:
        return (self.log_std + _HALF_LOG_2PI_E).sum(-1)

    def kl(self, other: "DiagGaussian") -> torch.Tensor:
        """``KL(self || other)``."""
        return (other.log_std - self.log_std
                + (self.std.pow(2) + (self.mean - other.mean).pow(2))
                / (2.0 * other.std.pow(2)) - 0.5).sum(-1)


#: RLlib 1.x's bounds on a squashed Gaussian's log standard deviation.
LOG_STD_MIN, LOG_STD_MAX = -5.0, 2.0


def tanh_log_det(u: torch.Tensor) -> torch.Tensor:
    """``log(1 - tanh(u)²)`` elementwise, in the stable form ``2 (log 2 - u -
    softplus(-2u))`` (no ``log(0)`` where ``tanh(u)`` rounds to ±1).

    >>> round(tanh_log_det(torch.tensor(0.5)).item(), 5) == round(math.log(1 - math.tanh(0.5) ** 2), 5)
    True
    """
    return 2.0 * (math.log(2.0) - u - torch.nn.functional.softplus(-2.0 * u))


class SquashedGaussian:
    """A diagonal Gaussian squashed by ``tanh`` into the unit box ``(-1, 1)``:
    ``a = tanh(u)``, ``u ~ N(mean, std²)``. ``inputs`` is ``(B, 2D)``: means, then log
    standard deviations (clamped to ``[LOG_STD_MIN, LOG_STD_MAX]``). The density
    carries the change of variables: ``log π(a) = log N(u) - Σ log(1 - tanh(u)²)``.
    Policies map the unit box onto an env's bounds affinely
    (:func:`flowrl.policies.continuous.to_env_actions`); densities here are of the
    unit-box action. It has no closed-form entropy; SAC estimates it as ``-log π``
    of samples.

    >>> d = SquashedGaussian(torch.zeros(1, 2))
    >>> a, logp = d.rsample_logp(torch.Generator().manual_seed(0))
    >>> bool(a.abs().max() < 1), torch.allclose(logp, d.logp(a), atol=1e-4)
    (True, True)
    >>> d.deterministic_sample().tolist()
    [[0.0]]
    """

    def __init__(self, inputs: torch.Tensor):
        self.inputs = inputs
        mean, log_std = torch.chunk(inputs, 2, dim=-1)
        self.mean, self.log_std = mean, log_std.clamp(LOG_STD_MIN, LOG_STD_MAX)
        self.std = self.log_std.exp()

    def _logp_u(self, u: torch.Tensor) -> torch.Tensor:
        z = (u - self.mean) / self.std
        return (-0.5 * z.pow(2) - self.log_std - _HALF_LOG_2PI - tanh_log_det(u)).sum(-1)

    def rsample_logp(self, generator: torch.Generator | None = None
                     ) -> tuple[torch.Tensor, torch.Tensor]:
        """A reparameterised sample ``(B, D)`` (gradients flow to ``inputs``) and its
        log-density ``(B,)``, computed from the pre-squash value (exact where
        ``tanh`` rounds to ±1)."""
        noise = torch.randn(self.mean.shape, generator=generator, dtype=self.mean.dtype,
                            device=self.mean.device)
        u = self.mean + self.std * noise
        return torch.tanh(u), self._logp_u(u)

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        with torch.no_grad():
            return self.rsample_logp(generator)[0]

    def deterministic_sample(self) -> torch.Tensor:
        return torch.tanh(self.mean)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        """``log π(a)`` of unit-box actions (of any shape with ``D`` numbers per row),
        clamped just inside ``(-1, 1)`` before ``atanh``."""
        eps = torch.finfo(self.mean.dtype).eps
        a = actions.reshape(self.mean.shape).clamp(-1.0 + eps, 1.0 - eps)
        return self._logp_u(torch.atanh(a))


class MultiCategorical:
    """Independent categoricals for a ``MultiDiscrete`` space: ``inputs`` ``(B, sum(nvec))``
    are the components' logits side by side; actions are ``(B, len(nvec))``;
    ``logp``, ``entropy`` and ``kl`` sum over the components.

    >>> d = MultiCategorical(torch.zeros(1, 5), (2, 3))
    >>> round(d.logp(torch.tensor([[1, 2]])).exp().item(), 4), d.sample().shape
    (0.1667, torch.Size([1, 2]))
    """

    def __init__(self, inputs: torch.Tensor, nvec):
        self.inputs, self.nvec = inputs, tuple(int(n) for n in nvec)
        self.parts = [Categorical(x) for x in torch.split(inputs, self.nvec, dim=-1)]

    def sample(self, generator: torch.Generator | None = None) -> torch.Tensor:
        return torch.stack([p.sample(generator) for p in self.parts], dim=-1)

    def deterministic_sample(self) -> torch.Tensor:
        return torch.stack([p.deterministic_sample() for p in self.parts], dim=-1)

    def logp(self, actions: torch.Tensor) -> torch.Tensor:
        actions = actions.reshape(len(actions), len(self.parts))
        return sum(p.logp(actions[:, i]) for i, p in enumerate(self.parts))

    def entropy(self) -> torch.Tensor:
        return sum(p.entropy() for p in self.parts)

    def kl(self, other: "MultiCategorical") -> torch.Tensor:
        """``KL(self || other)``."""
        return sum(p.kl(q) for p, q in zip(self.parts, other.parts))


def distribution_for(action_space: gym.Space, where: str = "policy") -> tuple:
    """``(dist_class, num_outputs)`` for ``action_space``: a callable ``inputs ->
    distribution`` and how many inputs per row it takes (Categorical over ``n``,
    MultiCategorical over ``sum(nvec)``, a diagonal Gaussian over ``2 x dims``).

    >>> distribution_for(gym.spaces.Box(-1, 1, (3,)))[1], distribution_for(gym.spaces.MultiDiscrete([2, 4]))[1]
    (6, 6)
    """
    if isinstance(action_space, gym.spaces.Discrete):
        return Categorical, int(action_space.n)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        nvec = tuple(int(n) for n in np.asarray(action_space.nvec).reshape(-1))
        return _MultiCategoricalOf(nvec), int(sum(nvec))
    if isinstance(action_space, gym.spaces.Box):
        return DiagGaussian, 2 * int(np.prod(action_space.shape))
    raise ConfigError(f"{where}: action space {action_space} is not supported; use "
                      "Discrete, MultiDiscrete or Box")


class _MultiCategoricalOf:
    """``inputs -> MultiCategorical(inputs, nvec)``: a picklable dist class for one space."""

    def __init__(self, nvec: tuple):
        self.nvec = nvec

    def __call__(self, inputs: torch.Tensor) -> MultiCategorical:
        return MultiCategorical(inputs, self.nvec)


__all__ = ["Categorical", "DiagGaussian", "MultiCategorical", "SquashedGaussian",
           "distribution_for", "tanh_log_det", "LOG_STD_MIN", "LOG_STD_MAX"]
