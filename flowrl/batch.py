"""Experience batches: :class:`SampleBatch` and :class:`MultiAgentBatch`.

A ``SampleBatch`` is a mapping from column name to a numpy array whose first axis
is the row (one timestep of one agent). Every column has the same number of rows,
checked on construction and on assignment, and every column is C-contiguous so
Ray's object store moves it without copies. ``len(batch)`` and ``batch.count`` are
the number of rows; iterating a batch yields its column names, like a dict.

Operations that reorder or combine rows (``concat_samples``, ``shuffle``,
``copy``) return new batches and never modify their inputs. Row slices
(``batch[a:b]``, ``batch.slice(a, b)``, ``minibatches``, ``split_by_episode``) are
views that share memory with the original, as numpy slices do.

>>> b = SampleBatch({"obs": [[0.0], [1.0], [2.0]], "rewards": [1.0, 0.0, 1.0]})
>>> b.count, list(b)
(3, ['obs', 'rewards'])
>>> b[1:]["rewards"].tolist()
[0.0, 1.0]
>>> concat_samples([b, b]).count
6
"""

from __future__ import annotations

from typing import Iterable, Iterator, Mapping, Union

import numpy as np

from flowrl.errors import ConfigError

DEFAULT_POLICY_ID = "default_policy"

Seed = Union[int, np.random.Generator, None]


def _rng(seed) -> np.random.Generator:
    if isinstance(seed, np.random.Generator):
        return seed
    return np.random.default_rng(seed)


def _as_column(name: str, value) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim == 0:
        raise ConfigError(
            f"SampleBatch column {name!r} is a scalar ({array!r}); every column needs "
            "one entry per row, so pass a sequence or an array with a leading row axis")
    return np.ascontiguousarray(array)


class SampleBatch:
    """Equal-length numpy columns, one row per agent timestep.

    ``columns`` is a mapping (or keyword arguments) of column name to array-like;
    each is converted with ``np.ascontiguousarray``. Columns of different lengths
    raise :class:`~flowrl.errors.ConfigError` naming the offending column.

    The standard column names are class attributes (``SampleBatch.OBS == "obs"``).

    >>> b = SampleBatch(obs=np.zeros((4, 2)), actions=[0, 1, 1, 0])
    >>> b.count, b["actions"].dtype.kind, b.env_steps(), b.agent_steps()
    (4, 'i', 4, 4)
    >>> SampleBatch(obs=np.zeros((4, 2)), actions=[0, 1])
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: SampleBatch column 'actions' has 2 rows but column 'obs' has 4; every column must have one entry per row
    """

    OBS = "obs"
    ACTIONS = "actions"
    REWARDS = "rewards"
    TERMINATEDS = "terminateds"
    TRUNCATEDS = "truncateds"
    EPS_ID = "eps_id"
    AGENT_INDEX = "agent_index"
    T = "t"
    NEXT_OBS = "new_obs"
    # Frame-stacked uint8 images: the newest frame of new_obs, (H, W) per row, in
    # place of new_obs (which is obs shifted by one frame plus this frame).
    NEXT_FRAME = "new_frame"
    ACTION_LOGP = "action_logp"
    ACTION_DIST_INPUTS = "action_dist_inputs"
    VF_PREDS = "vf_preds"
    ADVANTAGES = "advantages"
    VALUE_TARGETS = "value_targets"
    # V(new_obs) on rows after which the episode goes on outside the batch (a
    # time-limit truncation, or a fragment's last step), 0 elsewhere.
    BOOTSTRAP_VALUE = "bootstrap_value"
    # Recurrent policies: the action and reward of the step before (0 at an
    # episode's start); state_in_<i>/state_out_<i> hold the model state.
    PREV_ACTIONS = "prev_actions"
    PREV_REWARDS = "prev_rewards"
    # The version of the weights that acted (int per row): how many learner
    # updates the acting policy's weights had seen (RolloutWorker.policy_versions).
    POLICY_VERSION = "policy_version"

    __slots__ = ("_columns", "_count")

    def __init__(self, columns: Mapping[str, object] | None = None, **kwargs: object):
        self._columns: dict[str, np.ndarray] = {}
        self._count = 0
        for name, value in {**(columns or {}), **kwargs}.items():
            self[name] = value

    # -- mapping interface ---------------------------------------------------
    def __getitem__(self, key):
        if isinstance(key, slice):
            start, stop, step = key.indices(self._count)
            if step != 1:
                raise ConfigError(
                    f"SampleBatch[{key}]: only contiguous row slices (step 1) are "
                    "supported; use shuffle() or index the columns directly")
            return self.slice(start, stop)
        try:
            return self._columns[key]
        except KeyError:
            if key == "new_obs":
                raise KeyError(
                    "'new_obs': on-policy batches leave it out when the policy trains "
                    "without it (trains_on_new_obs = False: PG, A2C, PPO, APPO, IMPALA "
                    "bootstrap from bootstrap_value); an op that reads it needs a policy "
                    "class with trains_on_new_obs = True") from None
            raise

    def __setitem__(self, name: str, value) -> None:
        array = _as_column(name, value)
        if self._columns and set(self._columns) != {name}:
            if len(array) != self._count:
                other = next(k for k in self._columns if k != name)
                raise ConfigError(
                    f"SampleBatch column {name!r} has {len(array)} rows but column "
                    f"{other!r} has {self._count}; every column must have one entry "
                    "per row")
        self._columns[name] = array
        self._count = len(array)

    def __contains__(self, name: object) -> bool:
        return name in self._columns

    def __iter__(self) -> Iterator[str]:
        return iter(self._columns)

    def __len__(self) -> int:
        return self._count

    def keys(self):
        return self._columns.keys()

    def values(self):
        return self._columns.values()

    def items(self):
        return self._columns.items()

    def get(self, name: str, default=None):
        return self._columns.get(name, default)

    def __repr__(self) -> str:
        cols = ", ".join(f"{k}: {v.dtype}{list(v.shape)}" for k, v in self.items())
        return f"SampleBatch(count={self._count}, {{{cols}}})"

    # -- size ------------------------------------------------------------------
    @property
    def count(self) -> int:
        """Number of rows."""
        return self._count

    def env_steps(self) -> int:
        """Environment steps in this batch; a single-agent batch has one per row."""
        return self._count

    def agent_steps(self) -> int:
        """Agent steps in this batch; a single-agent batch has one per row."""
        return self._count

    # -- new batches -----------------------------------------------------------
    def copy(self, shallow: bool = False) -> "SampleBatch":
        """A new batch; with ``shallow=True`` the column arrays are shared.

        >>> b = SampleBatch(rewards=[1.0, 2.0]); c = b.copy(); c["rewards"][0] = 9
        >>> b["rewards"].tolist()
        [1.0, 2.0]
        """
        out = SampleBatch()
        out._columns = {k: (v if shallow else v.copy()) for k, v in self.items()}
        out._count = self._count
        return out

    def with_columns(self, **columns: object) -> "SampleBatch":
        """A new batch sharing this one's arrays, plus (or replacing) ``columns``.

        >>> b = SampleBatch(rewards=[1.0, 2.0]).with_columns(advantages=[0.5, 0.5])
        >>> sorted(b)
        ['advantages', 'rewards']
        """
        out = self.copy(shallow=True)
        for name, value in columns.items():
            out[name] = value
        return out

    def slice(self, start: int, end: int) -> "SampleBatch":
        """Rows ``start:end`` as views of this batch's arrays.

        >>> SampleBatch(t=[0, 1, 2, 3]).slice(1, 3)["t"].tolist()
        [1, 2]
        """
        out = SampleBatch()
        out._columns = {k: v[start:end] for k, v in self.items()}
        out._count = len(range(self._count)[start:end])
        return out

    def select(self, keep) -> "SampleBatch":
        """The rows where the boolean array ``keep`` is True (copies).

        >>> SampleBatch(t=[0, 1, 2, 3]).select(np.array([True, False, True, False]))["t"].tolist()
        [0, 2]
        """
        keep = np.asarray(keep, dtype=bool)
        if keep.shape != (self._count,):
            raise ConfigError(f"SampleBatch.select: keep has shape {keep.shape}, the batch "
                              f"{self._count} rows; pass one bool per row")
        out = SampleBatch()
        out._columns = {k: v[keep] for k, v in self.items()}
        out._count = int(keep.sum())
        return out

    def shuffle(self, seed: Seed = None) -> "SampleBatch":
        """A new batch with the rows permuted; ``seed`` is an int or a numpy Generator.

        >>> SampleBatch(t=np.arange(5)).shuffle(seed=0)["t"].tolist()
        [2, 4, 3, 0, 1]
        """
        perm = _rng(seed).permutation(self._count)
        out = SampleBatch()
        out._columns = {k: v[perm] for k, v in self.items()}
        out._count = self._count
        return out

    def minibatches(self, size: int, *, seed: Seed = None, shuffle: bool = True,
                    drop_last: bool = False) -> Iterator["SampleBatch"]:
        """Consecutive minibatches of ``size`` rows, over a shuffled copy by default.

        Every row appears in exactly one minibatch; the last one holds the
        remainder unless ``drop_last``.

        >>> b = SampleBatch(t=np.arange(5))
        >>> [m["t"].tolist() for m in b.minibatches(2, shuffle=False)]
        [[0, 1], [2, 3], [4]]
        >>> sorted(np.concatenate([m["t"] for m in b.minibatches(2, seed=1)]).tolist())
        [0, 1, 2, 3, 4]
        """
        if not isinstance(size, (int, np.integer)) or size < 1:
            raise ConfigError(
                f"SampleBatch.minibatches(size={size!r}): size must be an int >= 1")
        source = self.shuffle(seed) if shuffle else self
        for start in range(0, self._count, size):
            if drop_last and start + size > self._count:
                return
            yield source.slice(start, start + size)

    def split_by_episode(self) -> list["SampleBatch"]:
        """Split into runs of consecutive rows that belong to one episode.

        Uses the ``eps_id`` column (a new run wherever it changes); without it,
        an episode ends after each row whose ``terminateds`` or ``truncateds`` is
        set. ``concat_samples(b.split_by_episode())`` is ``b`` again.

        >>> b = SampleBatch(eps_id=[7, 7, 3, 3, 3], t=[0, 1, 0, 1, 2])
        >>> [s["t"].tolist() for s in b.split_by_episode()]
        [[0, 1], [0, 1, 2]]
        """
        if self._count == 0:
            return []
        if self.EPS_ID in self:
            eps = self[self.EPS_ID]
            cuts = np.flatnonzero(eps[1:] != eps[:-1]) + 1
        elif self.TERMINATEDS in self or self.TRUNCATEDS in self:
            done = np.zeros(self._count, dtype=bool)
            for name in (self.TERMINATEDS, self.TRUNCATEDS):
                if name in self:
                    done |= self[name].astype(bool)
            cuts = np.flatnonzero(done[:-1]) + 1
        else:
            raise ConfigError(
                "SampleBatch.split_by_episode() needs an 'eps_id' column, or "
                "'terminateds'/'truncateds' columns to find episode ends; this batch "
                f"has {sorted(self)}")
        bounds = [0, *cuts.tolist(), self._count]
        return [self.slice(a, b) for a, b in zip(bounds[:-1], bounds[1:])]

    @staticmethod
    def concat_samples(batches: Iterable["SampleBatch"]) -> "SampleBatch":
        """Rows of all ``batches`` in order, in a new batch (columns must match).

        >>> a = SampleBatch(t=[0, 1]); b = SampleBatch(t=[2])
        >>> SampleBatch.concat_samples([a, b])["t"].tolist()
        [0, 1, 2]
        """
        batches = list(batches)
        for i, b in enumerate(batches):
            if not isinstance(b, SampleBatch):
                raise ConfigError(
                    f"SampleBatch.concat_samples: item {i} is a {type(b).__name__}, "
                    "not a SampleBatch; use flowrl.batch.concat_samples to mix in "
                    "MultiAgentBatches")
        batches = [b for b in batches if len(b.keys()) > 0]  # column-less: nothing to add
        if not batches:
            return SampleBatch()
        names = list(batches[0].keys())
        for i, b in enumerate(batches):
            if set(b.keys()) != set(names):
                diff = sorted(set(b.keys()) ^ set(names))
                raise ConfigError(
                    f"SampleBatch.concat_samples: batch {i} has columns {sorted(b)} "
                    f"but batch 0 has {sorted(names)} (differing: {diff}); give every "
                    "batch the same columns")
        out = SampleBatch()
        out._columns = {n: np.concatenate([b[n] for b in batches]) for n in names}
        out._count = sum(b.count for b in batches)
        return out

    def as_multi_agent(self, policy_id: str = DEFAULT_POLICY_ID) -> "MultiAgentBatch":
        """This batch as a :class:`MultiAgentBatch` of one policy.

        >>> SampleBatch(t=[0, 1]).as_multi_agent().policy_batches["default_policy"].count
        2
        """
        return MultiAgentBatch({policy_id: self}, self._count)


class MultiAgentBatch:
    """Per-policy :class:`SampleBatch` es plus the number of env steps they cover.

    In a multi-agent env one env step yields one row per acting agent, so
    ``agent_steps()`` (rows over all policies) can exceed ``env_steps()``.
    ``count`` is ``env_steps()``.

    >>> mb = MultiAgentBatch({"p0": SampleBatch(t=[0, 1]), "p1": SampleBatch(t=[0, 1, 2])}, 2)
    >>> mb.count, mb.env_steps(), mb.agent_steps()
    (2, 2, 5)
    """

    __slots__ = ("policy_batches", "_env_steps")

    def __init__(self, policy_batches: Mapping[str, SampleBatch], env_steps: int):
        if not isinstance(env_steps, (int, np.integer)) or env_steps < 0:
            raise ConfigError(
                f"MultiAgentBatch(env_steps={env_steps!r}): env_steps must be an int >= 0")
        for pid, b in policy_batches.items():
            if not isinstance(b, SampleBatch):
                raise ConfigError(
                    f"MultiAgentBatch: policy {pid!r} maps to a {type(b).__name__}; "
                    "each policy batch must be a SampleBatch")
        self.policy_batches: dict[str, SampleBatch] = dict(policy_batches)
        self._env_steps = int(env_steps)

    @property
    def count(self) -> int:
        """Environment steps (same as :meth:`env_steps`)."""
        return self._env_steps

    def env_steps(self) -> int:
        """Environment steps covered by this batch."""
        return self._env_steps

    def agent_steps(self) -> int:
        """Rows over all policy batches."""
        return sum(b.count for b in self.policy_batches.values())

    def copy(self) -> "MultiAgentBatch":
        """A deep copy."""
        return MultiAgentBatch({k: b.copy() for k, b in self.policy_batches.items()},
                               self._env_steps)

    def __repr__(self) -> str:
        return (f"MultiAgentBatch(env_steps={self._env_steps}, "
                f"policy_batches={self.policy_batches!r})")

    @staticmethod
    def concat_samples(batches: Iterable["MultiAgentBatch"]) -> "MultiAgentBatch":
        """Concatenate per policy; env steps add up.

        >>> a = MultiAgentBatch({"p": SampleBatch(t=[0])}, 1)
        >>> b = MultiAgentBatch({"p": SampleBatch(t=[1]), "q": SampleBatch(t=[0])}, 1)
        >>> c = MultiAgentBatch.concat_samples([a, b])
        >>> c.env_steps(), c.policy_batches["p"]["t"].tolist(), sorted(c.policy_batches)
        (2, [0, 1], ['p', 'q'])
        """
        per_policy: dict[str, list[SampleBatch]] = {}
        env_steps = 0
        for i, b in enumerate(batches):
            if not isinstance(b, MultiAgentBatch):
                raise ConfigError(
                    f"MultiAgentBatch.concat_samples: item {i} is a "
                    f"{type(b).__name__}; use flowrl.batch.concat_samples for mixed input")
            env_steps += b.env_steps()
            for pid, pb in b.policy_batches.items():
                per_policy.setdefault(pid, []).append(pb)
        return MultiAgentBatch(
            {pid: SampleBatch.concat_samples(bs) for pid, bs in per_policy.items()},
            env_steps)


def concat_samples(batches: Iterable[SampleBatch | MultiAgentBatch]):
    """Concatenate batches in order.

    All :class:`SampleBatch` es give a SampleBatch. If any input is a
    :class:`MultiAgentBatch`, plain SampleBatches are treated as the
    ``"default_policy"`` and the result is a MultiAgentBatch.

    >>> concat_samples([SampleBatch(t=[0]), SampleBatch(t=[1, 2])])["t"].tolist()
    [0, 1, 2]
    >>> mixed = concat_samples([SampleBatch(t=[0]), SampleBatch(t=[1]).as_multi_agent()])
    >>> type(mixed).__name__, mixed.env_steps()
    ('MultiAgentBatch', 2)
    """
    batches = list(batches)
    if any(isinstance(b, MultiAgentBatch) for b in batches):
        return MultiAgentBatch.concat_samples(
            b if isinstance(b, MultiAgentBatch) else b.as_multi_agent() for b in batches)
    return SampleBatch.concat_samples(batches)


__all__ = ["SampleBatch", "MultiAgentBatch", "concat_samples", "DEFAULT_POLICY_ID"]
