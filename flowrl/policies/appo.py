"""APPO: asynchronous PPO (IMPALA's sampler, PPO's clipped surrogate).

With ``r_t = π(a|s) / μ(a|s)`` (μ the behaviour policy that sampled the batch):
``L = -mean(min(r_t Â, clip(r_t, 1-ε, 1+ε) Â)) + c_vf · ½ mean((V - V_targ)²)
- c_ent · mean(H) [+ β KL(μ || π) with use_kl_loss]``. ``vtrace=False`` (the
RLlib 1.x default): ``Â`` and ``V_targ`` are GAE(γ, λ) from the workers;
``vtrace=True``: V-trace's ``pg_advantages`` and ``v_s``.
"""

from __future__ import annotations


import torch

from flowrl.batch import SampleBatch as SB
from flowrl.errors import ConfigError
from flowrl.policies.adaptive_kl import AdaptiveKL
from flowrl.policies.impala import IMPALAPolicy


class APPOPolicy(AdaptiveKL, IMPALAPolicy):
    """Asynchronous PPO; defaults follow RLlib 1.x APPO (``clip_param=0.4``,
    ``vtrace=False``, ``use_kl_loss=False``, ``kl_coeff=1.0``, ``kl_target=0.01``).

    >>> import gymnasium as gym
    >>> p = APPOPolicy(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), use_kl_loss=True)
    >>> [round(p.update_kl(kl), 3) for kl in (0.05, 0.001)]
    [1.5, 0.75]
    """


    def __init__(self, observation_space, action_space, *, clip_param: float = 0.4,
                 vtrace: bool = False, use_kl_loss: bool = False, kl_coeff: float = 1.0,
                 kl_target: float = 0.01, **kwargs):
        if not clip_param > 0:
            raise ConfigError(f"APPOPolicy(clip_param={clip_param!r}): must be > 0")
        if kl_coeff < 0 or not kl_target > 0:
            raise ConfigError(f"APPOPolicy(kl_coeff={kl_coeff!r}, kl_target={kl_target!r}): "
                              "kl_coeff must be >= 0 and kl_target > 0")
        super().__init__(observation_space, action_space, vtrace=vtrace, **kwargs)
        self.clip_param, self.use_kl_loss = clip_param, use_kl_loss
        self.kl_coeff, self.kl_target = kl_coeff, kl_target


    def loss(self, train):
        inputs, values = self.model_out(train)
        dist = self.dist_class(inputs)
        logp = dist.logp(train[SB.ACTIONS])
        if self.vtrace:
            targets, adv = self.vtrace_targets(train, logp, values)
        else:
            targets, adv = train[SB.VALUE_TARGETS], train[SB.ADVANTAGES]
        ratio = torch.exp(logp - train[SB.ACTION_LOGP])
        surrogate = torch.min(adv * ratio,
                              adv * ratio.clamp(1 - self.clip_param, 1 + self.clip_param))
        mean = self.mean
        kl = mean(self.dist_class(train[SB.ACTION_DIST_INPUTS]).kl(dist), train)
        policy_loss = mean(-surrogate, train)
        vf_loss = 0.5 * mean((values - targets).pow(2), train)
        entropy = mean(dist.entropy(), train)
        total = policy_loss + self.vf_loss_coeff * vf_loss - self.entropy_coeff * entropy
        if self.use_kl_loss:
            total = total + self.kl_coeff * kl
        return total, {"policy_loss": policy_loss.detach(), "vf_loss": vf_loss.detach(),
                       "entropy": entropy.detach(), "kl": kl.detach(),
                       "cur_kl_coeff": torch.tensor(self.kl_coeff)}


__all__ = ["APPOPolicy"]
