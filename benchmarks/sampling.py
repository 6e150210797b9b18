"""RolloutWorker.sample() throughput against a bare loop over the same env and forward.

Both sides step one gymnasium ``SyncVectorEnv`` (SAME_STEP autoreset) of
``--num-envs`` envs with one batched ``policy.compute_actions`` per step, in this
process, with one torch thread. The bare loop stores nothing and postprocesses
nothing; the worker also records every column, tracks episodes and computes GAE.
Prints env steps/s (median of ``--reps`` timed repetitions) and the ratio.

    python benchmarks/sampling.py --env CartPole-v1 --num-envs 8 --fragment 200 --reps 7
"""

from __future__ import annotations

import argparse
import statistics
import time

import gymnasium as gym
import numpy as np
import torch

from flowrl.policies import PPOPolicy
from flowrl.workers import RolloutWorker


def raw_loop(env: str, num_envs: int, steps: int, policy, seed: int) -> float:
    venv = gym.vector.SyncVectorEnv([lambda: gym.make(env)] * num_envs,
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs, _ = venv.reset(seed=seed)
    start = time.perf_counter()
    for _ in range(steps):
        actions, _ = policy.compute_actions(obs)
        obs, *_ = venv.step(actions)
    elapsed = time.perf_counter() - start
    venv.close()
    return steps * num_envs / elapsed


def worker_loop(worker: RolloutWorker) -> float:
    start = time.perf_counter()
    batch = worker.sample()
    return batch.count / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="CartPole-v1")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--fragment", type=int, default=200)
    parser.add_argument("--reps", type=int, default=7)
    args = parser.parse_args()
    torch.set_num_threads(1)

    worker = RolloutWorker(args.env, policy=PPOPolicy, num_envs=args.num_envs,
                           rollout_fragment_length=args.fragment, seed=0)
    policy = worker.get_policy()
    worker.sample()  # warm-up: buffers, torch kernels
    raw_loop(args.env, args.num_envs, args.fragment, policy, seed=0)

    raw, flow = [], []
    for rep in range(args.reps):  # interleave so drifting machine load hits both alike
        raw.append(raw_loop(args.env, args.num_envs, args.fragment, policy, seed=rep))
        flow.append(worker_loop(worker))
    raw_med, flow_med = statistics.median(raw), statistics.median(flow)
    print(f"env={args.env} num_envs={args.num_envs} fragment={args.fragment} reps={args.reps}")
    print(f"raw loop          : {raw_med:10.0f} env steps/s  (min {min(raw):.0f}, max {max(raw):.0f})")
    print(f"RolloutWorker     : {flow_med:10.0f} env steps/s  (min {min(flow):.0f}, max {max(flow):.0f})")
    print(f"ratio worker/raw  : {flow_med / raw_med:10.2f}x")
    worker.stop()


if __name__ == "__main__":
    main()
