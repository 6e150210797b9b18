"""Replay buffers: uniform (:class:`ReplayBuffer`) and prioritized (:class:`PrioritizedReplayBuffer`).

Storage is a ring of ``capacity`` rows held column-wise in preallocated numpy
arrays (created from the first batch added). ``add(batch)`` writes its rows at
the next positions, overwriting the oldest rows once full; a batch larger than
the capacity leaves only its last ``capacity`` rows, exactly as adding its rows one
by one would. Every row gets a row id (its insertion number, 0, 1, 2, ...) so a
priority update for a row that has since been overwritten can be recognised.

Sampling draws with replacement from a seeded ``numpy.random.Generator``; the
buffer's state (:meth:`ReplayBuffer.get_state`) includes the generator's, so a
restored buffer draws exactly what the original would have.

Prioritized replay (Schaul et al. 2016): row ``i`` with priority ``p_i`` is drawn
with probability ``P(i) = p_i^α / Σ_k p_k^α`` (a sum tree over ``p^α``) and carries
the importance weight ``w_i = (N P(i))^-β / max_j (N P(j))^-β`` (the max from a
min tree, N the rows stored). New rows get the largest priority seen so far
unless the caller gives theirs (worker-side prioritization).

Adding, sampling and updating a batch of ``n`` rows is a fixed number of numpy
calls (tree updates are one call per tree level), never a Python loop per row.

Frame-stacked image observations (uint8 ``obs``/``new_obs`` of ``(K, H, W)``, each
``new_obs`` its ``obs`` shifted by one frame, or by up to ``K - 1`` for n-step rows:
Atari's) are stored one frame per row and rebuilt on sampling
(:mod:`flowrl.replay.frames`), unless the buffer is built with
``dedup_frames=False``; ``stats()["bytes_per_row"]`` says what a stored row costs
either way.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError
from flowrl.replay.frames import FrameStackColumns, holds_frame_stacks
from flowrl.replay.segment_tree import MinTree, SumTree

#: Column of sampled prioritized batches: the importance weight of each row.
WEIGHTS = "weights"
#: Column of sampled batches: the ring slot each row came from.
BATCH_INDEXES = "batch_indexes"
#: Column of sampled batches: the row id (insertion number) of each row.
BATCH_ROW_IDS = "batch_row_ids"


def _check_int(owner: str, name: str, value: Any, lo: int) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < lo:
        raise ConfigError(f"{owner}({name}={value!r}): must be an int >= {lo}")
    return int(value)


def _check_num(owner: str, name: str, value: Any, lo: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float, np.floating)) \
            or not math.isfinite(value) or value < lo:
        raise ConfigError(f"{owner}({name}={value!r}): must be a finite number >= {lo}")
    return float(value)


class ReplayBuffer:
    """A ring buffer of rows sampled uniformly with replacement.

    ``add(batch)`` stores a :class:`~flowrl.batch.SampleBatch`'s rows;
    ``sample(n)`` returns ``n`` rows drawn uniformly (with ``batch_indexes`` and
    ``batch_row_ids`` columns); ``len(buffer)`` is the rows stored; ``stats()``
    counts rows added and sampled.

    >>> buf = ReplayBuffer(capacity=3, seed=0)
    >>> buf.add(SampleBatch(obs=[10, 11, 12, 13]))     # 10 is overwritten by 13
    >>> len(buf), sorted(set(buf.sample(20)["obs"].tolist()))
    (3, [11, 12, 13])
    >>> buf.stats()["num_added"], buf.stats()["num_sampled"]
    (4, 20)
    """

    def __init__(self, capacity: int, seed: int | None = None, *, dedup_frames: bool = True):
        name = type(self).__name__
        self.capacity = _check_int(name, "capacity", capacity, 1)
        self.dedup_frames = bool(dedup_frames)
        self._columns: dict[str, np.ndarray] | None = None
        self._frames: FrameStackColumns | None = None  # obs/new_obs, one frame per row
        self._row_ids = np.full(self.capacity, -1, dtype=np.int64)
        self._next = 0          # the slot the next row goes to
        self._num_added = 0     # rows ever added (the next row id)
        self._num_sampled = 0
        self._rng = np.random.default_rng(seed)

    # -- storage -----------------------------------------------------------------
    def __len__(self) -> int:
        return min(self._num_added, self.capacity)

    def _check_batch(self, batch: Any) -> None:
        if not isinstance(batch, SampleBatch):
            raise ConfigError(f"{type(self).__name__}.add: expected a SampleBatch, got "
                              f"{type(batch).__name__}; store a MultiAgentBatch per policy "
                              "(one buffer per policy id)")
        reserved = {WEIGHTS, BATCH_INDEXES, BATCH_ROW_IDS} & set(batch.keys())
        if reserved:
            raise ConfigError(f"{type(self).__name__}.add: the batch has column(s) "
                              f"{sorted(reserved)}, which sampling adds; drop them first")
        if self._columns is not None and set(batch.keys()) != self._column_names():
            extra = sorted(set(batch.keys()) - self._column_names())
            missing = sorted(self._column_names() - set(batch.keys()))
            raise ConfigError(f"{type(self).__name__}.add: the batch has columns "
                              f"{sorted(batch.keys())} but the buffer stores "
                              f"{sorted(self._column_names())} (new: {extra}, missing: "
                              f"{missing}); add batches with the same columns (a buffer "
                              "restored from a checkpoint keeps the columns it was saved with)")

    def _column_names(self) -> set[str]:
        names = set(self._columns or ())
        return names | {SampleBatch.OBS, SampleBatch.NEXT_OBS} if self._frames else names

    def _write(self, batch: SampleBatch) -> np.ndarray:
        """Store ``batch``'s rows; returns the slots written (of the rows kept)."""
        n = batch.count
        obs, new_obs = SampleBatch.OBS, SampleBatch.NEXT_OBS
        if self._columns is None:
            if self.dedup_frames and obs in batch and new_obs in batch \
                    and holds_frame_stacks(batch[obs], batch[new_obs]):
                self._frames = FrameStackColumns(self.capacity, batch[obs].shape[1:])
            self._columns = {k: np.zeros((self.capacity, *v.shape[1:]), dtype=v.dtype)
                             for k, v in batch.items()
                             if self._frames is None or k not in (obs, new_obs)}
        skip = max(0, n - self.capacity)  # rows overwritten within this very batch
        kept = n - skip
        start = (self._next + skip) % self.capacity
        slots = (start + np.arange(kept)) % self.capacity
        row_ids = self._num_added + skip + np.arange(kept)
        for k, column in self._columns.items():
            column[slots] = batch[k][skip:]
        if self._frames is not None:
            self._frames.write(slots, row_ids, batch[obs][skip:], batch[new_obs][skip:])
        self._row_ids[slots] = row_ids
        self._next = (self._next + n) % self.capacity
        self._num_added += n
        return slots

    def add(self, batch: SampleBatch) -> None:
        """Store every row of ``batch`` (oldest rows are overwritten once full)."""
        self._check_batch(batch)
        if batch.count:
            self._write(batch)

    def _rows(self, slots: np.ndarray) -> SampleBatch:
        out = SampleBatch({k: v[slots] for k, v in self._columns.items()})
        if self._frames is not None:
            out[SampleBatch.OBS], out[SampleBatch.NEXT_OBS] = self._frames.read(slots)
        out[BATCH_INDEXES] = slots.astype(np.int64)
        out[BATCH_ROW_IDS] = self._row_ids[slots]
        return out

    def _check_sample(self, n: Any) -> int:
        n = _check_int(f"{type(self).__name__}.sample", "n", n, 1)
        if len(self) == 0:
            raise ValueError(f"{type(self).__name__}.sample({n}): the buffer is empty; add "
                             "rows first (wait for learning_starts rows before replaying)")
        return n

    def sample(self, n: int, beta: float | None = None) -> SampleBatch:
        """``n`` rows drawn uniformly with replacement (``beta`` is ignored here)."""
        n = self._check_sample(n)
        slots = self._rng.integers(0, len(self), size=n)
        self._num_sampled += n
        return self._rows(slots)

    # -- introspection and checkpoints --------------------------------------------
    def stats(self) -> dict[str, Any]:
        """``num_entries``, ``capacity``, ``num_added``, ``num_sampled`` and
        ``bytes_per_row``: the storage held per slot (columns, frames and their
        anchors, row ids; 0 before the first add)."""
        held = self._row_ids.nbytes + sum(c.nbytes for c in (self._columns or {}).values())
        if self._frames is not None:
            held += self._frames.nbytes()
        return {"num_entries": len(self), "capacity": self.capacity,
                "num_added": self._num_added, "num_sampled": self._num_sampled,
                "bytes_per_row": 0 if self._columns is None else round(held / self.capacity)}

    def get_state(self) -> dict[str, Any]:
        """Everything needed to continue exactly: stored rows, ring position,
        counters and the sampler's RNG state (numpy arrays and plain Python)."""
        n = len(self)
        return {"capacity": self.capacity, "next": self._next, "num_added": self._num_added,
                "num_sampled": self._num_sampled,
                "row_ids": self._row_ids[:n].copy(),
                "columns": None if self._columns is None else
                {k: v[:n].copy() for k, v in self._columns.items()},
                "frames": None if self._frames is None else self._frames.get_state(n),
                "rng": self._rng.bit_generator.state}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned (same capacity)."""
        if state["capacity"] != self.capacity:
            raise ConfigError(f"{type(self).__name__}.set_state: the state is of a buffer of "
                              f"capacity {state['capacity']}, this one has {self.capacity}")
        n = len(state["row_ids"])
        if state["columns"] is None:
            self._columns = None
        else:
            self._columns = {}
            for k, v in state["columns"].items():
                col = np.zeros((self.capacity, *v.shape[1:]), dtype=v.dtype)
                col[:n] = v
                self._columns[k] = col
        frames = state.get("frames")
        self._frames = None
        if frames is not None:
            self._frames = FrameStackColumns(self.capacity,
                                             (int(frames["stack"]), *frames["frame"].shape[1:]))
            self._frames.set_state(frames)
        self._row_ids[:] = -1
        self._row_ids[:n] = state["row_ids"]
        self._next, self._num_added = state["next"], state["num_added"]
        self._num_sampled = state["num_sampled"]
        self._rng.bit_generator.state = state["rng"]

    def __repr__(self) -> str:
        return f"{type(self).__name__}(capacity={self.capacity}, entries={len(self)})"


class PrioritizedReplayBuffer(ReplayBuffer):
    """Proportional prioritized replay; see the module docstring for P(i) and w_i.

    ``alpha`` (α >= 0; 0 is uniform) shapes the priorities, ``beta`` (β >= 0) is
    the default importance-weight exponent of :meth:`sample`, ``eps`` is added to
    |TD error| by :meth:`priorities_from_td_errors`. Sampled batches carry
    ``weights`` (float32), ``batch_indexes`` and ``batch_row_ids``; pass the last
    two back to :meth:`update_priorities`. An update for a row that was
    overwritten since it was sampled is dropped and counted
    (``stats()["num_stale_priority_updates"]``), never written to the new row.

    >>> buf = PrioritizedReplayBuffer(4, alpha=1.0, beta=1.0, seed=0)
    >>> buf.add(SampleBatch(obs=[0, 1, 2, 3]))
    >>> buf.update_priorities(np.array([0, 1, 2, 3]), np.array([1.0, 1.0, 1.0, 5.0]))
    4
    >>> s = buf.sample(2000)
    >>> round(float(np.mean(s["obs"] == 3)), 1), round(float(s["weights"].min()), 3), float(s["weights"].max())
    (0.6, 0.2, 1.0)
    >>> buf.add(SampleBatch(obs=[4]))                  # overwrites row id 0 in slot 0
    >>> buf.update_priorities(np.array([0]), np.array([9.0]), row_ids=np.array([0]))
    0
    >>> buf.stats()["num_stale_priority_updates"]
    1
    """

    def __init__(self, capacity: int, alpha: float = 0.6, beta: float = 0.4,
                 eps: float = 1e-6, seed: int | None = None, *, dedup_frames: bool = True):
        super().__init__(capacity, seed, dedup_frames=dedup_frames)
        name = type(self).__name__
        self.alpha = _check_num(name, "alpha", alpha, 0.0)
        self.beta = _check_num(name, "beta", beta, 0.0)
        self.eps = _check_num(name, "eps", eps, 0.0)
        self._sum = SumTree(self.capacity)
        self._min = MinTree(self.capacity)
        self._max_priority = 1.0
        self._num_updates = 0
        self._num_stale = 0

    def _check_priorities(self, where: str, priorities: Any, n: int) -> np.ndarray:
        p = np.asarray(priorities, dtype=np.float64).reshape(-1)
        if len(p) != n:
            raise ValueError(f"{type(self).__name__}.{where}: got {len(p)} priorities for "
                             f"{n} rows; give one per row")
        bad = ~(p > 0) | ~np.isfinite(p)
        if bad.any():
            raise ValueError(f"{type(self).__name__}.{where}: priorities must be finite and "
                             f"> 0, got {p[bad][:5].tolist()}; use |td_error| + eps")
        return p

    def _set_priorities(self, slots: np.ndarray, priorities: np.ndarray) -> None:
        pa = priorities ** self.alpha
        levels = self._sum.ancestors(slots)
        self._sum.set(slots, pa, levels)
        self._min.set(slots, pa, levels)

    def add(self, batch: SampleBatch, priorities: np.ndarray | None = None) -> None:
        """Store ``batch``'s rows with ``priorities`` (one per row, > 0), or with the
        largest priority seen so far."""
        self._check_batch(batch)
        if batch.count == 0:
            return
        if priorities is not None:
            p = self._check_priorities("add", priorities, batch.count)
        slots = self._write(batch)
        if priorities is None:
            p = np.full(len(slots), self._max_priority)
        else:
            p = p[len(p) - len(slots):]
            self._max_priority = max(self._max_priority, float(p.max()))
        self._set_priorities(slots, p)

    def sample(self, n: int, beta: float | None = None) -> SampleBatch:
        """``n`` rows drawn with probability ∝ p^α, with ``weights`` (β defaults to
        the buffer's), ``batch_indexes`` and ``batch_row_ids``."""
        n = self._check_sample(n)
        beta = self.beta if beta is None else _check_num(
            f"{type(self).__name__}.sample", "beta", beta, 0.0)
        total = self._sum.total()
        slots = self._sum.find_prefix_sum(self._rng.random(n) * total)
        np.minimum(slots, len(self) - 1, out=slots)
        count = len(self)
        prob = self._sum.get(slots) / total
        min_prob = self._min.min() / total
        weights = (prob * count) ** -beta / (min_prob * count) ** -beta
        self._num_sampled += n
        out = self._rows(slots)
        out[WEIGHTS] = weights.astype(np.float32)
        return out

    def priorities_from_td_errors(self, td_errors: np.ndarray) -> np.ndarray:
        """``|td_errors| + eps``: priorities for :meth:`update_priorities`."""
        return np.abs(np.asarray(td_errors, dtype=np.float64)) + self.eps

    def update_priorities(self, indexes: np.ndarray, priorities: np.ndarray,
                          row_ids: np.ndarray | None = None) -> int:
        """Set the priorities of rows at ring slots ``indexes``; returns how many
        were written.

        With ``row_ids`` (the ``batch_row_ids`` of the sampled batch), a slot whose
        row was overwritten since is skipped and counted as stale. Everything is
        validated before anything is written: negative slots, slots past the
        capacity or never filled, a length mismatch, or a priority that is NaN,
        infinite or <= 0 raise ValueError and leave the trees untouched.
        """
        name = type(self).__name__
        idx = np.asarray(indexes).reshape(-1)
        if idx.dtype.kind not in "iu":
            raise ValueError(f"{name}.update_priorities: indexes must be integers, got dtype "
                             f"{idx.dtype}")
        idx = idx.astype(np.int64)
        p = self._check_priorities("update_priorities", priorities, len(idx))
        if len(idx) and (idx.min() < 0 or idx.max() >= self.capacity):
            raise ValueError(f"{name}.update_priorities: indexes must lie in [0, "
                             f"{self.capacity}) (the capacity), got {idx.min()}..{idx.max()}")
        if len(idx) and idx.max() >= len(self):
            raise ValueError(f"{name}.update_priorities: index {int(idx.max())} was never "
                             f"filled ({len(self)} rows stored); pass batch_indexes of a "
                             "sampled batch")
        if row_ids is not None:
            rid = np.asarray(row_ids, dtype=np.int64).reshape(-1)
            if len(rid) != len(idx):
                raise ValueError(f"{name}.update_priorities: {len(rid)} row_ids for "
                                 f"{len(idx)} indexes")
            live = self._row_ids[idx] == rid
            self._num_stale += int((~live).sum())
            idx, p = idx[live], p[live]
        if len(idx):
            self._set_priorities(idx, p)
            self._max_priority = max(self._max_priority, float(p.max()))
        self._num_updates += len(idx)
        return len(idx)

    def stats(self) -> dict[str, Any]:
        """Base stats plus ``max_priority``, ``num_priority_updates`` and
        ``num_stale_priority_updates``."""
        return {**super().stats(), "max_priority": self._max_priority,
                "num_priority_updates": self._num_updates,
                "num_stale_priority_updates": self._num_stale}

    def get_state(self) -> dict[str, Any]:
        """Base state plus the priorities (tree leaves) and counters."""
        return {**super().get_state(), "priorities": self._sum.leaves(),
                "max_priority": self._max_priority, "num_updates": self._num_updates,
                "num_stale": self._num_stale, "alpha": self.alpha}

    def set_state(self, state: dict[str, Any]) -> None:
        if state["alpha"] != self.alpha:  # the leaves hold p^alpha of the saved buffer
            raise ConfigError(f"{type(self).__name__}.set_state: the state was saved with "
                              f"alpha={state['alpha']}, this buffer has alpha={self.alpha}; "
                              "restore into a buffer with the same alpha")
        super().set_state(state)
        leaves = np.asarray(state["priorities"], dtype=np.float64)
        self._sum.set_leaves(leaves)
        self._min.set_leaves(np.where(np.arange(self.capacity) < len(self), leaves, np.inf))
        self._max_priority = state["max_priority"]
        self._num_updates, self._num_stale = state["num_updates"], state["num_stale"]


__all__ = ["ReplayBuffer", "PrioritizedReplayBuffer", "WEIGHTS", "BATCH_INDEXES",
           "BATCH_ROW_IDS"]
