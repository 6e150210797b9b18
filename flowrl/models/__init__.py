"""Models: the catalog (MLP, CNN, IMPALA ResNet, LSTM wrapper), custom models and
``ModelConfig``.

``ModelConfig`` and the sequence utilities import no torch; the models resolve on
first use (PEP 562), so reading a config on the driver stays light.
"""

from __future__ import annotations

from flowrl.lazy import lazy_attributes
from flowrl.models.config import ModelConfig

_WHERE = {
    "TorchModelV2": "base", "FullyConnectedNetwork": "fcnet", "VisionNetwork": "visionnet",
    "ImpalaResNet": "visionnet", "LSTMWrapper": "recurrent", "get_model": "catalog",
    "register_model": "catalog", "model_observation_space": "catalog",
    "is_recurrent": "catalog",
}

__all__ = ["ModelConfig", *_WHERE]

__getattr__, __dir__ = lazy_attributes(__name__, _WHERE, globals(), __all__)
