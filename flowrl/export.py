"""A policy's model as a file that serves without flowrl: TorchScript or ONNX.

What is written is the policy's :meth:`acting_module`
(:class:`~flowrl.policies.torch_policy.ActingModule`, DQN's
:class:`~flowrl.policies.dqn.QActingModule`), traced with torch on an example
batch: one input ``obs``, the observation batch ``(B, *obs_shape)`` as the env
gives it (float32, or uint8 frames, which the model scales itself; ``Discrete``
observations as int64 indices ``(B,)``), any ``B``; outputs
``action_dist_inputs`` ``(B, D)`` (logits, or a ``Box`` action's mean and
log-std side by side; DQN's Q-values) and, for a policy with a critic,
``value`` ``(B,)``. The greedy action is the logits' argmax (the mean for
``Box``, clipped to the bounds). Its numbers are the policy's own:
:meth:`compute_actions` reports the same ``action_dist_inputs`` and ``vf_preds``.

- :func:`to_torchscript` writes a ``torch.jit`` module: ``torch.jit.load(path)``
  serves it with torch alone;
- :func:`to_onnx` writes an ONNX model (``pip install 'flowrl[export]'`` for
  ``onnx``; ``onnxruntime`` serves it), its batch axis dynamic.

Recurrent policies are refused (a module of observations alone cannot carry
their state). ``flowrl export CHECKPOINT --format torchscript|onnx -o FILE``
writes a checkpoint's policy (:func:`flowrl.evaluation.load_for_evaluation`
loads it, so every algorithm's checkpoint exports without its workers or Ray).

>>> import os, tempfile, torch, gymnasium as gym
>>> from flowrl.policies import PPOPolicy
>>> policy = PPOPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=0)
>>> path = to_torchscript(policy, os.path.join(tempfile.mkdtemp(), "policy.pt"))
>>> logits, value = torch.jit.load(path)(torch.zeros(5, 3))
>>> tuple(logits.shape), tuple(value.shape)
((5, 2), (5,))
"""

from __future__ import annotations

import contextlib
import os
import warnings
from typing import Any, Callable

import numpy as np

from flowrl.errors import ConfigError, FlowError


def example_observations(space: Any, rows: int = 2):
    """A batch of ``rows`` observations of ``space`` (zeros in the space's dtype,
    a ``Discrete`` space's first value) as a tensor: what tracing runs the model on.

    >>> import gymnasium as gym
    >>> example_observations(gym.spaces.Box(0, 255, (1, 2, 2), "uint8")).dtype
    torch.uint8
    """
    import torch
    shape = tuple(space.shape or ())
    first = getattr(space, "start", 0)
    return torch.as_tensor(np.full((rows, *shape), first, dtype=space.dtype or np.float32))


def _acting_module(policy: Any, where: str):
    make = getattr(policy, "acting_module", None)
    if make is None:
        raise ConfigError(f"{where}: {type(policy).__name__} has no acting_module(); export "
                          "takes flowrl's torch policies (TorchPolicy and its subclasses, "
                          "DQNPolicy, SACPolicy, DDPGPolicy)")
    try:
        module = make()
    except ConfigError as e:
        raise ConfigError(f"{where}: {e}") from None
    return module.eval()


@contextlib.contextmanager
def _quiet_tracer():
    """No ``TracerWarning``: the models' shape checks (Python bools on fixed shapes)
    warn while traced, but the module is written so that a trace follows the batch
    size, and the tests compare the exported outputs with the policy's at batch
    sizes other than the traced one."""
    import torch
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", torch.jit.TracerWarning)
        yield


def _write(path: str, save: Callable[[str], None], where: str) -> str:
    """``save(tmp)`` aside, then renamed to ``path``: a failed export leaves no
    partial file (and an earlier one at ``path`` as it was)."""
    path = os.path.abspath(path)
    parent = os.path.dirname(path)
    if not os.path.isdir(parent):
        raise ConfigError(f"{where}: the directory {parent!r} does not exist; create it or "
                          "choose another output file")
    tmp = os.path.join(parent, f".{os.path.basename(path)}.tmp-{os.getpid()}")
    try:
        save(tmp)
        os.replace(tmp, path)
    except OSError as e:
        raise FlowError(f"{where}: cannot write {path!r}: {e.strerror or e}") from e
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)
    return path


def to_torchscript(policy: Any, path: str) -> str:
    """Write ``policy``'s acting module to ``path`` as TorchScript
    (``torch.jit.trace``); returns the absolute path. See the module docstring."""
    import torch
    where = f"to_torchscript({path!r})"
    module = _acting_module(policy, where)
    with torch.no_grad(), _quiet_tracer():
        traced = torch.jit.trace(module, example_observations(policy.observation_space))
    return _write(path, traced.save, where)


def import_onnx(where: str) -> Any:
    """The ``onnx`` module; a ConfigError naming ``where`` and the install command
    when it is missing (torch's exporter needs it)."""
    try:
        import onnx
    except ImportError:
        raise ConfigError(f"{where}: writing ONNX needs the onnx package: pip install "
                          "'flowrl[export]' (or pip install onnx onnxruntime)") from None
    return onnx


def to_onnx(policy: Any, path: str) -> str:
    """Write ``policy``'s acting module to ``path`` as an ONNX model (torch's
    TorchScript-based exporter; input ``obs``, outputs as the module names them,
    every batch axis dynamic); returns the absolute path. See the module docstring.
    """
    import torch
    where = f"to_onnx({path!r})"
    import_onnx(where)
    module = _acting_module(policy, where)
    names = ["obs", *module.output_names]

    def save(tmp: str) -> None:
        with torch.no_grad(), _quiet_tracer():
            torch.onnx.export(module, (example_observations(policy.observation_space),), tmp,
                              input_names=["obs"], output_names=list(module.output_names),
                              dynamic_axes={name: {0: "batch"} for name in names},
                              dynamo=False)
    return _write(path, save, where)


#: ``flowrl export --format``: the writer of each format.
EXPORTERS: dict[str, Callable[[Any, str], str]] = {"torchscript": to_torchscript,
                                                   "onnx": to_onnx}

__all__ = ["to_torchscript", "to_onnx", "example_observations", "import_onnx", "EXPORTERS"]
