"""Vanilla policy gradient (REINFORCE): ``L = -E[log π(a|s) G_t]``.

No critic: advantages are the discounted returns ``G_t``, bootstrapped with 0 where
a fragment or time limit cuts an episode (as RLlib's PG).
"""

from __future__ import annotations

from flowrl.batch import SampleBatch as SB
from flowrl.policies.torch_policy import TorchPolicy


class PGPolicy(TorchPolicy):
    """REINFORCE with discounted returns; defaults follow RLlib 1.x PG (``lr=4e-4``).

    >>> import gymnasium as gym, numpy as np
    >>> p = PGPolicy(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), seed=0)
    >>> p.value(np.zeros((3, 2), np.float32)).tolist()
    [0.0, 0.0, 0.0]
    """

    trains_on_new_obs = False  # GAE bootstraps from the worker's bootstrap_value
    use_critic = False

    def __init__(self, observation_space, action_space, *, lr: float = 4e-4, **kwargs):
        super().__init__(observation_space, action_space, lr=lr, **kwargs)

    def loss(self, train):
        inputs, _ = self.model_out(train)
        logp = self.dist_class(inputs).logp(train[SB.ACTIONS])
        policy_loss = self.mean(-(logp * train[SB.ADVANTAGES]), train)
        return policy_loss, {"policy_loss": policy_loss.detach()}


__all__ = ["PGPolicy"]
