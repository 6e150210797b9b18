"""MARWIL (Wang et al. 2018, "Exponentially weighted imitation learning for batched
historical data") and behaviour cloning, the loss RLlib 1.x gives them.

Postprocessing puts the discounted return ``G_t`` of each logged step in
``advantages`` (and ``value_targets``), bootstrapped with ``V`` where a fragment
or time limit cuts an episode (``use_gae = False``). With ``β > 0`` the loss is::

    Â_t   = G_t - V(s_t)
    c²   <- c² + ρ (mean(Â²) - c²)                  (moving average, rate ρ)
    L     = -mean(exp(β Â_t / (c + 1e-8)) log π(a_t|s_t)) + c_vf · ½ mean(Â²)

with the exponential weights held constant (no gradient through them), so
``β = 0`` is behaviour cloning, ``L = -mean(log π(a_t|s_t))``, with no value loss.
Every mean runs over real steps only: padding rows of a recurrent model's
sequences enter neither a mean nor ``c²``, whatever they hold.
"""

from __future__ import annotations

import numpy as np
import torch

from flowrl.batch import SampleBatch as SB
from flowrl.errors import ConfigError
from flowrl.models.sequences import SEQ_WEIGHTS
from flowrl.policies.torch_policy import TorchPolicy


class MARWILPolicy(TorchPolicy):
    """MARWIL's loss (see the module docstring); defaults follow RLlib 1.x.

    ``beta`` (β >= 0; 0 is behaviour cloning), ``vf_coeff`` (c_vf),
    ``moving_average_sqd_adv_norm_start`` (c² before any update, 100) and
    ``moving_average_sqd_adv_norm_update_rate`` (ρ, 1e-8: with RLlib's defaults the
    norm stays near its start). The moving average is state: it is updated by
    every loss computed with gradients, saved by :meth:`get_state` and reported
    as the ``moving_average_sqd_adv_norm`` learner stat.

    >>> import gymnasium as gym
    >>> p = MARWILPolicy(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), seed=0)
    >>> b = SB(obs=np.zeros((4, 2), np.float32), actions=np.array([0, 1, 0, 1]),
    ...        advantages=np.ones(4, np.float32), value_targets=np.ones(4, np.float32))
    >>> sorted(k for k in p.learn_on_batch(b) if "loss" in k)
    ['policy_loss', 'total_loss', 'vf_loss']
    """

    use_gae = False           # advantages are the discounted returns G_t
    trains_on_new_obs = False  # returns bootstrap from the worker's bootstrap_value

    def __init__(self, observation_space, action_space, *, lr: float = 1e-4,
                 beta: float = 1.0, vf_coeff: float = 1.0,
                 moving_average_sqd_adv_norm_start: float = 100.0,
                 moving_average_sqd_adv_norm_update_rate: float = 1e-8, **kwargs):
        name = type(self).__name__
        for field, value, ok in (
                ("beta", beta, beta >= 0), ("vf_coeff", vf_coeff, vf_coeff >= 0),
                ("moving_average_sqd_adv_norm_start", moving_average_sqd_adv_norm_start,
                 moving_average_sqd_adv_norm_start > 0),
                ("moving_average_sqd_adv_norm_update_rate",
                 moving_average_sqd_adv_norm_update_rate,
                 0 <= moving_average_sqd_adv_norm_update_rate <= 1)):
            if not ok:
                raise ConfigError(f"{name}({field}={value!r}) is out of range; see the "
                                  f"{name} docstring for valid values")
        if beta != 0 and not self.use_critic:
            raise ConfigError(f"{name}(beta={beta!r}): this policy has no value function to "
                              "weigh advantages with; use MARWILPolicy for beta > 0")
        super().__init__(observation_space, action_space, lr=lr, **kwargs)
        self.beta, self.vf_coeff = float(beta), float(vf_coeff)
        self.update_rate = float(moving_average_sqd_adv_norm_update_rate)
        self.sqd_adv_norm = torch.tensor(float(moving_average_sqd_adv_norm_start))

    def loss(self, train):
        inputs, values = self.model_out(train)
        logp = self.dist_class(inputs).logp(train[SB.ACTIONS])
        if self.beta == 0.0:
            policy_loss = self.mean(-logp, train)
            return policy_loss, {"policy_loss": policy_loss.detach()}
        if SB.ADVANTAGES not in train:
            raise ConfigError(f"{type(self).__name__}(beta={self.beta}) trains on the "
                              "discounted returns postprocessing writes to 'advantages', and "
                              "this batch has none; postprocess the batches "
                              "(postprocess_inputs=True) or use beta=0 (behaviour cloning)")
        adv = train[SB.ADVANTAGES] - values
        weights = train.get(SEQ_WEIGHTS)
        if weights is not None:  # padding: 0, so neither a mean nor the norm sees it
            adv = torch.where(weights > 0, adv, torch.zeros_like(adv))
        adv_sq_mean = self.mean(adv.pow(2), train)
        if torch.is_grad_enabled():
            with torch.no_grad():
                self.sqd_adv_norm.add_(self.update_rate * (adv_sq_mean - self.sqd_adv_norm))
        exp_adv = torch.exp(self.beta * adv.detach() / (1e-8 + self.sqd_adv_norm.sqrt()))
        policy_loss = self.mean(-exp_adv * logp, train)
        vf_loss = 0.5 * adv_sq_mean
        return policy_loss + self.vf_coeff * vf_loss, {
            "policy_loss": policy_loss.detach(), "vf_loss": vf_loss.detach(),
            "moving_average_sqd_adv_norm": self.sqd_adv_norm.clone()}

    def get_state(self):
        return {**super().get_state(), "sqd_adv_norm": float(self.sqd_adv_norm)}

    def set_state(self, state):
        super().set_state(state)
        self.sqd_adv_norm.fill_(float(state["sqd_adv_norm"]))


class BCPolicy(MARWILPolicy):
    """Behaviour cloning: MARWIL with ``beta=0`` and no value function, so its loss
    is ``-mean(log π(a_t|s_t))`` over real steps (RLlib 1.x's BC).

    >>> import gymnasium as gym
    >>> p = BCPolicy(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), seed=0)
    >>> b = SB(obs=np.zeros((2, 2), np.float32), actions=np.array([1, 1]))
    >>> first = p.learn_on_batch(b)["policy_loss"]
    >>> for _ in range(20):
    ...     last = p.learn_on_batch(b)["policy_loss"]
    >>> last < first
    True
    """

    use_critic = False

    def __init__(self, observation_space, action_space, *, beta: float = 0.0, **kwargs):
        if beta != 0:
            raise ConfigError(f"BCPolicy(beta={beta!r}): behaviour cloning is beta=0; use "
                              "MARWILPolicy for beta > 0")
        super().__init__(observation_space, action_space, beta=0.0, **kwargs)


__all__ = ["MARWILPolicy", "BCPolicy"]
