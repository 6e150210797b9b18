"""``MultiGPUTrainOneStep``: data-parallel minibatch SGD over towers on several devices.

Policy: each policy gets one *tower* (a copy of its model) per device. Every
minibatch is split into contiguous shards, one per tower; each tower computes
the loss and gradients on its shard with the current weights; the gradients are
averaged weighted by shard size (the loss is a mean over rows, so this is the
gradient of the whole minibatch), clipped by global norm as the policy would,
and applied in ONE optimizer step on the policy's own model. Towers then copy
the new weights before the next minibatch. Results therefore equal
single-tower training up to floating-point rounding.

Devices: ``num_gpus`` CUDA devices when CUDA is available; otherwise
``max(1, int(num_gpus))`` "fake" CPU towers (RLlib's ``_fake_gpus``), which
exercise the same code path. A single CPU tower is the policy's own model.

State: per policy id, the list of tower models and their devices.
"""

from __future__ import annotations

import copy
from typing import TYPE_CHECKING, Sequence

import numpy as np

from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError
from flowrl.metrics import LEARN_ON_BATCH_TIMER, LOAD_BATCH_TIMER, get_metrics
from flowrl.ops.train_ops import _check_sgd, mean_stats, policy_batches, record_trained

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


class _Towers:
    """One policy's tower models, and one data-parallel SGD step over them."""

    def __init__(self, policy, devices: Sequence[torch.device]):
        self.policy = policy
        self.devices = list(devices)
        own = len(devices) == 1 and devices[0].type == "cpu"
        self.models = ([policy.model] if own
                       else [copy.deepcopy(policy.model).to(d) for d in devices])

    def _sync(self) -> None:
        import torch
        params = list(self.policy.model.parameters())
        with torch.no_grad():
            for model in self.models:
                if model is not self.policy.model:
                    for p_t, p in zip(model.parameters(), params):
                        p_t.copy_(p)

    def step(self, minibatch: SampleBatch) -> dict[str, float]:
        import torch
        policy, n = self.policy, minibatch.count
        self._sync()
        params = list(policy.model.parameters())
        grads = [torch.zeros_like(p) for p in params]
        bounds = np.linspace(0, n, len(self.models) + 1).round().astype(int)
        tower_stats, weights = [], []
        for model, device, a, b in zip(self.models, self.devices, bounds[:-1], bounds[1:]):
            if b <= a:
                continue
            tensors = {k: v.to(device) for k, v in policy._train_tensors(minibatch.slice(a, b)).items()}
            tower = copy.copy(policy)
            tower.model = model
            loss, stats = tower.loss(tensors)
            share = (b - a) / n
            tower_grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
            for acc, g in zip(grads, tower_grads):
                if g is not None:
                    acc.add_(g.to(acc.device), alpha=share)
            stats = {k: float(v) for k, v in stats.items()}
            stats["total_loss"] = float(loss.detach())
            tower_stats.append(stats)
            weights.append(share)
        policy.optimizer.zero_grad(set_to_none=True)
        for p, g in zip(params, grads):
            p.grad = g
        clip = policy.grad_clip if policy.grad_clip else float("inf")
        norm = torch.nn.utils.clip_grad_norm_(params, clip)
        policy.optimizer.step()
        policy.optimizer.zero_grad(set_to_none=True)
        out = {k: float(sum(w * s[k] for w, s in zip(weights, tower_stats)))
               for k in tower_stats[0]}
        out["grad_gnorm"] = float(norm)
        return out


class MultiGPUTrainOneStep:
    """``for_each(MultiGPUTrainOneStep(workers, ...))``: data-parallel minibatch SGD.

    For each trainable policy of the local worker: ``num_sgd_iter`` epochs over
    shuffled minibatches of ``sgd_minibatch_size`` rows (0: whole batch; shuffling
    seeded by ``seed``), each split across the towers on ``num_gpus`` devices (see
    the module docstring); then remote workers get the new weights. Returns
    ``(batch, info)``, ``info = {policy_id: mean stats of the last epoch}``.

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
                 seed: int | None = None):
        _check_sgd("MultiGPUTrainOneStep", num_sgd_iter, sgd_minibatch_size)
        self.workers = workers
        self.devices = tower_devices(num_gpus)
        self.num_sgd_iter, self.sgd_minibatch_size = num_sgd_iter, sgd_minibatch_size
        self.policies = list(policies) if policies is not None else None
        self.rng = np.random.default_rng(seed)
        self._towers: dict[str, _Towers] = {}

    def _towers_for(self, worker, pid: str) -> _Towers:
        towers = self._towers.get(pid)
        if towers is None or towers.policy is not worker.get_policy(pid):
            with get_metrics().timers[LOAD_BATCH_TIMER]:
                towers = self._towers[pid] = _Towers(worker.get_policy(pid), self.devices)
        return towers

    def __call__(self, batch):
        metrics = get_metrics()
        worker = self.workers.local_worker()
        timer = metrics.timers[LEARN_ON_BATCH_TIMER]
        info: dict[str, dict] = {}
        with timer:
            for pid, rows in policy_batches(worker, batch).items():
                towers = self._towers_for(worker, pid)
                size = (min(self.sgd_minibatch_size, rows.count) if self.sgd_minibatch_size > 0
                        else rows.count)
                epoch: list[dict] = []
                for _ in range(self.num_sgd_iter):
                    epoch = [towers.step(mb) for mb in
                             rows.minibatches(size, seed=self.rng, shuffle=size < rows.count)]
                info[pid] = mean_stats(epoch)
        timer.push_units_processed(batch.env_steps())
        record_trained(metrics, batch, info, self.workers, self.policies)
        return batch, info


__all__ = ["MultiGPUTrainOneStep", "tower_devices"]
