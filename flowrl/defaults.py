"""Defaults that several layers share, each defined once here.

Bounds on waiting for remote hosts (Ray actors: rollout workers, shard hosts,
replay actors). A setting overrides each where one exists: an algorithm's
``sample_timeout_s``, ``plan.compile(remote_timeout_s=...)``.
"""

#: How long a remote host may leave a request unanswered before it counts as lost,
#: when no setting gives a bound: ``plan.compile``'s ``remote_timeout_s`` and a
#: WorkerSet's (an algorithm's) ``sample_timeout_s`` of None.
REMOTE_TIMEOUT_S = 600.0
#: Least time a new or replacement worker gets to start before its first answer is due.
START_WAIT_S = 120.0
#: Bound on a driver's wait for one call when no setting (``sample_timeout_s``) gives one.
CALL_TIMEOUT_S = 300.0

__all__ = ["REMOTE_TIMEOUT_S", "START_WAIT_S", "CALL_TIMEOUT_S"]
