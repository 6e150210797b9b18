"""``LearnerThread``: trains the local worker in a background thread fed by queues.

Policy: the plan puts train batches into ``inqueue`` (bounded:
``learner_queue_size``; a full queue is backpressure on the plan) and takes
``(count, info)`` results from ``outqueue`` (:class:`~flowrl.ops.Enqueue` /
:func:`~flowrl.ops.Dequeue` bridge both to the driver loop). Each batch taken from
``inqueue`` sits in a *minibatch buffer* of ``minibatch_buffer_size`` slots and is
trained on ``num_sgd_iter`` times (once per visit, slots visited round-robin)
before it is released, as RLlib 1.x. One visit is one pass of the one
minibatch-SGD loop (:func:`~flowrl.policies.sgd.minibatch_sgd`) with minibatches
of ``sgd_minibatch_size`` rows (0: the whole batch).

Multi-tower loading (``num_gpus > 0`` or ``num_data_loader_buffers > 1``): the
trainable policies get one tower per device (:func:`~flowrl.ops.multi_gpu.tower_devices`:
CUDA devices, else CPU "fake" towers) and ``num_data_loader_buffers`` loader
threads convert batches into tensors on every tower's device in parallel with
training; the learner thread then trains on loaded batches only. At most
``num_data_loader_buffers`` loaded batches exist at a time.

Failure: no batch for ``learner_queue_timeout`` seconds of *driving*, or an
exception in training, ends the thread and records a FlowError naming the
thread and the setting; :meth:`LearnerThread.check` (the ``check=`` of the queue
bridges) then raises it in the plan. :meth:`LearnerThread.stop` wakes and ends
every thread without waiting on a timeout.

The idle clock: an empty queue is a failure only while someone waits for the
learner. The run that feeds the learner is known from the calls of ``check()``
made inside it (the bridges' waits, ``StartLearner``), and the clock advances
only while the driver is inside that run (``next(run)``, i.e. ``train()``), so a
driver that simply does not call ``train()`` (evaluation, a debugger pause)
never starves the learner. The thread reads the clock every
:data:`IDLE_SLICE_S` seconds while its queue is empty. A learner fed by hand,
with no run known, counts wall time.

Policy lag (docs/design.md, "Policy lag and learner diagnostics"): each update reads
its rows' ``policy_version`` (the version of the weights that acted) against the
local worker's ``policy_versions`` (updates done so far; the thread counts each of
its updates there), so a row's lag is the number of learner updates between acting
and this training pass, and its env-step lag the env steps trained on in between.
With ``max_policy_lag``, when the thread takes a batch from ``inqueue`` (a loader
thread does, with multi-tower loading) the rows already staler than it are dropped,
whole sample fragments at a time (a fragment is acted by one version); a batch left
empty is answered with ``(0, {}, sources)`` so its samplers still get fresh weights.
:meth:`LearnerThread.diagnostics` returns, and restarts, the lag, queue-size and
busy-share figures gathered since its previous call.

State: the queues, the run that drives it (for the idle clock), the minibatch
buffer slots and their remaining visits, the
``weights_updated`` flag (set after every update, cleared by whoever broadcasts
the weights), a copy of the weights after the last update
(:meth:`LearnerThread.latest_weights`, so a broadcast never waits for the update
in progress), ``num_steps`` (updates done), busy seconds for
:meth:`LearnerThread.utilization`, the env steps trained as of each recent policy
version, and the figures of :meth:`LearnerThread.diagnostics` since its last call.
"""

from __future__ import annotations

import collections
import queue
import threading
import time
from typing import Any

import numpy as np

from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError, FlowError
from flowrl.ops.train_ops import policy_batches
from flowrl.runtime.context import RunContext, current_run

_STOP = object()
#: Default of ``learner_queue_timeout``: seconds the learner waits for a batch before
#: it reports starvation (LearnerThread, IMPALA, APPO, Ape-X).
LEARNER_QUEUE_TIMEOUT_S = 300.0
#: Seconds between two readings of the idle clock while the learner's queue is empty
#: (so also how late a pause of the driver is noticed).
IDLE_SLICE_S = 0.25


def _check_int(name: str, value: Any, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ConfigError(f"LearnerThread({name}={value!r}): must be an int >= {lo}")


#: Policy versions whose env-step counts the thread keeps, per policy: a row acted by
#: an older version counts from the oldest kept (its env-step lag is a lower bound).
VERSIONS_KEPT = 4096


class _Loaded:
    """A batch taken by the thread: ``{policy_id: rows}`` (or, loaded onto the towers,
    ``{policy_id: LoadedBatch}``), its env-step count, its sources, the acting
    versions of the rows (``{policy_id: array}``, for policies whose rows carry them)
    and the batch as it was queued (``batch``, for subclasses that answer with it)."""

    __slots__ = ("per_policy", "count", "sources", "acted", "batch")

    def __init__(self, per_policy: dict, count: int, sources: Any, acted: dict, batch: Any):
        self.per_policy, self.count, self.sources = per_policy, count, sources
        self.acted, self.batch = acted, batch


class LearnerThread(threading.Thread):
    """Trains ``local_worker``'s trainable policies on batches from :attr:`inqueue`.

    ``inqueue`` items are batches, or ``(sources, batch)`` pairs whose ``sources``
    (e.g. the workers that sampled the batch) come back with the result:
    ``outqueue`` gets ``(count, info)`` per update, or ``(count, info, sources)``
    for pairs, ``count`` being the batch's env steps and ``info`` ``{policy_id:
    stats}``. Settings and failure modes: see the module docstring. A daemon
    thread; :meth:`stop` ends it (idempotent).

    >>> from flowrl.policies import A2CPolicy
    >>> from flowrl.workers import RolloutWorker
    >>> w = RolloutWorker("CartPole-v1", policy=A2CPolicy, rollout_fragment_length=20, seed=0)
    >>> learner = LearnerThread(w, num_sgd_iter=2, minibatch_buffer_size=1)
    >>> learner.start()
    >>> learner.inqueue.put(w.sample())
    >>> [learner.outqueue.get(timeout=60)[0] for _ in range(2)], learner.num_steps
    ([20, 20], 2)
    >>> learner.stop(); learner.is_alive()
    False
    >>> w.stop()
    """

    def __init__(self, local_worker, minibatch_buffer_size: int = 1, num_sgd_iter: int = 1,
                 learner_queue_size: int = 16, learner_queue_timeout: float = LEARNER_QUEUE_TIMEOUT_S, *,
                 num_gpus: float = 0, num_data_loader_buffers: int = 1,
                 sgd_minibatch_size: int = 0, seed: int | None = None,
                 max_policy_lag: int | None = None, name: str = "learner"):
        _check_int("minibatch_buffer_size", minibatch_buffer_size, 1)
        _check_int("num_sgd_iter", num_sgd_iter, 1)
        _check_int("learner_queue_size", learner_queue_size, 1)
        _check_int("num_data_loader_buffers", num_data_loader_buffers, 1)
        _check_int("sgd_minibatch_size", sgd_minibatch_size, 0)
        if max_policy_lag is not None:
            _check_int("max_policy_lag", max_policy_lag, 0)
        if isinstance(learner_queue_timeout, bool) or not isinstance(
                learner_queue_timeout, (int, float)) or not learner_queue_timeout > 0:
            raise ConfigError(f"LearnerThread(learner_queue_timeout={learner_queue_timeout!r}): "
                              "must be a number of seconds > 0")
        if isinstance(num_gpus, bool) or not isinstance(num_gpus, (int, float)) or num_gpus < 0:
            raise ConfigError(f"LearnerThread(num_gpus={num_gpus!r}): must be a number >= 0")
        self.multi_tower = num_gpus > 0 or num_data_loader_buffers > 1
        if self.multi_tower and minibatch_buffer_size > num_data_loader_buffers:
            raise ConfigError(
                f"LearnerThread(minibatch_buffer_size={minibatch_buffer_size}, "
                f"num_data_loader_buffers={num_data_loader_buffers}): with multi-tower loading "
                "the minibatch buffer holds loaded batches, so it cannot be larger than the "
                "number of loader buffers; set minibatch_buffer_size <= num_data_loader_buffers")
        super().__init__(name=f"flowrl-{name}", daemon=True)
        self.label = name
        self.local_worker = local_worker
        self.minibatch_buffer_size, self.num_sgd_iter = minibatch_buffer_size, num_sgd_iter
        self.learner_queue_size = learner_queue_size
        self.learner_queue_timeout = float(learner_queue_timeout)
        self.num_gpus, self.num_data_loader_buffers = num_gpus, num_data_loader_buffers
        self.sgd_minibatch_size = sgd_minibatch_size
        self.max_policy_lag = max_policy_lag
        self.inqueue: queue.Queue = queue.Queue(maxsize=learner_queue_size)
        self.outqueue: queue.Queue = queue.Queue()
        self.lock = threading.Lock()  # held while weights change; hold it to read them
        self.weights_updated = False
        # (weights, versions) of the local worker after the last update: one object, so
        # a reader never pairs one update's weights with another's versions
        self._snapshot: tuple[dict, dict | None] | None = None
        self.weights_epoch = 0  # grows when the weights are set from outside (a restore)
        self.num_steps = 0
        self.error: BaseException | None = None
        self.busy_s = 0.0
        self._rng = np.random.default_rng(seed)
        # env steps trained as of each recent version, per policy (the env-step lag)
        self._steps_at: dict[str, collections.OrderedDict] = {}
        self._trained: dict[str, int] = {}
        self._diag_lock = threading.Lock()
        self._diag = _Figures(0.0, 0.0)
        self._stopping = threading.Event()
        self._started_at: float | None = None
        self._driver: RunContext | None = None  # the run whose driving counts as waiting
        self._slots: list[Any] = [None] * minibatch_buffer_size
        self._ttl = [0] * minibatch_buffer_size
        self._idx = 0
        self._loaders: list[threading.Thread] = []
        self._ready: queue.Queue | None = None
        self._free: threading.Semaphore | None = None
        if self.multi_tower:
            from flowrl.ops.multi_gpu import set_towers, tower_devices
            devices = tower_devices(num_gpus)
            local_worker.foreach_trainable_policy(lambda p, _: set_towers(p, devices))
            self._ready = queue.Queue()
            self._free = threading.Semaphore(num_data_loader_buffers)
            self._loaders = [threading.Thread(target=self._load_loop, daemon=True,
                                              name=f"flowrl-{name}-loader-{i}")
                             for i in range(num_data_loader_buffers)]

    # -- lifecycle -----------------------------------------------------------------
    def start(self) -> None:
        """Start the learner (and its loader threads)."""
        self._started_at = time.perf_counter()
        for t in self._loaders:
            t.start()
        super().start()

    def stop(self, timeout: float = 30.0) -> None:
        """End the learner and loader threads and wait for them (idempotent)."""
        self._stopping.set()
        for q in (self.inqueue, self._ready):
            if q is None:
                continue
            for _ in range(1 + len(self._loaders)):
                try:
                    q.put_nowait(_STOP)
                except queue.Full:
                    break
        if self._free is not None:
            for _ in self._loaders:
                self._free.release()
        for t in [self, *self._loaders]:
            if t.is_alive() and t is not threading.current_thread():
                t.join(timeout)

    @property
    def stopped(self) -> bool:
        return self._stopping.is_set()

    def check(self) -> bool:
        """True while the learner is running; raises its FlowError once it failed.

        The ``check=`` of the Enqueue/Dequeue bridges, so a dead learner fails the run
        instead of leaving the plan waiting on its queues. Called inside a run, it
        also makes that run the one whose driving advances the idle clock (see the
        module docstring).
        """
        try:
            self._driver = current_run()
        except FlowError:
            pass  # called from outside any run: the clock keeps its run (or wall time)
        if self.error is not None:
            raise self.error
        if self._started_at is not None and not self.is_alive() and not self.stopped:
            raise FlowError(f"LearnerThread {self.label!r} is not running (it ended "
                            "without an error); restart the algorithm")
        return True

    def latest_weights(self) -> dict[str, dict]:
        """The local worker's weights (``RolloutWorker.get_weights()``) as of the last
        finished update, without waiting for the update in progress: the thread
        copies them after each update (one copy of the parameters, small beside the
        update's forward, backward and Adam step). Before the first update, or after
        :meth:`weights_changed`, they are read under :attr:`lock`."""
        return self.latest_snapshot()[0]

    def latest_snapshot(self) -> tuple[dict[str, dict], dict[str, int] | None]:
        """:meth:`latest_weights` and the policy versions they come from (None for a
        local worker that keeps no versions), as of the same update."""
        snapshot = self._snapshot
        if snapshot is None:
            with self.lock:
                snapshot = self._take_snapshot()
        return snapshot

    def _take_snapshot(self) -> tuple[dict[str, dict], dict[str, int] | None]:
        """Copy the local worker's weights and versions (hold :attr:`lock`)."""
        versions = getattr(self.local_worker, "policy_versions", None)
        self._snapshot = (self.local_worker.get_weights(),
                          None if versions is None else dict(versions))
        return self._snapshot

    def weights_changed(self) -> None:
        """Forget the snapshot of :meth:`latest_weights`; call it (holding :attr:`lock`)
        after setting the local worker's weights outside the thread (a restore).
        :attr:`weights_epoch` grows, so a holder of an older snapshot can tell."""
        self._snapshot = None
        self.weights_updated = True
        self.weights_epoch += 1
        self._steps_at.clear()  # the versions may have jumped

    def utilization(self) -> float:
        """Fraction of the thread's lifetime spent training (0 before it starts)."""
        if self._started_at is None:
            return 0.0
        wall = time.perf_counter() - self._started_at
        return self.busy_s / wall if wall > 0 else 0.0

    def stats(self) -> dict[str, float]:
        """``num_steps`` (updates), ``learner_queue_size`` (batches waiting) and
        ``learner_utilization``."""
        return {"num_steps": self.num_steps, "learner_queue_size": self.inqueue.qsize(),
                "learner_utilization": self.utilization()}

    def diagnostics(self) -> dict[str, Any]:
        """What the thread saw since the previous call (the first call: since it
        started), then starts over:

        - ``policy_lag``: ``mean``, ``p95``, ``max`` (learner updates between acting
          and training) and ``mean_env_steps``, ``p95_env_steps``, ``max_env_steps``
          (env steps the learner trained on in between) over the ``rows`` trained (a
          row trained in several passes counts once per pass), ``taken`` (rows the
          thread took from its queue) and ``dropped`` (those of them dropped as staler
          than ``max_policy_lag``); absent when no rows with a ``policy_version``
          column were trained or dropped;
        - ``learner_queue``: ``size_mean`` and ``size_max``, the batches waiting in
          ``inqueue`` each time the thread took one (absent when it took none);
        - ``learner_busy_frac``: the share of the wall time spent training.
        """
        now = time.perf_counter()
        with self._diag_lock:
            figures, self._diag = self._diag, _Figures(now, self.busy_s)
        out: dict[str, Any] = {}
        if figures.lags or figures.dropped:
            lags = np.concatenate(figures.lags) if figures.lags else np.zeros(0, np.int64)
            env = np.concatenate(figures.env_lags) if figures.env_lags else np.zeros(0)
            out["policy_lag"] = {**_summary(lags, ""), **_summary(env, "_env_steps"),
                                 "rows": int(lags.size), "taken": figures.taken,
                                 "dropped": figures.dropped}
        if figures.queue_sizes:
            out["learner_queue"] = {"size_mean": float(np.mean(figures.queue_sizes)),
                                    "size_max": int(max(figures.queue_sizes))}
        since = figures.started if figures.started else (self._started_at or now)
        wall = now - since
        # an update counts when it ends, so one begun before ``since`` may push it past 1
        out["learner_busy_frac"] = (min(1.0, (self.busy_s - figures.busy_s) / wall)
                                    if wall > 0 else 0.0)
        return out

    # -- the thread ---------------------------------------------------------------------
    def _fail(self, error: BaseException) -> None:
        if self.error is None and not self.stopped:
            self.error = error

    def _starved(self, what: str) -> FlowError:
        return FlowError(
            f"LearnerThread {self.label!r}: no {what} arrived for learner_queue_timeout="
            f"{self.learner_queue_timeout:g} s while the driver ran the plan; the samplers "
            "are too slow or stopped. Raise learner_queue_timeout, or check the rollout "
            "workers")

    def _driven(self) -> bool:
        """Whether the idle clock runs now: the driver is inside the feeding run
        (``next(run)`` turns its loop), or no run is known."""
        run = self._driver
        return run is None or run.loop.is_running()

    def _take(self, q: queue.Queue, what: str) -> Any:
        idle = 0.0
        while True:
            started = time.monotonic()
            try:
                return q.get(timeout=min(IDLE_SLICE_S, self.learner_queue_timeout - idle))
            except queue.Empty:
                pass
            if self._driven():
                idle += time.monotonic() - started
                if idle >= self.learner_queue_timeout:
                    raise self._starved(what)

    def _take_batch(self) -> Any:
        """The next batch from ``inqueue`` with its stale rows dropped (see the
        module docstring), as :class:`_Loaded` rows; or _STOP."""
        while True:
            item = self._take(self.inqueue, "train batch")
            if item is _STOP:
                return item
            taken = self._admit(item)
            if taken.per_policy:
                return taken
            self.outqueue.put((0, {}) if taken.sources is None else (0, {}, taken.sources))

    def _admit(self, item: Any) -> _Loaded:
        """``item``'s trainable rows and their acting versions, with ``max_policy_lag``
        without the rows staler than it."""
        sources, batch = self._split(item)
        per_policy = policy_batches(self.local_worker, batch)
        versions = getattr(self.local_worker, "policy_versions", None) or {}
        kept_rows = total_rows = dropped = 0
        acted_by: dict[str, np.ndarray] = {}
        for pid, rows in list(per_policy.items()):
            total_rows += rows.count
            if SampleBatch.POLICY_VERSION not in rows:
                kept_rows += rows.count
                continue
            acted = np.asarray(rows[SampleBatch.POLICY_VERSION])
            if self.max_policy_lag is not None:
                keep = versions.get(pid, 0) - acted <= self.max_policy_lag
                if not keep.all():
                    dropped += int(rows.count - keep.sum())
                    if not keep.any():
                        del per_policy[pid]
                        continue
                    rows, acted = rows.select(keep), acted[keep]
                    per_policy[pid] = rows
            kept_rows += rows.count
            acted_by[pid] = acted
        count = batch.env_steps()
        if kept_rows < total_rows:  # env steps in proportion to the rows kept
            count = round(count * kept_rows / total_rows)
        with self._diag_lock:
            self._diag.taken += total_rows
            self._diag.dropped += dropped
            self._diag.queue_sizes.append(self.inqueue.qsize())
        return _Loaded(per_policy, count, sources, acted_by, batch)

    def _record_lag(self, acted_by: dict[str, np.ndarray]) -> None:
        """The lag of rows about to be trained, acted by ``acted_by`` versions."""
        versions = getattr(self.local_worker, "policy_versions", None) or {}
        lags = [np.maximum(versions.get(pid, 0) - acted, 0) for pid, acted in acted_by.items()]
        env_lags = [self._env_step_lag(pid, acted) for pid, acted in acted_by.items()]
        with self._diag_lock:
            self._diag.lags += lags
            self._diag.env_lags += env_lags

    def _env_step_lag(self, pid: str, acted: np.ndarray) -> np.ndarray:
        """Env steps the thread trained ``pid`` on since each row's acting version."""
        steps_at = self._steps_at.get(pid)
        if not steps_at:  # no update yet: nothing was trained since any version
            return np.zeros(len(acted))
        trained = self._trained[pid]
        oldest_version, oldest_steps = next(iter(steps_at.items()))
        versions, inverse = np.unique(acted, return_inverse=True)
        # a version not kept is older than the oldest kept (a lower bound), or newer than
        # this thread's updates (weights set from outside: nothing trained since)
        at = [steps_at.get(v, oldest_steps if v < oldest_version else trained)
              for v in versions.tolist()]
        return (trained - np.array(at, dtype=float))[inverse.reshape(-1)]

    def _count_update(self, count: int, info: dict) -> None:
        """One update of the policies in ``info``: versions, env steps trained."""
        worker = self.local_worker
        versions = getattr(worker, "policy_versions", None)
        if versions is None:  # a duck-typed worker keeps no versions
            return
        for pid in info:  # the version before this update counts from here
            self._steps_at.setdefault(pid, collections.OrderedDict()).setdefault(
                versions.get(pid, 0), self._trained.get(pid, 0))
        worker.count_updates(info)
        for pid in info:
            self._trained[pid] = self._trained.get(pid, 0) + count
            steps_at = self._steps_at[pid]
            steps_at[versions[pid]] = self._trained[pid]
            if len(steps_at) > VERSIONS_KEPT:
                steps_at.popitem(last=False)

    def _load_loop(self) -> None:
        try:
            while not self.stopped:
                self._free.acquire()
                if self.stopped:
                    return
                taken = self._take_batch()
                if taken is _STOP:
                    return
                with self.lock:  # set_towers/syncs must not interleave with loading
                    taken.per_policy = {
                        pid: self.local_worker.get_policy(pid).load_batch(rows)
                        for pid, rows in taken.per_policy.items()}
                self._ready.put(taken)
        except BaseException as e:  # noqa: BLE001 - recorded, raised in the plan by check()
            self._fail(self._wrap(e, "a data loader thread failed"))
            self._stopping.set()
            if self._ready is not None:
                self._ready.put(_STOP)

    def _wrap(self, e: BaseException, what: str) -> FlowError:
        if isinstance(e, FlowError):
            return e
        err = FlowError(f"LearnerThread {self.label!r} {what}: {type(e).__name__}: {e}")
        err.__cause__ = e
        return err

    @staticmethod
    def _split(item: Any) -> tuple[Any, Any]:
        if isinstance(item, tuple) and len(item) == 2 and isinstance(
                item[1], (SampleBatch, MultiAgentBatch)):
            return item[0], item[1]
        return None, item

    def _next(self) -> tuple[Any, bool]:
        """The minibatch buffer: a slot's item and whether this visit released it."""
        i = self._idx
        if self._ttl[i] <= 0:
            item = (self._take(self._ready, "loaded batch") if self.multi_tower
                    else self._take_batch())
            if item is _STOP:
                return _STOP, True
            self._slots[i], self._ttl[i] = item, self.num_sgd_iter
        item = self._slots[i]
        self._ttl[i] -= 1
        released = self._ttl[i] <= 0
        if released:
            self._slots[i] = None
        self._idx = (i + 1) % len(self._slots)
        return item, released

    def _train(self, item: _Loaded) -> tuple[int, dict, Any]:
        kwargs = dict(num_sgd_iter=1, sgd_minibatch_size=self.sgd_minibatch_size, rng=self._rng)
        worker = self.local_worker
        self._record_lag(item.acted)
        info = {pid: worker.get_policy(pid).learn_on_batch(rows, **kwargs)
                for pid, rows in item.per_policy.items()}
        self._count_update(item.count, info)
        return item.count, info, item.sources

    def run(self) -> None:
        try:
            while not self.stopped:
                item, released = self._next()
                if item is _STOP:
                    return
                start = time.perf_counter()
                with self.lock:
                    count, info, sources = self._train(item)
                    self._take_snapshot()
                    self.weights_updated = True
                self.busy_s += time.perf_counter() - start
                self.num_steps += 1
                if released and self.multi_tower:
                    self._free.release()
                self.outqueue.put((count, info) if sources is None else (count, info, sources))
        except BaseException as e:  # noqa: BLE001 - recorded, raised in the plan by check()
            self._fail(self._wrap(e, "died while training"))
        finally:
            self._stopping.set()
            if self._free is not None:
                for _ in self._loaders:
                    self._free.release()


def _summary(values: np.ndarray, suffix: str) -> dict[str, float]:
    """``mean``, ``p95`` and ``max`` of ``values`` (0 when empty), keys + ``suffix``."""
    if not values.size:
        return {f"mean{suffix}": 0.0, f"p95{suffix}": 0.0, f"max{suffix}": 0.0}
    return {f"mean{suffix}": float(values.mean()),
            f"p95{suffix}": float(np.percentile(values, 95)),
            f"max{suffix}": float(values.max())}


class _Figures:
    """What :meth:`LearnerThread.diagnostics` reports, gathered since ``started``."""

    __slots__ = ("started", "busy_s", "lags", "env_lags", "taken", "dropped", "queue_sizes")

    def __init__(self, started: float, busy_s: float):
        self.started, self.busy_s = started, busy_s
        self.lags: list[np.ndarray] = []
        self.env_lags: list[np.ndarray] = []
        self.taken = self.dropped = 0
        self.queue_sizes: list[int] = []


__all__ = ["LearnerThread"]
