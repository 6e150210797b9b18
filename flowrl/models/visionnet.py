"""The built-in CNN for image observations, and its default conv stacks.

An image is a rank-3 ``Box``, channels first ``(C, H, W)`` as flowrl's Atari and
MinAtar envs give it, or channels last ``(H, W, C)`` (taken to be so when the last
dimension is smaller than the first, e.g. ``(84, 84, 4)``). A ``uint8`` image
travels as uint8 and is scaled here, inside ``forward``, to [0, 1] or, with
``zero_mean``, to [-1, 1] (:func:`scale_image`); other dtypes are used as they are.

The network: ``conv_filters`` (``[out_channels, kernel, stride]`` each, no padding)
with ``conv_activation``, flattened, then ``post_fcnet_hiddens`` dense layers with
``post_fcnet_activation``, then the logits; ``orthogonal_init`` initialises the
conv and dense layers as :func:`~flowrl.models.base.hidden` says. With
``vf_share_layers`` the value head reads the same features; without, a second copy
of the whole stack computes the value. :func:`default_conv` picks the stack when
``conv_filters`` is None.
"""

from __future__ import annotations

import numpy as np
import torch
from torch import nn

from flowrl.errors import ConfigError
from flowrl.models.base import (TorchModelV2, activation, dense_stack, free_log_std, head,
                                hidden, with_log_std)

#: ``(H, W) -> (conv_filters, post_fcnet_hiddens)`` used when ``conv_filters`` is None:
#: the Nature DQN CNN for 84x84 (Mnih et al. 2015), a stack of the same shape for
#: 42x42, and MinAtar's one conv layer (Young & Tian 2019) for 10x10.
DEFAULT_CONV = {
    (84, 84): (((32, 8, 4), (64, 4, 2), (64, 3, 1)), (512,)),
    (42, 42): (((16, 4, 2), (32, 4, 2), (64, 3, 1)), (256,)),
    (10, 10): (((16, 3, 1),), (128,)),
}


def image_layout(shape: tuple) -> tuple[int, int, int, bool]:
    """``(channels, height, width, channels_last)`` of a rank-3 image shape.

    >>> image_layout((4, 84, 84)), image_layout((84, 84, 4))
    ((4, 84, 84, False), (4, 84, 84, True))
    """
    if shape[-1] < shape[0]:
        return shape[2], shape[0], shape[1], True
    return shape[0], shape[1], shape[2], False


def default_conv(height: int, width: int) -> tuple[tuple, tuple]:
    """``(conv_filters, post_fcnet_hiddens)`` for ``height x width`` images; a
    ConfigError for a size without a default.

    >>> default_conv(10, 10)
    (((16, 3, 1),), (128,))
    """
    try:
        return DEFAULT_CONV[(height, width)]
    except KeyError:
        sizes = ", ".join(f"{h}x{w}" for h, w in DEFAULT_CONV)
        raise ConfigError(f"model.conv_filters: no default conv stack for {height}x{width} "
                          f"images (defaults exist for {sizes}); set model.conv_filters, "
                          "e.g. [[32, 8, 4], [64, 4, 2], [64, 3, 1]]") from None


def scale_image(obs: torch.Tensor, scale: bool, zero_mean: bool) -> torch.Tensor:
    """``obs`` as floats; with ``scale`` (the space is ``uint8``) in [0, 1] (``x / 255``)
    or, with ``zero_mean`` too, in [-1, 1] (``(x - 128) / 128``).

    >>> x = torch.tensor([0, 128, 255], dtype=torch.uint8)
    >>> scale_image(x, True, False).tolist(), scale_image(x, True, True).tolist()
    ([0.0, 0.501960813999176, 1.0], [-1.0, 0.0, 0.9921875])
    """
    x = obs.float()
    if not scale:
        return x
    return (x - 128.0) / 128.0 if zero_mean else x / 255.0


def conv_output_shape(channels: int, height: int, width: int, filters) -> tuple[int, int, int]:
    """``(C, H, W)`` after ``filters`` (no padding); a ConfigError naming the first
    layer whose kernel does not fit what reaches it.

    >>> conv_output_shape(4, 84, 84, ((32, 8, 4), (64, 4, 2), (64, 3, 1)))
    (64, 7, 7)
    >>> conv_output_shape(1, 10, 10, ((8, 3, 1), (8, 9, 1)))
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: model.conv_filters[1]=[8, 9, 1]: the 9x9 kernel does not fit the 8x8 input this layer gets from a 10x10 image; use a smaller kernel or stride, or fewer layers
    """
    h, w = height, width
    for i, (out, kernel, stride) in enumerate(filters):
        if kernel > h or kernel > w:
            raise ConfigError(
                f"model.conv_filters[{i}]={[out, kernel, stride]}: the {kernel}x{kernel} kernel "
                f"does not fit the {h}x{w} input this layer gets from a {height}x{width} "
                "image; use a smaller kernel or stride, or fewer layers")
        h, w, channels = (h - kernel) // stride + 1, (w - kernel) // stride + 1, out
    return channels, h, w


def _conv_stack(channels: int, filters, act: str, orthogonal: bool) -> list[nn.Module]:
    layers: list[nn.Module] = []
    for out, kernel, stride in filters:
        layers += [hidden(nn.Conv2d(channels, out, kernel, stride), orthogonal), activation(act)]
        channels = out
    return layers


class VisionNetwork(TorchModelV2):
    """CNN policy and value function; see the module docstring. ``num_outputs=None``
    builds the feature stack only (for the LSTM wrapper)."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        c, h, w, self.channels_last = image_layout(tuple(obs_space.shape))
        filters, post = model_config.conv_filters, model_config.post_fcnet_hiddens
        if filters is None:
            filters, default_post = default_conv(h, w)
            post = default_post if post is None else post
        post = () if post is None else post
        out_c, out_h, out_w = conv_output_shape(c, h, w, filters)
        sizes = [out_c * out_h * out_w, *post]
        self.scale, self.zero_mean = obs_space.dtype == np.uint8, model_config.zero_mean

        def stack() -> nn.Sequential:
            m = model_config
            return nn.Sequential(*_conv_stack(c, filters, m.conv_activation, m.orthogonal_init),
                                 nn.Flatten(),
                                 *dense_stack(sizes, m.post_fcnet_activation, m.orthogonal_init))

        self.features_only = num_outputs is None
        self.vf_share_layers = model_config.vf_share_layers
        self.trunk = stack()
        if self.features_only:
            self.num_outputs = sizes[-1]
            return
        outputs, self.log_std = free_log_std(num_outputs, action_space, model_config)
        self.logits = head(sizes[-1], outputs, 0.01)
        self.vf_trunk = None if self.vf_share_layers else stack()
        self.value_branch = head(sizes[-1], 1, 1.0)
        self._features = self._x = None

    def _image(self, obs: torch.Tensor) -> torch.Tensor:
        x = scale_image(obs, self.scale, self.zero_mean)
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        return x

    def forward(self, input_dict, state, seq_lens):
        x = self._image(input_dict["obs"])
        features = self.trunk(x)
        if self.features_only:
            return features, state
        self._features, self._x = features, x
        return with_log_std(self.logits(features), self.log_std), state

    def value_function(self) -> torch.Tensor:
        features = self._features if self.vf_trunk is None else self.vf_trunk(self._x)
        return self.value_branch(features).squeeze(-1)


class ImpalaResNet(TorchModelV2):
    """The IMPALA paper's deep ResNet (Espeholt et al. 2018, fig. 3): per stage a 3x3
    conv, a 3x3 max-pool of stride 2 and two residual blocks, then a ReLU dense layer;
    logits and value heads share it. ``custom_model_config``: ``channels`` per stage
    (default ``[16, 32, 32]``) and ``hidden`` (default 256). Registered in the catalog
    as ``"impala_resnet"`` (``model={"custom_model": "impala_resnet"}``).

    >>> import gymnasium as gym
    >>> from flowrl.models import ModelConfig
    >>> space = gym.spaces.Box(0, 255, (4, 42, 42), np.uint8)
    >>> m = ImpalaResNet(space, gym.spaces.Discrete(6), 6, ModelConfig(), "resnet")
    >>> out, _ = m({"obs": torch.zeros(2, 4, 42, 42, dtype=torch.uint8)}, [], None)
    >>> tuple(out.shape), tuple(m.value_function().shape)
    ((2, 6), (2,))
    """

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        options = dict(model_config.get("custom_model_config") or {})
        channels_per_stage = list(options.get("channels", (16, 32, 32)))
        hidden = int(options.get("hidden", 256))
        c, h, w, self.channels_last = image_layout(tuple(obs_space.shape))
        self.scale, self.zero_mean = obs_space.dtype == np.uint8, model_config.zero_mean
        stages: list[nn.Module] = []
        for out in channels_per_stage:
            stages += [nn.Conv2d(c, out, 3, padding=1), nn.MaxPool2d(3, 2, padding=1),
                       _Residual(out), _Residual(out)]
            c, h, w = out, (h + 1) // 2, (w + 1) // 2
        self.trunk = nn.Sequential(*stages, nn.ReLU(), nn.Flatten(),
                                   nn.Linear(c * h * w, hidden), nn.ReLU())
        self.features_only = num_outputs is None
        if self.features_only:
            self.num_outputs = hidden
            return
        outputs, self.log_std = free_log_std(num_outputs, action_space, model_config)
        self.logits = head(hidden, outputs, 0.01)
        self.value_branch = head(hidden, 1, 1.0)
        self._features = None

    def forward(self, input_dict, state, seq_lens):
        x = scale_image(input_dict["obs"], self.scale, self.zero_mean)
        if self.channels_last:
            x = x.permute(0, 3, 1, 2)
        features = self.trunk(x)
        if self.features_only:
            return features, state
        self._features = features
        return with_log_std(self.logits(features), self.log_std), state

    def value_function(self) -> torch.Tensor:
        return self.value_branch(self._features).squeeze(-1)


class _Residual(nn.Module):
    """``x + conv(relu(conv(relu(x))))`` with 3x3 convs keeping the shape."""

    def __init__(self, channels: int):
        super().__init__()
        self.conv0 = nn.Conv2d(channels, channels, 3, padding=1)
        self.conv1 = nn.Conv2d(channels, channels, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x + self.conv1(torch.relu(self.conv0(torch.relu(x))))


__all__ = ["VisionNetwork", "ImpalaResNet", "DEFAULT_CONV", "default_conv",
           "conv_output_shape", "image_layout"]
