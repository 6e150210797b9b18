"""Submitting one argument-free actor call, with its options resolved once.

Policy: ``ActorMethod.remote()`` resolves the method's options, wraps the call for
tracing and auto-init and checks tensor transport on every call, before it hands
the call to Ray's core worker. A gather's pulls are the same argument-free call
to the same actor thousands of times, and that per-call Python is a visible
share of what an item costs the driver (``benchmarks/ray_overhead.py``).
:func:`direct_call` resolves the options once, exactly as ``remote()`` would,
and returns a callable that submits with them through the core worker, the call
``remote()`` itself ends in.

The core worker's ``submit_actor_task`` is Ray-internal. The shortcut is taken
only where it cannot differ from ``remote()``: the installed Ray's
``submit_actor_task`` has the parameters this module was written against
(:data:`SUBMIT_PARAMS`, ray 2.58), tracing is off, and the method takes no
arguments, returns one object, has no decorator, tensor transport or exception
allow-list. Anywhere else :func:`direct_call` returns ``method.remote`` itself.
``tests/test_ray_submit.py`` checks, call by call, that both submit the same
task. State: none beyond a per-process cache of the parameter check.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

import ray

#: ``CoreWorker.submit_actor_task``'s parameters in the Ray this module follows.
SUBMIT_PARAMS = (
    "self", "language", "actor_id", "function_descriptor", "args", "name", "num_returns",
    "max_retries", "retry_exceptions", "retry_exception_allowlist", "num_method_cpus",
    "concurrency_group_name", "generator_backpressure_num_objects",
    "num_objects_per_yield", "enable_task_events", "tensor_transport", "labels")


@functools.cache
def submit_matches() -> bool:
    """Whether the installed Ray's ``submit_actor_task`` takes :data:`SUBMIT_PARAMS`."""
    try:
        from ray._raylet import CoreWorker
        params = tuple(inspect.signature(CoreWorker.submit_actor_task).parameters)
    except (ImportError, AttributeError, TypeError, ValueError):
        return False
    return params == SUBMIT_PARAMS


def _tracing_enabled() -> bool:
    try:
        from ray.util.tracing.tracing_helper import _is_tracing_enabled
    except ImportError:
        return True  # unknown: take the public path
    return bool(_is_tracing_enabled())


def _no_arguments(params: list[inspect.Parameter]) -> bool:
    """Whether a method of this signature can be called with no arguments (Ray adds
    ``_ray_trace_ctx=None`` to every actor method's)."""
    optional = (inspect.Parameter.VAR_POSITIONAL, inspect.Parameter.VAR_KEYWORD)
    return all(p.default is not p.empty or p.kind in optional for p in params)


def direct_call(method: Any) -> Callable[[], ray.ObjectRef]:
    """A callable that does ``method.remote()`` for an argument-free actor method.

    It submits the same task as ``method.remote()`` (same options, retries, task
    events and resources) and returns its ``ObjectRef``, without re-resolving the
    options on every call. Where that could differ from ``remote()`` (see the
    module docstring) it is ``method.remote`` itself.
    """
    call = method.remote
    if not submit_matches() or _tracing_enabled():
        return call
    try:
        actor, name = method._actor, method._method_name
        simple = (method._num_returns == 1 and method._decorator is None
                  and method._tensor_transport is None
                  and not getattr(method, "_is_generator", False)
                  and not actor._ray_is_cross_language
                  and _no_arguments(actor._ray_method_signatures[name])
                  and isinstance(method._retry_exceptions, (bool, type(None))))
        if not simple:
            return call
        # What remote() and _actor_method_call pass for these options.
        language, actor_id = actor._ray_actor_language, actor._ray_actor_id
        descriptor = actor._ray_function_descriptor[name]
        retries = method._max_task_retries or 0
        retry_exceptions = bool(method._retry_exceptions)
        cpus = actor._ray_actor_method_cpus
        backpressure = method._generator_backpressure_num_objects
        backpressure = -1 if backpressure is None else backpressure
        per_yield = method._num_objects_per_yield
        per_yield = 1 if per_yield is None else per_yield
        events = method._enable_task_events
    except (AttributeError, KeyError, TypeError):
        return call
    worker = ray._private.worker.global_worker

    def submit() -> ray.ObjectRef:
        refs = worker.core_worker.submit_actor_task(
            language, actor_id, descriptor, [], "", 1, retries, retry_exceptions, None,
            cpus, b"", backpressure, per_yield, events, None, None)
        return refs[0]

    submit.method = method  # keeps the handle (and so the actor) alive with the callable
    return submit
