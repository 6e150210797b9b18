"""Memory: PPO with an LSTM balances a pole it sees without velocities.

``flowrl/StatelessCartPole-v1`` is CartPole-v1 observing only the cart position
and the pole angle, so where the pole is heading must be inferred from recent
observations. ``model={"use_lstm": True, ...}`` wraps the MLP torso in an LSTM
that carries state from step to step; the workers record that state in the
batches (``state_in_*``, ``prev_actions``, ``prev_rewards``) and PPO learns on
sequences of up to ``max_seq_len`` steps. The same config without the LSTM is
trained alongside for comparison: it stays far below.

The settings are those of ``tuned_examples/ppo-lstm-stateless-cartpole.yaml``
(a train mean of 450 in about 500k env steps); ``--steps`` bounds each run.

    python examples/lstm_stateless_cartpole.py [--steps N]
"""

from __future__ import annotations

import argparse
import os

from flowrl.algorithms import PPO, PPOConfig

LSTM = {"use_lstm": True, "lstm_cell_size": 64, "max_seq_len": 16, "fcnet_hiddens": [64],
        "lstm_use_prev_action": True, "lstm_use_prev_reward": True}
NO_LSTM = {"fcnet_hiddens": [64]}


def train(model: dict, steps: int, goal: float = 450.0) -> list[tuple[int, float]]:
    """PPO on StatelessCartPole with ``model`` until ``goal`` or ``steps`` env steps;
    the curve as ``(env steps, 100-episode train mean)`` per iteration."""
    config = PPOConfig(env="flowrl/StatelessCartPole-v1", num_workers=0,
                       num_envs_per_worker=16, rollout_fragment_length=64,
                       train_batch_size=2048, sgd_minibatch_size=512, num_sgd_iter=6,
                       lr=1e-3,
                       # the value head shares the LSTM: keep its loss from swamping
                       # the policy gradient there
                       vf_loss_coeff=1e-4, model=model, seed=0)
    curve = []
    with PPO(config) as algo:
        while not curve or (curve[-1][0] < steps and curve[-1][1] < goal):
            r = algo.train()
            curve.append((r["timesteps_total"], r["episode_reward_mean"]))
            if r["training_iteration"] % 10 == 0 or curve[-1][1] >= goal:
                print(f"  {r['timesteps_total']:>8,} steps  mean return "
                      f"{r['episode_reward_mean']:6.1f}", flush=True)
    return curve


def main(argv=None) -> dict:
    small = os.environ.get("CI") == "true"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=6144 if small else 1_000_000)
    args = p.parse_args(argv)
    curves = {}
    for name, model in (("lstm", LSTM), ("no lstm", NO_LSTM)):
        print(f"{name}:")
        curves[name] = train(model, args.steps)
    for name, curve in curves.items():
        print(f"{name:>8}: best mean return {max(m for _, m in curve):6.1f} "
              f"in {curve[-1][0]:,} env steps")
    return curves


if __name__ == "__main__":
    main()
