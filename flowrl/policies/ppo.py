"""PPO: clipped surrogate, clipped value loss, entropy bonus, adaptive KL penalty.

With ``r_t = π(a|s) / π_old(a|s)`` (π_old from the batch's ``action_logp`` and
``action_dist_inputs``) the per-row loss is, as in RLlib 1.x::

    -min(r_t Â, clip(r_t, 1-ε, 1+ε) Â) + β KL(π_old || π)
    + c_vf max((V - V_targ)², (V_old + clip(V - V_old, ±vf_clip_param) - V_targ)²)
    - c_ent H(π)

The KL coefficient β adapts between training steps through :meth:`PPOPolicy.update_kl`.
With ``standardize_advantages="minibatch"`` (CleanRL's Atari and MuJoCo PPO) each SGD
step first standardizes Â over its whole minibatch, before any split over towers;
with ``"batch"`` (RLlib 1.x) the plan has already standardized the train batch.
"""

from __future__ import annotations

import numpy as np
import torch

from flowrl.batch import SampleBatch as SB
from flowrl.errors import ConfigError
from flowrl.models.sequences import SEQ_MASK
from flowrl.policies.adaptive_kl import AdaptiveKL
from flowrl.policies.sgd import STANDARDIZE_ADVANTAGES
from flowrl.policies.torch_policy import LoadedBatch, TorchPolicy


class PPOPolicy(AdaptiveKL, TorchPolicy):
    """Proximal policy optimisation; defaults follow RLlib 1.x PPO.

    ``clip_param`` (ε), ``vf_clip_param``, ``vf_loss_coeff``, ``entropy_coeff``,
    ``kl_coeff`` (initial β), ``kl_target``; ``num_sgd_iter`` epochs over
    minibatches of ``sgd_minibatch_size`` rows per ``learn_on_batch``, whose stats
    include the mean ``kl`` to feed :meth:`update_kl`. ``standardize_advantages``:
    ``"batch"`` leaves the advantages as given (the PPO plan standardizes each
    train batch), ``"minibatch"`` standardizes them in every :meth:`sgd_step`.

    >>> import gymnasium as gym
    >>> p = PPOPolicy(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), kl_target=0.01)
    >>> [round(p.update_kl(kl), 6) for kl in (0.05, 0.001, 0.01)]
    [0.3, 0.15, 0.15]
    """

    trains_on_new_obs = False  # GAE bootstraps from the worker's bootstrap_value

    def __init__(self, observation_space, action_space, *, lr: float = 5e-5,
                 clip_param: float = 0.3, vf_clip_param: float = 10.0,
                 vf_loss_coeff: float = 1.0, entropy_coeff: float = 0.0,
                 kl_coeff: float = 0.2, kl_target: float = 0.01,
                 num_sgd_iter: int = 30, sgd_minibatch_size: int | None = 128,
                 standardize_advantages: str = "batch", **kwargs):
        if standardize_advantages not in STANDARDIZE_ADVANTAGES:
            raise ConfigError(f"PPOPolicy(standardize_advantages={standardize_advantages!r}): "
                              f"must be one of {list(STANDARDIZE_ADVANTAGES)}")
        for field, value in (("clip_param", clip_param), ("vf_clip_param", vf_clip_param),
                             ("kl_target", kl_target)):
            if not value > 0:
                raise ConfigError(f"PPOPolicy({field}={value!r}): must be > 0")
        if kl_coeff < 0:
            raise ConfigError(f"PPOPolicy(kl_coeff={kl_coeff!r}): must be >= 0 (0 disables the KL penalty)")
        super().__init__(observation_space, action_space, lr=lr, num_sgd_iter=num_sgd_iter,
                         sgd_minibatch_size=sgd_minibatch_size, **kwargs)
        self.clip_param, self.vf_clip_param = clip_param, vf_clip_param
        self.vf_loss_coeff, self.entropy_coeff = vf_loss_coeff, entropy_coeff
        self.kl_coeff, self.kl_target = kl_coeff, kl_target
        self.standardize_advantages = standardize_advantages

    def sgd_step(self, minibatch):
        if self.standardize_advantages == "minibatch":
            loaded = (minibatch if isinstance(minibatch, LoadedBatch)
                      else self.load_batch(minibatch))
            minibatch = standardize_advantages(loaded)
        return super().sgd_step(minibatch)

    def loss(self, train):
        inputs, value = self.model_out(train)
        dist = self.dist_class(inputs)
        old = self.dist_class(train[SB.ACTION_DIST_INPUTS])
        ratio = torch.exp(dist.logp(train[SB.ACTIONS]) - train[SB.ACTION_LOGP])
        adv = train[SB.ADVANTAGES]
        surrogate = torch.min(adv * ratio,
                              adv * ratio.clamp(1 - self.clip_param, 1 + self.clip_param))
        # A term whose coefficient is 0 adds exactly 0 to the loss and its gradient
        # (for finite values), so it is computed for the stats only, outside autograd.
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.kl_coeff != 0):
            kl = old.kl(dist)
        with torch.set_grad_enabled(torch.is_grad_enabled() and self.entropy_coeff != 0):
            entropy = dist.entropy()
        old_value, targets = train[SB.VF_PREDS], train[SB.VALUE_TARGETS]
        clipped = old_value + (value - old_value).clamp(-self.vf_clip_param, self.vf_clip_param)
        vf_loss = torch.max((value - targets).pow(2), (clipped - targets).pow(2))
        mean = self.mean
        total = mean(-surrogate + self.kl_coeff * kl + self.vf_loss_coeff * vf_loss
                     - self.entropy_coeff * entropy, train)
        return total, {"policy_loss": mean(-surrogate, train).detach(),
                       "vf_loss": mean(vf_loss, train).detach(),
                       "entropy": mean(entropy, train).detach(), "kl": mean(kl, train).detach(),
                       "cur_kl_coeff": torch.tensor(self.kl_coeff)}


def standardize_advantages(loaded: LoadedBatch) -> LoadedBatch:
    """``loaded`` with its advantages ``(Â - mean) / (std + 1e-8)`` over its own real
    rows (sequence padding left out), the rule of
    :func:`~flowrl.ops.rollout_ops.standardized`; one row or none passes unchanged.

    >>> lb = LoadedBatch([{SB.ADVANTAGES: torch.tensor([1.0, 2.0, 3.0, 9.0])}], 4,
    ...                  rows=np.array([0, 2]))
    >>> standardize_advantages(lb).copies[0][SB.ADVANTAGES].tolist()
    [-1.0, 0.0, 1.0, 7.0]
    """
    first = loaded.copies[0]
    adv = first[SB.ADVANTAGES]
    mask = first.get(SEQ_MASK)
    if loaded.rows is not None:
        index = torch.as_tensor(loaded.rows, device=adv.device)
        adv, mask = adv[index], None if mask is None else mask[index]
    real = (adv if mask is None else adv[mask.bool()]).double()
    if real.numel() <= 1:
        return loaded
    mean, scale = real.mean(), real.std(unbiased=False) + 1e-8
    copies, done = [], {}
    for copy_ in loaded.copies:  # towers on one device share one copy
        if id(copy_) not in done:
            col = copy_[SB.ADVANTAGES]
            done[id(copy_)] = {**copy_, SB.ADVANTAGES: ((col.double() - mean.to(col.device))
                                                        / scale.to(col.device)).float()}
        copies.append(done[id(copy_)])
    return LoadedBatch(copies, loaded.count, source=loaded.source, rows=loaded.rows)


__all__ = ["PPOPolicy", "standardize_advantages"]
