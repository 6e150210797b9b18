"""CQL as a plan: the whole dataset into replay once, then replay -> train -> target update.

Conservative Q-learning trains SAC's networks from recorded experience only
(:mod:`flowrl.policies.cql` has the loss). Its plan, as RLlib 1.x's:

- ``cql/read_dataset`` -> ``cql/load``: at the first iteration, every row of the
  ``input`` dataset, read once through the driver worker's input reader
  (:meth:`~flowrl.workers.dataset_input.DatasetInput.read_all`) and turned into
  n-step replay rows, is stored into the replay buffer. Rows recorded by a replay
  algorithm (SAC, CQL: they carry ``n_step_discount``) are stored as recorded;
  others (PPO's, RLlib 1.x's) are postprocessed trajectory by trajectory.
- ``cql/replay`` -> ``cql/train`` -> (``cql/update_priorities``) ->
  ``cql/update_target``: :func:`~flowrl.algorithms.dqn.replay_train_op`, as SAC's
  learning branch. No env is stepped and no sample is added.

An iteration ends after ``timesteps_per_iteration`` rows trained (nothing is
sampled, so ``timesteps_total`` stays 0). Evaluation (``evaluation_interval``)
steps the evaluation workers' envs as for any algorithm. Checkpoints hold the
policy (its update count, so behaviour cloning does not restart) and, only with
``checkpoint_replay_buffer``, the buffer; without it, a restored CQL reads the
dataset again at its first iteration.

>>> import tempfile
>>> from flowrl.algorithms import SAC
>>> data = tempfile.mkdtemp()
>>> with SAC(env="Pendulum-v1", output=data, learning_starts=300, timesteps_per_iteration=300,
...          Q_model=[16], policy_model=[16], seed=0) as sac:
...     _ = sac.train()
>>> algo = CQL(env="Pendulum-v1", input=data, train_batch_size=32, timesteps_per_iteration=64,
...            Q_model=[16], policy_model=[16], bc_iters=1, num_actions=2, seed=0)
>>> r = algo.train()
>>> r["timesteps_total"], r["info"]["num_steps_trained"], len(algo.local_replay_buffer)
(0, 64, 300)
>>> "cql/read_dataset" in algo.plan.to_dot()
True
>>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar


from flowrl.algorithms.base import LazyClass
from flowrl.algorithms.dqn import make_buffer, replay_train_op
from flowrl.algorithms.sac import SAC, SACConfig
from flowrl.algorithms.validators import boolean, int_ge, number
from flowrl.batch import SampleBatch, concat_samples
from flowrl.errors import ConfigError
from flowrl.graph.stream import Concurrently, LocalStream, from_iterable
from flowrl.offline.settings import SAMPLER, check_input_config, describe_input, input_sources
from flowrl.ops import StandardMetricsReporting, StoreToReplayBuffer
from flowrl.policies.dqn import N_STEP_DISCOUNT
from flowrl.workers.dataset_input import DEFAULT_INPUT_COLUMNS, trajectory_ends
from flowrl.workers.sampler import postprocess_trajectories

SB = SampleBatch

#: The columns of a replay row (:func:`~flowrl.policies.dqn.n_step_batch`).
REPLAY_COLUMNS = (SB.OBS, SB.ACTIONS, SB.REWARDS, SB.NEXT_OBS, SB.TERMINATEDS, N_STEP_DISCOUNT)


@dataclass
class CQLConfig(SACConfig):
    """CQL hyperparameters: SAC's (:class:`~flowrl.algorithms.sac.SACConfig`) and
    RLlib 1.x's CQL settings with its defaults: ``bc_iters`` (20000 updates of
    behaviour cloning first), ``min_q_weight`` (5.0), ``num_actions`` (10),
    ``temperature`` (1.0), ``lagrangian`` (False) and ``lagrangian_thresh`` (5.0).

    ``input`` must be a dataset (a path, a list of paths, or a dict of paths to
    probabilities): CQL never samples, so ``"sampler"`` is refused. The dataset
    must fit ``buffer_size`` rows. ``timesteps_per_iteration`` counts rows trained
    (default 25600: a hundred 256-row updates). Single-agent only.

    >>> CQLConfig(env="Pendulum-v1")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: CQLConfig.input='sampler': CQL trains from a dataset only and never steps an env; give input=PATH, a directory of recorded experience (see docs/offline.md)
    """

    timesteps_per_iteration: int = 25_600
    bc_iters: int = 20000
    min_q_weight: float = 5.0
    num_actions: int = 10
    temperature: float = 1.0
    lagrangian: bool = False
    lagrangian_thresh: float = 5.0

    checks: ClassVar[dict[str, tuple]] = {
        "bc_iters": int_ge(0), "min_q_weight": number(0), "num_actions": int_ge(1),
        "temperature": number(0, open_lo=True), "lagrangian": boolean(),
        "lagrangian_thresh": number(-1e9),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        sources = input_sources(self.input, f"{name}.input")
        if any(source == SAMPLER for source, _ in sources):
            raise ConfigError(f"{name}.input={self.input!r}: CQL trains from a dataset only "
                              "and never steps an env; give input=PATH, a directory of "
                              "recorded experience (see docs/offline.md)")
        if self.multiagent.get("policies"):
            raise ConfigError(f"{name}.multiagent: CQL is single-agent; remove "
                              "multiagent.policies")


def replay_rows(policy, batch: SampleBatch) -> SampleBatch:
    """The n-step replay rows (:data:`REPLAY_COLUMNS`) of a recorded ``batch``: as
    recorded when it has them (a replay algorithm recorded it), else ``policy``'s
    postprocessing of each of its trajectories (a trajectory cut by the batch's
    end bootstraps from its last ``new_obs``)."""
    if N_STEP_DISCOUNT not in batch:
        ends = trajectory_ends(batch)
        batch = postprocess_trajectories(policy, batch, ends, [0.0] * len(ends))
    return SampleBatch({col: batch[col] for col in REPLAY_COLUMNS})


def read_dataset(worker, buffer, where: str) -> list[SampleBatch]:
    """Every row of ``worker``'s dataset input once, as replay rows in one batch
    (:func:`replay_rows`); nothing when ``buffer`` already holds rows (restored from
    a checkpoint). A dataset larger than ``buffer`` is a ConfigError naming
    ``where`` (the buffer_size field)."""
    if len(buffer) > 0:
        return []
    policy = worker.get_policy()
    parts = [replay_rows(policy, b) for b in worker.input_reader().read_all() if b.count]
    rows = sum(p.count for p in parts)
    if rows > buffer.capacity:
        raise ConfigError(f"{where}={buffer.capacity}: the dataset has {rows} rows, more than "
                          "the replay buffer holds; raise buffer_size to at least "
                          f"{rows}, or train on a smaller dataset")
    return [concat_samples(parts)] if parts else []


def cql_plan(workers, config: CQLConfig, local_buffer=None) -> LocalStream:
    """The plan of the module docstring; ``local_buffer`` defaults to
    :func:`~flowrl.algorithms.dqn.make_buffer` of ``config``."""
    buffer = local_buffer if local_buffer is not None else make_buffer(config)
    where = f"{type(config).__name__}.buffer_size"
    shown = describe_input(config.input, check_input_config(config.input_config, "input_config"))
    load_op = (from_iterable(lambda: read_dataset(workers.local_worker(), buffer, where),
                             name="cql/read_dataset", label=f"{shown}, once")
               .for_each(StoreToReplayBuffer(local_buffer=buffer), name="cql/load"))
    train_op = replay_train_op(workers, config, buffer, name="cql", target_by_steps_trained=True)
    # The loader yields once, so its one turn comes before the first replay.
    train_op = Concurrently([load_op, train_op], mode="round_robin", output_indexes=[1],
                            name="cql/load_then_train")
    return StandardMetricsReporting(
        train_op, workers, min_time_s_per_reporting=config.min_time_s_per_reporting,
        timesteps_per_iteration=config.timesteps_per_iteration, by_steps_trained=True)


class CQL(SAC):
    """Conservative Q-learning from a dataset; see the module docstring.
    ``algo.local_replay_buffer`` holds the dataset's rows once the first iteration
    has loaded them."""

    config_class = CQLConfig
    policy_class = LazyClass("flowrl.policies.cql:CQLPolicy")
    name = "cql"

    @classmethod
    def policy_config(cls, config: CQLConfig) -> dict[str, Any]:
        return {**super().policy_config(config), "bc_iters": config.bc_iters,
                "min_q_weight": config.min_q_weight, "num_actions": config.num_actions,
                "temperature": config.temperature, "lagrangian": config.lagrangian,
                "lagrangian_thresh": config.lagrangian_thresh}

    @classmethod
    def input_columns(cls, config: CQLConfig) -> tuple[str, ...]:
        """SAC's replay rows need the next observation: ``new_obs`` beside the
        default columns."""
        return (*DEFAULT_INPUT_COLUMNS, SB.NEXT_OBS)

    @staticmethod
    def execution_plan(workers, config: CQLConfig, *, local_buffer=None) -> LocalStream:
        return cql_plan(workers, config, local_buffer)


__all__ = ["CQL", "CQLConfig", "cql_plan", "read_dataset", "replay_rows", "REPLAY_COLUMNS"]
