"""The ``ShardHost`` mixin: what a class inherits to be a shard source.

A host implements ``shard_items()``; the runtime installs a fused shard-local stage
over it under a run key and then pulls items in batches. A host can serve several
runs at once (a training plan and an evaluation plan over the same workers): each
run installs its stage under its own key, and uninstalling one leaves the others.

The same methods are called in-process (local backend) and as Ray actor methods
(Ray backend), so nothing here may depend on where the host lives. While a host
runs a run's stage (install, pull, uninstall) it is the *current host*:
:func:`current_host` returns it to the shard-side functions it calls.

The first run installed on a host with no other run becomes its *default* until
that run uninstalls: ``flowrl_install`` returns True for it, and ``flowrl_next()``
pulls one item of its stream with no arguments at all and returns the item itself
(:data:`STREAM_END` once the stream has ended). On Ray the driver pulls a
default run that way, since every argument of an actor call is serialized and
read again (see "Requests" in ``runtime/ray_backend.py``); other runs name their
key in ``flowrl_pull``.

State: per host, ``_flowrl_installed`` (run key -> its stream),
``_flowrl_stages`` (run key -> its stage, for item counts) and
``_flowrl_default`` (the default run's key, or None).

>>> class Counter(ShardHost):
...     def shard_items(self):
...         return iter(range(5))
>>> h = Counter()
>>> h.flowrl_install("run-1", lambda items: (x * 10 for x in items))
True
>>> h.flowrl_install("run-2", lambda items: items)
False
>>> h.flowrl_pull("run-1", 2)
([0, 10], False)
>>> h.flowrl_next(), h.flowrl_pull("run-2", 2)
(20, ([0, 1], False))
>>> h.flowrl_pull("run-1", 10)
([30, 40], True)
>>> h.flowrl_next()
STREAM_END
>>> h.flowrl_uninstall("run-1")
>>> try:
...     h.flowrl_next()
... except FlowError as e:
...     print(str(e)[:51])
Counter.flowrl_next(): this host has no default run
"""

from __future__ import annotations

import contextvars
from typing import Any, Callable, Iterator

from flowrl.errors import FlowError

Stage = Callable[[Iterator[Any]], Iterator[Any]]

#: The host running the current shard-side function (what :func:`current_host`
#: returns); a host sets it around the stages it runs.
CURRENT_HOST: contextvars.ContextVar["ShardHost | None"] = contextvars.ContextVar(
    "flowrl_host", default=None)


def current_host() -> "ShardHost":
    """The :class:`ShardHost` running the current shard-side function.

    On Ray it is the actor's own object; on the local backend the in-process
    host. Inside an aggregator's pipeline it is the aggregator's host. Raises
    :class:`~flowrl.errors.FlowError` anywhere else (on the driver, at module level).

    >>> import flowrl
    >>> class Named(ShardHost):
    ...     def __init__(self, name): self.name = name
    ...     def shard_items(self): return iter(range(2))
    >>> s = flowrl.from_actors([Named("a"), Named("b")]).for_each(
    ...     lambda x: (current_host().name, x))
    >>> with flowrl.Plan(s.gather_sync()).compile() as run:
    ...     run.take(4)
    [('a', 0), ('b', 0), ('a', 1), ('b', 1)]
    >>> try:
    ...     current_host()
    ... except FlowError:
    ...     print("FlowError on the driver")
    FlowError on the driver
    """
    host = CURRENT_HOST.get()
    if host is None:
        raise FlowError(
            "current_host() was called outside shard-side code; it is only available in "
            "functions a ShardHost runs for a plan (for_each/filter/... on a ParallelStream, "
            "or an aggregate() pipeline); on the driver, pass what the function needs to it")
    return host


class StreamEnd:
    """The type of :data:`STREAM_END` (a Ray reply is a copy: test its type)."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "STREAM_END"


#: What :meth:`ShardHost.flowrl_next` returns once its run's stream has ended.
STREAM_END = StreamEnd()


class ShardHost:
    """Mixin for shard sources; subclasses implement :meth:`shard_items`."""

    def shard_items(self) -> Iterator[Any]:
        raise FlowError(
            f"{type(self).__name__} inherits ShardHost but does not implement "
            "shard_items(); define it to return the iterator this shard produces")

    def _flowrl_streams(self) -> dict[str, Iterator[Any]]:
        streams = self.__dict__.get("_flowrl_installed")
        if streams is None:
            streams = self.__dict__["_flowrl_installed"] = {}
        return streams

    def flowrl_install(self, key: str, stage: Stage) -> bool:
        """Start this host's stream for run ``key``: ``stage(iter(shard_items()))``.

        Returns whether run ``key`` is now the host's default (no other run was
        installed), whose items :meth:`flowrl_next` pulls."""
        token = CURRENT_HOST.set(self)
        try:
            self._flowrl_streams()[key] = stage(iter(self.shard_items()))
        finally:
            CURRENT_HOST.reset(token)
        self.__dict__.setdefault("_flowrl_stages", {})[key] = stage
        if self.__dict__.get("_flowrl_default") is None:
            self.__dict__["_flowrl_default"] = key
        return self.__dict__["_flowrl_default"] == key

    def flowrl_item_counts(self, key: str) -> dict[str, int]:
        """Items each shard-local node of run ``key`` has emitted on this host."""
        stage = self.__dict__.get("_flowrl_stages", {}).get(key)
        counts = getattr(stage, "item_counts", None)
        return counts() if counts is not None else {}

    def flowrl_pull(self, key: str, max_items: int = 1) -> tuple[list[Any], bool]:
        """Up to ``max_items`` next items of run ``key`` and whether the stream ended."""
        stream = self._flowrl_streams()[key]
        items: list[Any] = []
        append = items.append
        token = CURRENT_HOST.set(self)
        try:
            for _ in range(max_items):
                try:
                    append(next(stream))
                except StopIteration:
                    return items, True
        finally:
            CURRENT_HOST.reset(token)
        return items, False

    def flowrl_next(self) -> Any:
        """The next item of the default run (see :meth:`flowrl_install`), or
        :data:`STREAM_END` once its stream has ended.

        It takes no arguments and returns the item itself, so a Ray call of it
        carries none and its reply is the item alone: an item wrapped as
        ``([item], False)`` costs serializing and reading the wrapping too."""
        key = self.__dict__.get("_flowrl_default")
        if key is None:
            raise FlowError(f"{type(self).__name__}.flowrl_next(): this host has no default "
                            "run (none installed, or the first one has stopped); pull a "
                            "run by its key with flowrl_pull(key)")
        stream = self._flowrl_streams()[key]
        token = CURRENT_HOST.set(self)
        try:
            return next(stream, STREAM_END)
        finally:
            CURRENT_HOST.reset(token)

    def flowrl_uninstall(self, key: str) -> None:
        """Drop run ``key``'s stream; other runs on this host are untouched (a default
        run's place is free again for the next run installed)."""
        if self.__dict__.get("_flowrl_default") == key:
            self.__dict__["_flowrl_default"] = None
        self.__dict__.get("_flowrl_stages", {}).pop(key, None)
        stream = self._flowrl_streams().pop(key, None)
        close = getattr(stream, "close", None)
        if close is not None:
            token = CURRENT_HOST.set(self)
            try:
                close()
            finally:
                CURRENT_HOST.reset(token)

    def flowrl_installed_keys(self) -> list[str]:
        return sorted(self._flowrl_streams())

    def flowrl_ping(self) -> bool:
        return True


class ItemsHost(ShardHost):
    """The host the runtime creates for ``from_items``/``from_range``/``from_iterators``.

    ``source`` is a list/range, or a zero-argument callable returning an iterable;
    with ``repeat`` it starts over when it ends (an empty source just ends).
    """

    def __init__(self, source, repeat: bool = False):
        self._source = source
        self._repeat = repeat

    def shard_items(self) -> Iterator[Any]:
        while True:
            produced = False
            for x in (self._source() if callable(self._source) else self._source):
                produced = True
                yield x
            if not (self._repeat and produced):
                return
