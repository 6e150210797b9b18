"""DD-PPO against PPO on CartPole-v1 with 2 Ray workers: env steps/s and time to a reward.

PPO trains on the driver (one learner; workers only sample); DD-PPO trains on the
workers, all-reducing gradients over gloo. Both sample 2 workers x 4 envs x 128
steps per round and run 6 epochs of 128-row minibatches on it. Each runs until
``episode_reward_mean >= --target`` or ``--max-time`` seconds.

    python benchmarks/ddppo_cartpole.py [--target 450] [--max-time 600]

Prints per algorithm: env steps/s, time and env steps to the target, and the
ratios DD-PPO / PPO.
"""

from __future__ import annotations

import argparse
import time

import ray

from flowrl.algorithms import DDPPO, PPO, DDPPOConfig, PPOConfig

COMMON = dict(env="CartPole-v1", num_workers=2, num_envs_per_worker=4,
              rollout_fragment_length=128, sgd_minibatch_size=128, num_sgd_iter=6, seed=0,
              backend="ray")


def race(algo, target: float, max_time: float) -> dict:
    start = time.perf_counter()
    reached = None
    r = {"timesteps_total": 0}
    while time.perf_counter() - start < max_time:
        r = algo.train()
        if r["episode_reward_mean"] >= target:
            reached = time.perf_counter() - start
            break
    wall = time.perf_counter() - start
    algo.stop()
    return {"steps_per_s": r["timesteps_total"] / wall, "time_to_target": reached,
            "steps": r["timesteps_total"], "reward": r.get("episode_reward_mean")}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--target", type=float, default=450.0)
    p.add_argument("--max-time", type=float, default=600.0)
    args = p.parse_args()
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    out = {
        "ppo": race(PPO(PPOConfig(train_batch_size=1024, **COMMON)), args.target, args.max_time),
        "ddppo": race(DDPPO(DDPPOConfig(**COMMON)), args.target, args.max_time),
    }
    for name, m in out.items():
        ttt = f"{m['time_to_target']:.1f} s" if m["time_to_target"] else "not reached"
        print(f"{name:6s}: {m['steps_per_s']:8.0f} env steps/s, to {args.target:g}: {ttt} "
              f"({m['steps']} steps, last reward {m['reward']:.1f})")
    print(f"ratio ddppo/ppo env steps/s: {out['ddppo']['steps_per_s'] / out['ppo']['steps_per_s']:.2f}x")
    if out["ppo"]["time_to_target"] and out["ddppo"]["time_to_target"]:
        print(f"ratio ddppo/ppo time to target: "
              f"{out['ddppo']['time_to_target'] / out['ppo']['time_to_target']:.2f}x")


if __name__ == "__main__":
    main()
