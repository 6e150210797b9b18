"""Frame-stacked observations stored one frame per row in a replay ring.

An Atari observation is a stack of the last ``K`` frames, ``(K, H, W)`` uint8, and
consecutive steps share ``K - 1`` of them; ``new_obs`` is ``obs`` shifted by one
frame (or, for n-step rows, the stack ``n`` steps on). Storing both columns as they
are keeps every frame ``2K`` times. :class:`FrameStackColumns` keeps, per ring
slot, the newest frame of ``obs`` (``H x W`` bytes per row), and rebuilds the
stacks on sampling:

- ``obs`` of a row whose ``K - 1`` previous slots hold its predecessors (each
  row's stack is the one before it shifted by one frame) is those slots' newest
  frames and its own. Every other row (the first ``K - 1`` steps after an episode
  starts or a break between batches) keeps its whole stack (an *anchor*).
- A row's *next stack* is its ``obs`` shifted by one frame plus its next frame,
  which is the frame of the next slot where the row written after it holds it (it
  continues the episode). A row whose next frame is not there (the last of an
  episode, or the newest row until the next write) keeps that frame beside the
  ring.
- ``new_obs`` is the next stack of the row itself or of one a few slots on, in the
  same write (``ahead``: n-step rows bootstrap from the stack ``n`` steps on, which
  is the next stack of the row ``n - 1`` slots on). A row whose ``new_obs`` is
  neither keeps it whole.
- Before a write overwrites slots that surviving rows rebuild from, those rows
  (at most ``K - 1``) become anchors. Rows only read from slots after their own,
  which the ring overwrites after theirs.

So storage is exact for any data (tests compare every sampled row with what was
added) and deduplicated when the data has the frame-stack structure.
"""

from __future__ import annotations

import math
import os
from typing import Any

import numpy as np

from flowrl.errors import ConfigError

#: How many slots on a row's ``new_obs`` may be found (n-step returns up to this n).
MAX_AHEAD = 16


def is_frame_stack(obs: np.ndarray, new_obs: np.ndarray) -> bool:
    """Whether ``obs``/``new_obs`` columns look like stacked frames: uint8 ``(N, K, H,
    W)`` with ``K > 1`` and every ``new_obs`` its ``obs`` shifted by one frame.

    >>> o = np.zeros((2, 4, 3, 3), np.uint8)
    >>> is_frame_stack(o, o), is_frame_stack(o[:, :1], o[:, :1])
    (True, False)
    """
    return (obs.dtype == np.uint8 and obs.ndim == 4 and obs.shape[1] > 1
            and new_obs.shape == obs.shape and new_obs.dtype == obs.dtype
            and bool(np.array_equal(new_obs[:, :-1], obs[:, 1:])))


def holds_frame_stacks(obs: np.ndarray, new_obs: np.ndarray) -> bool:
    """Whether a replay buffer should store ``obs``/``new_obs`` with
    :class:`FrameStackColumns`: uint8 ``(N, K, H, W)`` with ``K > 1``, every
    ``new_obs`` its ``obs`` shifted by 1 to ``K - 1`` frames (n-step rows bootstrap
    from the stack n steps on, fewer at the end of an episode or batch).

    >>> def stacks(*rows):
    ...     return np.array(rows, np.uint8)[:, :, None, None]
    >>> obs = stacks((0, 1, 2), (1, 2, 3), (2, 3, 4))
    >>> two_step = stacks((2, 3, 4), (3, 4, 5), (3, 4, 5))  # the last row: batch end
    >>> holds_frame_stacks(obs, two_step), holds_frame_stacks(obs, stacks(*[(7, 7, 7)] * 3))
    (True, False)
    """
    if not (obs.dtype == np.uint8 and obs.ndim == 4 and obs.shape[1] > 1
            and new_obs.shape == obs.shape and new_obs.dtype == obs.dtype):
        return False
    k, shifted = obs.shape[1], np.zeros(len(obs), bool)
    for s in range(1, k):
        shifted |= _same_rows(new_obs[:, :k - s], obs[:, s:])
    return bool(shifted.all())


def _same_rows(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """Per row ``i``, whether ``a[i]`` equals ``b[i]`` (also for no rows).

    >>> _same_rows(np.zeros((2, 3)), np.array([[0, 0, 0], [0, 1, 0]])).tolist()
    [True, False]
    >>> _same_rows(np.zeros((0, 3)), np.zeros((0, 3))).shape
    (0,)
    """
    return np.all(a == b, axis=tuple(range(1, a.ndim)))


class FrameStackColumns:
    """The ``obs`` and ``new_obs`` columns of a ring of ``capacity`` slots; see the
    module docstring. ``write(slots, row_ids, obs, new_obs)`` stores rows written in
    that order; ``read(slots)`` rebuilds ``(obs, new_obs)``.

    >>> store = FrameStackColumns(8, (3, 1, 1))
    >>> frames = np.arange(10, dtype=np.uint8)
    >>> obs = np.stack([frames[t:t + 3] for t in range(6)])[:, :, None, None]
    >>> new = np.stack([frames[t + 1:t + 4] for t in range(6)])[:, :, None, None]
    >>> store.write(np.arange(6), np.arange(6), obs, new)
    >>> o, n = store.read(np.array([5, 0]))
    >>> o[:, :, 0, 0].tolist(), n[:, :, 0, 0].tolist(), store.num_anchors
    ([[5, 6, 7], [0, 1, 2]], [[6, 7, 8], [1, 2, 3]], 2)
    """

    def __init__(self, capacity: int, shape: tuple):
        self.capacity, self.stack = capacity, shape[0]
        frame = shape[1:]
        self.frame = np.zeros((capacity, *frame), np.uint8)
        #: Earlier frames of a row's stack that the slots before it hold (0 .. K-1).
        self.depth = np.zeros(capacity, np.int64)
        #: Slots on to the row whose next stack is this row's ``new_obs`` (0: its own).
        self.ahead = np.zeros(capacity, np.int8)
        self.row_ids = np.full(capacity, -1, np.int64)
        self.anchors: dict[int, np.ndarray] = {}       # slot -> whole obs
        self.next_anchors: dict[int, np.ndarray] = {}  # slot -> whole new_obs
        #: Next frames that the next slot does not hold: slot -> frame.
        self.next_frames: dict[int, np.ndarray] = {}

    @property
    def num_anchors(self) -> int:
        return len(self.anchors) + len(self.next_anchors)

    def nbytes(self) -> int:
        """Bytes held: the frame ring, the per-slot bookkeeping, the anchors and the
        next frames kept beside the ring."""
        kept = (*self.anchors.values(), *self.next_anchors.values(), *self.next_frames.values())
        return int(self.frame.nbytes + self.depth.nbytes + self.ahead.nbytes
                   + self.row_ids.nbytes + sum(a.nbytes for a in kept))

    def _stacks(self, slots: np.ndarray) -> np.ndarray:
        k = self.stack
        back = (slots[:, None] - np.arange(k - 1, -1, -1)[None, :]) % self.capacity
        out = self.frame[back]
        for i, slot in enumerate(slots.tolist()):
            anchor = self.anchors.get(slot)
            if anchor is not None:
                out[i] = anchor
        return out

    def read(self, slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """``(obs, new_obs)`` of ``slots``, ``(n, K, H, W)`` each."""
        slots = np.asarray(slots, np.int64)
        obs = self._stacks(slots)
        ahead = self.ahead[slots]
        source = (slots + ahead) % self.capacity  # whose next stack is new_obs
        source_obs, on = obs, np.flatnonzero(ahead)
        if len(on):
            source_obs = obs.copy()
            source_obs[on] = self._stacks(source[on])
        following = self.frame[(source + 1) % self.capacity]
        new_obs = np.concatenate([source_obs[:, 1:], following[:, None]], axis=1)
        for i, (slot, src) in enumerate(zip(slots.tolist(), source.tolist())):
            frame = self.next_frames.get(src)
            if frame is not None:
                new_obs[i, -1] = frame
            anchor = self.next_anchors.get(slot)
            if anchor is not None:
                new_obs[i] = anchor
        return obs, new_obs

    def _anchor_dependents(self, slots: np.ndarray) -> None:
        """Make anchors of the surviving rows that rebuild from ``slots`` (contiguous
        ring slots holding the oldest rows): the up to ``K - 1`` rows after them."""
        lost = self.row_ids[slots]
        if len(slots) >= self.capacity or not (lost >= 0).any():
            return
        newest_lost = int(lost.max())
        for step in range(1, self.stack):
            slot = (int(slots[-1]) + step) % self.capacity
            rid = int(self.row_ids[slot])
            if rid > newest_lost and rid - self.depth[slot] <= newest_lost \
                    and slot not in self.anchors:
                self.anchors[slot] = self._stacks(np.array([slot]))[0]
                self.depth[slot] = 0

    def write(self, slots: np.ndarray, row_ids: np.ndarray, obs: np.ndarray,
              new_obs: np.ndarray) -> None:
        """Store rows ``row_ids`` (consecutive, in order) at ``slots``."""
        slots = np.asarray(slots, np.int64)
        n = len(slots)
        self._anchor_dependents(slots)
        for slot in slots.tolist():
            self.anchors.pop(slot, None)
            self.next_anchors.pop(slot, None)
            self.next_frames.pop(slot, None)
        # the row each new row follows: the previous new row, or what the ring holds
        prev_slot = (int(slots[0]) - 1) % self.capacity
        first_prev = None
        if self.row_ids[prev_slot] == row_ids[0] - 1 and row_ids[0] > 0:
            first_prev = self._stacks(np.array([prev_slot]))[0]
            # the ring's newest row finds its next frame in the first new row's slot
            waiting = self.next_frames.get(prev_slot)
            if waiting is not None and np.array_equal(waiting, obs[0, -1]):
                del self.next_frames[prev_slot]
        follows = np.zeros(n, bool)
        follows[1:] = _same_rows(obs[1:, :-1], obs[:-1, 1:])
        if first_prev is not None:
            follows[0] = bool(np.array_equal(obs[0, :-1], first_prev[1:]))
        depth = np.zeros(n, np.int64)
        last = int(self.depth[prev_slot]) if first_prev is not None else -1
        deepest = min(self.stack, self.capacity) - 1  # a ring smaller than a stack anchors all
        for i in range(n):
            last = min(deepest, last + 1) if follows[i] else 0
            depth[i] = last
        # never from slots that this write's later rows overwrite (it nearly fills the ring)
        depth = np.minimum(depth, np.arange(n) + self.capacity - n)
        # next frames: the next row's own frame where it continues the episode, else
        # the last frame of the row's own new_obs (the end of an episode or batch)
        held = np.zeros(n, bool)
        held[:-1] = follows[1:]
        next_frame = np.where(held[:, None, None], np.roll(obs[:, -1], -1, axis=0),
                              new_obs[:, -1])
        next_stack = np.concatenate([obs[:, 1:], next_frame[:, None]], axis=1)
        # new_obs: the next stack of the row itself or of one up to MAX_AHEAD slots on
        # along an unbroken episode (n-step rows)
        ahead = np.full(n, -1, np.int64)
        unbroken = np.ones(n, bool)
        for a in range(min(n, MAX_AHEAD)):
            if a:
                unbroken[:n - a] &= held[a - 1:n - 1]
                unbroken[n - a:] = False
            todo = np.flatnonzero((ahead < 0) & unbroken)
            if not len(todo):
                break
            found = todo[_same_rows(next_stack[todo + a], new_obs[todo])]
            ahead[found] = a
        used = np.zeros(n, bool)
        used[(np.arange(n) + ahead)[ahead >= 0]] = True
        self.frame[slots] = obs[:, -1]
        self.depth[slots] = depth
        self.ahead[slots] = np.maximum(ahead, 0)
        self.row_ids[slots] = row_ids
        for i in np.flatnonzero(depth < self.stack - 1).tolist():
            self.anchors[int(slots[i])] = obs[i].copy()
        for i in np.flatnonzero(ahead < 0).tolist():
            self.next_anchors[int(slots[i])] = new_obs[i].copy()
        for i in np.flatnonzero(used & ~held).tolist():
            self.next_frames[int(slots[i])] = next_frame[i].copy()

    def get_state(self, n: int) -> dict[str, Any]:
        """The first ``n`` slots' contents as arrays (for checkpoints)."""
        state = {"stack": self.stack, "frame": self.frame[:n].copy(),
                 "depth": self.depth[:n].copy(), "ahead": self.ahead[:n].copy(),
                 "row_ids": self.row_ids[:n].copy()}
        for name, kept in (("anchor", self.anchors), ("next_anchor", self.next_anchors),
                           ("next_frame", self.next_frames)):
            keys = sorted(s for s in kept if s < n)
            state[f"{name}_slots"] = np.asarray(keys, np.int64)
            state[f"{name}s"] = np.stack([kept[s] for s in keys]) if keys else None
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        n = len(state["depth"])
        self.frame[:n], self.depth[:n] = state["frame"], state["depth"]
        self.row_ids[:n] = state["row_ids"]
        self.ahead[:n] = state.get("ahead", 0)   # 0 in checkpoints from before n-step rows

        def kept(name: str) -> dict[int, np.ndarray]:
            values = state[f"{name}s"]
            return {int(s): a for s, a in zip(state[f"{name}_slots"],
                                              values if values is not None else [])}

        self.anchors, self.next_anchors = kept("anchor"), kept("next_anchor")
        if "next_frame" in state:   # a checkpoint from before one frame per row
            following = (np.arange(n) + 1) % self.capacity
            held = (self.row_ids[following] == self.row_ids[:n] + 1) & _same_rows(
                state["next_frame"], self.frame[following])
            self.next_frames = {s: state["next_frame"][s].copy()
                                for s in np.flatnonzero(~held).tolist()}
        else:
            self.next_frames = kept("next_frame")


#: Bytes a stored row takes besides its observations (actions, rewards, flags, ids,
#: Q-values, priorities): a generous bound for the memory check.
OTHER_COLUMNS_BYTES = 256


def row_bytes(observation_space, run_length: int | None = None, *,
              frame_stacks: bool = False) -> int:
    """The bytes a replay row of ``observation_space`` observations takes, plus
    :data:`OTHER_COLUMNS_BYTES`. Where the env gives frame stacks (``frame_stacks``,
    as :func:`flowrl.workers.rollout_worker.stacks_frames` says: the sampler then
    drops ``new_obs`` and the buffer keeps one frame a row, see the module
    docstring), a uint8 ``(K, H, W)`` row takes one frame and, where rows arrive in
    runs of ``run_length`` that do not continue each other (several envs' rollout
    fragments in turn), each run's first ``K - 1`` whole stacks and one next frame
    spread over its rows. Other observations (channel images such as MinAtar's
    among them) take ``obs`` and ``new_obs`` whole.

    >>> import gymnasium as gym
    >>> pong = gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)
    >>> row_bytes(pong, frame_stacks=True), row_bytes(pong, run_length=20, frame_stacks=True)
    (7312, 11899)
    >>> row_bytes(gym.spaces.Box(0, 255, (4, 10, 10), np.uint8))  # MinAtar Breakout
    1056
    """
    shape = tuple(getattr(observation_space, "shape", None) or (1,))
    dtype = np.dtype(getattr(observation_space, "dtype", None) or np.float32)
    if frame_stacks and dtype == np.uint8 and len(shape) == 3 and shape[0] > 1:
        frame = shape[1] * shape[2]
        per_run = ((shape[0] - 1) * shape[0] + 1) * frame
        return frame + (math.ceil(per_run / run_length) if run_length else 0) \
            + OTHER_COLUMNS_BYTES
    return 2 * int(np.prod(shape)) * dtype.itemsize + OTHER_COLUMNS_BYTES


def available_memory() -> int:
    """Bytes of memory available to new allocations (``MemAvailable`` of
    ``/proc/meminfo``; the free physical pages where there is none)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemAvailable:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_AVPHYS_PAGES") * os.sysconf("SC_PAGE_SIZE")


def check_replay_memory(where: str, capacity: int, observation_spaces: list,
                        available: int | None = None, run_length: int | None = None, *,
                        frame_stacks: bool = False) -> int:
    """The bytes ``capacity`` rows need in each of the buffers whose observations are
    ``observation_spaces`` (one per buffer: one per trained policy; :func:`row_bytes`
    with ``run_length`` and ``frame_stacks``); a ConfigError naming ``where`` when that
    exceeds the memory available.

    >>> import gymnasium as gym
    >>> check_replay_memory("DQNConfig.buffer_size", 10**6,
    ...                     [gym.spaces.Box(0, 255, (4, 84, 84), np.uint8)], available=4 * 10**9,
    ...                     frame_stacks=True)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: DQNConfig.buffer_size=1000000: the replay buffer needs about 6.8 GiB (7,312 bytes a row), more than the 3.7 GiB of memory available; use buffer_size <= 547,045
    """
    per_row = sum(row_bytes(space, run_length, frame_stacks=frame_stacks)
                  for space in observation_spaces)
    need = per_row * capacity
    available = available_memory() if available is None else available
    if need > available:
        raise ConfigError(f"{where}={capacity}: the replay buffer needs about {_human(need)} "
                          f"({per_row:,} bytes a row), more than the {_human(available)} of "
                          f"memory available; use buffer_size <= {available // per_row:,}")
    return need


def _human(n: int) -> str:
    """``n`` bytes as GiB (or MiB below one GiB).

    >>> _human(3 * 2**30), _human(5 * 2**20)
    ('3.0 GiB', '5 MiB')
    """
    return f"{n / 2**30:.1f} GiB" if n >= 2**30 else f"{n / 2**20:.0f} MiB"


__all__ = ["FrameStackColumns", "is_frame_stack", "holds_frame_stacks", "row_bytes", "check_replay_memory",
           "available_memory"]
