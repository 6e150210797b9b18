"""Replay operators: store rollouts, replay train batches, send priorities back,
update target networks (RLlib 1.x names and meanings).

A plan stores experience either in a driver-side buffer (``local_buffer``: one
:class:`~flowrl.replay.ReplayBuffer`, or a dict policy id -> buffer for
multi-agent batches) or in replay actors (``actors``: from
:func:`~flowrl.replay.create_replay_actors`, in-process or Ray). Replay starts
once ``learning_starts`` rows were stored: filter the store branch with
:class:`LearningStarts`, so a round of ``Concurrently`` never asks an empty buffer
for a batch (the replay side never waits and never returns a not-ready marker).

>>> import flowrl
>>> from flowrl.batch import SampleBatch
>>> from flowrl.replay import ReplayBuffer
>>> buf = ReplayBuffer(100, seed=0)
>>> store = StoreToReplayBuffer(local_buffer=buf)
>>> rollouts = flowrl.from_iterable(lambda: (SampleBatch(obs=[i, i]) for i in range(100)))
>>> stored = rollouts.for_each(store).filter(LearningStarts(store, learning_starts=4))
>>> replayed = Replay(local_buffer=buf, batch_size=3)
>>> run = flowrl.Plan(flowrl.Concurrently([stored, replayed], mode="round_robin",
...                                       output_indexes=[1])).compile()
>>> [b.count for b in run.take(2)], len(buf)
([3, 3], 6)
>>> run.stop()
"""

from __future__ import annotations

from typing import Any, Iterator, Sequence

import numpy as np

from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError
from flowrl.graph.stream import LocalStream, from_actors, from_iterable
from flowrl.metrics import (LAST_TARGET_UPDATE_TS, NUM_TARGET_UPDATES, STEPS_SAMPLED_COUNTER,
                            STEPS_TRAINED_COUNTER, get_metrics)
from flowrl.replay.actor import PRIORITIES, ReplayCalls
from flowrl.replay.buffers import (BATCH_INDEXES, BATCH_ROW_IDS, PrioritizedReplayBuffer,
                                   ReplayBuffer)

#: Counters the replay operators keep.
ROWS_STORED_COUNTER = "num_rows_stored"
ROWS_REPLAYED_COUNTER = "num_rows_replayed"
PRIORITY_UPDATES_COUNTER = "num_priority_updates"

Batch = SampleBatch | MultiAgentBatch


def _check_targets(op: str, local_buffer: Any, actors: Any) -> None:
    if (local_buffer is None) == (actors is None):
        raise ConfigError(f"{op}: give exactly one of local_buffer= (a driver-side buffer) "
                          "or actors= (replay actors)")
    if local_buffer is not None:
        bufs = local_buffer.values() if isinstance(local_buffer, dict) else [local_buffer]
        for b in bufs:
            if not isinstance(b, ReplayBuffer):
                raise ConfigError(f"{op}(local_buffer=...): expected a ReplayBuffer (or a dict "
                                  f"of policy id -> ReplayBuffer), got {type(b).__name__}")
    elif not actors:
        raise ConfigError(f"{op}(actors=[]): give at least one replay actor")


def _per_policy(local_buffer: Any, batch: Batch, op: str) -> list[tuple[Any, SampleBatch]]:
    if isinstance(local_buffer, dict):
        if isinstance(batch, SampleBatch):
            raise ConfigError(f"{op}: a dict of buffers needs MultiAgentBatch items, got a "
                              "SampleBatch")
        missing = sorted(set(batch.policy_batches) - set(local_buffer))
        if missing:
            raise ConfigError(f"{op}: no buffer for policies {missing}; buffers: "
                              f"{sorted(local_buffer)}")
        return [(local_buffer[pid], b) for pid, b in batch.policy_batches.items()]
    if isinstance(batch, MultiAgentBatch):
        if len(batch.policy_batches) != 1:
            raise ConfigError(f"{op}: one buffer cannot hold policies "
                              f"{sorted(batch.policy_batches)}; give a dict of buffers")
        (batch,) = batch.policy_batches.values()
    return [(local_buffer, batch)]


class StoreToReplayBuffer:
    """``for_each(StoreToReplayBuffer(local_buffer=... | actors=...))``: store each batch.

    Returns the batch unchanged. With ``actors`` the batch goes to one actor per
    batch, in turn (``choice="round_robin"``) or drawn with a ``seed`` ed RNG
    (``"random"``), without waiting for the actor (a dead one is a WorkerError at
    a later call). Items may also be ``(source_actor, batch)`` pairs (from
    ``zip_with_source_actor``); the pair is passed through. A ``priorities`` column
    (worker-side prioritization) becomes the rows' initial priorities.

    Metrics: ``num_rows_stored`` grows by the rows stored. ``rows_stored[i]`` (of
    this op) counts the rows sent to target ``i``, which :class:`LearningStarts` reads.
    """

    def __init__(self, local_buffer: Any = None, actors: Sequence[Any] | None = None, *,
                 choice: str = "round_robin", seed: int | None = None):
        _check_targets("StoreToReplayBuffer", local_buffer, actors)
        if choice not in ("round_robin", "random"):
            raise ConfigError(f"StoreToReplayBuffer(choice={choice!r}): use 'round_robin' or "
                              "'random'")
        self.local_buffer = local_buffer
        self.calls = ReplayCalls(actors) if actors is not None else None
        self.choice = choice
        self.rng = np.random.default_rng(seed)
        self._next = 0
        if local_buffer is None:
            self.capacities = None
            self.rows_stored = [0] * len(actors)
        elif isinstance(local_buffer, dict):
            self.capacities = [b.capacity for b in local_buffer.values()]
            self.rows_stored = [0] * len(local_buffer)
        else:
            self.capacities = [local_buffer.capacity]
            self.rows_stored = [0]

    def stored_rows(self) -> list[int]:
        """Rows stored per target (each buffer of a dict; each actor)."""
        if self.local_buffer is not None:
            bufs = (self.local_buffer.values() if isinstance(self.local_buffer, dict)
                    else [self.local_buffer])
            return [len(b) for b in bufs]
        return list(self.rows_stored)

    def __call__(self, item: Any) -> Any:
        batch = item[1] if isinstance(item, tuple) else item
        rows = 0
        if self.calls is None:
            for buf, b in _per_policy(self.local_buffer, batch, "StoreToReplayBuffer"):
                if PRIORITIES in b:
                    prios = b[PRIORITIES]
                    b = SampleBatch({k: v for k, v in b.items() if k != PRIORITIES})
                    if isinstance(buf, PrioritizedReplayBuffer):
                        buf.add(b, priorities=prios)
                    else:
                        buf.add(b)
                else:
                    buf.add(b)
                rows += b.count
        else:
            n = len(self.calls.actors)
            if self.choice == "round_robin":
                i, self._next = self._next, (self._next + 1) % n
            else:
                i = int(self.rng.integers(n))
            self.calls.send(i, "add_batch", batch)
            rows = batch.count
            self.rows_stored[i] += rows
        get_metrics().counters[ROWS_STORED_COUNTER] += rows
        return item


class LearningStarts:
    """``filter(LearningStarts(store, learning_starts))`` after a
    :class:`StoreToReplayBuffer` op: drop items until every buffer it stores into
    holds ``learning_starts`` rows (so replay may start), then pass everything.

    >>> buf = ReplayBuffer(10)
    >>> store = StoreToReplayBuffer(local_buffer=buf)
    >>> gate = LearningStarts(store, learning_starts=3)
    >>> buf.add(SampleBatch(obs=[0, 1])); gate(None)
    False
    >>> buf.add(SampleBatch(obs=[2])); gate(None)
    True
    """

    def __init__(self, store: StoreToReplayBuffer, learning_starts: int):
        if not isinstance(store, StoreToReplayBuffer):
            raise ConfigError("LearningStarts(store=...): pass the StoreToReplayBuffer op "
                              "whose buffers gate the replay")
        if isinstance(learning_starts, bool) or not isinstance(learning_starts, int) \
                or learning_starts < 0:
            raise ConfigError(f"LearningStarts(learning_starts={learning_starts!r}): must be "
                              "an int >= 0")
        if store.capacities and learning_starts > min(store.capacities):
            raise ConfigError(f"LearningStarts(learning_starts={learning_starts}): larger "
                              f"than the buffer capacity {min(store.capacities)}; replay "
                              "could never start")
        self.store = store
        self.learning_starts = max(1, learning_starts)
        self.started = False

    def __call__(self, item: Any) -> bool:
        if not self.started:
            self.started = min(self.store.stored_rows()) >= self.learning_starts
        return self.started


class _CountReplayed:
    def __call__(self, item: Any) -> Any:
        batch = item[1] if isinstance(item, tuple) else item
        get_metrics().counters[ROWS_REPLAYED_COUNTER] += batch.count
        return item


def _sample_forever(local_buffer: Any, batch_size: int, beta: float | None) -> Iterator[Batch]:
    if isinstance(local_buffer, dict):
        while True:
            parts = {pid: b.sample(batch_size, beta) for pid, b in local_buffer.items()
                     if len(b) > 0}
            yield MultiAgentBatch(parts, batch_size)
    while True:
        yield local_buffer.sample(batch_size, beta)


def Replay(local_buffer: Any = None, actors: Sequence[Any] | None = None, num_async: int = 4,
           batch_size: int = 32, *, beta: float | None = None,
           name: str = "replay") -> LocalStream:
    """A LocalStream of replayed train batches.

    ``local_buffer``: ``batch_size`` rows sampled on the driver per item (a dict of
    buffers gives a MultiAgentBatch with ``batch_size`` rows per policy); prioritized
    buffers add ``weights`` (importance exponent ``beta``, default the buffer's),
    and every batch carries ``batch_indexes``/``batch_row_ids``. ``actors``: the
    actors' shards (``ReplayActor.replay()`` forever; their own batch size)
    gathered asynchronously with ``num_async`` requests in flight per actor; add
    ``.zip_with_source_actor()`` to know which actor each batch came from.
    Replay starts only after :class:`LearningStarts` let the store branch pass.

    Metrics: ``num_rows_replayed`` grows by each batch's rows.
    """
    _check_targets("Replay", local_buffer, actors)
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ConfigError(f"Replay(batch_size={batch_size!r}): must be an int >= 1")
    if local_buffer is not None:
        return (from_iterable(lambda: _sample_forever(local_buffer, batch_size, beta), name=name)
                .for_each(_CountReplayed(), name=f"{name}.count"))
    return (from_actors(list(actors), name=name)
            .gather_async(num_async=num_async, name=f"{name}.gather_async")
            .for_each(_CountReplayed(), name=f"{name}.count"))


class UpdateTargetNetwork:
    """``for_each(UpdateTargetNetwork(workers, target_update_freq))``: copy online
    weights into the target networks of the local worker's trainable policies that
    have ``update_target()``, whenever ``num_steps_sampled`` (or
    ``num_steps_trained`` with ``by_steps_trained``) grew by more than
    ``target_update_freq`` since the last update (RLlib 1.x rule). ``lock`` (a
    ``threading.Lock``) is held around the copy when a learner thread trains the
    same policies. Returns its input.

    Metrics: ``num_target_updates`` += 1 and ``last_target_update_ts`` set at each update.
    """

    def __init__(self, workers, target_update_freq: int, by_steps_trained: bool = False, *,
                 policies: Sequence[str] | None = None, lock: Any = None):
        if isinstance(target_update_freq, bool) or not isinstance(target_update_freq, int) \
                or target_update_freq < 0:
            raise ConfigError(f"UpdateTargetNetwork(target_update_freq={target_update_freq!r}): "
                              "must be an int >= 0")
        self.workers = workers
        self.freq = target_update_freq
        self.counter = STEPS_TRAINED_COUNTER if by_steps_trained else STEPS_SAMPLED_COUNTER
        self.policies = list(policies) if policies is not None else None
        self.lock = lock

    def _update(self) -> None:
        worker = self.workers.local_worker()
        ids = self.policies if self.policies is not None else worker.policies_to_train
        for pid in ids:
            policy = worker.get_policy(pid)
            if hasattr(policy, "update_target"):
                policy.update_target()

    def __call__(self, item: Any) -> Any:
        metrics = get_metrics()
        now = metrics.counters[self.counter]
        if now - metrics.counters[LAST_TARGET_UPDATE_TS] > self.freq:
            if self.lock is not None:
                with self.lock:
                    self._update()
            else:
                self._update()
            metrics.counters[NUM_TARGET_UPDATES] += 1
            metrics.counters[LAST_TARGET_UPDATE_TS] = now
        return item


class UpdateReplayPriorities:
    """``for_each(UpdateReplayPriorities(...))``: send new priorities ``|δ| + eps`` for
    replayed rows back to where they were sampled.

    With ``local_buffer`` (DQN), items are ``(batch, info)`` from ``TrainOneStep``;
    the TD errors are computed by the local worker's policies
    (``compute_td_error``) after the step. With ``actors`` (Ape-X), items are
    ``(actor, batch, td_errors, ...)`` (``td_errors``: policy id -> signed errors,
    from the learner thread); they go to ``actor`` without waiting. Rows overwritten
    since they were sampled are skipped by the buffer (``batch_row_ids``) and
    counted in its stats, never written to the rows now in their slots. Returns
    its input.

    Metrics: ``num_priority_updates`` grows by the rows sent.
    """

    def __init__(self, workers=None, *, local_buffer: Any = None,
                 actors: Sequence[Any] | None = None, eps: float = 1e-6):
        _check_targets("UpdateReplayPriorities", local_buffer, actors)
        if local_buffer is not None and workers is None:
            raise ConfigError("UpdateReplayPriorities(local_buffer=...): give workers= too "
                              "(the learner's policies compute the TD errors)")
        if not eps >= 0:
            raise ConfigError(f"UpdateReplayPriorities(eps={eps!r}): must be >= 0")
        self.workers, self.local_buffer, self.eps = workers, local_buffer, eps
        self.calls = ReplayCalls(actors) if actors is not None else None

    def __call__(self, item: Any) -> Any:
        metrics = get_metrics()
        if self.calls is None:
            batch = item[0]
            worker = self.workers.local_worker()
            parts = (batch.policy_batches.items() if isinstance(batch, MultiAgentBatch)
                     else [(next(iter(worker.policy_map)), batch)])
            for pid, b in parts:
                buf = self.local_buffer[pid] if isinstance(self.local_buffer, dict) \
                    else self.local_buffer
                if not isinstance(buf, PrioritizedReplayBuffer) or pid not in \
                        worker.policies_to_train:
                    continue
                td = worker.get_policy(pid).compute_td_error(b)
                buf.update_priorities(b[BATCH_INDEXES], np.abs(td) + self.eps,
                                      row_ids=b[BATCH_ROW_IDS])
                metrics.counters[PRIORITY_UPDATES_COUNTER] += len(td)
            return item
        actor, batch, td_errors = item[0], item[1], item[2]
        i = self.calls.index(actor)
        parts = (batch.policy_batches if isinstance(batch, MultiAgentBatch)
                 else {next(iter(td_errors)): batch})
        for pid, td in td_errors.items():
            b = parts[pid]
            self.calls.send(i, "update_priorities", b[BATCH_INDEXES],
                            np.abs(np.asarray(td, np.float64)) + self.eps, b[BATCH_ROW_IDS])
            metrics.counters[PRIORITY_UPDATES_COUNTER] += len(td)
        return item


__all__ = ["StoreToReplayBuffer", "LearningStarts", "Replay", "UpdateTargetNetwork",
           "UpdateReplayPriorities", "ROWS_STORED_COUNTER", "ROWS_REPLAYED_COUNTER",
           "PRIORITY_UPDATES_COUNTER"]
