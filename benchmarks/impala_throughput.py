"""IMPALA env steps/s against the number of workers, flowrl next to RLlib 2.58.

The env is CartPole with a fixed sleep per vector step (``--sleep-ms``, default 1 ms),
so the workers, not the driver's cores, bound sampling: steps/s should grow
linearly with workers until the learner saturates. For each worker count it runs,
at equal settings (``rollout_fragment_length``, ``train_batch_size``, envs per
worker, learner queue), in one process on one Ray session:

- flowrl IMPALA, gathering directly on the driver;
- flowrl IMPALA with tree aggregation (``num_aggregation_workers``);
- RLlib IMPALA and APPO (when ``ray[rllib]`` is installed and not ``--no-rllib``).

Each measurement warms up for ``--warmup`` seconds once sampling has begun (RLlib's
env runners take a while to start), then counts env steps sampled over
``--seconds`` of wall time. It prints steps/s, flowrl's learner utilization
(the learner thread's busy fraction) and the ratio flowrl / RLlib.

    python benchmarks/impala_throughput.py                    # 2, 4, 8 workers
    python benchmarks/impala_throughput.py --workers 2 --seconds 5 --warmup 2   # smoke
"""

from __future__ import annotations

import argparse
import os
import time


def sleepy_cartpole(env_config: dict):
    """CartPole whose step sleeps ``sleep_ms`` (one env per worker: one vector step)."""
    import gymnasium as gym

    class Sleepy(gym.Wrapper):
        def step(self, action):
            time.sleep(env_config.get("sleep_ms", 1.0) / 1000.0)
            return self.env.step(action)

    return Sleepy(gym.make("CartPole-v1"))


def flowrl_impala(workers: int, aggregators: int, args) -> tuple[float, float]:
    from flowrl.algorithms import IMPALA, IMPALAConfig
    config = IMPALAConfig(env=sleepy_cartpole, env_config={"sleep_ms": args.sleep_ms},
                          num_workers=workers, num_envs_per_worker=1,
                          rollout_fragment_length=args.fragment,
                          train_batch_size=args.train_batch, num_cpus_per_worker=0,
                          num_aggregation_workers=aggregators, backend="ray", seed=0)
    algo = IMPALA(config)
    try:
        end = time.perf_counter() + args.warmup
        while time.perf_counter() < end:
            algo.train()
        start_steps = algo.metrics.counters["num_steps_sampled"]
        learner = algo.learner_thread
        busy0, t0 = learner.busy_s, time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            algo.train()
        wall = time.perf_counter() - t0
        steps = algo.metrics.counters["num_steps_sampled"] - start_steps
        return steps / wall, (learner.busy_s - busy0) / wall
    finally:
        algo.stop()


def _find(result: dict, key: str) -> int:
    """The first ``key`` anywhere in RLlib's nested result dict (its place moves
    between RLlib versions and API stacks); 0 when absent."""
    stack = [result]
    while stack:
        d = stack.pop(0)
        if key in d and isinstance(d[key], (int, float)):
            return int(d[key])
        stack += [v for v in d.values() if isinstance(v, dict)]
    return 0


def rllib_algo(name: str, workers: int, args) -> float:
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.tune.registry import register_env
    register_env("sleepy_cartpole", sleepy_cartpole)
    cls = {"IMPALA": IMPALAConfig, "APPO": APPOConfig}[name]
    config = (cls().environment("sleepy_cartpole", env_config={"sleep_ms": args.sleep_ms})
              .env_runners(num_env_runners=workers, num_envs_per_env_runner=1,
                           rollout_fragment_length=args.fragment, num_cpus_per_env_runner=0)
              .training(train_batch_size_per_learner=args.train_batch)
              .reporting(min_time_s_per_iteration=0.5)
              .debugging(seed=0))
    algo = config.build_algo() if hasattr(config, "build_algo") else config.build()

    def sampled(result: dict) -> int:
        return _find(result, "num_env_steps_sampled_lifetime")

    try:
        result = algo.train()
        deadline = time.perf_counter() + 600
        while not sampled(result):  # RLlib's env runners take a while to start sampling
            if time.perf_counter() > deadline:
                raise RuntimeError(f"RLlib {name} sampled nothing in 600 s")
            result = algo.train()
        end = time.perf_counter() + args.warmup
        while time.perf_counter() < end:
            result = algo.train()
        start_steps, t0 = sampled(result), time.perf_counter()
        while time.perf_counter() - t0 < args.seconds:
            result = algo.train()
        wall = time.perf_counter() - t0
        return (sampled(result) - start_steps) / wall
    finally:
        algo.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--workers", type=int, nargs="+", default=[2, 4, 8])
    p.add_argument("--aggregators", type=int, default=0,
                   help="aggregators for the tree-aggregation runs (default: workers // 4, >= 1)")
    p.add_argument("--seconds", type=float, default=30.0)
    p.add_argument("--warmup", type=float, default=10.0)
    p.add_argument("--sleep-ms", type=float, default=1.0)
    p.add_argument("--fragment", type=int, default=50)
    p.add_argument("--train-batch", type=int, default=500)
    p.add_argument("--no-rllib", action="store_true")
    args = p.parse_args()

    import ray
    import torch
    torch.set_num_threads(1)
    ray.init(num_cpus=max(args.workers) + 4, include_dashboard=False, log_to_driver=False)
    have_rllib = not args.no_rllib
    if have_rllib:
        try:
            import ray.rllib  # noqa: F401
        except ImportError:
            have_rllib = False
            print("ray[rllib] is not installed: flowrl only")
    print(f"env: CartPole + {args.sleep_ms:g} ms/step, fragment {args.fragment}, train batch "
          f"{args.train_batch}, {args.seconds:g} s measured after {args.warmup:g} s warm-up, "
          f"{os.cpu_count()} cores")
    header = (f"{'workers':>7} {'flowrl':>9} {'util':>5} {'flowrl+agg':>10} {'util':>5} "
              f"{'RLlib IMPALA':>12} {'RLlib APPO':>10} {'ratio':>6}")
    print(header)
    for n in args.workers:
        direct, util = flowrl_impala(n, 0, args)
        aggs = args.aggregators or max(1, n // 4)
        tree, tree_util = flowrl_impala(n, min(aggs, n), args)
        r_impala = rllib_algo("IMPALA", n, args) if have_rllib else float("nan")
        r_appo = rllib_algo("APPO", n, args) if have_rllib else float("nan")
        ratio = direct / r_impala if r_impala == r_impala and r_impala > 0 else float("nan")
        print(f"{n:>7} {direct:>9.0f} {util:>5.2f} {tree:>10.0f} {tree_util:>5.2f} "
              f"{r_impala:>12.0f} {r_appo:>10.0f} {ratio:>6.2f}", flush=True)
    print("steps/s = env steps sampled per second; util = flowrl learner thread busy fraction; "
          "ratio = flowrl (direct) / RLlib IMPALA")
    ray.shutdown()


if __name__ == "__main__":
    main()
