"""``WorkerSet``: one local rollout worker on the driver plus ``num_workers`` remote ones.

The local worker holds the policies the learner trains; remote workers sample.
With ``backend="ray"`` the remote workers are Ray actors
(``ray.remote(RolloutWorker)``, ``num_cpus_per_worker`` CPUs each, one torch thread
each); with ``backend="local"`` they are in-process :class:`RolloutWorker`
instances, which the local runtime steps exactly like actors (useful for tests and
debugging). ``backend="auto"`` picks ``"ray"`` when ``num_workers > 0`` and Ray is
already initialised, else ``"local"`` (:func:`~flowrl.runtime.calls.resolve_backend`);
a WorkerSet never calls ``ray.init()`` for you.

Ray workers are created in parallel: every actor is submitted first, the local
worker is built while they start, and the constructor returns once all of them
are ready (a worker that fails to start raises :class:`~flowrl.errors.WorkerError`).
With ``create_env_on_driver=False`` and remote workers, the local worker makes no
env: it waits for the remote workers and builds its policies from the spaces
remote worker 1 reports (as RLlib 1.x does). Remote workers start with the local
worker's weights. ``stop()`` releases only the
workers this set created (not those passed to :meth:`WorkerSet.from_existing`).

Every call to a remote worker goes through the backend's calls
(:mod:`flowrl.runtime.calls`): one code path for Ray actors and in-process
workers, each wait bounded by ``sample_timeout_s`` (or
:data:`~flowrl.defaults.REMOTE_TIMEOUT_S`). The set composes
units, each with its own policy and state:

- :mod:`flowrl.runtime.recovery` (``recovery``): a remote worker that dies or does
  not answer is replaced (``recreate_failed_workers``), dropped
  (``ignore_worker_failures``) or a :class:`~flowrl.errors.WorkerError` naming it;
  each replacement counts once in ``num_worker_restarts``. The set is the
  recovery's :class:`~flowrl.runtime.recovery.Replaceable` hosts: ``foreach_worker``
  and ``sync_weights`` hand it the workers they find lost, and so do plans reading
  :func:`rollout_shards`, through ``from_actors(restart=workers.restarter(...))``.
- :mod:`flowrl.workers.spares` (``starts``, ``spares``): a replacement's start wait,
  and, once a set has replaced a worker (Ray), one warm spare started, so the next
  replacement skips its process start.
- :mod:`flowrl.workers.broadcast`: ``sync_weights`` sends the local worker's weights
  to every remote worker without waiting, and tracks every send until it answers.

>>> from flowrl.policies import PGPolicy
>>> ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=5, seed=0),
...                num_workers=2, backend="local")
>>> len(ws.remote_workers()), ws.foreach_worker(lambda w: w.worker_index)
(2, [0, 1, 2])
>>> ws.stop()
"""

from __future__ import annotations

import dataclasses
import functools
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from flowrl.defaults import REMOTE_TIMEOUT_S
from flowrl.errors import ConfigError, EnvError, WorkerError
from flowrl.runtime.backend import lost_reason
from flowrl.runtime.calls import (START_WAIT_S, Calls, calls_for_backend, is_actor_handle,
                                  remote_cause, require_ray, resolve_backend)
from flowrl.runtime.recovery import Recovery, Replaceable, ShardRecovery
from flowrl.workers.broadcast import WeightBroadcast
from flowrl.workers.rollout_worker import PolicySpec, RolloutWorker
from flowrl.workers.spares import SpareWorkers, StartingWorkers, rebuild_worker


@dataclass
class WorkerConfig:
    """Settings every rollout worker of a :class:`WorkerSet` is built with.

    ``policy_config`` holds the policy's keyword hyperparameters (``lr``,
    ``gamma``, ``lambda_``, ``hidden_sizes``...). For multi-agent envs set
    ``policies`` (policy id -> :class:`PolicySpec`), ``policy_mapping_fn`` and
    optionally ``policies_to_train``; the WorkerSet's ``policy`` argument is then
    ignored. ``remote_torch_threads`` is applied inside Ray worker processes only.
    ``preprocessor_pref`` (``"deepmind"`` or None) is how workers wrap ``ALE/``
    env ids (:func:`flowrl.envs.make_atari`); it travels like ``env_config``.
    ``training=False`` makes the workers' envs for evaluation (Atari: whole games,
    raw scores; :func:`~flowrl.workers.rollout_worker.make_env_creator`).
    ``callbacks`` (a :class:`~flowrl.callbacks.DefaultCallbacks` subclass or a list
    of them) travels like ``env_config``: each worker builds its own instance.
    ``vector_env`` (``"sync"`` or ``"async"``) is how each worker steps its envs
    (:func:`~flowrl.workers.rollout_worker.make_vector_env`).
    ``create_env_on_driver`` (RLlib 1.x's name): whether the local worker makes
    envs when there are remote workers; with False it has none (its policies take
    the remote workers' spaces) and cannot sample. True here, so a WorkerSet built
    by hand keeps a driver worker that samples; algorithms pass their config's
    (``AlgorithmConfig.create_env_on_driver``, default False as in RLlib 1.x).
    Without remote workers the local worker always has envs.
    ``imports`` names modules every worker imports before it makes its env and
    policies (``AlgorithmConfig.imports``: modules that register envs or models);
    ``python_path`` directories remote workers import from
    (:meth:`~flowrl.runtime.calls.Calls.create`), where the driver found the
    modules the config names (:func:`flowrl.user_code.module_roots`).
    ``input``, ``input_config``, ``postprocess_inputs``, ``output`` and
    ``output_config`` are the workers' offline settings (:class:`RolloutWorker`):
    each remote worker reads its own share of an ``input`` dataset and writes its own
    ``output`` files.

    >>> WorkerConfig(num_envs_per_worker=0)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: WorkerConfig.num_envs_per_worker=0: must be an int >= 1
    """

    env_config: dict = field(default_factory=dict)
    num_envs_per_worker: int = 1
    rollout_fragment_length: int = 200
    seed: int | None = None
    explore: bool = True
    policy_config: dict = field(default_factory=dict)
    policies: dict[str, PolicySpec] | None = None
    policy_mapping_fn: Callable[..., str] | None = None
    policies_to_train: Sequence[str] | None = None
    num_cpus_per_worker: float = 1.0
    remote_torch_threads: int | None = 1
    recreate_failed_workers: bool = True
    ignore_worker_failures: bool = False
    max_worker_restarts: int | None = None
    sample_timeout_s: float | None = None
    preprocessor_pref: str | None = "deepmind"
    training: bool = True
    callbacks: Any = None
    vector_env: str = "sync"
    create_env_on_driver: bool = True
    imports: Sequence[str] = ()
    python_path: Sequence[str] = ()
    input: Any = "sampler"
    input_config: dict = field(default_factory=dict)
    postprocess_inputs: bool = False
    output: str | None = None
    output_config: dict = field(default_factory=dict)

    @property
    def tolerates_failures(self) -> bool:
        """Whether a lost remote worker is replaced or dropped rather than fatal."""
        return self.recreate_failed_workers or self.ignore_worker_failures

    def __new__(cls, *args: Any, **fields: Any) -> "WorkerConfig":
        if "numpy_replicas" in fields:
            raise ConfigError("WorkerConfig(numpy_replicas=...): this field was removed; remote "
                              "workers act through the real policy, whose numpy acting gives "
                              "the same actions: drop the argument")
        return super().__new__(cls)

    def __post_init__(self) -> None:
        for name in ("num_envs_per_worker", "rollout_fragment_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"WorkerConfig.{name}={value!r}: must be an int >= 1")
        if self.num_cpus_per_worker < 0:
            raise ConfigError(f"WorkerConfig.num_cpus_per_worker={self.num_cpus_per_worker!r}: "
                              "must be >= 0")
        if self.policies is not None and len(self.policies) > 1 and self.policy_mapping_fn is None:
            raise ConfigError("WorkerConfig.policy_mapping_fn is None but policies has "
                              f"{len(self.policies)} entries; give policy_mapping_fn(agent_id)")

    def worker_kwargs(self, policy: Callable[..., Any] | None) -> dict[str, Any]:
        """Keyword arguments for :class:`RolloutWorker` (besides env and index)."""
        kwargs: dict[str, Any] = dict(
            env_config=self.env_config, num_envs=self.num_envs_per_worker,
            rollout_fragment_length=self.rollout_fragment_length, seed=self.seed,
            explore=self.explore, policies_to_train=self.policies_to_train,
            preprocessor_pref=self.preprocessor_pref, training=self.training,
            callbacks=self.callbacks, vector_env=self.vector_env, imports=tuple(self.imports),
            input=self.input, input_config=self.input_config,
            postprocess_inputs=self.postprocess_inputs, output=self.output,
            output_config=self.output_config)
        if self.policies is not None:
            kwargs.update(policies=self.policies, policy_mapping_fn=self.policy_mapping_fn)
        else:
            kwargs.update(policy=policy, policy_config=self.policy_config)
        return kwargs


class WorkerSet(Replaceable):
    """A local :class:`RolloutWorker` plus remote ones; see the module docstring.

    It composes units, each readable alone: :class:`~flowrl.runtime.recovery.Recovery`
    (``recovery``: what becomes of a lost worker, and the restart count),
    :class:`StartingWorkers` (``starts``), :class:`SpareWorkers` (``spares``) and
    :class:`WeightBroadcast` (``broadcast``). Every call to a remote worker goes
    through ``calls`` (:mod:`flowrl.runtime.calls`), the same code for Ray actors and
    in-process workers.
    """

    def __init__(self, env, policy: Callable[..., Any] | None = None,
                 config: WorkerConfig | None = None, num_workers: int = 0,
                 backend: str = "auto"):
        config = config or WorkerConfig()
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ConfigError(f"WorkerSet(num_workers={num_workers!r}): must be an int >= 0")
        backend = resolve_backend(backend, "WorkerSet", creates=num_workers)
        if policy is None and config.policies is None:
            raise ConfigError("WorkerSet: give a policy class, or config.policies for "
                              "multi-agent")
        if backend == "ray":
            require_ray("WorkerSet")
        kwargs = {**config.worker_kwargs(policy), "num_workers": num_workers}
        self._env = env
        self._remote_kwargs = kwargs
        self._setup(config, calls_for_backend(backend), [], owned=True)
        calls = self.calls
        env_on_driver = config.create_env_on_driver or num_workers == 0
        try:
            # Actors start in parallel with each other and with the local worker's build;
            # a local worker without env needs the remote workers' spaces first.
            remotes_first = calls.remote or not env_on_driver
            if remotes_first:
                self._remotes = [self._create(i) for i in range(1, num_workers + 1)]
                self._indices = list(range(1, len(self._remotes) + 1))
            if env_on_driver:
                self._local = RolloutWorker(env, worker_index=0, **kwargs)
            else:
                self._local = RolloutWorker(env, worker_index=0, spaces=self._remote_spaces(),
                                            **kwargs)
            if not remotes_first:
                self._remotes = [self._create(i) for i in range(1, num_workers + 1)]
            self._indices = list(range(1, len(self._remotes) + 1))
            if self._remotes:
                self.sync_weights()
            self._wait_ready()
        except BaseException:
            for w in self._remotes:
                calls.kill(w)
            raise

    def _setup(self, config: WorkerConfig | None, calls: Calls, remotes: list, *,
               owned: bool) -> None:
        self.backend = calls.name
        self.config = config
        self.calls = calls
        self._owned = owned
        self._remotes = list(remotes)
        self._indices = list(range(1, len(self._remotes) + 1))
        # Replacements may be made on the driver's thread or, for workers lost inside an
        # aggregator, on the run's recovery-relay thread: one at a time.
        self._lock = threading.RLock()
        replaces = (config is not None and config.recreate_failed_workers
                    and not config.ignore_worker_failures)
        self.recovery = Recovery(
            self, replaces=replaces, setting="max_worker_restarts", lock=self._lock,
            max_restarts=None if config is None else config.max_worker_restarts)
        self.starts = StartingWorkers(calls)
        self.spares = SpareWorkers(calls, functools.partial(self._create, num_cpus=0),
                                   self._lock)
        self.broadcast = WeightBroadcast(
            calls, bound=self._bound,
            failed=lambda idx, w, e: self._call_failed(idx, w, e, "sync_weights"),
            silent=lambda idx, w: self._lost(
                idx, w, f"set_weights not answered within {self.timeout_s:g} s "
                        "(sample_timeout_s)", "sync_weights"))

    @classmethod
    def from_existing(cls, local_worker: Any, remote_workers: Sequence = ()) -> "WorkerSet":
        """Wrap workers created elsewhere; ``stop()`` will leave them running.

        Workers are duck-typed: any object (or Ray actor of a class) with the methods
        the plan calls (``sample``, ``compute_gradients``, ``apply_gradients``,
        ``get_weights``, ``set_weights``...) will do. The backend is ``"ray"`` when
        the remotes are Ray actor handles, else ``"local"``.
        """
        self = cls.__new__(cls)
        self._local = local_worker
        backend = resolve_backend("auto", "WorkerSet.from_existing",
                                  reads_actors=any(is_actor_handle(w) for w in remote_workers))
        self._setup(None, calls_for_backend(backend), list(remote_workers), owned=False)
        return self

    def local_worker(self) -> RolloutWorker:
        """The driver's worker (holds the policies the learner trains)."""
        return self._local

    def remote_workers(self) -> list:
        """Remote workers: Ray actor handles, or in-process workers (local backend)."""
        return list(self._remotes)

    @property
    def timeout_s(self) -> float:
        """Bound on each remote call this set waits for (``sample_timeout_s``, or
        :data:`~flowrl.defaults.REMOTE_TIMEOUT_S` when it is None)."""
        t = self.config.sample_timeout_s if self.config is not None else None
        return REMOTE_TIMEOUT_S if t is None else t

    @property
    def num_restarts(self) -> int:
        """Replacements made (the run's ``num_worker_restarts`` once a run counts them:
        :meth:`~flowrl.runtime.recovery.Recovery.count_in`)."""
        return self.recovery.num_restarts

    @property
    def num_dropped(self) -> int:
        """Workers dropped (``ignore_worker_failures``; the run's
        ``num_dropped_workers`` once a run counts them)."""
        return self.recovery.num_dropped

    @property
    def tolerates_failures(self) -> bool:
        """Whether a lost remote worker is replaced or dropped rather than a WorkerError."""
        return self.config is not None and self.config.tolerates_failures

    def worker_indices(self) -> list[int]:
        """``worker_index`` of each of :meth:`remote_workers`, in the same order."""
        return list(self._indices)

    def _versions(self) -> dict[str, int] | None:
        """The local worker's policy versions, sent with its weights (None for a
        duck-typed local worker, whose ``set_weights`` takes only the weights)."""
        return (dict(self._local.policy_versions) if isinstance(self._local, RolloutWorker)
                else None)

    def sync_weights(self, policies: Sequence[str] | None = None, *, wait: bool = False) -> None:
        """Send the local worker's weights to every remote worker (:class:`WeightBroadcast`).

        Ray: one ``ray.put`` per broadcast, then ``set_weights`` on each actor, in
        submission order, so each worker's next ``sample()`` uses the new weights.
        The calls are not awaited, but none is forgotten: a failed ``set_weights``
        raises a :class:`~flowrl.errors.WorkerError` naming the worker at the next
        ``sync_weights`` (or now, with ``wait=True``, which waits for all of them,
        each bounded by :attr:`timeout_s`). A worker found dead or silent is
        replaced or dropped when the set tolerates failures.
        """
        weights = self._local.get_weights(policies) if self._remotes else None
        self.broadcast.send(weights, list(zip(self._indices, self._remotes)), wait=wait,
                            versions=self._versions())

    def foreach_worker(self, fn: Callable[[RolloutWorker], Any], *,
                       skip_starting: bool = False) -> list:
        """``fn(worker)`` on every worker, local first then remotes in order.

        Each remote call is bounded by :attr:`timeout_s`. A worker that died or
        did not answer in time is replaced or dropped when the set tolerates
        failures (its result is then missing from the list: the list holds one
        result per worker that answered), else it is a WorkerError naming it.
        With ``skip_starting`` (metrics collection) a replacement still starting is
        not waited for, so the plan's other workers do not idle meanwhile: ``fn`` is
        queued on it and runs before its next request, and its result is left out
        of the list.
        """
        results = [fn(self._local)]
        calls = self._apply_remote(fn, skip_starting)
        ready = self.calls.wait([p for _, _, p in calls], self._bound())
        self._collect_applied(calls, ready, results)
        return results

    async def foreach_worker_async(self, fn: Callable[[RolloutWorker], Any], *,
                                   skip_starting: bool = False, wait_s: float | None = None,
                                   carry: dict | None = None) -> list:
        """:meth:`foreach_worker`, awaiting the remote replies instead of blocking.

        Same results, bounds and failure handling. On Ray the blocking wait runs on
        the calling loop's default executor and is awaited, so whatever else runs on
        that loop (a run's async gather, which must resubmit as its requests
        complete) keeps moving while the workers answer; a remote call queues behind
        the samples already pending on its worker.

        With ``wait_s`` and ``carry`` (a dict the caller keeps between calls) the
        replies are awaited for at most ``wait_s`` seconds: a worker busy with its
        queued samples keeps its call pending in ``carry`` (worker index -> call)
        and is not asked again; its reply is returned by a later call with the same
        ``carry``. A call still unanswered after :attr:`timeout_s` is a lost worker,
        as above. Metrics collection of async plans uses this so that a report
        never waits for the workers' in-flight fragments.

        >>> import asyncio
        >>> from flowrl.policies import PGPolicy
        >>> ws = WorkerSet("CartPole-v1", PGPolicy, num_workers=0, backend="local")
        >>> asyncio.run(ws.foreach_worker_async(lambda w: w.worker_index))
        [0]
        >>> ws.stop()
        """
        results = [fn(self._local)]
        if carry is not None and wait_s is not None:
            await self._collect_carried(fn, skip_starting, wait_s, carry, results)
            return results
        calls = self._apply_remote(fn, skip_starting)
        ready = await self.calls.wait_async([p for _, _, p in calls], self._bound())
        self._collect_applied(calls, ready, results)
        return results

    async def _collect_carried(self, fn: Callable[[RolloutWorker], Any], skip_starting: bool,
                               wait_s: float, carry: dict, results: list) -> None:
        """The ``wait_s``/``carry`` form of :meth:`foreach_worker_async`."""
        now = time.monotonic()
        starting = self.starts.still_starting() if skip_starting else set()
        current = dict(zip(self._indices, self._remotes))
        for idx in [i for i, (w, _, _) in carry.items() if current.get(i) is not w]:
            del carry[idx]  # the worker was replaced or dropped: its call is moot
        for idx, w in current.items():
            if idx not in carry and idx not in starting:
                carry[idx] = (w, self.calls.apply(w, fn), now)
        if not carry:
            return
        ready = await self.calls.wait_async([p for _, p, _ in carry.values()], wait_s)
        now = time.monotonic()
        for idx, (w, p, sent) in list(carry.items()):
            if any(p is r for r in ready):
                del carry[idx]
                self._collect_applied([(idx, w, p)], [p], results)
            elif now - sent > self._bound(idx):
                del carry[idx]
                self._lost(idx, w, f"not answered within {self.timeout_s:g} s "
                                   "(sample_timeout_s)", "foreach_worker")

    def _apply_remote(self, fn: Callable[[RolloutWorker], Any], skip_starting: bool) -> list:
        """``(index, handle, pending call)`` of ``fn`` applied on each remote worker; with
        ``skip_starting``, calls to replacements still starting are queued but left out."""
        starting = self.starts.still_starting() if skip_starting else set()
        calls = [(idx, w, self.calls.apply(w, fn))
                 for idx, w in zip(self._indices, self._remotes)]
        return [c for c in calls if c[0] not in starting]

    def _collect_applied(self, calls: list, ready: list, results: list,
                         where: str = "foreach_worker") -> None:
        """Append each answered call's result; a silent or dead worker is lost."""
        done = {id(p) for p in ready}
        for idx, w, p in calls:
            if id(p) not in done:
                self._lost(idx, w, f"not answered within {self.timeout_s:g} s "
                                   "(sample_timeout_s)", where)
                continue
            try:
                results.append(self.calls.get(p, timeout=0, label=f"remote worker {idx}",
                                              setting="sample_timeout_s"))
                self.starts.answered(idx)
            except Exception as e:  # noqa: BLE001 - classified below
                self._call_failed(idx, w, e, where)

    def _bound(self, idx: int | None = None) -> float:
        """Seconds to wait for worker ``idx`` (any worker if None); see
        :meth:`StartingWorkers.bound`."""
        return self.starts.bound(self.timeout_s, idx)

    # -- failures -------------------------------------------------------------------
    def _call_failed(self, idx: int, w: Any, e: BaseException, where: str) -> None:
        """Handle exception ``e`` from a call to remote worker ``idx`` (handle ``w``)."""
        reason = lost_reason(e)
        if reason is not None:
            self._lost(idx, w, reason, where, e.__cause__ or e)
            return
        cause = remote_cause(e)
        raise WorkerError(f"WorkerSet.{where}: remote worker {idx} raised "
                          f"{type(cause).__name__}: {cause}") from e

    def _lost(self, idx: int, w: Any, reason: str, where: str,
              error: BaseException | None = None) -> None:
        """Remote worker ``idx`` (handle ``w``) is lost: replace or drop it, or raise."""
        with self._lock:
            if self.host(idx) is not w:
                return  # already replaced or dropped by an earlier call
            if not self.tolerates_failures:
                raise WorkerError(
                    f"WorkerSet.{where}: remote worker {idx} (a Ray actor) {reason}; set "
                    "recreate_failed_workers=True to replace it or ignore_worker_failures=True "
                    "to go on without it") from error
            self.recovery.replace(idx, w, reason)

    def restart_worker(self, worker_index: int, *, reason: str = "requested") -> Any:
        """Replace remote worker ``worker_index`` (or drop it); returns the new one or None.

        What :attr:`recovery` does with a lost worker (:mod:`flowrl.runtime.recovery`):
        the old worker is ended (``ray.kill``); the replacement has the same
        ``worker_index`` and gets the local worker's current weights before anything
        else. On Ray it is the warm spare when one was started (rebuilt in place;
        see :mod:`flowrl.workers.spares`), and a new spare is started for the next
        loss while ``max_worker_restarts`` allows one. With ``ignore_worker_failures``
        (or ``recreate_failed_workers=False``) the worker is dropped instead and
        None is returned. Raises WorkerError once ``max_worker_restarts``
        replacements were made. Counts ``num_restarts`` / ``num_dropped`` and logs
        once. Thread-safe (a worker lost inside an aggregator is replaced from the
        run's recovery-relay thread).
        """
        with self._lock:
            if worker_index not in self._indices:
                raise ConfigError(f"WorkerSet.restart_worker({worker_index!r}): no such remote "
                                  f"worker; have {self._indices}")
            if self.config is None:
                raise WorkerError(f"WorkerSet.restart_worker({worker_index}): this set wraps "
                                  "workers created elsewhere (from_existing) and cannot rebuild "
                                  "them")
            return self.recovery.replace(worker_index, self.host(worker_index), reason)

    # -- the hosts of its recovery (Replaceable; called by self.recovery, under the lock)
    def host(self, worker_index: int) -> Any:
        """Remote worker ``worker_index`` now (None: dropped, or no such worker)."""
        remotes = dict(zip(self._indices, self._remotes))
        return remotes.get(worker_index)

    def describe(self, worker_index: int) -> str:
        return f"remote worker {worker_index}"

    def rebuild(self, worker_index: int, another: bool) -> Any:
        """End remote worker ``worker_index`` and put its replacement in its place (see
        :meth:`restart_worker`); ``another``: start a spare for the next one."""
        pos = self._indices.index(worker_index)
        self.calls.kill(self._remotes[pos])
        weights = self._local.get_weights()
        new = self.spares.take()
        if new is not None:  # rebuilt in place; calls run in order, so before any sample
            self.calls.apply(new, rebuild_worker, self._env, worker_index,
                            self._remote_kwargs, self.config.remote_torch_threads)
        else:
            new = self._create(worker_index)
        versions = self._versions()
        self.calls.call(new, "set_weights", weights, *(() if versions is None else (versions,)))
        ready = self.calls.call(new, "flowrl_ping")
        if another:
            self.spares.start_after(ready, worker_index)
        # New lists, so a loop over the old ones on another thread stays consistent.
        self._remotes = self._remotes[:pos] + [new] + self._remotes[pos + 1:]
        self.starts.began(worker_index, ready)
        return new

    def drop(self, worker_index: int) -> None:
        """End remote worker ``worker_index`` and go on without it."""
        pos = self._indices.index(worker_index)
        self.calls.kill(self._remotes[pos])
        self._remotes = self._remotes[:pos] + self._remotes[pos + 1:]
        self._indices = self._indices[:pos] + self._indices[pos + 1:]

    def restarter(self, indices: Sequence[int] | None = None) -> ShardRecovery | None:
        """The ``restart`` for ``from_actors(self.remote_workers(), restart=...)``: this
        set's :attr:`recovery`, shard ``i`` being worker ``indices[i]`` (default:
        :meth:`worker_indices` now). A worker this set already replaced or dropped
        (``foreach_worker`` found it lost first) is not replaced again: the shard gets
        the current one (or is dropped). None when the set does not tolerate failures.
        """
        if not self.tolerates_failures:
            return None
        return ShardRecovery(self.recovery, list(self._indices if indices is None else indices))

    def foreach_remote_worker(self, fn: Callable[[RolloutWorker], Any]) -> list:
        """``[fn(w) for each remote worker]`` in worker order (waits for all).

        Each call is bounded by :attr:`timeout_s`; a worker that died or did not
        answer is replaced or dropped when the set tolerates failures (its result
        is then missing), else it is a WorkerError naming it, as in
        :meth:`foreach_worker`."""
        return self.foreach_remote_worker_finish(self.foreach_remote_worker_start(fn))

    def foreach_remote_worker_start(self, fn: Callable[[RolloutWorker], Any]) -> list:
        """Start ``fn(w)`` on every remote worker and return at once (on the local
        backend each call runs as it is made); hand what it returns to
        :meth:`foreach_remote_worker_finish`. The two halves of
        :meth:`foreach_remote_worker`, for work that overlaps the driver's (an
        evaluation beside a training step)."""
        return self._apply_remote(fn, False)

    def foreach_remote_worker_finish(self, started: list) -> list:
        """The results of :meth:`foreach_remote_worker_start`'s calls, in worker order,
        with the bounds and failure handling of :meth:`foreach_remote_worker`."""
        results: list = []
        ready = self.calls.wait([p for _, _, p in started], self._bound())
        self._collect_applied(started, ready, results, "foreach_remote_worker")
        return results

    def apply_to_remotes(self, fn: Callable[[RolloutWorker, Any], Any], payload: Any, *,
                         skip: int | None = None) -> None:
        """``fn(worker, payload)`` on every remote worker except the one whose
        ``worker_index`` is ``skip``; not awaited. Ray: ``payload`` is ``ray.put``
        once and the calls run in submission order on each actor (so a later
        ``sample()`` sees the change)."""
        targets = [w for i, w in zip(self._indices, self._remotes) if i != skip]
        if not targets:
            return
        shared = self.calls.put(payload)
        for w in targets:
            self.calls.apply(w, fn, shared)

    def foreach_policy(self, fn: Callable[..., Any], **kwargs: Any) -> list:
        """``fn(policy, policy_id, **kwargs)`` for every policy of every worker, flattened
        (local worker first, then remotes in order).

        Ray: ``fn`` and ``kwargs`` travel to the remote workers with ONE ``ray.put``
        (large arguments such as weights are serialized once, as in the seeds'
        ``sync_ensemble``); the call waits for every worker, each bounded by
        :attr:`timeout_s` (a lost worker is handled as in :meth:`foreach_worker`).
        """
        results = self._local.foreach_policy(fn, **kwargs)
        if not self._remotes:
            return results
        shared = self.calls.put((fn, kwargs))
        calls = [(idx, w, self.calls.apply(w, _foreach_policy_packed, shared))
                 for idx, w in zip(self._indices, self._remotes)]
        per_worker: list = []
        ready = self.calls.wait([p for _, _, p in calls], self._bound())
        self._collect_applied(calls, ready, per_worker, "foreach_policy")
        return results + [r for rs in per_worker for r in rs]

    def trainable_policies(self) -> list[str]:
        """Ids of the policies the local worker trains."""
        return list(self._local.policies_to_train)

    def stop(self) -> None:
        """Stop the workers this set created (local envs closed, ``output`` files
        finished, actors killed).

        A set from :meth:`from_existing` owns nothing and leaves its workers running.
        """
        if not self._owned:
            return
        self._local.stop()
        with self._lock:
            self.spares.stop()
            self._close_remote_outputs()
            for w in self._remotes:
                self.calls.kill(w)
            self._remotes = []

    def _close_remote_outputs(self) -> None:
        """Have the remote workers finish their ``output`` files before they are killed
        (a kill ends a Ray actor without its ``stop()``), each wait bounded by
        :attr:`timeout_s`; a worker that does not answer keeps its open file under
        its temporary name."""
        if self.config is None or self.config.output is None or not self.calls.remote:
            return
        pending = [self.calls.call(w, "close_output") for w in self._remotes]
        self.calls.wait(pending, self._bound())

    # -- creation -------------------------------------------------------------------
    def _create(self, worker_index: int, num_cpus: float | None = None) -> Any:
        """Start remote worker ``worker_index`` (not awaited on Ray)."""
        config = self.config
        extra = {"torch_threads": config.remote_torch_threads} if self.calls.remote else {}
        return self.calls.create(
            RolloutWorker, self._env, worker_index=worker_index, **self._remote_kwargs, **extra,
            num_cpus=config.num_cpus_per_worker if num_cpus is None else num_cpus,
            python_path=tuple(config.python_path))

    def _remote_spaces(self) -> dict:
        """Remote worker 1's :meth:`~RolloutWorker.policy_spaces`, once every remote
        worker is built (a worker that fails to start is named as in :meth:`_wait_ready`)."""
        self._wait_ready()
        pending = self.calls.call(self._remotes[0], "policy_spaces")
        return self.calls.get(pending, timeout=self.timeout_s, label="remote worker 1",
                              setting="sample_timeout_s")

    def _wait_ready(self) -> None:
        """Block until every remote worker is built (and has the weights sent before),
        at most :data:`START_WAIT_S` or :attr:`timeout_s`, whichever is longer."""
        bound = max(START_WAIT_S, self.timeout_s)
        deadline = time.monotonic() + bound
        pings = [(idx, self.calls.call(w, "flowrl_ping"))
                 for idx, w in zip(self._indices, self._remotes)]
        for idx, p in pings:
            try:
                self.calls.get(p, timeout=max(0.0, deadline - time.monotonic()),
                               label=f"WorkerSet: remote worker {idx}",
                               setting="max(START_WAIT_S, sample_timeout_s)")
            except Exception as e:  # noqa: BLE001 - named below
                cause = e.__cause__ or remote_cause(e)
                if lost_reason(e) is not None and e.__cause__ is None:  # silent
                    raise WorkerError(
                        f"WorkerSet: remote worker {idx} did not start within {bound:g} s "
                        "(the larger of START_WAIT_S and sample_timeout_s); its env or policy "
                        "hangs while building, or the cluster has no CPU free for it") from e
                build_error = _build_error_in(cause)
                if build_error is not None:  # the env or config is the culprit, not the actor
                    raise build_error from e
                last = str(cause).strip().splitlines()[-1] if str(cause).strip() else ""
                raise WorkerError(f"WorkerSet: remote worker {idx} (a Ray actor) failed to "
                                  f"start: {type(cause).__name__}: {last}; the env and policy "
                                  "must build in a Ray worker process") from e


def _build_error_in(cause: BaseException) -> EnvError | ConfigError | None:
    """The :class:`EnvError` or :class:`ConfigError` a remote worker's constructor
    raised, behind ``cause``: the error itself (in-process), or rebuilt from its line
    in the text Ray gives for an actor whose creation task failed (the exception
    object does not travel). A policy that refuses the env's spaces is a ConfigError
    on every backend, not a lost worker.

    >>> _build_error_in(RuntimeError("ActorDiedError: flowrl.errors.ConfigError: TD3 "
    ...                              "needs a Box action space"))
    ConfigError('TD3 needs a Box action space')
    """
    kinds = (EnvError, ConfigError)
    for kind in kinds:
        if isinstance(cause, kind):
            return kind(str(cause))
    for line in reversed(str(cause).splitlines()):
        for kind in kinds:
            marker = f"{kind.__name__}: "
            if marker in line:
                return kind(line.split(marker, 1)[1].strip())
    return None


class MultiWorkerSet:
    """Several :class:`WorkerSet` s built alike, for plans that drive more than one
    (e.g. training workers and separate evaluation workers, as RLlib 1.x's
    ``MultiWorkerSet``).

    ``mws[i]`` is set ``i`` (``len(mws)`` sets); each has ``num_workers_per_set``
    remote workers. Worker seeds differ across sets (set ``i`` adds ``10_000 * i``
    to ``config.seed``). ``stop()`` stops every set.

    >>> from flowrl.policies import PGPolicy
    >>> mws = MultiWorkerSet(2, "CartPole-v1", PGPolicy, WorkerConfig(seed=0),
    ...                      num_workers_per_set=1, backend="local")
    >>> len(mws), [len(ws.remote_workers()) for ws in mws]
    (2, [1, 1])
    >>> mws.stop()
    """

    def __init__(self, num_sets: int, env, policy: Callable[..., Any] | None = None,
                 config: WorkerConfig | None = None, *, num_workers_per_set: int = 0,
                 backend: str = "auto"):
        if isinstance(num_sets, bool) or not isinstance(num_sets, int) or num_sets < 1:
            raise ConfigError(f"MultiWorkerSet(num_sets={num_sets!r}): must be an int >= 1")
        config = config or WorkerConfig()
        self._sets: list[WorkerSet] = []
        try:
            for i in range(num_sets):
                seed = None if config.seed is None else config.seed + 10_000 * i
                self._sets.append(WorkerSet(env, policy, dataclasses.replace(config, seed=seed),
                                            num_workers=num_workers_per_set, backend=backend))
        except BaseException:
            self.stop()
            raise

    def __len__(self) -> int:
        return len(self._sets)

    def __getitem__(self, index: int) -> WorkerSet:
        return self._sets[index]

    def __iter__(self):
        return iter(self._sets)

    def sync_weights(self, source: int = 0, policies: Sequence[str] | None = None) -> None:
        """Copy set ``source``'s local-worker weights (of ``policies``; default all) to
        every other set's local worker, then have every set broadcast to its remote
        workers (:meth:`WorkerSet.sync_weights`)."""
        weights = self._sets[source].local_worker().get_weights(policies)
        for i, ws in enumerate(self._sets):
            if i != source:
                ws.local_worker().set_weights(weights)
            ws.sync_weights(policies)

    def stop(self) -> None:
        """Stop every set (each stops only the workers it created)."""
        for ws in self._sets:
            ws.stop()


def _foreach_policy_packed(worker: RolloutWorker, packed: tuple) -> list:
    fn, kwargs = packed
    return worker.foreach_policy(fn, **kwargs)


__all__ = ["WorkerSet", "WorkerConfig", "MultiWorkerSet"]
