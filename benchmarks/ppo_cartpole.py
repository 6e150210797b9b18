"""PPO on CartPole-v1 to a mean return of 450: flowrl vs RLlib vs Stable-Baselines3.

Each system trains from scratch in this one process, one after the other, until
the mean return of its last 100 completed episodes is >= ``--target`` (or a
budget of ``--max-seconds`` / ``--max-steps`` runs out). Reported per system:

- start-up: seconds to build the algorithm (for Ray-based systems including
  ``ray.init`` and creating the workers), kept out of the training figures;
- time to target: wall seconds of training (sampling AND learning) until the
  target was first met, and the env steps it took;
- env steps/s: env steps sampled / training wall time, end to end.

Setups (all on the same machine, 1 torch thread in the learner process):

- flowrl: ``PPO(PPOConfig(env, num_workers=2, backend="ray"))`` with its
  defaults (8 envs per worker, 64-step fragments, 2048-step train batch, 6
  epochs of 256-row minibatches, fused Adam). ``--flowrl-mode async`` pipelines
  sampling with learning instead of bulk_sync rounds.
- RLlib 2.x PPO (new API stack): 2 env runners x ``--rllib-envs`` envs, RLlib's
  tuned CartPole example hyperparameters (lr 3e-4, 6 epochs, vf_loss_coeff 0.01,
  one 32-unit linear layer shared by policy and value).
- Stable-Baselines3 PPO with rl-zoo's CartPole hyperparameters (8 envs, n_steps
  32, batch 256, 20 epochs, gae_lambda 0.8, gamma 0.98, lr 1e-3 linear, clip
  0.2 linear), single process.

RLlib and SB3 are optional (``pip install -c constraints.txt -e ".[bench]"``); a
missing one is skipped with a message.

    python benchmarks/ppo_cartpole.py                  # all three, seed 0
    python benchmarks/ppo_cartpole.py --only flowrl --seeds 0 1 2
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import time
from dataclasses import dataclass

import torch


@dataclass
class Figure:
    system: str
    startup_s: float = math.nan
    time_to_target_s: float = math.nan
    steps_to_target: int = 0
    steps_per_s: float = math.nan
    reached: bool = False
    note: str = ""


def _ray_init() -> float:
    import ray
    if ray.is_initialized():
        return 0.0
    t = time.perf_counter()
    ray.init(num_cpus=os.cpu_count() or 2, include_dashboard=False, log_to_driver=False,
             configure_logging=False)
    return time.perf_counter() - t


def run_flowrl(args, seed: int) -> Figure:
    from flowrl.algorithms import PPO, PPOConfig
    fig = Figure(f"flowrl PPO ({args.flowrl_mode})")
    ray_s = _ray_init()
    t = time.perf_counter()
    algo = PPO(PPOConfig(env="CartPole-v1", num_workers=2, backend="ray", seed=seed,
                         num_envs_per_worker=args.flowrl_envs))
    if args.flowrl_mode == "async":
        algo.stop()
        algo = _async_ppo(seed, args.flowrl_envs)
    fig.startup_s = ray_s + time.perf_counter() - t
    start = time.perf_counter()
    try:
        while True:
            r = algo.train()
            elapsed = time.perf_counter() - start
            steps = r["timesteps_total"]
            if r["episode_reward_mean"] >= args.target:
                fig.reached = True
                break
            if elapsed > args.max_seconds or steps > args.max_steps:
                fig.note = f"budget out at mean return {r['episode_reward_mean']:.0f}"
                break
    finally:
        algo.stop()
    fig.time_to_target_s, fig.steps_to_target = elapsed, steps
    fig.steps_per_s = steps / elapsed
    return fig


def _async_ppo(seed: int, envs: int):
    """PPO whose rollouts keep one request in flight per worker while the driver learns."""
    from flowrl.algorithms import PPO, PPOConfig
    from flowrl.ops import (ConcatBatches, ParallelRollouts, StandardizeFields,
                            StandardMetricsReporting, TrainOneStep, UpdateKL)

    class AsyncPPO(PPO):
        @staticmethod
        def execution_plan(workers, config):
            train_op = (ParallelRollouts(workers, mode="async", num_async=1)
                        .combine(ConcatBatches(min_batch_size=config.train_batch_size))
                        .for_each(StandardizeFields(["advantages"]))
                        .for_each(TrainOneStep(workers, num_sgd_iter=config.num_sgd_iter,
                                               sgd_minibatch_size=config.sgd_minibatch_size,
                                               seed=config.seed))
                        .for_each(UpdateKL(workers)))
            return StandardMetricsReporting(train_op, workers)

    return AsyncPPO(PPOConfig(env="CartPole-v1", num_workers=2, backend="ray", seed=seed,
                              num_envs_per_worker=envs))


def _find(result: dict, key: str):
    if key in result:
        return result[key]
    for v in result.values():
        if isinstance(v, dict):
            found = _find(v, key)
            if found is not None:
                return found
    return None


def run_rllib(args, seed: int) -> Figure:
    fig = Figure(f"RLlib PPO (2 runners x {args.rllib_envs} envs)")
    try:
        from ray.rllib.algorithms.ppo import PPOConfig as RLlibPPOConfig
    except Exception as e:  # noqa: BLE001 - any import problem means "not available"
        fig.note = f"skipped: ray[rllib] not importable ({type(e).__name__}: {e})"
        return fig
    ray_s = _ray_init()
    t = time.perf_counter()
    try:
        from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
        config = (RLlibPPOConfig().environment("CartPole-v1")
                  .env_runners(num_env_runners=2, num_envs_per_env_runner=args.rllib_envs)
                  .training(lr=3e-4, num_epochs=6, vf_loss_coeff=0.01)
                  .rl_module(model_config=DefaultModelConfig(
                      fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True))
                  .debugging(seed=seed))
        algo = config.build_algo() if hasattr(config, "build_algo") else config.build()
    except Exception as e:  # noqa: BLE001
        fig.note = f"skipped: RLlib failed to build ({type(e).__name__}: {e})"
        return fig
    fig.startup_s = ray_s + time.perf_counter() - t
    start = time.perf_counter()
    steps = 0
    try:
        while True:
            r = algo.train()
            elapsed = time.perf_counter() - start
            steps = int(_find(r, "num_env_steps_sampled_lifetime") or 0)
            ret = _find(r, "episode_return_mean")
            if ret is not None and ret >= args.target:
                fig.reached = True
                break
            if elapsed > args.max_seconds or steps > args.max_steps:
                fig.note = f"budget out at mean return {ret}"
                break
    finally:
        algo.stop()
    fig.time_to_target_s, fig.steps_to_target = elapsed, steps
    fig.steps_per_s = steps / elapsed
    return fig


def run_sb3(args, seed: int) -> Figure:
    fig = Figure("SB3 PPO (rl-zoo, 8 envs)")
    try:
        from stable_baselines3 import PPO as SB3PPO
        from stable_baselines3.common.callbacks import BaseCallback
        from stable_baselines3.common.env_util import make_vec_env
    except Exception as e:  # noqa: BLE001
        fig.note = f"skipped: stable-baselines3 not importable ({type(e).__name__}: {e})"
        return fig

    def linear(v):
        return lambda progress_remaining: progress_remaining * v

    class StopAtTarget(BaseCallback):
        def __init__(self):
            super().__init__()
            self.start = None
            self.reached_at = None

        def _on_training_start(self):
            self.start = time.perf_counter()

        def _on_rollout_end(self):
            buf = self.model.ep_info_buffer
            if len(buf) and sum(e["r"] for e in buf) / len(buf) >= args.target:
                self.reached_at = (time.perf_counter() - self.start, self.num_timesteps)

        def _on_step(self):
            return (self.reached_at is None
                    and time.perf_counter() - self.start < args.max_seconds)

    t = time.perf_counter()
    env = make_vec_env("CartPole-v1", n_envs=8, seed=seed)
    model = SB3PPO("MlpPolicy", env, n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98,
                   n_epochs=20, ent_coef=0.0, learning_rate=linear(1e-3),
                   clip_range=linear(0.2), seed=seed, device="cpu", verbose=0)
    fig.startup_s = time.perf_counter() - t
    cb = StopAtTarget()
    start = time.perf_counter()
    model.learn(total_timesteps=args.max_steps, callback=cb)
    elapsed = time.perf_counter() - start
    if cb.reached_at is not None:
        fig.reached = True
        elapsed, steps = cb.reached_at
    else:
        steps = model.num_timesteps
        fig.note = "budget out"
    fig.time_to_target_s, fig.steps_to_target = elapsed, steps
    fig.steps_per_s = steps / elapsed
    env.close()
    return fig


def _table(figs: list[Figure], target: float) -> None:
    try:
        from rich.console import Console
        from rich.table import Table
    except ImportError:  # rich is a dependency; keep plain output possible
        Console = None
    base = next((f for f in figs if f.system.startswith("flowrl") and f.reached), None)
    headers = ["system", "start-up s", f"time to {target:.0f} s", "env steps",
               "env steps/s", "flowrl steps/s ratio", "flowrl time ratio", "note"]
    rows = []
    for f in figs:
        ratio_speed = (base.steps_per_s / f.steps_per_s) if base and f.steps_per_s > 0 else math.nan
        ratio_time = (f.time_to_target_s / base.time_to_target_s
                      if base and f.reached else math.nan)
        rows.append([f.system, f"{f.startup_s:.1f}",
                     f"{f.time_to_target_s:.1f}" + ("" if f.reached else " (not reached)"),
                     f"{f.steps_to_target:,}", f"{f.steps_per_s:,.0f}",
                     f"{ratio_speed:.2f}x", f"{ratio_time:.2f}x", f.note])
    if Console is None:
        print(" | ".join(headers))
        for r in rows:
            print(" | ".join(r))
        return
    t = Table(title=f"PPO CartPole-v1 to mean return {target:.0f} (last 100 episodes)")
    for h in headers:
        t.add_column(h)
    for r in rows:
        t.add_row(*r)
    Console(width=max(120, Console().width)).print(t)
    print("ratios: flowrl's env steps/s over the system's; the system's time to target over "
          "flowrl's (> 1 means flowrl is faster)")


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--only", nargs="*", default=["flowrl", "rllib", "sb3"])
    p.add_argument("--seeds", nargs="*", type=int, default=[0])
    p.add_argument("--target", type=float, default=450.0)
    p.add_argument("--max-seconds", type=float, default=120.0)
    p.add_argument("--max-steps", type=int, default=1_000_000)
    p.add_argument("--flowrl-mode", choices=["bulk_sync", "async"], default="bulk_sync")
    p.add_argument("--flowrl-envs", type=int, default=8)
    p.add_argument("--rllib-envs", type=int, default=8)
    args = p.parse_args()
    torch.set_num_threads(1)
    runners = {"flowrl": run_flowrl, "rllib": run_rllib, "sb3": run_sb3}
    figs = []
    for name in args.only:
        per_seed = [runners[name](args, seed) for seed in args.seeds]
        for f in per_seed:
            print(f"{f.system} seed: {f.time_to_target_s:.1f}s, {f.steps_to_target} steps, "
                  f"{f.steps_per_s:,.0f} steps/s, start-up {f.startup_s:.1f}s {f.note}", flush=True)
        if len(per_seed) > 1:
            med = Figure(per_seed[0].system + f" (median of {len(per_seed)})")
            for attr in ("startup_s", "time_to_target_s", "steps_per_s"):
                setattr(med, attr, statistics.median(getattr(f, attr) for f in per_seed))
            med.steps_to_target = int(statistics.median(f.steps_to_target for f in per_seed))
            med.reached = all(f.reached for f in per_seed)
            med.note = per_seed[0].note
            figs.append(med)
        else:
            figs.extend(per_seed)
    _table(figs, args.target)


if __name__ == "__main__":
    main()
