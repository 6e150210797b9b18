"""Acting in numpy: the built-in MLPs' forward over views of their torch
parameters, action sampling from their outputs.

Acting runs one small forward per env step, where a torch call's fixed cost
(dispatch, autograd bookkeeping, tensor wrapping) outweighs the arithmetic. For
the built-in models (the MLP of :class:`~flowrl.models.FullyConnectedNetwork`
and :class:`~flowrl.policies.dqn.QNetwork`: ``nn.Sequential`` stacks of
``nn.Linear`` with ``nn.Tanh``/``nn.ReLU``) :class:`NumpyMLP` computes the same
float32 maths with numpy. It sits behind the policies' acting interface
(:meth:`~flowrl.policies.TorchPolicy.compute_actions`,
:meth:`~flowrl.policies.TorchPolicy.value`, :class:`~flowrl.policies.DQNPolicy`'s
Q-values): a policy asks its :class:`SnapshotCache` for a snapshot
(:class:`NumpyActorCritic` for the actor-critic MLP) and acts through torch when
there is none (``numpy_inference=False``, any other model). ``benchmarks/sampling.py``
measures what it saves.

Staleness. A :class:`NumpyMLP` holds numpy *views* of the torch parameters'
memory, not copies: every in-place update (optimizer steps, ``load_state_dict`` in
``set_weights``/``set_state``, ``copy_``) is visible at once. What a view cannot
follow is a parameter replaced by another tensor or moved to other memory
(``param.data = ...``, ``module.double()``, a new ``nn.Parameter``, a device
move); a :class:`ParameterGuard` over the whole model detects each of these by
identity and data pointer, and :class:`SnapshotCache` rebuilds the snapshot, or
falls back to torch when the model no longer qualifies.

Sampling functions are pure and take their random draws as arguments, so that a
seeded ``numpy.random.Generator`` makes them reproducible.
"""

from __future__ import annotations

import math
import operator

import numpy as np
import torch
from torch import nn

from flowrl.batch import SampleBatch
from flowrl.models.fcnet import FullyConnectedNetwork

SB = SampleBatch
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

#: One numpy forward takes at most as many rows as keep ``rows x in x out`` of its
#: largest layer below this (:func:`max_rows`): OpenBLAS computes such products on
#: the calling thread, where larger ones start its thread pool, which competes with
#: the sampler for the cores (and spins under load). Larger batches run in chunks
#: of that many rows (:func:`in_chunks`), so the results never depend on how a
#: batch was split.
NUMPY_MAX_MACS = 1 << 18


class NumpyMLP:
    """The forward of an MLP in numpy: ``layers`` of ``(w (in, out) or None, bias or
    None, activation or None)``, an activation applied in place after its matmul.

    :meth:`build` snapshots an ``nn.Sequential`` of ``nn.Linear`` and
    ``nn.Tanh``/``nn.ReLU`` layers as views of its parameters (``None`` for
    anything else: another layer type, a subclass of ``nn.Sequential``, parameters
    that are not float32 CPU tensors). Calling it maps ``(B, in)`` float32 to
    ``(B, out)`` float32.

    >>> import torch
    >>> seq = torch.nn.Sequential(torch.nn.Linear(3, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    >>> f = NumpyMLP.build(seq)
    >>> x = np.ones((2, 3), np.float32)
    >>> bool(np.allclose(f(x), seq(torch.ones(2, 3)).detach().numpy(), atol=1e-6))
    True
    >>> with torch.no_grad():
    ...     _ = seq[0].bias.add_(1.0)       # in place: the views see it
    >>> bool(np.allclose(f(x), seq(torch.ones(2, 3)).detach().numpy(), atol=1e-6))
    True

    Its views cannot follow a parameter that is replaced; the policies watch their
    whole model with a :class:`ParameterGuard` and rebuild
    (:class:`SnapshotCache`).
    """

    __slots__ = ("_layers", "macs_per_row")

    def __init__(self, layers: list[tuple]):
        self._layers = layers
        #: Multiply-adds per row of the largest layer (see ``NUMPY_MAX_MACS``).
        self.macs_per_row = max((w.size for w, _, _ in layers if w is not None), default=0)

    @classmethod
    def build(cls, seq) -> "NumpyMLP | None":
        """A snapshot of the torch module ``seq``, or ``None`` when it is not a plain MLP."""
        import torch
        from torch import nn
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
            elif type(m) in (nn.Tanh, nn.ReLU):
                act = np.tanh if type(m) is nn.Tanh else relu
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
    """The most rows one numpy forward of ``mlps`` takes (``NUMPY_MAX_MACS``), at
    least one.

    >>> max_rows(NumpyMLP([(np.zeros((64, 64), np.float32), None, None)]), None)
    63
    >>> max_rows(NumpyMLP([(np.zeros((512, 512), np.float32), None, None)]))
    1
    """
    macs = max([1] + [m.macs_per_row for m in mlps if m is not None])
    return max(1, (NUMPY_MAX_MACS - 1) // macs)  # a model wider than the budget: a row


def in_chunks(forward, x: np.ndarray, rows: int) -> np.ndarray:
    """``forward(x)`` computed ``rows`` rows at a time and concatenated: how every
    numpy forward runs, whatever the batch size (see ``NUMPY_MAX_MACS``). A row's
    result depends only on where the chunk boundaries fall, which depend only on
    the batch size.

    >>> in_chunks(lambda a: a * 2, np.arange(5.0)[:, None], 2)[:, 0].tolist()
    [0.0, 2.0, 4.0, 6.0, 8.0]
    """
    if len(x) <= rows:
        return forward(x)
    return np.concatenate([forward(x[i:i + rows]) for i in range(0, len(x), rows)])


def obs_rows(obs, obs_dim: int, discrete: bool) -> np.ndarray:
    """A batch of observations as ``(B, obs_dim)`` float32 rows: one-hot for a
    ``Discrete`` observation space (``discrete``), flattened otherwise.

    Rows that already are a ``(B, obs_dim)`` float32 array come back as they are
    (acting calls this once per env step).

    >>> obs_rows([[1, 2], [3, 4]], 2, False).dtype, obs_rows([1], 3, True).tolist()
    (dtype('float32'), [[0.0, 1.0, 0.0]])
    """
    if (type(obs) is np.ndarray and obs.dtype == np.float32 and obs.ndim == 2
            and obs.shape[1] == obs_dim and not discrete):
        return obs
    obs = np.asarray(obs)
    if discrete:
        return one_hot(obs, obs_dim)
    return np.asarray(obs.reshape(len(obs), obs_dim), dtype=np.float32)


def relu(h: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
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


def squashed_gaussian_act(inputs: np.ndarray, explore: bool, rng: np.random.Generator,
                          log_std_bounds: tuple[float, float]) -> tuple[np.ndarray, np.ndarray]:
    """Unit-box actions ``(B, D)`` and their log-densities ``(B,)`` of the squashed
    Gaussian with ``(B, 2D)`` ``inputs`` (means, then log standard deviations
    clipped to ``log_std_bounds``), the numpy twin of
    :class:`~flowrl.policies.distributions.SquashedGaussian`: ``a = tanh(u)`` with
    ``u = mean + std · standard_normal((B, D))`` (one draw from ``rng``), or
    ``u = mean`` without ``explore``; ``log π(a) = log N(u) - Σ log(1 - tanh(u)²)``.

    >>> a, logp = squashed_gaussian_act(np.zeros((3, 4), np.float32), True,
    ...                                 np.random.default_rng(0), (-5.0, 2.0))
    >>> a.shape, logp.shape, bool((np.abs(a) < 1).all())
    ((3, 2), (3,), True)
    """
    mean, log_std = np.split(inputs, 2, axis=1)
    log_std = np.clip(log_std, *log_std_bounds)
    u = mean + np.exp(log_std) * rng.standard_normal(mean.shape, dtype=np.float32) \
        if explore else mean
    log_det = 2.0 * (math.log(2.0) - u - np.logaddexp(0.0, -2.0 * u))
    logp = gaussian_logp(u, mean, log_std) - log_det.sum(axis=-1)
    return np.tanh(u), logp.astype(np.float32)


def one_hot(indices: np.ndarray, n: int) -> np.ndarray:
    """``(B,)`` integer observations as ``(B, n)`` float32 one-hot rows.

    >>> one_hot(np.array([1, 0]), 3).tolist()
    [[0.0, 1.0, 0.0], [1.0, 0.0, 0.0]]
    """
    idx = np.asarray(indices, np.int64).reshape(-1)
    out = np.zeros((len(idx), n), np.float32)
    out[np.arange(len(idx)), idx] = 1.0
    return out


def act(out: np.ndarray, log_std: np.ndarray | None, explore: bool, rng: np.random.Generator,
        action_shape: tuple) -> tuple[np.ndarray, dict]:
    """Actions and ``extra`` columns from the policy network's ``(B, D)`` output
    ``out``: a diagonal Gaussian with mean ``out`` and state-independent ``log_std``
    (actions reshaped to ``(B, *action_shape)``), or categorical logits when
    ``log_std`` is None. ``explore=False`` takes the mode. One draw from ``rng``
    per call: ``standard_normal((B, D))`` or ``random(B)``.

    >>> a, extra = act(np.zeros((2, 2), np.float32), None, True, np.random.default_rng(0), ())
    >>> a.shape, sorted(extra)
    ((2,), ['action_dist_inputs', 'action_logp'])
    """
    if log_std is not None:
        std_in = np.broadcast_to(log_std, out.shape)
        inputs = np.concatenate([out, std_in], axis=1)
        if explore:
            noise = rng.standard_normal(out.shape, dtype=np.float32)
            actions = out + np.exp(std_in) * noise
        else:
            actions = out.copy()
        logp = gaussian_logp(actions, out, std_in)
        actions = actions.reshape((len(out), *action_shape))
    else:
        inputs = out
        actions, logp = (categorical_sample(out, rng.random(len(out))) if explore
                         else categorical_mode(out))
    return actions, {SB.ACTION_LOGP: logp, SB.ACTION_DIST_INPUTS: inputs}


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


class NumpyActorCritic:
    """Numpy views of the built-in MLP (:class:`~flowrl.models.FullyConnectedNetwork`
    with separate ``pi`` and ``vf``): ``pi``, ``vf`` (or None), ``log_std``.

    ``guard`` watches the whole model; ``acting_guard`` all but the value network's
    contents (what acting without ``vf_preds`` reads).
    """

    __slots__ = ("guard", "acting_guard", "pi", "vf", "log_std", "max_rows")

    @classmethod
    def build(cls, model: nn.Module) -> "NumpyActorCritic | None":
        if type(model) is not FullyConnectedNetwork or model.features_only \
                or model.vf_share_layers:
            return None
        pi = NumpyMLP.build(model.pi)
        vf = None if model.vf is None else NumpyMLP.build(model.vf)
        ls = model.log_std
        if pi is None or (model.vf is not None and vf is None) or (
                ls is not None and (ls.dtype != torch.float32 or ls.device.type != "cpu")):
            return None
        self = cls()
        self.guard, self.pi, self.vf = ParameterGuard(model), pi, vf
        self.acting_guard = (self.guard if model.vf is None
                             else ParameterGuard(model, skip=(model.vf,)))
        self.log_std = None if ls is None else ls.detach().numpy()
        self.max_rows = max_rows(pi, vf)
        return self

    def compute_actions(self, x: np.ndarray, explore: bool, rng: np.random.Generator,
                        action_shape: tuple, vf_preds: bool) -> tuple[np.ndarray, dict]:
        """``(actions, extra)`` for observation rows ``x`` (:func:`obs_rows`), as
        :meth:`flowrl.policies.TorchPolicy.compute_actions` returns them."""
        actions, extra = act(in_chunks(self.pi, x, self.max_rows), self.log_std, explore,
                             rng, action_shape)
        if vf_preds:
            extra[SB.VF_PREDS] = self.values(x)
        return actions, extra

    def values(self, x: np.ndarray) -> np.ndarray:
        """``V(s)`` of observation rows ``x``, shape ``(B,)`` (zeros without ``vf``)."""
        if self.vf is None:
            return np.zeros(len(x), np.float32)
        return in_chunks(self.vf, x, self.max_rows)[:, 0]


__all__ = ["NUMPY_MAX_MACS", "NumpyMLP", "NumpyActorCritic", "ParameterGuard", "SnapshotCache",
           "act", "categorical_mode", "categorical_sample", "gaussian_logp", "in_chunks",
           "max_rows", "obs_rows", "one_hot"]
