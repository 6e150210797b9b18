"""Fused stages: the one way a chain of synchronous operators executes.

The compiler (``runtime/compile.py``) describes each maximal chain of shard-local
operators, and each maximal run of synchronous operators on the driver, as a
:class:`~flowrl.runtime.compile.StageSpec`; the runtime turns it into one
:class:`FusedStage`: shipped once to every shard host (pickled with cloudpickle
for Ray), or run by the driver, which pulls a synchronous source through it or
pushes the items of an async input into it. Consecutive one-to-one operators
(``for_each``/``filter``/``zip_with_source_actor``) are fused into a single
function call per item (:func:`compose_map`, a loop over the run's functions).
Whatever raises is re-raised as an :class:`~flowrl.errors.OperatorError` naming
the node, with the cause chained. :class:`ShuffleBuffer` is the one buffer
shuffle behind ``local_shuffle`` and the driver's ``shuffle``.

>>> stage = FusedStage("src", "source", [
...     Step("for_each", "src.for_each", "double", {"fn": lambda x: 2 * x}),
...     Step("batch", "src.batch", "batch(2)", {"n": 2})])
>>> list(stage(iter([1, 2, 3])))
[[2, 4], [6]]
"""

from __future__ import annotations

import random
from typing import Any, Callable, Iterator

from flowrl.errors import OperatorError, WorkerError
from flowrl.runtime.compile import StageSpec, Step


def operator_error(node_id: str, label: str, exc: BaseException) -> OperatorError:
    """The OperatorError to raise for ``exc`` raised in node ``node_id``, with ``exc``
    as its cause; an OperatorError (raised by a node inside, or by a callback) passes
    through as it is, keeping its own cause.

    >>> inner = operator_error("a", "f", KeyError("k"))
    >>> type(inner.__cause__).__name__, operator_error("b", "g", inner) is inner
    ('KeyError', True)
    """
    if isinstance(exc, OperatorError):
        return exc
    err = OperatorError(f"operator {node_id!r} ({label}) raised "
                        f"{type(exc).__name__}: {exc}", node_id=node_id, label=label)
    err.__cause__ = exc
    return err


_DROP = object()  # internal: a filter rejected the item inside a fused call
#: Steps fused into one function call per item.
MAP_STEPS = frozenset({"for_each", "filter", "zip_with_source_actor"})


def compose_map(steps: list[Step], context: Callable[[], Any] | None = None,
                drops: list[int] | None = None) -> Callable[[Any], Any]:
    """One function applying a run of for_each/filter/zip steps; returns ``_DROP`` to drop.

    ``context()`` supplies the source actor for ``zip_with_source_actor``; when
    ``drops`` is given, ``drops[k]`` counts the items step ``k`` filtered out.
    Whatever a step raises becomes an OperatorError naming that step's node, with
    the cause (and its traceback through the user's function) chained.

    >>> f = compose_map([Step("for_each", "a", "inc", {"fn": lambda x: x + 1}),
    ...                  Step("filter", "b", "even", {"fn": lambda x: x % 2 == 0})])
    >>> f(1), f(2) is _DROP
    (2, True)
    """
    calls = [(k, step, step.op, step.params.get("fn")) for k, step in enumerate(steps)]

    def fused(x: Any) -> Any:
        for k, step, op, fn in calls:
            try:
                if op == "zip_with_source_actor":
                    x = (context(), x)
                elif op == "filter":
                    if not fn(x):
                        if drops is not None:
                            drops[k] += 1
                        return _DROP
                else:
                    x = fn(x)
            except Exception as e:
                raise operator_error(step.node_id, step.label, e)
        return x

    return fused


class ShuffleBuffer:
    """The buffer shuffle shared by shard-side ``local_shuffle`` and driver ``shuffle``.

    ``push(x)`` returns the item it evicts (``_DROP`` while the buffer fills);
    ``drain()`` returns the rest, shuffled. With the same ``rng`` seed both
    operators give the same order.
    """

    __slots__ = ("size", "rng", "items")

    def __init__(self, size: int, rng: random.Random):
        self.size = size
        self.rng = rng
        self.items: list = []

    def push(self, x: Any) -> Any:
        if len(self.items) < self.size:
            self.items.append(x)
            return _DROP
        i = self.rng.randrange(self.size)
        out, self.items[i] = self.items[i], x
        return out

    def drain(self) -> list:
        rest, self.items = self.items, []
        self.rng.shuffle(rest)
        return rest


def shuffle_buffer(items: Iterator[Any], buffer_size: int, rng: random.Random,
                   cell: list[int] | None = None) -> Iterator[Any]:
    """Emit ``items`` shuffled through a buffer of ``buffer_size`` (a permutation).

    ``cell[0]``, if given, counts the items emitted."""
    cell = [0] if cell is None else cell
    buf = ShuffleBuffer(buffer_size, rng)
    for x in items:
        out = buf.push(x)
        if out is not _DROP:
            cell[0] += 1
            yield out
    for out in buf.drain():
        cell[0] += 1
        yield out


def _guarded(items: Iterator[Any], node_id: str, label: str) -> Iterator[Any]:
    # A WorkerError (e.g. a member lost inside an aggregator) already names the
    # worker and the fix; it stays a WorkerError rather than the source's OperatorError.
    while True:
        try:
            x = next(items)
        except StopIteration:
            return
        except WorkerError:
            raise
        except Exception as e:
            raise operator_error(node_id, label, e)
        yield x


def _emit(x: Any) -> tuple:
    return (x,)


def _nothing() -> tuple:
    return ()


def _named(iterable: Any, step: Step) -> Iterator[Any]:
    """The items of ``iterable``, with what iterating it raises (a generator raises
    lazily) as an OperatorError naming ``step``'s node."""
    try:
        it = iter(iterable)
    except TypeError as e:
        raise operator_error(step.node_id, step.label, e)
    while True:
        try:
            y = next(it)
        except StopIteration:
            return
        except Exception as e:
            raise operator_error(step.node_id, step.label, e)
        yield y


class FusedStage:
    """A picklable chain of fused steps: the one way synchronous operators run.

    A shard's stage, a driver-side run of synchronous operators and a synchronous
    source with the operators after it all execute through this class. Items go
    in one at a time: ``stage(items)`` pulls them from an iterator (a shard's
    stream, a synchronous source) and returns the output iterator; the driver,
    whose items come from async inputs, calls :meth:`open`, then :meth:`push` per
    item and :meth:`finish` at the end of its input. Either way an item goes
    through every step before the next one is taken, and what ``push`` returns
    is lazy: a ``flatten``/``combine`` output is iterated as it is consumed, so
    items emitted before a failure in it are delivered first. Consecutive
    ``for_each``/``filter``/``zip`` steps are one function call
    (:func:`compose_map`).

    ``shard_index`` offsets seeds so seeded shuffles differ per shard but replay.
    """

    def __init__(self, source_id: str, source_label: str, steps: list[Step],
                 shard_index: int = 0):
        self.source_id = source_id
        self.source_label = source_label
        self.steps = list(steps)
        self.shard_index = shard_index
        self.counts: dict[str, list[int]] = {}
        self._map_runs: list = []
        self._push: Callable[[Any], Any] = _emit
        self._finish: Callable[[], Any] = _nothing

    @classmethod
    def from_spec(cls, spec: StageSpec) -> "FusedStage":
        """The stage executing a compiled :class:`~flowrl.runtime.compile.StageSpec`."""
        return cls(spec.source_id, spec.source_label, list(spec.steps), spec.shard_index)

    def __repr__(self) -> str:
        return f"FusedStage({self.source_id!r} -> {[s.node_id for s in self.steps]})"

    def __getstate__(self) -> dict:
        # Shipped as its description; whoever runs it opens it afresh.
        return {"source_id": self.source_id, "source_label": self.source_label,
                "steps": self.steps, "shard_index": self.shard_index}

    def __setstate__(self, state: dict) -> None:
        self.__init__(**state)

    def __call__(self, items: Iterator[Any]) -> Iterator[Any]:
        """Open the stage and pull ``items`` through it (what errors the source raises
        become OperatorErrors naming the source)."""
        self.open()
        return self._pull(_guarded(iter(items), self.source_id, self.source_label))

    def _pull(self, items: Iterator[Any]) -> Iterator[Any]:
        cell, push = self.counts[self.source_id], self._push
        for x in items:
            cell[0] += 1
            yield from push(x)
        yield from self._finish()

    def push(self, x: Any) -> Any:
        """The items ``x`` makes the stage emit (an iterable); after :meth:`open`."""
        self.counts[self.source_id][0] += 1
        return self._push(x)

    def finish(self) -> Any:
        """What the stage still holds once its input ended (partial batch, shuffle buffer)."""
        return self._finish()

    def open(self, context: Callable[[], Any] | None = None) -> None:
        """Start afresh: empty buffers, zero counts. ``context()`` supplies the source
        actor for ``zip_with_source_actor`` (a driver-side run after a gather)."""
        self.counts = {self.source_id: [0]}
        self._map_runs = []
        parts: list[list[Step]] = []
        for step in self.steps:
            if step.op in MAP_STEPS and parts and parts[-1][0].op in MAP_STEPS:
                parts[-1].append(step)
            else:
                parts.append([step])
        push, finish = _emit, _nothing
        for part in reversed(parts):
            push, finish = self._link(part, push, finish, context)
        self._push, self._finish = push, finish

    def _link(self, part: list[Step], nxt: Callable[[Any], Any], nxt_finish: Callable[[], Any],
              context: Callable[[], Any] | None) -> tuple[Callable, Callable]:
        """``push``/``finish`` of ``part`` (a map run or one step) feeding ``nxt``."""
        step = part[0]
        if step.op in MAP_STEPS:
            drops = [0] * len(part)
            self._map_runs.append((part, drops))
            fn = compose_map(part, context=context, drops=drops)

            def push_map(x: Any) -> Any:
                y = fn(x)
                return () if y is _DROP else nxt(y)
            return push_map, nxt_finish
        cell = self.counts[step.node_id] = [0]

        def emit_all(items: Any) -> Iterator[Any]:
            for y in items:
                cell[0] += 1
                yield from nxt(y)

        if step.op == "batch":
            n, buf = step.params["n"], []

            def push_batch(x: Any) -> Any:
                buf.append(x)
                if len(buf) < n:
                    return ()
                full = buf[:]
                buf.clear()
                cell[0] += 1
                return nxt(full)

            def finish_batch() -> Iterator[Any]:
                rest = [buf[:]] if buf else []
                buf.clear()
                yield from emit_all(rest)
                yield from nxt_finish()
            return push_batch, finish_batch
        if step.op == "flatten":
            return (lambda x: emit_all(_named(x, step))), nxt_finish
        if step.op == "combine":
            fn = step.params["fn"]

            def push_combine(x: Any) -> Iterator[Any]:
                try:
                    out = fn(x)
                except Exception as e:
                    raise operator_error(step.node_id, step.label, e)
                yield from emit_all(_named(out, step))
            return push_combine, nxt_finish
        if step.op == "local_shuffle":
            seed = step.params["seed"]
            buf = ShuffleBuffer(step.params["buffer_size"],
                                random.Random(None if seed is None else seed + self.shard_index))

            def push_shuffle(x: Any) -> Any:
                y = buf.push(x)
                if y is _DROP:
                    return ()
                cell[0] += 1
                return nxt(y)
            def finish_shuffle() -> Iterator[Any]:
                yield from emit_all(buf.drain())
                yield from nxt_finish()
            return push_shuffle, finish_shuffle
        raise OperatorError(f"operator {step.node_id!r}: {step.op} cannot run in a fused "
                            "stage", node_id=step.node_id, label=step.label)

    def item_counts(self) -> dict[str, int]:
        """Items each step has emitted so far (the source: items that went in)."""
        out = {node_id: cell[0] for node_id, cell in self.counts.items()}
        prev = self.source_id
        for step in self.steps:
            if step.node_id not in out:  # inside a fused map run: input minus drops
                for run, drops in self._map_runs:
                    ids = [s.node_id for s in run]
                    if step.node_id in ids:
                        k = ids.index(step.node_id)
                        out[step.node_id] = out.get(prev, 0) - drops[k]
            prev = step.node_id
        return out
