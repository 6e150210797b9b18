"""DQN on Pong at equal settings, flowrl against Stable-Baselines3: the score after
2M frames (500k agent steps) and the replay memory per million transitions.

Both systems train the same vanilla DQN, the settings of
``tuned_examples/dqn-pong.yaml`` (SB3 rl-zoo's Atari DQN with replay from 20,000
steps and epsilon annealed over 250,000): the Nature CNN with a 512-unit layer, Adam
at lr 1e-4, a batch of 32 every 4 env steps, a 100,000-transition uniform replay
buffer, a target copy every 1,000 steps, gradient norm clipped at 10, gamma 0.99,
one env, one torch thread, one process each (each seed in a fresh process,
interleaved, on an idle CPU: ``benchmarks/harness.py``).

- ``flowrl``: ``DQN`` on the in-process backend with ``ALE/Pong-v5`` and flowrl's
  DeepMind preprocessing; its replay stores frame stacks one frame per row.
- ``sb3``: SB3 ``DQN("CnnPolicy")`` on ``make_atari_env("ALE/Pong-v5")`` (its
  ``AtariWrapper``: the same preprocessing plus a FIRE press after resets) and
  ``VecFrameStack(4)``, with its memory-optimised buffer
  (``optimize_memory_usage=True``: ``obs`` and ``next_obs`` share one array).

Figures per run: the 100-game mean of whole-game scores at the end and its curve
(``result.curve``: ``[seconds from process start, agent steps, score]``), agent
steps/s, the replay buffer's bytes per stored transition (flowrl:
``stats()["bytes_per_row"]``; SB3: its buffer arrays' bytes over its capacity) and
so GB per million transitions, and the process's peak resident memory.

A 2M-frame run takes hours on this machine (once replay starts, about 53 agent
steps/s for either system on one core alone, 44 beside a second run), longer than
one sitting. With ``--resume-dir DIR`` each run checkpoints itself there every
``--checkpoint-every`` seconds and on SIGTERM (the model, its optimizer, the replay
buffer, the counters, the last 100 scores and the curve; about 1 GB for flowrl, 3
GB for SB3), and the same command run again continues each unfinished run from its
checkpoint (a finished run's checkpoint is kept, so its result can be reported
again). A resumed run starts new games (the game in progress when it stopped is
not counted) and its exploration, replay and counters carry on; its ``resumed``
lists ``[agent steps, seconds]`` where it continued, its seconds (the curve's,
``from_start_s``) add up the sittings, its speed counts only the seconds spent
training, and its peak resident memory is the last sitting's (loading SB3's
pickled buffer raises it by about the buffer's size). SB3's memory-optimised
buffer reads a row's next frame from the next row, so the one row stored last
before a stop gets the new game's first frame as its next frame.

    python benchmarks/dqn_pong.py                        # 2 systems x 3 seeds x 2M frames
    python benchmarks/dqn_pong.py --systems flowrl --seeds 1 --frames 400000
    python benchmarks/dqn_pong.py --quick --no-idle-wait   # smoke: 1 seed, 3,000 steps
    python benchmarks/dqn_pong.py --systems sb3 --seeds 1 --resume-dir runs/dqn-pong
"""

from __future__ import annotations

import argparse
import collections
import json
import math
import os
import resource
import shutil
import signal
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPEC = os.path.join(ROOT, "tuned_examples", "dqn-pong.yaml")
SYSTEMS = ["flowrl", "sb3"]
FRAME_SKIP = 4
WINDOW = 100
KEYS = ["final_score", "steps_per_s", "bytes_per_transition", "gb_per_million",
        "peak_rss_gb", "from_start_s"]


class Scores:
    """The last 100 whole-game scores and a curve point every ``every_s`` seconds
    (seconds from process start, plus ``offset_s``: those of earlier sittings)."""

    def __init__(self, every_s: float):
        self.window: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.every_s, self.last, self.curve = every_s, -math.inf, []
        self.offset_s = 0.0

    def seconds(self) -> float:
        return self.offset_s + harness.since_start()

    def add(self, returns) -> None:
        self.window.extend(float(r) for r in returns)

    def score(self) -> float:
        return sum(self.window) / len(self.window) if self.window else math.nan

    def point(self, steps: int, force: bool = False) -> None:
        now = self.seconds()
        if force or now - self.last >= self.every_s:
            score = self.score()
            self.curve.append([round(now, 1), int(steps), None if math.isnan(score) else score])
            self.last = now
            harness.progress(f"{steps:,} agent steps, score {score:+.1f} over the last "
                             f"{len(self.window)} games")


class Resume:
    """A run's checkpoints under ``--resume-dir`` (module docstring): ``DIR/SYSTEM-seedN/
    at-STEPS/`` holds the system's own checkpoint and ``progress.json`` (steps, the
    scores, the seconds trained, where it resumed), and ``latest`` names the newest
    complete one (replaced atomically after the directory is written, so a stop in
    the middle of a save leaves the previous checkpoint in charge). Without a
    directory it does nothing. SIGTERM asks for a checkpoint at the next chance."""

    def __init__(self, args, scores: Scores):
        self.dir = Path(args.resume_dir, f"{args.child}-seed{args.seed}") \
            if args.resume_dir else None
        self.every_s, self.scores = args.checkpoint_every, scores
        self.saved_at, self.stop = time.monotonic(), False
        self.train_s, self.resumed, self.started = 0.0, [], time.perf_counter()
        if self.dir:
            signal.signal(signal.SIGTERM, self._stop)

    def _stop(self, *_) -> None:
        self.stop = True

    def restore(self, load) -> int:
        """Continue from the newest complete checkpoint, if there is one:
        ``load(directory)`` restores the system's state; the scores, seconds trained
        and resume points come from its progress. The agent steps restored (0: none),
        so that a run whose last checkpoint is its end trains no further."""
        latest = self.dir / "latest" if self.dir else None
        if latest is None or not latest.exists():
            return 0
        where = self.dir / latest.read_text().strip()
        progress = json.loads((where / "progress.json").read_text())
        harness.progress(f"resuming from {where} at {progress['steps']:,} agent steps")
        load(where)
        self.scores.window.extend(progress["window"])
        self.scores.curve, self.scores.offset_s = progress["curve"], progress["wall_s"]
        self.train_s = progress["train_s"]
        self.resumed = progress["resumed"] + [[progress["steps"], progress["wall_s"]]]
        self.started = time.perf_counter()
        return int(progress["steps"])

    def due(self) -> bool:
        return self.dir is not None and (
            self.stop or time.monotonic() - self.saved_at >= self.every_s)

    def save(self, steps: int, write) -> None:
        """A checkpoint at ``steps`` (unless there is no directory or the newest one
        is at ``steps``): ``write(directory)`` stores the system's state."""
        if self.dir is None:
            return
        where, latest = self.dir / f"at-{steps:09d}", self.dir / "latest"
        if latest.exists() and latest.read_text().strip() == where.name:
            return
        self.train_s = self.trained_s()
        try:
            shutil.rmtree(where, ignore_errors=True)
            where.mkdir(parents=True)
            write(where)
            (where / "progress.json").write_text(json.dumps(
                {"steps": steps, "window": list(self.scores.window), "curve": self.scores.curve,
                 "train_s": self.train_s, "wall_s": round(self.scores.seconds(), 1),
                 "resumed": self.resumed}))
            (self.dir / "latest.tmp").write_text(where.name)
            os.replace(self.dir / "latest.tmp", self.dir / "latest")
            for old in self.dir.glob("at-*"):
                if old != where:
                    shutil.rmtree(old)
        finally:  # saving is not training
            self.saved_at, self.started = time.monotonic(), time.perf_counter()
        harness.progress(f"checkpoint at {steps:,} agent steps: {where}")
        if self.stop:
            sys.exit(f"stopped by SIGTERM at {steps:,} agent steps; run the same command "
                     "with --resume-dir again to continue")

    def trained_s(self) -> float:
        """Seconds trained, over every sitting (from when the run's training started
        or resumed, less the saves)."""
        return self.train_s + time.perf_counter() - self.started


def _result(scores: Scores, steps: int, train_s: float, bytes_per_transition: float,
            resumed: list) -> dict:
    return {"final_score": scores.score(), "games": len(scores.window), "agent_steps": steps,
            "resumed": resumed, "steps_per_s": steps / train_s if train_s > 0 else math.nan,
            "bytes_per_transition": bytes_per_transition,
            "gb_per_million": bytes_per_transition * 1e6 / 1e9,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
            "from_start_s": scores.seconds(), "curve": scores.curve}


def child_flowrl(args) -> dict:
    from training import spy_episodes

    from flowrl.experiment import algorithm_class, load_spec, make_config
    spec = load_spec(SPEC)
    config = make_config(spec["algo"], {"env": spec["env"], **spec["config"],
                                        "seed": args.seed, "torch_threads": 1,
                                        "checkpoint_replay_buffer": bool(args.resume_dir),
                                        **({"learning_starts": 1000} if args.quick else {})})
    algo = algorithm_class(spec["algo"])(config)
    scores = Scores(args.curve_every)
    spy_episodes(algo, scores.add)
    resume = Resume(args, scores)
    try:
        steps = resume.restore(lambda d: algo.restore(str(d / "flowrl")))
        while steps < args.frames // FRAME_SKIP:
            steps = int(algo.train()["timesteps_total"])
            scores.point(steps)
            if resume.due() or steps >= args.frames // FRAME_SKIP:
                resume.save(steps, lambda d: algo.save(str(d / "flowrl")))
        scores.point(steps, force=True)
        bytes_per_row = algo.local_replay_buffer.stats()["bytes_per_row"]
    finally:
        algo.stop()
    return _result(scores, steps, resume.trained_s(), bytes_per_row, resume.resumed)


def child_sb3(args) -> dict:
    from stable_baselines3 import DQN as SB3DQN
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.vec_env import VecFrameStack

    from atari_throughput import sb3_pong
    from flowrl.experiment import load_spec
    c = load_spec(SPEC)["config"]
    total = args.frames // FRAME_SKIP
    env = VecFrameStack(make_atari_env(sb3_pong, n_envs=1, seed=args.seed,
                                       env_kwargs={"frameskip": 1,
                                                   "repeat_action_probability": 0.0}), 4)
    eps = c["exploration_config"]
    model = SB3DQN("CnnPolicy", env, learning_rate=c["lr"], buffer_size=c["buffer_size"],
                   learning_starts=1000 if args.quick else c["learning_starts"],
                   batch_size=c["train_batch_size"], gamma=c["gamma"],
                   train_freq=c["rollout_fragment_length"], gradient_steps=1,
                   target_update_interval=c["target_network_update_freq"],
                   exploration_initial_eps=eps["initial_epsilon"],
                   exploration_final_eps=eps["final_epsilon"],
                   exploration_fraction=min(1.0, eps["epsilon_timesteps"] / total),
                   max_grad_norm=c["grad_clip"], optimize_memory_usage=True,
                   replay_buffer_kwargs={"handle_timeout_termination": False},
                   seed=args.seed, device="cpu", verbose=0)
    scores = Scores(args.curve_every)
    resume = Resume(args, scores)

    def load(where: Path) -> None:
        nonlocal model
        model = SB3DQN.load(where / "model.zip", env=env, device="cpu")
        model.load_replay_buffer(where / "replay.pkl")
        model._last_obs = None  # learn() then resets the new env rather than reuse the old obs

    def write(where: Path) -> None:
        model.save(where / "model.zip")
        model.save_replay_buffer(where / "replay.pkl")

    class Track(BaseCallback):
        def _on_step(self) -> bool:
            scores.add(info["episode"]["r"] for info in self.locals["infos"] if "episode" in info)
            scores.point(self.num_timesteps)
            if resume.due():
                resume.save(self.num_timesteps, write)
            return True

    fresh = not resume.restore(load)
    # learn() counts on from the restored num_timesteps (its exploration schedule too)
    model.learn(total_timesteps=total - model.num_timesteps, callback=Track(),
                reset_num_timesteps=fresh)
    resume.save(model.num_timesteps, write)
    train_s = resume.trained_s()
    scores.point(model.num_timesteps, force=True)
    buf = model.replay_buffer
    held = sum(getattr(buf, k).nbytes for k in ("observations", "next_observations", "actions",
                                                 "rewards", "dones", "timeouts")
               if getattr(buf, k, None) is not None)
    env.close()
    return _result(scores, model.num_timesteps, train_s, held / buf.buffer_size, resume.resumed)


CHILDREN = {"flowrl": child_flowrl, "sb3": child_sb3}


def report(runs: list[dict], frames: int) -> None:
    groups = harness.summarize(runs, KEYS)
    base = next((g for g in groups if g.system == "flowrl"), None)

    def speed(g):
        return harness.fmt_ratio(harness.ratio(g.figures.get("steps_per_s"),
                                               base.figures.get("steps_per_s"))
                                 if base else math.nan)

    harness.print_groups(groups, [
        (f"score at {frames / 1e6:g}M frames", "final_score", "{:+.1f}"),
        ("agent steps/s", "steps_per_s", "{:,.0f}"), ("steps/s / flowrl", speed),
        ("replay bytes / transition", "bytes_per_transition", "{:,.0f}"),
        ("GB / 1M transitions", "gb_per_million", "{:.1f}"),
        ("peak RSS GB", "peak_rss_gb", "{:.2f}"),
        ("min from start", "from_start_s", "{:.1f}", 60)],
        title="DQN on ALE/Pong-v5, tuned_examples/dqn-pong.yaml settings for both: median "
              "[min-max] over seeds (score: 100-game mean of whole-game scores)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="+", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--frames", type=int, default=2_000_000,
                   help="env frames per run (agent steps x 4)")
    p.add_argument("--curve-every", type=float, default=30.0,
                   help="seconds between two points of the saved curve")
    p.add_argument("--resume-dir", default=None,
                   help="checkpoint each run here and continue unfinished runs from it")
    p.add_argument("--checkpoint-every", type=float, default=900.0,
                   help="seconds between two checkpoints of a run (with --resume-dir)")
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    if args.frames < FRAME_SKIP or args.curve_every <= 0 or args.checkpoint_every <= 0:
        p.error("--frames must be >= 4, --curve-every and --checkpoint-every > 0")
    harness.shorten_for_quick(args, seeds=1, frames=12_000)
    if args.child:
        import torch
        torch.set_num_threads(1)
        harness.write_result(CHILDREN[args.child](args))
        return
    s = harness.settings_from(args)
    if s.run_timeout == 900.0:  # the harness default; a 2M-frame run takes far longer
        s.run_timeout = 4 * 3600.0
    if args.resume_dir:
        args.resume_dir = os.path.abspath(args.resume_dir)
    child_args = harness.forward(args, "frames", "curve_every", "checkpoint_every", "resume_dir",
                                 "quick")
    runs, meta = harness.run(args, "dqn_pong", __file__, args.systems, child_args,
                             meta={"frames": args.frames, "spec": SPEC}, settings=s,
                             resumable=args.resume_dir is not None)
    report(runs, meta["frames"])


if __name__ == "__main__":
    main()
