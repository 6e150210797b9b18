"""A Ray Tune sweep with flowrl: wall time until the best of 8 PPO CartPole trials reaches 450.

The sweep is ``examples/tune_sweep.yaml`` run as ``flowrl tune --config`` runs it
(:func:`flowrl.sweep.run_sweep`): 8 PPO CartPole-v1 trials with sampled lr, SGD
epochs and minibatch size, ASHA stopping the worse half at 4, 8, 16, 32
iterations, each trial stopping at a mean return of 450 or 200k env steps. Each
trial reserves one CPU (local backend), so 2 cores run two trials at a time. The
search is seeded with the harness seed (``search_seed``), so a seed is the same 8
configs for every run.

Reported per run (a Tune callback on the driver reads every trial result as it
arrives):

- ``to_target_s``: seconds from the start of ``Tuner.fit`` until the first result
  of any trial with ``episode_reward_mean >= 450`` (``from_start_s``: from process
  start, Ray's start-up included); missing when no trial reached it;
- ``sweep_s``: the whole sweep (every trial stopped by the target, its budget or ASHA);
- ``max_running``: most trials running at once (the CPUs allow 2 on 2 cores);
- ``trials_finished`` / ``trials_failed``; ``best_reward``.

    python benchmarks/tune_sweep.py
    python benchmarks/tune_sweep.py --quick --no-idle-wait   # smoke: 2 trials, tiny budget
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SWEEP = os.path.join(ROOT, "examples", "tune_sweep.yaml")
TARGET = 450.0
SYSTEMS = ["flowrl-tune"]
#: --quick: 2 trials of a few tiny iterations (checks the script, measures nothing).
QUICK = ["num_samples=2", "stop.timesteps_total=4096", "train_batch_size=512",
         "rollout_fragment_length=64", "sgd_minibatch_size=128", "num_sgd_iter=2"]
KEYS = ["to_target_s", "from_start_s", "sweep_s", "max_running", "trials_finished",
        "trials_failed", "best_reward"]
TARGET_KEYS = ["to_target_s", "from_start_s"]


def make_watcher(target: float):
    """A Tune callback that records when a result first reaches ``target`` and how
    many trials run at once."""
    from ray import tune

    class Watcher(tune.Callback):
        def __init__(self):
            self.start = time.perf_counter()
            self.reached_at: float | None = None
            self.reached_since_start: float | None = None
            self.best = float("-inf")
            self.running: set[str] = set()
            self.max_running = 0

        def on_trial_start(self, iteration, trials, trial, **info):
            self.running.add(trial.trial_id)
            self.max_running = max(self.max_running, len(self.running))

        def on_trial_result(self, iteration, trials, trial, result, **info):
            value = result.get("episode_reward_mean")
            if isinstance(value, (int, float)) and not math.isnan(value):
                self.best = max(self.best, float(value))
                if value >= target and self.reached_at is None:
                    self.reached_at = time.perf_counter() - self.start
                    self.reached_since_start = harness.since_start()

        def on_trial_complete(self, iteration, trials, trial, **info):
            self.running.discard(trial.trial_id)

        def on_trial_error(self, iteration, trials, trial, **info):
            self.running.discard(trial.trial_id)

    return Watcher()


def run(seed: int, quick: bool) -> dict:
    """Run the sweep once (search seeded with ``seed``); the figures of the module docstring."""
    from flowrl.sweep import load_sweep, run_sweep
    with tempfile.TemporaryDirectory(prefix="flowrl-tune-bench-") as storage:
        overrides = [f"storage_path={storage}", f"search_seed={seed}"]
        spec = load_sweep(SWEEP, overrides + (QUICK if quick else []))
        watcher = make_watcher(TARGET)
        watcher.start = time.perf_counter()
        grid, _ = run_sweep(spec, verbose=0, callbacks=[watcher])
        sweep_s = time.perf_counter() - watcher.start
        failed = sum(1 for r in grid if r.error is not None)
    reached = watcher.reached_at is not None
    return {"reached": reached,
            "to_target_s": watcher.reached_at if reached else float("nan"),
            "from_start_s": watcher.reached_since_start if reached else float("nan"),
            "sweep_s": sweep_s, "max_running": watcher.max_running,
            "trials_finished": len(grid) - failed, "trials_failed": failed,
            "best_reward": watcher.best}


def report(runs: list[dict]) -> None:
    harness.print_groups(harness.summarize(runs, KEYS, TARGET_KEYS), [
        (f"sweep start to {TARGET:g} s", "to_target_s", "{:,.1f}"),
        (f"process start to {TARGET:g} s", "from_start_s", "{:,.1f}"),
        ("whole sweep s", "sweep_s", "{:,.1f}"), ("max trials at once", "max_running", "{:.0f}"),
        ("trials finished", "trials_finished", "{:.0f}"),
        ("trials failed", "trials_failed", "{:.0f}"), ("best mean return", "best_reward", "{:,.1f}")],
        title=f"8 PPO CartPole-v1 trials with ASHA on Ray Tune ({os.path.relpath(SWEEP, ROOT)})"
              f", {os.cpu_count()} CPUs: median [min-max]")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    if args.child:
        harness.write_result(run(args.seed, args.quick))
        return
    runs, _ = harness.run(args, "tune_sweep", __file__, SYSTEMS, harness.forward(args, "quick"),
                          meta=vars(args) | {"results_dir": None, "report": None,
                                             "target": TARGET})
    report(runs)


if __name__ == "__main__":
    main()
