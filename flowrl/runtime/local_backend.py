"""The in-process backend: shard hosts are Python objects stepped by the driver.

Policy: every shard host and every aggregator gets its own copy of the code
shipped to it, made as Ray ships it to an actor (a cloudpickle round trip, see
:func:`own_copy`), so a stateful callable (``ConcatBatches``) keeps one state per
shard or aggregator, as it does on Ray; code that cannot be pickled is refused
with a ConfigError naming its node, as Ray refuses it. A request runs when it is
waited for. ``wait_all`` runs the requests in the order given. ``wait_any`` runs
the oldest request of every shard, in the order given: an in-process host is
always ready, so every shard has answered when it returns, and the driver's least
recently served first choice among them (``driver.py``) makes async gathers a
deterministic rotation over the shards. Shard code runs with no current run or
metrics (only its host is current), exactly as it would on an actor.

State: ``_queued`` maps each host to its FIFO of requests not yet run (a host
serves requests in submission order).
"""

from __future__ import annotations

import io
import pickle
from collections import deque
from collections.abc import Sequence
from typing import Any, Iterable

import cloudpickle

from flowrl.errors import ConfigError

from flowrl.runtime.shard_host import ItemsHost, ShardHost
from flowrl.metrics import CURRENT_METRICS
from flowrl.runtime.context import CURRENT_RUN
from flowrl.runtime.backend import Backend, Request, Shard


class LocalBackend(Backend):
    name = "local"

    def __init__(self) -> None:
        self._queued: dict[int, deque[Request]] = {}

    # In-process hosts are no actors: the plan's resource annotations have nothing
    # to apply to here (compile_plan has checked them all the same).
    def make_item_host(self, source: Any, repeat: bool, options: dict | None = None,
                       label: str = "") -> Any:
        return ItemsHost(source, repeat)

    def make_aggregator_host(self, spec: Any, options: dict | None = None,
                             label: str = "") -> Any:
        from flowrl.runtime.aggregator import AggregatorHost

        parts = [(op.id, op.label, op.params) for op in spec.program.ops.values()]
        parts += [part for _, stage, *_ in spec.members for part in _stage_parts(stage)]
        return AggregatorHost(own_copy(spec, parts, (spec.program.name, "aggregate")), backend="local")

    def install(self, shards: list[Shard], replacing: bool = False) -> None:
        with shard_side():
            for s in shards:
                parts = _stage_parts(s.stage)
                s.host.flowrl_install(s.key, own_copy(s.stage, parts,
                                                      (s.stage.source_id, s.stage.source_label)))

    def submit(self, shard: Shard, n: int) -> Request:
        req = Request(shard, n)
        self._queued.setdefault(id(shard), deque()).append(req)
        return req

    def _run_through(self, req: Request) -> None:
        queue = self._queued[id(req.shard)]
        while not req.done:
            head = queue.popleft()
            with shard_side():
                try:
                    head.set_result(head.shard.host.flowrl_pull(head.shard.key, head.n))
                except Exception as e:  # noqa: BLE001 - surfaced by result()
                    head.set_error(e)

    def wait_all(self, requests: list[Request]) -> None:
        for req in requests:
            if not req.done:
                self._run_through(req)

    def wait_any(self, queues: list[Sequence[Request]], polled: bool = False) -> None:
        for q in queues:
            if not q[0].done:
                self._run_through(q[0])

    def forget(self, shard: Shard) -> None:
        self._queued.pop(id(shard), None)

    def release(self, shards: list[Shard]) -> None:
        for s in shards:
            self._queued.pop(id(s), None)
            with shard_side():
                s.host.flowrl_uninstall(s.key)

    def item_counts(self, shards: list[Shard]) -> list[dict[str, int]]:
        return [s.host.flowrl_item_counts(s.key) for s in shards]

    def destroy(self, hosts: list[Any]) -> None:
        for h in hosts:
            close = getattr(h, "flowrl_close", None)
            if close is not None:
                close()


class shard_side:
    """Run shard code as on an actor: no current run, no current metrics."""

    __slots__ = ("tokens",)

    def __enter__(self) -> None:
        self.tokens = (CURRENT_RUN.set(None), CURRENT_METRICS.set(None))

    def __exit__(self, *exc) -> None:
        run, metrics = self.tokens
        CURRENT_METRICS.reset(metrics)
        CURRENT_RUN.reset(run)


class _ShipPickler(cloudpickle.CloudPickler):
    """cloudpickle that keeps in-process ShardHosts by reference (they stand for actor
    handles, which Ray pickles as references too)."""

    def __init__(self, file: Any, hosts: list[Any]):
        super().__init__(file)
        self.hosts = hosts

    def persistent_id(self, obj: Any) -> Any:
        if isinstance(obj, ShardHost):
            self.hosts.append(obj)
            return len(self.hosts) - 1
        return None


class _ShipUnpickler(pickle.Unpickler):
    def __init__(self, file: Any, hosts: list[Any]):
        super().__init__(file)
        self.hosts = hosts

    def persistent_load(self, pid: Any) -> Any:
        return self.hosts[pid]


def own_copy(obj: Any, parts: Iterable[tuple[str, str, Any]] = (),
             where: tuple[str, str] = ("?", "shipped code")) -> Any:
    """A copy of ``obj`` as an actor would receive it, in-process ShardHosts shared.

    Code that cannot be pickled could not be shipped to an actor either, and
    sharing one instance across shards would give a stateful callable one state
    for all of them: a ConfigError instead, naming the first of ``parts`` (node
    id, label, the node's parameters) that does not pickle, or the node ``where``
    (id, label) when each part does on its own.

    >>> class Count:
    ...     def __init__(self): self.n = 0
    ...     def __call__(self, x): self.n += 1; return self.n
    >>> c = Count(); c(0)
    1
    >>> copy = own_copy(c); copy(0), c.n
    (2, 1)
    >>> import threading
    >>> own_copy(threading.Lock(), [("src.count", "count", {"fn": threading.Lock()})])
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: 'src.count' (count) runs shard-side, ...
    """
    try:
        return _round_trip(obj)
    except Exception as e:  # noqa: BLE001 - any pickling failure is reported the same
        error = e
    for node_id, label, value in parts:
        try:
            _ShipPickler(io.BytesIO(), []).dump(value)
        except Exception as e:  # noqa: BLE001
            raise _unshippable(node_id, label, e) from e
    raise _unshippable(*where, error) from error


def _round_trip(obj: Any) -> Any:
    hosts: list[Any] = []
    buf = io.BytesIO()
    _ShipPickler(buf, hosts).dump(obj)
    buf.seek(0)
    return _ShipUnpickler(buf, hosts).load()


def _stage_parts(stage: Any) -> list[tuple[str, str, Any]]:
    return [(step.node_id, step.label, step.params) for step in stage.steps]


def _unshippable(node_id: str, label: str, e: BaseException) -> ConfigError:
    return ConfigError(
        f"{node_id!r} ({label}) runs shard-side, where each shard gets its own copy of "
        f"it (on the local backend as on Ray), but it cannot be pickled: "
        f"{type(e).__name__}: {e}; make it picklable (a module-level function or class "
        "without locks, threads, open files or sockets), or build the unpicklable part "
        "per shard inside it (e.g. on its first call)")
