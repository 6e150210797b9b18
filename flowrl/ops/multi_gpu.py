"""``MultiGPUTrainOneStep``: data-parallel minibatch SGD over towers on several devices.

Policy: each policy the operator trains (``policies``, default the local worker's
``policies_to_train``) is given one *tower* (a copy of
its model) per device through its public ``set_towers(devices)``; from then on
every SGD step of the policy splits its minibatch across the towers, on
trajectory boundaries so that V-trace (IMPALA, APPO) sees whole traces, and
applies the size-weighted mean gradient in one optimizer step (see
:meth:`~flowrl.policies.TorchPolicy.set_towers`). Results therefore equal
single-tower training up to floating-point rounding. The epochs and minibatches
are the one loop, :func:`~flowrl.policies.sgd.minibatch_sgd`.

Devices: ``num_gpus`` CUDA devices when CUDA is available; otherwise
``max(1, int(num_gpus))`` "fake" CPU towers (RLlib's ``_fake_gpus``), which
exercise the same code path. A single CPU tower is the policy's own model.

State: the policies already given towers (by identity).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Sequence

import numpy as np

from flowrl.errors import ConfigError
from flowrl.metrics import LEARN_ON_BATCH_TIMER, LOAD_BATCH_TIMER, get_metrics
from flowrl.ops.train_ops import policy_batches, record_trained, with_learner_stats
from flowrl.policies.sgd import check_sgd

if TYPE_CHECKING:  # torch is imported where it is used: `import flowrl.ops` must stay light
    import torch


def tower_devices(num_gpus: float) -> list[torch.device]:
    """The devices towers go on: CUDA ``0..n-1`` if available, else CPU "fake" towers.

    >>> [d.type for d in tower_devices(0)], len(tower_devices(2)) == 2
    (['cpu'], True)
    """
    if num_gpus < 0:
        raise ConfigError(f"MultiGPUTrainOneStep(num_gpus={num_gpus!r}): must be >= 0")
    import torch

    if num_gpus > 0 and torch.cuda.is_available():
        n = max(1, min(int(num_gpus), torch.cuda.device_count()))
        return [torch.device("cuda", i) for i in range(n)]
    return [torch.device("cpu")] * max(1, int(num_gpus))


class MultiGPUTrainOneStep:
    """``for_each(MultiGPUTrainOneStep(workers, ...))``: data-parallel minibatch SGD.

    It trains exactly ``policies`` (default: the local worker's
    ``policies_to_train``), as :class:`~flowrl.ops.TrainOneStep` does; for each:
    ``num_sgd_iter`` epochs over shuffled minibatches of ``sgd_minibatch_size`` rows
    (0: whole batch; shuffling seeded by ``seed``), each split across the towers on
    ``num_gpus`` devices (see the module docstring). Only those policies get towers.
    Then remote workers get the new weights of ``policies`` (default: all).
    Returns ``(batch, info)``, ``info = {policy_id: mean stats of the last epoch}``,
    each policy's stats also under ``"learner_stats"`` as RLlib 1.x has them
    (:func:`~flowrl.ops.train_ops.with_learner_stats`).

    RLlib 1.x's keywords are accepted so its plans run as written:
    ``shuffle_sequences`` (only True: minibatches are always shuffled),
    ``_fake_gpus`` (True: CPU towers even where GPUs exist; without GPUs they are
    CPU towers anyway) and ``framework`` (None or ``"torch"``; flowrl's policies are
    torch, so ``"tf"`` is a ConfigError).

    Metrics: as :class:`~flowrl.ops.TrainOneStep` (``LEARN_ON_BATCH_TIMER``,
    trained counters, ``info[LEARNER_INFO]``, ``WORKER_UPDATE_TIMER``) plus
    ``LOAD_BATCH_TIMER`` ("load") around building the towers the first time.

    >>> import flowrl
    >>> from flowrl.ops import ParallelRollouts
    >>> from flowrl.policies import PPOPolicy
    >>> from flowrl.workers import WorkerConfig, WorkerSet
    >>> ws = WorkerSet("CartPole-v1", PPOPolicy, WorkerConfig(rollout_fragment_length=64, seed=0),
    ...                num_workers=0, backend="local")
    >>> op = MultiGPUTrainOneStep(ws, num_gpus=2, sgd_minibatch_size=32, num_sgd_iter=2)
    >>> run = flowrl.Plan(ParallelRollouts(ws).for_each(op)).compile()
    >>> batch, info = next(run)
    >>> run.metrics.counters["num_steps_trained"], "kl" in info["default_policy"]
    (64, True)
    >>> run.stop(); ws.stop()
    """

    def __init__(self, workers, *, num_gpus: float = 0, sgd_minibatch_size: int = 0,
                 num_sgd_iter: int = 1, policies: Sequence[str] | None = None,
                 seed: int | None = None, shuffle_sequences: bool = True,
                 _fake_gpus: bool = False, framework: str | None = None):
        check_sgd("MultiGPUTrainOneStep", num_sgd_iter, sgd_minibatch_size)
        if shuffle_sequences is not True:
            raise ConfigError(f"MultiGPUTrainOneStep(shuffle_sequences={shuffle_sequences!r}): "
                              "minibatches are always shuffled here; drop the argument or "
                              "pass True")
        if framework not in (None, "torch"):
            raise ConfigError(f"MultiGPUTrainOneStep(framework={framework!r}): flowrl's "
                              "policies are torch; use framework='torch' (or leave it out)")
        self.workers = workers
        self.devices = tower_devices(num_gpus if not _fake_gpus else 0) * (
            max(1, int(num_gpus)) if _fake_gpus else 1)
        self.num_sgd_iter, self.sgd_minibatch_size = num_sgd_iter, sgd_minibatch_size
        self.policies = list(policies) if policies is not None else None
        self.rng = np.random.default_rng(seed)
        self._placed: dict[str, int] = {}

    def _place(self, policy, pid: str) -> None:
        if self._placed.get(pid) != id(policy):
            with get_metrics().timers[LOAD_BATCH_TIMER]:
                policy.set_towers(self.devices)
            self._placed[pid] = id(policy)

    def __call__(self, batch):
        metrics = get_metrics()
        worker = self.workers.local_worker()
        timer = metrics.timers[LEARN_ON_BATCH_TIMER]
        info: dict[str, dict] = {}
        with timer:
            for pid, rows in policy_batches(worker, batch, self.policies).items():
                policy = worker.get_policy(pid)
                self._place(policy, pid)
                info[pid] = policy.learn_on_batch(
                    rows, num_sgd_iter=self.num_sgd_iter,
                    sgd_minibatch_size=self.sgd_minibatch_size, rng=self.rng)
        timer.push_units_processed(batch.env_steps())
        record_trained(metrics, batch, info, self.workers, self.policies)
        return batch, with_learner_stats(info)


__all__ = ["MultiGPUTrainOneStep", "tower_devices"]
