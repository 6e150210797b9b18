"""A Pong learning curve in agent steps, over as many sittings as it takes.

Trains ``tuned_examples/<algo>-pong.yaml`` (or ``--config``) with ``flowrl train``
in a fresh process up to ``--steps`` agent steps (one step = 4 frames), with
checkpoints every ``--checkpoint-freq`` iterations under ``--run-root``. Run the
same command again and it continues from the newest checkpoint, so a run longer
than one sitting adds up (``--sitting-steps`` caps the steps one sitting trains).
Each sitting is its own ``flowrl train`` run directory; the curve joins their
``result.jsonl`` rows by env steps (rows an unsaved stretch of an earlier sitting
trained past the checkpoint a later sitting restored are dropped: the later
sitting trained those steps again).

The score is ``episode_reward_mean``: the mean of the last 100 whole games
(unclipped, as published Atari results report; Pong has no lives). A checkpoint
carries those games, so a resumed sitting's means go on over the same window; a
sitting that restored a checkpoint without them (written by flowrl before it kept
them) starts an empty window, which ``restored.json`` in the sitting records.
Figures: agent steps and training seconds to a score >= 0 and >= +18, counted only
where the window holds 100 games, beside the reference points in agent steps:

- RLlib IMPALA's logged pong-speedrun runs (ray-project/rl-experiments, 32-128
  workers, 42x42): 0 at 3.5-4.1M, +18 at 4.7-5.5M;
- RLlib APPO's tuned_examples/ppo/pong-appo.yaml: "solves Pong in 2.5M timesteps";
- CleanRL's ppo_atari.py (its published curve): 0 at about 1.3M, +18 at about 3.5M.

Writes ``benchmarks/results/pong_curve-<algo>-seed<N>-<UTC time>.json`` with the
curve (``[agent steps, score, games, training seconds, games in the window]``), the marks, the sittings
and the spec, and prints them. ``--report`` trains nothing and reports what the run
directory holds.

    python benchmarks/pong_curve.py --algo impala --steps 6e6
    python benchmarks/pong_curve.py --algo ppo --steps 4e6 --sitting-steps 1e6
    python benchmarks/pong_curve.py --algo impala --report
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REFERENCES = {  # agent steps to a 100-game mean of 0 and of +18
    "RLlib IMPALA (pong-speedrun, 32-128 workers)": {"0": [3.5e6, 4.1e6], "18": [4.7e6, 5.5e6]},
    "RLlib APPO (pong-appo.yaml)": {"18": [2.5e6, 2.5e6]},
    "CleanRL PPO (ppo_atari.py)": {"0": [1.3e6, 1.3e6], "18": [3.5e6, 3.5e6]},
}
#: RLlib IMPALA's logged pong-speedrun runs (ray-project/rl-experiments,
#: pong-impala-lowlatency-{32,64,128}/progress.csv): the last 100-game mean at or before
#: each of these agent-step counts (millions), for a curve at equal steps.
AT_STEPS_M = (0.5, 1.0, 1.5, 2.0, 2.5, 3.0, 3.5, 4.0, 4.5, 5.0, 5.5, 6.0)
RLLIB_IMPALA_CURVES = {
    "32 workers": (-20.3, -19.9, -19.8, -19.4, -17.8, -16.8, -12.8, 10.9, 17.2, 17.9, 18.6, 18.2),
    "64 workers": (-20.8, -20.1, -20.0, -19.5, -18.4, -15.9, -12.5, -3.0, 10.2, 17.6, 18.4, 18.9),
    "128 workers": (None, -20.1, -19.7, -19.3, -16.7, -11.2, -4.3, 12.4, 17.7, 18.6, 18.7, 18.8),
}
MARKS = (0.0, 18.0)
GAMES = 100  # the score is a 100-game mean: a mark counts once that many games ended


def sittings(root: str) -> list[str]:
    """The run directories ``flowrl train`` made under ``root``, oldest first."""
    return sorted(glob.glob(os.path.join(root, "sitting-*", "*", "result.jsonl")),
                  key=lambda p: p.split(os.sep)[-3])


def newest_checkpoint(root: str) -> str | None:
    found = glob.glob(os.path.join(root, "sitting-*", "*", "checkpoint", "checkpoint_*"))
    found = [p for p in found if os.path.isdir(p)]
    if not found:
        return None
    # the newest sitting's newest checkpoint: sitting, then checkpoint number
    return max(found, key=lambda p: (p.split(os.sep)[-4], p))


def curve(root: str) -> tuple[list[list], list[dict]]:
    """``(rows, sittings)``: the joined curve and, per sitting, the agent steps it
    started from (those its checkpoint restored) and reached."""
    joined: list[list] = []
    info = []
    for path in sittings(root):
        with open(path) as f:
            results = [json.loads(line) for line in f if line.strip()]
        if not results:
            continue
        first = results[0]
        start = first["timesteps_total"] - first["timesteps_this_iter"]
        games_before = first.get("episodes_total", 0) - first.get("episodes_this_iter", 0)
        restored = os.path.join(os.path.dirname(os.path.dirname(path)), "restored.json")
        window = 0
        if os.path.exists(restored):
            with open(restored) as f:
                window = json.load(f)["window_games"]
        joined = [r for r in joined if r[0] <= start]
        joined += [[r["timesteps_total"], r.get("episode_reward_mean"),
                    r.get("episodes_total", 0), r.get("time_total_s", 0.0),
                    min(GAMES, window + r.get("episodes_total", 0) - games_before)]
                   for r in results]
        info.append({"dir": os.path.relpath(os.path.dirname(path), root),
                     "from_steps": start, "to_steps": joined[-1][0],
                     "window_games_restored": window})
    return joined, info


def at_steps(rows: list[list]) -> list:
    """The score at or before each of :data:`AT_STEPS_M` (None where the curve has no
    score yet or does not reach that far)."""
    out = []
    for m in AT_STEPS_M:
        before = [r for r in rows if r[0] <= m * 1e6 and r[1] is not None]
        out.append(round(before[-1][1], 1) if before and rows[-1][0] >= m * 1e6 else None)
    return out


def marks(rows: list[list]) -> dict:
    out = {}
    for mark in MARKS:
        hit = next((r for r in rows if r[1] is not None and r[4] >= GAMES and r[1] >= mark),
                   None)
        out[f"{mark:g}"] = None if hit is None else {"steps": hit[0], "train_s": hit[3]}
    return out


def train(args, root: str, spec_path: str) -> int:
    restore = newest_checkpoint(root)
    done = curve(root)[0]
    reached = done[-1][0] if done else 0
    if reached >= args.steps:
        return 0
    stop = int(min(args.steps, reached + args.sitting_steps)) if args.sitting_steps \
        else int(args.steps)
    sitting = os.path.join(root, f"sitting-{len(sittings(root)):03d}")
    os.makedirs(sitting, exist_ok=True)
    cmd = [sys.executable, "-m", "flowrl.cli", "train", "--config", spec_path,
           "--stop-timesteps", str(stop), "--stop-reward", "1000", "--run-dir", sitting,
           "--checkpoint-freq", str(args.checkpoint_freq), "--keep-checkpoints", "2",
           "--seed", str(args.seed), "--no-tensorboard", "--quiet",
           "--set", f"min_time_s_per_reporting={args.report_s}"]
    if restore:
        cmd += ["--restore", restore]
        from flowrl.checkpoint import read_checkpoint
        from flowrl.ops.metric_ops import RECENT_EPISODES
        saved = read_checkpoint(restore)["metrics"]["info"].get(RECENT_EPISODES, [])
        with open(os.path.join(sitting, "restored.json"), "w") as f:
            json.dump({"checkpoint": restore, "window_games": len(saved)}, f)
    print(f"sitting {os.path.basename(sitting)}: {reached:,} -> {stop:,} agent steps"
          + (f", from {restore}" if restore else ""), flush=True)
    return subprocess.call(cmd)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", choices=["impala", "appo", "ppo"], default="impala")
    p.add_argument("--config", default=None, metavar="FILE.yaml")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--steps", type=float, default=6e6, help="agent steps in all")
    p.add_argument("--sitting-steps", type=float, default=0,
                   help="at most this many agent steps in this sitting (0: to --steps)")
    p.add_argument("--run-root", default=os.path.join(HERE, "..", "runs", "pong_curve"))
    p.add_argument("--checkpoint-freq", type=int, default=20)
    p.add_argument("--report-s", type=float, default=30.0,
                   help="min_time_s_per_reporting: one curve point per this many seconds")
    p.add_argument("--report", action="store_true", help="train nothing; report the run")
    p.add_argument("--quick", action="store_true",
                   help="smoke run: 3,000 agent steps in a fresh run directory under "
                        "benchmarks/results/smoke/ (not a measurement)")
    args, _ = p.parse_known_args(argv)  # run_all.sh's other harness options are ignored
    results = os.path.join(HERE, "results", *(["smoke"] if args.quick else []))
    if args.quick:
        args.steps, args.report_s = 3000, 0.0
        args.run_root = os.path.join(results, "pong_curve_runs",
                                     time.strftime("%Y%m%dT%H%M%SZ", time.gmtime()))

    spec_path = os.path.abspath(args.config or os.path.join(
        HERE, "..", "tuned_examples", f"{args.algo}-pong.yaml"))
    root = os.path.abspath(os.path.join(args.run_root, f"{args.algo}-seed{args.seed}"))
    if not args.report:
        rc = train(args, root, spec_path)
        if rc:
            print(f"flowrl train exited {rc}; the run continues from its newest checkpoint "
                  "when this command runs again", file=sys.stderr)
    rows, info = curve(root)
    if not rows:
        print(f"no results under {root}", file=sys.stderr)
        return 1
    hit = marks(rows)
    with open(spec_path) as f:
        spec_text = f.read()
    out = {"algo": args.algo, "seed": args.seed, "config": os.path.relpath(spec_path, HERE),
           "spec": spec_text, "steps": rows[-1][0], "marks": hit, "sittings": info,
           "references": REFERENCES, "at_steps_m": AT_STEPS_M, "at_steps": at_steps(rows),
           "rllib_impala_at_steps": RLLIB_IMPALA_CURVES, "curve": rows}
    print(f"{args.algo} seed {args.seed}: {rows[-1][0]:,} agent steps in "
          f"{rows[-1][3] / 60:.0f} training minutes over {len(info)} sitting(s), "
          f"score {rows[-1][1]}")
    for mark, at in hit.items():
        where = "not yet" if at is None else \
            f"{at['steps'] / 1e6:.2f}M steps, {at['train_s'] / 60:.0f} min"
        print(f"  score >= {mark}: {where}")
    print("  at agent steps (M):         " + " ".join(f"{m:>5}" for m in AT_STEPS_M))
    table = {f"flowrl {args.algo}": out["at_steps"]}
    table.update({f"RLlib IMPALA {k}": v for k, v in RLLIB_IMPALA_CURVES.items()})
    for name, scores in table.items():
        print(f"  {name:26s} " + " ".join("    -" if x is None else f"{x:5.1f}" for x in scores))
    for name, ref in REFERENCES.items():
        print(f"  reference {name}: " + ", ".join(
            f">= {m} at {lo / 1e6:.1f}-{hi / 1e6:.1f}M" for m, (lo, hi) in ref.items()))
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    os.makedirs(results, exist_ok=True)
    path = os.path.join(results, f"pong_curve-{args.algo}-seed{args.seed}-{stamp}.json")
    with open(path, "w") as f:
        json.dump(out, f, indent=1)
    print(f"saved: {path}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
