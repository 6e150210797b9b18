"""Acting in numpy, without torch: the built-in MLPs' forward, action sampling from
their outputs, and GAE postprocessing.

:class:`~flowrl.policies.TorchPolicy` acts through these (its
:mod:`~flowrl.policies.numpy_forward` snapshot is views of its torch parameters)
and inherits :class:`Postprocessing`; the torch-free replicas remote rollout
workers act with (:mod:`flowrl.policies.replica`) use nothing else. Importing
this module imports no torch.

Sampling functions are pure and take their random draws as arguments, so that a
seeded ``numpy.random.Generator`` makes them reproducible.
"""

from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from flowrl.batch import SampleBatch
from flowrl.policies.maths import discounted_returns, gae

SB = SampleBatch
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

#: One numpy forward takes at most as many rows as keep ``rows x in x out`` of its
#: largest layer below this (:func:`max_rows`): OpenBLAS computes such products on
#: the calling thread, where larger ones start its thread pool, which competes with
#: the sampler for the cores (and spins under load). Larger batches run in chunks
#: of that many rows (:func:`in_chunks`), in the real policies and their replicas
#: alike, so the results never depend on which of them acts.
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
    whole model with a :class:`~flowrl.policies.numpy_forward.ParameterGuard` and
    rebuild (:class:`~flowrl.policies.numpy_forward.SnapshotCache`).
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
    the batch size, so the real policy and its replica agree bit for bit.

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


class Postprocessing:
    """Advantages and value targets for trajectories, in numpy (a mixin: the class
    sets ``use_critic``, ``gamma`` and ``lambda_``). Shared by
    :class:`~flowrl.policies.TorchPolicy` and
    :class:`~flowrl.policies.replica.NumpyActingPolicy`."""

    use_critic = True
    gamma: float
    lambda_: float

    def postprocess_trajectory(self, batch: SampleBatch, last_value: float = 0.0) -> SampleBatch:
        """A new batch with ``advantages`` and ``value_targets`` for one trajectory.

        ``batch`` holds one env's (one agent's) consecutive steps in time order; it
        may span several episodes, each ending at a ``terminateds``/``truncateds``
        row. Truncated rows bootstrap from the ``bootstrap_value`` column
        (``V(final obs)``); ``last_value`` is ``V(s_T)`` after the last row when the
        fragment cut an episode (0 when the last row ends its episode). With a
        critic this is GAE(γ, λ); without one, advantages are discounted returns.
        """
        term = batch[SB.TERMINATEDS]
        trunc = batch.get(SB.TRUNCATEDS)
        boot = batch.get(SB.BOOTSTRAP_VALUE)
        if trunc is not None and boot is None:
            boot = np.zeros(batch.count, np.float32)
        return self._with_advantages(batch, term, last_value, trunc, boot)

    def _with_advantages(self, batch: SampleBatch, term, last_value: float, trunc,
                         boot) -> SampleBatch:
        """``batch`` plus ``advantages`` and ``value_targets``: GAE(γ, λ) with a critic,
        discounted returns without one."""
        if self.use_critic:
            adv, targets = gae(batch[SB.REWARDS], batch[SB.VF_PREDS], term, last_value,
                               gamma=self.gamma, lam=self.lambda_, truncateds=trunc,
                               bootstrap_values=boot)
        else:
            adv = targets = discounted_returns(batch[SB.REWARDS], term, last_value,
                                               gamma=self.gamma, truncateds=trunc,
                                               bootstrap_values=boot)
        return batch.with_columns(**{SB.ADVANTAGES: adv, SB.VALUE_TARGETS: targets})

    def postprocess_trajectories(self, batch: SampleBatch, ends: Sequence[int],
                                 last_values: Sequence[float]) -> SampleBatch:
        """:meth:`postprocess_trajectory` of several trajectories stored back to back.

        Trajectory ``i`` is rows ``ends[i-1]:ends[i]`` of ``batch`` (``ends`` ascending,
        the last equal to ``batch.count``), with ``last_values[i]`` its
        ``last_value``. The result equals concatenating ``postprocess_trajectory``
        of each slice; for this class it is ONE pass over all rows, a trajectory's
        end acting as a time-limit cut that bootstraps from its ``last_value``. A
        subclass that overrides :meth:`postprocess_trajectory` gets the loop.

        >>> import gymnasium as gym
        >>> from flowrl.policies import PGPolicy
        >>> p = PGPolicy(gym.spaces.Box(-1, 1, (1,)), gym.spaces.Discrete(2), gamma=0.5)
        >>> b = SampleBatch(rewards=np.ones(4, np.float32), terminateds=np.zeros(4, bool))
        >>> p.postprocess_trajectories(b, [2, 4], [2.0, 0.0])["advantages"].tolist()
        [2.0, 2.0, 1.5, 1.0]
        """
        ends = np.asarray(ends, np.int64)
        if type(self).postprocess_trajectory is not Postprocessing.postprocess_trajectory:
            starts = np.r_[0, ends[:-1]]
            parts = [self.postprocess_trajectory(batch.slice(s, e), last_value=float(v))
                     for s, e, v in zip(starts.tolist(), ends.tolist(), last_values)]
            return parts[0] if len(parts) == 1 else SampleBatch.concat_samples(parts)
        n = batch.count
        term = np.asarray(batch[SB.TERMINATEDS], bool)
        trunc = batch.get(SB.TRUNCATEDS)
        trunc = np.zeros(n, bool) if trunc is None else np.asarray(trunc, bool)
        boot = batch.get(SB.BOOTSTRAP_VALUE)
        boot = np.zeros(n, np.float32) if boot is None else np.asarray(boot, np.float32)
        cut = np.zeros(n, bool)
        cut[ends - 1] = True
        cut &= ~(term | trunc)
        boot = boot.copy()
        boot[ends - 1] = np.where(cut[ends - 1], np.asarray(last_values, np.float32),
                                  boot[ends - 1])
        return self._with_advantages(batch, term, 0.0, trunc | cut, boot)


__all__ = ["NUMPY_MAX_MACS", "NumpyMLP", "Postprocessing", "act", "categorical_mode",
           "categorical_sample", "gaussian_logp", "in_chunks", "max_rows", "obs_rows",
           "one_hot"]
