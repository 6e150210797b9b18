"""Multi-agent sampling throughput against single-agent vector sampling.

Agent steps per second of a RolloutWorker on a 10-agent CartPole
(``make_multi_agent``: 10 independent copies, 2 policies, agents mapped
``agent % 2``) against a RolloutWorker on a 10-env CartPole vector env, both with
the same network (PPO's 64x64 actor-critic). The multi-agent sampler steps all
agents of all its env copies as one batched forward per policy per step; the
target is at least 0.7x the vector sampler's rate per agent step.

It runs the multi-agent worker with 1 env copy (10 agent slots, as many as the
vector env; but an agent that finished waits for the whole episode to end, so
on average about half the slots act, and each step runs 2 forwards instead of
1) and with ``--copies`` env copies (by default 4: each policy's forward then
gets about as many rows as the vector sampler's one forward).

    python benchmarks/multi_agent_sampling.py [--fragments 20] [--repeats 3]

Prints the rates (best of ``repeats``, interleaved) and the ratios.
"""

from __future__ import annotations

import argparse
import time

import torch

from flowrl.policies import PPOPolicy
from flowrl.workers import RolloutWorker, make_multi_agent


def rate(worker: RolloutWorker, fragments: int) -> float:
    """Agent steps per second over ``fragments`` calls of ``sample()`` (after one warm-up)."""
    worker.sample()
    steps, start = 0, time.perf_counter()
    for _ in range(fragments):
        steps += worker.sample().agent_steps()
    return steps / (time.perf_counter() - start)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--agents", type=int, default=10)
    parser.add_argument("--fragment", type=int, default=100)
    parser.add_argument("--fragments", type=int, default=20)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--copies", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = args.agents
    single = RolloutWorker("CartPole-v1", policy=PPOPolicy, num_envs=n,
                           rollout_fragment_length=args.fragment, seed=0)
    multi = {copies: RolloutWorker(make_multi_agent("CartPole-v1", n),
                                   policies={"p0": PPOPolicy, "p1": PPOPolicy},
                                   policy_mapping_fn=lambda agent, episode: f"p{agent % 2}",
                                   num_envs=copies, rollout_fragment_length=args.fragment,
                                   seed=0)
             for copies in (1, args.copies)}
    best_single = 0.0
    best = {copies: 0.0 for copies in multi}
    for _ in range(args.repeats):  # interleaved, so load changes hit all alike
        best_single = max(best_single, rate(single, args.fragments))
        for copies, worker in multi.items():
            best[copies] = max(best[copies], rate(worker, args.fragments))
    single.stop()
    for worker in multi.values():
        worker.stop()
    print(f"single-agent vector sampling ({n} envs, 1 policy): {best_single:10.0f} agent steps/s")
    for copies, r in best.items():
        print(f"multi-agent ({n} agents x {copies} env copies, 2 policies): {r:10.0f} agent steps/s"
              f"  ratio {r / best_single:.2f}x (target >= 0.7x)")


if __name__ == "__main__":
    main()
