"""The model catalog: which model a policy gets for its spaces and ``ModelConfig``.

:func:`get_model` builds, for the observation space the model sees
(:func:`model_observation_space`):

- ``custom_model`` set: that class, the one registered under that name with
  :func:`register_model`, or the one a reference ``"pkg.mod:Class"`` names
  (imported in the process that builds the model: :mod:`flowrl.user_code`);
- an image (a rank-3 ``Box``): :class:`~flowrl.models.visionnet.VisionNetwork`;
- anything else: :class:`~flowrl.models.fcnet.FullyConnectedNetwork` over the
  flattened observation;

and with ``use_lstm`` wraps it in :class:`~flowrl.models.recurrent.LSTMWrapper`.
Every problem a config can have is a ConfigError here, at build time on the
driver, naming the ``model.`` field and the fix.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np
from torch import nn

from flowrl.errors import ConfigError
from flowrl.models.base import TorchModelV2
from flowrl.models.config import MODEL_REGISTRY, ModelConfig
from flowrl.models.fcnet import FullyConnectedNetwork
from flowrl.models.recurrent import LSTMWrapper
from flowrl.models.visionnet import ImpalaResNet, VisionNetwork
from flowrl.user_code import load_reference, split_reference

def register_model(name: str, model_class: type) -> None:
    """Make ``model_class`` buildable as ``model={"custom_model": name}``, as RLlib's
    ``ModelCatalog.register_custom_model``. It must be an ``nn.Module`` subclass
    built as ``model_class(obs_space, action_space, num_outputs, model_config,
    name)`` with ``forward`` and ``value_function`` (the shape of
    :class:`~flowrl.models.TorchModelV2`).

    A name registers in the process that calls this; Ray workers build their
    policies from the class itself when the config holds the class, so prefer
    ``custom_model=TheClass`` for models defined outside an importable module. A
    module that registers models can be imported before a config is built with
    ``flowrl train --import MODULE`` (the config field ``imports``).

    >>> register_model("no_model", dict)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: register_model('no_model', <class 'dict'>): give a torch.nn.Module subclass with RLlib's TorchModelV2 shape (forward(input_dict, state, seq_lens), value_function()), e.g. a flowrl.models.TorchModelV2 subclass
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"register_model({name!r}, ...): give a non-empty str name")
    _check_model_class(model_class, f"register_model({name!r}, {model_class!r})")
    MODEL_REGISTRY[name] = model_class


def _check_model_class(model_class: Any, where: str) -> None:
    if not (isinstance(model_class, type) and issubclass(model_class, nn.Module)
            and callable(getattr(model_class, "forward", None))):
        raise ConfigError(f"{where}: give a torch.nn.Module subclass with RLlib's TorchModelV2 "
                          "shape (forward(input_dict, state, seq_lens), value_function()), "
                          "e.g. a flowrl.models.TorchModelV2 subclass")


def model_class(config: ModelConfig, obs_space: gym.Space) -> type:
    """The class :func:`get_model` builds for ``config`` (before any LSTM wrapper)."""
    custom = config.custom_model
    if custom is None:
        return VisionNetwork if is_image(obs_space) else FullyConnectedNetwork
    where = f"model.custom_model={custom!r}"
    if isinstance(custom, str) and split_reference(custom) is not None:
        custom = load_reference(custom, "model.custom_model")
    elif isinstance(custom, str):
        if custom not in MODEL_REGISTRY:
            raise ConfigError(f"{where}: no model is registered under that name (registered: "
                              f"{sorted(MODEL_REGISTRY)}); call "
                              "flowrl.models.register_model(name, cls) first (in a module "
                              "imported with flowrl --import MODULE or the config field "
                              "imports), name the class as 'pkg.mod:Class', or give the class")
        return MODEL_REGISTRY[custom]
    _check_model_class(custom, where)
    return custom


def is_image(space: gym.Space) -> bool:
    """A rank-3 ``Box``: an image for the CNN (see :mod:`flowrl.models.visionnet`)."""
    return isinstance(space, gym.spaces.Box) and len(space.shape) == 3


def model_observation_space(space: gym.Space, where: str = "observation space") -> gym.Space:
    """The space a model sees for observations from ``space``: ``Box`` as it is,
    ``Discrete`` one-hot (a ``Box`` of ``n`` floats), ``Dict``/``Tuple`` flattened
    (rollout workers flatten such observations with gymnasium's
    ``FlattenObservation``). Other spaces are a ConfigError.

    >>> model_observation_space(gym.spaces.Discrete(3)).shape
    (3,)
    >>> model_observation_space(gym.spaces.Dict({"a": gym.spaces.Box(0, 1, (2,)),
    ...                                          "b": gym.spaces.Discrete(3)})).shape
    (5,)
    """
    if isinstance(space, gym.spaces.Box):
        return space
    if isinstance(space, gym.spaces.Discrete):
        return gym.spaces.Box(0.0, 1.0, (int(space.n),), np.float32)
    if isinstance(space, (gym.spaces.Dict, gym.spaces.Tuple)):
        return gym.spaces.flatten_space(space)
    raise ConfigError(f"{where} {space} is not supported; use a Box, Discrete, Dict or Tuple "
                      "space (wrap the env, e.g. with gymnasium.wrappers.FlattenObservation)")


def get_model(obs_space: gym.Space, action_space: gym.Space, num_outputs: int,
              model_config: Any, name: str = "model") -> nn.Module:
    """The model for ``obs_space`` (as the model sees it:
    :func:`model_observation_space`), ``num_outputs`` distribution inputs and
    ``model_config`` (anything :meth:`ModelConfig.coerce` takes); see the module
    docstring.

    >>> m = get_model(gym.spaces.Box(0, 255, (4, 84, 84), np.uint8), gym.spaces.Discrete(6),
    ...               6, {"use_lstm": True, "lstm_cell_size": 32})
    >>> type(m).__name__, type(m.base).__name__, [s.shape for s in m.get_initial_state()]
    ('LSTMWrapper', 'VisionNetwork', [(32,), (32,)])
    """
    config = ModelConfig.coerce(model_config)
    cls = model_class(config, obs_space)
    if config.use_lstm:
        return LSTMWrapper(obs_space, action_space, num_outputs, config, name, base_cls=cls)
    return cls(obs_space, action_space, num_outputs, config, name)


def is_recurrent(model: nn.Module) -> bool:
    """Whether ``model`` carries state (a non-empty ``get_initial_state()``)."""
    initial = getattr(model, "get_initial_state", None)
    return bool(initial()) if callable(initial) else False


register_model("impala_resnet", ImpalaResNet)

__all__ = ["register_model", "get_model", "model_class", "model_observation_space",
           "is_image", "is_recurrent", "TorchModelV2"]
