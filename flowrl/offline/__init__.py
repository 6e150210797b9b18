"""Offline RL: estimating a policy's value from logged experience
(:mod:`flowrl.offline.estimators`, :mod:`flowrl.offline.fqe`)."""
