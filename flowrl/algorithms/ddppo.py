"""DD-PPO (Wijmans et al. 2020): decentralized PPO, gradients all-reduced among workers.

There is no learner on the driver. Every Ray rollout worker samples its own
batch, standardizes its advantages (each minibatch's with
``standardize_advantages="minibatch"``) and runs ``num_sgd_iter`` epochs of
minibatch SGD on PPO's clipped surrogate, through the one minibatch-SGD loop
(:func:`~flowrl.policies.sgd.minibatch_sgd`) and PPO's minibatches: shuffled
rows, or a recurrent model's whole sequences. After each minibatch's backward
pass the workers average their gradients, each weighted by its minibatch's real
steps, with ``torch.distributed.all_reduce`` (gloo backend) and take the same
optimizer step. A worker with fewer minibatches in an epoch (its batch cut into
fewer sequences) joins the others' remaining steps with no gradient of its own.
Starting from the same weights with the same optimizer state, the workers
therefore stay identical, step after step. An ``lr_schedule`` sets every
worker's rate after each round (:class:`~flowrl.ops.UpdateLR`).

Set-up (the ``make_workers`` hook): worker 1 picks its node's address and a free
port; every worker joins one process group there (rank ``worker_index - 1``).
The plan: each worker's train step runs shard-side on ``rollout_shards``; a
``gather_sync`` collects one ``(info, count)`` per worker per round; the driver
counts steps, keeps its local worker's weights equal to worker 1's (for
``get_policy`` and checkpoints), sets the scheduled learning rate and reports.

Needs ``backend="ray"`` and ``num_workers >= 1`` (several processes), and a
single-agent env (each worker trains its one policy).

Worker loss: the process group is formed once, so a replacement worker could
never join it and the survivors' ``all_reduce`` would wait for the lost rank.
DD-PPO therefore neither replaces nor drops workers (``recreate_failed_workers``
and ``ignore_worker_failures`` must stay False): a lost worker ends the run with
a :class:`~flowrl.errors.WorkerError` naming it (the driver's wait on each round
is bounded by ``sample_timeout_s``, and a survivor's ``all_reduce`` by
``gloo_timeout_s``); restart from the last checkpoint. :func:`allreduce_mean`
raises instead of returning local gradients when its process has no group.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from flowrl.algorithms.ppo import PPO, PPOConfig
from flowrl.algorithms.validators import number
from flowrl.batch import SampleBatch
from flowrl.callbacks import learn_callbacks
from flowrl.errors import ConfigError, FlowError, WorkerError
from flowrl.graph.stream import LocalStream
from flowrl.metrics import (AGENT_STEPS_SAMPLED_COUNTER, LEARNER_INFO, STEPS_SAMPLED_COUNTER,
                            STEPS_TRAINED_COUNTER, get_metrics)
from flowrl.models.sequences import SEQ_MASK
from flowrl.ops import StandardizeFields, StandardMetricsReporting, UpdateLR, rollout_shards
from flowrl.policies.sgd import minibatch_sgd
from flowrl.runtime.backend import lost_reason
from flowrl.workers import WorkerSet

SB = SampleBatch


@dataclass
class DDPPOConfig(PPOConfig):
    """DD-PPO: PPO's fields; ``train_batch_size`` is unused (each worker trains on its
    own ``rollout_fragment_length * num_envs_per_worker`` rows), ``kl_coeff`` must
    stay 0 (an adaptive coefficient would drift apart between workers), and
    ``recreate_failed_workers`` / ``ignore_worker_failures`` default to and must
    stay False (see the module docstring: a lost worker ends the run).
    ``gloo_timeout_s`` bounds each collective of the process group. ``lr_schedule``
    (as PPO's, over env steps sampled by all workers) sets every worker's rate.

    >>> DDPPOConfig(env="CartPole-v1", backend="local")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: DDPPOConfig.backend='local': DD-PPO all-reduces gradients between worker processes; use backend='ray'
    """

    backend: str = "ray"
    num_workers: int = 2
    num_envs_per_worker: int = 4
    rollout_fragment_length: int = 128
    sgd_minibatch_size: int = 128
    train_batch_size: int = 512
    num_sgd_iter: int = 6
    gloo_timeout_s: float = 300.0
    recreate_failed_workers: bool = False

    checks: ClassVar[dict[str, tuple]] = {"gloo_timeout_s": number(0, open_lo=True)}

    def __post_init__(self) -> None:
        super().__post_init__()
        for name in ("recreate_failed_workers", "ignore_worker_failures"):
            if getattr(self, name):
                raise ConfigError(
                    f"DDPPOConfig.{name}=True: DD-PPO workers share one gloo process group "
                    "that cannot be re-formed, so a replaced or dropped worker would leave "
                    "the others waiting in all_reduce; keep it False (a lost worker ends the "
                    "run) and restart from the last checkpoint instead")
        if self.backend != "ray":
            raise ConfigError(f"DDPPOConfig.backend={self.backend!r}: DD-PPO all-reduces "
                              "gradients between worker processes; use backend='ray'")
        if self.num_workers < 1:
            raise ConfigError(f"DDPPOConfig.num_workers={self.num_workers}: DD-PPO trains on "
                              "the remote workers; use num_workers >= 1")
        if self.kl_coeff != 0:
            raise ConfigError(f"DDPPOConfig.kl_coeff={self.kl_coeff}: must be 0 (each worker "
                              "would adapt its own coefficient and the workers would diverge)")
        if self.num_gpus:
            raise ConfigError("DDPPOConfig.num_gpus: DD-PPO trains on the workers; set 0")


def _node_address(worker) -> tuple[str, int]:
    import socket

    import ray
    with socket.socket() as s:
        s.bind(("", 0))
        port = s.getsockname()[1]
    return ray.util.get_node_ip_address(), port


class _JoinGroup:
    def __init__(self, address: tuple[str, int], world_size: int, timeout_s: float):
        self.address, self.world_size, self.timeout_s = address, world_size, timeout_s

    def __call__(self, worker) -> int:
        import datetime

        import torch.distributed as dist
        if not dist.is_initialized():
            host, port = self.address
            dist.init_process_group("gloo", init_method=f"tcp://{host}:{port}",
                                    rank=worker.worker_index - 1, world_size=self.world_size,
                                    timeout=datetime.timedelta(seconds=self.timeout_s))
        return dist.get_rank()


def _require_group(where: str):
    import torch.distributed as dist
    if not dist.is_initialized():
        raise ConfigError(
            f"{where}: no torch.distributed process group is initialized in this "
            "process, so there is nothing to average with; call it on DD-PPO workers "
            "(DDPPO.make_workers joins them into one) or call "
            "torch.distributed.init_process_group first")
    return dist


def allreduce_mean(grads: list[np.ndarray], *, weight: float = 1.0) -> list[np.ndarray]:
    """The element-wise mean of ``grads`` over every process of the default group,
    each process's weighted by its ``weight`` (its minibatch's real steps; 0: it
    contributes nothing), as ``sum(w_i g_i) / sum(w_i)``; equal weights give the
    plain mean. One flat ``all_reduce``; it blocks until every rank contributed, at
    most the group's timeout. Raises ConfigError in a process that joined no
    group: its local gradients alone would silently turn DD-PPO into independent
    learners.

    >>> try:
    ...     allreduce_mean([np.ones(2)])
    ... except ConfigError as e:
    ...     print(str(e).split(",")[0])
    allreduce_mean: no torch.distributed process group is initialized in this process
    """
    import torch
    dist = _require_group("allreduce_mean")
    flat = np.concatenate([np.asarray(g, np.float32).ravel() * np.float32(weight)
                           for g in grads] + [np.array([weight], np.float32)])
    total = torch.from_numpy(flat)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    flat = total[:-1] / total[-1]
    out, start = [], 0
    for g in grads:
        out.append(flat[start:start + g.size].numpy().reshape(g.shape))
        start += g.size
    return out


def _allreduce_max(n: int) -> int:
    """The largest ``n`` over every process of the default group."""
    import torch
    dist = _require_group("DDPPO")
    total = torch.tensor([n], dtype=torch.int64)
    dist.all_reduce(total, op=dist.ReduceOp.MAX)
    return int(total)


class _AllReduceStep:
    """:func:`~flowrl.policies.sgd.minibatch_sgd`'s ``step`` on a DD-PPO worker: the
    worker's (clipped) gradient on its minibatch, averaged over the workers weighted
    by real steps, in one optimizer step. ``own`` is this worker's minibatches per
    epoch, ``most`` the largest number any worker has: after its last minibatch of
    an epoch, a worker takes the others' remaining ``most - own`` steps with weight 0,
    so every worker makes every ``all_reduce`` and optimizer step."""

    def __init__(self, policy, own: int, most: int, per_minibatch: bool):
        self.policy, self.own, self.most, self.per_minibatch = policy, own, most, per_minibatch
        self.steps = 0

    def __call__(self, minibatch) -> dict[str, float]:
        from flowrl.policies.ppo import standardize_advantages

        if self.per_minibatch:  # each worker's own minibatch, as it computes its gradient
            minibatch = standardize_advantages(minibatch)
        mask = minibatch.copies[0].get(SEQ_MASK)
        real = float(mask.sum()) if mask is not None else float(minibatch.count)
        grads, stats = self.policy.compute_gradients(minibatch)
        self.policy.apply_gradients(allreduce_mean(grads, weight=real))
        self.steps += 1
        if self.steps % self.own == 0:  # this worker's epoch is over; the others' may not be
            nothing = [np.zeros_like(g) for g in grads]
            for _ in range(self.most - self.own):
                self.policy.apply_gradients(allreduce_mean(nothing, weight=0.0))
        return stats


class _DDPPOTrain:
    """Shard-side: one DD-PPO round on the hosting worker's own batch."""

    def __init__(self, num_sgd_iter: int, sgd_minibatch_size: int, seed: int | None,
                 standardize_advantages: str = "batch"):
        self.num_sgd_iter, self.sgd_minibatch_size, self.seed = (num_sgd_iter,
                                                                   sgd_minibatch_size, seed)
        self.per_minibatch = standardize_advantages == "minibatch"
        self.standardize = StandardizeFields([SB.ADVANTAGES])
        self.rng: np.random.Generator | None = None

    def __call__(self, batch: SampleBatch) -> tuple[dict, int]:
        from flowrl.workers import get_global_worker

        worker = get_global_worker()
        if self.rng is None:  # the same shuffles on every worker
            self.rng = np.random.default_rng(self.seed)
        if not isinstance(batch, SampleBatch):
            raise ConfigError("DDPPO: workers sampled a MultiAgentBatch; DD-PPO supports "
                              "single-agent envs")
        (pid,) = worker.policies_to_train
        policy = worker.get_policy(pid)
        custom = learn_callbacks(policy, batch)  # on_learn_on_batch, as every learner runs it
        if not self.per_minibatch:
            batch = self.standardize(batch)
        loaded = policy.load_batch(batch)  # rows, or a recurrent policy's sequences
        size = min(policy.minibatch_units(self.sgd_minibatch_size) or loaded.count,
                   loaded.count)
        own = -(-loaded.count // size)
        step = _AllReduceStep(policy, own, _allreduce_max(own), self.per_minibatch)
        stats = minibatch_sgd(loaded, num_sgd_iter=self.num_sgd_iter, sgd_minibatch_size=size,
                              rng=self.rng, step=step)
        stats["cur_lr"] = policy.optimizer.param_groups[0]["lr"]
        if custom is not None:
            stats["custom_metrics"] = custom
        return {pid: stats}, batch.count


class _Record:
    """Driver-side: count a round, keep the local worker equal to worker 1."""

    def __init__(self, workers: WorkerSet):
        self.workers = workers

    def __call__(self, round_: list[tuple[dict, int]]) -> list:
        metrics = get_metrics()
        steps = sum(count for _, count in round_)
        metrics.counters[STEPS_SAMPLED_COUNTER] += steps
        metrics.counters[AGENT_STEPS_SAMPLED_COUNTER] += steps
        metrics.counters[STEPS_TRAINED_COUNTER] += steps
        metrics.info[LEARNER_INFO] = round_[0][0]
        # foreach_worker: bounded by sample_timeout_s; a lost worker is a WorkerError naming it
        first = self.workers.foreach_worker(_weights_if_first)[1]
        self.workers.local_worker().set_weights(first)
        return round_


def _weights_if_first(worker) -> dict | None:
    return worker.get_weights() if worker.worker_index == 1 else None


def _lost_workers(workers: WorkerSet) -> dict[int, str]:
    """``{worker_index: why}`` of the remote workers that died or do not answer a ping
    within the set's bound (``sample_timeout_s``). A survivor still blocked in
    ``all_reduce`` answers once ``gloo_timeout_s`` ends that call."""
    calls = workers.calls
    pings = {idx: calls.call(w, "flowrl_ping")
             for idx, w in zip(workers.worker_indices(), workers.remote_workers())}
    answered = calls.wait(list(pings.values()), workers.timeout_s)
    lost = {}
    for idx, ping in pings.items():
        if not any(ping is p for p in answered):
            lost[idx] = f"did not answer within {workers.timeout_s:g} s (sample_timeout_s)"
            continue
        try:
            calls.get(ping, timeout=0, label=f"remote worker {idx}",
                      setting="sample_timeout_s")
        except WorkerError as e:
            why = lost_reason(e)
            if why is None:
                raise
            lost[idx] = why
    return lost


class DDPPO(PPO):
    """Decentralized PPO; see the module docstring.

    >>> DDPPO.name, DDPPO.config_class.__name__
    ('ddppo', 'DDPPOConfig')
    """

    config_class = DDPPOConfig
    name = "ddppo"
    inference_workers = 1  # it trains on remote workers only
    _stopped = False  # stop() was called: its killed workers are not lost ones

    def train(self) -> dict[str, Any]:
        """One round, as :meth:`Algorithm.train`. A failed round whose cause is a lost
        worker (the survivors' ``all_reduce`` fails or times out, or the driver finds
        the worker dead or silent) raises a WorkerError naming every lost worker, with
        the original error chained; the run has ended (see the module docstring)."""
        try:
            return super().train()
        except FlowError as e:
            if self._stopped:
                raise
            lost = _lost_workers(self.workers)
            if not lost:
                raise
            which = "; ".join(f"remote worker {idx} {why}" for idx, why in lost.items())
            raise WorkerError(
                f"DDPPO: {which}. The workers' gloo process group cannot be re-formed, so "
                "the run has ended (no worker trains on without it); build a new DDPPO and "
                "restore the last checkpoint") from e

    @classmethod
    def inference_config(cls, config: DDPPOConfig) -> DDPPOConfig:
        """One remote worker and no evaluation workers, on Ray: DD-PPO runs on no other
        backend (:meth:`Algorithm.inference_config`). To act without Ray, load the
        policy with :func:`flowrl.evaluation.load_for_evaluation`."""
        return config.replace(num_workers=cls.inference_workers, evaluation_num_workers=0,
                              evaluation_parallel_to_training=False)

    def stop(self) -> None:
        """Stop the run and the workers (idempotent); a later ``train()`` says so."""
        self._stopped = True
        super().stop()

    def make_workers(self, *, env: Any, policy_class: Any, worker_config, num_workers: int,
                     backend: str) -> WorkerSet:
        workers = WorkerSet(env, policy_class, worker_config, num_workers=num_workers,
                            backend=backend)
        try:
            address = workers.foreach_remote_worker(_node_address)[0]
            workers.foreach_remote_worker(
                _JoinGroup(address, num_workers, self.config.gloo_timeout_s))
            workers.sync_weights()  # identical start; actor calls run in order
        except BaseException:
            workers.stop()
            raise
        return workers

    @staticmethod
    def execution_plan(workers, config: DDPPOConfig) -> LocalStream:
        train = rollout_shards(workers, name="ddppo/rollouts").for_each(
            _DDPPOTrain(config.num_sgd_iter, config.sgd_minibatch_size, config.seed,
                        config.standardize_advantages),
            name="ddppo/train")
        rounds = train.gather_sync(name="ddppo/gather").batch(
            len(workers.remote_workers()), name="ddppo/round").for_each(
            _Record(workers), name="ddppo/record")
        if config.lr_schedule:  # the workers train: they get the rate too
            rounds = rounds.for_each(UpdateLR(workers, schedule=config.lr_schedule,
                                              remote_learners=True), name="ddppo/update_lr")
        return StandardMetricsReporting(
            rounds, workers, min_time_s_per_reporting=config.min_time_s_per_reporting,
            timesteps_per_iteration=config.timesteps_per_iteration)


__all__ = ["DDPPO", "DDPPOConfig", "allreduce_mean"]
