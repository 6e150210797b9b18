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

State: the queues, the run that drives it (for the idle clock), the minibatch
buffer slots and their remaining visits, the
``weights_updated`` flag (set after every update, cleared by whoever broadcasts
the weights), a copy of the weights after the last update
(:meth:`LearnerThread.latest_weights`, so a broadcast never waits for the update
in progress), ``num_steps`` (updates done) and busy/idle seconds for
:meth:`LearnerThread.utilization`.
"""

from __future__ import annotations

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
#: Seconds between two readings of the idle clock while the learner's queue is empty
#: (so also how late a pause of the driver is noticed).
IDLE_SLICE_S = 0.25


def _check_int(name: str, value: Any, lo: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < lo:
        raise ConfigError(f"LearnerThread({name}={value!r}): must be an int >= {lo}")


class _Loaded:
    """A batch loaded onto the towers: ``{policy_id: LoadedBatch}`` and its step count."""

    __slots__ = ("per_policy", "count", "sources")

    def __init__(self, per_policy: dict, count: int, sources: Any):
        self.per_policy, self.count, self.sources = per_policy, count, sources


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
                 learner_queue_size: int = 16, learner_queue_timeout: float = 300, *,
                 num_gpus: float = 0, num_data_loader_buffers: int = 1,
                 sgd_minibatch_size: int = 0, seed: int | None = None,
                 name: str = "learner"):
        _check_int("minibatch_buffer_size", minibatch_buffer_size, 1)
        _check_int("num_sgd_iter", num_sgd_iter, 1)
        _check_int("learner_queue_size", learner_queue_size, 1)
        _check_int("num_data_loader_buffers", num_data_loader_buffers, 1)
        _check_int("sgd_minibatch_size", sgd_minibatch_size, 0)
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
        self.inqueue: queue.Queue = queue.Queue(maxsize=learner_queue_size)
        self.outqueue: queue.Queue = queue.Queue()
        self.lock = threading.Lock()  # held while weights change; hold it to read them
        self.weights_updated = False
        self._snapshot: dict | None = None  # local worker's weights after the last update
        self.num_steps = 0
        self.error: BaseException | None = None
        self.busy_s = 0.0
        self._rng = np.random.default_rng(seed)
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
            from flowrl.ops.multi_gpu import tower_devices
            devices = tower_devices(num_gpus)
            local_worker.foreach_trainable_policy(lambda p, _: p.set_towers(devices))
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
        snapshot = self._snapshot
        if snapshot is None:
            with self.lock:
                snapshot = self._snapshot = self.local_worker.get_weights()
        return snapshot

    def weights_changed(self) -> None:
        """Forget the snapshot of :meth:`latest_weights`; call it (holding :attr:`lock`)
        after setting the local worker's weights outside the thread (a restore)."""
        self._snapshot = None
        self.weights_updated = True

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

    def _load_loop(self) -> None:
        try:
            while not self.stopped:
                self._free.acquire()
                if self.stopped:
                    return
                item = self._take(self.inqueue, "train batch")
                if item is _STOP:
                    return
                sources, batch = self._split(item)
                with self.lock:  # set_towers/syncs must not interleave with loading
                    per_policy = {pid: self.local_worker.get_policy(pid).load_batch(rows)
                                  for pid, rows in policy_batches(self.local_worker, batch).items()}
                self._ready.put(_Loaded(per_policy, batch.env_steps(), sources))
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
            source = self._ready if self.multi_tower else self.inqueue
            item = self._take(source, "loaded batch" if self.multi_tower else "train batch")
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

    def _train(self, item: Any) -> tuple[int, dict, Any]:
        kwargs = dict(num_sgd_iter=1, sgd_minibatch_size=self.sgd_minibatch_size, rng=self._rng)
        worker = self.local_worker
        if isinstance(item, _Loaded):
            info = {pid: worker.get_policy(pid).learn_on_batch(loaded, **kwargs)
                    for pid, loaded in item.per_policy.items()}
            return item.count, info, item.sources
        sources, batch = self._split(item)
        info = {pid: worker.get_policy(pid).learn_on_batch(rows, **kwargs)
                for pid, rows in policy_batches(worker, batch).items()}
        return batch.env_steps(), info, sources

    def run(self) -> None:
        try:
            while not self.stopped:
                item, released = self._next()
                if item is _STOP:
                    return
                start = time.perf_counter()
                with self.lock:
                    count, info, sources = self._train(item)
                    self._snapshot = self.local_worker.get_weights()
                    self.weights_updated = True
                self.busy_s += time.perf_counter() - start
                self.num_steps += 1
                if released and isinstance(item, _Loaded):
                    self._free.release()
                self.outqueue.put((count, info) if sources is None else (count, info, sources))
        except BaseException as e:  # noqa: BLE001 - recorded, raised in the plan by check()
            self._fail(self._wrap(e, "died while training"))
        finally:
            self._stopping.set()
            if self._free is not None:
                for _ in self._loaders:
                    self._free.release()


__all__ = ["LearnerThread"]
