"""``WorkerSet``: one local rollout worker on the driver plus ``num_workers`` remote ones.

The local worker holds the policies the learner trains; remote workers sample.
With ``backend="ray"`` the remote workers are Ray actors
(``ray.remote(RolloutWorker)``, ``num_cpus_per_worker`` CPUs each, one torch thread
each); with ``backend="local"`` they are in-process :class:`RolloutWorker`
instances, which the local runtime steps exactly like actors (useful for tests and
debugging). ``backend="auto"`` picks ``"ray"`` when ``num_workers > 0`` and Ray is
already initialised, else ``"local"``; flowrl never calls ``ray.init()`` for you.

Ray workers are created in parallel: every actor is submitted first, the local
worker is built while they start, and the constructor returns once all of them
are ready (a worker that fails to start raises :class:`~flowrl.errors.WorkerError`).
Remote workers start with the local worker's weights. ``stop()`` releases only the
workers this set created (not those passed to :meth:`WorkerSet.from_existing`).
Remote workers of the built-in actor-critic policies act through numpy replicas
and import torch only when asked for more than acting
(:mod:`flowrl.policies.replica`); the local worker holds the real policy.

Failures (Ray; :class:`WorkerConfig` fields): a remote worker that dies or does not
answer within ``sample_timeout_s`` is replaced (``recreate_failed_workers``: a new
actor with the same ``worker_index`` and the local worker's current weights; the
old process is killed) or dropped (``ignore_worker_failures``); otherwise it is a
:class:`~flowrl.errors.WorkerError` naming the worker. ``foreach_worker`` and
``sync_weights`` do this themselves; plans reading :func:`rollout_shards` get it
through ``from_actors(restart=workers.restarter(...))``. Each replacement and drop
is counted (``num_restarts``, ``num_dropped``) and logged once with the reason.

Warm spare (Ray): most of a replacement's start is its new process importing
flowrl and its libraries (torch, for policies without a numpy replica), not
building the env and policy. So once a set has replaced a worker
it keeps one *spare* actor started (``num_cpus=0``: it sits idle), started once
the replacement is up so that the two do not compete for the CPU; the next
replacement rebuilds the spare in place as worker ``worker_index`` (a fresh
:class:`RolloutWorker`: same env, seed and policies as a new actor would get) and a
new spare starts behind it. A set that never loses a worker never starts one. The
spare keeps its creation's zero CPU reservation when promoted (Ray fixes an actor's
resources at creation); the lost worker's reservation is released.

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
import logging
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from flowrl.errors import ConfigError, WorkerError
from flowrl.workers.rollout_worker import PolicySpec, RolloutWorker, as_policy_spec

BACKENDS = ("auto", "local", "ray")
#: Bound on a remote call of ``foreach_worker``/``sync_weights`` when
#: ``sample_timeout_s`` is None.
DEFAULT_TIMEOUT_S = 600.0
#: Least time a replacement worker gets to start before its first answer is due.
START_WAIT_S = 120.0

log = logging.getLogger("flowrl.workers")


@dataclass
class WorkerConfig:
    """Settings every rollout worker of a :class:`WorkerSet` is built with.

    ``policy_config`` holds the policy's keyword hyperparameters (``lr``,
    ``gamma``, ``lambda_``, ``hidden_sizes``...). For multi-agent envs set
    ``policies`` (policy id -> :class:`PolicySpec`), ``policy_mapping_fn`` and
    optionally ``policies_to_train``; the WorkerSet's ``policy`` argument is then
    ignored. ``remote_torch_threads`` is applied inside Ray worker processes only.
    ``numpy_replicas`` (default True) lets remote workers of the built-in policies
    act through torch-free replicas (:mod:`flowrl.policies.replica`); set it False
    when remote workers will learn or compute gradients from the start (A3C), so
    they build the real policy with the worker instead of on first use.

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
    numpy_replicas: bool = True

    @property
    def tolerates_failures(self) -> bool:
        """Whether a lost remote worker is replaced or dropped rather than fatal."""
        return self.recreate_failed_workers or self.ignore_worker_failures

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
            explore=self.explore, policies_to_train=self.policies_to_train)
        if self.policies is not None:
            kwargs.update(policies=self.policies, policy_mapping_fn=self.policy_mapping_fn)
        else:
            kwargs.update(policy=policy, policy_config=self.policy_config)
        return kwargs


class WorkerSet:
    """A local :class:`RolloutWorker` plus remote ones; see the module docstring."""

    def __init__(self, env, policy: Callable[..., Any] | None = None,
                 config: WorkerConfig | None = None, num_workers: int = 0,
                 backend: str = "auto"):
        config = config or WorkerConfig()
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ConfigError(f"WorkerSet(num_workers={num_workers!r}): must be an int >= 0")
        if backend not in BACKENDS:
            raise ConfigError(f"WorkerSet(backend={backend!r}): choose one of {BACKENDS}")
        if policy is None and config.policies is None:
            raise ConfigError("WorkerSet: give a policy class, or config.policies for "
                              "multi-agent")
        if backend == "auto":
            backend = "ray" if num_workers > 0 and _ray_initialized() else "local"
        if backend == "ray" and not _ray_initialized():
            raise ConfigError("WorkerSet(backend='ray'): Ray is not initialised; call "
                              "ray.init() first or use backend='local'")
        self.backend = backend
        self.config = config
        kwargs = config.worker_kwargs(policy)
        self._env = env
        self._remote_kwargs = _with_acting_replicas(kwargs) if config.numpy_replicas else kwargs
        self.num_restarts = 0
        self.num_dropped = 0
        self._pending_syncs: list[tuple[int, Any, Any, float]] = []
        self._fresh: dict[int, float] = {}   # replacement worker_index -> when created
        self._starting: dict[int, Any] = {}  # replacement worker_index -> its ready ref (Ray)
        self._spare: Any = None              # a started idle actor (Ray, after a restart)
        self._stopped = False
        # Replacements may be made on the driver's thread or, for workers lost inside an
        # aggregator, on the run's restart-relay thread: one at a time.
        self._lock = threading.RLock()
        self._remotes = []
        if backend == "ray":
            self._remotes = _submit_ray_workers(env, self._remote_kwargs, config, num_workers)
        try:
            # Ray actors start in parallel with each other and with this build.
            self._local = RolloutWorker(env, worker_index=0, **kwargs)
            if backend != "ray":
                self._remotes = [RolloutWorker(env, worker_index=i, **self._remote_kwargs)
                                 for i in range(1, num_workers + 1)]
            self._owned = True
            self._indices = list(range(1, len(self._remotes) + 1))
            if self._remotes:
                self.sync_weights()
            if backend == "ray":
                _wait_ready(self._remotes)
        except BaseException:
            _kill(self._remotes if backend == "ray" else [])
            raise

    @classmethod
    def from_existing(cls, local_worker: Any, remote_workers: Sequence = ()) -> "WorkerSet":
        """Wrap workers created elsewhere; ``stop()`` will leave them running.

        Workers are duck-typed: any object (or Ray actor of a class) with the methods
        the plan calls (``sample``, ``compute_gradients``, ``apply_gradients``,
        ``get_weights``, ``set_weights``...) will do. The backend is ``"ray"`` when
        the remotes are Ray actor handles, else ``"local"``.
        """
        self = cls.__new__(cls)
        self._local, self._remotes = local_worker, list(remote_workers)
        self.backend = "ray" if any(_is_actor_handle(w) for w in self._remotes) else "local"
        self.config = None
        self._owned = False
        self._indices = list(range(1, len(self._remotes) + 1))
        self.num_restarts = self.num_dropped = 0
        self._pending_syncs = []
        self._fresh = {}
        self._starting = {}
        self._spare = None
        self._stopped = False
        self._lock = threading.RLock()
        return self

    def local_worker(self) -> RolloutWorker:
        """The driver's worker (holds the policies the learner trains)."""
        return self._local

    def remote_workers(self) -> list:
        """Remote workers: Ray actor handles, or in-process workers (local backend)."""
        return list(self._remotes)

    @property
    def timeout_s(self) -> float:
        """Bound on each remote call this set waits for (``sample_timeout_s`` or 600 s)."""
        t = self.config.sample_timeout_s if self.config is not None else None
        return DEFAULT_TIMEOUT_S if t is None else t

    def worker_indices(self) -> list[int]:
        """``worker_index`` of each of :meth:`remote_workers`, in the same order."""
        return list(self._indices)

    def sync_weights(self, policies: Sequence[str] | None = None, *, wait: bool = False) -> None:
        """Send the local worker's weights to every remote worker.

        Ray: one ``ray.put`` per broadcast, then ``set_weights.remote(ref)`` on each
        actor; actor calls run in submission order, so each worker's next
        ``sample()`` uses the new weights. The calls are not awaited (a worker busy
        sampling would stall the learner), but none is forgotten: every later call
        first checks the earlier ones that finished, so a failed ``set_weights``
        raises a :class:`~flowrl.errors.WorkerError` naming the worker at the next
        ``sync_weights`` (or now, with ``wait=True``, which waits for all of them,
        each bounded by :attr:`timeout_s`). A worker found dead or silent is
        replaced or dropped when the set tolerates failures.
        """
        if not self._remotes:
            self._check_syncs(wait)
            return
        weights = self._local.get_weights(policies)
        if self.backend == "ray":
            import ray
            ref = ray.put(weights)
            self._check_syncs(False)
            for idx, w in zip(self._indices, self._remotes):
                self._pending_syncs.append((idx, w, w.set_weights.remote(ref), time.monotonic()))
            if wait:
                self._check_syncs(True)
        else:
            for idx, w in zip(self._indices, self._remotes):
                try:
                    w.set_weights(weights)
                except Exception as e:
                    raise WorkerError(f"WorkerSet.sync_weights: remote worker {idx} failed to "
                                      f"set weights: {type(e).__name__}: {e}") from e

    def _check_syncs(self, wait: bool) -> None:
        """Surface the outcome of earlier ``set_weights`` calls (all of them if ``wait``)."""
        if not self._pending_syncs:
            return
        import ray
        from ray.exceptions import GetTimeoutError
        still = []
        for idx, w, ref, sent in self._pending_syncs:
            left = max(0.0, sent + self._bound(idx) - time.monotonic()) if wait else 0
            try:
                ray.get(ref, timeout=left)
            except GetTimeoutError:
                if wait or time.monotonic() - sent > self._bound(idx):
                    self._lost(idx, w, f"set_weights not answered within {self.timeout_s:g} s "
                                       "(sample_timeout_s)", "sync_weights")
                else:
                    still.append((idx, w, ref, sent))
            except Exception as e:  # noqa: BLE001 - classified below
                self._remote_failed(idx, w, e, "sync_weights")
        self._pending_syncs = still

    def foreach_worker(self, fn: Callable[[RolloutWorker], Any], *,
                       skip_starting: bool = False) -> list:
        """``fn(worker)`` on every worker, local first then remotes in order.

        On Ray each remote call is bounded by :attr:`timeout_s`. A worker that died or
        did not answer in time is replaced or dropped when the set tolerates
        failures (its result is then missing from the list: the list holds one
        result per worker that answered), else it is a WorkerError naming it.
        With ``skip_starting`` (metrics collection) a replacement still starting is
        not waited for, so the plan's other workers do not idle meanwhile: ``fn`` is
        queued on it and runs before its next request, and its result is left out
        of the list.
        """
        results = [fn(self._local)]
        if self.backend == "ray":
            import ray
            calls = self._apply_remote(fn, skip_starting)
            refs = [ref for _, _, ref in calls]
            if refs:
                ray.wait(refs, num_returns=len(refs), timeout=self._bound())
            self._collect_applied(calls, results)
        else:
            results += [fn(w) for w in self._remotes]
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
        if self.backend != "ray" or not self._remotes:
            return self.foreach_worker(fn, skip_starting=skip_starting)
        results = [fn(self._local)]
        if carry is not None and wait_s is not None:
            await self._collect_carried(fn, skip_starting, wait_s, carry, results)
            return results
        calls = self._apply_remote(fn, skip_starting)
        refs = [ref for _, _, ref in calls]
        if not refs:
            return results
        await _wait_off_loop(refs, self._bound())
        self._collect_applied(calls, results)
        return results

    async def _collect_carried(self, fn: Callable[[RolloutWorker], Any], skip_starting: bool,
                               wait_s: float, carry: dict, results: list) -> None:
        """The ``wait_s``/``carry`` form of :meth:`foreach_worker_async` (Ray)."""
        import ray
        now = time.monotonic()
        starting = self._still_starting() if skip_starting else set()
        current = dict(zip(self._indices, self._remotes))
        for idx in [i for i, (w, _, _) in carry.items() if current.get(i) is not w]:
            del carry[idx]  # the worker was replaced or dropped: its call is moot
        for idx, w in current.items():
            if idx not in carry and idx not in starting:
                carry[idx] = (w, w.apply.remote(fn), now)
        if not carry:
            return
        refs = [ref for _, ref, _ in carry.values()]
        ready = set(await _wait_off_loop(refs, wait_s) if wait_s > 0
                    else ray.wait(refs, num_returns=len(refs), timeout=0)[0])
        now = time.monotonic()
        for idx, (w, ref, sent) in list(carry.items()):
            if ref in ready:
                del carry[idx]
                self._collect_applied([(idx, w, ref)], results)
            elif now - sent > self._bound(idx):
                del carry[idx]
                self._lost(idx, w, f"not answered within {self.timeout_s:g} s "
                                   "(sample_timeout_s)", "foreach_worker")

    def _apply_remote(self, fn: Callable[[RolloutWorker], Any], skip_starting: bool) -> list:
        """``(index, handle, ref)`` of ``fn`` applied on each remote worker; with
        ``skip_starting``, calls to replacements still starting are queued but left out."""
        starting = self._still_starting() if skip_starting else set()
        calls = [(idx, w, w.apply.remote(fn)) for idx, w in zip(self._indices, self._remotes)]
        return [c for c in calls if c[0] not in starting]

    def _collect_applied(self, calls: list, results: list) -> None:
        """Append each answered call's result; a silent or dead worker is lost."""
        import ray
        from ray.exceptions import GetTimeoutError
        for idx, w, ref in calls:
            try:
                results.append(ray.get(ref, timeout=0))
                self._fresh.pop(idx, None)
            except GetTimeoutError:
                self._lost(idx, w, f"not answered within {self.timeout_s:g} s "
                                   "(sample_timeout_s)", "foreach_worker")
            except Exception as e:  # noqa: BLE001 - classified below
                self._remote_failed(idx, w, e, "foreach_worker")

    def _still_starting(self) -> set[int]:
        """Indices of replacements whose actor is not built yet (Ray)."""
        if not self._starting:
            return set()
        import ray
        refs = list(self._starting.values())
        ready = set(ray.wait(refs, num_returns=len(refs), timeout=0)[0])
        for idx, ref in list(self._starting.items()):
            if ref in ready:
                del self._starting[idx]
        return set(self._starting)

    def _bound(self, idx: int | None = None) -> float:
        """Seconds to wait for worker ``idx`` (any worker if None): :attr:`timeout_s`, or
        what is left of :data:`START_WAIT_S` for a replacement that has not answered yet."""
        now, bound = time.monotonic(), self.timeout_s
        for i, t0 in list(self._fresh.items()):
            if now - t0 > START_WAIT_S:
                del self._fresh[i]
            elif idx is None or i == idx:
                bound = max(bound, t0 + START_WAIT_S - now)
        return bound

    # -- failures -------------------------------------------------------------------
    def _remote_failed(self, idx: int, w: Any, e: BaseException, where: str) -> None:
        """Handle exception ``e`` from a call to remote worker ``idx`` (handle ``w``)."""
        from ray.exceptions import ObjectLostError, RayActorError
        if isinstance(e, (RayActorError, ObjectLostError)):
            self._lost(idx, w, f"died ({type(e).__name__})", where, e)
            return
        cause = getattr(e, "cause", None) or e
        raise WorkerError(f"WorkerSet.{where}: remote worker {idx} raised "
                          f"{type(cause).__name__}: {cause}") from e

    def _lost(self, idx: int, w: Any, reason: str, where: str,
              error: BaseException | None = None) -> None:
        """Remote worker ``idx`` (handle ``w``) is lost: replace or drop it, or raise."""
        with self._lock:
            if idx not in self._indices or self._remotes[self._indices.index(idx)] is not w:
                return  # already replaced or dropped by an earlier call
            if self.config is None or not self.config.tolerates_failures:
                raise WorkerError(
                    f"WorkerSet.{where}: remote worker {idx} (a Ray actor) {reason}; set "
                    "recreate_failed_workers=True to replace it or ignore_worker_failures=True "
                    "to go on without it") from error
            self.restart_worker(idx, reason=reason)

    def restart_worker(self, worker_index: int, *, reason: str = "requested") -> Any:
        """Replace remote worker ``worker_index`` (or drop it); returns the new one or None.

        The old worker is ended (``ray.kill``); the replacement has the same
        ``worker_index`` and gets the local worker's current weights before anything
        else. On Ray it is the warm spare when one was started (rebuilt in place;
        see the module docstring), and a new spare is started for the next loss
        while ``max_worker_restarts`` allows one. With ``ignore_worker_failures``
        (or ``recreate_failed_workers=False``) the worker is dropped instead and
        None is returned. Raises WorkerError once ``max_worker_restarts``
        replacements were made. Counts ``num_restarts`` / ``num_dropped`` and logs
        once (``flowrl.workers`` logger, WARNING).
        Thread-safe (a worker lost inside an aggregator is replaced from the run's
        restart-relay thread).
        """
        with self._lock:
            return self._restart_worker(worker_index, reason)

    def _restart_worker(self, worker_index: int, reason: str) -> Any:
        if worker_index not in self._indices:
            raise ConfigError(f"WorkerSet.restart_worker({worker_index!r}): no such remote "
                              f"worker; have {self._indices}")
        pos = self._indices.index(worker_index)
        old = self._remotes[pos]
        config = self.config
        if config is None:
            raise WorkerError(f"WorkerSet.restart_worker({worker_index}): this set wraps "
                              "workers created elsewhere (from_existing) and cannot rebuild them")
        if self.backend == "ray":
            _kill([old])
        else:
            old.stop()
        if config.ignore_worker_failures or not config.recreate_failed_workers:
            # New lists, so a loop over the old ones on another thread stays consistent.
            self._remotes = self._remotes[:pos] + self._remotes[pos + 1:]
            self._indices = self._indices[:pos] + self._indices[pos + 1:]
            self.num_dropped += 1
            log.warning("remote worker %d was lost (%s) and dropped "
                        "(ignore_worker_failures); %d remote worker(s) left", worker_index,
                        reason, len(self._remotes))
            return None
        limit = config.max_worker_restarts
        if limit is not None and self.num_restarts >= limit:
            raise WorkerError(f"remote worker {worker_index} was lost ({reason}) after "
                              f"{self.num_restarts} restart(s): max_worker_restarts={limit} is "
                              "used up; find out why workers fail, or raise the limit")
        weights = self._local.get_weights()
        if self.backend == "ray":
            new, self._spare = self._spare, None
            if new is not None:  # rebuilt in place; calls run in order, so before any sample
                new.apply.remote(_rebuild_worker, self._env, worker_index, self._remote_kwargs,
                                 config.remote_torch_threads)
            else:
                new = _submit_ray_workers(self._env, self._remote_kwargs, config, 1,
                                          first=worker_index)[0]
            new.set_weights.remote(weights)
            ready = self._starting[worker_index] = new.flowrl_ping.remote()
            if limit is None or self.num_restarts + 1 < limit:  # another restart may come
                self._spare_after(ready, worker_index)
        else:
            new = RolloutWorker(self._env, worker_index=worker_index, **self._remote_kwargs)
            new.set_weights(weights)
        self._remotes = self._remotes[:pos] + [new] + self._remotes[pos + 1:]
        self._fresh[worker_index] = time.monotonic()
        self.num_restarts += 1
        log.warning("remote worker %d was lost (%s) and replaced (restart %d)", worker_index,
                    reason, self.num_restarts)
        return new

    def _spare_after(self, ready: Any, worker_index: int) -> None:
        """Start the next spare once the replacement answered ``ready`` (both starting
        at once would compete for the CPU and delay the replacement)."""
        def start() -> None:
            import ray
            try:
                ray.wait([ready], timeout=START_WAIT_S)
            except Exception:  # noqa: BLE001 - Ray is shutting down: no spare
                return
            with self._lock:
                if self._stopped or self._spare is not None:
                    return
                self._spare = _submit_ray_workers(self._env, self._remote_kwargs, self.config, 1,
                                                  first=worker_index, num_cpus=0)[0]

        threading.Thread(target=start, name="flowrl-spare-worker", daemon=True).start()

    def restarter(self, indices: Sequence[int] | None = None) -> "Callable[[int], Any] | None":
        """``restart(i)`` for ``from_actors(self.remote_workers(), restart=...)``.

        Shard ``i`` is worker ``indices[i]`` (default: :meth:`worker_indices` now).
        If this set already replaced or dropped that worker (``foreach_worker`` found
        it dead first), the current one (or None) is returned instead of another.
        None when the set does not tolerate failures (or cannot rebuild workers).
        """
        if self.config is None or not self.config.tolerates_failures:
            return None
        return _Restarter(self, list(self._indices if indices is None else indices))

    def foreach_remote_worker(self, fn: Callable[[RolloutWorker], Any]) -> list:
        """``[fn(w) for each remote worker]`` in worker order (waits for all)."""
        if self.backend == "ray":
            import ray
            return ray.get([w.apply.remote(fn) for w in self._remotes])
        return [fn(w) for w in self._remotes]

    def apply_to_remotes(self, fn: Callable[[RolloutWorker, Any], Any], payload: Any, *,
                         skip: int | None = None) -> None:
        """``fn(worker, payload)`` on every remote worker except the one whose
        ``worker_index`` is ``skip``; not awaited. Ray: ``payload`` is ``ray.put``
        once and the calls run in submission order on each actor (so a later
        ``sample()`` sees the change)."""
        targets = [w for i, w in zip(self._indices, self._remotes) if i != skip]
        if not targets:
            return
        if self.backend == "ray":
            import ray
            ref = ray.put(payload)
            for w in targets:
                w.apply.remote(fn, ref)
        else:
            for w in targets:
                fn(w, payload)

    def foreach_policy(self, fn: Callable[..., Any], **kwargs: Any) -> list:
        """``fn(policy, policy_id, **kwargs)`` for every policy of every worker, flattened
        (local worker first, then remotes in order).

        Ray: ``fn`` and ``kwargs`` travel to the remote workers with ONE ``ray.put``
        (large arguments such as weights are serialized once, as in the seeds'
        ``sync_ensemble``); the call waits for every worker.
        """
        results = self._local.foreach_policy(fn, **kwargs)
        if not self._remotes:
            return results
        if self.backend == "ray":
            import ray
            ref = ray.put((fn, kwargs))
            per_worker = ray.get([w.apply.remote(_foreach_policy_packed, ref)
                                  for w in self._remotes])
        else:
            per_worker = [w.foreach_policy(fn, **kwargs) for w in self._remotes]
        return results + [r for rs in per_worker for r in rs]

    def trainable_policies(self) -> list[str]:
        """Ids of the policies the local worker trains."""
        return list(self._local.policies_to_train)

    def stop(self) -> None:
        """Stop the workers this set created (local envs closed, actors killed).

        A set from :meth:`from_existing` owns nothing and leaves its workers running.
        """
        if not self._owned:
            return
        self._local.stop()
        if self.backend == "ray":
            with self._lock:
                self._stopped = True
                _kill(self._remotes + ([self._spare] if self._spare is not None else []))
                self._spare = None
        else:
            for w in self._remotes:
                w.stop()
        self._remotes = []


async def _wait_off_loop(refs: list, timeout: float | None) -> list:
    """``ray.wait`` for all of ``refs`` (at most ``timeout`` s), awaited: it runs on the
    loop's default executor, not on a run's I/O thread (its gathers' waits own that).
    Returns the ready refs; failures are for the caller to collect."""
    import asyncio

    import ray
    ready, _ = await asyncio.get_running_loop().run_in_executor(
        None, functools.partial(ray.wait, refs, num_returns=len(refs), timeout=timeout))
    return ready


class _Restarter:
    """The ``restart`` a WorkerSet gives ``from_actors``; runs on the driver only.

    Inside an aggregator (Ray) the runtime ships a stand-in that asks the driver to
    call it (``flowrl.runtime.aggregator.RelayedRestart``).
    """

    driver_only = True

    def __init__(self, workers: WorkerSet, indices: list[int]):
        self.workers = workers
        self.indices = indices
        self.handed = {idx: w for idx, w in zip(workers._indices, workers._remotes)}

    def __getstate__(self) -> dict:
        # Plans are shipped to aggregators with their nodes' params: a copy carries no
        # WorkerSet (its local worker, locks), only what names it. The runtime never
        # calls a copy; it relays to the driver's original instead.
        return {"workers": None, "indices": self.indices, "handed": {}}

    def __call__(self, i: int) -> Any:
        if self.workers is None:
            raise WorkerError(f"WorkerSet.restarter(): restart({i}) was called on a copy "
                              "shipped away from the driver; only the driver's WorkerSet can "
                              "replace its workers")
        with self.workers._lock:
            return self._restart(i)

    def _restart(self, i: int) -> Any:
        ws, idx = self.workers, self.indices[i]
        if idx not in ws._indices:
            return None                       # dropped already
        current = ws._remotes[ws._indices.index(idx)]
        if current is not self.handed.get(idx):
            self.handed[idx] = current        # replaced already (foreach_worker, sync)
            return current
        self.handed[idx] = new = ws.restart_worker(idx, reason="lost in the plan")
        return new


def _with_acting_replicas(kwargs: dict) -> dict:
    """``kwargs`` (from :meth:`WorkerConfig.worker_kwargs`) for remote workers: each
    policy class that has a numpy replica replaced by the replica's factory, so
    that a worker that only acts never imports torch
    (:mod:`flowrl.policies.replica`)."""
    from flowrl.policies.replica import acting_replica
    out = dict(kwargs)
    if out.get("policy") is not None:
        out["policy"] = acting_replica(out["policy"]) or out["policy"]
    if out.get("policies") is not None:
        specs = {}
        for pid, value in out["policies"].items():
            spec = as_policy_spec(pid, value)
            replica = acting_replica(spec.policy_class)
            specs[pid] = spec if replica is None else dataclasses.replace(spec,
                                                                          policy_class=replica)
        out["policies"] = specs
    return out


def _submit_ray_workers(env, kwargs: dict, config: WorkerConfig, num_workers: int,
                        first: int = 1, num_cpus: float | None = None) -> list:
    """Submit every remote worker's creation at once; Ray starts them in parallel."""
    import ray
    actor = ray.remote(num_cpus=config.num_cpus_per_worker if num_cpus is None
                       else num_cpus)(RolloutWorker)
    return [actor.remote(env, worker_index=i, **kwargs, torch_threads=config.remote_torch_threads)
            for i in range(first, first + num_workers)]


def _rebuild_worker(worker: RolloutWorker, env: Any, worker_index: int, kwargs: dict,
                    torch_threads: int | None) -> None:
    """Make the spare ``worker`` (inside its actor) what a new actor for
    ``worker_index`` would be: its envs closed, its state dropped, built afresh."""
    worker.stop()
    worker.__dict__.clear()
    RolloutWorker.__init__(worker, env, worker_index=worker_index, torch_threads=torch_threads,
                           **kwargs)


def _wait_ready(remotes: list) -> None:
    """Block until every remote worker is built (and has the weights sent before)."""
    import ray
    from ray.exceptions import RayError
    refs = [w.flowrl_ping.remote() for w in remotes]
    for i, ref in enumerate(refs, 1):
        try:
            ray.get(ref)
        except RayError as e:
            raise WorkerError(f"WorkerSet: remote worker {i} (a Ray actor) failed to start: "
                              f"{type(e).__name__}: {str(e).strip().splitlines()[-1]}; "
                              "the env and policy must build in a Ray worker process") from e


def _kill(remotes: list) -> None:
    import ray
    for w in remotes:
        try:
            ray.kill(w, no_restart=True)
        except Exception:  # noqa: BLE001 - already gone
            pass


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


def _is_actor_handle(obj: Any) -> bool:
    return type(obj).__name__ == "ActorHandle" and type(obj).__module__.startswith("ray")


def _ray_initialized() -> bool:
    try:
        import ray
    except ImportError:  # ray is a dependency, but keep the local path importable
        return False
    return ray.is_initialized()


__all__ = ["WorkerSet", "WorkerConfig", "MultiWorkerSet"]
