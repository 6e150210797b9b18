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

    python benchmarks/dqn_pong.py                        # 2 systems x 3 seeds x 2M frames
    python benchmarks/dqn_pong.py --systems flowrl --seeds 1 --frames 400000
    python benchmarks/dqn_pong.py --quick --no-idle-wait   # smoke: 1 seed, 3,000 steps
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import resource
import sys
import time

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
    """The last 100 whole-game scores and a curve point every ``every_s`` seconds."""

    def __init__(self, every_s: float):
        self.window: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.every_s, self.last, self.curve = every_s, -math.inf, []

    def add(self, returns) -> None:
        self.window.extend(float(r) for r in returns)

    def score(self) -> float:
        return sum(self.window) / len(self.window) if self.window else math.nan

    def point(self, steps: int, force: bool = False) -> None:
        now = harness.since_start()
        if force or now - self.last >= self.every_s:
            score = self.score()
            self.curve.append([round(now, 1), int(steps), None if math.isnan(score) else score])
            self.last = now
            harness.progress(f"{steps:,} agent steps, score {score:+.1f} over the last "
                             f"{len(self.window)} games")


def _result(scores: Scores, steps: int, train_s: float, bytes_per_transition: float) -> dict:
    return {"final_score": scores.score(), "games": len(scores.window), "agent_steps": steps,
            "steps_per_s": steps / train_s if train_s > 0 else math.nan,
            "bytes_per_transition": bytes_per_transition,
            "gb_per_million": bytes_per_transition * 1e6 / 1e9,
            "peak_rss_gb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 / 1e9,
            "from_start_s": harness.since_start(), "curve": scores.curve}


def child_flowrl(args) -> dict:
    from impala_throughput import spy_episodes

    from flowrl.experiment import algorithm_class, load_spec, make_config
    spec = load_spec(SPEC)
    config = make_config(spec["algo"], {"env": spec["env"], **spec["config"],
                                        "seed": args.seed, "torch_threads": 1,
                                        **({"learning_starts": 1000} if args.quick else {})})
    algo = algorithm_class(spec["algo"])(config)
    scores = Scores(args.curve_every)
    spy_episodes(algo, scores.add)
    start, steps = time.perf_counter(), 0
    try:
        while steps < args.frames // FRAME_SKIP:
            steps = int(algo.train()["timesteps_total"])
            scores.point(steps)
        scores.point(steps, force=True)
        bytes_per_row = algo.local_replay_buffer.stats()["bytes_per_row"]
    finally:
        algo.stop()
    return _result(scores, steps, time.perf_counter() - start, bytes_per_row)


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
    seen = [0]

    class Track(BaseCallback):
        def _on_step(self) -> bool:
            done = [info["episode"]["r"] for info in self.locals["infos"] if "episode" in info]
            scores.add(done)
            seen[0] += len(done)
            scores.point(self.num_timesteps)
            return True

    start = time.perf_counter()
    model.learn(total_timesteps=total, callback=Track())
    train_s = time.perf_counter() - start
    scores.point(model.num_timesteps, force=True)
    buf = model.replay_buffer
    held = sum(getattr(buf, k).nbytes for k in ("observations", "next_observations", "actions",
                                                 "rewards", "dones", "timeouts")
               if getattr(buf, k, None) is not None)
    env.close()
    return _result(scores, model.num_timesteps, train_s, held / buf.buffer_size)


CHILDREN = {"flowrl": child_flowrl, "sb3": child_sb3}


def report(runs: list[dict], frames: int) -> None:
    groups = harness.summarize(runs, KEYS)
    base = next((g for g in groups if g.system == "flowrl"), None)
    rows = []
    for g in groups:
        f = g.figures.get
        speed = harness.ratio(f("steps_per_s"), base.figures.get("steps_per_s")) if base else math.nan
        rows.append([g.system, g.label, harness.fmt_figure(f("final_score"), "{:+.1f}"),
                     harness.fmt_figure(f("steps_per_s"), "{:,.0f}"),
                     "-" if math.isnan(speed) else f"{speed:.2f}x",
                     harness.fmt_figure(f("bytes_per_transition"), "{:,.0f}"),
                     harness.fmt_figure(f("gb_per_million"), "{:.1f}"),
                     harness.fmt_figure(f("peak_rss_gb"), "{:.2f}"),
                     harness.fmt_figure(f("from_start_s") and tuple(
                         x / 60 for x in f("from_start_s")), "{:.1f}")])
    harness.print_table(["system", "runs", f"score at {frames / 1e6:g}M frames",
                         "agent steps/s", "steps/s / flowrl", "replay bytes / transition",
                         "GB / 1M transitions", "peak RSS GB", "min from start"], rows,
                        title="DQN on ALE/Pong-v5, tuned_examples/dqn-pong.yaml settings for "
                              "both: median [min-max] over seeds (score: 100-game mean of "
                              "whole-game scores)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="+", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--frames", type=int, default=2_000_000,
                   help="env frames per run (agent steps x 4)")
    p.add_argument("--curve-every", type=float, default=30.0,
                   help="seconds between two points of the saved curve")
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    if args.frames < FRAME_SKIP or args.curve_every <= 0:
        p.error("--frames must be >= 4 and --curve-every > 0")
    if args.quick:
        args.frames = min(args.frames, 12_000)
        if args.seeds is None:
            args.seeds = 1
    if args.child:
        import torch
        torch.set_num_threads(1)
        harness.write_result(CHILDREN[args.child](args))
        return
    s = harness.settings_from(args)
    if s.run_timeout == 900.0:  # the harness default; a 2M-frame run takes far longer
        s.run_timeout = 4 * 3600.0
    child_args = ["--frames", str(args.frames), "--curve-every", str(args.curve_every)]
    if args.quick:
        child_args.append("--quick")
    runs, _ = harness.run_all("dqn_pong", os.path.abspath(__file__), args.systems, s,
                              child_args, meta={"frames": args.frames, "spec": SPEC})
    if args.report:
        import json
        args.frames = json.loads(args.report.read_text())["meta"]["frames"]
    report(runs, args.frames)


if __name__ == "__main__":
    main()
