"""Recovery of lost hosts: one policy, one counting rule, one place that replaces a host.

A run's driver (the shards of ``from_actors(hosts, restart=...)``), an aggregator
(its members, through the driver) and a :class:`~flowrl.workers.WorkerSet` (a
remote worker found lost by ``foreach_worker``, ``sync_weights``...) all hand a
lost host to the :class:`Recovery` of the hosts it belongs to, and
:meth:`Recovery.replace` is the only code that replaces or drops one.

Policy. A host is *lost* when it died, became unreachable or left a call
unanswered past its bound (:func:`~flowrl.runtime.backend.lost_reason`); any other
error ends the run. Hosts without a recovery (``from_actors`` without
``restart``; a WorkerSet with neither ``recreate_failed_workers`` nor
``ignore_worker_failures``) make a loss a :class:`~flowrl.errors.WorkerError`
naming the host. Otherwise ``replace(key, dead, reason, lost)``, under the
recovery's lock:

1. returns the host serving ``key`` now when that is no longer ``dead`` (another
   gather, or a gather and ``foreach_worker``, found the same loss first): one
   loss, one replacement. None when the host was dropped.
2. drops the host when the policy drops (``replaces=False``: a WorkerSet with
   ``ignore_worker_failures`` or without ``recreate_failed_workers``);
3. raises WorkerError when ``max_restarts`` replacements were made already:
   counted per host (``per_host``: ``from_actors(max_restarts=...)``, over the
   run) or over all the hosts (a WorkerSet's ``max_worker_restarts``: over the
   run, restored with its counters by a checkpoint);
4. else asks the hosts for a replacement (:meth:`Replaceable.rebuild`), which
   may still drop it (a ``restart`` function that returns None). A rebuild that
   raises is a WorkerError naming the host.

What a replacement holds is for its :class:`Replaceable` to say: a WorkerSet's
has the lost worker's ``worker_index`` (so the same env seed), the local
worker's current weights and policy versions, and fresh sampler state (envs,
episodes, RNG; a WorkerSet has no observation filters); a ``from_actors`` host
is whatever ``restart(index)`` returns. A run then installs its stage on it
(a fresh stream).

Counting, the one rule: a recovery counts in one :class:`~flowrl.metrics.MetricsContext`,
its own until :meth:`Recovery.count_in` binds it to a run's (the counts made
before are added there once): ``num_worker_restarts`` += 1 per replacement,
``num_dropped_workers`` += 1 per dropped host, ``num_lost_requests`` += the
requests abandoned with the lost host. A run's driver binds the recoveries of
its shards when it starts; an algorithm binds its WorkerSet's when it compiles
its plan, and ``CollectMetrics`` at each report. Each loss is logged once
(``flowrl.runtime`` logger, WARNING) with its reason.

Aggregators on Ray recover their members on the driver, where the WorkerSet and
the learner's weights are: a member's recovery there is a :class:`RelayedRecovery`
that sends ``replace`` through a small broker actor to the driver's
:class:`RecoveryRelay` thread, which calls the real one and sends back the host
(or the WorkerError's text).

State: per recovery, its hosts (:class:`Replaceable`, e.g. the WorkerSet), the
policy (``replaces``, ``max_restarts``, ``per_host``), ``metrics`` (the counts)
and ``per_key`` (key -> replacements of that host); per run, at most one relay
(a broker actor and one waiting thread).
"""

from __future__ import annotations

import abc
import logging
import threading
from typing import Any, Sequence

from flowrl.errors import WorkerError
from flowrl.metrics import MetricsContext
from flowrl.runtime.calls import is_actor_handle

log = logging.getLogger("flowrl.runtime")

#: Run counters of recovery (``num_worker_restarts`` is also at top level of results).
WORKER_RESTARTS_COUNTER = "num_worker_restarts"
LOST_REQUESTS_COUNTER = "num_lost_requests"
DROPPED_WORKERS_COUNTER = "num_dropped_workers"


class Replaceable(abc.ABC):
    """The hosts a :class:`Recovery` replaces, each under a key (a WorkerSet's
    ``worker_index``, a ``from_actors`` shard's index). Only the recovery calls
    :meth:`rebuild` and :meth:`drop`, under its lock."""

    @abc.abstractmethod
    def host(self, key: Any) -> Any:
        """The host serving ``key`` now; None once it was dropped."""

    @abc.abstractmethod
    def describe(self, key: Any) -> str:
        """The host of ``key`` in messages: ``"remote worker 2"``."""

    @abc.abstractmethod
    def rebuild(self, key: Any, another: bool) -> Any:
        """End the lost host of ``key`` and return its replacement (None: dropped
        instead). ``another``: whether ``max_restarts`` allows one more after it."""

    @abc.abstractmethod
    def drop(self, key: Any) -> None:
        """End the lost host of ``key``; the hosts go on without it."""


class Recovery:
    """Replaces or drops the lost hosts of one :class:`Replaceable`; see the module
    docstring. ``setting`` names ``max_restarts`` in messages; ``lock``: the
    owner's, when the hosts keep state of their own (a WorkerSet's).

    >>> hosts = HostList(["h0", "h1"], lambda i: f"new{i}", "src")
    >>> rec = Recovery(hosts, max_restarts=1, per_host=True)
    >>> rec.replace(1, "h1", "died", lost=2), hosts.hosts
    ('new1', ['h0', 'new1'])
    >>> rec.replace(1, "h1", "died")        # found again: the same replacement
    'new1'
    >>> dict(rec.metrics.counters), rec.per_key
    ({'num_lost_requests': 2, 'num_worker_restarts': 1}, {1: 1})
    >>> rec.replace(1, hosts.host(1), "died")
    Traceback (most recent call last):
    ...
    flowrl.errors.WorkerError: shard host src[1] was lost (died) after 1 restart(s): ...
    """

    def __init__(self, hosts: Replaceable, *, replaces: bool = True,
                 max_restarts: int | None = None, per_host: bool = False,
                 setting: str = "max_restarts", lock: Any = None):
        self.hosts = hosts
        self.replaces = replaces
        self.max_restarts = max_restarts
        self.per_host = per_host
        self.setting = setting
        self.lock = threading.RLock() if lock is None else lock
        self.metrics = MetricsContext()
        self.bound = False
        self.per_key: dict[Any, int] = {}

    # -- counting ------------------------------------------------------------------
    @property
    def num_restarts(self) -> int:
        """``num_worker_restarts`` where this recovery counts."""
        return self.metrics.counters.get(WORKER_RESTARTS_COUNTER, 0)

    @property
    def num_dropped(self) -> int:
        """``num_dropped_workers`` where this recovery counts."""
        return self.metrics.counters.get(DROPPED_WORKERS_COUNTER, 0)

    def count_in(self, metrics: MetricsContext) -> None:
        """Count from now on in ``metrics`` (a run's); what was counted before the first
        binding is added to it once, and binding again to the same metrics adds nothing."""
        with self.lock:
            if metrics is self.metrics:
                return
            if not self.bound:
                for name, n in self.metrics.counters.items():
                    metrics.counters[name] += n
            self.metrics, self.bound = metrics, True

    def _add(self, name: str, n: int) -> None:
        if n:
            self.metrics.counters[name] += n

    # -- the one place -------------------------------------------------------------
    def replace(self, key: Any, dead: Any, reason: str, lost: int = 0) -> Any:
        """Recover host ``dead`` of ``key``, lost for ``reason`` with ``lost`` requests
        abandoned: the host serving ``key`` from now on, or None (dropped)."""
        with self.lock:
            self._add(LOST_REQUESTS_COUNTER, lost)
            current = self.hosts.host(key)
            if current is None or not _same(current, dead):
                return current
            name = self.hosts.describe(key)
            if not self.replaces:
                self.hosts.drop(key)
                return self._dropped(name, reason, lost)
            used = self.per_key.get(key, 0) if self.per_host else self.num_restarts
            limit = self.max_restarts
            if limit is not None and used >= limit:
                raise WorkerError(f"{name} was lost ({reason}) after {used} restart(s): "
                                  f"{self.setting}={limit} is used up; find out why it "
                                  "fails, or raise the limit")
            try:
                new = self.hosts.rebuild(key, limit is None or used + 1 < limit)
            except WorkerError:
                raise
            except Exception as e:
                raise WorkerError(f"{name} was lost ({reason}) and its replacement raised "
                                  f"{type(e).__name__}: {e}") from e
            if new is None:
                return self._dropped(name, reason, lost)
            self.per_key[key] = used_here = self.per_key.get(key, 0) + 1
            self._add(WORKER_RESTARTS_COUNTER, 1)
            log.warning("%s was lost (%s) and replaced (restart %d of it, %d in all); %d "
                        "request(s) abandoned", name, reason, used_here, self.num_restarts,
                        lost)
            return new

    def _dropped(self, name: str, reason: str, lost: int) -> None:
        self._add(DROPPED_WORKERS_COUNTER, 1)
        log.warning("%s was lost (%s) and dropped: the run goes on without it; %d "
                    "request(s) abandoned", name, reason, lost)
        return None


def _same(a: Any, b: Any) -> bool:
    """Whether ``a`` and ``b`` are one host (a Ray actor handle may be a copy)."""
    return a is b or (is_actor_handle(a) and is_actor_handle(b) and a == b)


class HostList(Replaceable):
    """The hosts of one ``from_actors`` source, replaced by its ``restart(index)``."""

    def __init__(self, hosts: Sequence[Any], restart: Any, label: str):
        self.hosts = list(hosts)
        self.restart = restart
        self.label = label

    def host(self, index: int) -> Any:
        return self.hosts[index]

    def describe(self, index: int) -> str:
        return f"shard host {self.label}[{index}]"

    def rebuild(self, index: int, another: bool) -> Any:
        self.hosts[index] = self.restart(index)
        return self.hosts[index]

    def drop(self, index: int) -> None:
        self.hosts[index] = None


class ShardRecovery:
    """The recovery of one ``from_actors`` source's shards: shard ``i`` is key
    ``keys[i]`` of ``recovery``. What ``from_actors(restart=...)`` takes from a
    WorkerSet (:meth:`~flowrl.workers.WorkerSet.restarter`); a run's driver makes one
    for a ``restart`` function. Called as ``restart(i)`` it replaces shard ``i``'s
    host now."""

    def __init__(self, recovery: Recovery, keys: Sequence[Any]):
        self.recovery = recovery
        self.keys = list(keys)

    def replace(self, index: int, dead: Any, reason: str, lost: int = 0) -> Any:
        """:meth:`Recovery.replace` for shard ``index``."""
        return self.recovery.replace(self.keys[index], dead, reason, lost)

    def __call__(self, index: int) -> Any:
        with self.recovery.lock:
            current = self.recovery.hosts.host(self.keys[index])
            return self.replace(index, current, "requested")


# ---------------------------------------------------------------------------------
# Aggregators on Ray: a member's ``replace`` runs on the driver.
#
# Only the driver holds the WorkerSet (the learner's current weights, the list of
# remote workers that weight broadcasts and ``foreach_worker`` reach) and the run's
# counters. So an aggregator's member gets a :class:`RelayedRecovery`, which sends
# the request through a small async actor (:class:`RecoveryBroker`) and waits for
# the answer; the driver's :class:`RecoveryRelay` thread blocks on the broker's next
# request (no polling), calls the source's :class:`ShardRecovery` and sends back the
# host (or None: dropped, or the WorkerError's text). The aggregator's sub-run then
# installs its stage on the replacement exactly as a driver-side gather would.


class RecoveryBroker:
    """Ray actor (async): hands recovery requests from aggregators to the driver."""

    def __init__(self) -> None:
        import asyncio
        self._requests: Any = asyncio.Queue()
        self._replies: dict[int, Any] = {}
        self._seq = 0

    async def request(self, *args: Any) -> tuple[Any, str | None]:
        import asyncio
        self._seq += 1
        reply = asyncio.get_running_loop().create_future()
        self._replies[self._seq] = reply
        await self._requests.put((self._seq, *args))
        return await reply

    async def next_request(self) -> tuple:
        return await self._requests.get()

    async def reply(self, seq: int, result: tuple[Any, str | None]) -> None:
        reply = self._replies.pop(seq, None)
        if reply is not None and not reply.done():
            reply.set_result(result)


class RelayedRecovery:
    """An aggregator member's recovery: :meth:`replace` runs on the driver.

    A refusal there (``max_restarts`` used up, a failed rebuild) comes back as a
    WorkerError with the driver's message."""

    def __init__(self, broker: Any, source: str, timeout_s: float):
        self.broker = broker
        self.source = source
        self.timeout_s = timeout_s

    def replace(self, index: int, dead: Any, reason: str, lost: int = 0) -> Any:
        from flowrl.runtime.ray_backend import RAY_CALLS
        asked = RAY_CALLS.call(self.broker, "request", self.source, index, dead, reason, lost)
        try:
            new, error = RAY_CALLS.get(
                asked, timeout=self.timeout_s, label="the recovery broker",
                setting="the larger of remote_timeout_s and the start wait")
        except WorkerError as e:
            # Not this member's loss: the driver is stopping or stuck in the learner.
            raise WorkerError(f"the recovery of {self.source}[{index}] got no answer from "
                              f"the driver ({e}); the run is stopping") from e
        if error is not None:
            raise WorkerError(error)
        return new


class RecoveryRelay:
    """Driver side of relayed recoveries: one broker actor and one waiting thread per run.

    :meth:`proxy` registers a source's :class:`ShardRecovery` and returns the
    :class:`RelayedRecovery` its aggregator members get. The thread serves requests
    one at a time. :meth:`close` ends the broker (which ends the thread).
    """

    def __init__(self, timeout_s: float):
        from flowrl.runtime.ray_backend import RAY_CALLS
        self.calls = RAY_CALLS
        self.broker = RAY_CALLS.create(RecoveryBroker, num_cpus=0, on_driver_node=True)
        self.timeout_s = timeout_s
        self.recoveries: dict[str, ShardRecovery] = {}
        self._thread = threading.Thread(target=self._serve, name="flowrl-recovery-relay",
                                        daemon=True)
        self._thread.start()

    def proxy(self, source: str, recovery: ShardRecovery) -> RelayedRecovery:
        self.recoveries[source] = recovery
        return RelayedRecovery(self.broker, source, self.timeout_s)

    def _serve(self) -> None:
        calls = self.calls
        while True:
            # Unbounded on purpose: this thread waits for the next request as long as
            # the run lasts; close() ends the broker, which ends the wait.
            try:
                seq, source, index, dead, reason, lost = calls.get(
                    calls.call(self.broker, "next_request"), timeout=None,
                    label="the recovery broker", setting="the run's lifetime")
            except Exception:  # noqa: BLE001 - the broker ended: the run stopped
                return
            try:
                result = (self.recoveries[source].replace(index, dead, reason, lost), None)
            except WorkerError as e:  # sent back, raised in the aggregator
                result = (None, str(e))
            except Exception as e:  # noqa: BLE001 - sent back, raised in the aggregator
                result = (None, f"the recovery of {source}[{index}] on the driver raised "
                                f"{type(e).__name__}: {e}")
            try:
                calls.call(self.broker, "reply", seq, result)
            except Exception:  # noqa: BLE001 - the broker ended
                return

    def close(self) -> None:
        self.calls.kill(self.broker)
        self._thread.join(timeout=3)


__all__ = ["Recovery", "Replaceable", "HostList", "ShardRecovery", "RelayedRecovery",
           "RecoveryRelay", "WORKER_RESTARTS_COUNTER", "LOST_REQUESTS_COUNTER",
           "DROPPED_WORKERS_COUNTER"]
