"""SAC gradient updates per second: flowrl's learner step vs a plain torch loop.

Systems (each seed of each in a fresh process, interleaved, on an idle CPU; see
``benchmarks/harness.py``), one SAC update at a time on one torch thread, the same
networks and batch for both (CleanRL's MuJoCo settings: 256x256 ReLU MLPs,
twin critics, batch ``--batch`` = 256, learned alpha, Polyak target update after every
update), on Hopper-sized rows (11 observation values, 3 action values):

- ``flowrl``: what one train step of SAC's plan runs on the learner: a batch sampled
  from a :class:`flowrl.replay.ReplayBuffer` (filled with ``--rows`` random
  transitions), turned into n-step rows' columns, then ``SACPolicy.learn_on_batch``
  (critic, actor and alpha steps) and ``SACPolicy.update_target``.
- ``torch``: the same update written as a plain loop over tensors, as CleanRL's
  ``sac_continuous_action.py`` has it (its actor, alpha and critic losses, three Adam
  optimizers, a Polyak update of the two targets), sampling its batch by random
  indices from numpy arrays of the same rows.

Each run does ``--warmup`` updates, then times ``--updates`` of them: updates/s. The
table gives the median [min-max] over seeds and flowrl's ratio to the plain loop
(target: at least 0.9x).

    python benchmarks/sac_update_rate.py                          # 3 seeds x 2 systems
    python benchmarks/sac_update_rate.py --quick --no-idle-wait   # smoke run
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)

SYSTEMS = ["flowrl", "torch"]
BASELINE = "torch"
OBS_DIM, ACT_DIM, HIDDEN = 11, 3, (256, 256)
KEYS = ["updates_per_s"]


def transitions(n: int, seed: int) -> dict:
    """``n`` random Hopper-sized transitions as numpy columns."""
    import numpy as np
    rng = np.random.default_rng(seed)
    return {"obs": rng.normal(size=(n, OBS_DIM)).astype(np.float32),
            "new_obs": rng.normal(size=(n, OBS_DIM)).astype(np.float32),
            "actions": rng.uniform(-1, 1, (n, ACT_DIM)).astype(np.float32),
            "rewards": rng.normal(size=n).astype(np.float32),
            "terminateds": rng.random(n) < 0.01}


def child_flowrl(args) -> dict:
    import gymnasium as gym
    import numpy as np
    import torch
    from flowrl.batch import SampleBatch
    from flowrl.policies.dqn import N_STEP_DISCOUNT
    from flowrl.policies.sac import SACPolicy
    from flowrl.replay import ReplayBuffer
    torch.set_num_threads(1)
    cols = transitions(args.rows, args.seed)
    cols[N_STEP_DISCOUNT] = np.where(cols["terminateds"], 0.0, 0.99).astype(np.float32)
    buffer = ReplayBuffer(args.rows, seed=args.seed)
    buffer.add(SampleBatch(cols))
    model = {"fcnet_hiddens": HIDDEN, "fcnet_activation": "relu"}
    policy = SACPolicy(gym.spaces.Box(-np.inf, np.inf, (OBS_DIM,), np.float32),
                       gym.spaces.Box(-1, 1, (ACT_DIM,), np.float32), Q_model=model,
                       policy_model=model, actor_learning_rate=3e-4,
                       critic_learning_rate=1e-3, entropy_learning_rate=1e-3, seed=args.seed)

    def update() -> None:
        policy.learn_on_batch(buffer.sample(args.batch))
        policy.update_target()

    return _timed(update, args)


def child_torch(args) -> dict:
    import numpy as np
    import torch
    from torch import nn
    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    cols = {k: torch.as_tensor(v) for k, v in transitions(args.rows, args.seed).items()}
    rng = np.random.default_rng(args.seed)

    def mlp(n_in: int, n_out: int) -> nn.Sequential:
        return nn.Sequential(nn.Linear(n_in, HIDDEN[0]), nn.ReLU(),
                             nn.Linear(HIDDEN[0], HIDDEN[1]), nn.ReLU(),
                             nn.Linear(HIDDEN[1], n_out))

    actor = mlp(OBS_DIM, 2 * ACT_DIM)
    q1, q2 = mlp(OBS_DIM + ACT_DIM, 1), mlp(OBS_DIM + ACT_DIM, 1)
    q1_target, q2_target = mlp(OBS_DIM + ACT_DIM, 1), mlp(OBS_DIM + ACT_DIM, 1)
    q1_target.load_state_dict(q1.state_dict())
    q2_target.load_state_dict(q2.state_dict())
    q_opt = torch.optim.Adam([*q1.parameters(), *q2.parameters()], lr=1e-3)
    actor_opt = torch.optim.Adam(actor.parameters(), lr=3e-4)
    log_alpha = torch.zeros(1, requires_grad=True)
    alpha_opt = torch.optim.Adam([log_alpha], lr=1e-3)
    target_entropy = -float(ACT_DIM)

    def act(obs):
        mean, log_std = actor(obs).chunk(2, dim=-1)
        log_std = log_std.clamp(-5, 2)
        std = log_std.exp()
        u = mean + std * torch.randn_like(mean)
        a = torch.tanh(u)
        logp = (-0.5 * ((u - mean) / std).pow(2) - log_std - 0.5 * math.log(2 * math.pi)
                - torch.log(1 - a.pow(2) + 1e-6)).sum(-1)
        return a, logp

    def update() -> None:
        idx = torch.as_tensor(rng.integers(0, args.rows, args.batch))
        obs, nxt, a = cols["obs"][idx], cols["new_obs"][idx], cols["actions"][idx]
        r, done = cols["rewards"][idx], cols["terminateds"][idx].float()
        alpha = log_alpha.exp().detach()
        with torch.no_grad():
            a2, logp2 = act(nxt)
            x2 = torch.cat([nxt, a2], 1)
            q_next = torch.min(q1_target(x2), q2_target(x2)).squeeze(1) - alpha * logp2
            y = r + (1 - done) * 0.99 * q_next
        x = torch.cat([obs, a], 1)
        q_loss = ((q1(x).squeeze(1) - y).pow(2).mean() + (q2(x).squeeze(1) - y).pow(2).mean())
        q_opt.zero_grad()
        q_loss.backward()
        q_opt.step()
        pa, logp = act(obs)
        xp = torch.cat([obs, pa], 1)
        actor_loss = (alpha * logp - torch.min(q1(xp), q2(xp)).squeeze(1)).mean()
        actor_opt.zero_grad()
        actor_loss.backward()
        actor_opt.step()
        alpha_loss = -(log_alpha * (logp.detach() + target_entropy)).mean()
        alpha_opt.zero_grad()
        alpha_loss.backward()
        alpha_opt.step()
        with torch.no_grad():
            for net, target in ((q1, q1_target), (q2, q2_target)):
                for p, t in zip(net.parameters(), target.parameters()):
                    t.mul_(0.995).add_(p, alpha=0.005)

    return _timed(update, args)


def _timed(update, args) -> dict:
    for _ in range(args.warmup):
        update()
    t = time.perf_counter()
    for _ in range(args.updates):
        update()
    seconds = time.perf_counter() - t
    return {"updates_per_s": args.updates / seconds, "seconds": seconds,
            "updates": args.updates}


def report(runs: list[dict], meta: dict) -> None:
    groups = [g for g in harness.summarize(runs, KEYS) if g.n]
    rates = {g.system: g.figures.get("updates_per_s") for g in groups}
    harness.print_groups(groups, [
        ("updates/s", "updates_per_s", "{:,.0f}"),
        (f"this / {BASELINE}",
         lambda g: harness.fmt_ratio(harness.ratio(rates.get(g.system), rates.get(BASELINE))))],
        title=f"SAC updates/s, {HIDDEN[0]}x{HIDDEN[1]} networks, batch {meta.get('batch')}, "
              "one torch thread: median [min-max] over seeds (target flowrl/torch >= 0.9x)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--batch", type=int, default=256)
    p.add_argument("--rows", type=int, default=100_000, help="transitions to sample from")
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--updates", type=int, default=1000)
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, rows=5000, warmup=5, updates=20)
    if args.child:
        fn = {"flowrl": child_flowrl, "torch": child_torch}.get(args.child)
        if fn is None:
            raise SystemExit(f"unknown system {args.child!r}; choose from {SYSTEMS}")
        harness.write_result(fn(args))
        return
    options = ("batch", "rows", "warmup", "updates")
    runs, meta = harness.run(args, "sac_update_rate", __file__, args.systems,
                             harness.forward(args, *options),
                             meta={k: getattr(args, k) for k in options})
    report(runs, meta)


if __name__ == "__main__":
    main()
