"""Fused stages: executing a compiled chain of operators where a shard lives.

The compiler (``graph/compile.py``) describes each maximal chain of shard-local
operators as a :class:`~flowrl.graph.compile.StageSpec`; the runtime turns it into
one :class:`FusedStage`, shipped once to every shard host (pickled with
cloudpickle for Ray). The driver runs a synchronous source and the operators after
it as a FusedStage too. Consecutive one-to-one operators (``for_each``/``filter``)
are fused into a single function call per item (:func:`compose_map`, a loop over
the run's functions). Whatever
raises is re-raised as an :class:`~flowrl.errors.OperatorError` naming the node,
with the cause chained. :class:`ShuffleBuffer` is the one buffer shuffle behind
``local_shuffle`` and the driver's ``shuffle``.

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
from flowrl.graph.compile import StageSpec, Step


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


def _map(items: Iterator[Any], fn: Callable[[Any], Any]) -> Iterator[Any]:
    for x in items:
        y = fn(x)
        if y is not _DROP:
            yield y


def _batch(items: Iterator[Any], n: int, cell: list[int]) -> Iterator[list]:
    buf: list = []
    for x in items:
        buf.append(x)
        if len(buf) == n:
            cell[0] += 1
            yield buf
            buf = []
    if buf:
        cell[0] += 1
        yield buf


def _flatten(items: Iterator[Any], step: Step, cell: list[int]) -> Iterator[Any]:
    for x in items:
        for y in _named(x, step):
            cell[0] += 1
            yield y


def _combine(items: Iterator[Any], step: Step, cell: list[int]) -> Iterator[Any]:
    fn = step.params["fn"]
    for x in items:
        try:
            out = fn(x)
        except Exception as e:
            raise operator_error(step.node_id, step.label, e)
        for y in _named(out, step):
            cell[0] += 1
            yield y


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


def _guard_source(items: Iterator[Any], node_id: str, label: str,
                  cell: list[int]) -> Iterator[Any]:
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
        cell[0] += 1
        yield x


class FusedStage:
    """A picklable ``iterator -> iterator`` applying shard-local steps in order.

    ``shard_index`` offsets seeds so seeded shuffles differ per shard but replay.
    """

    def __init__(self, source_id: str, source_label: str, steps: list[Step],
                 shard_index: int = 0):
        self.source_id = source_id
        self.source_label = source_label
        self.steps = list(steps)
        self.shard_index = shard_index
        self._map_runs: list = []

    @classmethod
    def from_spec(cls, spec: StageSpec) -> "FusedStage":
        """The stage executing a compiled :class:`~flowrl.graph.compile.StageSpec`."""
        return cls(spec.source_id, spec.source_label, list(spec.steps), spec.shard_index)

    def __repr__(self) -> str:
        return f"FusedStage({self.source_id!r} -> {[s.node_id for s in self.steps]})"

    def __call__(self, items: Iterator[Any]) -> Iterator[Any]:
        # Each generator counts what it emits into its node's cell (no separate
        # counting layer); a fused map run's node counts follow from its drops.
        counts = self.counts = {self.source_id: [0]}
        self._map_runs = []
        it: Iterator[Any] = _guard_source(iter(items), self.source_id, self.source_label,
                                          counts[self.source_id])
        run: list[Step] = []
        for step in self.steps + [None]:
            if step is not None and step.op in ("for_each", "filter"):
                run.append(step)
                continue
            if run:
                drops = [0] * len(run)
                it = _map(it, compose_map(run, drops=drops))
                self._map_runs.append((run, drops))
                run = []
            if step is None:
                break
            cell = counts[step.node_id] = [0]
            if step.op == "batch":
                it = _batch(it, step.params["n"], cell)
            elif step.op == "flatten":
                it = _flatten(it, step, cell)
            elif step.op == "combine":
                it = _combine(it, step, cell)
            elif step.op == "local_shuffle":
                seed = step.params["seed"]
                rng = random.Random(None if seed is None else seed + self.shard_index)
                it = shuffle_buffer(it, step.params["buffer_size"], rng, cell)
            else:
                raise OperatorError(f"operator {step.node_id!r}: {step.op} cannot run "
                                    "shard-local", node_id=step.node_id, label=step.label)
        return it

    def item_counts(self) -> dict[str, int]:
        """Items each step has emitted on this shard so far (source included)."""
        out = {node_id: cell[0] for node_id, cell in getattr(self, "counts", {}).items()}
        prev = self.source_id
        for step in self.steps:
            if step.node_id not in out:  # inside a fused map run: input minus drops
                for run, drops in self._map_runs:
                    ids = [s.node_id for s in run]
                    if step.node_id in ids:
                        k = ids.index(step.node_id)
                        out[step.node_id] = out[prev] - drops[k]
            prev = step.node_id
        return out

