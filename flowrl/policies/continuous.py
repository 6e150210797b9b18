"""Pieces every off-policy continuous-control policy shares (SAC, TD3, DDPG).

- Action bounds: a ``Box`` action space's finite bounds (:func:`box_bounds`), and
  the affine maps between them and the unit box ``[-1, 1]`` the networks work in
  (:func:`to_env_actions`, :func:`to_unit_actions`). Policies act in the unit box
  and hand the env ``low + (a + 1) (high - low) / 2``, clipped to the bounds so
  float rounding never steps outside them.
- Networks from a :class:`~flowrl.models.ModelConfig`: :func:`mlp` (``fcnet_hiddens``
  with ``fcnet_activation``, then a linear output; an ``nn.Sequential``, so numpy
  acting reproduces it, :mod:`flowrl.policies.numpy_acting`) and
  :class:`StateActionQ`, a ``Q(s, a)`` network over the observation and the unit
  action side by side.
- :func:`soft_update`: the Polyak average of target networks,
  ``θ' <- τ θ + (1 - τ) θ'``.
"""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl.errors import ConfigError
from flowrl.models.base import dense_stack
from flowrl.policies.torch_policy import model_obs


def box_bounds(space: gym.Space, algorithm: str) -> tuple[np.ndarray, np.ndarray]:
    """``(low, high)`` of a ``Box`` action space as float32 arrays of its shape; a
    ConfigError naming the space and ``algorithm`` when a bound is infinite (a
    squashed or clipped policy needs finite ones).

    >>> low, high = box_bounds(gym.spaces.Box(-2.0, 2.0, (1,)), "SAC")
    >>> low.tolist(), high.tolist()
    ([-2.0], [2.0])
    >>> box_bounds(gym.spaces.Box(-np.inf, np.inf, (2,)), "SAC")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: SAC: the action space Box(-inf, inf, (2,), float32) has infinite bounds; SAC maps its actions into the bounds, so they must be finite: wrap the env in a gymnasium.ActionWrapper whose action_space is a Box of the range the env really accepts
    """
    low = np.asarray(space.low, np.float32)
    high = np.asarray(space.high, np.float32)
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        raise ConfigError(f"{algorithm}: the action space {space} has infinite bounds; "
                          f"{algorithm} maps its actions into the bounds, so they must be "
                          "finite: wrap the env in a gymnasium.ActionWrapper whose "
                          "action_space is a Box of the range the env really accepts")
    return low, high


def to_env_actions(unit: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """Unit-box actions ``(B, *shape)`` in ``[-1, 1]`` mapped affinely onto
    ``[low, high]`` and clipped there (float32).

    >>> to_env_actions(np.array([[-1.0], [0.0], [1.0]]), np.array([0.0]), np.array([4.0])).tolist()
    [[0.0], [2.0], [4.0]]
    """
    env = low + (np.asarray(unit, np.float32) + 1.0) * (0.5 * (high - low))
    return np.clip(env, low, high).astype(np.float32, copy=False)


def to_unit_actions(actions, low, high):
    """The inverse of :func:`to_env_actions` (numpy arrays or torch tensors):
    ``2 (a - low) / (high - low) - 1``.

    >>> to_unit_actions(np.array([[0.0], [2.0], [4.0]]), np.array([0.0]), np.array([4.0])).tolist()
    [[-1.0], [0.0], [1.0]]
    """
    return 2.0 * (actions - low) / (high - low) - 1.0


def mlp(in_size: int, out_size: int, model_config) -> nn.Sequential:
    """``in_size -> fcnet_hiddens -> out_size``: hidden layers with
    ``fcnet_activation`` (``orthogonal_init`` applies to them), a linear output.

    >>> from flowrl.models import ModelConfig
    >>> net = mlp(3, 2, ModelConfig(fcnet_hiddens=(8, 8), fcnet_activation="relu"))
    >>> tuple(net(torch.zeros(5, 3)).shape), len(net)
    ((5, 2), 5)
    """
    sizes = [in_size, *model_config.fcnet_hiddens]
    return nn.Sequential(*dense_stack(sizes, model_config.fcnet_activation,
                                      model_config.orthogonal_init),
                         nn.Linear(sizes[-1], out_size))


class StateActionQ(nn.Module):
    """``Q(s, a)``: an :func:`mlp` over ``[s, a]`` (flat observations ``(B, obs_dim)``
    and unit-box actions ``(B, action_dim)``), one value per row ``(B,)``.

    >>> from flowrl.models import ModelConfig
    >>> q = StateActionQ(3, 2, ModelConfig(fcnet_hiddens=(8,)))
    >>> tuple(q(torch.zeros(4, 3), torch.zeros(4, 2)).shape)
    (4,)
    """

    def __init__(self, obs_dim: int, action_dim: int, model_config):
        super().__init__()
        self.net = mlp(obs_dim + action_dim, 1, model_config)

    def forward(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return self.net(torch.cat([obs, actions.reshape(len(actions), -1)], dim=1)).squeeze(1)


@torch.no_grad()
def soft_update(target: nn.Module, source: nn.Module, tau: float) -> None:
    """Polyak-average ``source``'s parameters into ``target``'s (same architecture):
    ``θ' <- τ θ + (1 - τ) θ'``; ``tau=1`` copies.

    >>> a, b = nn.Linear(1, 1), nn.Linear(1, 1)
    >>> _ = nn.init.zeros_(a.weight), nn.init.ones_(b.weight)
    >>> soft_update(a, b, 0.25); a.weight.item()
    0.25
    """
    for t, s in zip(target.parameters(), source.parameters()):
        t.lerp_(s, tau)


def flat_obs_dim(space: gym.Space, where: str) -> int:
    """The length of a flat observation row of ``space``: a ``Box`` of rank 1 or 2
    (flattened) or a ``Discrete`` (one-hot); a ConfigError naming ``where`` for
    images and other spaces."""
    if isinstance(space, gym.spaces.Discrete):
        return int(space.n)
    if isinstance(space, gym.spaces.Box) and len(space.shape) <= 2:
        return int(np.prod(space.shape))
    raise ConfigError(f"{where}: observation space {space} is not supported; these networks "
                      "are MLPs over flat observations (a Box of rank 1 or 2, or Discrete)")


def flat_obs_tensor(obs, obs_dim: int, space: gym.Space) -> torch.Tensor:
    """A batch of observations of ``space`` as these networks take them: float32 rows
    ``(B, obs_dim)``, ``Discrete`` ones one-hot
    (:func:`~flowrl.policies.torch_policy.model_obs`). A read-only array (one from
    Ray's object store) is copied first.

    >>> flat_obs_tensor(np.array([1, 0]), 2, gym.spaces.Discrete(2))
    tensor([[0., 1.],
            [1., 0.]])
    """
    obs = np.asarray(obs)
    if not obs.flags.writeable:
        obs = obs.copy()
    return model_obs(torch.as_tensor(obs), obs_dim,
                     discrete=isinstance(space, gym.spaces.Discrete), image=False)


__all__ = ["box_bounds", "to_env_actions", "to_unit_actions", "mlp", "StateActionQ",
           "soft_update", "flat_obs_dim", "flat_obs_tensor"]
