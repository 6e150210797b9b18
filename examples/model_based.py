"""A small Dyna-style plan: learn a dynamics ensemble, imagine rollouts, train on them.

Each iteration of the plan:

1. the rollout workers sample real CartPole transitions;
2. the driver adds them to its data and fits the local worker's dynamics ensemble
   (K small MLPs predicting the normalized state change) a few epochs, refreshing
   the normalization statistics first;
3. ``sync_stats`` and ``sync_ensemble`` copy statistics and weights to the remote
   workers;
4. every remote worker imagines short rollouts from real start states with its
   copy of the ensemble (a random member per step), scoring and ending them with
   the env's own ``reward_fn`` / ``termination_fn`` (installed on the policies by
   ``set_policy_with_env_fn``);
5. the policy (REINFORCE) trains on the imagined batches and the new weights go
   back to the workers.

    python examples/model_based.py [--iterations 15] [--backend local|ray]
"""

from __future__ import annotations

import argparse

import gymnasium as gym
import numpy as np
import torch
from torch import nn

import flowrl
from flowrl.batch import SampleBatch, concat_samples
from flowrl.metrics import get_metrics
from flowrl.ops import (ParallelRollouts, TrainOneStep, set_policy_with_env_fn, sync_ensemble,
                        sync_stats)
from flowrl.policies import PGPolicy
from flowrl.workers import WorkerConfig, WorkerSet

SB = SampleBatch
MODEL_LOSS = "dynamics_loss"


class CartPoleWithModelFns(gym.Wrapper):
    """CartPole that exposes its reward and termination rules as vectorized functions."""

    def __init__(self, _config=None):
        super().__init__(gym.make("CartPole-v1"))

    @staticmethod
    def reward_fn(obs: np.ndarray, actions: np.ndarray, next_obs: np.ndarray) -> np.ndarray:
        return np.ones(len(obs), np.float32)

    @staticmethod
    def termination_fn(next_obs: np.ndarray) -> np.ndarray:
        x, theta = next_obs[:, 0], next_obs[:, 2]
        return (np.abs(x) > 2.4) | (np.abs(theta) > 12 * 2 * np.pi / 360)


class DynamicsEnsemble(nn.Module):
    """``K`` MLPs mapping (normalized obs, one-hot action) to the normalized ``s' - s``."""

    def __init__(self, obs_dim: int, num_actions: int, *, members: int = 3, hidden: int = 64,
                 seed: int | None = None):
        super().__init__()
        self.obs_dim, self.num_actions = obs_dim, num_actions
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.members = nn.ModuleList(
                nn.Sequential(nn.Linear(obs_dim + num_actions, hidden), nn.ReLU(),
                              nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, obs_dim))
                for _ in range(members))
        self.normalizations = {"obs_mean": np.zeros(obs_dim, np.float32),
                               "obs_std": np.ones(obs_dim, np.float32),
                               "delta_mean": np.zeros(obs_dim, np.float32),
                               "delta_std": np.ones(obs_dim, np.float32)}

    def set_norms(self, normalizations: dict) -> None:
        self.normalizations = {k: np.asarray(v, np.float32).copy()
                               for k, v in normalizations.items()}

    def _inputs(self, obs: np.ndarray, actions: np.ndarray) -> torch.Tensor:
        n = self.normalizations
        x = (obs - n["obs_mean"]) / n["obs_std"]
        a = np.eye(self.num_actions, dtype=np.float32)[actions.astype(np.int64)]
        return torch.as_tensor(np.concatenate([x, a], axis=1), dtype=torch.float32)

    def loss(self, obs, actions, next_obs) -> torch.Tensor:
        n = self.normalizations
        target = torch.as_tensor((next_obs - obs - n["delta_mean"]) / n["delta_std"],
                                 dtype=torch.float32)
        x = self._inputs(obs, actions)
        return torch.stack([((m(x) - target) ** 2).mean() for m in self.members]).mean()

    def predict(self, obs: np.ndarray, actions: np.ndarray, rng: np.random.Generator
                ) -> np.ndarray:
        n = self.normalizations
        with torch.inference_mode():
            x = self._inputs(obs, actions)
            pick = rng.integers(len(self.members), size=len(obs))
            out = torch.stack([m(x) for m in self.members])[pick, np.arange(len(obs))]
        return obs + out.numpy() * n["delta_std"] + n["delta_mean"]


class DynaPolicy(PGPolicy):
    """REINFORCE with a ``dynamics_model`` (a :class:`DynamicsEnsemble`)."""

    #: FitDynamics fits the model on (obs, action, new_obs), so batches keep new_obs.
    trains_on_new_obs = True

    def __init__(self, observation_space, action_space, *, model_lr: float = 1e-3, **kwargs):
        super().__init__(observation_space, action_space, **kwargs)
        self.dynamics_model = DynamicsEnsemble(int(np.prod(observation_space.shape)),
                                               int(action_space.n), seed=self.seed)
        self.model_optimizer = torch.optim.Adam(self.dynamics_model.parameters(), lr=model_lr)
        self.model_rng = np.random.default_rng(self.seed)


class FitDynamics:
    """Driver-side: keep every real transition; refit the ensemble's statistics and
    train it ``epochs`` epochs of minibatches. Records the last loss in
    ``info["dynamics_loss"]``; passes the batch on."""

    def __init__(self, workers, *, epochs: int = 5, minibatch: int = 128, seed: int = 0):
        self.workers, self.epochs, self.minibatch = workers, epochs, minibatch
        self.data: list[SampleBatch] = []
        self.rng = np.random.default_rng(seed)

    def __call__(self, batch: SampleBatch) -> SampleBatch:
        self.data.append(SampleBatch({k: batch[k] for k in (SB.OBS, SB.ACTIONS, SB.NEXT_OBS)}))
        data = concat_samples(self.data)
        obs, actions, next_obs = data[SB.OBS], data[SB.ACTIONS], data[SB.NEXT_OBS]
        policy = self.workers.local_worker().get_policy()
        model = policy.dynamics_model
        delta = next_obs - obs
        model.set_norms({"obs_mean": obs.mean(0), "obs_std": obs.std(0) + 1e-6,
                         "delta_mean": delta.mean(0), "delta_std": delta.std(0) + 1e-6})
        for _ in range(self.epochs):
            order = self.rng.permutation(len(obs))
            for start in range(0, len(obs), self.minibatch):
                idx = order[start:start + self.minibatch]
                loss = model.loss(obs[idx], actions[idx], next_obs[idx])
                policy.model_optimizer.zero_grad()
                loss.backward()
                policy.model_optimizer.step()
        with torch.no_grad():
            get_metrics().info[MODEL_LOSS] = float(model.loss(obs, actions, next_obs))
        return batch


def imagine(worker, horizon: int = 20, starts: int = 32) -> SampleBatch:
    """Runs on a rollout worker: imagined rollouts from real start states."""
    policy = worker.get_policy()
    real = worker.sample()
    rng = policy.model_rng
    obs = real[SB.OBS][rng.integers(real.count, size=starts)]
    alive = np.ones(starts, bool)
    steps = []
    for t in range(horizon):
        actions, extra = policy.compute_actions(obs)
        next_obs = policy.dynamics_model.predict(obs, actions, rng).astype(np.float32)
        rewards = policy.reward_fn(obs, actions, next_obs)
        done = policy.termination_fn(next_obs)
        steps.append((obs, actions, rewards, done, next_obs, extra, alive.copy()))
        alive &= ~done
        obs = next_obs
    trajectories = []
    for i in range(starts):
        rows = [s for s in steps if s[6][i]]
        cols = {SB.OBS: np.stack([s[0][i] for s in rows]),
                SB.ACTIONS: np.array([s[1][i] for s in rows]),
                SB.REWARDS: np.array([s[2][i] for s in rows], np.float32),
                SB.TERMINATEDS: np.array([s[3][i] for s in rows]),
                SB.NEXT_OBS: np.stack([s[4][i] for s in rows]),
                SB.ACTION_LOGP: np.array([s[5][SB.ACTION_LOGP][i] for s in rows]),
                SB.T: np.arange(len(rows))}
        cols[SB.TRUNCATEDS] = ~cols[SB.TERMINATEDS]
        cols[SB.TRUNCATEDS][:-1] = False  # the horizon cuts the last row if still alive
        trajectories.append(policy.postprocess_trajectory(SampleBatch(cols)))
    return concat_samples(trajectories)


class Imagine:
    """Driver-side: sync the model to the workers and gather their imagined batches."""

    def __init__(self, workers):
        self.workers = workers

    def __call__(self, _real: SampleBatch) -> SampleBatch:
        sync_stats(self.workers)
        sync_ensemble(self.workers)
        batches = self.workers.foreach_remote_worker(imagine)
        return concat_samples(batches)


def build(workers: WorkerSet) -> flowrl.LocalStream:
    return (ParallelRollouts(workers, mode="bulk_sync")
            .for_each(FitDynamics(workers), name="dyna/fit_dynamics")
            .for_each(Imagine(workers), name="dyna/imagine")
            .for_each(TrainOneStep(workers), name="dyna/train_policy")
            .for_each(lambda item: {"dynamics_loss": get_metrics().info[MODEL_LOSS],
                                    "imagined_steps": item[0].count},
                      name="dyna/report"))


def make_workers(backend: str = "local", num_workers: int = 2, seed: int = 0) -> WorkerSet:
    config = WorkerConfig(rollout_fragment_length=100, seed=seed,
                          policy_config={"hidden_sizes": (32,), "lr": 1e-2})
    workers = WorkerSet(CartPoleWithModelFns, DynaPolicy, config, num_workers=num_workers,
                        backend=backend)
    set_policy_with_env_fn(workers, "reward")
    set_policy_with_env_fn(workers, "termination")
    return workers


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=15)
    p.add_argument("--backend", default="local", choices=["local", "ray"])
    args = p.parse_args(argv)
    workers = make_workers(args.backend)
    try:
        with flowrl.Plan(build(workers), name="dyna").compile(seed=0) as run:
            results = run.take(args.iterations)
    finally:
        workers.stop()
    for i, r in enumerate(results):
        print(f"iter {i}: model loss {r['dynamics_loss']:.4f}, "
              f"{r['imagined_steps']} imagined steps")
    return {"losses": [r["dynamics_loss"] for r in results]}


if __name__ == "__main__":
    main()
