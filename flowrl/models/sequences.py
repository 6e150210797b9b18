"""Cutting sample batches into padded sequences for recurrent models (numpy, no torch).

A batch holds trajectories back to back, each in time order (as rollout workers
sample them: env-major fragments, concatenated). :func:`cut_sequences` starts a
new sequence at the first row, wherever the next row does not continue the
previous one (another episode, or a gap in ``t``: another fragment or worker),
and after every ``max_seq_len`` rows of one run. Each sequence then starts from
the ``state_in_*`` recorded at its first row (the state the worker acted with).

:func:`pad_sequences` lays rows out as ``(B, T, ...)``, ``B`` sequences zero-padded
to ``T`` (the longest sequence's length); :func:`sequence_mask` marks the real
steps, and every loss and statistic a policy computes on such a batch averages
over real steps only.
"""

from __future__ import annotations

import numpy as np

#: Per-sequence columns of a padded batch (everything else is per step).
SEQ_LENS = "seq_lens"
#: The ``(B, T)`` bool column marking real steps (False on padding).
SEQ_MASK = "seq_mask"
#: Per step of a flattened padded batch: ``1 / real steps`` on real steps, 0 on
#: padding (the weights of a masked mean; set by ``TorchPolicy._rows``).
SEQ_WEIGHTS = "seq_weights"
#: Per sequence: the behaviour policy's ``V(s)`` after its last real step (0 when
#: that step ended the episode); V-trace bootstraps sequences from it.
SEQ_BOOTSTRAP_VALUE = "seq_bootstrap_value"


def continues(eps_id: np.ndarray, t: np.ndarray) -> np.ndarray:
    """``(N-1,)`` bool: row ``i + 1`` is the step after row ``i`` of the same episode.

    >>> continues(np.array([0, 0, 1, 1]), np.array([0, 1, 0, 2])).tolist()
    [True, False, False]
    """
    return (eps_id[1:] == eps_id[:-1]) & (t[1:] == t[:-1] + 1)


def cut_sequences(eps_id: np.ndarray, t: np.ndarray,
                  max_seq_len: int) -> tuple[np.ndarray, np.ndarray]:
    """``(starts, seq_lens)``: where each sequence starts and how many rows it has
    (see the module docstring).

    >>> starts, lens = cut_sequences(np.array([5, 5, 5, 5, 5, 7, 7]),
    ...                              np.array([0, 1, 2, 3, 4, 0, 1]), max_seq_len=2)
    >>> starts.tolist(), lens.tolist()
    ([0, 2, 4, 5], [2, 2, 1, 2])
    """
    n = len(eps_id)
    if n == 0:
        return np.zeros(0, np.int64), np.zeros(0, np.int64)
    run_start = np.flatnonzero(np.concatenate([[True], ~continues(eps_id, t)]))
    run_len = np.diff(np.append(run_start, n))
    pieces = -(-run_len // max_seq_len)  # ceil: sequences per run
    first = np.repeat(run_start, pieces)
    k = np.arange(len(first)) - np.repeat(np.cumsum(pieces) - pieces, pieces)
    starts = first + k * max_seq_len
    lens = np.minimum(max_seq_len, np.repeat(run_start + run_len, pieces) - starts)
    return starts.astype(np.int64), lens.astype(np.int64)


def sequence_mask(seq_lens: np.ndarray, steps: int) -> np.ndarray:
    """``(B, steps)`` bool, True on each sequence's real steps.

    >>> sequence_mask(np.array([2, 1]), 3).astype(int).tolist()
    [[1, 1, 0], [1, 0, 0]]
    """
    return np.arange(steps)[None, :] < np.asarray(seq_lens)[:, None]


def pad_sequences(column: np.ndarray, starts: np.ndarray, seq_lens: np.ndarray,
                  steps: int) -> np.ndarray:
    """``column``'s rows as ``(B, steps, ...)``: sequence ``b`` is rows
    ``starts[b] .. starts[b] + seq_lens[b] - 1`` then zeros.

    >>> pad_sequences(np.arange(5) + 1, np.array([0, 3]), np.array([3, 2]), 3).tolist()
    [[1, 2, 3], [4, 5, 0]]
    """
    mask = sequence_mask(seq_lens, steps)
    index = (starts[:, None] + np.arange(steps)[None, :])[mask]
    out = np.zeros((len(starts), steps, *column.shape[1:]), dtype=column.dtype)
    out[mask] = column[index]
    return out


def next_values(eps_id: np.ndarray, t: np.ndarray, terminateds: np.ndarray,
                truncateds: np.ndarray, vf_preds: np.ndarray,
                bootstrap_value: np.ndarray) -> np.ndarray:
    """The behaviour policy's ``V(s_{t+1})`` per row: the next row's ``vf_preds``
    where it continues the episode, 0 after a terminal step, else (a time limit or
    the end of a fragment) the row's ``bootstrap_value``.

    >>> next_values(np.array([1, 1, 1]), np.array([0, 1, 2]), np.array([False, False, False]),
    ...             np.array([False, False, False]), np.array([1.0, 2.0, 3.0]),
    ...             np.array([0.0, 0.0, 9.0])).tolist()
    [2.0, 3.0, 9.0]
    """
    out = np.where(terminateds, 0.0, bootstrap_value).astype(np.float32)
    go_on = continues(eps_id, t) & ~terminateds[:-1] & ~truncateds[:-1]
    out[:-1][go_on] = vf_preds[1:][go_on]
    return out


__all__ = ["SEQ_LENS", "SEQ_MASK", "SEQ_WEIGHTS", "SEQ_BOOTSTRAP_VALUE", "continues", "cut_sequences",
           "sequence_mask", "pad_sequences", "next_values"]
