"""Compatibility alias: ``ShardHost`` and ``ItemsHost`` live in ``flowrl.runtime.shard_host``.

The host methods are execution machinery (stage installation, pull slots), so they
belong to the runtime; this module keeps ``from flowrl.graph.shard_host import
ShardHost`` working.
"""

from flowrl.runtime.shard_host import PULL_SLOTS, ItemsHost, ShardHost, Stage

__all__ = ["ShardHost", "ItemsHost", "PULL_SLOTS", "Stage"]
