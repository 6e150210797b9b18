"""Multi-agent sampling throughput against single-agent vector sampling, per agent step.

Every system is a ``RolloutWorker`` stepping CartPole-v1 with PPO's 64x64
actor-critic (one torch thread), acting in numpy, and handing the envs
Python-int actions (both samplers); the figure is agent steps (rows) per second:

- ``vector``: the single-agent vector sampler, ``--agents`` (10) envs, one
  policy: ONE forward of 10 rows per step.
- ``multi-agent-1copy``: one copy of the ``--agents``-agent env
  ``make_multi_agent("CartPole-v1", 10)`` with 2 policies, agents mapped
  ``agent % 2``: one forward per policy per step over that policy's acting agents.
- ``multi-agent-Ncopies`` (``--copies``, 4): N copies of that env in one worker,
  still one forward per policy per step, now over the acting agents of all copies.
- ``vector-matched``: the vector sampler with ``--matched-envs`` (3) envs.

What "per agent step" compares fairly. An agent of the 10-agent env that
finished its CartPole episode waits, done, until the longest of the 10 ends (the
multi-agent protocol: a done agent does not act again this episode), so only
about 45% of the 10 slots act on a step, and those few rows are split over 2
forwards. One copy therefore feeds each forward about 3 rows, where the
10-env vector sampler feeds 10: the per-call cost of a forward (numpy for these
small batches, see ``flowrl/policies/numpy_acting.py``) is then spread over
about 3x fewer rows, whatever the sampler does. The
fair baseline for a sampler's own cost is the vector sampler at the SAME number
of acting rows per forward: ``vector-matched``, whose 3 envs match the
1-copy worker's measured rows per forward (each child reports
``rows_per_forward`` over its timed fragments; about 3.0, seed to seed 2.9-3.1).
The target, >= 0.7x per agent step, applies to ``multi-agent-1copy /
vector-matched`` and to ``multi-agent-4copies / vector`` (4 copies feed each
forward about 9.7 rows, about as many as the vector sampler's 10);
``multi-agent-1copy / vector`` is printed too, as what a user of one copy sees.

Besides the rate, each child reports ``calls_per_agent_step``: Python function
calls per agent step, counted by cProfile over one extra fragment after the
timed repetitions. It does not depend on machine load, so it tracks the
sampler's per-step Python overhead where timings are noisy.

One repetition is at least ``--steps`` agent steps, taken as whole ``sample()``
fragments of ``--fragment`` steps, after one warm-up fragment; each system runs
in its own process per seed (``benchmarks/harness.py``), ``--reps`` repetitions
each; reported: median over runs of each run's median rate.

    python benchmarks/multi_agent_sampling.py
    python benchmarks/multi_agent_sampling.py --quick --no-idle-wait
    python benchmarks/multi_agent_sampling.py --interleaved --reps 5
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

MIN_STEPS = 10_000


def systems_for(copies: int) -> list[str]:
    """The system names for ``--copies copies`` (the N-copies system is named after N)."""
    return ["vector", "vector-matched", "multi-agent-1copy", f"multi-agent-{copies}copies"]


def make_worker(system: str, args):
    """The RolloutWorker that ``system`` measures."""
    from flowrl.policies import PPOPolicy
    from flowrl.workers import RolloutWorker, make_multi_agent
    if system.startswith("vector"):
        envs = args.agents if system == "vector" else args.matched_envs
        return RolloutWorker("CartPole-v1", policy=PPOPolicy, num_envs=envs,
                             rollout_fragment_length=args.fragment, seed=args.seed)
    copies = 1 if system == "multi-agent-1copy" else args.copies
    return RolloutWorker(make_multi_agent("CartPole-v1", args.agents),
                         policies={"p0": PPOPolicy, "p1": PPOPolicy},
                         policy_mapping_fn=lambda agent, episode: f"p{agent % 2}",
                         num_envs=copies, rollout_fragment_length=args.fragment, seed=args.seed)


def interleaved(args, systems: list[str]) -> None:
    """All ``systems`` in THIS process, repetitions interleaved, rates in CPU time
    (:func:`harness.interleaved_cpu_rates`): for A/B comparisons on a loaded machine."""
    import torch
    torch.set_num_threads(1)
    workers = {k: make_worker(k, args) for k in systems}

    def repetition(worker):
        def rep() -> int:
            steps = 0
            while steps < args.steps:
                steps += worker.sample().agent_steps()
            return steps
        return rep
    try:
        for w in workers.values():
            w.sample()
        rates = harness.interleaved_cpu_rates({k: repetition(w) for k, w in workers.items()},
                                              args.reps)
    finally:
        for w in workers.values():
            w.stop()
    print(f"in one process, CPU time, {args.reps} interleaved repetitions of "
          f"{args.steps:,}+ agent steps")
    med = harness.print_interleaved(rates, "agent steps")
    for a, b in [("multi-agent-1copy", "vector"), ("multi-agent-1copy", "vector-matched"),
                 (f"multi-agent-{args.copies}copies", "vector")]:
        if a in med and b in med:
            print(f"{a} / {b}: {med[a] / med[b]:.2f}x per agent step")


def child(args) -> None:
    import torch
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    worker = make_worker(args.child, args)
    try:
        worker.sample()  # warm-up: buffers, torch kernels
        forwards_before = worker.sampler.num_forwards  # compute_actions calls
        rates, total = [], 0
        for _ in range(args.reps):
            steps, start = 0, time.perf_counter()
            while steps < args.steps:
                steps += worker.sample().agent_steps()
            rates.append(steps / (time.perf_counter() - start))
            total += steps
        forwards = worker.sampler.num_forwards - forwards_before
        profile = cProfile.Profile()
        profile.enable()
        profiled_steps = worker.sample().agent_steps()
        profile.disable()
        calls = sum(s[1] for s in pstats.Stats(profile).stats.values())
    finally:
        worker.stop()
    harness.write_result({"agent_steps_per_s": statistics.median(rates), "rates": rates,
                          "rows_per_forward": total / forwards,
                          "calls_per_agent_step": calls / profiled_steps})


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=None,
                   help="default: vector vector-matched multi-agent-1copy multi-agent-Ncopies")
    p.add_argument("--agents", type=int, default=10)
    p.add_argument("--copies", type=int, default=4)
    p.add_argument("--matched-envs", type=int, default=3,
                   help="envs of vector-matched: multi-agent-1copy's rows per forward, "
                        "rounded")
    p.add_argument("--fragment", type=int, default=100)
    p.add_argument("--steps", type=int, default=MIN_STEPS, help="agent steps per repetition")
    p.add_argument("--reps", type=int, default=3, help="repetitions per process")
    p.add_argument("--interleaved", action="store_true",
                   help="run the systems in this one process, interleaved, in CPU time "
                        "(A/B on a loaded machine; not the harness's isolated runs)")
    harness.add_arguments(p)
    args = p.parse_args(argv)
    systems = systems_for(args.copies)
    if args.systems:
        unknown = sorted(set(args.systems) - set(systems))
        if unknown:
            p.error(f"--systems {unknown}: unknown; choose from {systems}")
        systems = args.systems
    harness.shorten_for_quick(args, reps=1, steps=2_000)
    if not args.quick and args.steps < MIN_STEPS and not args.child:
        p.error(f"--steps {args.steps}: use at least {MIN_STEPS} agent steps per repetition")
    if args.child:
        child(args)
        return
    if args.interleaved:
        interleaved(args, systems)
        return
    child_args = harness.forward(args, "agents", "copies", "matched_envs", "fragment", "steps",
                                 "reps", "quick")
    runs, _ = harness.run(args, "multi_agent_sampling", __file__, systems, child_args,
                          meta=vars(args) | {"results_dir": None, "report": None})
    keys = ["agent_steps_per_s", "rows_per_forward", "calls_per_agent_step"]
    groups = {g.system: g for g in harness.summarize(runs, keys)}
    rows = [[k, g.label, harness.fmt_figure(g.figures.get("agent_steps_per_s"), "{:,.0f}"),
             harness.fmt_figure(g.figures.get("rows_per_forward"), "{:.2f}"),
             harness.fmt_figure(g.figures.get("calls_per_agent_step"), "{:.1f}")]
            for k, g in groups.items()]
    harness.print_table(["system", "runs", "agent steps/s", "rows/forward", "calls/agent step"],
                        rows, title=f"CartPole-v1, {args.agents} agents (2 policies) or envs, "
                                    f"fragments of {args.fragment} steps, {args.steps:,}+ "
                                    "agent steps per repetition")
    rate = {k: g.figures.get("agent_steps_per_s") for k, g in groups.items()}
    many = f"multi-agent-{args.copies}copies"
    for a, b, note in [("multi-agent-1copy", "vector", "1 copy: its agents that are done "
                        "wait for the episode's end, so a forward serves ~3 rows, not 10"),
                       (many, "vector", ""),
                       ("multi-agent-1copy", "vector-matched", "same rows per forward")]:
        if a in rate and b in rate:
            print(f"{a} / {b}: {harness.ratio(rate[a], rate[b]):.3f}x per agent step "
                  f"(target >= 0.7x{'; ' + note if note else ''})")
    matched = groups.get("multi-agent-1copy")
    if matched and "rows_per_forward" in matched.figures:
        rpf = matched.figures["rows_per_forward"][0]
        if abs(args.matched_envs - rpf) > 0.5:
            print(f"NOTE: --matched-envs {args.matched_envs} does not match multi-agent-1copy's "
                  f"{rpf:.2f} rows per forward: rerun with --matched-envs {round(rpf)}")


if __name__ == "__main__":
    main()
