"""What a CQL checkpoint's critics think of the data's actions, its actor's and random ones.

Reads a CQL checkpoint of ``benchmarks/offline_cql.py`` (its ``cql/`` directory, or a
copy of it) and that run's dataset, then, on ``--rows`` rows drawn from the dataset:

- ``q_data``, ``q_greedy``, ``q_sample``, ``q_uniform``: the mean of ``min_i Q_i(s, a)``
  for the data's action, the actor's greedy action ``tanh(mean)``, an action sampled
  from the actor, and a uniformly random action of the unit box;
- ``greedy_above_data``: the share of rows where the greedy action is rated above the
  data's;
- ``greedy_gap``: the mean absolute difference, per action dimension, between the
  greedy action and the data's;
- ``observed_return``: the mean discounted return observed after those rows (an
  episode cut at the time limit counts less than it would have earned), and
  ``corr_q_return``, its correlation with ``Q(s, a_data)``;

then evaluates the checkpoint for ``--episodes`` greedy episodes on the env. A BC
checkpoint of the same run (its ``bc/`` directory) is only evaluated, so that both
stages are judged by the same episodes. Prints the
figures and saves them, with the command and commit, to
``benchmarks/results/cql_probe-STAMP.json``. It trains nothing; the figures say why a
CQL curve moves, not how fast anything runs.

    python benchmarks/cql_probe.py runs/offline_cql/Hopper-v5-seed0/cql
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)
import offline_cql  # noqa: E402  (stdlib only at import)


def load_rows(data_dir: Path, gamma: float) -> dict[str, np.ndarray]:
    """Every row of the dataset's Parquet files, with ``returns`` observed after each
    (a row ends an episode where the next row does not start from its ``new_obs``)."""
    import pyarrow.parquet as pq

    from flowrl.policies.maths import discounted_returns
    parts: dict[str, list[np.ndarray]] = {"obs": [], "actions": [], "returns": []}
    for path in sorted(data_dir.glob("*.parquet")):
        t = pq.read_table(path, columns=["obs", "actions", "new_obs", "rewards"])
        obs, new_obs = (np.stack(t[c].to_numpy(zero_copy_only=False)).astype(np.float32)
                        for c in ("obs", "new_obs"))
        ends = np.r_[np.any(new_obs[:-1] != obs[1:], axis=1), True]
        parts["obs"].append(obs)
        parts["actions"].append(np.stack(t["actions"].to_numpy(zero_copy_only=False))
                                .astype(np.float32))
        parts["returns"].append(discounted_returns(t["rewards"].to_numpy(), ends, gamma=gamma))
    if not parts["obs"]:
        raise SystemExit(f"{data_dir}: no Parquet files; pass the --state-dir of an "
                         "offline_cql.py run that has recorded its dataset")
    return {k: np.concatenate(v) for k, v in parts.items()}


def probe(policy, obs: np.ndarray, actions: np.ndarray, returns: np.ndarray,
          seed: int = 0) -> dict[str, float]:
    """The critic figures of the module docstring for a continuous CQL ``policy``
    (:class:`~flowrl.policies.cql.CQLPolicy`) on these rows (unit-box actions)."""
    import torch

    from flowrl.policies.distributions import SquashedGaussian
    gen = torch.Generator().manual_seed(seed)
    o, a = torch.as_tensor(obs), torch.as_tensor(actions)
    with torch.no_grad():
        def q(act):
            return torch.min(*policy.model.critics(o, act))
        dist = SquashedGaussian(policy.model.policy(o))
        greedy = dist.deterministic_sample()
        q_data, q_greedy = q(a), q(greedy)
        figures = {"q_data": q_data.mean(), "q_greedy": q_greedy.mean(),
                   "q_sample": q(dist.sample(gen)).mean(),
                   "q_uniform": q(torch.rand(a.shape, generator=gen) * 2.0 - 1.0).mean(),
                   "greedy_above_data": (q_greedy > q_data).float().mean(),
                   "greedy_gap": (greedy - a).abs().mean()}
    out = {k: float(v) for k, v in figures.items()}
    out["observed_return"] = float(returns.mean())
    out["corr_q_return"] = float(np.corrcoef(q_data.numpy(), returns)[0, 1])
    return out


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("checkpoint", type=Path,
                   help="a CQL (or BC) checkpoint directory of offline_cql.py")
    p.add_argument("--state-dir", type=Path,
                   default=offline_cql.DEFAULT_STATE_DIR / "Hopper-v5-seed0",
                   help="the offline_cql.py seed directory whose data/ the checkpoint trained on")
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--rows", type=int, default=4096)
    p.add_argument("--episodes", type=int, default=30)
    p.add_argument("--results-dir", type=Path,
                   default=Path(__file__).resolve().parent / "results")
    args = p.parse_args(argv)
    from flowrl.checkpoint import read_checkpoint
    stage = read_checkpoint(str(args.checkpoint))["algorithm"]
    if stage not in offline_cql.OFFLINE_STAGES:
        raise SystemExit(f"{args.checkpoint}: a {stage} checkpoint; cql_probe reads the CQL "
                         "and BC checkpoints of offline_cql.py")
    algo = offline_cql.offline_algorithm(stage, args.env, str(args.state_dir / "data"), seed=0,
                                         episodes=args.episodes, torch_threads=2)
    try:
        algo.restore(str(args.checkpoint))
        figures: dict = {"algorithm": stage}
        if stage == "cql":
            rows = load_rows(args.state_dir / "data", gamma=0.99)
            pick = np.random.default_rng(0).choice(len(rows["obs"]), args.rows, replace=False)
            policy = algo.get_policy()
            figures.update(updates=policy.updates, **probe(
                policy, rows["obs"][pick], rows["actions"][pick], rows["returns"][pick]))
        ev = algo.evaluate()["evaluation"]
        figures.update({f"eval_{k}": float(ev[f"episode_{k}"])
                        for k in ("reward_mean", "reward_min", "reward_max", "len_mean")})
    finally:
        algo.stop()
    for k, v in figures.items():
        print(f"{k:>20}: {v:,.3f}" if isinstance(v, (int, float)) else f"{k:>20}: {v}")
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    args.results_dir.mkdir(parents=True, exist_ok=True)
    path = harness.reserve_path(args.results_dir, "cql_probe", stamp)
    path.write_text(json.dumps({"benchmark": "cql_probe", "started_utc": stamp, "argv": sys.argv,
                                "commit": harness.git_commit(),
                                "settings": offline_cql.stage_settings(stage),
                                "figures": figures},
                               indent=1, default=float))
    print(f"saved: {path}")


if __name__ == "__main__":
    main()
