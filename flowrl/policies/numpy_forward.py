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
seeded ``numpy.random.Generator`` makes them reproducible. They and
:class:`NumpyMLP` live in :mod:`flowrl.policies.numpy_acting`, which imports no
torch (remote rollout workers act with it alone); this module adds what watches a
torch model and re-exports them.
"""

from __future__ import annotations

import operator

import torch
from torch import nn

# The torch-free parts live in numpy_acting (remote rollout workers use them
# without importing torch); they are re-exported here.
from flowrl.policies.numpy_acting import (NUMPY_MAX_MACS, NumpyMLP, categorical_mode,
                                          categorical_sample, gaussian_logp, in_chunks,
                                          max_rows, obs_rows, one_hot)


class ParameterGuard:
    """Notices when numpy views of ``module``'s parameters may have gone stale.

    Records every submodule and parameter object under ``module`` and each
    parameter's data pointer; :meth:`intact` is False once any of them was
    replaced or a parameter's memory moved. In-place updates keep it True (the
    views see them). Submodules in ``skip`` are recorded only as their parent's
    entry (replacing one is noticed), not their contents: a guard for a use
    that does not read them, cheaper to check.

    It reads each module's ``_modules`` and ``_parameters`` dicts, which are
    private to torch (a public walk per acting call would cost more than the
    forward it guards); the test suite fails loudly, naming this class, if torch
    stops keeping a module's children and parameters there.

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


class SnapshotCache:
    """A policy's numpy snapshot of its model, rebuilt only when stale.

    ``build(model)`` makes a snapshot (an object with ``guard`` (a
    :class:`ParameterGuard` of ``model``) and ``max_rows``) or returns None for a
    model numpy cannot run; such a model is remembered so it is not inspected
    again. :meth:`get` gives the snapshot, or None for the torch path. A snapshot may carry further guards for uses that read only
    part of the model (see ``part``).
    """

    __slots__ = ("build", "snap", "unsupported")

    def __init__(self, build):
        self.build = build
        self.snap = None
        self.unsupported: nn.Module | None = None

    def get(self, model: nn.Module, part: str = "guard"):
        """The snapshot of ``model``, or None when numpy cannot run it.

        ``part`` names the snapshot's guard to check: ``"guard"`` (the whole model)
        or a narrower one the snapshot defines; a stale one rebuilds the snapshot.
        A snapshot serves every batch size (in ``max_rows`` chunks, see
        :func:`~flowrl.policies.numpy_acting.in_chunks`).
        """
        snap = self.snap
        if snap is None or snap.guard.module is not model or not getattr(snap, part).intact():
            if model is self.unsupported:
                return None
            snap = self.snap = self.build(model)
            if snap is None:
                self.unsupported = model
                return None
        return snap


__all__ = ["NUMPY_MAX_MACS", "NumpyMLP", "ParameterGuard", "SnapshotCache", "categorical_mode",
           "categorical_sample", "gaussian_logp", "in_chunks", "max_rows", "obs_rows",
           "one_hot"]
