"""What the learning benchmarks' child runs share: the one 100-episode window every
system is judged by, the training loops that feed it, and the glue that reads episodes
and figures out of flowrl and RLlib.

- :class:`Tracker` keeps the mean return of the last 100 completed training episodes
  and the stopping rule (target reached, or the step or time budget spent), checked
  after each training iteration, the same way for every system.
- :func:`train_flowrl` and :func:`train_rllib` run an algorithm's ``train()`` until the
  tracker says stop; flowrl's episodes reach the tracker through :func:`spy_episodes`,
  RLlib's through :func:`rllib_episode_callback`.
- :func:`plain_batch` ends a fragment of the hand-written sampling loops that the
  sampling benchmarks set beside flowrl: GAE and the train batch.

Stdlib-only at import (torch, Ray and flowrl are imported inside the functions), so
a script's parent process pays nothing for it.
"""

from __future__ import annotations

import collections
import math
import time
from typing import Any, Callable

import harness


class EpisodeWindow:
    """The returns of the last ``size`` completed episodes and how many there were.

    >>> w = EpisodeWindow(2, [1.0]); w.add_returns([2.0, 4.0]); w.score(), w.episodes
    (3.0, 2)
    """

    def __init__(self, size: int, returns=(), episodes: int = 0):
        self.returns: collections.deque[float] = collections.deque(returns, maxlen=size)
        self.episodes = episodes

    def add_returns(self, returns) -> None:
        for r in returns:
            self.returns.append(float(r))
            self.episodes += 1

    def score(self) -> float:
        """Their mean (NaN before the first)."""
        return sum(self.returns) / len(self.returns) if self.returns else math.nan


class Tracker:
    """The benchmark's own 100-episode train-mean window and stopping rule."""

    def __init__(self, target: float, max_steps: int, max_seconds: float):
        self.target, self.max_steps, self.max_seconds = target, max_steps, max_seconds
        self.window: collections.deque[float] = collections.deque(maxlen=100)
        self.episodes = 0
        self.iterations = 0
        self.t_start = self.first_result = None
        self.reached_at = None  # (train seconds, env steps, seconds from process start)
        self.env_steps = 0
        self.train_s = 0.0

    def start(self) -> None:
        self.ready_s = harness.since_start()
        self.t_start = time.time()

    def add_returns(self, returns) -> None:
        for r in returns:
            self.window.append(float(r))
            self.episodes += 1

    def mean(self) -> float:
        return sum(self.window) / len(self.window) if len(self.window) == 100 else math.nan

    def after_iteration(self, env_steps: int) -> bool:
        """Record one finished iteration; True when training should stop."""
        now = time.time()
        self.iterations += 1
        if self.first_result is None:
            self.first_result = harness.since_start()
        self.env_steps, self.train_s = int(env_steps), now - self.t_start
        if self.mean() >= self.target:
            self.reached_at = (self.train_s, self.env_steps, harness.since_start())
            return True
        return self.env_steps >= self.max_steps or self.train_s >= self.max_seconds

    def result(self, **extra) -> dict:
        reached = self.reached_at is not None
        train_s, steps, from_start = (self.reached_at if reached
                                      else (self.train_s, self.env_steps, math.nan))
        out = {"reached": reached, "startup_s": self.ready_s,
               "first_result_s": self.first_result, "train_s": train_s,
               "from_start_s": from_start, "env_steps": steps,
               "steps_per_s": steps / train_s if train_s > 0 else math.nan,
               "final_mean": self.mean(), "episodes": self.episodes,
               "iterations": self.iterations}
        out.update(extra)
        sgd = extra.get("sgd_steps")
        if sgd is not None and self.env_steps:
            out["sgd_per_1k"] = 1000.0 * sgd / self.env_steps
        return out


#: Columns of the start-up breakdown table (:func:`harness.print_groups`).
STARTUP_COLUMNS = [("imports s", "imports_s", "{:.2f}"), ("ray.init s", "ray_init_s", "{:.2f}"),
                   ("build s", "build_s", "{:.2f}"), ("start-up s", "startup_s", "{:.2f}")]


def count_steps(optimizers) -> list[int]:
    """A one-element list that every ``step()`` of ``optimizers`` increments."""
    counter = [0]

    def hook(*_):
        counter[0] += 1

    for opt in optimizers:
        opt.register_step_post_hook(hook)
    return counter


def n_params(module) -> int:
    return sum(p.numel() for p in module.parameters())


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
    workers to ``on_returns`` as well (wraps ``algo.workers.foreach_worker`` and
    ``foreach_worker_async``, whichever the reporting calls).

    Returns a one-element list that turns True once an episode was seen, so a
    caller can check that the spy still matches how flowrl collects episodes.
    """
    seen = [False]
    inside_async = [False]  # the async form may call the sync one: count once
    workers = algo.workers
    original, original_async = workers.foreach_worker, workers.foreach_worker_async

    def record(out):
        for per_worker in out:
            if (isinstance(per_worker, list) and per_worker and isinstance(per_worker[0], dict)
                    and "episode_reward" in per_worker[0]):
                seen[0] = True
                on_returns([float(e["episode_reward"]) for e in per_worker])
        return out

    def spy(fn, *args, **kwargs):
        out = original(fn, *args, **kwargs)
        return out if inside_async[0] else record(out)

    async def spy_async(fn, *args, **kwargs):
        inside_async[0] = True
        try:
            out = await original_async(fn, *args, **kwargs)
        finally:
            inside_async[0] = False
        return record(out)

    workers.foreach_worker = spy
    workers.foreach_worker_async = spy_async
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
    items = result.get("env_runners", {}).get("bench_episode_returns")
    # An iteration in which no episode ended reduces the series to a bare NaN.
    return [float(x) for x in items] if isinstance(items, (list, tuple)) else []


def build_rllib(config):
    """``config.build_algo()`` (RLlib >= 2.40), else ``config.build()``."""
    return config.build_algo() if hasattr(config, "build_algo") else config.build()


def rllib_env_steps(result: dict) -> int:
    """Env steps RLlib's env runners sampled so far (0 before the first report)."""
    return result.get("env_runners", {}).get("num_env_steps_sampled_lifetime", 0)


def train_flowrl(algo, tracker: Tracker) -> None:
    """Train ``algo`` until ``tracker`` says stop, then stop it. Every finished episode's
    return reaches the tracker through :func:`spy_episodes`; a run that reports
    episodes the spy did not see fails rather than judge a wrong window."""
    seen = spy_episodes(algo, tracker.add_returns)
    tracker.start()
    try:
        while True:
            r = algo.train()
            if r.get("episodes_total", 0) > 0 and not seen[0]:
                raise RuntimeError("flowrl reported episodes the benchmark did not see; "
                                   "training.spy_episodes needs updating")
            if tracker.after_iteration(r["timesteps_total"]):
                break
    finally:
        algo.stop()


def train_rllib(algo, tracker: Tracker,
                env_steps: Callable[[dict], float] = rllib_env_steps) -> None:
    """Train an RLlib ``algo`` (built with :func:`rllib_episode_callback`) until
    ``tracker`` says stop, then stop it; ``env_steps`` reads the steps from a result."""
    tracker.start()
    try:
        while True:
            r = algo.train()
            tracker.add_returns(rllib_returns(r))
            if tracker.after_iteration(env_steps(r)):
                break
    finally:
        algo.stop()


def plain_batch(obs, actions, rewards, dones, logp, values, last_value, *, gamma: float,
                lam: float) -> dict:
    """A hand-written loop's train batch from its ``(T, N)`` step buffers (copied, so
    the loop may refill them): GAE advantages (``dones`` cut the bootstrap; ``last_value``
    is ``V`` of the observation after step ``T - 1``) and value targets."""
    import numpy as np
    T, N = rewards.shape
    adv = np.empty((T, N), np.float32)
    running = np.zeros(N, np.float32)
    for t in reversed(range(T)):
        next_v = last_value if t == T - 1 else values[t + 1]
        nonterminal = ~dones[t]
        delta = rewards[t] + gamma * next_v * nonterminal - values[t]
        running = delta + gamma * lam * nonterminal * running
        adv[t] = running
    return {"obs": obs.copy(), "actions": actions.copy(), "rewards": rewards.copy(),
            "dones": dones.copy(), "logp": logp.copy(), "values": values.copy(),
            "advantages": adv, "value_targets": adv + values}
