"""The adaptive KL penalty coefficient PPO and APPO share (RLlib 1.x rule)."""

from __future__ import annotations

from typing import Any


class AdaptiveKL:
    """Mixin for a policy with a KL penalty ``kl_coeff`` (β) adapted towards
    ``kl_target``; β is part of the policy's checkpointed state.

    >>> class Base:
    ...     def get_state(self): return {}
    >>> class P(AdaptiveKL, Base):
    ...     pass
    >>> p = P(); p.kl_coeff, p.kl_target = 1.0, 0.01
    >>> p.update_kl(0.05), p.update_kl(0.001), p.get_state()
    (1.5, 0.75, {'kl_coeff': 0.75})
    """

    kl_coeff: float
    kl_target: float

    def update_kl(self, sampled_kl: float) -> float:
        """Adapt β from the KL measured in the last training step.

        β grows 1.5x when ``sampled_kl > 2 kl_target``, halves when
        ``sampled_kl < kl_target / 2``, else stays. Returns the new β.
        """
        if sampled_kl > 2.0 * self.kl_target:
            self.kl_coeff *= 1.5
        elif sampled_kl < 0.5 * self.kl_target:
            self.kl_coeff *= 0.5
        return self.kl_coeff

    def get_state(self) -> dict[str, Any]:
        """Base state plus the current KL coefficient."""
        return {**super().get_state(), "kl_coeff": self.kl_coeff}

    def set_state(self, state: dict[str, Any]) -> None:
        super().set_state(state)
        self.kl_coeff = state["kl_coeff"]


__all__ = ["AdaptiveKL"]
