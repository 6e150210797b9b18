"""The built-in MLP: ``fcnet_hiddens`` dense layers with ``fcnet_activation``.

With ``vf_share_layers=False`` (the default) the policy and the value function are
two separate MLPs, ``pi`` and ``vf`` (``nn.Sequential`` of ``Linear`` and the
activation; parameter names ``pi.0.weight`` ... ``vf.N.bias`` and ``log_std``), the
shape flowrl's numpy acting path reproduces exactly
(:mod:`flowrl.policies.numpy_acting`). With ``vf_share_layers=True`` one trunk
feeds both the logits and a value head. Hidden layers keep torch's default
initialisation unless ``orthogonal_init`` (:func:`~flowrl.models.base.hidden`);
the output layers are orthogonal with gain 0.01 (logits) and 1 (value).

>>> import gymnasium as gym, torch
>>> from flowrl.models import ModelConfig
>>> m = FullyConnectedNetwork(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), 2,
...                           ModelConfig(fcnet_hiddens=(8,)), "fc")
>>> out, _ = m({"obs_flat": torch.zeros(5, 3)}, [], None)
>>> tuple(out.shape), tuple(m.value_function().shape), sorted(m.state_dict())[:2]
((5, 2), (5,), ['pi.0.bias', 'pi.0.weight'])
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from flowrl.models.base import TorchModelV2, dense_stack, free_log_std, head, with_log_std


class FullyConnectedNetwork(TorchModelV2):
    """MLP policy and value function; see the module docstring. ``num_outputs=None``
    builds the hidden layers only (features for the LSTM wrapper)."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        sizes = [int(np.prod(obs_space.shape)), *model_config.fcnet_hiddens]
        act = model_config.fcnet_activation

        def stack() -> list[nn.Module]:
            return dense_stack(sizes, act, model_config.orthogonal_init)

        outputs, log_std = free_log_std(num_outputs, action_space, model_config)
        self.features_only = num_outputs is None
        self.vf_share_layers = model_config.vf_share_layers
        self._last: torch.Tensor | None = None
        if self.features_only:
            self.trunk = nn.Sequential(*stack())
            self.num_outputs = sizes[-1]
            self.value_branch = None
        elif self.vf_share_layers:
            self.trunk = nn.Sequential(*stack())
            self.logits = head(sizes[-1], outputs, 0.01)
            self.log_std = log_std
            self.value_branch = head(sizes[-1], 1, 1.0)
        else:
            self.pi = nn.Sequential(*stack(), head(sizes[-1], outputs, 0.01))
            self.log_std = log_std
            self.vf = nn.Sequential(*stack(), head(sizes[-1], 1, 1.0))

    def forward(self, input_dict, state, seq_lens):
        obs = input_dict["obs_flat"]
        if self.features_only:
            return self.trunk(obs), state
        if self.vf_share_layers:
            self._last = features = self.trunk(obs)
            return with_log_std(self.logits(features), self.log_std), state
        self._last = obs
        return with_log_std(self.pi(obs), self.log_std), state

    def value_function(self) -> torch.Tensor:
        if self.vf_share_layers:
            return self.value_branch(self._last).squeeze(-1)
        if self.vf is None:  # a policy without a critic dropped it
            return torch.zeros(len(self._last), device=self._last.device)
        return self.vf(self._last).squeeze(-1)


__all__ = ["FullyConnectedNetwork"]
