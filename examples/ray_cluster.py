"""Train on a Ray cluster by its address.

Start a cluster first (``ray start --head`` on one machine, ``ray start
--address=HEAD:6379`` on the others), then point this script at the head:

    python examples/ray_cluster.py --address HEAD_IP:6379 [--workers N] [--iters N]

(or set ``RAY_ADDRESS``). The script connects with ``ray.init(address=...)``;
flowrl then places one rollout-worker actor per ``num_workers`` wherever the
cluster has CPUs, builds the same PPO plan as on a laptop, and runs it. It prints
the nodes, where each worker landed, and the training results.
"""

from __future__ import annotations

import argparse
import os
import socket

import ray

from flowrl.algorithms import PPO, PPOConfig


def where_am_i(worker) -> str:
    """Runs on each rollout worker (``foreach_worker``): its host and process."""
    return f"worker {worker.worker_index} on {socket.gethostname()} pid {os.getpid()}"


def main(argv=None) -> list:
    small = os.environ.get("CI") == "true"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--address", default=os.environ.get("RAY_ADDRESS"),
                   help="the head node's address, host:port (default: $RAY_ADDRESS)")
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--iters", type=int, default=1 if small else 30)
    args = p.parse_args(argv)
    if not args.address:
        p.error("give --address HOST:PORT of the cluster's head (or set RAY_ADDRESS)")

    ray.init(address=args.address, log_to_driver=False)        # connect; start nothing
    try:
        print(f"connected to {args.address}: {len(ray.nodes())} node(s), "
              f"{ray.cluster_resources().get('CPU', 0):.0f} CPUs")
        config = PPOConfig(env="CartPole-v1", backend="ray", num_workers=args.workers,
                           num_cpus_per_worker=0.5, seed=0,
                           num_envs_per_worker=2 if small else 8,
                           rollout_fragment_length=32 if small else 64,
                           train_batch_size=128 if small else 2048,
                           sgd_minibatch_size=64 if small else 256,
                           num_sgd_iter=2 if small else 6)
        results = []
        with PPO(config) as algo:
            for line in algo.workers.foreach_worker(where_am_i)[1:]:
                print(line)
            for _ in range(args.iters):
                r = algo.train()
                results.append(r)
                print(f"iter {r['training_iteration']:3d}  steps {r['timesteps_total']:6d}  "
                      f"mean return {r['episode_reward_mean']:6.1f}")
    finally:
        ray.shutdown()                                           # disconnects this driver only
    return results


if __name__ == "__main__":
    main()
