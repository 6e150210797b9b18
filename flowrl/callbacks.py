"""Callbacks: user code at fixed points of training, with RLlib 1.x hook names.

Set ``AlgorithmConfig.callbacks`` to a :class:`DefaultCallbacks` subclass, or a list
of them (run in list order, as :class:`MultiCallbacks`), and override the hooks
you need. Every rollout worker (the local one, each remote one: a Ray actor on
the ``"ray"`` backend) builds its own instance, and the episode and sample hooks
run there, where the episode runs; the algorithm builds one more on the driver
for ``on_train_result``. State kept on ``self`` is therefore per process.
Evaluation workers run the episode hooks on the episodes they play too; their
custom metrics are reported in ``result["evaluation"]``.

=====================  ===========================================================
hook                   called
=====================  ===========================================================
``on_episode_start``   after an env reset, before the episode's first step
                       (``worker, base_env, policies, episode, env_index``)
``on_episode_step``    after each env step of the episode, its last included
``on_episode_end``     once the episode ended, after its last ``on_episode_step``
``on_sample_end``      on each fragment a worker's ``sample()`` returns
                       (``worker, samples``); it may change ``samples`` in place
``on_learn_on_batch``  at the start of a policy's ``learn_on_batch``
                       (``policy, train_batch, result``); what it puts in
                       ``result`` is reported as that policy's learner stat
                       ``info/learner/<policy id>/custom_metrics``, from the
                       iteration's last ``learn_on_batch``; not called for
                       ``compute_gradients`` (A3C), as in RLlib 1.x, nor by
                       DD-PPO's workers, which run their SGD themselves
``on_train_result``    on the driver at the end of ``Algorithm.train()``
                       (``algorithm, result``; also ``trainer=``, RLlib 1.x's
                       name); what it adds to ``result`` is in what ``train()``
                       returns
=====================  ===========================================================

``episode`` is a :class:`~flowrl.workers.Episode`: ``episode.custom_metrics[name]
= value`` (a number) reports ``result["custom_metrics"]["<name>_mean"]``,
``_min`` and ``_max`` over the episodes of the reporting window (the
``smoothing_window`` episode statistics use; NaN values left out), which the
JSONL log keeps nested and TensorBoard shows as ``custom_metrics/<name>_mean``;
``episode.hist_data[name] = [numbers]`` reports ``result["hist_stats"][name]``;
``episode.user_data`` is the episode's own storage. ``base_env`` offers
``get_sub_environments()`` (the worker's env copies, ``env_index`` indexes them).
``policies`` is the worker's policy id -> policy map.

Hooks are called with keywords. A hook without ``**kwargs`` gets only the
keywords it names, so both RLlib 1.x's ``on_train_result(self, *, trainer,
result)`` and ``on_train_result(self, *, algorithm, result)`` work. A hook that
raises is an :class:`~flowrl.errors.OperatorError` naming the class and hook
(and the worker), with the exception chained. RLlib 1.x hooks flowrl does not
call (``on_postprocess_trajectory``, ``on_create_policy``,
``on_sub_environment_created``) are refused when overridden, so none is ignored
silently.

With no callbacks configured (or none overriding the episode hooks) the samplers
do no per-step or per-episode callback work (``benchmarks/sampling.py`` measures
sampling against a raw loop).

>>> class EpisodeLength(DefaultCallbacks):
...     def on_episode_end(self, *, worker, episode, **kwargs):
...         episode.custom_metrics["length"] = episode.length
>>> from flowrl.algorithms import PG, PGConfig
>>> algo = PG(PGConfig(env="CartPole-v1", callbacks=EpisodeLength, seed=0))
>>> r = algo.train()
>>> r["custom_metrics"]["length_mean"] == r["episode_len_mean"]
True
>>> algo.stop()
"""

from __future__ import annotations

import functools
import inspect
from typing import Any, Sequence

from flowrl.errors import ConfigError, OperatorError

#: The hooks flowrl calls, in the order a training iteration reaches them.
HOOKS = ("on_episode_start", "on_episode_step", "on_episode_end", "on_sample_end",
         "on_learn_on_batch", "on_train_result")
#: RLlib 1.x hooks flowrl does not call: overriding one is a ConfigError.
UNSUPPORTED_HOOKS = ("on_postprocess_trajectory", "on_create_policy",
                     "on_sub_environment_created")
EPISODE_HOOKS = HOOKS[:3]


class DefaultCallbacks:
    """The base class of callbacks: every hook does nothing. Subclass it and override
    the hooks you need (see the module docstring for when each runs). Each hook
    takes keyword arguments only; keep ``**kwargs`` in your signatures, as RLlib
    1.x advised, so that arguments added later do not break them."""

    def on_episode_start(self, *, worker, base_env, policies, episode, env_index,
                         **kwargs) -> None:
        """After an env reset, before the episode's first step (``episode.length == 0``)."""

    def on_episode_step(self, *, worker, base_env, policies, episode, env_index,
                        **kwargs) -> None:
        """After each env step of ``episode`` (the last one too)."""

    def on_episode_end(self, *, worker, base_env, policies, episode, env_index,
                       **kwargs) -> None:
        """Once ``episode`` ended; ``episode.custom_metrics`` set here are reported."""

    def on_sample_end(self, *, worker, samples, **kwargs) -> None:
        """On each batch ``worker.sample()`` returns (may change it in place)."""

    def on_learn_on_batch(self, *, policy, train_batch, result: dict, **kwargs) -> None:
        """At the start of ``policy.learn_on_batch(train_batch)``; entries put in
        ``result`` appear as the policy's learner stat ``custom_metrics``."""

    def on_train_result(self, *, algorithm, result: dict, **kwargs) -> None:
        """At the end of ``Algorithm.train()``, on the driver; ``result`` may be
        changed in place. ``trainer`` (RLlib 1.x's name) is passed too."""


class MultiCallbacks(DefaultCallbacks):
    """Several :class:`DefaultCallbacks` classes as one: each hook runs theirs in list
    order. ``AlgorithmConfig.callbacks=[A, B]`` means the same; RLlib 1.x code
    writes ``callbacks=MultiCallbacks([A, B])``, whose call builds the instances
    (each worker calls it once), as in RLlib 1.x.

    >>> class A(DefaultCallbacks):
    ...     def on_train_result(self, *, result, **kwargs): result["order"] = ["A"]
    >>> class B(DefaultCallbacks):
    ...     def on_train_result(self, *, result, **kwargs): result["order"].append("B")
    >>> result = {}
    >>> call_hook(MultiCallbacks([A, B])(), "on_train_result", algorithm=None, result=result)
    >>> result
    {'order': ['A', 'B']}
    """

    def __init__(self, callback_class_list: Sequence[type]):
        super().__init__()
        self.callback_class_list = tuple(callback_class_list)
        for cls in self.callback_class_list:
            if not (isinstance(cls, type) and issubclass(cls, DefaultCallbacks)):
                raise ConfigError(f"MultiCallbacks({list(callback_class_list)!r}): {cls!r} is "
                                  "not a DefaultCallbacks subclass; give a list of classes "
                                  "(not instances)")
        self.callbacks: list[DefaultCallbacks] = []

    def __call__(self, *args: Any, **kwargs: Any) -> "MultiCallbacks":
        """A new MultiCallbacks holding a fresh instance of each class."""
        fresh = MultiCallbacks(self.callback_class_list)
        fresh.callbacks = [_instantiate(cls) for cls in self.callback_class_list]
        return fresh

    def _each(self, hook: str, kwargs: dict) -> None:
        for cb in self.callbacks:
            if overrides(cb, hook):
                call_hook(cb, hook, **kwargs)

    def on_episode_start(self, **kwargs) -> None:
        self._each("on_episode_start", kwargs)

    def on_episode_step(self, **kwargs) -> None:
        self._each("on_episode_step", kwargs)

    def on_episode_end(self, **kwargs) -> None:
        self._each("on_episode_end", kwargs)

    def on_sample_end(self, **kwargs) -> None:
        self._each("on_sample_end", kwargs)

    def on_learn_on_batch(self, **kwargs) -> None:
        self._each("on_learn_on_batch", kwargs)

    def on_train_result(self, **kwargs) -> None:
        self._each("on_train_result", kwargs)


def check_callbacks(value: Any, where: str) -> None:
    """A ConfigError naming ``where`` unless ``value`` is None, a
    :class:`DefaultCallbacks` subclass, a non-empty list or tuple of them, or a
    :class:`MultiCallbacks`; also when a class overrides a hook flowrl does not call.

    >>> class Mine(DefaultCallbacks):
    ...     def on_postprocess_trajectory(self, **kwargs): pass
    >>> check_callbacks(Mine, "PPOConfig.callbacks")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: PPOConfig.callbacks: Mine overrides on_postprocess_trajectory, which flowrl does not call; move that code to on_sample_end or on_episode_end
    """
    if value is None:
        return
    if isinstance(value, MultiCallbacks):
        classes: Sequence = value.callback_class_list
    elif isinstance(value, (list, tuple)) and value:
        classes = value
    else:
        classes = [value]
    for cls in classes:
        if not (isinstance(cls, type) and issubclass(cls, DefaultCallbacks)):
            raise ConfigError(f"{where}={value!r}: give a flowrl.callbacks.DefaultCallbacks "
                              "subclass (the class, not an instance) or a list of them")
        for hook in UNSUPPORTED_HOOKS:
            if callable(getattr(cls, hook, None)):
                raise ConfigError(f"{where}: {cls.__name__} overrides {hook}, which flowrl "
                                  "does not call; move that code to on_sample_end or "
                                  "on_episode_end")


def make_callbacks(value: Any) -> DefaultCallbacks:
    """A new callbacks instance for ``value`` (what :func:`check_callbacks` accepts):
    ``DefaultCallbacks()`` for None, a :class:`MultiCallbacks` for a list. A class
    whose constructor raises is a ConfigError naming it."""
    check_callbacks(value, "callbacks")
    if value is None:
        return DefaultCallbacks()
    if isinstance(value, MultiCallbacks):
        return value()
    if isinstance(value, (list, tuple)):
        return MultiCallbacks(value)()
    return _instantiate(value)


def _instantiate(cls: type) -> DefaultCallbacks:
    try:
        return cls()
    except Exception as e:
        raise ConfigError(f"callbacks: {cls.__qualname__}() raised {type(e).__name__}: {e}; "
                          "a callbacks class is built with no arguments on every worker") from e


def overrides(callbacks: DefaultCallbacks, hook: str) -> bool:
    """Whether ``callbacks`` does something in ``hook`` (a MultiCallbacks: whether one
    of its instances does).

    >>> class Mine(DefaultCallbacks):
    ...     def on_sample_end(self, **kwargs): pass
    >>> overrides(Mine(), "on_sample_end"), overrides(Mine(), "on_episode_end")
    (True, False)
    """
    if isinstance(callbacks, MultiCallbacks):
        return any(overrides(cb, hook) for cb in callbacks.callbacks)
    return getattr(type(callbacks), hook, None) is not getattr(DefaultCallbacks, hook)


@functools.lru_cache(maxsize=None)
def _keywords(fn: Any) -> frozenset | None:
    """The keyword names ``fn`` takes, or None when it takes ``**kwargs``."""
    try:
        params = inspect.signature(fn).parameters.values()
    except (TypeError, ValueError):
        return None
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return None
    return frozenset(p.name for p in params
                     if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY))


def call_hook(callbacks: DefaultCallbacks, hook: str, **kwargs: Any) -> None:
    """``callbacks.<hook>(**kwargs)``, passing a hook without ``**kwargs`` only the
    keywords it names. Whatever it raises becomes an OperatorError naming the class,
    the hook and (given ``worker=``) the worker's index, with the exception chained;
    an OperatorError (one from a MultiCallbacks member) passes as it is."""
    fn = getattr(type(callbacks), hook)
    names = _keywords(fn)
    if names is not None:
        kwargs = {k: v for k, v in kwargs.items() if k in names}
    try:
        fn(callbacks, **kwargs)
    except OperatorError:
        raise
    except Exception as e:
        name = f"{type(callbacks).__qualname__}.{hook}"
        worker = kwargs.get("worker")
        where = (f" on rollout worker {worker.worker_index}"
                 if getattr(worker, "worker_index", None) is not None else "")
        raise OperatorError(f"callback {name} raised {type(e).__name__}: {e}{where}; fix "
                            f"{name} (set in AlgorithmConfig.callbacks)",
                            label=name) from e


class SubEnvironments:
    """``base_env`` of the episode hooks: ``get_sub_environments()`` lists the worker's
    env copies (``env_index`` indexes them), as RLlib 1.x's ``BaseEnv`` did;
    ``get_unwrapped()`` is its older name."""

    __slots__ = ("_envs",)

    def __init__(self, envs: list):
        self._envs = list(envs)

    def get_sub_environments(self) -> list:
        return list(self._envs)

    get_unwrapped = get_sub_environments


class EpisodeCallbacks:
    """The episode hooks of one worker's callbacks, as its sampler calls them:
    :meth:`start`, :meth:`step`, :meth:`end` (each does nothing for a hook the
    callbacks do not override). Made by :func:`episode_callbacks`."""

    __slots__ = ("callbacks", "context", "_start", "_step", "_end")

    def __init__(self, callbacks: DefaultCallbacks, *, worker: Any, base_env: SubEnvironments,
                 policies: dict):
        self.callbacks = callbacks
        self.context = {"worker": worker, "base_env": base_env, "policies": policies}
        self._start, self._step, self._end = (overrides(callbacks, h) for h in EPISODE_HOOKS)

    @property
    def policies(self) -> dict:
        return self.context["policies"]

    def start(self, episode: Any) -> None:
        if self._start:
            call_hook(self.callbacks, "on_episode_start", episode=episode,
                      env_index=episode.env_index, **self.context)

    def step(self, episode: Any) -> None:
        if self._step:
            call_hook(self.callbacks, "on_episode_step", episode=episode,
                      env_index=episode.env_index, **self.context)

    def end(self, episode: Any) -> None:
        if self._end:
            call_hook(self.callbacks, "on_episode_end", episode=episode,
                      env_index=episode.env_index, **self.context)


def episode_callbacks(callbacks: DefaultCallbacks, *, worker: Any, envs: list,
                      policies: dict) -> EpisodeCallbacks | None:
    """:class:`EpisodeCallbacks` for a sampler, or None when ``callbacks`` overrides no
    episode hook (the sampler then tracks no episode objects)."""
    if not any(overrides(callbacks, h) for h in EPISODE_HOOKS):
        return None
    return EpisodeCallbacks(callbacks, worker=worker, base_env=SubEnvironments(envs),
                            policies=policies)


def learn_callbacks(policy: Any, train_batch: Any) -> dict | None:
    """For a policy's ``learn_on_batch``: run its ``callbacks.on_learn_on_batch`` (set
    by the worker that owns it when the hook is overridden) and return the
    ``result`` dict it filled, to be reported as the learner stat
    ``custom_metrics``; None when there is no such hook."""
    callbacks = getattr(policy, "callbacks", None)
    if callbacks is None:
        return None
    result: dict = {}
    call_hook(callbacks, "on_learn_on_batch", policy=policy, train_batch=train_batch,
              result=result)
    return result


__all__ = ["DefaultCallbacks", "MultiCallbacks", "HOOKS", "check_callbacks", "make_callbacks",
           "call_hook", "overrides", "episode_callbacks", "EpisodeCallbacks",
           "SubEnvironments", "learn_callbacks"]
