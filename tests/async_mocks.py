"""Duck-typed workers for the gradient-op tests (importable by Ray workers)."""

from __future__ import annotations

import numpy as np

import flowrl
from flowrl.batch import SampleBatch


class MockWorker(flowrl.ShardHost):
    """The seeds' mock worker: weights start at -10; every gradient is all ones, so
    applying one moves each weight by +1 and ten applications reach 0."""

    def __init__(self, sample_count: int = 10):
        self.weights = np.full(4, -10.0)
        self.sample_count = sample_count
        self.samples = 0

    def shard_items(self):
        while True:
            yield self.sample()

    def sample(self) -> SampleBatch:
        self.samples += 1
        return SampleBatch(obs=np.random.default_rng(self.samples).normal(size=self.sample_count))

    def compute_gradients(self, batch):
        return np.ones(4), {"batch_count": batch.count}

    def apply_gradients(self, grads) -> None:
        self.weights = self.weights + grads

    def get_weights(self):
        return self.weights.copy()

    def set_weights(self, weights) -> None:
        self.weights = np.array(weights)


def slow_cartpole(env_config: dict):
    """CartPole whose every step sleeps ``env_config["sleep_s"]`` seconds (a fixed
    per-step cost: the env, not the machine, is the bottleneck)."""
    import time

    import gymnasium as gym

    class Slow(gym.Wrapper):
        def step(self, action):
            time.sleep(env_config.get("sleep_s", 0.001))
            return self.env.step(action)

    return Slow(gym.make("CartPole-v1"))
