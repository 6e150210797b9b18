"""Torch actor-critic policy: acting, postprocessing, learning, weights and state.

:class:`TorchPolicy` holds the model (:attr:`TorchPolicy.model`, built by the
catalog of :mod:`flowrl.models` from a ``ModelConfig``: by default separate
``tanh`` MLPs for the policy and the value function), an Adam optimizer and a
seeded ``torch.Generator`` for action sampling. Algorithms subclass it and implement :meth:`TorchPolicy.loss`
(:class:`~flowrl.policies.pg.PGPolicy`, :class:`~flowrl.policies.a2c.A2CPolicy`,
:class:`~flowrl.policies.ppo.PPOPolicy`); every hyperparameter is an explicit
keyword argument.

Spaces: observations may be ``Box`` (flattened, or an image for a CNN) or
``Discrete`` (one-hot); actions ``Discrete`` (categorical), ``MultiDiscrete``
(independent categoricals) or ``Box`` (diagonal Gaussian, sampled unclipped; the
rollout worker clips to the bounds for the env).

Weights (:meth:`get_weights`) are a dict of parameter name to numpy array; state
(:meth:`get_state`) adds the optimizer state and whatever a subclass keeps (e.g.
PPO's KL coefficient), all as numpy/plain Python so it pickles and checkpoints.

Acting (:meth:`TorchPolicy.compute_actions`, :meth:`TorchPolicy.value`) runs the
built-in MLP in numpy at every batch size (:mod:`flowrl.policies.numpy_acting`)
unless ``numpy_inference=False``; other models act through torch; learning always
runs in torch. Postprocessing (GAE) is numpy, from
:class:`~flowrl.policies.postprocessing.Postprocessing`.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Callable, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl.batch import SampleBatch
from flowrl.callbacks import learn_callbacks
from flowrl.errors import ConfigError
from flowrl.models.base import TorchModelV2
from flowrl.models.catalog import get_model, is_image, is_recurrent, model_observation_space
from flowrl.models.config import model_config
from flowrl.models.fcnet import FullyConnectedNetwork
from flowrl.models.recurrent import LSTMWrapper
from flowrl.models.sequences import (SEQ_BOOTSTRAP_VALUE, SEQ_LENS, SEQ_MASK, SEQ_WEIGHTS,
                                     cut_sequences, next_values, pad_sequences, sequence_mask)
from flowrl.policies.asp import SignificantUpdates
from flowrl.policies.distributions import distribution_for
from flowrl.policies.numpy_acting import NumpyActorCritic, SnapshotCache, obs_rows
from flowrl.policies.postprocessing import Postprocessing
from flowrl.policies.sgd import minibatch_sgd

SB = SampleBatch


def _undecorated(fn: Callable) -> Callable:
    """``fn`` without the wrapper torch put around it (``functools.wraps`` keeps the
    original as ``__wrapped__``), or ``fn`` itself when there is none."""
    return getattr(fn, "__wrapped__", fn)


class Adam(torch.optim.Adam):
    """``torch.optim.Adam`` whose parameter groups, ``step``, ``zero_grad``,
    ``state_dict`` and ``load_state_dict`` skip the wrappers that keep TorchDynamo
    out of them.

    Why: those wrappers import ``torch._dynamo`` on their first call, a large share
    of a fresh process's start-up on the embedded backend (``benchmarks/startup.py``
    measures it, ``startup-adam.log`` in its results has the saved run). flowrl
    never compiles an optimizer, so it calls the wrapped methods
    themselves: the same code, updates and state as ``torch.optim.Adam``
    (the test suite checks both bit for bit and that no ``torch._dynamo`` is
    imported; it fails loudly if a torch release moves the wrappers). The state
    methods matter for checkpoints: without them a process's first save or restore
    imported ``torch._dynamo``, on the driver and on every Ray worker
    (``benchmarks/startup.py`` times the first checkpoint). ``step`` keeps the
    no-grad mode its wrapper set. Everything else (LR schedulers, ``param_groups``,
    ``defaults``) is ``torch.optim.Adam``'s own.
    """

    def add_param_group(self, param_group: dict[str, Any]) -> None:
        _undecorated(torch.optim.Optimizer.add_param_group)(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _undecorated(torch.optim.Optimizer.zero_grad)(self, set_to_none)

    def step(self, closure: Callable[[], Any] | None = None) -> Any:
        with torch.no_grad():
            return _undecorated(torch.optim.Adam.step)(self, closure)

    def state_dict(self) -> dict[str, Any]:
        return _undecorated(torch.optim.Optimizer.state_dict)(self)

    def load_state_dict(self, state_dict: dict[str, Any]) -> None:
        _undecorated(torch.optim.Optimizer.load_state_dict)(self, state_dict)


def make_adam(params, lr: float, eps: float = 1e-8) -> torch.optim.Adam:
    """The built-in policies' optimizer: :class:`Adam` (a ``torch.optim.Adam``) with
    ``lr=lr, eps=eps, fused=True`` (betas ``(0.9, 0.999)``; ``fused`` is a public
    constructor flag, valid on CPU as on GPU: one kernel updates every parameter
    instead of a loop over them; ``benchmarks/profile_ppo.py`` splits an
    iteration's time into SGD and the rest).

    >>> opt = make_adam(nn.Linear(2, 1).parameters(), 0.01)
    >>> isinstance(opt, torch.optim.Adam), opt.defaults["lr"], opt.defaults["fused"]
    (True, 0.01, True)
    """
    return Adam(params, lr=lr, eps=eps, fused=True)


def to_numpy_tree(x: Any) -> Any:
    """``x`` (an optimizer's ``state_dict()``, say) with every tensor copied to a numpy
    array, inside dicts, lists and tuples; anything else as it is.

    >>> to_numpy_tree({"step": torch.tensor(2.0), "betas": (0.9, 0.99)})
    {'step': array(2., dtype=float32), 'betas': (0.9, 0.99)}
    """
    if isinstance(x, torch.Tensor):
        return x.detach().cpu().numpy().copy()
    if isinstance(x, dict):
        return {k: to_numpy_tree(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(to_numpy_tree(v) for v in x)
    return x


def module_weights(module: nn.Module) -> dict[str, np.ndarray]:
    """``module``'s state as ``{name: numpy array}`` (copies): a policy's weights.

    >>> sorted(module_weights(nn.Linear(2, 1)))
    ['bias', 'weight']
    """
    return {k: v.detach().numpy().copy() for k, v in module.state_dict().items()}


def load_weights(module: nn.Module, weights: dict[str, Any], where: str) -> None:
    """Load :func:`module_weights` of a module of the same shapes into ``module``; a
    ConfigError naming ``where`` for missing, unexpected or misshapen entries.

    >>> load_weights(nn.Linear(2, 1), {"weight": np.zeros((1, 3))}, "P.set_weights")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: P.set_weights: missing ['bias'], unexpected []; weights come from another model
    """
    own = module.state_dict()
    missing, extra = sorted(set(own) - set(weights)), sorted(set(weights) - set(own))
    if missing or extra:
        raise ConfigError(f"{where}: missing {missing}, unexpected {extra}; weights come "
                          "from another model")
    for k, v in weights.items():
        if tuple(np.shape(v)) != tuple(own[k].shape):
            raise ConfigError(f"{where}: {k!r} has shape {np.shape(v)}, expected "
                              f"{tuple(own[k].shape)}")
    module.load_state_dict({k: torch.tensor(np.asarray(v)) for k, v in weights.items()})


def _tensor(x: Any, dtype: torch.dtype | None = None) -> torch.Tensor:
    """``x`` as a tensor: a tensor keeps its device (no round trip through numpy,
    which a CUDA or meta tensor cannot take), anything else becomes a CPU tensor.

    >>> _tensor(torch.zeros(2, device="meta"), torch.float32).device
    device(type='meta')
    >>> _tensor([1, 2], torch.float32)
    tensor([1., 2.])
    """
    if isinstance(x, torch.Tensor):
        return x if dtype is None else x.to(dtype)
    return torch.as_tensor(np.asarray(x), dtype=dtype)


def to_torch_tree(x: Any) -> Any:
    """The inverse of :func:`to_numpy_tree`: every numpy array as a CPU tensor.

    >>> to_torch_tree({"step": np.array(2.0), "betas": (0.9, 0.99)})
    {'step': tensor(2., dtype=torch.float64), 'betas': (0.9, 0.99)}
    """
    if isinstance(x, np.ndarray):
        return torch.tensor(x)
    if isinstance(x, dict):
        return {k: to_torch_tree(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return type(x)(to_torch_tree(v) for v in x)
    return x


def model_obs(obs: torch.Tensor, obs_dim: int, *, discrete: bool,
              image: bool) -> torch.Tensor:
    """An observation batch as the model takes it: ``Discrete`` indices ``(B,)``
    one-hot, float32 ``(B, obs_dim)``; images ``(B, *shape)`` in their own dtype
    (uint8 stays uint8: the CNNs scale it); other observations float32 rows
    ``(B, obs_dim)``. Torch alone, so an exported module (:class:`ActingModule`)
    computes it as acting does.

    >>> model_obs(torch.tensor([2, 0]), 3, discrete=True, image=False)
    tensor([[0., 0., 1.],
            [1., 0., 0.]])
    >>> model_obs(torch.zeros(2, 3, 2, dtype=torch.float64), 6, discrete=False, image=False).shape
    torch.Size([2, 6])
    """
    if discrete:
        return nn.functional.one_hot(obs.long().reshape(-1), obs_dim).float()
    if image:
        return obs
    return obs.reshape(obs.shape[0], obs_dim).float()


class ActingModule(nn.Module):
    """A policy's model as one module from an observation batch to what acting
    computes from it, for export (:mod:`flowrl.export`):
    ``forward(obs) -> (action_dist_inputs, value)``, or ``action_dist_inputs`` alone
    for a policy without a critic (:attr:`output_names` says which).

    ``obs`` is ``(B, *obs_shape)`` as the env gives it (float32, or uint8 frames;
    ``Discrete`` observations as int indices ``(B,)``); ``action_dist_inputs`` is
    ``(B, D)``: the logits of a ``Discrete`` action (``MultiDiscrete``: each part's,
    side by side), or a ``Box`` action's mean and log-std, concatenated; ``value``
    is ``V(s)``, ``(B,)``. It holds its own copy of the model, and gives it ``obs``
    in the model's observation shape and ``obs_flat`` as rows itself, so that a
    trace follows the batch size.
    """

    def __init__(self, model: nn.Module, obs_shape: tuple[int, ...], *, discrete: bool,
                 image: bool, critic: bool):
        super().__init__()
        self.model = model
        self.obs_shape, self.obs_dim = tuple(obs_shape), math.prod(obs_shape)
        self.discrete, self.image, self.critic = discrete, image, critic
        #: The outputs' names, in order (ONNX names them so).
        self.output_names = (("action_dist_inputs", "value") if critic
                             else ("action_dist_inputs",))

    def forward(self, obs: torch.Tensor):
        x = model_obs(obs, self.obs_dim, discrete=self.discrete, image=self.image)
        inputs = {SB.OBS: x.reshape(x.shape[0], *self.obs_shape), "obs_flat": x.flatten(1),
                  "is_training": False}
        out, _ = self.model(inputs, [], None)
        if not self.critic:
            return out
        return out, self.model.value_function()


class LoadedBatch:
    """A batch as tensors: ``copies`` holds one dict of tensors per tower (one, on
    the policy's device, without towers; towers on one device share one dict).

    Made by :meth:`TorchPolicy.load_batch`. :func:`~flowrl.policies.sgd.minibatch_sgd`
    iterates it like a SampleBatch (rows shuffled as ``SampleBatch.minibatches``
    shuffles them, gathered once per epoch; a minibatch is a contiguous view of
    that gather, or a set of row indices when made with ``rows``). Towers split a
    (mini)batch's rows among themselves: :func:`flowrl.ops.multi_gpu.tower_shards`.
    """

    def __init__(self, copies: list[dict[str, torch.Tensor]], count: int,
                 source: SampleBatch | None = None, rows: np.ndarray | None = None):
        self.copies, self.source, self.rows = copies, source, rows
        self.count = int(count if rows is None else len(rows))

    def minibatches(self, size: int, *, seed=None, shuffle: bool = True):
        """Consecutive minibatches of ``size`` rows over this batch's rows, shuffled
        with ``rng.permutation`` (``seed``: a Generator or a seed) by default.

        The rows are gathered once per call (one ``index_select`` per column and
        device, not one per minibatch); each minibatch is then a contiguous view.

        >>> lb = LoadedBatch([{"t": torch.arange(5)}], 5)
        >>> [mb.copies[0]["t"].tolist() for mb in lb.minibatches(2, shuffle=False)]
        [[0, 1], [2, 3], [4]]
        >>> sorted(torch.cat([mb.copies[0]["t"] for mb in lb.minibatches(2, seed=1)]).tolist())
        [0, 1, 2, 3, 4]
        """
        order = self.rows
        if shuffle:
            rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
            perm = rng.permutation(self.count)
            order = perm if order is None else order[perm]
        copies = self.copies
        if order is not None:
            index = torch.from_numpy(np.ascontiguousarray(order, dtype=np.int64))
            gathered: dict[int, dict[str, torch.Tensor]] = {}
            for copy_ in self.copies:  # towers on one device share one copy
                if id(copy_) not in gathered:
                    gathered[id(copy_)] = {k: v.index_select(0, index.to(v.device))
                                           for k, v in copy_.items()}
            copies = [gathered[id(copy_)] for copy_ in self.copies]
        for start in range(0, self.count, size):
            stop = min(start + size, self.count)
            yield LoadedBatch([{k: v[start:stop] for k, v in copy_.items()} for copy_ in copies],
                              stop - start)

    def tensors(self) -> dict[str, torch.Tensor]:
        """The first copy's tensors of this batch's rows (gathered when made with
        ``rows``): what one device trains on."""
        first = self.copies[0]
        if self.rows is None:
            return first
        index = torch.as_tensor(self.rows)
        return {k: v[index.to(v.device)] for k, v in first.items()}


def torch_explained_variance(values: torch.Tensor, targets: torch.Tensor,
                             weights: torch.Tensor | None = None) -> torch.Tensor:
    """:func:`~flowrl.policies.maths.explained_variance` in torch, without a sync; with
    ``weights`` (summing to 1, 0 on padding) over the weighted rows only."""
    def var(x: torch.Tensor) -> torch.Tensor:
        if weights is None:
            return x.var(unbiased=False)
        return (weights * (x - (weights * x).sum()).pow(2)).sum()

    var_y = var(targets)
    var_d = var(targets - values)
    exact = torch.where(var_d == 0, 1.0, -1.0)
    return torch.where(var_y > 0, (1.0 - var_d / var_y).clamp(min=-1.0), exact)


class TorchPolicy(Postprocessing):
    """Base torch policy; subclasses define :meth:`loss`.

    Args (keyword-only after the spaces): ``model`` (a
    :class:`~flowrl.models.ModelConfig`, a dict of its fields or hidden sizes;
    ``hidden_sizes`` is the older spelling of ``model=[...]``), ``lr`` (Adam),
    ``adam_epsilon`` (Adam's ``eps``; CleanRL's Atari PPO uses 1e-5), ``gamma``,
    ``lambda_`` (GAE), ``grad_clip`` (global norm, ``None`` for none),
    ``num_sgd_iter`` epochs of minibatch SGD of ``sgd_minibatch_size`` rows per
    :meth:`learn_on_batch` (``None``: the whole batch at once), ``seed``,
    ``numpy_inference`` (act through numpy where it reproduces the model exactly,
    the default; False forces torch: see :meth:`compute_actions`).

    The torch model is :attr:`model` (RLlib's name), built by
    :func:`flowrl.models.get_model`; a recurrent one (``use_lstm`` or a custom
    model with state) makes :attr:`is_recurrent` True: acting then takes and
    returns state per env, and learning runs on padded sequences
    (:mod:`flowrl.models.sequences`).

    :attr:`trains_on_new_obs` says whether learning reads a batch's ``new_obs``
    column (True here, as a subclass's loss may); a sampler leaves the column out of
    the batches of a policy that says False (their bootstrap values ``V(s_T)`` are
    computed on the worker, in ``bootstrap_value``), which halves an image batch.

    >>> from flowrl.policies import PGPolicy
    >>> p = PGPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=0)
    >>> actions, extra = p.compute_actions(np.zeros((4, 3), np.float32))
    >>> actions.shape, sorted(extra)
    ((4,), ['action_dist_inputs', 'action_logp', 'vf_preds'])
    """

    #: Whether :meth:`learn_on_batch` and :meth:`compute_gradients` read ``new_obs``.
    trains_on_new_obs = True

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 model: Any = None, hidden_sizes: Sequence[int] | None = None,
                 lr: float = 1e-3, adam_epsilon: float = 1e-8, gamma: float = 0.99,
                 lambda_: float = 1.0, grad_clip: float | None = None, num_sgd_iter: int = 1,
                 sgd_minibatch_size: int | None = None, seed: int | None = None,
                 numpy_inference: bool = True):
        name = type(self).__name__
        for field, value, ok in (
                ("lr", lr, lr > 0), ("adam_epsilon", adam_epsilon, adam_epsilon > 0),
                ("gamma", gamma, 0 <= gamma <= 1),
                ("lambda_", lambda_, 0 <= lambda_ <= 1),
                ("grad_clip", grad_clip, grad_clip is None or grad_clip > 0),
                ("num_sgd_iter", num_sgd_iter, isinstance(num_sgd_iter, int) and num_sgd_iter >= 1),
                ("sgd_minibatch_size", sgd_minibatch_size,
                 sgd_minibatch_size is None or (isinstance(sgd_minibatch_size, int)
                                                and sgd_minibatch_size >= 1)),
                ("hidden_sizes", hidden_sizes, hidden_sizes is None or (
                    len(hidden_sizes) > 0 and all(isinstance(h, int) and h > 0
                                                  for h in hidden_sizes)))):
            if not ok:
                raise ConfigError(f"{name}({field}={value!r}) is out of range; see the "
                                  f"{name} docstring for valid values")
        self.model_config = model_config(model, hidden_sizes)
        self.observation_space = observation_space
        self.action_space = action_space
        self.lr, self.gamma, self.lambda_ = lr, gamma, lambda_
        self.adam_epsilon, self.grad_clip = adam_epsilon, grad_clip
        self.num_sgd_iter, self.sgd_minibatch_size = num_sgd_iter, sgd_minibatch_size
        self.seed = seed
        self._np_rng = np.random.default_rng(seed)
        #: Act through numpy views of the model (see :meth:`compute_actions`); set
        #: False to force the torch path.
        self.numpy_inference = bool(numpy_inference)
        self._action_rng = np.random.default_rng(None if seed is None else [seed, 1])
        self._numpy_cache = SnapshotCache(NumpyActorCritic.build)

        if isinstance(observation_space, (gym.spaces.Dict, gym.spaces.Tuple)):
            raise ConfigError(f"{name}: observation space {observation_space} is not supported "
                              "by a policy directly; RolloutWorker flattens Dict and Tuple "
                              "observations (gymnasium's FlattenObservation), so build the policy "
                              "for gymnasium.spaces.flatten_space(space)")
        self._model_obs_space = model_observation_space(observation_space,
                                                        f"{name}: observation space")
        self._discrete_obs = isinstance(observation_space, gym.spaces.Discrete)
        self._image_obs = is_image(observation_space)
        # Spaces numpy acting covers (the model decides the rest: NumpyActorCritic).
        self._numpy_spaces = isinstance(action_space, (gym.spaces.Discrete, gym.spaces.Box)) \
            and not self._image_obs
        self._obs_dim = int(np.prod(self._model_obs_space.shape))
        self.dist_class, num_outputs = distribution_for(action_space, name)
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.model = get_model(self._model_obs_space, action_space, num_outputs,
                                   self.model_config.resolved())
        if not self.use_critic and type(self.model) is FullyConnectedNetwork \
                and not self.model.vf_share_layers:
            self.model.vf = None  # nothing trains it: no critic, no parameters
        self.is_recurrent = is_recurrent(self.model)
        self.max_seq_len = self.model_config.max_seq_len
        self._check_model(num_outputs)
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(seed)
        else:
            self.generator.seed()
        self._optimizer: torch.optim.Adam | None = None  # see the optimizer property
        self._towers = None  # see use_towers
        #: The ASP base and pending deltas (:mod:`flowrl.policies.asp`).
        self.asp = SignificantUpdates()
        self._params: tuple[nn.Module, list[nn.Parameter]] | None = None  # (model, its parameters)
        self._values_seen: torch.Tensor | None = None  # the last model_out's values

    def _check_model(self, num_outputs: int) -> None:
        """A ConfigError now, on the driver, for a model that cannot act: one forward
        of one observation (of zeros) must give ``(1, num_outputs)`` and, for a policy
        with a critic, ``value_function()`` one value."""
        model, where = self.model, "model"
        custom = self.model_config.custom_model
        if custom is not None:
            where = f"model.custom_model={getattr(custom, '__name__', custom)!r}"
        if self.use_critic and type(model).value_function is TorchModelV2.value_function \
                and not isinstance(model, LSTMWrapper):
            raise ConfigError(f"{where}: {type(model).__name__} does not implement "
                              "value_function(); add one returning V(s) for the rows of the "
                              "last forward, shape (B,)")
        try:
            with torch.no_grad():
                obs = np.zeros((1, *self.observation_space.shape),
                               self.observation_space.dtype or np.float32)
                out, state = self._forward(obs, self._initial_state_batch(1), None, None)
                values = model.value_function() if self.use_critic else None
        except ConfigError:
            raise
        except Exception as e:
            raise ConfigError(f"{where}: {type(model).__name__} failed on one observation of "
                              f"{self.observation_space}: {type(e).__name__}: {e}") from e
        if tuple(out.shape) != (1, num_outputs):
            raise ConfigError(f"{where}: {type(model).__name__}.forward returned shape "
                              f"{tuple(out.shape)} for one observation; the action space "
                              f"{self.action_space} needs ({'B'}, {num_outputs})")
        if values is not None and tuple(values.shape) != (1,):
            raise ConfigError(f"{where}: {type(model).__name__}.value_function() returned "
                              f"shape {tuple(values.shape)} for one observation; return (B,)")

    @property
    def optimizer(self) -> torch.optim.Adam:
        """A ``torch.optim.Adam`` over :attr:`model`'s parameters (:func:`make_adam`),
        created on first use, so that a policy that only acts builds no optimizer
        state. A real ``torch.optim.Optimizer``: LR schedulers attach to it, and
        :meth:`learn_on_batch` reports its current ``lr`` as ``cur_lr``.

        >>> from flowrl.policies import PGPolicy
        >>> p = PGPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), lr=0.01, seed=0)
        >>> p._optimizer is None, type(p.optimizer).__name__, p.optimizer.defaults["lr"]
        (True, 'Adam', 0.01)
        """
        if self._optimizer is None:
            self._optimizer = make_adam(self.model.parameters(), self.lr, self.adam_epsilon)
        return self._optimizer

    # -- acting ----------------------------------------------------------------
    def get_initial_state(self) -> list[np.ndarray]:
        """The model's state for one env at an episode start (empty when not recurrent)."""
        return [np.asarray(s) for s in self.model.get_initial_state()]

    def _initial_state_batch(self, n: int) -> list[np.ndarray]:
        return [np.repeat(s[None], n, axis=0) for s in self.get_initial_state()]

    def _obs_tensor(self, obs) -> torch.Tensor:
        """Observations as the model takes them: one-hot floats for ``Discrete``,
        images in their own dtype (uint8 stays uint8), float32 rows otherwise."""
        obs = np.asarray(obs)
        if not obs.flags.writeable:  # from Ray's object store; torch wants writable memory
            obs = obs.copy()
        return model_obs(torch.as_tensor(obs), self._obs_dim, discrete=self._discrete_obs,
                         image=self._image_obs)

    def _input_dict(self, obs: torch.Tensor, prev_actions=None,
                    prev_rewards=None, training: bool = False) -> dict[str, Any]:
        """The model's input dict. ``prev_actions`` and ``prev_rewards`` are arrays
        when acting and tensors when training; tensors stay on their device (a
        tower's), arrays become CPU tensors."""
        out: dict[str, Any] = {SB.OBS: obs, "is_training": training}
        if not self._image_obs:
            out["obs_flat"] = obs
        if prev_actions is not None:
            out[SB.PREV_ACTIONS] = _tensor(prev_actions)
            out[SB.PREV_REWARDS] = _tensor(prev_rewards, torch.float32)
        return out

    def _forward(self, obs_batch, state_batches, prev_actions,
                 prev_rewards) -> tuple[torch.Tensor, list[torch.Tensor]]:
        """One acting forward: ``(dist_inputs, state_out)`` for a batch of single steps."""
        obs = self._obs_tensor(obs_batch)
        if not self.is_recurrent:
            return self.model(self._input_dict(obs), [], None)
        n = len(obs)
        if prev_actions is None:
            prev_actions = np.zeros((n, *(self.action_space.shape or ())),
                                    self.action_space.dtype)
            prev_rewards = np.zeros(n, np.float32)
        state = [torch.as_tensor(np.asarray(s, np.float32)) for s in state_batches]
        return self.model(self._input_dict(obs, prev_actions, prev_rewards), state,
                          torch.ones(n, dtype=torch.int64))

    def acting_module(self) -> ActingModule:
        """A copy of :attr:`model` as an :class:`ActingModule`: observations in,
        ``(action_dist_inputs, value)`` out (``action_dist_inputs`` alone without a
        critic), the same numbers :meth:`compute_actions` reports in ``extra``. A
        ConfigError for a recurrent model, whose state such a module cannot carry.

        >>> from flowrl.policies import PPOPolicy
        >>> p = PPOPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=0)
        >>> logits, value = p.acting_module()(torch.zeros(4, 3))
        >>> tuple(logits.shape), tuple(value.shape)
        ((4, 2), (4,))
        """
        if self.is_recurrent:
            raise ConfigError(f"{type(self).__name__}.acting_module: the model "
                              f"({type(self.model).__name__}) is recurrent, and a module of "
                              "observations alone cannot carry its state; export a "
                              "feedforward policy, or act with compute_single_action")
        return ActingModule(copy.deepcopy(self.model), self._model_obs_space.shape,
                            discrete=self._discrete_obs, image=self._image_obs,
                            critic=bool(self.use_critic))

    def _numpy_snapshot(self, part: str = "guard") -> "NumpyActorCritic | None":
        """The numpy view of :attr:`model`, or None for the torch path (switched off,
        or a model that is not the built-in MLP). Rebuilt whenever a parameter was
        replaced (see :mod:`~flowrl.policies.numpy_acting`); ``part="acting_guard"`` checks only
        what acting without values reads."""
        if not self.numpy_inference or not self._numpy_spaces:
            return None
        return self._numpy_cache.get(self.model, part)

    @property
    def separate_value_network(self) -> bool:
        """Whether values come from a network of their own (the built-in MLP without
        ``vf_share_layers``): computing them apart from actions then costs no extra
        policy forward (the samplers batch them per fragment)."""
        return type(self.model) is FullyConnectedNetwork and not self.model.vf_share_layers

    def _obs_array(self, obs) -> np.ndarray:
        return obs_rows(obs, self._obs_dim, self._discrete_obs)

    def compute_actions(self, obs_batch, explore: bool = True, *, vf_preds: bool = True,
                        state_batches: Sequence[np.ndarray] | None = None,
                        prev_actions=None, prev_rewards=None) -> tuple[np.ndarray, dict]:
        """Actions for a batch of observations ``(B, *obs_shape)``, one forward pass.

        ``explore=False`` takes the distribution's mode. Returns ``(actions, extra)``
        with ``extra`` holding ``action_logp (B,)``, ``vf_preds (B,)`` and
        ``action_dist_inputs (B, D)`` as numpy arrays. ``vf_preds=False`` leaves
        ``vf_preds`` out (one forward less: the samplers then fill that column with
        one :meth:`value` call per fragment, under the same weights).

        A recurrent policy takes ``state_batches`` (one ``(B, ...)`` array per state
        component; None: the initial state), ``prev_actions`` and ``prev_rewards``
        (None: zeros), and returns the next state as ``state_out_0`` ... in ``extra``.

        With ``numpy_inference`` (the default) and the built-in MLP, every batch
        runs the same float32 maths in numpy over views of the live parameters
        (:mod:`flowrl.policies.numpy_acting`; large batches in chunks of
        ``NUMPY_MAX_MACS``-sized forwards, so results do not depend on the batch
        size) and samples with the policy's own seeded numpy generator (saved in
        :meth:`get_state`).
        Otherwise (``numpy_inference=False``, or any other model: CNN, LSTM,
        custom) one torch forward under ``torch.inference_mode`` samples with
        :attr:`generator`. Both paths draw from the same distributions.
        """
        snap = None if self.is_recurrent else self._numpy_snapshot(
            "guard" if vf_preds else "acting_guard")
        if snap is not None:
            return snap.compute_actions(self._obs_array(obs_batch), explore, self._action_rng,
                                        tuple(self.action_space.shape or ()), vf_preds)
        if self.is_recurrent and state_batches is None:
            state_batches = self._initial_state_batch(len(obs_batch))
        with torch.inference_mode():
            inputs, state_out = self._forward(obs_batch, state_batches, prev_actions,
                                              prev_rewards)
            dist = self.dist_class(inputs)
            actions = dist.sample(self.generator) if explore else dist.deterministic_sample()
            logp = dist.logp(actions)
            extra = {SB.ACTION_LOGP: logp.numpy(), SB.ACTION_DIST_INPUTS: inputs.numpy()}
            if vf_preds or self.is_recurrent:
                extra[SB.VF_PREDS] = (self.model.value_function().numpy() if self.use_critic
                                      else np.zeros(len(actions), np.float32))
            for i, s in enumerate(state_out):
                extra[f"state_out_{i}"] = s.numpy()
        actions = actions.numpy()
        if isinstance(self.action_space, gym.spaces.Box):
            actions = actions.reshape((len(actions), *self.action_space.shape))
        return actions, extra

    def value(self, obs_batch, *, state_batches: Sequence[np.ndarray] | None = None,
              prev_actions=None, prev_rewards=None) -> np.ndarray:
        """``V(s)`` for a batch of observations, shape ``(B,)`` (zeros without a
        critic); a recurrent policy takes the state and previous actions and rewards
        as :meth:`compute_actions` does."""
        if not self.use_critic:
            return np.zeros(len(obs_batch), np.float32)
        snap = None if self.is_recurrent else self._numpy_snapshot()
        if snap is not None:
            return snap.values(self._obs_array(obs_batch))
        if self.is_recurrent and state_batches is None:
            state_batches = self._initial_state_batch(len(obs_batch))
        with torch.inference_mode():
            self._forward(obs_batch, state_batches, prev_actions, prev_rewards)
            return self.model.value_function().numpy()

    def compute_log_likelihoods(self, batch: SampleBatch) -> np.ndarray:
        """``log π(a_t|s_t)`` of ``batch``'s logged ``actions`` under this policy,
        float32 ``(B,)`` in row order (RLlib 1.x's name): what off-policy estimators
        weigh logged steps with. A recurrent policy runs over the batch's
        sequences from their recorded ``state_in_*``, as learning does. Touches no
        counter and no RNG.

        >>> from flowrl.policies import PGPolicy
        >>> p = PGPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=0)
        >>> b = SampleBatch(obs=np.zeros((2, 3), np.float32), actions=np.array([0, 1]))
        >>> np.exp(p.compute_log_likelihoods(b)).sum().round(5)
        np.float32(1.0)
        """
        with torch.no_grad():
            train = self._rows(self._train_tensors(batch))
            inputs, _ = self.model_out(train)
            logp = self.dist_class(inputs).logp(train[SB.ACTIONS])
            if SEQ_MASK in train:
                logp = logp[train[SEQ_MASK].bool()]
        return logp.numpy().astype(np.float32)

    # -- learning --------------------------------------------------------------
    def loss(self, train: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """Scalar loss and stats for a dict of batch tensors; subclasses implement it.

        ``train`` holds one row per step (a recurrent policy's sequences flattened
        to ``B * T`` rows, padding included, with ``seq_lens``, ``seq_mask`` and the
        ``state_in_*`` of each sequence): compute the model's outputs with
        :meth:`model_out` and average with :meth:`mean`, which leaves padding out.
        """
        raise NotImplementedError(f"{type(self).__name__} must implement loss()")

    def model_out(self, train: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """``(dist_inputs, values)`` of the model on a training batch (values are zeros
        for a policy without a critic); recurrent models run over the batch's
        sequences from their recorded start states."""
        if self.is_recurrent:
            states = [train[k] for k in self._state_in_keys]
            inputs = self._input_dict(train[SB.OBS], train[SB.PREV_ACTIONS],
                                      train[SB.PREV_REWARDS], training=True)
            out, _ = self.model(inputs, states, train[SEQ_LENS])
        else:
            out, _ = self.model(self._input_dict(train[SB.OBS], training=True), [], None)
        if not self.use_critic:
            return out, torch.zeros(out.shape[0], device=out.device)
        values = self.model.value_function()
        self._values_seen = values.detach()  # for vf_explained_var (see _loss)
        return out, values

    @staticmethod
    def mean(x: torch.Tensor, train: dict[str, torch.Tensor]) -> torch.Tensor:
        """The mean of per-row ``x`` over the batch's real steps (all rows, unless the
        batch is padded sequences: then padding has weight 0, each real step
        ``1 / real steps``; :meth:`_rows` sets the weights once per minibatch, a
        product and a sum instead of a gather per term)."""
        weights = train.get(SEQ_WEIGHTS)
        return x.mean() if weights is None else (x * weights).sum()

    @property
    def _state_in_keys(self) -> list[str]:
        return [f"state_in_{i}" for i in range(len(self.model.get_initial_state()))]

    def _train_tensors(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        """The batch as tensors: one row per step, or for a recurrent policy padded
        sequences, ``(B, T, ...)`` per step column plus the per-sequence columns
        (:mod:`flowrl.models.sequences`)."""
        if self.is_recurrent:
            return self._sequence_tensors(batch)
        # Arrays from Ray's object store are read-only; torch wants writable memory.
        out = {k: torch.as_tensor(v if v.flags.writeable else v.copy())
               for k, v in batch.items() if v.dtype.kind in "fiub" and k != SB.OBS}
        out[SB.OBS] = self._obs_tensor(batch[SB.OBS])
        return out

    def _sequence_tensors(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        missing = [k for k in (SB.EPS_ID, SB.T, SB.PREV_ACTIONS, SB.PREV_REWARDS,
                               *self._state_in_keys) if k not in batch]
        if missing:
            raise ConfigError(f"{type(self).__name__}: a recurrent model trains on batches "
                              f"with {missing}; sample them with a RolloutWorker, which "
                              "records state, previous actions and rewards")
        starts, lens = cut_sequences(batch[SB.EPS_ID], batch[SB.T], self.max_seq_len)
        steps = int(lens.max())
        state_keys = set(self._state_in_keys)
        out: dict[str, torch.Tensor] = {}
        for k, v in batch.items():
            if k in state_keys:
                out[k] = torch.as_tensor(np.ascontiguousarray(v[starts], np.float32))
            elif v.dtype.kind in "fiub" and not k.startswith("state_out_") \
                    and k != SB.NEXT_OBS:
                out[k] = torch.as_tensor(pad_sequences(v, starts, lens, steps))
        if SB.VF_PREDS in batch and SB.BOOTSTRAP_VALUE in batch:
            after = next_values(batch[SB.EPS_ID], batch[SB.T], batch[SB.TERMINATEDS],
                                batch.get(SB.TRUNCATEDS, np.zeros(batch.count, bool)),
                                batch[SB.VF_PREDS], batch[SB.BOOTSTRAP_VALUE])
            out[SEQ_BOOTSTRAP_VALUE] = torch.as_tensor(after[starts + lens - 1])
        out[SEQ_LENS] = torch.as_tensor(lens)
        out[SEQ_MASK] = torch.as_tensor(sequence_mask(lens, steps))
        return out

    def _rows(self, train: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """``train`` with a recurrent batch's ``(B, T, ...)`` step columns flattened to
        ``B * T`` rows (what :meth:`loss` takes); other batches as they are."""
        if SEQ_LENS not in train:
            return train
        per_sequence = {SEQ_LENS, SEQ_BOOTSTRAP_VALUE, *self._state_in_keys}
        rows = {k: v if k in per_sequence else v.reshape(-1, *v.shape[2:])
                for k, v in train.items()}
        real = rows[SEQ_MASK].float()
        rows[SEQ_WEIGHTS] = real / real.sum()
        return rows

    def _loss(self, train: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict]:
        """:meth:`loss` on ``train``'s rows, with ``vf_explained_var`` of the values the
        loss computed against the batch's ``value_targets`` added to its stats (as
        RLlib 1.x: per minibatch, so learning stats average it over the last epoch;
        no extra forward)."""
        rows = self._rows(train)
        self._values_seen = None
        loss, stats = self.loss(rows)
        values = self._values_seen
        if values is not None and SB.VALUE_TARGETS in rows and values.shape[0] == \
                rows[SB.VALUE_TARGETS].shape[0]:
            stats = {**stats, "vf_explained_var": torch_explained_variance(
                values, rows[SB.VALUE_TARGETS], rows.get(SEQ_WEIGHTS))}
        return loss, stats

    def _backward(self, batch: "SampleBatch | LoadedBatch") -> dict[str, float]:
        self.model.zero_grad(set_to_none=True)  # not the optimizer's: see `optimizer`
        if isinstance(batch, LoadedBatch):
            train = batch.tensors()
        else:
            train = self._train_tensors(batch)
        loss, stats = self._loss(train)
        loss.backward()
        params = [p for p in self.model.parameters() if p.grad is not None]
        norm = nn.utils.clip_grad_norm_(params, self.grad_clip if self.grad_clip else math.inf)
        out = {k: float(v) for k, v in stats.items()}
        out.update(total_loss=float(loss.detach()), grad_gnorm=float(norm))
        return out

    # -- towers: a hook for data-parallel SGD over model copies (flowrl.ops.multi_gpu) --
    def use_towers(self, towers: Any) -> None:
        """Train through ``towers`` from now on (None: on :attr:`model` alone).

        ``towers`` iterates ``(model, device)`` pairs and has ``load(tensors) ->
        copies`` (the batch's tensors on each tower's device) and
        ``sgd_step(policy, loaded) -> stats``. :func:`flowrl.ops.multi_gpu.set_towers`
        builds them; :meth:`load_batch` and :meth:`sgd_step` hand over to them.
        """
        self._towers = towers

    @property
    def towers(self) -> list[tuple[nn.Module, torch.device]]:
        """The ``(model, device)`` of each tower; without towers, :attr:`model` on the CPU."""
        if self._towers is None:
            return [(self.model, torch.device("cpu"))]
        return list(self._towers)

    @property
    def num_towers(self) -> int:
        """How many towers each SGD step splits its minibatch over."""
        return len(self.towers)

    def load_batch(self, batch: SampleBatch) -> LoadedBatch:
        """``batch`` as tensors on every tower's device (the "loading" a multi-GPU
        learner does ahead of SGD; without towers, the host tensors)."""
        if batch.count == 0:
            raise ConfigError(f"{type(self).__name__}.load_batch got an empty batch")
        tensors = self._train_tensors(batch)
        copies = [tensors] if self._towers is None else self._towers.load(tensors)
        count = len(tensors[SEQ_LENS]) if SEQ_LENS in tensors else batch.count
        return LoadedBatch(copies, count, source=batch)

    def sgd_step(self, minibatch: "SampleBatch | LoadedBatch") -> dict[str, float]:
        """ONE optimizer step on ``minibatch`` (over the towers, if any); returns its
        stats (the loss terms, ``total_loss`` and ``grad_gnorm`` before clipping)."""
        loaded = minibatch if isinstance(minibatch, LoadedBatch) else self.load_batch(minibatch)
        if self._towers is not None:
            return self._towers.sgd_step(self, loaded)
        return self._single_tower_step(loaded.tensors())

    def loss_on(self, model: nn.Module, train: dict[str, torch.Tensor]
                ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """``(loss, stats)`` of ``train`` (one tower's rows) computed with ``model``, a
        copy of :attr:`model` on a tower's device; the stats include
        ``vf_explained_var`` as learning reports it."""
        tower = self
        if model is not self.model:
            tower = copy.copy(self)
            tower.model = model
        return tower._loss(train)

    def _single_tower_step(self, train: dict[str, torch.Tensor]) -> dict[str, float]:
        """:meth:`sgd_step` on the policy's own model: the same update (one tower's
        gradient has weight 1), through ``backward`` into ``.grad`` and one
        conversion of all stats to floats."""
        if self._params is None or self._params[0] is not self.model:
            self._params = (self.model, list(self.model.parameters()))
        params = self._params[1]
        for p in params:
            p.grad = None
        loss, stats = self._loss(train)
        loss.backward()
        used = [p for p in params if p.grad is not None]
        norm = nn.utils.clip_grad_norm_(used, self.grad_clip if self.grad_clip else math.inf)
        self.optimizer.step()
        for p in params:
            p.grad = None
        names = [*stats, "total_loss", "grad_gnorm"]
        values = torch.stack([torch.as_tensor(v, dtype=torch.float64).reshape(())
                              for v in (*stats.values(), loss.detach(), norm)]).tolist()
        return dict(zip(names, values))

    def learn_on_batch(self, batch: "SampleBatch | LoadedBatch", *,
                       num_sgd_iter: int | None = None, sgd_minibatch_size: int | None = None,
                       rng: np.random.Generator | None = None) -> dict[str, float]:
        """``num_sgd_iter`` epochs of SGD over shuffled minibatches of
        ``sgd_minibatch_size`` rows (defaults: the policy's own settings; 0 or None is
        the whole batch), through :func:`~flowrl.policies.sgd.minibatch_sgd` with
        :meth:`sgd_step`; the mean stats of the last epoch.

        Stats include ``total_loss``, ``grad_gnorm``, ``cur_lr``,
        ``vf_explained_var`` (with a critic) and the loss's own terms
        (``policy_loss``, ``vf_loss``, ``entropy``, ``kl``...), and ``custom_metrics``
        when callbacks run ``on_learn_on_batch`` first
        (:func:`~flowrl.callbacks.learn_callbacks`).

        A recurrent policy shuffles whole sequences: a minibatch is
        ``sgd_minibatch_size // max_seq_len`` sequences (at least one), as RLlib 1.x.
        """
        if batch.count == 0:
            raise ConfigError(f"{type(self).__name__}.learn_on_batch got an empty batch")
        custom = learn_callbacks(self, batch.source if isinstance(batch, LoadedBatch)
                                 and batch.rows is None and batch.source is not None else batch)
        loaded = batch if isinstance(batch, LoadedBatch) else self.load_batch(batch)
        size = self.minibatch_units(
            self.sgd_minibatch_size if sgd_minibatch_size is None else sgd_minibatch_size)
        stats = minibatch_sgd(
            loaded, num_sgd_iter=self.num_sgd_iter if num_sgd_iter is None else num_sgd_iter,
            sgd_minibatch_size=size, rng=self._np_rng if rng is None else rng,
            step=self.sgd_step)
        stats["cur_lr"] = self.optimizer.param_groups[0]["lr"]  # as a scheduler set it
        if custom is not None:
            stats["custom_metrics"] = custom
        return stats

    def minibatch_units(self, sgd_minibatch_size: int | None) -> int | None:
        """What a minibatch of ``sgd_minibatch_size`` rows holds of a loaded batch
        (:meth:`load_batch`): that many rows, or for a recurrent policy whole
        sequences, ``sgd_minibatch_size // max_seq_len`` (at least one), as RLlib
        1.x; 0 or None (the whole batch) stays as it is.

        >>> from flowrl.policies import PGPolicy
        >>> p = PGPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2),
        ...              model={"use_lstm": True, "max_seq_len": 20})
        >>> p.minibatch_units(64), p.minibatch_units(8), p.minibatch_units(0)
        (3, 1, 0)
        """
        if sgd_minibatch_size and self.is_recurrent:
            return max(1, sgd_minibatch_size // self.max_seq_len)
        return sgd_minibatch_size

    def compute_gradients(self, batch: "SampleBatch | LoadedBatch"
                          ) -> tuple[list[np.ndarray], dict]:
        """Gradients of the loss on the whole batch (clipped), one array per parameter.

        ``batch`` is a SampleBatch or a (mini)batch of :meth:`load_batch` (a
        recurrent policy's minibatches of whole sequences), whose first copy it
        uses. The list follows ``model.parameters()`` order; parameters the loss
        does not touch get zeros. Weights are not changed.
        """
        stats = self._backward(batch)
        grads = [(p.grad.numpy().copy() if p.grad is not None else np.zeros(tuple(p.shape), np.float32))
                 for p in self.model.parameters()]
        self.model.zero_grad(set_to_none=True)
        return grads, stats

    def apply_gradients(self, grads: Sequence[np.ndarray]) -> None:
        """One optimizer step with ``grads`` (as from :meth:`compute_gradients`)."""
        params = list(self.model.parameters())
        if len(grads) != len(params):
            raise ConfigError(f"{type(self).__name__}.apply_gradients got {len(grads)} "
                              f"gradients for {len(params)} parameters")
        for i, (p, g) in enumerate(zip(params, grads)):
            if tuple(np.shape(g)) != tuple(p.shape):
                raise ConfigError(f"{type(self).__name__}.apply_gradients: gradient {i} has "
                                  f"shape {np.shape(g)}, parameter has {tuple(p.shape)}")
            p.grad = torch.tensor(np.asarray(g), dtype=p.dtype)
        self.optimizer.step()
        self.optimizer.zero_grad(set_to_none=True)

    # -- weights and state -----------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        """Model parameters as ``{name: numpy array}`` (copies)."""
        return module_weights(self.model)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Load weights from :meth:`get_weights` (of a policy with the same shapes)."""
        load_weights(self.model, weights, f"{type(self).__name__}.set_weights")
        self.asp.rebase(weights)  # ASP deltas count from here

    def get_state(self) -> dict[str, Any]:
        """Weights, optimizer state and sampling RNG states, for checkpoints."""
        return {"weights": self.get_weights(),
                "optimizer": to_numpy_tree(self.optimizer.state_dict()),
                "generator": self.generator.get_state().numpy().copy(),
                "np_rng": self._np_rng.bit_generator.state,
                "action_rng": self._action_rng.bit_generator.state}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned."""
        self.set_weights(state["weights"])
        self.optimizer.load_state_dict(to_torch_tree(state["optimizer"]))
        self.generator.set_state(torch.tensor(state["generator"]))
        self._np_rng.bit_generator.state = state["np_rng"]
        if "action_rng" in state:  # checkpoints from before numpy inference lack it
            self._action_rng.bit_generator.state = state["action_rng"]

    def set_acting_state(self, state: dict[str, Any]) -> None:
        """Restore only what acting uses: ``state["weights"]`` and the numpy
        generators (``np_rng``, ``action_rng``), leaving the rest (optimizer, torch
        generator, a subclass's own state) as it is. Remote workers' states in
        checkpoints of older flowrl, whose remote workers acted through torch-free
        replicas, hold only these (marked ``"numpy_replica": True``;
        :meth:`~flowrl.workers.RolloutWorker.set_state` sends them here)."""
        self.set_weights(state["weights"])
        self._np_rng.bit_generator.state = state["np_rng"]
        self._action_rng.bit_generator.state = state["action_rng"]

    # -- the seeds' ASP significant updates (flowrl.ops.LocalComputeUpdates) --------
    def asp_accumulate_grads(self) -> None:
        """Bring the pending parameter deltas up to date: ``current - base``, where the
        base is the weights of the last :meth:`set_weights` plus every delta already
        sent or received (before any, the weights at the first call); see
        :mod:`flowrl.policies.asp`."""
        self.asp.pending(self.get_weights())

    def asp_get_updates(self, threshold: float) -> tuple[dict[str, np.ndarray], int]:
        """``({param: delta where |delta| > threshold, else 0}, num_nonzero)`` of the
        pending deltas; what is returned counts as sent (joins the base), the rest
        stays pending and keeps accumulating."""
        return self.asp.take(self.get_weights(), threshold)

    def asp_apply_updates(self, updates: dict[str, np.ndarray]) -> None:
        """Add another worker's ``updates`` (from :meth:`asp_get_updates`) to the
        weights and the base, leaving this policy's own pending deltas pending."""
        weights = self.asp.received(self.get_weights(), updates)
        base = self.asp.base
        self.set_weights(weights)
        self.asp.base = base  # set_weights rebased: the own pending deltas stay pending


__all__ = ["TorchPolicy", "LoadedBatch", "make_adam", "ActingModule",
           "model_obs", "module_weights", "load_weights"]
