"""Sum and min segment trees over a fixed number of leaves, vectorized with numpy.

A tree over ``capacity`` leaves is one float64 array of ``2 * size`` nodes
(``size`` the next power of two >= capacity; node 1 is the root, node ``i`` has
children ``2i`` and ``2i + 1``, leaf ``j`` is node ``size + j``). Unused leaves
hold the neutral element (0 for sums, +inf for minima), so they never change a
reduction.

Every operation takes a batch: :meth:`SegmentTree.set` writes many leaves and then
recomputes their ancestors level by level (one numpy call per level, over the
distinct parents only); :meth:`SumTree.find_prefix_sum` descends for many masses at
once (one numpy call per level). Neither loops over rows in Python.

>>> t = SumTree(4)
>>> t.set(np.array([0, 1, 2, 3]), np.array([1.0, 2.0, 3.0, 4.0]))
>>> t.total(), t.find_prefix_sum(np.array([0.5, 1.0, 2.9, 9.9])).tolist()
(10.0, [0, 1, 1, 3])
>>> m = MinTree(4); m.set(np.array([2, 0]), np.array([5.0, 7.0])); m.min()
5.0
"""

from __future__ import annotations

import numpy as np

from flowrl.errors import ConfigError


class SegmentTree:
    """Base class: a complete binary tree reducing leaves with ``op`` (a numpy ufunc)."""

    op: np.ufunc = np.add
    neutral: float = 0.0

    def __init__(self, capacity: int):
        if isinstance(capacity, bool) or not isinstance(capacity, (int, np.integer)) \
                or capacity < 1:
            raise ConfigError(f"{type(self).__name__}(capacity={capacity!r}): must be an "
                              "int >= 1")
        self.capacity = int(capacity)
        size = 1
        while size < self.capacity:
            size *= 2
        self.size = size
        self.depth = size.bit_length() - 1
        self.tree = np.full(2 * size, self.neutral, dtype=np.float64)

    def set(self, indexes: np.ndarray, values: np.ndarray,
            levels: list[np.ndarray] | None = None) -> None:
        """Set leaves ``indexes`` to ``values`` (a later duplicate index wins).

        ``levels`` (from :meth:`ancestors` of the same indexes) lets several trees
        over the same leaves share that work. The caller validates; indexes must
        lie in ``[0, capacity)``.
        """
        indexes = np.asarray(indexes, dtype=np.int64)
        values = np.asarray(values, dtype=np.float64)
        if len(indexes) == 0:
            return
        tree = self.tree
        tree[indexes + self.size] = values  # numpy assigns repeated indexes in order
        op = self.op
        for nodes in (self.ancestors(indexes) if levels is None else levels):
            tree[nodes] = op(tree[2 * nodes], tree[2 * nodes + 1])

    def ancestors(self, indexes: np.ndarray) -> list[np.ndarray]:
        """The distinct ancestors of leaves ``indexes``, one sorted array per level,
        deepest first (the order :meth:`set` recomputes them in)."""
        nodes = np.sort(np.asarray(indexes, dtype=np.int64) + self.size)
        levels = []
        for _ in range(self.depth):
            nodes = nodes >> 1
            if len(nodes) > 1:
                keep = np.empty(len(nodes), dtype=bool)
                keep[0] = True
                np.not_equal(nodes[1:], nodes[:-1], out=keep[1:])
                nodes = nodes[keep]
            levels.append(nodes)
        return levels

    def get(self, indexes: np.ndarray) -> np.ndarray:
        """Leaf values at ``indexes``."""
        return self.tree[np.asarray(indexes, dtype=np.int64) + self.size]

    def leaves(self) -> np.ndarray:
        """All ``capacity`` leaf values (a copy)."""
        return self.tree[self.size:self.size + self.capacity].copy()

    def set_leaves(self, values: np.ndarray) -> None:
        """Replace every leaf with ``values`` (length ``capacity``) and rebuild the tree."""
        values = np.asarray(values, dtype=np.float64)
        if values.shape != (self.capacity,):
            raise ConfigError(f"{type(self).__name__}.set_leaves: got shape {values.shape}, "
                              f"expected ({self.capacity},)")
        tree = self.tree
        tree[:] = self.neutral
        tree[self.size:self.size + self.capacity] = values
        lo = self.size
        while lo > 1:
            hi, lo = lo, lo // 2
            tree[lo:hi] = self.op(tree[2 * lo:2 * hi:2], tree[2 * lo + 1:2 * hi:2])


class SumTree(SegmentTree):
    """Sums of leaves; :meth:`find_prefix_sum` maps masses to leaves (sampling)."""

    op = np.add
    neutral = 0.0

    def total(self) -> float:
        """The sum of every leaf."""
        return float(self.tree[1])

    def find_prefix_sum(self, masses: np.ndarray) -> np.ndarray:
        """For each mass ``m`` in ``[0, total)``, the leaf ``j`` with
        ``sum(leaves[:j]) <= m < sum(leaves[:j + 1])``; never a zero-valued leaf
        while the total is positive (float rounding near the total is steered left)."""
        masses = np.array(masses, dtype=np.float64)
        tree = self.tree
        nodes = np.ones(len(masses), dtype=np.int64)
        for _ in range(self.depth):
            left = nodes << 1
            left_sum = tree[left]
            right = (masses >= left_sum) & (tree[left + 1] > 0)
            masses -= np.where(right, left_sum, 0.0)
            nodes = left + right
        return nodes - self.size


class MinTree(SegmentTree):
    """Minima of leaves (unset leaves are +inf)."""

    op = np.minimum
    neutral = np.inf

    def min(self) -> float:
        """The smallest leaf (+inf when none is set)."""
        return float(self.tree[1])


__all__ = ["SegmentTree", "SumTree", "MinTree"]
