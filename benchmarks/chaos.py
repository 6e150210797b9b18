"""Chaos: PPO (or IMPALA) on CartPole-v1 with Ray rollout workers killed at random, next to the same run without kills.

Each run is a fresh process (its own Ray instance, ``num_workers + 1`` CPUs)
training ``PPO(PPOConfig(backend="ray", num_workers=W))`` with its default
``recreate_failed_workers=True``. In the ``kills`` runs a thread ``ray.kill``s a
random remote worker every ``--kill-every`` seconds (10 by default), from the first
training result on. Both kinds stop at a train mean of 450 (``episode_reward_mean``
over the last 100 episodes) or at ``--max-seconds``/``--max-steps``.

Figures per kind (median and range over seeds): training time and env steps to the
goal, whether it was reached, kills, ``num_worker_restarts``,
``num_lost_requests``, and hangs (a run that printed nothing for
``--hang-s`` seconds is killed and counted). The last line gives the slowdown:
time to goal with kills / without (target: under 1.5x, 0 hangs).

``--algo IMPALA`` runs the async algorithm the same way (any class exported by
``flowrl.algorithms`` whose config has ``num_workers``).

    python benchmarks/chaos.py                      # PPO: 3 seeds, 3 workers
    python benchmarks/chaos.py --algo IMPALA
    python benchmarks/chaos.py --seeds 1 --max-seconds 30 --kill-every 5   # smoke run
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import threading
import time

GOAL = 450.0


def child(args: argparse.Namespace) -> None:
    import ray

    import flowrl.algorithms as algos

    ray.init(num_cpus=args.workers + 1, include_dashboard=False, log_to_driver=False)
    algo_cls = getattr(algos, args.algo)
    config_cls = algo_cls.config_class
    algo = algo_cls(config_cls(env="CartPole-v1", num_workers=args.workers, backend="ray",
                               seed=args.seed, sample_timeout_s=args.sample_timeout_s))
    rng = random.Random(args.seed)
    kills = [0]
    done = threading.Event()

    def killer():
        while not done.wait(args.kill_every):
            remotes = algo.workers.remote_workers()
            if remotes:
                ray.kill(rng.choice(remotes), no_restart=True)
                kills[0] += 1

    start = time.perf_counter()
    thread = None
    result: dict = {}
    reached = False
    while True:
        result = algo.train()
        print("PROGRESS", result["timesteps_total"], flush=True)
        if thread is None and args.kill:
            thread = threading.Thread(target=killer, daemon=True)
            thread.start()
        if result["episode_reward_mean"] >= GOAL:
            reached = True
            break
        if (time.perf_counter() - start > args.max_seconds
                or result["timesteps_total"] >= args.max_steps):
            break
    elapsed = time.perf_counter() - start
    done.set()
    print("RESULT " + json.dumps({
        "kill": args.kill, "seed": args.seed, "reached": reached, "time_s": elapsed,
        "steps": result["timesteps_total"], "kills": kills[0],
        "restarts": result.get("num_worker_restarts", 0),
        "lost": result.get("num_lost_requests", 0),
        "healthy": result.get("num_healthy_workers")}), flush=True)
    algo.stop()
    ray.shutdown()


def run_one(args: argparse.Namespace, seed: int, kill: bool) -> dict:
    cmd = [sys.executable, os.path.abspath(__file__), "--child", "--seed", str(seed),
           "--workers", str(args.workers), "--algo", args.algo,
           "--kill-every", str(args.kill_every), "--max-seconds", str(args.max_seconds),
           "--max-steps", str(args.max_steps), "--sample-timeout-s", str(args.sample_timeout_s)]
    if kill:
        cmd.append("--kill")
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
                            env=env)
    last = [time.monotonic()]
    lines: list[str] = []

    def read():
        for line in proc.stdout:
            last[0] = time.monotonic()
            lines.append(line)

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    hung = False
    while proc.poll() is None:
        if time.monotonic() - last[0] > args.hang_s:
            hung = True
            proc.kill()
            break
        time.sleep(0.5)
    proc.wait()
    reader.join(5)
    results = [json.loads(ln[len("RESULT "):]) for ln in lines if ln.startswith("RESULT ")]
    if results:
        return {**results[-1], "hung": False}
    return {"kill": kill, "seed": seed, "reached": False, "hung": hung, "rc": proc.returncode}


def _med(xs: list[float]) -> str:
    if not xs:
        return "-"
    return f"{statistics.median(xs):,.1f} [{min(xs):,.1f}-{max(xs):,.1f}]"


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", default="PPO")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--seeds", type=int, default=3)
    p.add_argument("--kill-every", type=float, default=10.0)
    p.add_argument("--max-seconds", type=float, default=300.0)
    p.add_argument("--max-steps", type=int, default=2_000_000)
    p.add_argument("--sample-timeout-s", type=float, default=60.0)
    p.add_argument("--hang-s", type=float, default=180.0,
                   help="a run silent this long is killed and counted as a hang")
    p.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--kill", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.child:
        child(args)
        return
    runs = []
    for seed in range(args.seeds):
        for kill in (False, True):  # side by side, alternating
            r = run_one(args, seed, kill)
            print(json.dumps(r), flush=True)
            runs.append(r)
    print(f"\n{args.algo} on CartPole-v1, {args.workers} Ray workers, goal train mean {GOAL:g}, "
          f"kill every {args.kill_every:g} s")
    print(f"{'run':<9} {'reached':>8} {'time to goal s':>24} {'env steps':>30} {'kills':>6} "
          f"{'restarts':>9} {'lost req':>9} {'hangs':>6}")
    medians = {}
    for kill in (False, True):
        rs = [r for r in runs if r["kill"] == kill]
        ok = [r for r in rs if r.get("reached")]
        times = [r["time_s"] for r in ok]
        medians[kill] = statistics.median(times) if times else None
        print(f"{'kills' if kill else 'no kills':<9} {len(ok):>4}/{len(rs):<3} {_med(times):>24} "
              f"{_med([r['steps'] for r in ok]):>30} {sum(r.get('kills', 0) for r in rs):>6} "
              f"{sum(r.get('restarts', 0) for r in rs):>9} {sum(r.get('lost', 0) for r in rs):>9} "
              f"{sum(1 for r in rs if r.get('hung')):>6}")
    if medians[False] and medians[True]:
        print(f"slowdown (median time to goal, kills / no kills): "
              f"{medians[True] / medians[False]:.2f}x")
    else:
        print("slowdown: n/a (a kind did not reach the goal)")


if __name__ == "__main__":
    main()
