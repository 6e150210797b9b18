"""Acting without torch: numpy inference and sampling for the built-in MLP policies,
and the replica of a policy that remote rollout workers act with.

Why. A remote rollout worker only acts: one small forward per env step, a value
forward per fragment, GAE. Importing torch costs a fresh process about 1.5 s of
CPU, and on a 2-core machine the workers' imports are most of a Ray backend's
worker start-up (``benchmarks/startup.py`` times it). So for the built-in policies
(those that set ``numpy_replica = True`` in their own class body) a
:class:`~flowrl.workers.WorkerSet` builds its remote workers with
:class:`NumpyActingPolicy` replicas (:func:`acting_replica` makes the factory):

- acting, values, postprocessing and weights run in numpy, with the same maths,
  seeds and random streams as :class:`~flowrl.policies.TorchPolicy`'s numpy path,
  on batches of any size (larger ones in ``NUMPY_MAX_MACS`` chunks, so OpenBLAS
  stays on the calling thread);
- anything else (``learn_on_batch``, ``compute_gradients``, ``get_state``, an
  attribute only the real policy has) *materializes* the replica once: it imports
  torch, builds the real policy with the same arguments, hands it the current
  weights and the numpy random generators, and from then on forwards every call
  to it. Nothing a worker was asked for behaves differently; only the first such
  call pays the import.

Until its first ``set_weights`` (a WorkerSet syncs the local worker's weights to
every remote worker it starts) a replica has no weights of its own, and acting
materializes it.
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import math
import re
from typing import Any, Sequence

import gymnasium as gym
import numpy as np

from flowrl.batch import SampleBatch
from flowrl.policies.maths import discounted_returns, gae

SB = SampleBatch
_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)

#: The numpy path serves a batch only while ``rows x in x out`` of its largest layer
#: stays below this: OpenBLAS computes such products on the calling thread, where
#: larger ones start its thread pool, which competes with the sampler for the cores
#: (and spins under load). :class:`~flowrl.policies.TorchPolicy` sends larger
#: batches through torch; :class:`NumpyActingPolicy` splits them into chunks.
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
    """The most rows one numpy forward of ``mlps`` takes (``NUMPY_MAX_MACS``).

    >>> max_rows(NumpyMLP([(np.zeros((64, 64), np.float32), None, None)]), None)
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
    :class:`~flowrl.policies.TorchPolicy` and :class:`NumpyActingPolicy`."""

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


#: What a replica does itself; everything else materializes it. A class that sets
#: ``numpy_replica = True`` must keep TorchPolicy's own versions of these.
ACTING_METHODS = ("compute_actions", "value", "postprocess_trajectory",
                  "postprocess_trajectories", "_with_advantages", "get_weights", "set_weights")
#: The constructor arguments a replica reads (the rest it keeps for materializing).
_SETTINGS = ("gamma", "lambda_", "numpy_inference")


@dataclasses.dataclass(frozen=True)
class NumpyActing:
    """A policy factory (``factory(obs_space, act_space, **config)``) that builds a
    :class:`NumpyActingPolicy` replica of the class ``module:qualname``; made by
    :func:`acting_replica`. It pickles without the class, so unpickling it in a
    worker process imports no torch."""

    module: str
    qualname: str
    use_critic: bool
    defaults: tuple  # ((setting, default), ...) of the class's constructor

    def __call__(self, observation_space: gym.Space, action_space: gym.Space,
                 **kwargs: Any) -> "NumpyActingPolicy":
        return NumpyActingPolicy(self, observation_space, action_space, kwargs)

    def policy_class(self) -> type:
        """The class replicated (importing it imports torch)."""
        obj: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return obj


def acting_replica(policy_class: Any) -> NumpyActing | None:
    """The replica factory for ``policy_class``, or None when it does not opt in.

    A class opts in with ``numpy_replica = True`` in its own body (subclasses do not
    inherit it: a subclass may act differently) and must keep
    :class:`~flowrl.policies.TorchPolicy`'s acting, postprocessing and weight
    methods and pass ``gamma``, ``lambda_``, ``hidden_sizes`` and
    ``numpy_inference`` through to it. With ``numpy_inference=False`` in the config
    the worker builds the real policy (see :class:`NumpyActingPolicy`).

    >>> from flowrl.policies import PPOPolicy, TorchPolicy
    >>> acting_replica(PPOPolicy).qualname, acting_replica(TorchPolicy)
    ('PPOPolicy', None)
    """
    if not isinstance(policy_class, type) or vars(policy_class).get("numpy_replica") is not True:
        return None
    from flowrl.policies.torch_policy import TorchPolicy  # the class's module imported it
    if not issubclass(policy_class, TorchPolicy) or any(
            getattr(policy_class, name) is not getattr(TorchPolicy, name)
            for name in ACTING_METHODS):
        return None
    params = inspect.signature(TorchPolicy.__init__).parameters
    own = inspect.signature(policy_class.__init__).parameters
    defaults = tuple((name, (own.get(name) or params[name]).default) for name in _SETTINGS)
    return NumpyActing(policy_class.__module__, policy_class.__qualname__,
                       bool(policy_class.use_critic), defaults)


#: Attributes a replica keeps itself; setting any other one materializes it.
_OWN = frozenset({"_factory", "_kwargs", "_real", "observation_space", "action_space", "seed",
                  "gamma", "lambda_", "numpy_inference", "use_critic", "_np_rng",
                  "_action_rng", "_obs_dim", "_discrete_obs", "_action_shape", "_gaussian",
                  "_num_outputs", "_weights", "_pi", "_vf", "_log_std", "_max_rows"})
_LAYER_KEY = re.compile(r"(pi|vf)\.(\d+)\.(weight|bias)$")


class NumpyActingPolicy(Postprocessing):
    """A replica of a built-in policy that acts in numpy; see the module docstring.

    Built by a :class:`NumpyActing` factory with the real class's constructor
    arguments, which it keeps to build the real policy when asked for more than
    acting (:meth:`materialize`). Its random generators are the real policy's
    (``seed``: ``default_rng(seed)`` for minibatch shuffles, ``default_rng([seed,
    1])`` for actions) and go to the real policy when it materializes; unlike the
    real policy it samples every batch, however large, from the numpy generator.

    >>> from flowrl.policies import PPOPolicy
    >>> box, two = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)
    >>> real = PPOPolicy(box, two, seed=0)
    >>> replica = acting_replica(PPOPolicy)(box, two, seed=0)
    >>> replica.set_weights(real.get_weights())
    >>> obs = np.ones((4, 3), np.float32)
    >>> bool((replica.compute_actions(obs)[0] == real.compute_actions(obs)[0]).all())
    True
    >>> replica.materialized, round(replica.kl_coeff, 2), replica.materialized
    (False, 0.2, True)
    """

    def __init__(self, factory: NumpyActing, observation_space: gym.Space,
                 action_space: gym.Space, kwargs: dict[str, Any]):
        setting = {**dict(factory.defaults), **{k: kwargs[k] for k in _SETTINGS if k in kwargs}}
        object.__setattr__(self, "_real", None)
        self._factory, self._kwargs = factory, dict(kwargs)
        self.observation_space, self.action_space = observation_space, action_space
        self.seed = seed = kwargs.get("seed")
        self.gamma, self.lambda_ = setting["gamma"], setting["lambda_"]
        self.numpy_inference = bool(setting["numpy_inference"])
        self.use_critic = factory.use_critic
        self._np_rng = np.random.default_rng(seed)
        self._action_rng = np.random.default_rng(None if seed is None else [seed, 1])
        self._discrete_obs = isinstance(observation_space, gym.spaces.Discrete)
        self._obs_dim = (int(observation_space.n) if self._discrete_obs
                         else int(np.prod(observation_space.shape or ())))
        self._gaussian = isinstance(action_space, gym.spaces.Box)
        self._action_shape = tuple(action_space.shape) if self._gaussian else ()
        self._num_outputs = (int(np.prod(self._action_shape)) if self._gaussian
                             else int(getattr(action_space, "n", 0)))
        self._weights = self._pi = self._vf = self._log_std = None
        self._max_rows = 0
        if not self.numpy_inference or not isinstance(
                observation_space, (gym.spaces.Box, gym.spaces.Discrete)) or not isinstance(
                action_space, (gym.spaces.Box, gym.spaces.Discrete)):
            self.materialize()  # torch acting asked for, or the real class reports the space

    # -- the real policy ---------------------------------------------------------
    @property
    def materialized(self) -> bool:
        """Whether the real policy has been built (every call now goes to it)."""
        return self._real is not None

    def materialize(self) -> Any:
        """The real policy, built on first call: the class with this replica's
        constructor arguments, then this replica's weights (if it has any) and its
        numpy random generators."""
        real = self._real
        if real is None:
            real = self._factory.policy_class()(self.observation_space, self.action_space,
                                                **self._kwargs)
            if self._weights is not None:
                real.set_weights(self._weights)
            real._np_rng, real._action_rng = self._np_rng, self._action_rng
            # as set on the replica
            real.gamma, real.lambda_ = self.gamma, self.lambda_
            real.numpy_inference = self.numpy_inference
            object.__setattr__(self, "_real", real)
        return real

    def __getattr__(self, name: str) -> Any:
        # Only reached for what a replica does not have (e.g. learn_on_batch, kl_coeff).
        if name.startswith("__") or name in _OWN:
            raise AttributeError(name)
        return getattr(self.materialize(), name)

    def __setattr__(self, name: str, value: Any) -> None:
        # Own attributes stay here (and reach the real policy too, once there is
        # one); any other one is the real policy's.
        real = self._real
        if real is not None:
            setattr(real, name, value)
        if name in _OWN:
            object.__setattr__(self, name, value)
        elif real is None:
            setattr(self.materialize(), name, value)

    # -- acting ------------------------------------------------------------------
    def _forward(self, mlp: NumpyMLP, x: np.ndarray) -> np.ndarray:
        m = self._max_rows
        if len(x) <= m:
            return mlp(x)
        return np.concatenate([mlp(x[i:i + m]) for i in range(0, len(x), m)])

    def compute_actions(self, obs_batch, explore: bool = True, *,
                        vf_preds: bool = True) -> tuple[np.ndarray, dict]:
        """As :meth:`flowrl.policies.TorchPolicy.compute_actions`, in numpy."""
        if self._real is not None or self._pi is None or not self.numpy_inference:
            return self.materialize().compute_actions(obs_batch, explore, vf_preds=vf_preds)
        x = obs_batch
        if not (type(x) is np.ndarray and x.dtype == np.float32 and x.ndim == 2
                and x.shape[1] == self._obs_dim and not self._discrete_obs):
            x = obs_rows(x, self._obs_dim, self._discrete_obs)
        actions, extra = act(self._forward(self._pi, x), self._log_std, explore,
                             self._action_rng, self._action_shape)
        if vf_preds:
            extra[SB.VF_PREDS] = self._values(x)
        return actions, extra

    def _values(self, x: np.ndarray) -> np.ndarray:
        if self._vf is None:
            return np.zeros(len(x), np.float32)
        return self._forward(self._vf, x)[:, 0]

    def value(self, obs_batch) -> np.ndarray:
        """``V(s)`` for a batch of observations, shape ``(B,)`` (zeros without a critic)."""
        if self._real is not None or self._pi is None or not self.numpy_inference:
            return self.materialize().value(obs_batch)
        return self._values(obs_rows(obs_batch, self._obs_dim, self._discrete_obs))

    # -- weights -----------------------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        """Model parameters as ``{name: numpy array}`` (copies), named as the real
        policy's ``state_dict``."""
        if self._real is not None or self._weights is None:
            return self.materialize().get_weights()
        return {k: v.copy() for k, v in self._weights.items()}

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Load weights from ``get_weights`` of the real class. Weights this replica
        cannot lay out as its MLPs go to the real policy, which names what is wrong."""
        if self._real is None:
            parsed = self._layout(weights)
            if parsed is not None:
                self._weights, (self._pi, self._vf, self._log_std) = parsed
                self._max_rows = max_rows(self._pi, self._vf)
                return
        self.materialize().set_weights(weights)

    def _layout(self, weights: dict[str, np.ndarray]):
        """``(weights as float32 copies, (pi, vf, log_std))``, or None when the names or
        shapes are not those of the built-in model for these spaces."""
        own = {k: np.array(v, np.float32) for k, v in weights.items()}
        if self._weights is not None and (own.keys() != self._weights.keys() or any(
                v.shape != self._weights[k].shape for k, v in own.items())):
            return None
        layers: dict[str, dict[int, dict[str, np.ndarray]]] = {"pi": {}, "vf": {}}
        for key, value in own.items():
            match = _LAYER_KEY.match(key)
            if match is not None:
                net, index, kind = match.groups()
                layers[net].setdefault(int(index), {})[kind] = value
            elif key != "log_std":
                return None
        log_std = own.get("log_std")
        if (log_std is not None) != self._gaussian or bool(layers["vf"]) != self.use_critic:
            return None
        pi = _mlp_of(layers["pi"], self._obs_dim, self._num_outputs)
        vf = _mlp_of(layers["vf"], self._obs_dim, 1) if self.use_critic else None
        if pi is None or (self.use_critic and vf is None) or (
                log_std is not None and log_std.shape != (self._num_outputs,)):
            return None
        return own, (pi, vf, log_std)


def _mlp_of(layers: dict[int, dict[str, np.ndarray]], inputs: int, outputs: int) -> NumpyMLP | None:
    """The built-in model's MLP (``Linear`` at even indices with ``tanh`` between)
    from ``{index: {"weight": (out, in), "bias": (out,)}}``, or None when the
    layers do not chain from ``inputs`` to ``outputs`` that way."""
    if sorted(layers) != list(range(0, 2 * len(layers), 2)):
        return None
    out, size = [], inputs
    for i, index in enumerate(sorted(layers)):
        w, b = layers[index].get("weight"), layers[index].get("bias")
        if w is None or b is None or w.ndim != 2 or w.shape[1] != size or b.shape != w.shape[:1]:
            return None
        size = w.shape[0]
        out.append((w.T, b, np.tanh if i < len(layers) - 1 else None))
    return NumpyMLP(out) if out and size == outputs else None


__all__ = ["NUMPY_MAX_MACS", "NumpyMLP", "NumpyActing", "NumpyActingPolicy", "Postprocessing",
           "acting_replica", "act", "categorical_mode", "categorical_sample", "gaussian_logp",
           "max_rows", "obs_rows", "one_hot"]
