"""The plan layer: streams, operators, Plan, validation, DOT and compilation.

Nothing here imports Ray or torch; building a plan has no side effects.
"""

from flowrl.graph.plan import Plan
from flowrl.runtime.shard_host import ShardHost
from flowrl.graph.stream import (Concurrently, LocalStream, ParallelStream, from_actors,
                                 from_items, from_iterable, from_iterators, from_range)

__all__ = ["Plan", "ShardHost", "Concurrently", "LocalStream", "ParallelStream",
           "from_actors", "from_items", "from_iterable", "from_iterators", "from_range"]
