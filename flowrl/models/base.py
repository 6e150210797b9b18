"""The model interface: RLlib's ``TorchModelV2`` shape, so ported models keep their code.

A model is a ``torch.nn.Module`` built as ``cls(obs_space, action_space,
num_outputs, model_config, name)``:

- ``forward(input_dict, state, seq_lens) -> (outputs, state_out)``: ``input_dict``
  holds ``obs`` (the observation batch as a tensor in the observation space's
  dimensions ``(rows, *obs_space.shape)``: float32 for flat observations, the
  image's own dtype, e.g. uint8, for images), ``obs_flat`` (``obs`` as rows
  ``(rows, features)``; float32 for flat observations), ``is_training``, and
  ``prev_actions``/``prev_rewards`` for recurrent policies. ``outputs`` is
  ``(rows, num_outputs)``: the action distribution's inputs. A recurrent model
  gets ``B * T`` rows, ``B`` sequences of ``T`` steps (padded), ``seq_lens`` the
  ``B`` true lengths and ``state`` a list of ``(B, ...)`` tensors (the state at
  each sequence's start); it returns the state at each sequence's true end. A
  non-recurrent model gets ``state == []`` and ``seq_lens is None``.
- ``model(input_dict, state=None, seq_lens=None)`` runs ``forward`` as RLlib's
  ``ModelV2.__call__`` does (:meth:`TorchModelV2.__call__`): ``{"obs": x}`` alone
  will do, ``obs_flat`` is filled in.
- ``value_function() -> (rows,)``: V(s) for the rows of the last ``forward``.
- ``get_initial_state() -> list[np.ndarray]``: one array per state component for
  one env (empty when not recurrent).

``num_outputs=None`` asks a model for features instead of distribution inputs
(the LSTM wrapper builds its base model so); the model then sets
``self.num_outputs`` to its feature size.

>>> import gymnasium as gym, torch
>>> class Linear(TorchModelV2):
...     def __init__(self, obs_space, action_space, num_outputs, model_config, name):
...         TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
...         nn.Module.__init__(self)
...         self.pi = nn.Linear(obs_space.shape[0], num_outputs)
...         self.vf = nn.Linear(obs_space.shape[0], 1)
...     def forward(self, input_dict, state, seq_lens):
...         self._x = input_dict["obs_flat"]
...         return self.pi(self._x), state
...     def value_function(self):
...         return self.vf(self._x).squeeze(-1)
>>> m = Linear(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), 2, {}, "m")
>>> out, state = m({"obs": torch.zeros(4, 3)}, [], None)
>>> tuple(out.shape), tuple(m.value_function().shape), m.get_initial_state()
((4, 2), (4,), [])
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import torch
from torch import nn

from flowrl.errors import ConfigError


class TorchModelV2(nn.Module):
    """Base class of flowrl's models and of ported RLlib custom models; see the module
    docstring. Subclasses may also list ``nn.Module`` as a base and call
    ``nn.Module.__init__(self)`` after this ``__init__``, as RLlib models do."""

    def __init__(self, obs_space, action_space, num_outputs: int | None,
                 model_config: Any, name: str):
        if "_parameters" not in self.__dict__:  # nn.Module.__init__ not run yet
            nn.Module.__init__(self)
        self.obs_space, self.action_space = obs_space, action_space
        self.num_outputs = num_outputs
        self.model_config = model_config
        self.name = name

    def __call__(self, input_dict: dict[str, Any], state: list[torch.Tensor] | None = None,
                 seq_lens: torch.Tensor | None = None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """:meth:`forward` as RLlib's ``ModelV2.__call__`` runs it, through
        ``nn.Module.__call__`` (hooks run as for any module), on a shallow copy of
        ``input_dict`` (the caller's dict is left as it is) in which ``obs``, when
        given, has the observation space's dimensions (flat rows of a ``Box`` of
        shape ``(2, 3)`` become ``(rows, 2, 3)``) and ``obs_flat``, when not given,
        is ``obs`` as rows ``(rows, features)`` in ``obs``'s dtype. ``state``
        defaults to ``[]``.

        >>> import gymnasium as gym
        >>> class Rows(TorchModelV2):
        ...     def forward(self, input_dict, state, seq_lens):
        ...         return input_dict["obs_flat"], state
        >>> m = Rows(gym.spaces.Box(-1, 1, (2, 3)), gym.spaces.Discrete(6), 6, {}, "rows")
        >>> tuple(m({"obs": torch.zeros(4, 2, 3)})[0].shape)
        (4, 6)
        """
        restored = dict(input_dict)
        obs = restored.get("obs")
        if obs is not None:
            obs = torch.as_tensor(obs)
            shape = tuple(getattr(self.obs_space, "shape", None) or ())
            if obs.dim() > 0 and tuple(obs.shape[1:]) != shape \
                    and math.prod(obs.shape[1:]) == math.prod(shape):
                obs = obs.reshape(len(obs), *shape)
            restored["obs"] = obs
            if "obs_flat" not in restored and obs.dim() > 0:
                restored["obs_flat"] = obs if obs.dim() == 2 else obs.reshape(len(obs), -1)
        return super().__call__(restored, [] if state is None else state, seq_lens)

    def forward(self, input_dict: dict[str, Any], state: list[torch.Tensor],
                seq_lens: torch.Tensor | None) -> tuple[torch.Tensor, list[torch.Tensor]]:
        raise NotImplementedError(f"{type(self).__name__} must implement forward()")

    def value_function(self) -> torch.Tensor:
        raise NotImplementedError(f"{type(self).__name__} must implement value_function()")

    def get_initial_state(self) -> list[np.ndarray]:
        return []

    def is_recurrent(self) -> bool:
        """True when the model carries state (:meth:`get_initial_state` is not empty)."""
        return bool(self.get_initial_state())


def activation(name: str) -> nn.Module:
    """The ``nn.Module`` for an activation name of :data:`flowrl.models.config.ACTIVATIONS`.

    >>> type(activation("tanh")).__name__, type(activation("linear")).__name__
    ('Tanh', 'Identity')
    """
    return {"tanh": nn.Tanh, "relu": nn.ReLU, "elu": nn.ELU, "swish": nn.SiLU,
            "linear": nn.Identity}[name]()


def orthogonal_init(layer: nn.Module, gain: float) -> nn.Module:
    """``layer`` (a ``Linear`` or ``Conv2d``) with orthogonal weights of ``gain`` and
    zero biases, in place."""
    nn.init.orthogonal_(layer.weight, gain=gain)
    nn.init.zeros_(layer.bias)
    return layer


def hidden(layer: nn.Module, orthogonal: bool) -> nn.Module:
    """A hidden ``Linear`` or ``Conv2d`` layer, given orthogonal weights of gain
    sqrt(2) and zero biases when ``orthogonal`` (``ModelConfig.orthogonal_init``,
    CleanRL's and OpenAI Baselines' choice), else left with torch's initialisation.

    >>> layer = hidden(nn.Linear(4, 4), orthogonal=True)
    >>> w = layer.weight.detach()
    >>> bool(torch.allclose(w @ w.T, 2 * torch.eye(4), atol=1e-5)), layer.bias.abs().sum().item()
    (True, 0.0)
    """
    return orthogonal_init(layer, math.sqrt(2)) if orthogonal else layer


def dense_stack(sizes: list[int], act: str, orthogonal: bool = False) -> list[nn.Module]:
    """``Linear`` layers between consecutive ``sizes``, each followed by ``act``
    (initialised by :func:`hidden`)."""
    layers: list[nn.Module] = []
    for a, b in zip(sizes[:-1], sizes[1:]):
        layers += [hidden(nn.Linear(a, b), orthogonal), activation(act)]
    return layers


def head(fan_in: int, out: int, gain: float) -> nn.Linear:
    """An output layer with orthogonal weights of ``gain`` and zero biases (small
    gains for policy logits keep the first policy near uniform)."""
    return orthogonal_init(nn.Linear(fan_in, out), gain)


def free_log_std(num_outputs: int | None, action_space,
                 model_config) -> tuple[int | None, nn.Parameter | None]:
    """``(network outputs, log_std)`` for ``num_outputs`` distribution inputs: a
    Gaussian with ``free_log_std`` computes half of them (the means) and takes the
    log standard deviations from one free parameter per action dimension, initially
    0 (:func:`with_log_std` appends them); anything else computes all of them and
    has no such parameter (None: features only).

    >>> import gymnasium as gym
    >>> from flowrl.models import ModelConfig
    >>> n, p = free_log_std(4, gym.spaces.Box(-1, 1, (2,)), ModelConfig())
    >>> n, tuple(p.shape)
    (2, (2,))
    """
    import gymnasium as gym
    if num_outputs is None or not model_config.free_log_std \
            or not isinstance(action_space, gym.spaces.Box):
        return num_outputs, None
    if num_outputs % 2:
        raise ConfigError(f"model: {num_outputs} outputs for a Gaussian over "
                          f"{action_space}; give 2 x the action dimensions")
    return num_outputs // 2, nn.Parameter(torch.zeros(num_outputs // 2))


def with_log_std(means: torch.Tensor, log_std: nn.Parameter | None) -> torch.Tensor:
    """``(B, D)`` means and the free log stds as ``(B, 2D)`` Gaussian inputs (the
    means unchanged when there is no such parameter)."""
    if log_std is None:
        return means
    return torch.cat([means, log_std.expand_as(means)], dim=-1)


__all__ = ["TorchModelV2", "activation", "orthogonal_init", "hidden", "dense_stack", "head",
           "free_log_std", "with_log_std"]
