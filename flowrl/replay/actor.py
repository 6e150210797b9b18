"""``ReplayActor``: a replay buffer hosted as a shard source, and how the driver talks to it.

A :class:`ReplayActor` owns one buffer (prioritized or uniform). As a
:class:`~flowrl.ShardHost` its shard is ``replay()`` forever: a train batch of
``train_batch_size`` rows sampled from its buffer. It lives in-process (local
backend) or as a Ray actor created by :func:`create_replay_actors` on the
driver's node (hard node affinity, no CPU reserved: it only stores and samples).
The driver reaches it through the backend's calls (:mod:`flowrl.runtime.calls`).

Ordering policy: a Ray replay actor is an ordinary (single-threaded) actor, and
Ray runs an actor's calls from one caller in submission order, so rows the driver
sent with :meth:`ReplayActor.add_batch` are stored before any later pull samples.
A plan therefore starts replaying only after it has sent ``learning_starts`` rows
to every actor (``flowrl.ops.LearningStarts``); a pull that finds fewer rows is an
error, not a wait (a wait inside the actor could never end: the adds queue behind
it).

:class:`ReplayCalls` is the driver side: fire-and-forget calls to in-process or
Ray replay actors, with every outstanding Ray call tracked so that a dead actor
surfaces as a :class:`~flowrl.errors.WorkerError` naming it at the next call
(never silently dropped data).
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError, FlowError, WorkerError
from flowrl.runtime.shard_host import ShardHost
from flowrl.replay.buffers import PrioritizedReplayBuffer, ReplayBuffer
from flowrl.runtime.backend import lost_reason
# CALL_TIMEOUT_S: how long a driver-side call to a replay actor may take (re-exported).
from flowrl.runtime.calls import (CALL_TIMEOUT_S, PendingCalls, calls_for, calls_for_backend,
                                  is_actor_handle, remote_cause, require_ray,
                                  resolve_backend)

#: Column a rollout batch may carry with one initial priority per row
#: (worker-side prioritization); the replay side stores it as the rows' priorities.
PRIORITIES = "priorities"


class ReplayActor(ShardHost):
    """One replay buffer as a shard host; see the module docstring.

    ``capacity``; ``prioritized`` (with ``alpha``, ``beta``, ``eps``) or uniform;
    ``learning_starts`` rows before it replays; ``train_batch_size`` rows per
    replayed batch; ``seed`` for its sampler; ``name`` for messages.

    >>> a = ReplayActor(100, learning_starts=4, train_batch_size=2, seed=0)
    >>> a.add_batch(SampleBatch(obs=[0, 1, 2, 3, 4]))
    5
    >>> b = a.replay()
    >>> b.count, sorted(b.keys())
    (2, ['batch_indexes', 'batch_row_ids', 'obs', 'weights'])
    >>> a.update_priorities(b["batch_indexes"], np.array([2.0, 2.0]), b["batch_row_ids"])
    2
    """

    def __init__(self, capacity: int, *, prioritized: bool = True, alpha: float = 0.6,
                 beta: float = 0.4, eps: float = 1e-6, learning_starts: int = 1000,
                 train_batch_size: int = 32, seed: int | None = None, name: str = "replay"):
        if isinstance(learning_starts, bool) or not isinstance(learning_starts, int) \
                or learning_starts < 0 or learning_starts > capacity:
            raise ConfigError(f"ReplayActor(learning_starts={learning_starts!r}): must be an "
                              f"int in [0, capacity={capacity}]")
        if isinstance(train_batch_size, bool) or not isinstance(train_batch_size, int) \
                or train_batch_size < 1:
            raise ConfigError(f"ReplayActor(train_batch_size={train_batch_size!r}): must be an "
                              "int >= 1")
        self.name = name
        self.buffer: ReplayBuffer = (
            PrioritizedReplayBuffer(capacity, alpha=alpha, beta=beta, eps=eps, seed=seed)
            if prioritized else ReplayBuffer(capacity, seed=seed))
        self.learning_starts = learning_starts
        self.train_batch_size = train_batch_size

    def add_batch(self, batch: SampleBatch | MultiAgentBatch) -> int:
        """Store ``batch`` (a SampleBatch, or a MultiAgentBatch of one policy); a
        ``priorities`` column gives the rows' initial priorities. Returns the rows
        stored."""
        if isinstance(batch, MultiAgentBatch):
            if len(batch.policy_batches) != 1:
                raise ConfigError(f"{self.name}: a replay actor stores one policy's rows; got "
                                  f"policies {sorted(batch.policy_batches)}")
            (batch,) = batch.policy_batches.values()
        priorities = None
        if PRIORITIES in batch:
            priorities = batch[PRIORITIES]
            batch = SampleBatch({k: v for k, v in batch.items() if k != PRIORITIES})
        if priorities is not None and isinstance(self.buffer, PrioritizedReplayBuffer):
            self.buffer.add(batch, priorities=priorities)
        else:
            self.buffer.add(batch)
        return batch.count

    def replay(self) -> SampleBatch:
        """One train batch sampled from the buffer (once ``learning_starts`` rows are in)."""
        if len(self.buffer) < max(1, self.learning_starts):
            raise FlowError(f"{self.name}: asked to replay with {len(self.buffer)} rows stored "
                            f"(< learning_starts={self.learning_starts}); start replaying only "
                            "after that many rows were sent (filter the store branch with "
                            "flowrl.ops.LearningStarts)")
        return self.buffer.sample(self.train_batch_size)

    def shard_items(self) -> Iterator[SampleBatch]:
        """``replay()`` forever."""
        while True:
            yield self.replay()

    def update_priorities(self, indexes: np.ndarray, priorities: np.ndarray,
                          row_ids: np.ndarray | None = None) -> int:
        """Forwarded to the buffer (uniform buffers ignore it); returns rows updated."""
        if not isinstance(self.buffer, PrioritizedReplayBuffer):
            return 0
        return self.buffer.update_priorities(indexes, priorities, row_ids=row_ids)

    def stats(self) -> dict[str, Any]:
        """The buffer's ``stats()``."""
        return self.buffer.stats()

    def get_state(self) -> dict[str, Any]:
        """The buffer's state (rows, priorities, RNG) for checkpoints."""
        return self.buffer.get_state()

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned."""
        self.buffer.set_state(state)

    def __repr__(self) -> str:
        return f"ReplayActor({self.name!r}, {self.buffer!r})"


def create_replay_actors(n: int, *, capacity: int, backend: str = "local",
                         prioritized: bool = True, alpha: float = 0.6, beta: float = 0.4,
                         eps: float = 1e-6, learning_starts: int = 1000,
                         train_batch_size: int = 32, seed: int | None = None,
                         name: str = "replay") -> list:
    """``n`` replay actors of ``capacity`` rows each (actor ``i`` seeded ``seed + i``).

    ``backend="ray"``: Ray actors with ``num_cpus=0`` pinned to the driver's node
    (hard node affinity), so sampled batches reach the learner without crossing
    the network; Ray must be running. ``backend="local"``: in-process instances.
    ``backend="auto"``: Ray when it is running, as for a WorkerSet
    (:func:`~flowrl.runtime.calls.resolve_backend`).

    >>> actors = create_replay_actors(2, capacity=10, learning_starts=1, seed=0)
    >>> [a.name for a in actors], actors[1].buffer.capacity
    (['replay[0]', 'replay[1]'], 10)
    """
    if isinstance(n, bool) or not isinstance(n, int) or n < 1:
        raise ConfigError(f"create_replay_actors(n={n!r}): must be an int >= 1")
    backend = resolve_backend(backend, "create_replay_actors", creates=n)
    if backend == "ray":
        require_ray("create_replay_actors")
    kwargs = dict(capacity=capacity, prioritized=prioritized, alpha=alpha, beta=beta, eps=eps,
                  learning_starts=learning_starts, train_batch_size=train_batch_size)
    calls = calls_for_backend(backend)
    return [calls.create(ReplayActor, **kwargs, seed=None if seed is None else seed + i,
                         name=f"{name}[{i}]", num_cpus=0, on_driver_node=True)
            for i in range(n)]


class ReplayCalls:
    """Driver-side calls to replay actors (in-process or Ray; see the module docstring).

    ``send(i, method, *args)`` calls ``actors[i].method(*args)``: in-process now,
    on Ray without waiting (the call is tracked). ``call(i, method, *args)``
    waits for the result (at most :data:`CALL_TIMEOUT_S`). Every send first
    collects the tracked calls that finished, so an actor that died raises a
    WorkerError naming it (``"replay actor 1 of 2 (a Ray actor) died ..."``).
    At most ``max_pending`` Ray calls stay untracked-for; beyond that ``send``
    waits for the oldest (backpressure instead of unbounded queues).
    """

    def __init__(self, actors: Sequence[Any], *, what: str = "replay actor",
                 max_pending: int = 64):
        if not actors:
            raise ConfigError(f"ReplayCalls: no {what}s given")
        kinds = {is_actor_handle(a) for a in actors}
        if len(kinds) != 1:
            raise ConfigError(f"ReplayCalls: {what}s mix Ray actor handles and in-process "
                              "objects; give one kind")
        self.actors = list(actors)
        self.calls = calls_for(self.actors[0])
        self.remote = self.calls.remote
        self.what = what
        self.max_pending = max_pending
        self._pending = PendingCalls(self.calls)

    def label(self, i: int) -> str:
        return f"{self.what} {i} of {len(self.actors)}"

    def index(self, actor: Any) -> int:
        for i, a in enumerate(self.actors):
            if a is actor or a == actor:
                return i
        raise ConfigError(f"ReplayCalls: {actor!r} is not one of the {len(self.actors)} "
                          f"{self.what}s")

    def _failed(self, i: int, e: BaseException) -> BaseException:
        """The error to raise for a failed call to actor ``i``."""
        if lost_reason(e) is not None:
            err = WorkerError(f"{e}; the run cannot continue without it (its buffer is lost)")
            err.__cause__ = e.__cause__ or e
            return err
        cause = remote_cause(e)
        if isinstance(cause, FlowError):
            return cause
        err = WorkerError(f"{self.label(i)} failed: {type(cause).__name__}: {cause}")
        err.__cause__ = e
        return err

    def _collect(self, block: bool = False) -> None:
        """Take the tracked calls that finished (with ``block``, wait for at least one,
        at most :data:`CALL_TIMEOUT_S`); raise for the first that failed."""
        if not len(self._pending):
            return
        done = (self._pending.finished(wait_s=CALL_TIMEOUT_S, num=1) if block
                else self._pending.finished())
        if block and not done:
            i = self._pending.oldest()
            raise WorkerError(f"{self.label(i)}: a call did not finish within "
                              f"{CALL_TIMEOUT_S:g} s (CALL_TIMEOUT_S); the actor is stuck or "
                              "overloaded")
        for i, error in done:
            if error is not None:
                raise self._failed(i, error)

    def send(self, i: int, method: str, *args: Any) -> None:
        """``actors[i].method(*args)`` without waiting for the result."""
        self._collect()
        while len(self._pending) >= self.max_pending:
            self._collect(block=True)
        self._pending.add(i, self.calls.call(self.actors[i], method, *args), self.label(i))

    def call(self, i: int, method: str, *args: Any) -> Any:
        """``actors[i].method(*args)``, waiting for its result."""
        self._collect()
        return self._get(i, self.calls.call(self.actors[i], method, *args), method)

    def call_all(self, method: str, *args: Any) -> list:
        """``[actor.method(*args) for each actor]`` (Ray calls submitted together)."""
        self._collect()
        pending = [self.calls.call(a, method, *args) for a in self.actors]
        return [self._get(i, p, method) for i, p in enumerate(pending)]

    def _get(self, i: int, pending: Any, method: str) -> Any:
        try:
            return self.calls.get(pending, timeout=CALL_TIMEOUT_S, label=self.label(i),
                                  setting=f"{method}(), CALL_TIMEOUT_S")
        except Exception as e:  # noqa: BLE001 - named by _failed
            raise self._failed(i, e) from e

    def flush(self) -> None:
        """Wait for every tracked call (raising for a dead actor)."""
        while len(self._pending):
            self._collect(block=True)


__all__ = ["ReplayActor", "create_replay_actors", "ReplayCalls", "PRIORITIES"]
