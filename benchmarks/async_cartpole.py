"""Time to 450 on CartPole-v1: flowrl APPO and IMPALA next to RLlib 2.58 APPO.

Each run trains with 2 Ray rollout workers until the mean reward of the last 100
episodes reaches ``--reward`` (or ``--max-steps`` env steps pass) and prints its
wall time, env steps and the ratio to RLlib APPO at its tuned CartPole settings
(RLlib's ``tuned_examples/appo/cartpole_appo.py``: ``vf_loss_coeff=0.05``,
``entropy_coeff=0.0``), all in one process on one Ray session.

    python benchmarks/async_cartpole.py
    python benchmarks/async_cartpole.py --max-steps 20000 --no-rllib     # smoke
"""

from __future__ import annotations

import argparse
import time

FLOWRL = dict(env="CartPole-v1", num_workers=2, num_envs_per_worker=4, train_batch_size=200,
              lr=2e-3, seed=0, timesteps_per_iteration=5000, backend="ray")


def flowrl_run(name: str, args) -> tuple[float, int, float]:
    from flowrl.algorithms import APPO, IMPALA, APPOConfig, IMPALAConfig
    cls, config = {"APPO": (APPO, APPOConfig), "IMPALA": (IMPALA, IMPALAConfig)}[name]
    start = time.perf_counter()
    algo = cls(config(**FLOWRL))
    try:
        while True:
            r = algo.train()
            if r["episode_reward_mean"] >= args.reward or r["timesteps_total"] >= args.max_steps:
                return time.perf_counter() - start, r["timesteps_total"], r["episode_reward_mean"]
    finally:
        algo.stop()


def rllib_appo(args) -> tuple[float, int, float]:
    from ray.rllib.algorithms.appo import APPOConfig
    config = (APPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=2)
              .training(vf_loss_coeff=0.05, entropy_coeff=0.0)
              .debugging(seed=0))
    start = time.perf_counter()
    algo = config.build_algo() if hasattr(config, "build_algo") else config.build()
    try:
        while True:
            r = algo.train()
            runners = r.get("env_runners", {})
            reward = runners.get("episode_return_mean", float("nan"))
            steps = int(runners.get("num_env_steps_sampled_lifetime", 0))
            if reward >= args.reward or steps >= args.max_steps:
                return time.perf_counter() - start, steps, reward
    finally:
        algo.stop()


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--reward", type=float, default=450.0)
    p.add_argument("--max-steps", type=int, default=2_000_000)
    p.add_argument("--no-rllib", action="store_true")
    args = p.parse_args()
    import ray
    import torch
    torch.set_num_threads(1)
    ray.init(num_cpus=4, include_dashboard=False, log_to_driver=False)
    rows = [(f"flowrl {n}", *flowrl_run(n, args)) for n in ("APPO", "IMPALA")]
    if not args.no_rllib:
        rows.append(("RLlib APPO (tuned)", *rllib_appo(args)))
    base = rows[-1][1] if not args.no_rllib else float("nan")
    print(f"{'run':<20} {'wall s':>8} {'env steps':>10} {'reward':>7} {'wall / RLlib':>12}")
    for name, wall, steps, reward in rows:
        print(f"{name:<20} {wall:>8.1f} {steps:>10} {reward:>7.1f} {wall / base:>12.2f}")
    ray.shutdown()


if __name__ == "__main__":
    main()
