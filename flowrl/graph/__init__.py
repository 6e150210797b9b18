"""The plan layer: streams, operators, Plan (its networkx graph), validation and DOT.

Nothing here imports Ray, torch or ``flowrl.runtime``; building a plan has no side
effects. The runtime compiles and runs plans (``Plan.compile``, see ``plan.py``).
"""

from flowrl.graph.plan import Plan
from flowrl.graph.stream import (Concurrently, LocalStream, ParallelStream, from_actors,
                                 from_items, from_iterable, from_iterators, from_range)

__all__ = ["Plan", "Concurrently", "LocalStream", "ParallelStream",
           "from_actors", "from_items", "from_iterable", "from_iterators", "from_range"]
