"""DQN on CartPole-v1 to a 100-episode mean return of 450: flowrl vs Stable-Baselines3 vs RLlib 2.x.

Systems (each seed of each in a fresh process, interleaved, on an idle CPU; see
``benchmarks/harness.py``); one torch thread everywhere:

- ``flowrl``: ``DQN`` on the in-process backend: double Q, dueling, 3-step
  returns, prioritized replay, 64-row batches at training intensity 8, lr 1e-3,
  epsilon 1 -> 0.02 over 4000 steps, target update every 500 steps (``CONFIG``).
- ``sb3``: Stable-Baselines3 DQN with rl-zoo's CartPole-v1 hyperparameters (lr
  2.3e-3, batch 64, buffer 100k, learning_starts 1000, gamma 0.99, target update
  every 10 steps, train_freq 256 with 128 gradient steps, epsilon to 0.04 over
  16% of rl-zoo's 50k steps, i.e. 8000 steps, 256x256 net).
- ``rllib``: RLlib 2.x DQN with its tuned CartPole example (new API stack: lr
  5e-4, batch 32, prioritized episode replay 50k, n-step 2..5, double Q,
  dueling, epsilon 1 -> 0.02 over 25k steps, 256 tanh torso, 256 head), local
  env runner.

Each run trains until the mean return of its last 100 completed episodes (as the
system itself reports it, checked after each training iteration or env step) is
>= ``--target`` or its budget runs out: ``--max-seconds`` of training (default
110) or ``--max-steps`` env steps (default 500k). A run that misses is reported
as "not reached" in its own row and never enters the medians of the runs that
reached the target.

Figures per run: start-up (process start to ready to train: imports, Ray start
for RLlib, building the algorithm), training time to the target, time from
process start to the target, env steps, env steps/s (steps / training time); per
system the median [min-max] and reached n/N, and each system's ratios to flowrl:
time from process start and training time (runs that reached the target), env
steps/s (against all of flowrl's runs).

SB3 and RLlib are optional (``pip install -c constraints.txt -e ".[bench]"``); a
missing one fails its runs, which the table reports.

    python benchmarks/dqn_cartpole.py          # 3 seeds x 3 systems: at most ~20 min idle
    python benchmarks/dqn_cartpole.py --systems flowrl sb3 --seeds 5
    python benchmarks/dqn_cartpole.py --quick --no-idle-wait   # smoke run
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)

SYSTEMS = ["flowrl", "sb3", "rllib"]
BASELINE = "flowrl"
KEYS = ["from_start_s", "train_s", "startup_s", "env_steps", "steps_per_s", "final_mean"]
TARGET_KEYS = ["from_start_s"]


def _result(ready_s: float, start: float, reached: bool, steps: int, mean: float) -> dict:
    """The run's figures (``from_start_s`` only when the target was reached)."""
    train_s = time.perf_counter() - start
    return {"reached": reached, "startup_s": ready_s, "train_s": train_s,
            "from_start_s": harness.since_start() if reached else None,
            "env_steps": steps, "steps_per_s": steps / train_s if train_s > 0 else None,
            "final_mean": mean}


CONFIG = dict(lr=1e-3, n_step=3, train_batch_size=64, learning_starts=1000,
              exploration_config={"epsilon_timesteps": 4000, "final_epsilon": 0.02},
              timesteps_per_iteration=1000, training_intensity=8,
              target_network_update_freq=500)


def child_flowrl(args) -> dict:
    from flowrl.algorithms import DQN, DQNConfig
    algo = DQN(DQNConfig(env="CartPole-v1", seed=args.seed, **CONFIG))
    ready = harness.since_start()
    start = time.perf_counter()
    try:
        while True:
            r = algo.train()
            steps, mean = r["timesteps_total"], r["episode_reward_mean"]
            if mean >= args.target:
                return _result(ready, start, True, steps, mean)
            if time.perf_counter() - start > args.max_seconds or steps >= args.max_steps:
                return _result(ready, start, False, steps, mean)
    finally:
        algo.stop()


def child_sb3(args) -> dict:
    from stable_baselines3 import DQN as SB3DQN
    from stable_baselines3.common.callbacks import BaseCallback
    model = SB3DQN("MlpPolicy", "CartPole-v1", learning_rate=2.3e-3, batch_size=64,
                   buffer_size=100_000, learning_starts=1000, gamma=0.99,
                   target_update_interval=10, train_freq=256, gradient_steps=128,
                   # rl-zoo anneals over 16% of its 50k steps; SB3 takes the fraction
                   # of total_timesteps, so scale it to keep those 8000 steps
                   exploration_fraction=min(1.0, 0.16 * 50_000 / args.max_steps),
                   exploration_final_eps=0.04,
                   policy_kwargs={"net_arch": [256, 256]}, seed=args.seed, verbose=0)
    ready = harness.since_start()
    state: dict = {}

    def mean_return(buf) -> float:
        return sum(e["r"] for e in buf) / len(buf) if buf else math.nan

    class Stop(BaseCallback):
        def _on_training_start(self):
            state["start"] = time.perf_counter()

        def _on_step(self) -> bool:
            mean = mean_return(self.model.ep_info_buffer)
            if mean >= args.target:
                state["out"] = _result(ready, state["start"], True, self.num_timesteps, mean)
                return False
            if time.perf_counter() - state["start"] > args.max_seconds:
                state["out"] = _result(ready, state["start"], False, self.num_timesteps, mean)
                return False
            return True

    model.learn(total_timesteps=args.max_steps, callback=Stop())
    return state.get("out") or _result(ready, state["start"], False, model.num_timesteps,
                                       mean_return(model.ep_info_buffer))


def child_rllib(args) -> dict:
    import ray
    from ray.rllib.algorithms.dqn import DQNConfig as RLlibDQN
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    config = (RLlibDQN().environment("CartPole-v1").debugging(seed=args.seed)
              .env_runners(num_env_runners=0)
              .training(lr=5e-4, train_batch_size_per_learner=32,
                        replay_buffer_config={"type": "PrioritizedEpisodeReplayBuffer",
                                              "capacity": 50_000, "alpha": 0.6, "beta": 0.4},
                        n_step=(2, 5), double_q=True, dueling=True,
                        epsilon=[(0, 1.0), (25_000, 0.02)])
              .rl_module(model_config=DefaultModelConfig(
                  fcnet_hiddens=[256], fcnet_activation="tanh", head_fcnet_hiddens=[256])))
    algo = config.build_algo() if hasattr(config, "build_algo") else config.build()
    ready = harness.since_start()
    start = time.perf_counter()
    try:
        while True:
            r = algo.train()
            runners = r.get("env_runners", {})
            mean = runners.get("episode_return_mean", math.nan)
            steps = int(r.get("num_env_steps_sampled_lifetime",
                              runners.get("num_env_steps_sampled_lifetime", 0)))
            if mean == mean and mean >= args.target:
                return _result(ready, start, True, steps, mean)
            if time.perf_counter() - start > args.max_seconds or steps >= args.max_steps:
                return _result(ready, start, False, steps, mean)
    finally:
        algo.stop()
        ray.shutdown()


CHILDREN = {"flowrl": child_flowrl, "sb3": child_sb3, "rllib": child_rllib}


def report(runs: list[dict], target: float) -> None:
    groups = harness.summarize(runs, KEYS, TARGET_KEYS)
    base = next((g for g in groups if g.system == BASELINE and g.reached), None)
    # throughput compares any two groups; times only groups that reached the target
    base_speed = harness.median_range(run["result"].get("steps_per_s") for run in runs
                                      if run.get("valid") and run["system"] == BASELINE)

    def vs_base(key):
        return lambda g: harness.fmt_ratio(harness.ratio(g.figures.get(key), base.figures.get(key))
                                           if base is not None and g.reached else math.nan)

    def speed(g):
        return harness.fmt_ratio(harness.ratio(g.figures.get("steps_per_s"), base_speed))

    harness.print_groups(groups, [
        (f"from process start to {target:g} s", "from_start_s", "{:,.1f}"),
        (f"this / {BASELINE} from start", vs_base("from_start_s")),
        (f"training to {target:g} s", harness.fmt_train_s),
        (f"this / {BASELINE} training", vs_base("train_s")),
        ("start-up s", "startup_s", "{:,.1f}"), ("env steps", "env_steps", "{:,.0f}"),
        ("env steps/s", "steps_per_s", "{:,.0f}"),
        (f"steps/s vs {BASELINE} (all its runs)", speed),
        ("final mean return", "final_mean", "{:,.1f}")],
        title=f"DQN CartPole-v1 to a 100-episode mean of {target:g}: median [min-max]; "
              "'reached' rows use only the runs that reached it")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--target", type=float, default=450.0)
    p.add_argument("--max-seconds", type=float, default=110.0,
                   help="training budget per run (start-up not included)")
    p.add_argument("--max-steps", type=int, default=500_000)
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, max_steps=3000, max_seconds=15)
    if args.child:
        import torch
        torch.set_num_threads(1)
        harness.write_result(CHILDREN[args.child](args))
        return
    s = harness.settings_from(args)
    s.run_timeout = min(s.run_timeout, args.max_seconds * 2 + 300)
    runs, meta = harness.run(args, "dqn_cartpole", __file__, args.systems,
                             harness.forward(args, "target", "max_steps", "max_seconds"),
                             meta={"target": args.target, "max_steps": args.max_steps,
                                   "max_seconds": args.max_seconds, "flowrl_config": CONFIG},
                             settings=s)
    report(runs, meta["target"])


if __name__ == "__main__":
    main()
