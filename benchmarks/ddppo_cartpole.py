"""DD-PPO against PPO on CartPole-v1 with 2 Ray workers: env steps/s and time to a mean return of 450.

Systems (each seed of each in a fresh process with its own Ray instance of 3
CPUs, interleaved, on an idle CPU; see ``benchmarks/harness.py``):

- ``ppo``: ``PPO(PPOConfig(backend="ray"))``: the workers only sample, the
  driver is the one learner;
- ``ddppo``: ``DDPPO(DDPPOConfig())``: every worker samples and learns on its own
  samples, all-reducing gradients over gloo; no driver learner.

Both use identical sampling and SGD settings (``COMMON``): 2 workers x 4 envs x
128 steps = 1024 env steps per round, 6 epochs of 128-row minibatches over them
(PPO's ``train_batch_size`` is set to that round, 1024). Each run trains until
the 100-episode train mean (``episode_reward_mean``) is >= ``--target`` or
``--max-seconds`` of training (default 55) run out; a run that misses is
reported as "not reached" in its own row.

Figures per run: env steps/s (env steps / training time), training time to the
target, time from process start to the target, start-up (process start to ready
to train, ``ray.init`` included), env steps; per system median [min-max] and
reached n/N, and the ratios ddppo/ppo.

    python benchmarks/ddppo_cartpole.py          # 3 seeds x 2 systems: at most ~8 min idle
    python benchmarks/ddppo_cartpole.py --quick --no-idle-wait   # smoke run
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)

SYSTEMS = ["ddppo", "ppo"]
COMMON = dict(env="CartPole-v1", num_workers=2, num_envs_per_worker=4,
              rollout_fragment_length=128, sgd_minibatch_size=128, num_sgd_iter=6,
              backend="ray")
KEYS = ["steps_per_s", "train_s", "from_start_s", "startup_s", "env_steps", "final_mean"]
TARGET_KEYS = ["from_start_s"]


def child(args) -> None:
    os.environ.pop("RAY_ADDRESS", None)  # a Ray instance of its own, never another's
    import ray

    from flowrl.algorithms import DDPPO, PPO, DDPPOConfig, PPOConfig
    ray.init(num_cpus=3, include_dashboard=False, log_to_driver=False)
    if args.child == "ppo":
        algo = PPO(PPOConfig(train_batch_size=1024, seed=args.seed, **COMMON))
    elif args.child == "ddppo":
        algo = DDPPO(DDPPOConfig(seed=args.seed, **COMMON))
    else:
        raise SystemExit(f"unknown system {args.child!r}; choose from {SYSTEMS}")
    ready = harness.since_start()
    start = time.perf_counter()
    reached = False
    r = {"timesteps_total": 0, "episode_reward_mean": math.nan}
    while time.perf_counter() - start < args.max_seconds:
        r = algo.train()
        if r["episode_reward_mean"] >= args.target:
            reached = True
            break
    train_s = time.perf_counter() - start
    out = {"reached": reached, "startup_s": ready, "train_s": train_s,
           "from_start_s": harness.since_start() if reached else None,
           "env_steps": r["timesteps_total"], "steps_per_s": r["timesteps_total"] / train_s,
           "final_mean": r["episode_reward_mean"]}
    algo.stop()
    ray.shutdown()
    harness.write_result(out)


def report(runs: list[dict], target: float) -> None:
    groups = harness.summarize(runs, KEYS, TARGET_KEYS)
    harness.print_groups(groups, [
        ("env steps/s", "steps_per_s", "{:,.0f}"),
        (f"training to {target:g} s", harness.fmt_train_s),
        ("from process start s", "from_start_s", "{:,.1f}"),
        ("start-up s", "startup_s", "{:,.1f}"),
        ("env steps", "env_steps", "{:,.0f}"), ("final mean return", "final_mean", "{:,.1f}")],
        title=f"DD-PPO vs PPO, CartPole-v1, 2 Ray workers, target {target:g}: median "
              "[min-max]; 'reached' rows use only the runs that reached it")

    def median_of(system: str, key: str, reached_only: bool):
        values = [run["result"].get(key) for run in runs
                  if run.get("valid") and run["system"] == system
                  and (run["result"].get("reached") or not reached_only)]
        return harness.median_range(values)

    speed = harness.ratio(median_of("ddppo", "steps_per_s", False),
                          median_of("ppo", "steps_per_s", False))
    ttt = harness.ratio(median_of("ddppo", "train_s", True), median_of("ppo", "train_s", True))
    fmt = lambda x: "n/a" if math.isnan(x) else f"{x:.2f}x"  # noqa: E731
    print(f"ddppo/ppo env steps/s (all runs): {fmt(speed)}; ddppo/ppo training time to "
          f"{target:g} (runs that reached it): {fmt(ttt)}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--target", type=float, default=450.0)
    p.add_argument("--max-seconds", type=float, default=55.0,
                   help="training budget per run (start-up not included)")
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, max_seconds=10.0)
    if args.child:
        child(args)
        return
    s = harness.settings_from(args)
    s.run_timeout = min(s.run_timeout, args.max_seconds * 2 + 240)
    runs, meta = harness.run(args, "ddppo_cartpole", __file__, args.systems,
                             harness.forward(args, "target", "max_seconds"),
                             meta={"target": args.target, "max_seconds": args.max_seconds,
                                   "common": COMMON}, settings=s)
    report(runs, meta["target"])


if __name__ == "__main__":
    main()
