"""Streams: immutable handles to plan nodes, and the operators that build plans.

Every operator returns a new handle and records a :class:`~flowrl.graph.node.Node`;
nothing runs and nothing remote is touched while a plan is built. Parameters are
checked here, at the call, so a bad value fails where it was written.

>>> import flowrl
>>> s = flowrl.from_range(4, num_shards=2).for_each(lambda x: x * 10)
>>> s.num_shards
2
>>> with flowrl.Plan(s.gather_sync()).compile() as run:
...     run.take(4)
[0, 20, 10, 30]
"""

from __future__ import annotations

import inspect
from typing import Any, Callable, Iterable, Sequence

from flowrl.errors import ConfigError, PlanError
from flowrl.graph.node import (AGGREGATE, GATHER, LOCAL, PARALLEL, SOURCE, SPLIT,
                               TRANSFORM, UNION, Node, describe_callable)

_PARALLEL_ONLY = {"gather_sync", "gather_async", "batch_across_shards", "local_shuffle",
                  "select_shards", "aggregate", "num_shards"}
_LOCAL_ONLY = {"shuffle", "duplicate", "zip_with_source_actor"}


def _check_callable(fn: Any, op: str) -> None:
    if not callable(fn):
        raise ConfigError(f"{op}() expects a callable, got {type(fn).__name__} {fn!r}; "
                          "pass a function or an object with __call__")


def _check_positive_int(value: Any, op: str, param: str) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{op}({param}={value!r}): {param} must be an int >= 1")


def _fn_label(fn: Any, name: str | None) -> str:
    return name or describe_callable(fn)


class _Stream:
    """Common behaviour of both stream kinds: a (node, output port) handle."""

    __slots__ = ("node", "port")
    _kind = ""

    def __init__(self, node: Node, port: int = 0):
        self.node = node
        self.port = port

    def _child(self, cls: type, op: str, kind: str, label: str, name: str | None,
               **params: Any) -> Any:
        node = Node(op=op, kind=getattr(params.get("fn"), "flowrl_kind", kind),
                    stream=cls._kind, inputs=((self.node, self.port),), name=name,
                    label=label, params=params, num_shards=self._shards())
        return cls(node)

    def _shards(self) -> int | None:
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.node.base_id!r})"

    def __iter__(self):
        raise PlanError(f"{self!r} is a ParallelStream: its items live on its shards; "
                        "gather it first (gather_sync()/gather_async()) and iterate the "
                        "LocalStream, or flowrl.Plan(local_stream).compile()")

    # Transforms shared by both kinds; they keep the stream kind.
    def for_each(self, fn: Callable[[Any], Any], *, name: str | None = None):
        """Apply ``fn`` to every item (one-to-one, order preserved).

        >>> import flowrl
        >>> with flowrl.Plan(from_range(4, 2).for_each(lambda x: x + 1).gather_sync()).compile() as run:
        ...     run.take(9)
        [1, 3, 2, 4]"""
        _check_callable(fn, "for_each")
        return self._child(type(self), "for_each", TRANSFORM, _fn_label(fn, name), name, fn=fn)

    def filter(self, pred: Callable[[Any], bool], *, name: str | None = None):
        """Keep the items for which ``pred`` is true (order preserved).

        >>> import flowrl
        >>> with flowrl.Plan(from_range(6, 1).filter(lambda x: x % 3 == 0).gather_sync()).compile() as run:
        ...     run.take(9)
        [0, 3]"""
        _check_callable(pred, "filter")
        return self._child(type(self), "filter", TRANSFORM, _fn_label(pred, name), name, fn=pred)

    def batch(self, n: int, *, name: str | None = None):
        """Group items into lists of ``n``; the last partial list is emitted too.

        >>> import flowrl
        >>> with flowrl.Plan(from_iterable(lambda: range(5)).batch(2)).compile() as run:
        ...     run.take(9)
        [[0, 1], [2, 3], [4]]"""
        _check_positive_int(n, "batch", "n")
        return self._child(type(self), "batch", TRANSFORM, name or f"batch({n})", name, n=n)

    def flatten(self, *, name: str | None = None):
        """Emit each element of every (iterable) item, in order.

        >>> import flowrl
        >>> with flowrl.Plan(from_iterable(lambda: [[1, 2], [], [3]]).flatten()).compile() as run:
        ...     run.take(9)
        [1, 2, 3]"""
        return self._child(type(self), "flatten", TRANSFORM, name or "flatten", name)

    def combine(self, fn: Callable[[Any], Iterable[Any]], *, name: str | None = None):
        """``for_each(fn)`` then ``flatten()``: ``fn`` returns a list of outputs per item.

        >>> import flowrl
        >>> with flowrl.Plan(from_iterable(lambda: [1, 2]).combine(lambda x: [x] * x)).compile() as run:
        ...     run.take(9)
        [1, 2, 2]"""
        _check_callable(fn, "combine")
        return self._child(type(self), "combine", TRANSFORM, _fn_label(fn, name), name, fn=fn)


class ParallelStream(_Stream):
    """``num_shards`` ordered shards, each produced and transformed where it lives.

    Transforms run shard-local and are fused into one stage per shard host.
    """

    __slots__ = ()
    _kind = PARALLEL

    def _shards(self) -> int:
        return self.node.num_shards

    @property
    def num_shards(self) -> int:
        return self.node.num_shards

    def __getattr__(self, attr: str):
        if attr in _LOCAL_ONLY:
            hint = "local_shuffle" if attr == "shuffle" else "a gather (gather_sync/gather_async)"
            raise PlanError(f"{attr}() is a LocalStream operator but {self!r} is a "
                            f"ParallelStream; use {hint} first")
        raise AttributeError(attr)

    def local_shuffle(self, buffer_size: int, seed: int | None = None, *,
                      name: str | None = None) -> "ParallelStream":
        """Shuffle within each shard through a buffer of ``buffer_size`` items.

        With ``seed`` the order is reproducible; shard ``i`` uses ``seed + i``.

        >>> import flowrl
        >>> with flowrl.Plan(from_range(10, 1).local_shuffle(4, seed=0).gather_sync()).compile() as run:
        ...     out = run.take(99)
        >>> sorted(out) == list(range(10)), out != list(range(10))
        (True, True)
        """
        _check_positive_int(buffer_size, "local_shuffle", "buffer_size")
        return self._child(ParallelStream, "local_shuffle", TRANSFORM,
                           name or f"local_shuffle({buffer_size})", name,
                           buffer_size=buffer_size, seed=seed)

    def select_shards(self, indices: Sequence[int], *, name: str | None = None) -> "ParallelStream":
        """Keep only the shards at ``indices`` (in the order given).

        >>> import flowrl
        >>> with flowrl.Plan(from_items([1, 2, 3], 3).select_shards([2, 0]).gather_sync()).compile() as run:
        ...     run.take(9)
        [3, 1]"""
        indices = list(indices)
        if not indices or any(not isinstance(i, int) or not 0 <= i < self.num_shards
                              for i in indices):
            raise ConfigError(f"select_shards({indices!r}) on {self!r}: indices must be a "
                              f"non-empty list of ints in [0, {self.num_shards})")
        node = Node(op="select_shards", kind=TRANSFORM, stream=PARALLEL,
                    inputs=((self.node, self.port),), name=name,
                    label=name or f"select_shards({indices})", params={"indices": indices},
                    num_shards=len(indices))
        return ParallelStream(node)

    def union(self, other: "ParallelStream", *, name: str | None = None) -> "ParallelStream":
        """A ParallelStream whose shards are this stream's followed by ``other``'s.

        >>> import flowrl
        >>> u = from_items([1], 1).union(from_items([2, 3], 2))
        >>> with flowrl.Plan(u.gather_sync()).compile() as run:
        ...     u.num_shards, run.take(9)
        (3, [1, 2, 3])"""
        if not isinstance(other, ParallelStream):
            raise PlanError(f"ParallelStream.union() takes a ParallelStream, got {other!r}; "
                            "to interleave local streams use LocalStream.union or Concurrently")
        node = Node(op="union", kind=UNION, stream=PARALLEL,
                    inputs=((self.node, self.port), (other.node, other.port)), name=name,
                    label=name or "union", num_shards=self.num_shards + other.num_shards)
        return ParallelStream(node)

    def gather_sync(self, *, name: str | None = None) -> "LocalStream":
        """Rounds: one item from every live shard per round, in shard order (a barrier).

        A finished shard drops out; the stream ends when all shards have ended.

        >>> import flowrl
        >>> with flowrl.Plan(from_iterators([[1, 2, 3], [10]]).gather_sync()).compile() as run:
        ...     run.take(9)
        [1, 10, 2, 3]
        """
        return self._gather("gather_sync", name or "gather_sync", name)

    def batch_across_shards(self, *, name: str | None = None) -> "LocalStream":
        """Like :meth:`gather_sync` but each round is yielded as one list.

        >>> import flowrl
        >>> with flowrl.Plan(from_iterators([[0, 1], [2, 3, 4]]).batch_across_shards()).compile() as run:
        ...     run.take(9)
        [[0, 2], [1, 3], [4]]"""
        return self._gather("batch_across_shards", name or "batch_across_shards", name)

    def gather_async(self, num_async: int = 1, *, name: str | None = None) -> "LocalStream":
        """Items as they complete, ``num_async`` requests in flight per shard.

        Order across shards is not defined; order within a shard is preserved.
        On the local backend a seeded scheduler picks which shard completes next.

        >>> import flowrl
        >>> with flowrl.Plan(from_iterators([["a1", "a2"], ["b1", "b2"]]).gather_async()).compile() as run:
        ...     out = run.take(9)
        >>> sorted(out), [x for x in out if x[0] == "a"]
        (['a1', 'a2', 'b1', 'b2'], ['a1', 'a2'])
        """
        _check_positive_int(num_async, "gather_async", "num_async")
        return self._gather("gather_async", name or f"gather_async(num_async={num_async})",
                            name, num_async=num_async)

    def _gather(self, op: str, label: str, name: str | None, **params: Any) -> "LocalStream":
        node = Node(op=op, kind=GATHER, stream=LOCAL, inputs=((self.node, self.port),),
                    name=name, label=label, params=params)
        return LocalStream(node)

    def aggregate(self, num_aggregators: int, pipeline: Callable[["LocalStream"], "LocalStream"],
                  *, name: str | None = None) -> "ParallelStream":
        """Tree aggregation: shards split round-robin into ``num_aggregators`` groups.

        Each group is gathered (async) by one aggregator, which runs
        ``pipeline(local_stream_of_its_group)``; the result has one shard per
        aggregator. Aggregators live beside the driver (their own DOT cluster).

        >>> import flowrl
        >>> s = from_range(8, 4).aggregate(2, lambda group: group.batch(2))
        >>> with flowrl.Plan(s.gather_async()).compile() as run:
        ...     batches = run.take(99)
        >>> sorted(x for b in batches for x in b) == list(range(8)), s.num_shards
        (True, 2)
        """
        if (isinstance(num_aggregators, bool) or not isinstance(num_aggregators, int)
                or not 1 <= num_aggregators <= self.num_shards):
            raise ConfigError(f"aggregate(num_aggregators={num_aggregators!r}) on {self!r}: "
                              f"num_aggregators must be between 1 and the number of shards "
                              f"({self.num_shards})")
        _check_callable(pipeline, "aggregate")
        prefix = name or f"{self.node.base_id}.aggregate"
        entry = Node(op="aggregator_input", kind=GATHER, stream=LOCAL,
                     inputs=((self.node, self.port),), name=f"{prefix}/input",
                     label="aggregator input (gather_async)")
        out = pipeline(LocalStream(entry))
        if not isinstance(out, LocalStream):
            raise ConfigError(f"aggregate(pipeline={describe_callable(pipeline)}) must return "
                              f"the LocalStream it builds, got {out!r}")
        node = Node(op="aggregate", kind=AGGREGATE, stream=PARALLEL,
                    inputs=((out.node, out.port),), name=prefix,
                    label=name or f"aggregate({num_aggregators})",
                    params={"num_aggregators": num_aggregators, "entry": entry,
                            "pipeline": describe_callable(pipeline)},
                    num_shards=num_aggregators)
        return ParallelStream(node)


class LocalStream(_Stream):
    """One ordered sequence on the driver.

    A LocalStream also iterates, as RLlib 1.x's ``LocalIterator`` did, so that
    seed-style code (``next(ParallelRollouts(workers))``, ``for result in
    train_op``) runs as written. The first ``next(stream)`` or ``iter(stream)``
    builds ``flowrl.Plan(stream)`` and compiles it with ``backend="auto"`` (the
    in-process local backend unless the plan reads Ray actor handles, which only
    the Ray backend can drive); that :class:`~flowrl.runtime.run.Run` is kept on
    this handle (``stream.run``) and every later ``next``/``iter`` on the same
    handle continues it: a second ``iter(stream)`` returns the same Run, so a
    ``for`` loop after a ``next`` picks up where it left off, and nothing is
    compiled twice. Other handles (a ``for_each`` built on this one, or a fresh
    ``flowrl.Plan(stream).compile()``) start runs of their own. When the run
    ends it is stopped and ``next`` raises StopIteration from then on.
    ``stream.stop()`` stops it early. Building with this handle stays free of side
    effects; only iterating runs anything. To compile with other settings
    (``backend``, ``seed``, ``local_worker``), compile the Plan yourself.

    >>> import flowrl
    >>> s = flowrl.from_items([1, 2, 3], 1).gather_sync().for_each(lambda x: x * 10)
    >>> s.run is None
    True
    >>> next(s), [x for x in s], s.run.backend
    (10, [20, 30], 'local')
    """

    __slots__ = ("_run",)
    _kind = LOCAL

    @property
    def run(self):
        """The :class:`~flowrl.runtime.run.Run` that iterating this handle started, or
        None before the first ``next``/``iter``."""
        return getattr(self, "_run", None)

    def __iter__(self):
        run = self.run
        if run is None:
            from flowrl.graph.plan import Plan  # plan.py imports this module
            run = self._run = Plan(self, name=self.node.base_id).compile(backend="auto")
        return run

    def __next__(self) -> Any:
        return next(iter(self))

    def stop(self) -> None:
        """Stop the run that iterating this handle started (nothing if none did)."""
        if self.run is not None:
            self.run.stop()

    def __getattr__(self, attr: str):
        if attr in _PARALLEL_ONLY:
            hint = "shuffle" if attr == "local_shuffle" else None
            fix = f"use {hint}" if hint else "apply it before the gather"
            raise PlanError(f"{attr} is a ParallelStream operator but {self!r} is a "
                            f"LocalStream (already on the driver); {fix}")
        raise AttributeError(attr)

    def shuffle(self, buffer_size: int, seed: int | None = None, *,
                name: str | None = None) -> "LocalStream":
        """Shuffle through a buffer of ``buffer_size`` items (seeded if ``seed``).

        >>> import flowrl
        >>> with flowrl.Plan(from_iterable(lambda: range(10)).shuffle(3, seed=1)).compile() as run:
        ...     out = run.take(99)
        >>> sorted(out) == list(range(10))
        True"""
        _check_positive_int(buffer_size, "shuffle", "buffer_size")
        return self._child(LocalStream, "shuffle", TRANSFORM, name or f"shuffle({buffer_size})",
                           name, buffer_size=buffer_size, seed=seed)

    def for_each(self, fn: Callable[[Any], Any], *, name: str | None = None) -> "LocalStream":
        """Apply ``fn`` to every item on the driver; ``fn`` may be ``async``.

        ``flowrl.get_metrics()`` works inside ``fn``.

        >>> import flowrl
        >>> def count(x):
        ...     flowrl.get_metrics().counters["seen"] += 1
        ...     return x
        >>> with flowrl.Plan(from_iterable(lambda: "ab").for_each(count)).compile() as run:
        ...     run.take(9), run.metrics.counters["seen"]
        (['a', 'b'], 2)
        """
        _check_callable(fn, "for_each")
        op = "for_each_async" if _is_async(fn) else "for_each"
        return self._child(LocalStream, op, TRANSFORM, _fn_label(fn, name), name, fn=fn)

    def duplicate(self, n: int, *, max_lag: int = 100,
                  name: str | None = None) -> tuple["LocalStream", ...]:
        """``n`` streams that each see every item, at most ``max_lag`` items apart.

        The leading copy waits (awaits, never polls) while a lagging copy is
        ``max_lag`` items behind. Every copy must be consumed by the plan.

        >>> import flowrl
        >>> a, b = from_iterable(lambda: [1, 2]).duplicate(2)
        >>> with flowrl.Plan(Concurrently([a, b.for_each(lambda x: -x)])).compile() as run:
        ...     run.take(9)
        [1, -1, 2, -2]
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 2:
            raise ConfigError(f"duplicate(n={n!r}) on {self!r}: n must be an int >= 2; "
                              "a single consumer needs no duplicate")
        _check_positive_int(max_lag, "duplicate", "max_lag")
        node = Node(op="duplicate", kind=SPLIT, stream=LOCAL, inputs=((self.node, self.port),),
                    name=name, label=name or f"duplicate({n})", params={"max_lag": max_lag},
                    num_outputs=n)
        return tuple(LocalStream(node, port) for port in range(n))

    def zip_with_source_actor(self, *, name: str | None = None) -> "LocalStream":
        """Yield ``(source_actor, item)``: the shard host each item came from.

        Only valid where every operator between this and a gather is one-to-one
        (``for_each``/``filter``); anything else is a PlanError when the plan is built.

        >>> import flowrl
        >>> class Shard(flowrl.ShardHost):
        ...     def __init__(self, tag): self.tag = tag
        ...     def shard_items(self): return iter([1])
        >>> hosts = [Shard("a"), Shard("b")]
        >>> with flowrl.Plan(from_actors(hosts).gather_sync().zip_with_source_actor()).compile() as run:
        ...     out = run.take(9)
        >>> [(host.tag, x) for host, x in out]
        [('a', 1), ('b', 1)]
        """
        return self._child(LocalStream, "zip_with_source_actor", TRANSFORM,
                           name or "zip_with_source_actor", name)

    def union(self, *others: "LocalStream", deterministic: bool = False,
              round_robin_weights: Sequence[Any] | None = None,
              name: str | None = None) -> "LocalStream":
        """Interleave with ``others``: round-robin if ``deterministic`` else async.

        >>> import flowrl
        >>> a, b = from_iterable(lambda: [1, 2]), from_iterable(lambda: [3])
        >>> with flowrl.Plan(a.union(b, deterministic=True)).compile() as run:
        ...     run.take(9)
        [1, 3, 2]"""
        mode = "round_robin" if deterministic or round_robin_weights else "async"
        return Concurrently([self, *others], mode=mode, round_robin_weights=round_robin_weights,
                            name=name or "union")


def _is_async(fn: Any) -> bool:
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(
        getattr(fn, "__call__", None))


_MODES = ("round_robin", "async")


def Concurrently(streams: Sequence[LocalStream], mode: str = "round_robin",
                 output_indexes: Sequence[int] | None = None,
                 round_robin_weights: Sequence[Any] | None = None, *,
                 seed: int | None = None, name: str | None = None) -> LocalStream:
    """Interleave several LocalStreams on the driver.

    ``round_robin`` takes strict turns (weights: ``w_i`` items from input ``i`` per
    turn; ``"*"`` takes what that input has ready without waiting; fractional
    weights round stochastically with ``seed``). ``async`` yields from whichever
    input is ready, serving ready inputs in rotation. ``output_indexes`` still
    drives every input but emits only the listed ones.

    >>> import flowrl
    >>> a, b = flowrl.from_iterable(lambda: [1, 2, 3]), flowrl.from_iterable(lambda: [4, 5, 6])
    >>> with flowrl.Plan(Concurrently([a, b])).compile() as run:
    ...     run.take(6)
    [1, 4, 2, 5, 3, 6]
    """
    streams = list(streams)
    where = f"Concurrently(mode={mode!r})"
    if len(streams) < 2:
        raise ConfigError(f"{where} got {len(streams)} stream(s); it needs at least 2")
    for i, s in enumerate(streams):
        if not isinstance(s, LocalStream):
            raise PlanError(f"{where}: input {i} is {s!r}, not a LocalStream; gather a "
                            "ParallelStream first (gather_sync/gather_async)")
    if mode not in _MODES:
        raise ConfigError(f"Concurrently(mode={mode!r}): unknown mode; use one of {list(_MODES)}")
    weights = None
    if round_robin_weights is not None:
        if mode != "round_robin":
            raise ConfigError(f"{where}: round_robin_weights only apply to mode='round_robin'")
        weights = list(round_robin_weights)
        if len(weights) != len(streams):
            raise ConfigError(f"Concurrently(round_robin_weights={weights}) has {len(weights)} "
                              f"weights for {len(streams)} streams; give one weight per stream")
        for w in weights:
            if w != "*" and (isinstance(w, bool) or not isinstance(w, (int, float)) or w <= 0):
                raise ConfigError(f"Concurrently(round_robin_weights={weights}): weight {w!r} "
                                  "must be a number > 0 or '*'")
        if all(w == "*" for w in weights):
            raise ConfigError(f"Concurrently(round_robin_weights={weights}): at least one "
                              "weight must be a number; all '*' would never wait for any input")
    if output_indexes is not None:
        output_indexes = list(output_indexes)
        bad = [i for i in output_indexes if not isinstance(i, int) or not 0 <= i < len(streams)]
        if bad or not output_indexes:
            raise ConfigError(f"Concurrently(output_indexes={output_indexes}): indexes must be "
                              f"in [0, {len(streams)})")
    label = name or (f"Concurrently({mode}" + (f", weights={weights}" if weights else "")
                     + (f", output={output_indexes}" if output_indexes is not None else "") + ")")
    node = Node(op="concurrently", kind=UNION, stream=LOCAL,
                inputs=tuple((s.node, s.port) for s in streams), name=name, label=label,
                params={"mode": mode, "weights": weights, "output_indexes": output_indexes,
                        "seed": seed})
    return LocalStream(node)


# --------------------------------------------------------------------------- sources

def _source(op: str, label: str, name: str | None, num_shards: int, *,
            shown: str | None = None, **params: Any) -> ParallelStream:
    return ParallelStream(Node(op=op, kind=SOURCE, stream=PARALLEL, name=name,
                               label=shown or name or label, params=params,
                               num_shards=num_shards))


def from_items(items: Iterable[Any], num_shards: int = 2, repeat: bool = False, *,
               name: str | None = None) -> ParallelStream:
    """A ParallelStream of ``items``; item ``i`` goes to shard ``i % num_shards``.

    >>> import flowrl
    >>> with flowrl.Plan(from_items([1, 2, 3, 4], 2).gather_sync()).compile() as run:
    ...     run.take(4)
    [1, 2, 3, 4]
    """
    _check_positive_int(num_shards, "from_items", "num_shards")
    items = list(items)
    shards = [items[i::num_shards] for i in range(num_shards)]
    return _source("from_items", f"from_items({len(items)} items)", name, num_shards,
                   shards=shards, repeat=repeat)


def from_range(n: int, num_shards: int = 2, repeat: bool = False, *,
               name: str | None = None) -> ParallelStream:
    """``range(n)`` split into contiguous shards; the last shard takes the remainder.

    >>> import flowrl
    >>> with flowrl.Plan(from_range(5, 2).batch_across_shards()).compile() as run:
    ...     run.take(9)
    [[0, 2], [1, 3], [4]]"""
    _check_positive_int(num_shards, "from_range", "num_shards")
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ConfigError(f"from_range(n={n!r}): n must be an int >= 0")
    size = n // num_shards
    shards = [range(i * size, n if i == num_shards - 1 else (i + 1) * size)
              for i in range(num_shards)]
    return _source("from_range", f"from_range({n})", name, num_shards, shards=shards, repeat=repeat)


def from_iterators(sources: Sequence[Any], repeat: bool = False, *,
                   name: str | None = None) -> ParallelStream:
    """One shard per list/range or zero-argument callable returning an iterable.

    >>> import flowrl
    >>> with flowrl.Plan(from_iterators([[1, 2], lambda: iter("x")]).gather_sync()).compile() as run:
    ...     run.take(9)
    [1, 'x', 2]"""
    sources = list(sources)
    if not sources:
        raise ConfigError("from_iterators([]): give at least one source")
    for i, s in enumerate(sources):
        if not (callable(s) or isinstance(s, (list, tuple, range))):
            raise ConfigError(f"from_iterators: source {i} is {type(s).__name__}; give a "
                              "list/range or a zero-argument callable returning an iterable")
    return _source("from_iterators", f"from_iterators({len(sources)})", name, len(sources),
                   shards=sources, repeat=repeat)


def _is_ray_actor(obj: Any) -> bool:
    return type(obj).__name__ == "ActorHandle" and type(obj).__module__.startswith("ray")


def _is_shard_host(obj: Any) -> bool:
    """Whether ``obj`` has the methods the runtime calls on a host (``flowrl.ShardHost``
    supplies them; this layer does not import the runtime that defines it)."""
    return all(callable(getattr(obj, m, None))
               for m in ("shard_items", "flowrl_install", "flowrl_pull", "flowrl_uninstall"))


def from_actors(hosts: Sequence[Any], *, name: str | None = None,
                restart: Callable[[int], Any] | None = None,
                max_restarts: int | None = None, label: str | None = None) -> ParallelStream:
    """One shard per ShardHost: in-process instances or Ray actor handles (not mixed).

    The runtime never kills hosts it did not create, except a lost one it replaces.
    With ``restart``, a host that dies, becomes unreachable or leaves a request
    unanswered for ``remote_timeout_s`` is lost, not fatal: the runtime ends it
    (``ray.kill``), abandons its in-flight requests (counted in the run's
    ``num_lost_requests``), calls ``restart(index)`` for a replacement host, installs
    the run's stage on it (a fresh stream) and goes on (``num_worker_restarts``);
    ``restart`` returning None drops the shard (``num_dropped_workers``). A sync
    gather's round waits for the replacement. After ``max_restarts`` replacements
    of one shard (None: no limit) the next loss is a WorkerError naming it.
    ``label`` says what the hosts produce, beside the node's id in the plan's DOT
    (default: the node's name, or ``from_actors(N)``).

    >>> import flowrl
    >>> class Squares(flowrl.ShardHost):
    ...     def __init__(self, n): self.n = n
    ...     def shard_items(self): return (i * i for i in range(self.n))
    >>> with flowrl.Plan(from_actors([Squares(3), Squares(2)]).gather_sync()).compile() as run:
    ...     run.take(9)
    [0, 0, 1, 1, 4]
    """
    hosts = list(hosts)
    if not hosts:
        raise ConfigError("from_actors([]): give at least one ShardHost")
    remote = [_is_ray_actor(h) for h in hosts]
    if any(remote) and not all(remote):
        raise ConfigError("from_actors: hosts mix Ray actor handles and in-process objects; "
                          "use one kind")
    if not any(remote):
        for i, h in enumerate(hosts):
            if not _is_shard_host(h):
                raise ConfigError(f"from_actors: host {i} ({type(h).__name__}) does not inherit "
                                  "flowrl.ShardHost; subclass it and implement shard_items()")
    if restart is not None and not callable(restart):
        raise ConfigError(f"from_actors(restart={restart!r}): give a function "
                          "restart(index) -> replacement host (or None to drop the shard)")
    if max_restarts is not None and (isinstance(max_restarts, bool)
                                     or not isinstance(max_restarts, int) or max_restarts < 0):
        raise ConfigError(f"from_actors(max_restarts={max_restarts!r}): must be an int >= 0 "
                          "or None (no limit)")
    return _source("from_actors", f"from_actors({len(hosts)})", name, len(hosts), shown=label,
                   hosts=hosts, remote=all(remote), restart=restart, max_restarts=max_restarts)


def from_iterable(factory: Callable[[], Iterable[Any]], *, name: str | None = None,
                  label: str | None = None) -> LocalStream:
    """A LocalStream on the driver from a zero-argument callable returning an iterable.

    For an asynchronous source, pass an async generator function as ``factory``.
    ``label`` says what it produces, beside the node's id in the plan's DOT
    (default: the node's name, or the factory's).

    >>> import flowrl
    >>> with flowrl.Plan(from_iterable(lambda: iter("abc"))).compile() as run:
    ...     run.take(2)
    ['a', 'b']
    """
    _check_callable(factory, "from_iterable")
    return LocalStream(Node(op="from_iterable", kind=SOURCE, stream=LOCAL, name=name,
                            label=label or name or describe_callable(factory),
                            params={"factory": factory}))
