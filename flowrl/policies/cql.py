"""Conservative Q-learning (Kumar et al. 2020), CQL(H) over SAC, as RLlib 1.x has it.

:class:`CQLPolicy` is :class:`~flowrl.policies.sac.SACPolicy` with three changes
(notation of :mod:`flowrl.policies.sac`; ``T``: ``temperature``, ``β``:
``min_q_weight``, ``N``: ``num_actions``):

1. Each critic's loss gets the conservative penalty (:func:`cql_penalty`), which
   pushes Q down on actions the data does not take and up on the data's own::

       P_i = β · (T · mean_s logsumexp_k((Q_i(s, a_k) - log μ(a_k|s)) / T) - mean Q_i(s, a))

   ``Box`` actions: the ``a_k`` are ``N`` uniform actions of the unit box
   (``log μ = log 0.5^dim(A)``), ``N`` actions of ``π(·|s)`` and ``N`` of
   ``π(·|s')`` (``log μ`` their log-density under π, no gradient; Q still takes
   ``s``), 3N in all: RLlib 1.x's importance-sampled logsumexp. ``Discrete(n)``
   actions: the exact logsumexp over all ``n`` actions (``log μ = 0``).
2. With ``lagrangian``, the penalty is weighted by a learned ``α' = exp(log α')``
   (clamped to ``[0, 1e6]``): the critics take ``α' (P_i - τ)`` (``τ``:
   ``lagrangian_thresh``), and ``α'`` takes a step on
   ``L_α' = -mean_i α' (P_i - τ)`` (critic learning rate), so ``α'`` grows while the
   penalty exceeds ``τ`` and shrinks below it.
3. The first ``bc_iters`` updates train the actor by behaviour cloning,
   ``L_π = mean(α log π(ã|s) - log π(a|s))`` with ``a`` the data's action, and SAC's
   actor loss after.

Targets bootstrap without the entropy term, ``y = R + d · min_i Q'_i(s', a')``, as
RLlib 1.x's CQL (and the paper's code) does. The updates run as SAC's: critics,
then actor, then ``α`` (and ``α'`` after the critics, with ``lagrangian``).
"""

from __future__ import annotations

import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl.errors import ConfigError
from flowrl.policies.distributions import SquashedGaussian
from flowrl.policies.sac import SACPolicy

#: RLlib 1.x's clamp on the Lagrangian weight ``α'``.
ALPHA_PRIME_MAX = 1e6


def cql_penalty(q_data: torch.Tensor, q_sampled: torch.Tensor, log_density: torch.Tensor, *,
                temperature: float, min_q_weight: float) -> torch.Tensor:
    """The conservative penalty ``P`` of one critic (module docstring).

    ``q_data``: ``(B,)`` Q of the data's actions; ``q_sampled``: ``(B, K)`` Q of the
    sampled actions of each state; ``log_density``: ``(B, K)`` (or broadcastable)
    the log-density each was drawn with. Returns a scalar.

    >>> q = torch.tensor([[0.0, math.log(3.0)]])
    >>> float(cql_penalty(torch.tensor([1.0]), q, torch.zeros(1, 2), temperature=1.0,
    ...                   min_q_weight=1.0))   # log(1 + 3) - 1
    0.3862943649291992
    """
    lse = torch.logsumexp((q_sampled - log_density) / temperature, dim=1)
    return min_q_weight * (temperature * lse.mean() - q_data.mean())


class CQLPolicy(SACPolicy):
    """CQL's policy: SAC's networks and updates with the changes of the module
    docstring.

    Keyword args: SAC's (:class:`~flowrl.policies.sac.SACPolicy`) and RLlib 1.x's
    CQL settings ``bc_iters`` (20000), ``min_q_weight`` (5.0), ``num_actions`` (10),
    ``temperature`` (1.0), ``lagrangian`` (False), ``lagrangian_thresh`` (5.0).
    ``updates`` counts the updates made (it decides when behaviour cloning ends
    and is in :meth:`get_state`).

    >>> p = CQLPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)), seed=0,
    ...               Q_model=[16], policy_model=[16], bc_iters=1, num_actions=4)
    >>> from flowrl.batch import SampleBatch
    >>> batch = SampleBatch(obs=np.zeros((8, 3), np.float32), actions=np.ones((8, 1), np.float32),
    ...                     rewards=np.ones(8, np.float32), new_obs=np.zeros((8, 3), np.float32),
    ...                     terminateds=np.zeros(8, bool), n_step_discount=np.full(8, 0.99, np.float32))
    >>> stats = p.learn_on_batch(batch)
    >>> stats["bc_actor_loss"], p.updates, "cql_loss" in stats
    (1.0, 1, True)
    """

    algorithm = "CQL"

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 bc_iters: int = 20000, min_q_weight: float = 5.0, num_actions: int = 10,
                 temperature: float = 1.0, lagrangian: bool = False,
                 lagrangian_thresh: float = 5.0, **sac: Any):
        super().__init__(observation_space, action_space, **sac)
        for field, ok in (("bc_iters", isinstance(bc_iters, int) and bc_iters >= 0),
                          ("min_q_weight", min_q_weight >= 0),
                          ("num_actions", isinstance(num_actions, int) and num_actions >= 1),
                          ("temperature", temperature > 0),
                          ("lagrangian_thresh", math.isfinite(lagrangian_thresh))):
            if not ok:
                raise ConfigError(f"CQLPolicy({field}=...) is out of range; see the CQLPolicy "
                                  "docstring for valid values")
        self.bc_iters, self.min_q_weight = bc_iters, float(min_q_weight)
        self.num_actions, self.temperature = num_actions, float(temperature)
        self.lagrangian, self.lagrangian_thresh = bool(lagrangian), float(lagrangian_thresh)
        self.updates = 0
        self.log_alpha_prime = nn.Parameter(torch.zeros(()))
        if self.lagrangian:
            self._params["alpha_prime"] = [self.log_alpha_prime]
            self.learning_rates["alpha_prime"] = self.learning_rates["critic"]

    @property
    def alpha_prime(self) -> float:
        """The Lagrangian weight ``α'`` of the penalty (1 until it learns)."""
        return float(self.log_alpha_prime.detach().exp().clamp(0.0, ALPHA_PRIME_MAX))

    # -- the penalty -----------------------------------------------------------------
    def _repeat_actions(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``N`` actions of ``π(·|obs)`` per row, ``(B·N, dim)`` (a row's ``N`` side
        by side), and their log-densities ``(B, N)``, without gradients."""
        with torch.no_grad():
            out = self.model.policy(obs.repeat_interleave(self.num_actions, dim=0))
            actions, logp = SquashedGaussian(out).rsample_logp(self.generator)
        return actions, logp.reshape(len(obs), self.num_actions)

    def penalties(self, t: dict[str, torch.Tensor], q_data: list[torch.Tensor]
                  ) -> list[torch.Tensor]:
        """``P_i`` of each critic (module docstring) on the tensors ``t`` of a batch
        (:meth:`_tensors`), ``q_data`` being ``Q_i(s, a)`` of its actions."""
        obs = t["obs"]
        if self.discrete:
            return [cql_penalty(q, q_all, torch.zeros(()), temperature=self.temperature,
                                min_q_weight=self.min_q_weight)
                    for q, q_all in zip(q_data, self.model.critics(obs))]
        n, dim = self.num_actions, t["actions"].shape[1]
        uniform = torch.rand(len(obs) * n, dim, generator=self.generator) * 2.0 - 1.0
        current, logp_current = self._repeat_actions(obs)
        following, logp_following = self._repeat_actions(t["next_obs"])
        log_uniform = torch.full((len(obs), n), dim * math.log(0.5))
        log_density = torch.cat([log_uniform, logp_following, logp_current], dim=1)
        obs_n = obs.repeat_interleave(n, dim=0)
        sampled = [torch.cat([q.reshape(len(obs), n) for q in qs], dim=1) for qs in zip(
            self.model.critics(obs_n, uniform), self.model.critics(obs_n, following),
            self.model.critics(obs_n, current))]
        return [cql_penalty(q, q_s, log_density, temperature=self.temperature,
                            min_q_weight=self.min_q_weight) for q, q_s in zip(q_data, sampled)]

    def _targets(self, t: dict[str, torch.Tensor], alpha: torch.Tensor) -> torch.Tensor:
        """``y = R + d · min_i Q'_i(s', a')`` with ``a' ~ π(·|s')``, without SAC's
        entropy term (``alpha`` is not used), or for ``Discrete`` the expectation
        over ``π(·|s')``; no gradients."""
        with torch.no_grad():
            out = self.model.policy(t["next_obs"])
            if self.discrete:
                q_next = self.target_critics(t["next_obs"])
                q_next = torch.min(*q_next) if self.twin_q else q_next[0]
                v_next = (torch.softmax(out, dim=-1) * q_next).sum(-1)
            else:
                a_next, _ = SquashedGaussian(out).rsample_logp(self.generator)
                qs = self.target_critics(t["next_obs"], a_next)
                v_next = torch.min(*qs) if self.twin_q else qs[0]
            return t["rewards"] + t["discount"] * v_next

    # -- the update -------------------------------------------------------------------
    def critic_losses(self, t: dict[str, torch.Tensor], q_data: list[torch.Tensor],
                      td_loss: torch.Tensor) -> tuple[dict[str, torch.Tensor],
                                                      dict[str, torch.Tensor]]:
        """``L_Q + Σ_i P_i`` for the critics, or with ``lagrangian``
        ``L_Q + Σ_i α' (P_i - τ)`` and ``L_α'`` for ``α'`` (module docstring).
        Figures: ``critic_loss``, ``cql_loss`` (the mean ``P_i``, before ``α'``) and,
        with ``lagrangian``, ``alpha_prime_loss`` and ``alpha_prime_value``."""
        pens = self.penalties(t, q_data)
        figures = {"cql_loss": torch.stack(pens).mean()}
        if not self.lagrangian:
            loss = td_loss + sum(pens)
            return {"critic": loss}, {"critic_loss": loss, **figures}
        alpha_prime = self.log_alpha_prime.exp().clamp(0.0, ALPHA_PRIME_MAX)
        gaps = [p - self.lagrangian_thresh for p in pens]
        loss = td_loss + alpha_prime.detach() * sum(gaps)
        alpha_prime_loss = -(alpha_prime * torch.stack(gaps).detach()).mean()
        return ({"critic": loss, "alpha_prime": alpha_prime_loss},
                {"critic_loss": loss, **figures, "alpha_prime_loss": alpha_prime_loss,
                 "alpha_prime_value": alpha_prime})

    def actor_objective(self, t: dict[str, torch.Tensor], inputs: torch.Tensor,
                        actions: torch.Tensor | None) -> torch.Tensor:
        """While behaviour cloning (the first ``bc_iters`` updates) the
        log-likelihood ``log π(a|s)`` of the data's actions, ``(B,)``; SAC's
        objective after."""
        if self.updates >= self.bc_iters:
            return super().actor_objective(t, inputs, actions)
        if self.discrete:
            logp_all = torch.log_softmax(inputs, dim=-1)
            return logp_all.gather(1, t["actions"].unsqueeze(1)).squeeze(1)
        return SquashedGaussian(inputs).logp(t["actions"])

    def sgd_step(self, batch) -> dict[str, float]:
        """One CQL update on ``batch`` (module docstring). Stats: SAC's
        (:meth:`SACPolicy.sgd_step`) with :meth:`critic_losses`' figures, and
        ``bc_actor_loss`` (1.0 when the actor was trained by behaviour cloning,
        else 0.0)."""
        cloning = self.updates < self.bc_iters
        stats = super().sgd_step(batch)
        self.updates += 1
        return {**stats, "bc_actor_loss": float(cloning)}

    # -- state --------------------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """SAC's state (with ``α'``'s optimizer under ``lagrangian``), ``log α'`` and
        ``updates``."""
        return {**super().get_state(), "updates": self.updates,
                "log_alpha_prime": self.log_alpha_prime.detach().numpy().copy()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned."""
        super().set_state(state)
        self.updates = int(state["updates"])
        with torch.no_grad():
            self.log_alpha_prime.copy_(torch.as_tensor(np.asarray(state["log_alpha_prime"])))


__all__ = ["CQLPolicy", "cql_penalty", "ALPHA_PRIME_MAX"]
