"""ASP (approximate synchronous parallel) bookkeeping of one policy: the parameter
deltas a worker has not sent yet, for :func:`flowrl.ops.LocalComputeUpdates` and
:class:`flowrl.ops.ForwardUpdates`.

State: ``base``, the weights of the policy's last ``set_weights`` plus every delta
sent or received since (None until the first of them, or the first
:meth:`SignificantUpdates.pending`, which then starts it at the current weights),
and ``delta``, the pending change ``current - base``. A policy holds one and
answers the seeds' ``asp_accumulate_grads()``, ``asp_get_updates(threshold)`` and
``asp_apply_updates(updates)`` through it (:class:`~flowrl.policies.TorchPolicy`).

>>> import numpy as np
>>> asp = SignificantUpdates()
>>> asp.rebase({"w": np.zeros(3)})
>>> updates, n = asp.take({"w": np.array([0.5, 0.01, -0.2])}, threshold=0.1)
>>> updates["w"].tolist(), n, asp.pending({"w": np.array([0.5, 0.01, -0.2])})["w"].tolist()
([0.5, 0.0, -0.2], 2, [0.0, 0.01, 0.0])
"""

from __future__ import annotations

import numpy as np

Weights = dict[str, np.ndarray]


class SignificantUpdates:
    """The ASP base and pending deltas of one policy (see the module docstring)."""

    def __init__(self) -> None:
        self.base: Weights | None = None
        self.delta: Weights | None = None

    def rebase(self, weights: Weights) -> None:
        """Count deltas from ``weights`` (the policy's ``set_weights`` calls this)."""
        self.base = {k: np.asarray(v) for k, v in weights.items()}

    def pending(self, current: Weights) -> Weights:
        """Bring the pending deltas up to date with the ``current`` weights and
        return them: ``current - base`` (before any base, the current weights
        become it)."""
        if self.base is None:
            self.base = current
        self.delta = {k: current[k] - self.base[k] for k in current}
        return self.delta

    def take(self, current: Weights, threshold: float) -> tuple[Weights, int]:
        """``({param: delta where |delta| > threshold, else 0}, num_nonzero)`` of the
        pending deltas; what is returned counts as sent (joins the base), the rest
        stays pending and keeps accumulating."""
        delta = self.pending(current)
        updates = {k: np.where(np.abs(d) > threshold, d, 0).astype(d.dtype)
                   for k, d in delta.items()}
        self.base = {k: self.base[k] + u for k, u in updates.items()}
        return updates, int(sum(np.count_nonzero(u) for u in updates.values()))

    def received(self, current: Weights, updates: Weights) -> Weights:
        """Another worker's ``updates`` join the base, leaving this policy's own
        pending deltas pending; returns the weights the policy takes (``current``
        plus ``updates``)."""
        self.pending(current)
        base = {k: self.base[k] + updates.get(k, 0) for k in self.base}
        weights = {k: w + updates.get(k, 0) for k, w in current.items()}
        self.base = base
        return weights
