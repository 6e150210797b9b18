"""Replay: ring buffers (uniform and prioritized, over numpy segment trees) and
replay actors that host them as shard sources.

>>> buf = PrioritizedReplayBuffer(capacity=1000, alpha=0.6, beta=0.4, seed=0)
>>> buf.add(SampleBatch(obs=np.arange(10)))
>>> sorted(buf.sample(4).keys())
['batch_indexes', 'batch_row_ids', 'obs', 'weights']
"""

import numpy as np  # noqa: F401 - the module docstring's example uses it

from flowrl.batch import SampleBatch  # noqa: F401 - the example uses it too
from flowrl.replay.actor import PRIORITIES, ReplayActor, ReplayCalls, create_replay_actors
from flowrl.replay.buffers import (BATCH_INDEXES, BATCH_ROW_IDS, WEIGHTS,
                                   PrioritizedReplayBuffer, ReplayBuffer)
from flowrl.replay.segment_tree import MinTree, SegmentTree, SumTree

__all__ = ["ReplayBuffer", "PrioritizedReplayBuffer", "ReplayActor", "ReplayCalls",
           "create_replay_actors", "SumTree", "MinTree", "SegmentTree", "WEIGHTS",
           "BATCH_INDEXES", "BATCH_ROW_IDS", "PRIORITIES"]
