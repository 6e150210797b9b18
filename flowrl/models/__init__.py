"""Models: the catalog (MLP, CNN, IMPALA ResNet, LSTM wrapper), custom models and
``ModelConfig``.

``ModelConfig`` and the sequence utilities import no torch; the models resolve on
first use (PEP 562), so reading a config on the driver stays light.
"""

from __future__ import annotations

import importlib
from typing import Any

from flowrl.models.config import ModelConfig

_WHERE = {
    "TorchModelV2": "base", "FullyConnectedNetwork": "fcnet", "VisionNetwork": "visionnet",
    "ImpalaResNet": "visionnet", "LSTMWrapper": "recurrent", "get_model": "catalog",
    "register_model": "catalog", "model_observation_space": "catalog",
    "is_recurrent": "catalog",
}

__all__ = ["ModelConfig", *_WHERE]


def __getattr__(name: str) -> Any:
    module = _WHERE.get(name)
    if module is None:
        raise AttributeError(f"module 'flowrl.models' has no attribute {name!r}")
    value = getattr(importlib.import_module(f"flowrl.models.{module}"), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
