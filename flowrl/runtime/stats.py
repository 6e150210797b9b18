"""Per-node run statistics, kept cheap enough to stay on for every item."""

from __future__ import annotations


class NodeStats:
    """Items in/out, busy and wait seconds, and queue depth of one node.

    ``busy_s`` is time spent in the node's own code; nodes fused into one call
    share that call's time and list each other in ``fused_with``. ``wait_s`` is
    time spent awaiting something outside the driver (shard results, a ready
    input, a queue). ``queue_depth`` is the current depth of the node's queue
    (requests in flight, buffered copies, queued items) and ``max_queue_depth``
    the largest seen.
    """

    __slots__ = ("items_in", "items_out", "busy_s", "wait_s", "queue_depth",
                 "max_queue_depth", "fused_with")

    def __init__(self) -> None:
        self.items_in = 0
        self.items_out = 0
        self.busy_s = 0.0
        self.wait_s = 0.0
        self.queue_depth = 0
        self.max_queue_depth = 0
        self.fused_with: tuple[str, ...] = ()

    def depth(self, n: int) -> None:
        self.queue_depth = n
        if n > self.max_queue_depth:
            self.max_queue_depth = n

    def as_dict(self) -> dict:
        out = {"items_in": self.items_in, "items_out": self.items_out,
               "busy_s": round(self.busy_s, 6), "wait_s": round(self.wait_s, 6),
               "queue_depth": self.queue_depth, "max_queue_depth": self.max_queue_depth}
        if self.fused_with:
            out["fused_with"] = list(self.fused_with)
        return out
