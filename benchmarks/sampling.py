"""flowrl's RolloutWorker.sample() against an independent raw sampling loop (no flowrl code).

Both step one gymnasium ``SyncVectorEnv`` of ``--num-envs`` CartPole-v1 copies
(``SAME_STEP`` autoreset) with one batched torch forward per step, one torch
thread, and the same work:

- ``raw``: a CleanRL-style loop written here with plain gymnasium, numpy and
  torch: separate 64x64 tanh policy and value MLPs, a categorical action sample,
  the observation/action/reward/done/log-prob/value columns stored in
  preallocated ``(T, N)`` arrays, and GAE(0.99, 0.95) over each ``T``-step
  segment (bootstrapping from ``V(s_T)``);
- ``flowrl``: ``RolloutWorker("CartPole-v1", policy=PPOPolicy, num_envs=N,
  rollout_fragment_length=T).sample()``, which also tracks episodes, stores
  next observations and returns a postprocessed SampleBatch. It acts through
  numpy (the policies' default ``numpy_inference``);
- ``flowrl-torch`` (only when named in ``--systems``): the same with
  ``numpy_inference=False``, every forward through torch.

One repetition is ``--steps`` env steps (at least 10,000) taken as segments of
``--fragment`` steps per env, after one warm-up segment. Each system runs in its
own process per seed (``benchmarks/harness.py``), ``--reps`` repetitions each;
reported: env steps/s (median over runs of each run's median) and flowrl / raw.

    python benchmarks/sampling.py
    python benchmarks/sampling.py --quick --no-idle-wait
    python benchmarks/sampling.py --interleaved --systems raw flowrl flowrl-torch
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from training import plain_batch  # noqa: E402  (stdlib at import)

SYSTEMS = ["raw", "flowrl"]
#: Optional: flowrl with ``numpy_inference=False`` (every forward through torch).
EXTRA_SYSTEMS = ["flowrl-torch"]
MIN_STEPS = 10_000


def raw_sampler(num_envs: int, fragment: int, seed: int):
    """A generator of segments: each ``next()`` samples ``num_envs * fragment`` env steps."""
    import gymnasium as gym
    import numpy as np
    import torch
    from torch import nn

    torch.manual_seed(seed)

    def mlp(out):
        return nn.Sequential(nn.Linear(4, 64), nn.Tanh(), nn.Linear(64, 64), nn.Tanh(),
                             nn.Linear(64, out))

    pi, vf = mlp(2), mlp(1)
    gen = torch.Generator().manual_seed(seed)
    venv = gym.vector.SyncVectorEnv([lambda: gym.make("CartPole-v1")] * num_envs,
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    obs, _ = venv.reset(seed=seed)
    T, N = fragment, num_envs
    obs_buf = np.empty((T, N, 4), np.float32)
    act_buf = np.empty((T, N), np.int64)
    rew_buf = np.empty((T, N), np.float32)
    done_buf = np.empty((T, N), bool)
    logp_buf = np.empty((T, N), np.float32)
    val_buf = np.empty((T, N), np.float32)
    gamma, lam = 0.99, 0.95
    while True:
        for t in range(T):
            with torch.inference_mode():
                x = torch.as_tensor(obs, dtype=torch.float32)
                logits = pi(x)
                probs = torch.softmax(logits, -1)
                a = torch.multinomial(probs, 1, generator=gen).squeeze(-1)
                logp = torch.log_softmax(logits, -1).gather(-1, a[:, None]).squeeze(-1)
                v = vf(x).squeeze(-1)
            actions = a.numpy()
            obs_buf[t] = obs
            obs, rew, term, trunc, _ = venv.step(actions)
            act_buf[t], rew_buf[t], done_buf[t] = actions, rew, term | trunc
            logp_buf[t], val_buf[t] = logp.numpy(), v.numpy()
        with torch.inference_mode():
            last_v = vf(torch.as_tensor(obs, dtype=torch.float32)).squeeze(-1).numpy()
        yield plain_batch(obs_buf, act_buf, rew_buf, done_buf, logp_buf, val_buf, last_v,
                          gamma=gamma, lam=lam)


def flowrl_sampler(num_envs: int, fragment: int, seed: int, numpy_inference: bool = True):
    from flowrl.policies import PPOPolicy
    from flowrl.workers import RolloutWorker
    worker = RolloutWorker("CartPole-v1", policy=PPOPolicy, num_envs=num_envs,
                           rollout_fragment_length=fragment, seed=seed,
                           policy_config={"numpy_inference": numpy_inference})
    try:
        while True:
            yield worker.sample()
    finally:
        worker.stop()


def make_sampler(system: str, num_envs: int, fragment: int, seed: int):
    """The segment generator of ``system``."""
    if system == "raw":
        return raw_sampler(num_envs, fragment, seed)
    return flowrl_sampler(num_envs, fragment, seed, numpy_inference=system == "flowrl")


def interleaved(args) -> None:
    """All ``--systems`` in THIS process, repetitions interleaved, rates in CPU time
    (:func:`harness.interleaved_cpu_rates`): for A/B comparisons on a loaded machine."""
    import torch
    torch.set_num_threads(1)
    segments = max(1, -(-args.steps // (args.num_envs * args.fragment)))
    steps = segments * args.num_envs * args.fragment
    gens = {k: make_sampler(k, args.num_envs, args.fragment, args.seed) for k in args.systems}
    for gen in gens.values():
        next(gen)

    def repetition(gen):
        def rep() -> int:
            for _ in range(segments):
                next(gen)
            return steps
        return rep
    try:
        rates = harness.interleaved_cpu_rates({k: repetition(g) for k, g in gens.items()},
                                              args.reps)
    finally:
        for gen in gens.values():
            gen.close()
    print(f"in one process, CPU time, {args.reps} interleaved repetitions of {steps:,} steps")
    med = harness.print_interleaved(rates, "env steps")
    for k in med:
        if k != "raw" and "raw" in med:
            print(f"{k} / raw: {med[k] / med['raw']:.2f}x")


def child(args) -> None:
    import torch
    torch.set_num_threads(1)
    segments = max(1, -(-args.steps // (args.num_envs * args.fragment)))
    steps = segments * args.num_envs * args.fragment
    gen = make_sampler(args.child, args.num_envs, args.fragment, args.seed)
    next(gen)  # warm-up: buffers, torch kernels
    rates = []
    for _ in range(args.reps):
        start = time.perf_counter()
        for _ in range(segments):
            next(gen)
        rates.append(steps / (time.perf_counter() - start))
    gen.close()
    harness.write_result({"steps_per_s": statistics.median(rates), "steps_per_rep": steps,
                          "rates": rates})


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS + EXTRA_SYSTEMS)
    p.add_argument("--interleaved", action="store_true",
                   help="run the systems in this one process, interleaved, in CPU time "
                        "(A/B on a loaded machine; not the harness's isolated runs)")
    p.add_argument("--num-envs", type=int, default=8)
    p.add_argument("--fragment", type=int, default=64)
    p.add_argument("--steps", type=int, default=MIN_STEPS, help="env steps per repetition")
    p.add_argument("--reps", type=int, default=5, help="repetitions per process")
    harness.add_arguments(p)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, reps=1)
    if not args.quick and args.steps < MIN_STEPS:
        p.error(f"--steps {args.steps}: use at least {MIN_STEPS} env steps per repetition")
    if args.child:
        child(args)
        return
    if args.interleaved:
        interleaved(args)
        return
    runs, _ = harness.run(args, "sampling", __file__, args.systems,
                          harness.forward(args, "num_envs", "fragment", "steps", "reps"),
                          meta=vars(args) | {"results_dir": None})
    groups = {g.system: g for g in harness.summarize(runs, ["steps_per_s"])}
    fig = {k: g.figures.get("steps_per_s") for k, g in groups.items()}
    rows = [[k, groups[k].label, harness.fmt_figure(fig[k], "{:,.0f}")] for k in groups]
    harness.print_table(["system", "runs", "env steps/s"], rows,
                        title=f"CartPole-v1, {args.num_envs} envs, segments of {args.fragment} "
                              f"steps, {args.steps:,}+ steps per repetition")
    for k in fig:
        if k != "raw" and "raw" in fig:
            print(f"{k} / raw: {harness.ratio(fig.get(k), fig.get('raw')):.2f}x")


if __name__ == "__main__":
    main()
