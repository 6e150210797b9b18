"""Pixels: a CNN policy learns MinAtar Breakout from 10x10 images with PPO.

``flowrl/MinAtarBreakout-v0`` (``pip install 'flowrl[minatar]'``) shows the game as
a ``(4, 10, 10)`` uint8 image, one channel per object kind (paddle, ball, trail,
bricks), values 0/255. An image observation gets a CNN from the model catalog:
with ``conv_filters`` unset, the default stack for 10x10 inputs (one 16-channel
3x3 conv, then 128 dense units); frames stay uint8 in batches and are scaled to
[0, 1] inside the model. A random policy scores about 0.5 per game;
``tuned_examples/ppo-minatar-breakout.yaml`` (the settings used here) reaches a
train mean of 10.

    python examples/pixels.py [--steps N]
"""

from __future__ import annotations

import argparse
import os

from flowrl.algorithms import PPO, PPOConfig


def main(argv=None) -> dict:
    small = os.environ.get("CI") == "true"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=4096 if small else 1_000_000)
    args = p.parse_args(argv)
    config = PPOConfig(env="flowrl/MinAtarBreakout-v0", num_workers=0, num_envs_per_worker=16,
                       rollout_fragment_length=128, train_batch_size=2048,
                       sgd_minibatch_size=256, num_sgd_iter=4, lr=5e-4, entropy_coeff=0.01,
                       model={"vf_share_layers": True}, seed=0)
    curve = []
    with PPO(config) as algo:
        print(algo.get_policy().model)
        while not curve or curve[-1][0] < args.steps:
            r = algo.train()
            curve.append((r["timesteps_total"], r["episode_reward_mean"]))
            if r["training_iteration"] % 10 == 0 or curve[-1][0] >= args.steps:
                print(f"{r['timesteps_total']:>9,} steps  mean score "
                      f"{r['episode_reward_mean']:5.2f}", flush=True)
        model = type(algo.get_policy().model).__name__
    return {"model": model, "curve": curve}


if __name__ == "__main__":
    main()
