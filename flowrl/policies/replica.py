"""Torch-free replicas of the built-in policies, which remote rollout workers act with.

Why. A remote rollout worker only acts: one small forward per env step, a value
forward per fragment, GAE. Importing torch is a large share of a fresh worker
process's start-up (``benchmarks/startup.py`` measures it, with and without
replicas). So for the built-in policies (those that set ``numpy_replica = True``
in their own class body) a :class:`~flowrl.workers.WorkerSet` builds its remote
workers with :class:`NumpyActingPolicy` replicas (:func:`acting_replica` makes
the factory). The test suite checks that premise: a Ray worker built with
replicas has no torch in ``sys.modules`` after sampling.

What a replica is. Acting, values, postprocessing, weights and checkpoint state
run in numpy, with the same maths, seeds and random streams as
:class:`~flowrl.policies.TorchPolicy`'s numpy path, which serves every batch size
the same way (in ``NUMPY_MAX_MACS`` chunks): the replica's actions, log-probs and
values are the real policy's, bit for bit. That surface (:data:`ACTING_METHODS`,
``get_state``/``set_state``) is all a replica has. Whatever needs the real policy
(``learn_on_batch``, ``compute_gradients``, a user's ``foreach_policy`` function,
an attribute only the real class has) gets it through one explicit call,
:meth:`NumpyActingPolicy.materialize`: it imports torch, builds the real policy
with the same arguments and hands it the replica's weights, settings and numpy
random generators. :meth:`~flowrl.workers.RolloutWorker.get_policy` does this and
puts the real policy in the replica's place, so the worker acts with it from then
on. Any other attribute of a replica is an AttributeError that says so.

Checkpoints. A replica answers ``get_state`` with what acting uses, and nothing
that needs torch: its weights and its numpy generators' states, marked
:data:`REPLICA_STATE` (a worker that only acts has no optimizer state, and its
torch generator and learning settings, such as PPO's ``kl_coeff``, are the ones
it was built with). :func:`set_policy_state` restores such a state into a replica
or, when the restoring run has the real policy there, into that policy's weights
and numpy generators. A full policy state (from a real policy) needs the real
policy: a replica's ``set_state`` refuses it by name, and
:meth:`~flowrl.workers.RolloutWorker.set_state` materializes the replica for it.

Until its first ``set_weights`` (a WorkerSet syncs the local worker's weights to
every remote worker it starts) a replica has no weights of its own, and acting
or ``get_weights`` is a ConfigError. With ``numpy_inference=False`` in the
config, or spaces numpy does not act on, the factory builds the real policy.
``WorkerConfig(numpy_replicas=False)`` gives remote workers the real policy from
the start (A3C does: its workers compute gradients at once).
"""

from __future__ import annotations

import dataclasses
import importlib
import inspect
import re
import types
from typing import Any

import gymnasium as gym
import numpy as np

from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError
from flowrl.policies.numpy_acting import (NumpyMLP, Postprocessing, relu, act, in_chunks,
                                          max_rows, obs_rows)

SB = SampleBatch

#: The real class's methods a replica implements itself (with ``get_state``,
#: ``set_state``); a class that sets ``numpy_replica = True`` must keep
#: TorchPolicy's own versions of these.
ACTING_METHODS = ("compute_actions", "value", "postprocess_trajectory",
                  "postprocess_trajectories", "_with_advantages", "get_weights", "set_weights")
#: The constructor arguments a replica reads (the rest it keeps for materializing).
_SETTINGS = ("gamma", "lambda_", "numpy_inference", "hidden_sizes", "model")
#: The key that marks a replica's own checkpoint state (``get_state`` of a replica
#: that acts itself): ``{REPLICA_STATE: True, "weights", "np_rng", "action_rng"}``.
REPLICA_STATE = "numpy_replica"


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
    #: Whether the real policy built from the factory's config reads ``new_obs``
    #: (:func:`acting_replica` decides it), so that a replica's batches have the
    #: real policy's columns.
    trains_on_new_obs: bool = True

    def __call__(self, observation_space: gym.Space, action_space: gym.Space,
                 **kwargs: Any) -> Any:
        """A :class:`NumpyActingPolicy`, or the real policy when numpy would not act:
        ``numpy_inference=False`` in ``kwargs``, spaces other than ``Box`` and
        ``Discrete`` or an image observation, or a model other than the built-in MLP
        with a separate value network (the real class then builds, or names what it
        does not support)."""
        numpy_inference = kwargs.get("numpy_inference", dict(self.defaults)["numpy_inference"])
        spaces = (gym.spaces.Box, gym.spaces.Discrete)
        if not (numpy_inference and isinstance(observation_space, spaces)
                and isinstance(action_space, spaces)
                and not (isinstance(observation_space, gym.spaces.Box)
                         and len(observation_space.shape) == 3)
                and replicable_model(_model_setting(kwargs), action_space)):
            return self.policy_class()(observation_space, action_space, **kwargs)
        return NumpyActingPolicy(self, observation_space, action_space, kwargs)

    def policy_class(self) -> type:
        """The class replicated (importing it imports torch)."""
        obj: Any = importlib.import_module(self.module)
        for part in self.qualname.split("."):
            obj = getattr(obj, part)
        return obj


def _model_setting(kwargs: dict[str, Any]) -> Any:
    """The model config in a policy's constructor arguments, resolved as the real
    policy resolves it (:func:`~flowrl.models.config.model_config`); an invalid one
    comes back as None (the real class then says what is wrong)."""
    from flowrl.models.config import model_config
    try:
        return model_config(kwargs.get("model"), kwargs.get("hidden_sizes"))
    except ConfigError:
        return None


def replicable_model(config: Any, action_space: gym.Space) -> bool:
    """Whether the model ``config`` builds is one a replica reproduces: the built-in
    MLP (no custom model, no LSTM) with a separate value network, ``tanh`` or
    ``relu`` layers, and for a Gaussian free log standard deviations.

    >>> from flowrl.models import ModelConfig
    >>> two = gym.spaces.Discrete(2)
    >>> replicable_model(ModelConfig(), two), replicable_model(ModelConfig(use_lstm=True), two)
    (True, False)
    """
    return (config is not None and config.custom_model is None and not config.use_lstm
            and not config.vf_share_layers and config.fcnet_activation in ("tanh", "relu")
            and (config.free_log_std or not isinstance(action_space, gym.spaces.Box)))


def acting_replica(policy_class: Any, config: dict[str, Any] | None = None
                   ) -> NumpyActing | None:
    """The replica factory for ``policy_class`` and the policy ``config`` (keyword
    arguments) its policies are built with, or None when the class does not opt in.

    A class opts in with ``numpy_replica = True`` in its own body (subclasses do not
    inherit it: a subclass may act differently) and must keep
    :class:`~flowrl.policies.TorchPolicy`'s acting, postprocessing and weight
    methods (:data:`ACTING_METHODS`), its model, and pass ``gamma``, ``lambda_``
    ``numpy_inference`` and ``model`` (or ``hidden_sizes``) through to it unchanged (the replica
    reads those from the config, and the parameters from the weights). With
    ``numpy_inference=False`` in the config the factory builds the real policy.

    Whether a replica's batches keep ``new_obs`` is what the real policy built from
    ``config`` says (``trains_on_new_obs``), so that batches from replicas and from
    real policies have the same columns: the class attribute, or where the class
    decides per instance (a property: IMPALA and APPO read ``new_obs`` with flat
    V-trace), the property evaluated on ``config`` over the class's constructor
    defaults (:func:`_settings`). A property that reads anything else gets no
    replica (remote workers then build the real policy).

    >>> from flowrl.policies import APPOPolicy, PPOPolicy, TorchPolicy
    >>> acting_replica(PPOPolicy).qualname, acting_replica(TorchPolicy)
    ('PPOPolicy', None)
    >>> appo, appo_vtrace = acting_replica(APPOPolicy), acting_replica(APPOPolicy, {"vtrace": True})
    >>> appo.trains_on_new_obs, appo_vtrace.trains_on_new_obs
    (False, True)
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
    new_obs = inspect.getattr_static(policy_class, "trains_on_new_obs", True)
    if isinstance(new_obs, property):
        try:
            new_obs = new_obs.fget(_settings(policy_class, config or {}))
        except AttributeError:  # it reads more than the settings
            return None
    return NumpyActing(policy_class.__module__, policy_class.__qualname__,
                       bool(policy_class.use_critic), defaults, bool(new_obs))


def _settings(policy_class: type, config: dict[str, Any]) -> types.SimpleNamespace:
    """The settings a policy of ``policy_class`` built from ``config`` has, as
    attributes, for evaluating a property of the class without building the
    policy: each keyword parameter of its constructors (its own ``__init__``
    first, then its bases' while ``**kwargs`` passes on; the first default found
    wins) from ``config`` or its default, and ``is_recurrent=False`` (a replica's
    model never is).

    >>> from flowrl.policies import APPOPolicy
    >>> s = _settings(APPOPolicy, {"lr": 0.1})
    >>> s.lr, s.vtrace, s.gamma, s.is_recurrent
    (0.1, False, 0.99, False)
    """
    values: dict[str, Any] = {}
    for cls in policy_class.__mro__:
        if cls is object or "__init__" not in cls.__dict__:
            continue
        params = list(inspect.signature(cls.__dict__["__init__"]).parameters.values())[1:]
        for p in params:
            if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and p.default is not p.empty:
                values.setdefault(p.name, p.default)
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            break
    return types.SimpleNamespace(**{**values, **config, "is_recurrent": False})


_LAYER_KEY = re.compile(r"(pi|vf)\.(\d+)\.(weight|bias)$")


class NumpyActingPolicy(Postprocessing):
    """A replica of a built-in policy that acts in numpy; see the module docstring.

    Built by a :class:`NumpyActing` factory with the real class's constructor
    arguments, which it keeps to build the real policy on request
    (:meth:`materialize`). Its random generators are the real policy's (``seed``:
    ``default_rng(seed)`` for minibatch shuffles, ``default_rng([seed, 1])`` for
    actions) and go to the real policy when it is built.

    Its surface: :meth:`compute_actions`, :meth:`value`, ``postprocess_trajectory``,
    ``postprocess_trajectories``, :meth:`get_weights`, :meth:`set_weights`,
    :meth:`get_state`, :meth:`set_state`, :meth:`materialize`, ``materialized``
    and the settings acting reads (``observation_space``, ``action_space``,
    ``seed``, ``gamma``, ``lambda_``, ``use_critic``; ``numpy_inference`` is
    always True, as the factory builds the real policy otherwise). Once
    materialized, the acting, weights and state methods call the real policy, so
    the two never disagree about weights or random streams.

    >>> from flowrl.policies import PPOPolicy
    >>> box, two = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)
    >>> real = PPOPolicy(box, two, seed=0)
    >>> replica = acting_replica(PPOPolicy)(box, two, seed=0)
    >>> replica.set_weights(real.get_weights())
    >>> obs = np.ones((4, 3), np.float32)
    >>> bool((replica.compute_actions(obs)[0] == real.compute_actions(obs)[0]).all())
    True
    >>> replica.materialized, round(replica.materialize().kl_coeff, 2), replica.materialized
    (False, 0.2, True)
    """

    def __init__(self, factory: NumpyActing, observation_space: gym.Space,
                 action_space: gym.Space, kwargs: dict[str, Any]):
        setting = {**dict(factory.defaults), **{k: kwargs[k] for k in _SETTINGS if k in kwargs}}
        self._real: Any = None
        self._factory, self._kwargs = factory, dict(kwargs)
        self.observation_space, self.action_space = observation_space, action_space
        self.seed = seed = kwargs.get("seed")
        self.gamma, self.lambda_ = setting["gamma"], setting["lambda_"]
        self.numpy_inference = bool(setting["numpy_inference"])
        model = _model_setting(setting)
        self._hidden = [int(h) for h in model.fcnet_hiddens]
        self._activation = np.tanh if model.fcnet_activation == "tanh" else relu
        self.use_critic = factory.use_critic
        self.trains_on_new_obs = factory.trains_on_new_obs
        self._np_rng = np.random.default_rng(seed)
        self._action_rng = np.random.default_rng(None if seed is None else [seed, 1])
        self._weights = self._pi = self._vf = self._log_std = None
        self._max_rows = 0
        self._discrete_obs = isinstance(observation_space, gym.spaces.Discrete)
        self._obs_dim = (int(observation_space.n) if self._discrete_obs
                         else int(np.prod(observation_space.shape)))
        self._gaussian = isinstance(action_space, gym.spaces.Box)
        self._action_shape = tuple(action_space.shape) if self._gaussian else ()
        self._num_outputs = (int(np.prod(self._action_shape)) if self._gaussian
                             else int(action_space.n))

    def __getattr__(self, name: str) -> Any:
        # Python calls this only for a name the replica does not define. It never
        # forwards: it only says where the attribute is.
        factory = self.__dict__.get("_factory")
        if name.startswith("__") or factory is None:
            raise AttributeError(name)
        raise AttributeError(
            f"{type(self).__name__} (the numpy replica of {factory.qualname}) has no attribute "
            f"{name!r}: a replica only acts; the real {factory.qualname} is "
            "replica.materialize(), and RolloutWorker.get_policy() returns it")

    # -- the real policy ---------------------------------------------------------
    @property
    def materialized(self) -> bool:
        """Whether the real policy has been built (acting, weights and state now go to it)."""
        return self._real is not None

    def materialize(self) -> Any:
        """The real policy, built on first call (importing torch): the class with this
        replica's constructor arguments, then this replica's weights (if it has any),
        settings (``gamma``, ``lambda_``, ``numpy_inference``) and numpy random
        generators. :meth:`~flowrl.workers.RolloutWorker.get_policy` calls it and
        puts the real policy in the replica's place."""
        real = self._real
        if real is None:
            real = self._factory.policy_class()(self.observation_space, self.action_space,
                                                **self._kwargs)
            if self._weights is not None:
                real.set_weights(self._weights)
            real._np_rng, real._action_rng = self._np_rng, self._action_rng
            real.gamma, real.lambda_ = self.gamma, self.lambda_
            real.numpy_inference = self.numpy_inference
            self._real = real
        return real

    def _acts_itself(self, what: str) -> bool:
        """True while acting runs here; False once materialized (the real policy acts).
        A ConfigError before the first :meth:`set_weights`."""
        if self._real is not None:
            return False
        if self._pi is None:
            name = self._factory.qualname
            raise ConfigError(
                f"{type(self).__name__}.{what}: this numpy replica of {name} has no weights "
                f"yet; call set_weights first (a WorkerSet syncs them to every worker it "
                f"starts), or use the real {name} (replica.materialize())")
        return True

    # -- acting ------------------------------------------------------------------
    def _forward(self, mlp: NumpyMLP, x: np.ndarray) -> np.ndarray:
        return in_chunks(mlp, x, self._max_rows)

    def compute_actions(self, obs_batch, explore: bool = True, *,
                        vf_preds: bool = True) -> tuple[np.ndarray, dict]:
        """As :meth:`flowrl.policies.TorchPolicy.compute_actions`, in numpy."""
        if not self._acts_itself("compute_actions"):
            return self._real.compute_actions(obs_batch, explore, vf_preds=vf_preds)
        x = obs_rows(obs_batch, self._obs_dim, self._discrete_obs)
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
        if not self._acts_itself("value"):
            return self._real.value(obs_batch)
        return self._values(obs_rows(obs_batch, self._obs_dim, self._discrete_obs))

    # -- weights -----------------------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        """Model parameters as ``{name: numpy array}`` (copies), named as the real
        policy's ``state_dict``."""
        if not self._acts_itself("get_weights"):
            return self._real.get_weights()
        return {k: v.copy() for k, v in self._weights.items()}

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Load weights from ``get_weights`` of the real class; a ConfigError names
        what does not fit the built-in model for these spaces and settings."""
        if self._real is not None:
            self._real.set_weights(weights)
            return
        shapes = self._weight_shapes()
        where = f"{type(self).__name__}({self._factory.qualname}).set_weights"
        missing, extra = sorted(set(shapes) - set(weights)), sorted(set(weights) - set(shapes))
        if missing or extra:
            raise ConfigError(f"{where}: missing {missing}, unexpected {extra}; weights come "
                              "from another model")
        for k, v in weights.items():
            if tuple(np.shape(v)) != shapes[k]:
                raise ConfigError(f"{where}: {k!r} has shape {np.shape(v)}, expected "
                                  f"{shapes[k]}")
        own = {k: np.array(v, np.float32) for k, v in weights.items()}
        layers: dict[str, dict[int, dict[str, np.ndarray]]] = {"pi": {}, "vf": {}}
        for key, value in own.items():
            match = _LAYER_KEY.match(key)
            if match is not None:
                net, index, kind = match.groups()
                layers[net].setdefault(int(index), {})[kind] = value
        self._pi = _mlp_of(layers["pi"], self._sizes(self._num_outputs), self._activation)
        self._vf = (_mlp_of(layers["vf"], self._sizes(1), self._activation) if self.use_critic
                    else None)
        self._log_std = own.get("log_std")
        self._weights = own
        self._max_rows = max_rows(self._pi, self._vf)

    def _sizes(self, out: int) -> list[int]:
        return [self._obs_dim, *self._hidden, out]

    def _weight_shapes(self) -> dict[str, tuple]:
        """``{name: shape}`` of the built-in model's ``state_dict`` (``ActorCriticModel``:
        ``Linear`` layers at even indices of ``pi`` and ``vf``, ``log_std`` when
        Gaussian) for these spaces and hidden sizes."""
        shapes: dict[str, tuple] = {}
        nets = [("pi", self._num_outputs)] + ([("vf", 1)] if self.use_critic else [])
        for net, out in nets:
            sizes = self._sizes(out)
            for i, (fan_in, fan_out) in enumerate(zip(sizes, sizes[1:])):
                shapes[f"{net}.{2 * i}.weight"] = (fan_out, fan_in)
                shapes[f"{net}.{2 * i}.bias"] = (fan_out,)
        if self._gaussian:
            shapes["log_std"] = (self._num_outputs,)
        return shapes

    # -- checkpoints -------------------------------------------------------------
    def get_state(self) -> dict[str, Any]:
        """For checkpoints: its weights and numpy generators' states marked
        :data:`REPLICA_STATE` (the real policy is not built); once materialized, the
        real policy's state."""
        if not self._acts_itself("get_state"):
            return self._real.get_state()
        return {REPLICA_STATE: True, "weights": self.get_weights(),
                "np_rng": self._np_rng.bit_generator.state,
                "action_rng": self._action_rng.bit_generator.state}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` of a replica returned (of the real class, once
        materialized). A real policy's full state (optimizer, torch generator, ...)
        needs the real policy: a ConfigError says to materialize first
        (:meth:`~flowrl.workers.RolloutWorker.set_state` does)."""
        if self._real is not None:
            set_policy_state(self._real, state)
        elif is_replica_state(state):
            _restore_acting_state(self, state)
        else:
            name = self._factory.qualname
            raise ConfigError(
                f"{type(self).__name__}.set_state: this is a full {name} state (optimizer, "
                f"torch generator, ...), which a numpy replica cannot hold; restore it into "
                f"the real {name}: replica.materialize().set_state(state) "
                "(RolloutWorker.set_state does this)")


def is_replica_state(state: Any) -> bool:
    """Whether ``state`` is a replica's own checkpoint state (:data:`REPLICA_STATE`)."""
    return isinstance(state, dict) and state.get(REPLICA_STATE) is True


def _restore_acting_state(policy: Any, state: dict[str, Any]) -> None:
    """Load a replica's state into ``policy`` (a replica, or a real policy whose other
    state it leaves as it is): its weights, then its numpy generators' states."""
    policy.set_weights(state["weights"])
    policy._np_rng.bit_generator.state = state["np_rng"]
    policy._action_rng.bit_generator.state = state["action_rng"]


def set_policy_state(policy: Any, state: dict[str, Any]) -> None:
    """``policy.set_state(state)``, except that a replica's state (:data:`REPLICA_STATE`)
    sets only what the replica saved, its weights and numpy generators, in a replica
    and in the real class alike (a run that saved with replicas and restores without
    them)."""
    if is_replica_state(state):
        _restore_acting_state(policy, state)
    else:
        policy.set_state(state)


def _mlp_of(layers: dict[int, dict[str, np.ndarray]], sizes: list[int],
            activation=np.tanh) -> NumpyMLP | None:
    """The built-in model's MLP (``Linear`` at even indices with ``activation``
    between) from ``{index: {"weight": (out, in), "bias": (out,)}}``, or None unless
    its layers map ``sizes[0]`` to ``sizes[1]`` ... to ``sizes[-1]``.

    >>> w = {0: {"weight": np.ones((3, 2)), "bias": np.ones(3)},
    ...      2: {"weight": np.ones((1, 3)), "bias": np.ones(1)}}
    >>> _mlp_of(w, [2, 3, 1]) is not None, _mlp_of(w, [2, 4, 1])
    (True, None)
    """
    if sorted(layers) != list(range(0, 2 * (len(sizes) - 1), 2)):
        return None
    out = []
    for i, (index, fan_in, fan_out) in enumerate(zip(sorted(layers), sizes, sizes[1:])):
        w, b = layers[index].get("weight"), layers[index].get("bias")
        if w is None or b is None or w.shape != (fan_out, fan_in) or b.shape != (fan_out,):
            return None
        out.append((w.T, b, activation if i < len(sizes) - 2 else None))
    return NumpyMLP(out)


__all__ = ["ACTING_METHODS", "REPLICA_STATE", "NumpyActing", "NumpyActingPolicy",
           "acting_replica", "is_replica_state", "set_policy_state"]
