"""Advantage actor-critic (A2C/A3C) loss with GAE advantages.

``L = -E[log π(a|s) Â] + c_vf · ½ E[(V(s) - V_target)²] - c_ent · E[H(π(·|s))]``
"""

from __future__ import annotations

from flowrl.batch import SampleBatch as SB
from flowrl.policies.torch_policy import TorchPolicy


class A2CPolicy(TorchPolicy):
    """Actor-critic; defaults follow RLlib 1.x A2C/A3C.

    ``vf_loss_coeff`` weights the value loss, ``entropy_coeff`` the entropy bonus;
    ``grad_clip`` (global norm, default 40) clips gradients.

    >>> import gymnasium as gym
    >>> A2CPolicy(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), seed=0).grad_clip
    40.0
    """

    trains_on_new_obs = False  # GAE bootstraps from the worker's bootstrap_value

    def __init__(self, observation_space, action_space, *, lr: float = 1e-4,
                 vf_loss_coeff: float = 0.5, entropy_coeff: float = 0.01,
                 grad_clip: float | None = 40.0, **kwargs):
        super().__init__(observation_space, action_space, lr=lr, grad_clip=grad_clip, **kwargs)
        self.vf_loss_coeff = vf_loss_coeff
        self.entropy_coeff = entropy_coeff

    def loss(self, train):
        inputs, values = self.model_out(train)
        dist = self.dist_class(inputs)
        policy_loss = self.mean(-(dist.logp(train[SB.ACTIONS]) * train[SB.ADVANTAGES]), train)
        vf_loss = 0.5 * self.mean((values - train[SB.VALUE_TARGETS]).pow(2), train)
        entropy = self.mean(dist.entropy(), train)
        total = policy_loss + self.vf_loss_coeff * vf_loss - self.entropy_coeff * entropy
        return total, {"policy_loss": policy_loss.detach(), "vf_loss": vf_loss.detach(),
                       "entropy": entropy.detach()}


__all__ = ["A2CPolicy"]
