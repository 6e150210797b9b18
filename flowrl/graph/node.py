"""Plan nodes and how their labels are derived.

A :class:`Node` is one operator application: what it does (``op`` and ``params``),
what it consumes (``inputs``: ``(node, port)`` pairs) and how it is shown
(``label``). Nodes are immutable once built and carry no runtime state; ids are
assigned when a :class:`~flowrl.graph.plan.Plan` collects them, so they are stable
across processes (derived from names, never ``id()``).
"""

from __future__ import annotations

import functools
import inspect
import os
from dataclasses import dataclass, field
from typing import Any

# Operator kinds (the ``kind`` node attribute).
SOURCE, TRANSFORM, GATHER, UNION, SPLIT, SINK, AGGREGATE = (
    "source", "transform", "gather", "union", "split", "sink", "aggregate")

# Stream kinds.
PARALLEL, LOCAL = "parallel", "local"

# Shard-local operators: fused into one stage that runs where the shard lives.
SHARD_LOCAL_OPS = frozenset({"for_each", "filter", "batch", "flatten", "combine",
                             "local_shuffle"})
# One-to-one (or one-to-at-most-one) operators fused into one driver-side call.
MAP_OPS = frozenset({"for_each", "filter", "zip_with_source_actor"})


@dataclass(eq=False, repr=False)
class Node:
    op: str
    kind: str
    stream: str
    inputs: tuple[tuple["Node", int], ...] = ()
    name: str | None = None
    label: str = ""
    params: dict[str, Any] = field(default_factory=dict)
    num_shards: int | None = None
    num_outputs: int = 1

    def __repr__(self) -> str:
        return f"Node({self.op}, label={self.label!r})"

    @property
    def base_id(self) -> str:
        """Readable id before de-duplication: the user's name, else parent id + op."""
        if self.name:
            return self.name
        if len(self.inputs) == 1:
            parent, port = self.inputs[0]
            suffix = f"[{port}]" if parent.num_outputs > 1 else ""
            return f"{parent.base_id}{suffix}.{self.op}"
        return self.op


def describe_callable(fn: Any) -> str:
    """A stable, readable label for a user function.

    Lambdas and nested functions become ``<lambda at file.py:42>``; named functions
    their qualified name; callable objects their class name.

    >>> describe_callable(len), describe_callable(bool)
    ('len', 'bool')
    >>> describe_callable(lambda x: x).startswith('<lambda at ')
    True
    """
    if isinstance(fn, functools.partial):
        return f"partial({describe_callable(fn.func)})"
    name = getattr(fn, "__name__", None)
    if name == "<lambda>":
        code = getattr(fn, "__code__", None)
        if code is not None:
            return f"<lambda at {os.path.basename(code.co_filename)}:{code.co_firstlineno}>"
        return "<lambda>"
    if name is not None and (inspect.isfunction(fn) or inspect.isbuiltin(fn)
                             or inspect.ismethod(fn) or inspect.isclass(fn)):
        return getattr(fn, "__qualname__", name).replace(".<locals>", "")
    return type(fn).__name__
