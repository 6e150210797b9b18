"""Calls to workers: one interface for in-process objects and Ray actors.

Everything outside the backends that talks to a worker (the WorkerSet, replay
actors, metrics collection, weight sends) goes through a :class:`Calls`:
``create`` an actor, ``call`` a method (a *pending call*), ``wait`` for pending
calls and ``get`` one result with a bound, ``put`` an object every call shares,
``kill`` an actor. :data:`IN_PROCESS` is the implementation for plain objects
(a call runs at once, in the caller; its exception is raised by ``call``, as a
direct call would); the Ray one is :class:`flowrl.runtime.ray_backend.RayCalls`
(a call is one ``.remote()``). :func:`calls_for` picks one for a handle,
:func:`calls_for_backend` for a backend name.

Errors of ``get``: a worker that died or did not answer within the bound is a
:class:`~flowrl.errors.WorkerError` marked as a lost host
(:func:`~flowrl.runtime.backend.lost_reason` gives why), whose message names the
worker and the setting that bounds the wait; callers replace, drop or raise.
Any other failure is the remote exception itself (Ray: its ``cause`` is the
worker's exception, see :func:`remote_cause`).

:class:`PendingCalls` tracks calls sent and not awaited (weight syncs, replay
adds). State: per call, its pending handle, the caller's key, a label and when
it was sent, in submission order.

This module imports Ray only inside functions, so the in-process path never does.
"""

from __future__ import annotations

import importlib
from abc import ABC, abstractmethod
import os
import sys
import threading
import time
from typing import Any, Callable, Sequence

# Defined in flowrl.defaults; the runtime's and the workers' modules take them from here.
from flowrl.defaults import CALL_TIMEOUT_S, START_WAIT_S  # noqa: F401
from flowrl.errors import ConfigError, WorkerError
from flowrl.runtime.backend import host_lost

#: The backends a plan, a WorkerSet or an algorithm runs on (:func:`resolve_backend`).
BACKENDS = ("auto", "local", "ray")
#: ``ray.init`` arguments when :func:`ensure_ray` starts Ray for a plan (no CPU count
#: asked for; the address is resolved by Ray: ``RAY_ADDRESS``, then the latest local
#: cluster, else a new local instance).
INIT_DEFAULTS = {"include_dashboard": False}


def is_actor_handle(obj: Any) -> bool:
    """Whether ``obj`` is a Ray actor handle (checked without importing Ray)."""
    return type(obj).__name__ == "ActorHandle" and type(obj).__module__.startswith("ray")


def ray_running() -> bool:
    """Whether this process is connected to Ray (False when Ray was never imported)."""
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


def resolve_backend(backend: Any, where: str, *, reads_actors: bool = False,
                    creates: int = 0) -> str:
    """The backend ``where`` runs on, ``"local"`` or ``"ray"``: the one place a backend
    name is checked and ``"auto"`` resolved. Plans (``compile``), WorkerSets,
    algorithms and their evaluation workers all ask it.

    ``reads_actors``: the caller reads Ray actor handles (a plan's ``from_actors``
    over Ray actors, a WorkerSet made from existing ones). ``creates``: how many
    remote hosts the caller creates itself (a WorkerSet's ``num_workers``).

    ``"auto"`` picks ``"ray"`` when the caller reads Ray actor handles, or creates
    remote hosts while this process is connected to Ray; else ``"local"``. So
    ``"auto"`` never starts Ray. ConfigError naming ``where`` for a name not in
    :data:`BACKENDS`, and for ``"local"`` over Ray actor handles (an in-process run
    cannot reach them).

    >>> resolve_backend("auto", "compile"), resolve_backend("auto", "compile", reads_actors=True)
    ('local', 'ray')
    >>> resolve_backend("auto", "WorkerSet", creates=2) == ("ray" if ray_running() else "local")
    True
    >>> resolve_backend("threads", "WorkerSet")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: WorkerSet(backend='threads'): unknown backend; use one of ['auto', 'local', 'ray']
    """
    if backend not in BACKENDS:
        raise ConfigError(f"{where}(backend={backend!r}): unknown backend; use one of "
                          f"{list(BACKENDS)}")
    if backend == "auto":
        return "ray" if reads_actors or (creates > 0 and ray_running()) else "local"
    if backend == "local" and reads_actors:
        raise ConfigError(f"{where}(backend='local'): it reads Ray actor handles "
                          "(from_actors); use backend='ray' or 'auto'")
    return backend


def require_ray(where: str) -> None:
    """ConfigError naming ``where`` unless this process is connected to Ray (for
    callers that create Ray actors and leave ``ray.init()`` to the user)."""
    if not ray_running():
        raise ConfigError(f"{where}(backend='ray'): Ray is not initialised; call "
                          "ray.init() first or use backend='local'")


def ensure_ray(num_cpus: float | None = None, *, preload: Sequence[str] = ()) -> None:
    """Start Ray if it is not running.

    With ``num_cpus`` (algorithms): the cluster at ``RAY_ADDRESS`` if set (other
    than ``"local"``), else a new local instance with ``num_cpus`` CPUs, no
    dashboard and no log forwarding. Without (a plan compiled for Ray):
    ``ray.init(**INIT_DEFAULTS)``.

    ``preload`` names modules (say the policy's, which imports torch) to import in a
    background thread while ``ray.init`` runs on the main thread: ``ray.init`` mostly
    waits for the processes it spawns, so the import overlaps that wait instead of
    following it (``benchmarks/startup.py`` times both). An import that fails there
    is left for the caller's own import of the module to report.
    """
    import ray
    if ray.is_initialized():
        return
    loader = None
    if preload:
        loader = threading.Thread(target=_import_quietly, args=(list(preload),),
                                  name="flowrl-preload", daemon=True)
        loader.start()
    try:
        address = os.environ.get("RAY_ADDRESS")
        if num_cpus is None:
            ray.init(**INIT_DEFAULTS)
        elif address and address != "local":
            ray.init(address=address, log_to_driver=False)
        else:  # "local" starts a new instance, as in ray.init; with our options
            ray.init(address=address or None, num_cpus=int(max(1, num_cpus)),
                     include_dashboard=False, log_to_driver=False)
    finally:
        if loader is not None:
            loader.join()


def _import_quietly(modules: list[str]) -> None:
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001  (the caller's own import reports it)
            continue


def remote_cause(error: BaseException) -> BaseException:
    """The worker's own exception behind ``error`` from :meth:`Calls.get` (Ray wraps
    it; an in-process call raises it as is)."""
    return getattr(error, "cause", None) or error


def lost_error(label: str, reason: str, detail: str) -> WorkerError:
    """The WorkerError for worker ``label`` lost for ``reason`` (a lost host)."""
    return host_lost(WorkerError(f"{label} {detail}"), reason)


class Calls(ABC):
    """How the driver calls workers; see the module docstring. Handles are whatever
    :meth:`create` returned (or workers created elsewhere of the same kind)."""

    name: str = ""
    #: Whether workers live in their own processes: ``create`` returns before the
    #: worker is built, a worker gets its own torch threads, a warm spare pays.
    remote: bool = False

    @abstractmethod
    def create(self, cls: type, *args: Any, num_cpus: float = 1.0,
               on_driver_node: bool = False, python_path: Sequence[str] = (),
               **kwargs: Any) -> Any:
        """A new worker ``cls(*args, **kwargs)`` with ``num_cpus`` reserved (Ray),
        pinned to the driver's node when ``on_driver_node`` (Ray). ``python_path``:
        directories the worker's process imports from before its own ``PYTHONPATH``
        (Ray: the actor's ``runtime_env``; in-process the driver's ``sys.path``
        applies), for user modules found where a fresh process would not look
        (:func:`flowrl.user_code.module_roots`)."""

    @abstractmethod
    def call(self, handle: Any, method: str, *args: Any) -> Any:
        """Start ``handle.method(*args)``; returns its pending call."""

    def apply(self, handle: Any, fn: Callable[..., Any], *args: Any) -> Any:
        """Start ``fn(worker, *args)`` where worker ``handle`` lives (an actor runs it
        through its ``apply`` method); returns the pending call."""
        return self.call(handle, "apply", fn, *args)

    @abstractmethod
    def wait(self, pending: Sequence[Any], timeout: float | None) -> list:
        """The calls among ``pending`` that are done, waiting at most ``timeout`` s for
        all of them (0: only look); in the order given."""

    async def wait_async(self, pending: Sequence[Any], timeout: float | None) -> list:
        """:meth:`wait`, awaited: a blocking wait runs on the running loop's default
        executor, so the loop's other tasks keep moving."""
        return self.wait(pending, timeout)

    @abstractmethod
    def get(self, pending: Any, *, timeout: float | None, label: str, setting: str) -> Any:
        """The result of ``pending``, waiting at most ``timeout`` s. A dead or silent
        worker (``label``) is a lost-host WorkerError naming ``setting``. ``None``
        waits as long as it takes: only for a wait that another call ends (a
        helper actor killed when the run stops)."""

    def put(self, obj: Any) -> Any:
        """``obj`` as an argument shared by many calls (Ray: stored once)."""
        return obj

    @abstractmethod
    def kill(self, handle: Any) -> None:
        """End worker ``handle`` (Ray: kill its process; in-process: its ``stop()``,
        if it has one). Never raises for a worker already gone."""


class _Done:
    """An in-process call: it already ran."""

    __slots__ = ("value",)

    def __init__(self, value: Any):
        self.value = value


class InProcessCalls(Calls):
    """Calls on plain objects: each runs at once, in the caller."""

    name = "local"

    def create(self, cls: type, *args: Any, num_cpus: float = 1.0,
               on_driver_node: bool = False, python_path: Sequence[str] = (),
               **kwargs: Any) -> Any:
        return cls(*args, **kwargs)

    def call(self, handle: Any, method: str, *args: Any) -> _Done:
        return _Done(getattr(handle, method)(*args))

    def apply(self, handle: Any, fn: Callable[..., Any], *args: Any) -> _Done:
        return _Done(fn(handle, *args))  # any object will do, as a direct call would

    def wait(self, pending: Sequence[Any], timeout: float | None) -> list:
        return list(pending)

    def get(self, pending: _Done, *, timeout: float | None, label: str, setting: str) -> Any:
        return pending.value

    def kill(self, handle: Any) -> None:
        stop = getattr(handle, "stop", None)
        if callable(stop):
            stop()


#: The in-process :class:`Calls`.
IN_PROCESS = InProcessCalls()


def calls_for_backend(backend: str) -> Calls:
    """The :class:`Calls` of ``backend`` (``"local"`` or ``"ray"``)."""
    if backend == "ray":
        from flowrl.runtime.ray_backend import RAY_CALLS
        return RAY_CALLS
    return IN_PROCESS


def calls_for(handle: Any) -> Calls:
    """The :class:`Calls` that reaches ``handle`` (a Ray actor handle or an object)."""
    return calls_for_backend("ray" if is_actor_handle(handle) else "local")


class PendingCalls:
    """Calls sent and not awaited yet, so that none is forgotten.

    ``add(key, pending, label)`` records one (``key``: the caller's, e.g. a worker
    index). :meth:`finished` takes the ones done (waiting at most ``wait_s`` for
    ``num`` of them) and returns ``(key, error or None)`` per call, in submission
    order; :meth:`overdue` takes the ones pending longer than their bound.

    >>> p = PendingCalls(IN_PROCESS)
    >>> p.add(1, IN_PROCESS.call([], "append", 0), "list 1")
    >>> len(p), p.finished(), len(p)
    (1, [(1, None)], 0)
    """

    def __init__(self, calls: Calls):
        self.calls = calls
        self._calls: list[tuple[Any, Any, str, float]] = []  # (key, pending, label, sent)

    def __len__(self) -> int:
        return len(self._calls)

    def add(self, key: Any, pending: Any, label: str) -> None:
        self._calls.append((key, pending, label, time.monotonic()))

    def oldest(self) -> Any:
        """The key of the oldest pending call (None when none is pending)."""
        return self._calls[0][0] if self._calls else None

    def time_left(self, bound: Callable[[Any], float]) -> float:
        """Seconds until the last of the pending calls is due (``bound(key)`` after it
        was sent); 0 when none is pending."""
        now = time.monotonic()
        return max([max(0.0, sent + bound(key) - now) for key, _, _, sent in self._calls],
                   default=0.0)

    def finished(self, *, wait_s: float = 0.0, num: int | None = None) -> list[tuple[Any, Any]]:
        """Take the calls that are done (waiting at most ``wait_s`` for ``num`` of them,
        default all): ``(key, None)`` for a success, ``(key, error)`` for a failure."""
        if not self._calls:
            return []
        pending = [p for _, p, _, _ in self._calls]
        if num is not None and wait_s > 0:
            ready = self._wait_for(pending, wait_s, num)
        else:
            ready = self.calls.wait(pending, wait_s)
        ready_ids = {id(p) for p in ready}
        out, keep = [], []
        for entry in self._calls:
            key, p, label, _ = entry
            if id(p) not in ready_ids:
                keep.append(entry)
                continue
            try:
                self.calls.get(p, timeout=0, label=label, setting="")
                out.append((key, None))
            except Exception as e:  # noqa: BLE001 - the caller classifies it
                out.append((key, e))
        self._calls = keep
        return out

    def _wait_for(self, pending: list, wait_s: float, num: int) -> list:
        deadline = time.monotonic() + wait_s
        ready = self.calls.wait(pending, 0)
        while len(ready) < num:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            # One wait for the first not-done call: calls to one worker finish in order.
            rest = [p for p in pending if all(p is not r for r in ready)]
            self.calls.wait(rest[:1], left)
            ready = self.calls.wait(pending, 0)
        return ready

    def overdue(self, bound: Callable[[Any], float] | None = None) -> list[Any]:
        """Take and return the keys of calls pending longer than ``bound(key)`` (all of
        the pending calls when ``bound`` is None)."""
        now = time.monotonic()
        late = [e for e in self._calls if bound is None or now - e[3] > bound(e[0])]
        self._calls = [e for e in self._calls if all(e is not x for x in late)]
        return [e[0] for e in late]


__all__ = ["BACKENDS", "CALL_TIMEOUT_S", "START_WAIT_S", "Calls",
           "InProcessCalls", "IN_PROCESS", "PendingCalls", "calls_for", "calls_for_backend",
           "ensure_ray", "is_actor_handle", "ray_running", "remote_cause", "resolve_backend",
           "require_ray"]
