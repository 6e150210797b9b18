"""``use_lstm``: an LSTM over any model's features, carrying state across steps.

The base model (MLP, CNN or a custom model) is built with ``num_outputs=None`` and
gives features per row; the previous action (one-hot for discrete actions) and
reward are appended when ``lstm_use_prev_action``/``lstm_use_prev_reward`` ask for
them; an ``nn.LSTM`` of ``lstm_cell_size`` runs over each sequence; linear heads
give the distribution inputs and the value from its output.

Rows arrive as ``B`` sequences of ``T`` steps (``B * T`` rows, sequence-major,
zero-padded past each sequence's length), with ``seq_lens`` (``B``) and the state
``[h, c]`` (each ``(B, lstm_cell_size)``) at each sequence's start. The returned
state is each sequence's state after its LAST REAL step, not after the padding:
the LSTM runs on packed sequences (``pack_padded_sequence``), so padding never
enters it (RLlib's ray-project/ray#21392 returned the state at ``T``). Acting is
``T = 1``: one row per env.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn
from torch.nn.utils.rnn import pack_padded_sequence, pad_packed_sequence

from flowrl.models.base import TorchModelV2, free_log_std, head, with_log_std


def action_encoding_size(action_space: gym.Space) -> int:
    """Width of :func:`encode_actions` rows for ``action_space``.

    >>> action_encoding_size(gym.spaces.MultiDiscrete([2, 3])), action_encoding_size(gym.spaces.Box(-1, 1, (2,)))
    (5, 2)
    """
    if isinstance(action_space, gym.spaces.Discrete):
        return int(action_space.n)
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        return int(np.sum(action_space.nvec))
    return int(np.prod(action_space.shape))


def encode_actions(actions: torch.Tensor, action_space: gym.Space) -> torch.Tensor:
    """Actions as float rows: one-hot per discrete component, flattened otherwise.

    >>> encode_actions(torch.tensor([1, 0]), gym.spaces.Discrete(3)).tolist()
    [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    """
    if isinstance(action_space, gym.spaces.Discrete):
        return nn.functional.one_hot(actions.long().reshape(-1), int(action_space.n)).float()
    if isinstance(action_space, gym.spaces.MultiDiscrete):
        actions = actions.long().reshape(len(actions), -1)
        return torch.cat([nn.functional.one_hot(actions[:, i], int(n)).float()
                          for i, n in enumerate(action_space.nvec.reshape(-1))], dim=-1)
    return actions.float().reshape(len(actions), -1)


class LSTMWrapper(TorchModelV2):
    """An LSTM over ``base_cls``'s features; see the module docstring."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name, *,
                 base_cls: type):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.base = base_cls(obs_space, action_space, None, model_config, f"{name}_base")
        self.cell_size = model_config.lstm_cell_size
        self.use_prev_action = model_config.lstm_use_prev_action
        self.use_prev_reward = model_config.lstm_use_prev_reward
        width = int(self.base.num_outputs)
        if self.use_prev_action:
            width += action_encoding_size(action_space)
        if self.use_prev_reward:
            width += 1
        self.lstm = nn.LSTM(width, self.cell_size, batch_first=True)
        outputs, self.log_std = free_log_std(num_outputs, action_space, model_config)
        self.logits = head(self.cell_size, outputs, 0.01)
        self.value_branch = head(self.cell_size, 1, 1.0)
        self._features: torch.Tensor | None = None

    def get_initial_state(self) -> list[np.ndarray]:
        return [np.zeros(self.cell_size, np.float32), np.zeros(self.cell_size, np.float32)]

    def forward(self, input_dict, state, seq_lens):
        features, _ = self.base(input_dict, [], None)
        parts = [features]
        if self.use_prev_action:
            parts.append(encode_actions(input_dict["prev_actions"], self.action_space))
        if self.use_prev_reward:
            parts.append(input_dict["prev_rewards"].float().reshape(-1, 1))
        x = torch.cat(parts, dim=-1) if len(parts) > 1 else features
        batch = len(seq_lens)
        steps = x.shape[0] // batch
        x = x.reshape(batch, steps, x.shape[-1])
        h0, c0 = state[0].unsqueeze(0), state[1].unsqueeze(0)
        if steps == 1:
            out, (h, c) = self.lstm(x, (h0, c0))
        else:
            packed = pack_padded_sequence(x, seq_lens.cpu().long(), batch_first=True,
                                          enforce_sorted=False)
            out, (h, c) = self.lstm(packed, (h0, c0))
            out, _ = pad_packed_sequence(out, batch_first=True, total_length=steps)
        self._features = out.reshape(batch * steps, self.cell_size)
        return with_log_std(self.logits(self._features), self.log_std), [h[0], c[0]]

    def value_function(self) -> torch.Tensor:
        return self.value_branch(self._features).squeeze(-1)


__all__ = ["LSTMWrapper", "encode_actions", "action_encoding_size"]
