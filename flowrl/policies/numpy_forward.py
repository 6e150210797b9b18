"""Numpy inference for flowrl's built-in MLP models, and action sampling from logits.

Acting runs one small forward per env step, where a torch call's fixed cost
(dispatch, autograd bookkeeping, tensor wrapping) outweighs the arithmetic. For
the built-in models (:class:`~flowrl.policies.torch_policy.ActorCriticModel` and
:class:`~flowrl.policies.dqn.QNetwork`: ``nn.Sequential`` stacks of ``nn.Linear``
with ``nn.Tanh``/``nn.ReLU``) :class:`NumpyMLP` computes the same float32 maths
with numpy; ``benchmarks/sampling.py`` measures what it saves.

Staleness. A :class:`NumpyMLP` holds numpy *views* of the torch parameters'
memory, not copies: every in-place update (optimizer steps, ``load_state_dict`` in
``set_weights``/``set_state``, ``copy_``) is visible at once. What a view cannot
follow is a parameter replaced by another tensor or moved to other memory
(``param.data = ...``, ``module.double()``, a new ``nn.Parameter``, a device
move); a :class:`ParameterGuard` over the whole model detects each of these by
identity and data pointer, and :class:`SnapshotCache` rebuilds the snapshot, or
falls back to torch when the model no longer qualifies. Custom models never take
this path.

Sampling functions are pure and take their random draws as arguments, so that a
seeded ``numpy.random.Generator`` makes them reproducible.
"""

from __future__ import annotations

import math
import operator

import numpy as np
import torch
from torch import nn

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

#: The numpy path serves a batch only while ``rows x in x out`` of its largest layer
#: stays below this: OpenBLAS computes such products on the calling thread, where
#: larger ones start its thread pool, which competes with the sampler for the cores
#: (and spins under load). Larger batches go through torch, whose thread settings
#: apply; there a forward's fixed cost no longer matters.
NUMPY_MAX_MACS = 1 << 18
_ACTIVATIONS = (nn.Tanh, nn.ReLU)


class ParameterGuard:
    """Notices when numpy views of ``module``'s parameters may have gone stale.

    Records every submodule and parameter object under ``module`` and each
    parameter's data pointer; :meth:`intact` is False once any of them was
    replaced or a parameter's memory moved. In-place updates keep it True (the
    views see them). Submodules in ``skip`` are recorded only as their parent's
    entry (replacing one is noticed), not their contents: a guard for a use
    that does not read them, cheaper to check.

    >>> g = ParameterGuard(nn.Linear(2, 2))
    >>> g.intact()
    True
    >>> g.module.bias = nn.Parameter(torch.zeros(2))
    >>> g.intact()
    False
    """

    __slots__ = ("module", "_tables", "_keys", "_values", "_sizes", "_params", "_pointers")

    def __init__(self, module: nn.Module, *, skip: tuple = ()):
        self.module = module
        entries, tables, params = [], [], []
        for m in _walk(module, {id(m) for m in skip}):
            for table in (m._modules, m._parameters):
                if table:  # an entry added to an empty table (of a leaf) cannot matter
                    tables.append(table)
                entries.extend((table, key, value) for key, value in table.items())
            params.extend(p for p in m._parameters.values() if p is not None)
        self._tables, self._keys, self._values = (tuple(x) for x in zip(*entries)) \
            if entries else ((), (), ())
        self._sizes = (tuple(tables), tuple(map(len, tables)))  # a submodule added later
        self._params = tuple(params)
        self._pointers = tuple(p.data_ptr() for p in params)

    def intact(self) -> bool:
        """Whether every recorded object and data pointer is still in place."""
        tables, sizes = self._sizes
        return (all(map(operator.is_, map(dict.get, self._tables, self._keys), self._values))
                and tuple(map(len, tables)) == sizes
                and tuple(map(_data_ptr, self._params)) == self._pointers)


_data_ptr = torch.Tensor.data_ptr


def _walk(module: nn.Module, skip: set[int]):
    """``module`` and its submodules, each once, except the subtrees of ids in ``skip``."""
    seen, stack = set(skip), [module]
    while stack:
        m = stack.pop()
        if id(m) in seen:
            continue
        seen.add(id(m))
        yield m
        stack.extend(c for c in reversed(m._modules.values()) if c is not None)


class NumpyMLP:
    """The forward of ``seq`` (``nn.Linear`` and ``nn.Tanh``/``nn.ReLU`` layers) in numpy.

    Built with :meth:`build`, which returns ``None`` for anything else (another
    layer type, a subclass of ``nn.Sequential``, parameters that are not float32
    CPU tensors). Calling it maps ``(B, in)`` float32 to ``(B, out)`` float32.

    >>> import torch
    >>> seq = nn.Sequential(nn.Linear(3, 4), nn.Tanh(), nn.Linear(4, 2))
    >>> f = NumpyMLP.build(seq)
    >>> x = np.ones((2, 3), np.float32)
    >>> bool(np.allclose(f(x), seq(torch.ones(2, 3)).detach().numpy(), atol=1e-6))
    True
    >>> with torch.no_grad():
    ...     _ = seq[0].bias.add_(1.0)       # in place: the views see it
    >>> bool(np.allclose(f(x), seq(torch.ones(2, 3)).detach().numpy(), atol=1e-6))
    True

    Its views cannot follow a parameter that is replaced; the policies watch their
    whole model with a :class:`ParameterGuard` and rebuild (:class:`SnapshotCache`).
    """

    __slots__ = ("_layers", "macs_per_row")

    def __init__(self, layers: list[tuple]):
        self._layers = layers
        #: Multiply-adds per row of the largest layer (see ``NUMPY_MAX_MACS``).
        self.macs_per_row = max((w.size for w, _, _ in layers if w is not None), default=0)

    @classmethod
    def build(cls, seq: nn.Module) -> "NumpyMLP | None":
        """A snapshot of ``seq``, or ``None`` when ``seq`` is not a plain MLP."""
        if type(seq) is not nn.Sequential:
            return None
        layers: list[list] = []
        for m in seq:
            if type(m) is nn.Linear:
                w, b = m.weight, m.bias
                if any(p is not None and (p.dtype != torch.float32 or p.device.type != "cpu")
                       for p in (w, b)):
                    return None
                # (in, out) view of the (out, in) weight
                layers.append([w.detach().numpy().T, None if b is None else b.detach().numpy(),
                               None])
            elif type(m) in _ACTIVATIONS:
                act = np.tanh if type(m) is nn.Tanh else _relu
                if layers and layers[-1][0] is not None and layers[-1][2] is None:
                    layers[-1][2] = act  # applied in place after that Linear
                else:
                    layers.append([None, None, act])
            else:
                return None
        return cls([tuple(layer) for layer in layers])

    def __call__(self, x: np.ndarray) -> np.ndarray:
        h = x
        for w, b, act in self._layers:
            if w is None:  # an activation with no Linear before it: not in place
                h = act(h)
                continue
            h = np.dot(h, w)  # a new array: the rest may work in place
            if b is not None:
                h += b
            if act is not None:
                act(h, out=h)
        return np.array(h, np.float32) if h is x else h


def max_rows(*mlps: "NumpyMLP | None") -> int:
    """The most rows a snapshot made of ``mlps`` serves (``NUMPY_MAX_MACS``); larger
    batches go through torch.

    >>> max_rows(NumpyMLP.build(nn.Sequential(nn.Linear(64, 64))), None)
    63
    """
    macs = max([1] + [m.macs_per_row for m in mlps if m is not None])
    return (NUMPY_MAX_MACS - 1) // macs


def obs_rows(obs, obs_dim: int, discrete: bool) -> np.ndarray:
    """A batch of observations as ``(B, obs_dim)`` float32 rows: one-hot for a
    ``Discrete`` observation space (``discrete``), flattened otherwise.

    >>> obs_rows([[1, 2], [3, 4]], 2, False).dtype, obs_rows([1], 3, True).tolist()
    (dtype('float32'), [[0.0, 1.0, 0.0]])
    """
    obs = np.asarray(obs)
    if discrete:
        return one_hot(obs, obs_dim)
    return np.asarray(obs.reshape(len(obs), obs_dim), dtype=np.float32)


class SnapshotCache:
    """A policy's numpy snapshot of its model, rebuilt only when stale.

    ``build(model)`` makes a snapshot (an object with ``guard`` (a
    :class:`ParameterGuard` of ``model``) and ``max_rows``) or returns None for a
    model numpy cannot run; such a model is remembered so it is not inspected
    again. :meth:`get` gives the snapshot for a batch of ``rows``, or None for
    the torch path. A snapshot may carry further guards for uses that read only
    part of the model (see ``part``).
    """

    __slots__ = ("build", "snap", "unsupported")

    def __init__(self, build):
        self.build = build
        self.snap = None
        self.unsupported: nn.Module | None = None

    def get(self, model: nn.Module, rows: int, part: str = "guard"):
        """The snapshot of ``model`` when it serves ``rows`` rows, else None.

        ``part`` names the snapshot's guard to check: ``"guard"`` (the whole model)
        or a narrower one the snapshot defines; a stale one rebuilds the snapshot.
        """
        snap = self.snap
        if snap is None or snap.guard.module is not model or not getattr(snap, part).intact():
            if model is self.unsupported:
                return None
            snap = self.snap = self.build(model)
            if snap is None:
                self.unsupported = model
                return None
        return snap if rows <= snap.max_rows else None


def _relu(h: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
    return np.maximum(h, 0, out=out)


def categorical_sample(logits: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Categorical draws from unnormalised ``(B, D)`` logits by inverse CDF, and
    their log-probabilities: ``(actions (B,), logp (B,))``.

    Per row, the action is the number of categories whose cumulative probability
    is below ``(1 - u) * total`` (``u ~ U[0, 1)`` of shape ``(B,)``; scaling by the
    row's total means rounding never picks a category past the last one with
    mass): the rule of :meth:`flowrl.policies.distributions.Categorical.sample`.

    Two categories take a column-wise path with the same arithmetic (the same
    draws, bit for bit) and no broadcasting: a small batch's cost is the number of
    numpy calls, and acting calls this once per forward.

    >>> logits = np.log(np.array([[0.5, 0.5], [1e-9, 1.0]], np.float32))
    >>> a, logp = categorical_sample(logits, np.array([0.9, 0.9]))
    >>> a.tolist(), np.exp(logp).round(3).tolist()
    ([0, 1], [0.5, 1.0])
    """
    if logits.shape[-1] == 2:
        return _binary_sample(logits, u)
    z = logits - np.maximum.reduce(logits, axis=-1, keepdims=True)  # ufuncs: no wrappers
    cdf = np.add.accumulate(np.exp(z), axis=-1)
    total = cdf[:, -1]
    actions = np.add.reduce(cdf < ((1.0 - u) * total)[:, None], axis=-1, dtype=np.int64)
    logp = z[np.arange(len(z)), actions] - np.log(total)
    return actions, logp


def _binary_sample(logits: np.ndarray, u: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    # categorical_sample for D == 2: cdf = (e0, e0 + e1), so the action is 1 exactly
    # when e0 < (1 - u) * total (cdf[1] == total never is).
    l0, l1 = logits[:, 0], logits[:, 1]
    m = np.maximum(l0, l1)
    z0, z1 = l0 - m, l1 - m
    e0 = np.exp(z0)
    total = e0 + np.exp(z1)
    one = e0 < (1.0 - u) * total
    return one.astype(np.int64), np.where(one, z1, z0) - np.log(total)


def categorical_mode(logits: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The most likely action per row of ``(B, D)`` logits and its log-probability.

    >>> a, logp = categorical_mode(np.array([[0.0, 1.0]], np.float32))
    >>> a.tolist(), round(float(np.exp(logp[0])), 4)
    ([1], 0.7311)
    """
    z = logits - logits.max(axis=-1, keepdims=True)
    actions = z.argmax(axis=-1)
    logp = z[np.arange(len(z)), actions] - np.log(np.exp(z).sum(axis=-1))
    return actions, logp


def gaussian_logp(actions: np.ndarray, mean: np.ndarray, log_std: np.ndarray) -> np.ndarray:
    """``log N(actions; mean, exp(log_std)^2)`` summed over the last axis, ``(B,)``.

    >>> round(float(gaussian_logp(np.zeros((1, 1)), np.zeros((1, 1)), np.zeros((1, 1))[0])[0]), 4)
    -0.9189
    """
    z = (actions - mean) * np.exp(-log_std)
    return (-0.5 * z * z - log_std - _HALF_LOG_2PI).sum(axis=-1)


def one_hot(indices: np.ndarray, n: int) -> np.ndarray:
    """``(B,)`` integer observations as ``(B, n)`` float32 one-hot rows.

    >>> one_hot(np.array([1, 0]), 3).tolist()
    [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    """
    idx = np.asarray(indices, np.int64).reshape(-1)
    out = np.zeros((len(idx), n), np.float32)
    out[np.arange(len(idx)), idx] = 1.0
    return out


__all__ = ["NUMPY_MAX_MACS", "NumpyMLP", "ParameterGuard", "SnapshotCache", "categorical_mode",
           "categorical_sample", "gaussian_logp", "max_rows", "obs_rows", "one_hot"]
