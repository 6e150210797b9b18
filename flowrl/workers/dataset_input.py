"""What a rollout worker samples when its ``input`` is a dataset: recorded batches.

:class:`DatasetInput` stands where the env sampler stands: each ``sample()`` of a
reading worker returns the next recorded batches of its shard
(:class:`~flowrl.offline.reader.DatasetReader`), concatenated until they hold at
least ``rollout_fragment_length * num_envs_per_worker`` env steps (RLlib 1.x's
rule), as a :class:`~flowrl.batch.SampleBatch` for a single-agent env and a
:class:`~flowrl.batch.MultiAgentBatch` for a multi-agent one, so a plan built on
``ParallelRollouts`` trains from data unchanged. With a mixed ``input`` (RLlib 1.x's
``{"sampler": p, PATH: q}``) each ``sample()`` draws its source with those
probabilities (seeded per worker): ``"sampler"`` steps the worker's envs.

Reading: observations (``obs``, ``new_obs``) are cast to the observation space's
dtype and actions to the action space's, so a JSON file that stored images as lists
of ints gives uint8 images again. ``postprocess_inputs`` (RLlib 1.x's setting)
recomputes each batch's postprocessing with the worker's current policy
(:func:`postprocess_offline`: values, advantages, value targets), trajectory by
trajectory.

Checks before training (:func:`check_dataset`, run on the driver when an
algorithm is built): every file's first batch must have the columns the algorithm
needs, spaces that match the env's, and policy ids the config has; each failure is a
ConfigError naming the file.

State: the readers' batch iterators (one per dataset source), the random source
choosing among mixed sources, and the rows read so far (``rows_read``).
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Iterator

import gymnasium as gym
import numpy as np

from flowrl.batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch, concat_samples
from flowrl.errors import ConfigError
from flowrl.offline.reader import DatasetReader, distinct_steps
from flowrl.offline.settings import SAMPLER, Source, dataset_format
from flowrl.workers.sampler import postprocess_trajectories

SB = SampleBatch
Batch = SampleBatch | MultiAgentBatch

#: Columns every dataset needs for an algorithm that says nothing else
#: (``Algorithm.input_columns``).
DEFAULT_INPUT_COLUMNS = (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.TERMINATEDS)


def make_reader(paths: tuple[str, ...], input_config: dict, *, where: str, seed: int | None = None,
                shard_index: int = 0, num_shards: int = 1) -> DatasetReader:
    """The :class:`DatasetReader` of ``paths`` under ``input_config`` (checked, with
    its defaults: :func:`~flowrl.offline.settings.check_input_config`)."""
    return DatasetReader(paths, format=dataset_format(paths, input_config["format"], where),
                         shuffle=input_config["shuffle"], seed=seed,
                         on_error=input_config["on_error"], shard_index=shard_index,
                         num_shards=num_shards, where=where)


def trajectory_ends(batch: SampleBatch) -> np.ndarray:
    """Row indices where each trajectory of ``batch`` ends (exclusive): a new one
    starts where ``eps_id`` or ``agent_index`` changes. Without ``eps_id`` the batch
    is one trajectory.

    >>> trajectory_ends(SampleBatch(eps_id=[3, 3, 4, 4, 4], agent_index=[0, 1, 1, 1, 1])).tolist()
    [1, 2, 5]
    """
    n = batch.count
    change = np.zeros(max(n - 1, 0), bool)
    for col in (SB.EPS_ID, SB.AGENT_INDEX):
        if col in batch:
            values = np.asarray(batch[col])
            change |= values[1:] != values[:-1]
    return np.append(np.flatnonzero(change) + 1, n).astype(np.int64)


def postprocess_offline(policy: Any, batch: SampleBatch) -> SampleBatch:
    """``batch`` postprocessed again by ``policy``, as at sampling time but with its
    current weights: per trajectory (:func:`trajectory_ends`), ``vf_preds`` become
    ``V(obs)``, truncated rows bootstrap from ``V(new_obs)``, a trajectory cut by the
    end of the batch from the value of its last ``new_obs``, then the policy's own
    postprocessing (advantages, value targets) runs. Without ``new_obs`` the recorded
    ``bootstrap_value`` is used (0 where there is none); a recurrent policy keeps the
    recorded values (it would need the recorded state to recompute them)."""
    if batch.count == 0:
        return batch
    ends = trajectory_ends(batch)
    n = batch.count
    term = np.asarray(batch[SB.TERMINATEDS], bool)
    trunc = np.asarray(batch.get(SB.TRUNCATEDS, np.zeros(n, bool)), bool)
    boot = np.asarray(batch.get(SB.BOOTSTRAP_VALUE, np.zeros(n, np.float32)), np.float32).copy()
    columns = {k: v for k, v in batch.items() if k not in (SB.ADVANTAGES, SB.VALUE_TARGETS)}
    cut = np.zeros(n, bool)
    cut[ends - 1] = True
    cut &= ~(term | trunc)
    values = callable(getattr(policy, "value", None)) and not getattr(policy, "is_recurrent",
                                                                         False)
    if values:
        columns[SB.VF_PREDS] = np.asarray(policy.value(batch[SB.OBS]), np.float32)
        if SB.NEXT_OBS in batch:
            idx = np.flatnonzero((trunc & ~term) | cut)
            if len(idx):
                boot[idx] = policy.value(batch[SB.NEXT_OBS][idx])
    columns[SB.BOOTSTRAP_VALUE] = np.where(trunc & ~term, boot, 0.0).astype(np.float32)
    last_values = np.where(cut[ends - 1], boot[ends - 1], 0.0).tolist()
    return postprocess_trajectories(policy, SampleBatch(columns), ends, last_values)


def _cast(batch: SampleBatch, spaces: tuple[gym.Space, gym.Space]) -> SampleBatch:
    obs_space, act_space = spaces
    out = {}
    for col in (SB.OBS, SB.NEXT_OBS):
        if col in batch and obs_space.dtype is not None and batch[col].dtype != obs_space.dtype:
            out[col] = batch[col].astype(obs_space.dtype)
    if SB.ACTIONS in batch and act_space.dtype is not None \
            and batch[SB.ACTIONS].dtype != act_space.dtype:
        out[SB.ACTIONS] = batch[SB.ACTIONS].astype(act_space.dtype)
    return batch.with_columns(**out) if out else batch


def as_policy_batches(batch: Batch, policy_ids: Iterable[str], multi_agent: bool, where: str
                      ) -> Batch:
    """A recorded ``batch`` in the kind the worker samples: for a single-agent worker
    (policy ``policy_ids[0]``) a SampleBatch (a multi-agent record of that one policy
    is unwrapped), for a multi-agent worker a MultiAgentBatch (a single-agent record
    is the default policy's). Records of policies the worker lacks are a ConfigError
    naming ``where`` (the file)."""
    ids = list(policy_ids)
    if not multi_agent:
        if isinstance(batch, SampleBatch):
            return batch
        if len(batch.policy_batches) == 1:
            return next(iter(batch.policy_batches.values()))
        raise ConfigError(f"{where} holds multi-agent batches of policies "
                          f"{sorted(batch.policy_batches)}, but the env is single-agent with "
                          f"policy {ids[0]!r}; read it with the multi-agent env it was recorded "
                          "from")
    if isinstance(batch, SampleBatch):
        batch = MultiAgentBatch({DEFAULT_POLICY_ID: batch}, batch.count)
    unknown = sorted(set(batch.policy_batches) - set(ids))
    if unknown:
        raise ConfigError(f"{where} holds batches of policies {unknown}, which the config does "
                          f"not have (its policies: {sorted(ids)}); add them to "
                          "multiagent.policies or read a dataset of these policies")
    return batch


def check_dataset(reader: DatasetReader, spaces: dict[str, tuple[gym.Space, gym.Space]], *,
                  multi_agent: bool, columns: Iterable[str], who: str) -> None:
    """Check every file of ``reader``'s dataset against the config before training:
    its first batch has ``columns`` (the ones algorithm ``who`` needs; ``terminateds``
    stands for RLlib's ``dones``), each policy's observations and actions fit that
    policy's ``spaces`` (``{policy_id: (observation_space, action_space)}``), and its
    policy ids are the config's. Each failure is a ConfigError naming the file."""
    for path in reader.files:
        batch = reader.first_batch(path)
        if batch is None:
            continue
        batch = as_policy_batches(batch, list(spaces), multi_agent, f"dataset file {path}")
        parts = batch.policy_batches if isinstance(batch, MultiAgentBatch) else {
            next(iter(spaces)): batch}
        for pid, rows in parts.items():
            for col in columns:
                if col not in rows:
                    raise ConfigError(
                        f"{who}: dataset file {path} has no column {col!r}, which {who} needs "
                        f"(its columns: {sorted(rows.keys())}); record it with a config whose "
                        "batches have it, or train an algorithm that does without")
            _check_spaces(rows, spaces[pid], path, who)


def _space_of_rows(column: np.ndarray) -> str:
    return f"rows of shape {column.shape[1:]} ({column.dtype})"


def _check_spaces(rows: SampleBatch, spaces: tuple[gym.Space, gym.Space], path: str,
                  who: str) -> None:
    for col, space, what in ((SB.OBS, spaces[0], "observation"),
                             (SB.ACTIONS, spaces[1], "action")):
        if col not in rows or space.shape is None:
            continue
        column = rows[col]
        fits = column.shape[1:] == space.shape and column.dtype.kind in "biuf"
        if isinstance(space, gym.spaces.Discrete) and column.dtype.kind not in "biu":
            fits = fits and bool(np.all(np.mod(column, 1) == 0))
        if not fits:
            raise ConfigError(
                f"{who}: dataset file {path} has {col} {_space_of_rows(column)}, but the env's "
                f"{what} space is {space}; read a dataset recorded from this env, or use the "
                "env it was recorded from")


class DatasetInput:
    """A reading worker's source of batches; see the module docstring.

    ``sources``: ``(source, probability)`` pairs
    (:func:`~flowrl.offline.settings.input_sources`). ``policies``: the worker's
    policy map; ``spaces`` their ``(observation_space, action_space)``.
    ``sample_env``: the worker's env sampler (for ``"sampler"`` sources).
    ``min_steps``: env steps per ``sample()``. ``shard_index``/``num_shards``: the
    worker's share of each dataset. ``seed``: the set's seed (the same on every
    worker, so shuffled shards stay disjoint; the mixed input's draws differ by shard).
    """

    def __init__(self, sources: list[tuple[Source, float]], input_config: dict, *,
                 policies: dict[str, Any], spaces: dict[str, tuple[gym.Space, gym.Space]],
                 multi_agent: bool, min_steps: int, postprocess: bool = False,
                 sample_env: Callable[[], Batch] | None = None, seed: int | None = None,
                 shard_index: int = 0, num_shards: int = 1, where: str = "input"):
        self.policies, self.spaces, self.multi_agent = policies, spaces, multi_agent
        self.min_steps, self.postprocess, self.sample_env = min_steps, postprocess, sample_env
        self.probabilities = np.asarray([p for _, p in sources], np.float64)
        self.readers: list[DatasetReader | None] = []
        self._streams: list[Iterator[Batch] | None] = []
        for source, _ in sources:
            if source == SAMPLER:
                self.readers.append(None)
                self._streams.append(None)
                continue
            reader = make_reader(source, input_config, where=where, seed=seed,
                                 shard_index=shard_index, num_shards=num_shards)
            self.readers.append(reader)
            self._streams.append(reader.batches())
        self._rng = np.random.default_rng([seed or 0, shard_index, 7])
        self.rows_read = 0

    def get_state(self) -> dict[str, Any]:
        """Where each dataset source's reader is (``(pass, pieces taken)``; None for
        the ``"sampler"`` source), the source draws' generator and ``rows_read``, for
        checkpoints: a restored worker reads on from there."""
        return {"positions": [None if r is None else list(r.position) for r in self.readers],
                "rng": self._rng.bit_generator.state, "rows_read": self.rows_read}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned (of the same sources). A
        checkpoint of another number of sources is a ConfigError."""
        positions = state["positions"]
        if len(positions) != len(self.readers):
            raise ConfigError(f"input: the checkpoint's reader positions are for "
                              f"{len(positions)} sources, this worker reads {len(self.readers)}; "
                              "restore with the input it was saved with")
        for i, (reader, position) in enumerate(zip(self.readers, positions)):
            if reader is not None and position is not None:
                self._streams[i] = reader.batches(tuple(position))
        self._rng.bit_generator.state = state["rng"]
        self.rows_read = int(state["rows_read"])

    def sample(self) -> Batch:
        """The next batch: from the source drawn (see the module docstring)."""
        i = 0 if len(self._streams) == 1 else int(
            self._rng.choice(len(self._streams), p=self.probabilities))
        stream = self._streams[i]
        if stream is None:
            if self.sample_env is None:
                raise ConfigError("input: the 'sampler' source needs a worker with an env")
            return self.sample_env()
        parts, steps = [], 0
        while steps < self.min_steps:
            batch = self._adapt(next(stream), self.readers[i])
            parts.append(batch)
            steps += max(batch.env_steps(), 1)  # (an empty record still counts as progress)
        out = parts[0] if len(parts) == 1 else concat_samples(parts)
        self.rows_read += out.agent_steps()
        return out

    def read_all(self) -> Iterator[Batch]:
        """Every recorded batch of the worker's share of each dataset source, once
        (one pass, in the reader's order), cast and postprocessed as :meth:`sample`
        does: what an algorithm that loads its whole dataset at once reads (RLlib
        1.x's ``read_all_files``). The ``"sampler"`` source has none."""
        for reader in self.readers:
            if reader is not None:
                for batch in reader.read_pass(0):
                    yield self._adapt(batch, reader)

    def _adapt(self, batch: Batch, reader: DatasetReader) -> Batch:
        batch = as_policy_batches(batch, list(self.policies), self.multi_agent,
                                  f"dataset {reader.paths}")
        if isinstance(batch, SampleBatch):
            (pid,) = self.policies
            return self._prepare(pid, batch)
        parts = {pid: self._prepare(pid, rows) for pid, rows in batch.policy_batches.items()}
        steps = batch.env_steps() or max(distinct_steps(r) for r in parts.values())
        return MultiAgentBatch(parts, steps)

    def _prepare(self, pid: str, rows: SampleBatch) -> SampleBatch:
        rows = _cast(rows, self.spaces[pid])
        if self.postprocess:
            rows = postprocess_offline(self.policies[pid], rows)
        return rows

    def close(self) -> None:
        """Close the readers' files."""
        for reader in self.readers:
            if reader is not None:
                reader.close()


__all__ = ["DatasetInput", "check_dataset", "postprocess_offline", "trajectory_ends",
           "as_policy_batches", "make_reader", "DEFAULT_INPUT_COLUMNS"]
