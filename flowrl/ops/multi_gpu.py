"""Data-parallel minibatch SGD over *towers*, copies of a policy's model on
several devices: ``MultiGPUTrainOneStep``, and the towers themselves.

Policy: each policy the operator trains (``policies``, default the local worker's
``policies_to_train``) is given one tower per device (:func:`set_towers`, through
the policy's ``use_towers`` hook); from then on every SGD step of the policy
splits its minibatch across the towers, on trajectory boundaries so that V-trace
(IMPALA, APPO) sees whole traces (:func:`tower_shards`), and applies the
size-weighted mean gradient in one optimizer step (:meth:`Towers.sgd_step`).
Results therefore equal single-tower training up to floating-point rounding. The
epochs and minibatches are the one loop, :func:`~flowrl.policies.sgd.minibatch_sgd`.

Devices: ``num_gpus`` CUDA devices when CUDA is available; otherwise
``max(1, int(num_gpus))`` "fake" CPU towers (RLlib's ``_fake_gpus``), which
exercise the same code path. A single CPU tower is the policy's own model: no
towers at all.

State: the operator keeps the policies already given towers (by identity); a
:class:`Towers` keeps its model copies and their devices.
"""

from __future__ import annotations

import copy
import math
from typing import TYPE_CHECKING, Any, Sequence

import numpy as np

from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError
from flowrl.metrics import LEARN_ON_BATCH_TIMER, LOAD_BATCH_TIMER, get_metrics
from flowrl.ops.train_ops import policy_batches, record_trained, with_learner_stats
from flowrl.models.sequences import SEQ_LENS, SEQ_MASK
from flowrl.policies.sgd import check_sgd

if TYPE_CHECKING:  # torch is imported where it is used: `import flowrl.ops` must stay light
    import torch

    from flowrl.policies.torch_policy import LoadedBatch

SB = SampleBatch


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


class Towers:
    """One copy of ``policy``'s model per device (one CPU device: the model itself),
    and the SGD step that trains :attr:`policy.model <flowrl.policies.TorchPolicy.model>`
    over them. Iterates ``(model, device)`` pairs. Built by :func:`set_towers`.
    """

    def __init__(self, policy: Any, devices: Sequence[torch.device]):
        devices = list(devices)
        if not devices:
            raise ConfigError(f"{type(policy).__name__}: set_towers needs at least one device")
        self.devices = devices
        if len(devices) == 1 and devices[0].type == "cpu":
            self.models = [policy.model]
        else:
            self.models = [copy.deepcopy(policy.model).to(d) for d in devices]

    def __iter__(self):
        return iter(zip(self.models, self.devices))

    def __len__(self) -> int:
        return len(self.devices)

    def load(self, tensors: dict[str, torch.Tensor]) -> list[dict[str, torch.Tensor]]:
        """``tensors`` copied onto each tower's device, once per device."""
        by_device: dict[Any, dict[str, torch.Tensor]] = {}
        for device in self.devices:
            if device not in by_device:
                by_device[device] = {k: v.to(device) for k, v in tensors.items()}
        return [by_device[d] for d in self.devices]

    def sgd_step(self, policy: Any, loaded: LoadedBatch) -> dict[str, float]:
        """One optimizer step of ``policy`` on ``loaded``: each tower computes the loss
        gradient on its shard (:func:`tower_shards`) with the current weights; the
        gradients are averaged weighted by each shard's real rows (the gradient of
        the whole minibatch, as the loss is a mean over rows), clipped by global
        norm (``policy.grad_clip``) and applied in ONE step of ``policy.optimizer``
        on ``policy.model``; the towers then copy the new weights. Returns the
        shard-weighted stats, ``total_loss`` and ``grad_gnorm`` (before clipping)."""
        import torch
        from torch import nn
        params = list(policy.model.parameters())
        shards = tower_shards(loaded)
        # Each tower's loss is a mean over its real rows (padding left out), so its
        # gradient weighs by its share of them.
        real = [float(shard[SEQ_MASK].sum()) if SEQ_MASK in shard else rows
                for rows, shard in shards]
        n = sum(real)
        grads: list[torch.Tensor | None] = [None] * len(params)
        totals: dict[str, float] = {}
        for model, (rows, shard), weight in zip(self.models, shards, real):
            if weight == 0:
                continue
            loss, stats = policy.loss_on(model, shard)
            share = weight / n
            tower_grads = torch.autograd.grad(loss, list(model.parameters()), allow_unused=True)
            for i, g in enumerate(tower_grads):
                if g is not None:
                    g = g.to(params[i].device) * share
                    grads[i] = g if grads[i] is None else grads[i] + g
            stats = {k: float(v) for k, v in stats.items()}
            stats["total_loss"] = float(loss.detach())
            for k, v in stats.items():
                totals[k] = totals.get(k, 0.0) + share * v
        optimizer = policy.optimizer
        optimizer.zero_grad(set_to_none=True)
        for p, g in zip(params, grads):
            p.grad = g
        used = [p for p in params if p.grad is not None]
        norm = nn.utils.clip_grad_norm_(used, policy.grad_clip if policy.grad_clip else math.inf)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        self.sync(policy.model)
        totals["grad_gnorm"] = float(norm)
        return totals

    def sync(self, model: Any) -> None:
        """Copy ``model``'s weights into every tower that is not ``model`` itself."""
        import torch
        params = list(model.parameters())
        with torch.no_grad():
            for tower in self.models:
                if tower is not model:
                    for p_t, p in zip(tower.parameters(), params):
                        p_t.copy_(p)


def set_towers(policy: Any, devices: Sequence[torch.device]) -> None:
    """Train ``policy`` (a :class:`~flowrl.policies.TorchPolicy`) on one tower per
    device from now on (see the module docstring); one CPU device means the
    policy's own model, without towers.

    >>> import gymnasium as gym, torch
    >>> from flowrl.policies import PGPolicy
    >>> p = PGPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=0)
    >>> set_towers(p, [torch.device("cpu")] * 2); p.num_towers
    2
    >>> set_towers(p, [torch.device("cpu")]); p.num_towers, p.towers[0][0] is p.model
    (1, True)
    """
    towers = Towers(policy, devices)
    policy.use_towers(None if towers.models[0] is policy.model else towers)


def tower_shards(loaded: LoadedBatch) -> list[tuple[int, dict[str, torch.Tensor]]]:
    """``(rows, tensors)`` per tower (one per copy in ``loaded.copies``): contiguous
    parts of the batch's rows, as even as :func:`tower_bounds` allows without
    cutting a trajectory (a tower may get none; recurrent sequences are never cut)."""
    import torch
    n, towers = loaded.count, len(loaded.copies)
    first = loaded.copies[0]
    if towers == 1 or SEQ_LENS in first or SB.EPS_ID not in first or SB.T not in first:
        starts = None  # one tower, whole sequences, or rows without episode ids
    else:
        eps, t = first[SB.EPS_ID], first[SB.T]
        if loaded.rows is not None:
            index = torch.as_tensor(loaded.rows, device=eps.device)
            eps, t = eps[index], t[index]
        follows = (eps[1:] == eps[:-1]) & (t[1:] == t[:-1] + 1)
        starts = torch.nonzero(~follows).squeeze(-1).cpu().numpy() + 1
    bounds = tower_bounds(n, towers, starts)
    out = []
    for copy_, a, b in zip(loaded.copies, bounds[:-1], bounds[1:]):
        if loaded.rows is None:
            out.append((int(b - a), {k: v[a:b] for k, v in copy_.items()}))
        else:
            idx = torch.as_tensor(loaded.rows[a:b])
            out.append((int(b - a), {k: v[idx.to(v.device)] for k, v in copy_.items()}))
    return out


def tower_bounds(n: int, towers: int, starts: np.ndarray | None = None) -> np.ndarray:
    """``towers + 1`` row bounds that split ``n`` rows over the towers: the even
    split, each inner bound moved to the nearest trajectory start in ``starts``
    (sorted row indices where a row does not continue the one before it; None:
    anywhere). A loss over trajectories (V-trace) then sees on each tower the
    same traces as on one, so towers change results only by rounding; a batch
    with fewer trajectories than towers leaves some towers without rows.

    >>> tower_bounds(10, 2).tolist()
    [0, 5, 10]
    >>> tower_bounds(10, 2, np.array([3, 8])).tolist()
    [0, 3, 10]
    >>> tower_bounds(10, 3, np.array([], int)).tolist()
    [0, 0, 10, 10]
    """
    even = np.linspace(0, n, towers + 1).round().astype(int)
    if starts is None:
        return even
    cuts = np.concatenate([[0], starts, [n]]).astype(int)
    nearest = [cuts[np.argmin(np.abs(cuts - b))] for b in even[1:-1]]  # ties: the earlier
    return np.array([0, *nearest, n], dtype=int)


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
                set_towers(policy, self.devices)
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


__all__ = ["MultiGPUTrainOneStep", "Towers", "set_towers", "tower_devices", "tower_shards",
           "tower_bounds"]
