"""``ModelConfig``: which torch model a policy builds, with RLlib 1.x field names.

``AlgorithmConfig.model`` (and a policy's ``model=``) accepts a
:class:`ModelConfig`, a dict of its fields, or a sequence of ints (the hidden
sizes, ``fcnet_hiddens``, as flowrl configs wrote it before models had more
fields); :meth:`ModelConfig.coerce` turns any of them into a validated
:class:`ModelConfig`. Importing this module imports no torch: configs are read
and checked on the driver before anything is built.

What the fields choose (the catalog, :func:`flowrl.models.get_model`, builds it):

- a flat observation: an MLP over ``fcnet_hiddens`` with ``fcnet_activation``;
- an image (a rank-3 ``Box``): a CNN over ``conv_filters`` (``None``: a default
  stack for 84x84, 42x42 and 10x10 inputs) with ``conv_activation``, then
  ``post_fcnet_hiddens`` dense layers (``None``: the default stack's);
- ``use_lstm``: either one, then an LSTM of ``lstm_cell_size`` over sequences of
  at most ``max_seq_len`` steps, optionally fed the previous action
  (``lstm_use_prev_action``) and reward (``lstm_use_prev_reward``);
- ``vf_share_layers``: the value head shares the policy's layers (else a
  separate copy of them computes the value);
- ``free_log_std``: a Gaussian's log standard deviations are free parameters,
  not outputs of the network (flowrl's default is True, as CleanRL and SB3
  do; RLlib 1.x defaulted to False);
- ``orthogonal_init``: the built-in MLP's and CNN's hidden layers get orthogonal
  weights of gain sqrt(2) and zero biases, as CleanRL and OpenAI Baselines
  initialise them (False, the default: torch's own initialisation). The output
  heads are orthogonal either way (gain 0.01 for logits, 1 for the value);
- ``zero_mean``: the built-in CNNs scale ``uint8`` images to [-1, 1]
  (``(x - 128) / 128``, the ``zero_mean`` of RLlib's early Atari models) instead
  of [0, 1] (``x / 255``, the default). Atari screens are mostly a constant
  background, and centred pixels keep it from dominating the first layer: on
  Pong, IMPALA's value function learns far faster (docs/benchmarks.md, "Atari
  learning");
- ``custom_model``: a :class:`~flowrl.models.TorchModelV2` subclass, the name
  given to :func:`~flowrl.models.register_model`, or a reference
  ``"pkg.mod:Class"`` to a class of an importable module (what YAML and ``--set``
  can write; the string is stored and each process imports the module), built with
  ``custom_model_config`` in ``model_config["custom_model_config"]``. The
  catalog registers the IMPALA ResNet as ``"impala_resnet"``.

>>> ModelConfig.coerce([32, 32]).fcnet_hiddens
(32, 32)
>>> ModelConfig.coerce({"use_lstm": True, "lstm_cell_size": 64}).lstm_cell_size
64
>>> ModelConfig.coerce({"conv_filters": [[16, 3]]})
Traceback (most recent call last):
...
flowrl.errors.ConfigError: model.conv_filters[0]=[16, 3]: give [out_channels, kernel, stride] with positive ints, e.g. [32, 8, 4]
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from flowrl.errors import ConfigError
from flowrl.user_code import split_reference

ACTIVATIONS = ("tanh", "relu", "elu", "swish", "linear")

#: ``name -> model class`` of :func:`flowrl.models.register_model` (kept here, free of
#: torch, so a config can resolve names on the driver: :meth:`ModelConfig.resolved`).
MODEL_REGISTRY: dict[str, type] = {}


def _positive_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and v > 0


def _sizes(v: Any) -> bool:
    return isinstance(v, (list, tuple)) and all(_positive_int(h) for h in v)


@dataclass(frozen=True)
class ModelConfig:
    """The model a policy builds; see the module docstring. Frozen: a changed model
    is a new config (``dataclasses.replace`` or :meth:`coerce` of a dict)."""

    fcnet_hiddens: tuple = (64, 64)
    fcnet_activation: str = "tanh"
    conv_filters: tuple | None = None
    conv_activation: str = "relu"
    post_fcnet_hiddens: tuple | None = None
    post_fcnet_activation: str = "relu"
    use_lstm: bool = False
    lstm_cell_size: int = 256
    max_seq_len: int = 20
    lstm_use_prev_action: bool = False
    lstm_use_prev_reward: bool = False
    vf_share_layers: bool = False
    free_log_std: bool = True
    orthogonal_init: bool = False
    zero_mean: bool = False
    custom_model: Any = None
    custom_model_config: dict = field(default_factory=dict)

    def __post_init__(self) -> None:
        def bad(name: str, value: Any, what: str) -> ConfigError:
            return ConfigError(f"model.{name}={value!r}: {what}")

        if not (_sizes(self.fcnet_hiddens)):
            raise bad("fcnet_hiddens", self.fcnet_hiddens,
                      "give the hidden layer sizes, a list of ints > 0, e.g. [64, 64]")
        object.__setattr__(self, "fcnet_hiddens", tuple(self.fcnet_hiddens))
        for name in ("fcnet_activation", "conv_activation", "post_fcnet_activation"):
            value = getattr(self, name)
            if value not in ACTIVATIONS:
                raise bad(name, value, f"choose one of {list(ACTIVATIONS)}")
        if self.conv_filters is not None:
            if not isinstance(self.conv_filters, (list, tuple)) or not self.conv_filters:
                raise bad("conv_filters", self.conv_filters,
                          "give a non-empty list of [out_channels, kernel, stride], or None "
                          "for the default stack of the image size")
            for i, layer in enumerate(self.conv_filters):
                if not (isinstance(layer, (list, tuple)) and len(layer) == 3
                        and all(_positive_int(x) for x in layer)):
                    raise bad(f"conv_filters[{i}]", layer, "give [out_channels, kernel, "
                              "stride] with positive ints, e.g. [32, 8, 4]")
            object.__setattr__(self, "conv_filters",
                               tuple(tuple(layer) for layer in self.conv_filters))
        if self.post_fcnet_hiddens is not None:
            if not _sizes(self.post_fcnet_hiddens):
                raise bad("post_fcnet_hiddens", self.post_fcnet_hiddens,
                          "give dense layer sizes after the conv stack, e.g. [512], or None")
            object.__setattr__(self, "post_fcnet_hiddens", tuple(self.post_fcnet_hiddens))
        for name in ("use_lstm", "lstm_use_prev_action", "lstm_use_prev_reward",
                     "vf_share_layers", "free_log_std", "orthogonal_init", "zero_mean"):
            if not isinstance(getattr(self, name), bool):
                raise bad(name, getattr(self, name), "must be true or false")
        for name in ("lstm_cell_size", "max_seq_len"):
            if not _positive_int(getattr(self, name)):
                raise bad(name, getattr(self, name), "must be an int >= 1")
        custom = self.custom_model
        if custom is not None and not (isinstance(custom, str) and custom) \
                and not isinstance(custom, type):
            raise bad("custom_model", custom, "give a TorchModelV2 subclass, the name "
                      "it was registered under with flowrl.models.register_model, or "
                      "'pkg.mod:Class'")
        if isinstance(custom, str) and ":" in custom and split_reference(custom) is None:
            raise bad("custom_model", custom, "write a class of an importable module as "
                      "'pkg.mod:Class', e.g. 'my_models:TinyNet'")
        if not isinstance(self.custom_model_config, dict):
            raise bad("custom_model_config", self.custom_model_config,
                      "must be a dict (passed to the custom model as "
                      "model_config['custom_model_config'])")

    @classmethod
    def coerce(cls, value: Any, where: str = "model") -> "ModelConfig":
        """``value`` as a :class:`ModelConfig`: itself, a dict of fields, or a sequence of
        hidden sizes (``fcnet_hiddens``). Unknown dict keys are a ConfigError naming
        them and the close field names.

        >>> ModelConfig.coerce({"fcnet_hidens": [8]})
        Traceback (most recent call last):
        ...
        flowrl.errors.ConfigError: model.fcnet_hidens: unknown model field; did you mean fcnet_hiddens? (fields: fcnet_hiddens, fcnet_activation, conv_filters, conv_activation, post_fcnet_hiddens, post_fcnet_activation, use_lstm, lstm_cell_size, max_seq_len, lstm_use_prev_action, lstm_use_prev_reward, vf_share_layers, free_log_std, orthogonal_init, zero_mean, custom_model, custom_model_config)
        """
        try:
            return cls._coerce(value, where)
        except ConfigError as e:
            text = str(e)
            if where != "model" and text.startswith("model."):
                raise ConfigError(where + text[len("model"):]) from None
            raise

    @classmethod
    def _coerce(cls, value: Any, where: str) -> "ModelConfig":
        if isinstance(value, cls):
            return value
        if isinstance(value, Mapping):
            names = [f.name for f in dataclasses.fields(cls)]
            for key in value:
                if key not in names:
                    import difflib
                    close = difflib.get_close_matches(str(key), names, n=1)
                    hint = f"did you mean {close[0]}? " if close else ""
                    raise ConfigError(f"{where}.{key}: unknown model field; {hint}"
                                      f"(fields: {', '.join(names)})")
            return cls(**dict(value))
        if isinstance(value, Sequence) and not isinstance(value, str):
            if not value:
                raise ConfigError(f"{where}={value!r}: give the hidden layer sizes, a "
                                  "non-empty list of ints > 0, e.g. [64, 64], or a dict "
                                  "of model fields")
            return cls(fcnet_hiddens=tuple(value))
        raise ConfigError(f"{where}={value!r}: give a ModelConfig, a dict of its fields "
                          "(e.g. {'use_lstm': True}) or the hidden layer sizes, e.g. [64, 64]")

    def resolved(self) -> "ModelConfig":
        """This config with a ``custom_model`` name registered in this process replaced
        by its class, so that processes where it was never registered (Ray workers)
        build the same model. Names registered nowhere here stay names.

        >>> MODEL_REGISTRY["tiny"] = dict
        >>> ModelConfig(custom_model="tiny").resolved().custom_model
        <class 'dict'>
        >>> del MODEL_REGISTRY["tiny"]
        """
        if isinstance(self.custom_model, str) and self.custom_model in MODEL_REGISTRY:
            return dataclasses.replace(self, custom_model=MODEL_REGISTRY[self.custom_model])
        return self

    def to_dict(self) -> dict[str, Any]:
        """The fields as plain data (lists for tuples), for checkpoints and YAML.

        >>> ModelConfig().to_dict()["fcnet_hiddens"]
        [64, 64]
        """
        def plain(v: Any) -> Any:
            if isinstance(v, tuple):
                return [plain(x) for x in v]
            return v
        return {f.name: plain(getattr(self, f.name)) for f in dataclasses.fields(self)}

    def __getitem__(self, key: str) -> Any:
        """RLlib models read their config as a dict (``model_config["fcnet_hiddens"]``)."""
        try:
            return getattr(self, key)
        except AttributeError:
            raise KeyError(key) from None

    def get(self, key: str, default: Any = None) -> Any:
        """``model_config.get(key, default)``, as on the dict RLlib passes."""
        return getattr(self, key, default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and key in {f.name for f in dataclasses.fields(self)}


def model_config(model: Any, hidden_sizes: Sequence[int] | None) -> ModelConfig:
    """A policy's ``model`` (anything :meth:`ModelConfig.coerce` takes; None: the
    default) with ``hidden_sizes``, the older spelling, setting its ``fcnet_hiddens``
    when given (a policy config that names ``hidden_sizes`` overrides the
    algorithm's ``model`` there).

    >>> model_config({"use_lstm": True}, (8,)).fcnet_hiddens
    (8,)
    """
    config = ModelConfig.coerce(ModelConfig() if model is None else model)
    if hidden_sizes is None:
        return config
    return ModelConfig.coerce({**config.to_dict(), "fcnet_hiddens": list(hidden_sizes)})


def check_mlp_config(config: ModelConfig, where: str, algorithm: str) -> None:
    """A ConfigError naming ``where`` (e.g. ``"SACConfig.Q_model"``) for what an
    algorithm that builds plain MLPs over flat observations cannot build: a
    recurrent model, a custom model or a conv stack.

    >>> check_mlp_config(ModelConfig(use_lstm=True), "SACConfig.Q_model", "SAC")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: SACConfig.Q_model.use_lstm: not supported; SAC's networks are MLPs over flat observations (set fcnet_hiddens and fcnet_activation)
    """
    for name, bad in (("use_lstm", config.use_lstm),
                      ("custom_model", config.custom_model is not None),
                      ("conv_filters", config.conv_filters is not None)):
        if bad:
            raise ConfigError(f"{where}.{name}: not supported; {algorithm}'s networks are "
                              "MLPs over flat observations (set fcnet_hiddens and "
                              "fcnet_activation)")


__all__ = ["ModelConfig", "ACTIVATIONS", "MODEL_REGISTRY", "model_config", "check_mlp_config"]
