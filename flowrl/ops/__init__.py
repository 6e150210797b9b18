"""RL operators built on plan streams (RLlib 1.x names and meanings)."""

from flowrl.ops.queues import Dequeue, Enqueue

__all__ = ["Dequeue", "Enqueue"]
