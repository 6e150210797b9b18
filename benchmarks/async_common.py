"""Shared pieces of the async benchmarks (``impala_throughput.py``, ``apex_throughput.py``,
``async_cartpole.py``): the fixed-cost env, a per-child Ray start, RLlib result
look-ups and the benchmark's own view of flowrl's completed episodes.

Imports only the standard library at module level: the harness parent imports
this module too and should not pay for torch or Ray.
"""

from __future__ import annotations

import time
from typing import Any, Callable


def sleepy_cartpole(env_config: dict):
    """CartPole-v1 whose ``step`` first sleeps ``env_config["sleep_ms"]`` (default 1 ms).

    With one env per worker every vector step pays the sleep, so sampling is
    bound by the number of workers rather than by the machine's cores.
    """
    import gymnasium as gym

    sleep_s = float(env_config.get("sleep_ms", 1.0)) / 1000.0

    class Sleepy(gym.Wrapper):
        def step(self, action):
            time.sleep(sleep_s)
            return self.env.step(action)

    return Sleepy(gym.make("CartPole-v1"))


def start_ray(num_cpus: int) -> float:
    """A fresh local Ray for this child only (never an existing cluster); returns
    the seconds ``ray.init`` took. Also pins torch to one thread in this process."""
    import ray
    import torch
    torch.set_num_threads(1)
    t = time.time()
    ray.init(address="local", num_cpus=int(num_cpus), include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    return time.time() - t


def find_metric(result: dict, key: str, default: float = 0.0) -> float:
    """The first numeric ``key`` anywhere in RLlib's nested result dict (breadth
    first; its place moves between RLlib versions), ``default`` when absent."""
    stack: list[Any] = [result]
    while stack:
        d = stack.pop(0)
        if key in d and isinstance(d[key], (int, float)):
            return d[key]
        stack += [v for v in d.values() if isinstance(v, dict)]
    return default


def spy_episodes(algo, on_returns: Callable[[list[float]], None]) -> list[bool]:
    """Hand every completed episode's return that flowrl's reporting drains from its
    workers to ``on_returns`` as well (wraps ``algo.workers.foreach_worker``).

    Returns a one-element list that turns True once an episode was seen, so a
    caller can check that the spy still matches how flowrl collects episodes.
    """
    seen = [False]
    workers = algo.workers
    original = workers.foreach_worker

    def spy(fn, *args, **kwargs):
        out = original(fn, *args, **kwargs)
        for per_worker in out:
            if (isinstance(per_worker, list) and per_worker and isinstance(per_worker[0], dict)
                    and "episode_reward" in per_worker[0]):
                seen[0] = True
                on_returns([float(e["episode_reward"]) for e in per_worker])
        return out

    workers.foreach_worker = spy
    return seen


def rllib_episode_callback():
    """An RLlib callback class that logs each finished episode's return as the
    ``bench_episode_returns`` item series (read back with :func:`rllib_returns`)."""
    from ray.rllib.callbacks.callbacks import RLlibCallback

    class EpisodeReturns(RLlibCallback):
        def on_episode_end(self, *, episode, metrics_logger=None, **kwargs):
            metrics_logger.log_value("bench_episode_returns", episode.get_return(),
                                     reduce="item_series")

    return EpisodeReturns


def rllib_returns(result: dict) -> list[float]:
    """The episode returns :func:`rllib_episode_callback` logged in this iteration."""
    return [float(x) for x in (result.get("env_runners", {}).get("bench_episode_returns")
                               or [])]


def build_rllib(config):
    """``config.build_algo()`` (RLlib >= 2.40), else ``config.build()``."""
    return config.build_algo() if hasattr(config, "build_algo") else config.build()
