"""Start-up: time from process start to the first PPO ``train()`` result, per phase.

Systems: ``flowrl-local`` and ``flowrl-ray`` (``PPO(PPOConfig(env="CartPole-v1",
backend=...))`` with its defaults: 2 workers x 8 envs). Each seed runs in a fresh
process (``benchmarks/harness.py``), so nothing is warm. Phases, in seconds from
the process start:

- ``interpreter_s``: Python up and this script's own (stdlib) imports done;
- ``imports_s``: ``from flowrl.algorithms import PPO, PPOConfig`` (gymnasium,
  networkx ...; not torch, which the policy module imports);
- ``ray_init_s``: ``ray.init`` as ``PPO(config)`` calls it, with the policy
  module's import (torch) in a background thread meanwhile (Ray only);
- ``build_s``: ``PPO(config)``: envs, policies (on the local backend, the torch
  import), the plan; on Ray the worker actors (created in parallel, overlapping
  the local worker's build);
- ``first_step_s``: one ``sample()`` on the local worker (the first env steps and
  policy forward);
- ``first_result_s``: the first ``train()`` result (sampling + SGD of one train
  batch), counted from process start: the headline figure;
- ``first_checkpoint_s``: then the first ``save()`` (every worker's state, the
  optimizer's among it), as a run's first checkpoint pays it.

Profiles (single process, not through the harness):

    python benchmarks/startup.py --importtime      # python -X importtime, top modules
    python benchmarks/startup.py --profile ray     # cProfile of PPO(config) on Ray
    python benchmarks/startup.py --worker-modules  # a Ray rollout worker's imports and memory
    python benchmarks/startup.py                   # 5 seeds x 2 backends via the harness
    python benchmarks/startup.py --quick --no-idle-wait
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SYSTEMS = ["flowrl-local", "flowrl-ray"]
PHASES = ["interpreter_s", "imports_s", "ray_init_s", "build_s", "first_step_s",
          "first_result_s", "first_checkpoint_s"]


def child(args) -> None:
    backend = args.child.split("-", 1)[1]
    out = {"interpreter_s": harness.since_start()}
    from flowrl.algorithms import PPO, PPOConfig
    out["imports_s"] = harness.since_start()
    if backend == "ray":
        from flowrl.algorithms.base import ensure_ray
        ensure_ray(os.cpu_count() or 1, preload=["flowrl.policies.ppo"])  # as PPO(config)
        out["ray_init_s"] = harness.since_start()
    # create_env_on_driver: first_step_s times the driver's worker sampling, as the saved
    # runs did before the driver went without env by default
    algo = PPO(PPOConfig(env="CartPole-v1", backend=backend, seed=args.seed,
                         create_env_on_driver=True))
    out["build_s"] = harness.since_start()
    algo.workers.local_worker().sample()
    out["first_step_s"] = harness.since_start()
    algo.train()
    out["first_result_s"] = harness.since_start()
    with tempfile.TemporaryDirectory() as checkpoint:
        algo.save(checkpoint)
        out["first_checkpoint_s"] = harness.since_start()
    algo.stop()
    harness.write_result(out)


def importtime(top: int = 20) -> None:
    """Print the slowest top-level imports of ``from flowrl.algorithms import PPO``."""
    proc = subprocess.run([sys.executable, "-X", "importtime", "-c",
                           "from flowrl.algorithms import PPO"],
                          capture_output=True, text=True, check=True)
    rows = []
    for line in proc.stderr.splitlines():
        if not line.startswith("import time:") or "cumulative" in line:
            continue
        _, cumulative_us, name = line.split("|")
        rows.append((int(cumulative_us), name.rstrip()))
    rows.sort(reverse=True)
    print(f"cumulative import time (ms), top {top}, of `from flowrl.algorithms import PPO`:")
    for cum, name in rows[:top]:
        print(f"{cum / 1000:9.1f}  {name}")


def profile(backend: str) -> None:
    import cProfile
    import pstats

    from flowrl.algorithms import PPO, PPOConfig
    if backend == "ray":
        from flowrl.algorithms.base import ensure_ray
        t = time.perf_counter()
        ensure_ray(os.cpu_count() or 1, preload=["flowrl.policies.ppo"])  # as PPO(config)
        print(f"ray.init: {time.perf_counter() - t:.2f} s")
    prof = cProfile.Profile()
    t = time.perf_counter()
    prof.enable()
    algo = PPO(PPOConfig(env="CartPole-v1", backend=backend, seed=0))
    prof.disable()
    print(f"PPO(config) on {backend}: {time.perf_counter() - t:.2f} s")
    pstats.Stats(prof).sort_stats("cumulative").print_stats(25)
    algo.stop()


def _worker_facts(worker) -> tuple:
    """In a rollout worker after one ``sample()``: its policy's class name, the
    modules imported, and the process's resident memory in MB."""
    import sys as sys_
    worker.sample()
    with open("/proc/self/status") as f:
        rss = next((int(line.split()[1]) // 1024 for line in f if line.startswith("VmRSS")), None)
    return type(worker.get_policy()).__name__, sorted(sys_.modules), rss


def worker_modules() -> None:
    """For PPO's Ray rollout workers (8 envs, 128-step fragments): after one
    ``sample()``, the modules imported, which heavy packages are among them, and
    the worker process's resident memory (a deterministic start-up proxy, and
    what each worker costs)."""
    import ray

    from flowrl.policies import PPOPolicy
    from flowrl.workers import WorkerConfig, WorkerSet
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    heavy = ["torch", "torch._dynamo", "torch.optim", "gymnasium", "networkx", "rich",
             "tensorboardX", "yaml", "pandas", "scipy"]
    ws = WorkerSet("CartPole-v1", PPOPolicy,
                   WorkerConfig(num_envs_per_worker=8, rollout_fragment_length=128),
                   num_workers=2, backend="ray")
    try:
        facts = ws.foreach_remote_worker(_worker_facts)
    finally:
        ws.stop()
    policy, mods, _ = facts[0]
    print(f"policy {policy}, {len(mods)} modules, resident memory per worker "
          f"{[f[2] for f in facts]} MB")
    for name in heavy:
        print(f"  {name:15s} {'imported' if name in mods else '-'}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--importtime", action="store_true")
    p.add_argument("--profile", choices=["local", "ray"])
    p.add_argument("--worker-modules", action="store_true",
                   help="a Ray rollout worker's imports and memory")
    harness.add_arguments(p)
    args = p.parse_args(argv)
    if args.child:
        child(args)
        return
    if args.importtime:
        importtime()
        return
    if args.profile:
        profile(args.profile)
        return
    if args.worker_modules:
        worker_modules()
        return
    runs, _ = harness.run(args, "startup", __file__, args.systems)
    harness.print_groups(harness.summarize(runs, PHASES), [(k, k, "{:.2f}") for k in PHASES],
                         title="seconds from process start at the end of each phase, "
                               "median [min-max]")


if __name__ == "__main__":
    main()
