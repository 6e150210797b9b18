"""Two algorithms in one plan: a PPO policy and a DQN policy share a multi-agent CartPole.

Like RLlib's two-trainer workflow, but as one plan: one rollout stream is
duplicated; the PPO sub-plan keeps the PPO policy's rows, concatenates, standardizes
and trains that policy only (``TrainOneStep(policies=["ppo"])``); the DQN sub-plan
stores the DQN policy's rows in its replay buffer and, once it holds
``learning_starts`` rows, replays minibatches to train the DQN policy only and
updates its target network. ``Concurrently`` runs both sub-plans.

Agents are mapped ``agent % 2``: even agents play PPO, odd ones DQN (any on-policy
policy class works in place of PPO; the seeds' test uses PG).

    python examples/multi_agent_two_trainers.py [--iterations 20] [--backend local|ray]
"""

from __future__ import annotations

import argparse

import gymnasium as gym

import flowrl
from flowrl.ops import (ConcatBatches, LearningStarts, ParallelRollouts, Replay,
                        SelectExperiences, StandardizeFields, StandardMetricsReporting,
                        StoreToReplayBuffer, TrainOneStep, UpdateTargetNetwork)
from flowrl.policies import DQNPolicy, PPOPolicy
from flowrl.replay import ReplayBuffer
from flowrl.workers import PolicySpec, WorkerConfig, WorkerSet, make_multi_agent


def build(workers: WorkerSet, *, onpolicy_id: str = "ppo", dqn_id: str = "dqn",
          train_batch_size: int = 400, num_sgd_iter: int = 1, sgd_minibatch_size: int = 0,
          learning_starts: int = 200, replay_batch_size: int = 64,
          target_update_freq: int = 500, seed: int = 0) -> flowrl.LocalStream:
    """The plan: results of both sub-plans, reported by StandardMetricsReporting."""
    onpolicy_rollouts, dqn_rollouts = ParallelRollouts(workers, mode="bulk_sync").duplicate(2)

    onpolicy_op = (onpolicy_rollouts
                   .for_each(SelectExperiences([onpolicy_id]), name=f"{onpolicy_id}/select")
                   .combine(ConcatBatches(min_batch_size=train_batch_size,
                                          count_steps_by="agent_steps"),
                            name=f"{onpolicy_id}/concat_batches")
                   .for_each(StandardizeFields(["advantages"]), name=f"{onpolicy_id}/standardize")
                   .for_each(TrainOneStep(workers, policies=[onpolicy_id],
                                          num_sgd_iter=num_sgd_iter,
                                          sgd_minibatch_size=sgd_minibatch_size, seed=seed),
                             name=f"{onpolicy_id}/train"))

    buffers = {dqn_id: ReplayBuffer(capacity=50_000, seed=seed)}
    store = StoreToReplayBuffer(local_buffer=buffers)
    store_op = (dqn_rollouts
                .for_each(SelectExperiences([dqn_id]), name=f"{dqn_id}/select")
                .for_each(store, name=f"{dqn_id}/store")
                .filter(LearningStarts(store, learning_starts), name=f"{dqn_id}/learning_starts"))
    replay_op = (Replay(local_buffer=buffers, batch_size=replay_batch_size, name=f"{dqn_id}/replay")
                 .for_each(TrainOneStep(workers, policies=[dqn_id]), name=f"{dqn_id}/train")
                 .for_each(UpdateTargetNetwork(workers, target_update_freq, policies=[dqn_id]),
                           name=f"{dqn_id}/update_target"))
    dqn_op = flowrl.Concurrently([store_op, replay_op], mode="round_robin", output_indexes=[1],
                                 round_robin_weights=[1, 4], name=f"{dqn_id}/concurrently")

    train_op = flowrl.Concurrently([onpolicy_op, dqn_op], mode="async", name="two_trainers")
    return StandardMetricsReporting(train_op, workers, timesteps_per_iteration=400)


def make_workers(*, num_agents: int = 4, onpolicy_class=PPOPolicy, onpolicy_id: str = "ppo",
                 dqn_id: str = "dqn", num_workers: int = 1, backend: str = "local",
                 seed: int = 0) -> WorkerSet:
    env = gym.make("CartPole-v1")
    obs, act = env.observation_space, env.action_space
    policies = {
        onpolicy_id: PolicySpec(onpolicy_class, obs, act, {"hidden_sizes": (64,), "lr": 3e-3}),
        dqn_id: PolicySpec(DQNPolicy, obs, act, {
            "hidden_sizes": (64,), "hiddens": (64,), "gamma": 0.95, "n_step": 3, "lr": 1e-3,
            "exploration_config": {"epsilon_timesteps": 5_000}}),
    }
    config = WorkerConfig(rollout_fragment_length=50, seed=seed, policies=policies,
                          policy_mapping_fn=lambda agent, episode: (onpolicy_id, dqn_id)[agent % 2])
    return WorkerSet(make_multi_agent("CartPole-v1", num_agents), None, config,
                     num_workers=num_workers, backend=backend)


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iterations", type=int, default=20)
    p.add_argument("--backend", default="local", choices=["local", "ray"])
    args = p.parse_args(argv)
    workers = make_workers(backend=args.backend)
    try:
        with flowrl.Plan(build(workers), name="two_trainers").compile(seed=0) as run:
            for _ in range(args.iterations):
                r = run.take(1)[0]
                print(f"steps {r['timesteps_total']:6d}  reward {r['episode_reward_mean']:7.1f}  "
                      f"per policy {r['policy_reward_mean']}")
    finally:
        workers.stop()
    return r


if __name__ == "__main__":
    main()
