"""``MixInReplay``: mix replayed batches into a stream of fresh ones (IMPALA's replay).

State: a ring of the last ``num_slots`` batches seen (oldest overwritten first) and
a seeded ``random.Random``.
"""

from __future__ import annotations

import random
from typing import Any

from flowrl.errors import ConfigError


class MixInReplay:
    """``combine(MixInReplay(num_slots, replay_proportion))``: each batch, followed by
    replayed ones.

    Every input batch is stored in a ring of ``num_slots`` slots (when
    ``num_slots > 0``) and emitted first; then, as in RLlib 1.x, with ``f =
    replay_proportion``, while ``random() < f`` (``f`` decreasing by 1 each time)
    one batch drawn uniformly from the ring is appended. So on average
    ``replay_proportion`` replayed batches follow each fresh one (0.5: one replay
    every other batch; 2.0: two per batch); the fresh batch itself may be drawn.
    ``seed`` makes the draws repeat. Touches no metrics.

    >>> mix = MixInReplay(num_slots=2, replay_proportion=1.0, seed=0)
    >>> mix("a"), mix("b"), mix("c")
    (['a', 'a'], ['b', 'b'], ['c', 'b'])
    """

    def __init__(self, num_slots: int, replay_proportion: float, *, seed: int | None = None):
        if isinstance(num_slots, bool) or not isinstance(num_slots, int) or num_slots < 0:
            raise ConfigError(f"MixInReplay(num_slots={num_slots!r}): must be an int >= 0")
        if isinstance(replay_proportion, bool) or not isinstance(replay_proportion, (int, float)) \
                or not replay_proportion >= 0:
            raise ConfigError(f"MixInReplay(replay_proportion={replay_proportion!r}): must be a "
                              "number >= 0 (replayed batches per fresh one)")
        if replay_proportion > 0 and num_slots == 0:
            raise ConfigError(f"MixInReplay(num_slots=0, replay_proportion={replay_proportion}): "
                              "nothing to replay from; set num_slots > 0 "
                              "(replay_buffer_num_slots) or replay_proportion=0")
        self.num_slots, self.replay_proportion = num_slots, float(replay_proportion)
        self.slots: list[Any] = []
        self._next = 0
        self._rng = random.Random(seed)

    def __call__(self, batch: Any) -> list[Any]:
        if self.num_slots > 0:
            if len(self.slots) < self.num_slots:
                self.slots.append(batch)
            else:
                self.slots[self._next] = batch
            self._next = (self._next + 1) % self.num_slots
        out = [batch]
        f = self.replay_proportion
        while self.slots and self._rng.random() < f:
            f -= 1.0
            out.append(self.slots[self._rng.randrange(len(self.slots))])
        return out


__all__ = ["MixInReplay"]
