"""Async algorithms on CartPole-v1 to a 100-episode train mean of 450: flowrl APPO, IMPALA
and A3C next to RLlib 2.58 APPO at its tuned CartPole config.

Systems (each seed in a fresh process with its own ``ray.init``, interleaved, on an
idle CPU; see ``benchmarks/harness.py``), all with 2 Ray rollout workers:

- ``flowrl-appo`` / ``flowrl-impala``: ``APPO`` / ``IMPALA`` with 4 envs per
  worker, train batch 200 (the settings in :data:`FLOWRL`), lr 2e-3 for APPO and
  1e-3 for IMPALA (:data:`LR`). IMPALA's policy gradient has no clipped
  surrogate: at 2e-3 some seeds drove the policy to a deterministic one (entropy
  0, mean return about 9), where the gradient vanishes and training stays stuck;
  APPO's clipped surrogate keeps it from that at 2e-3;
- ``flowrl-a3c``: ``A3C`` at its ``A3CConfig`` defaults (4 envs x 20 steps per
  gradient, lr 1e-3);
- ``rllib-appo``: RLlib APPO (new API stack) at its tuned CartPole example
  (``tuned_examples/appo/cartpole_appo.py``: ``vf_loss_coeff=0.05``,
  ``entropy_coeff=0.0``, value and policy sharing layers), 2 env runners; only
  its reporting interval changes (``min_time_s_per_iteration`` 1 s instead of
  IMPALA's 10 s), so the window is checked about as often as flowrl's.

The success criterion is computed by this script the same way for every system
(``ppo_cartpole.Tracker``): the mean return of the last 100 completed training
episodes (a full window), checked after each training iteration. flowrl's
episodes come from its workers' episode statistics as its reporting drains them,
RLlib's from an ``on_episode_end`` callback. A run stops at the target or at its
budget (``--max-seconds`` of training, ``--max-steps`` env steps); a run that
did not reach the target reports its best window (``best_mean``).

Figures per run: start-up (process start to ready to train: imports,
``ray.init``, building the algorithm), training time to the target, time from
process start to the target, env steps, env steps/s, reached n/N; the table
also gives time from process start relative to ``rllib-appo``.

    python benchmarks/async_cartpole.py          # 4 systems x 3 seeds; ~10-15 min idle
                                                 # (at most 12 x ~2.5 min if none learns)
    python benchmarks/async_cartpole.py --systems flowrl-appo rllib-appo --seeds 5
    python benchmarks/async_cartpole.py --quick --no-idle-wait     # smoke run
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)
from training import (STARTUP_COLUMNS, Tracker, build_rllib, find_metric,  # noqa: E402
                      rllib_episode_callback, start_ray, train_flowrl, train_rllib)

SYSTEMS = ["flowrl-appo", "flowrl-impala", "flowrl-a3c", "rllib-appo"]
BASELINE = "rllib-appo"
WORKERS = 2
#: flowrl APPO and IMPALA settings (``timesteps_per_iteration``: how often the window is checked).
FLOWRL = dict(env="CartPole-v1", num_workers=WORKERS, num_envs_per_worker=4,
              train_batch_size=200, timesteps_per_iteration=2000, backend="ray")
#: Learning rate per flowrl algorithm (see the module docstring for IMPALA's).
LR = {"appo": 2e-3, "impala": 1e-3}


class BestTracker(Tracker):
    """:class:`training.Tracker` that also keeps the best full-window mean."""

    best = math.nan

    def after_iteration(self, env_steps: int) -> bool:
        done = super().after_iteration(env_steps)
        m = self.mean()
        if not math.isnan(m) and not (m <= self.best):
            self.best = m
        return done


def child_flowrl(args, name: str) -> dict:
    phases = {}
    t = time.time()
    from flowrl.algorithms import A3C, APPO, IMPALA, A3CConfig, APPOConfig, IMPALAConfig
    phases["imports_s"] = time.time() - t
    phases["ray_init_s"] = start_ray(WORKERS + 2)
    t = time.time()
    if name == "a3c":
        algo = A3C(A3CConfig(env="CartPole-v1", num_workers=WORKERS, backend="ray",
                             seed=args.seed))
    else:
        cls, config_cls = {"appo": (APPO, APPOConfig), "impala": (IMPALA, IMPALAConfig)}[name]
        algo = cls(config_cls(**FLOWRL, lr=LR[name], seed=args.seed))
    phases["build_s"] = time.time() - t
    tracker = BestTracker(args.target, args.max_steps, args.max_seconds)
    train_flowrl(algo, tracker)
    return tracker.result(best_mean=tracker.best, **phases)


def child_rllib(args) -> dict:
    phases = {}
    t = time.time()
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    phases["imports_s"] = time.time() - t
    phases["ray_init_s"] = start_ray(WORKERS + 2)
    t = time.time()
    config = (APPOConfig().environment("CartPole-v1")
              .env_runners(num_env_runners=WORKERS)
              .training(vf_loss_coeff=0.05, entropy_coeff=0.0)
              .rl_module(model_config=DefaultModelConfig(vf_share_layers=True))
              .reporting(min_time_s_per_iteration=1.0)  # check the window as often as flowrl
              .callbacks(rllib_episode_callback())
              .debugging(seed=args.seed))
    algo = build_rllib(config)
    phases["build_s"] = time.time() - t
    tracker = BestTracker(args.target, args.max_steps, args.max_seconds)
    train_rllib(algo, tracker, lambda r: find_metric(r, "num_env_steps_sampled_lifetime"))
    return tracker.result(best_mean=tracker.best, **phases)


def child(args) -> None:
    if args.child not in SYSTEMS:
        raise SystemExit(f"unknown system {args.child!r}; choose from {SYSTEMS}")
    engine, name = args.child.split("-", 1)
    result = child_flowrl(args, name) if engine == "flowrl" else child_rllib(args)
    harness.write_result(result)


KEYS = ["steps_per_s", "train_s", "from_start_s", "startup_s", "first_result_s", "env_steps",
        "best_mean", "imports_s", "ray_init_s", "build_s"]
TARGET_KEYS = ["from_start_s"]


def report(runs: list[dict], target: float) -> None:
    groups = harness.summarize(runs, KEYS, TARGET_KEYS)
    base = next((g for g in groups if g.system == BASELINE and g.reached), None)
    groups = [g for g in groups if g.n]  # no empty "reached 0/N" rows

    def quicker(g):
        return harness.fmt_ratio(harness.ratio(base.figures.get("from_start_s"),
                                               g.figures.get("from_start_s"))
                                 if base and g.reached else math.nan)

    harness.print_groups(groups, [
        (f"training to {target:g} s", harness.fmt_train_s),
        ("from process start s", "from_start_s", "{:,.1f}"),
        (f"{BASELINE} from-start / this", quicker), ("start-up s", "startup_s", "{:,.1f}"),
        ("env steps", "env_steps", "{:,.0f}"), ("env steps/s", "steps_per_s", "{:,.0f}"),
        ("best 100-episode mean", "best_mean", "{:,.1f}")],
        title=f"CartPole-v1 to a 100-episode train mean of {target:g}, {WORKERS} Ray workers: "
              "median [min-max]; 'reached' rows use only the runs that reached it")
    harness.print_groups(groups, STARTUP_COLUMNS, title="start-up breakdown (seconds)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--target", type=float, default=450.0)
    p.add_argument("--max-steps", type=int, default=300_000)
    p.add_argument("--max-seconds", type=float, default=120.0)
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, seeds=1, max_steps=5000, max_seconds=20)
    if args.child:
        child(args)
        return
    runs, meta = harness.run(args, "async_cartpole", __file__, args.systems,
                             harness.forward(args, "target", "max_steps", "max_seconds"),
                             meta={"target": args.target, "max_steps": args.max_steps,
                                   "max_seconds": args.max_seconds, "flowrl": FLOWRL,
                                   "flowrl_lr": LR})
    report(runs, meta["target"])


if __name__ == "__main__":
    main()
