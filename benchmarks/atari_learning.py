"""Pong to a 100-episode mean of +18 with flowrl on this machine's CPUs: wall time
from process start, with the learning curve saved.

One system per ``--algo`` (default ``impala``; also ``appo`` and ``ppo``), each
trained from its tuned example ``tuned_examples/<algo>-pong.yaml`` (or
``--config FILE.yaml``) with the run's seed, each seed in a fresh process on an
idle CPU (``benchmarks/harness.py``). The score is the mean of the last 100
whole-game Pong scores (unclipped, all lives: what published Atari results
report), taken from the completed episodes flowrl's reporting drains from its
workers; the curve holds ``[seconds from process start, env steps, score,
episodes]`` (score null until a game has ended) every ``--curve-every`` seconds and
is saved with the run in the results JSON (``result.curve``). A run stops when the
score reaches ``--target`` (default +18) or at the ``--budget-min`` wall budget from
process start (default 90).

``--algo sb3-ppo`` is the reference at equal settings (``pip install
flowrl[bench]``): Stable-Baselines3 PPO configured from the PPO spec
(``ppo-pong.yaml`` or ``--config``): its env count (workers x envs per worker),
fragment, minibatch, epochs, lr schedule, gamma, lambda, clip, value clip,
entropy and value weights, gradient clip, Adam epsilon, torch threads and frame
side, and the spec's CNN (flowrl's trunk as SB3's features extractor; heads
initialised as flowrl's: orthogonal, gain 0.01 for the logits and 1 for the
value). What SB3 does its own way: advantages standardized per minibatch, the
value loss on the clipped value alone (flowrl: the larger of clipped and
unclipped), a FIRE press after resets (its ``AtariWrapper``), and its envs stepped
in one process (``DummyVecEnv``), so compare it with flowrl at equal env steps
(``--compare``), not by minutes. Specs it cannot express (a KL term, an LSTM, a
custom model, separate value layers, a train batch other than envs x fragment)
are refused.

Before 100 games have ended the curve's score is the mean of those there are; the
times to 0 and to the target count only full 100-game windows.

Figures per run: time from process start to a score >= 0 and to ``--target`` (the
issue's targets on 2 CPU cores: >= 0 within 45 min, >= +18 within 90 min), env
steps at those points, the final and best score, env steps/s and start-up.

Anchors (not measured here): RLlib's published IMPALA reached Pong in about 3-8
minutes on 16-128 workers; a user report (ray-project/ray#4908) needed 53 minutes
and 11M steps; CleanRL's PPO takes about 80 minutes for 10M steps on a GPU box.

    python benchmarks/atari_learning.py                          # IMPALA, 3 seeds, <= 90 min each
    python benchmarks/atari_learning.py --algo impala appo ppo --seeds 1
    python benchmarks/atari_learning.py --algo ppo sb3-ppo --budget-min 45
    python benchmarks/atari_learning.py --quick --no-idle-wait   # smoke: 1 seed, 1 min budget

``--compare A.json B.json ...`` trains nothing: it prints the score each saved run
had at equal env steps (``--at-steps``, millions) and at equal minutes from process
start (``--at-min``), the comparison that holds when env steps/s differ between
sessions.

    python benchmarks/atari_learning.py --compare results/atari_learning-2026*.json
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ALGOS = ["impala", "appo", "ppo"]
SB3_PPO = "sb3-ppo"
WINDOW = 100
PROGRESS_EVERY_S = 60.0  # a line on the run's log (its path is printed as it starts)


def spec_path(args, algo: str) -> str:
    return args.config or os.path.join(ROOT, "tuned_examples", f"{algo}-pong.yaml")


class Curve:
    """The 100-game window of whole-game scores, its curve and the first times it
    reached 0 and the target (seconds from process start, env steps)."""

    def __init__(self, target: float, every_s: float):
        self.target, self.every_s = target, every_s
        self.window: collections.deque[float] = collections.deque(maxlen=WINDOW)
        self.episodes = 0
        self.points: list[list[float]] = []
        self.at_zero = self.at_target = None
        self.last_point = self.last_progress = -math.inf

    def add(self, returns) -> None:
        for r in returns:
            self.window.append(float(r))
            self.episodes += 1

    def score(self) -> float:
        return sum(self.window) / len(self.window) if self.window else math.nan

    def update(self, env_steps: int, force: bool = False) -> None:
        now = harness.since_start()
        score = self.score()
        full = len(self.window) == WINDOW  # a mean over fewer games is not the measure
        if full and self.at_zero is None and score >= 0:
            self.at_zero = (now, env_steps)
        if full and self.at_target is None and score >= self.target:
            self.at_target = (now, env_steps)
            force = True
        if force or now - self.last_point >= self.every_s:
            self.points.append([round(now, 2), int(env_steps),
                                None if math.isnan(score) else score, self.episodes])
            self.last_point = now
        if force or now - self.last_progress >= PROGRESS_EVERY_S:
            harness.progress(f"{env_steps / 1e6:.2f}M env steps, {self.episodes} games, "
                             f"score {score:+.1f} over the last {len(self.window)}")
            self.last_progress = now

    def result(self) -> dict:
        scores = [p[2] for p in self.points if p[2] is not None]
        zero_s, zero_steps = self.at_zero or (math.nan, math.nan)
        target_s, target_steps = self.at_target or (math.nan, math.nan)
        return {"reached": self.at_target is not None, "final_score": self.score(),
                "best_score": max(scores) if scores else math.nan, "episodes": self.episodes,
                "to_zero_s": zero_s, "to_zero_steps": zero_steps, "to_target_s": target_s,
                "to_target_steps": target_steps, "curve": self.points}


def system_name(algo: str) -> str:
    return algo if algo == SB3_PPO else f"flowrl-{algo}"


def spec_algo(algo: str) -> str:
    """The algorithm whose spec ``algo`` trains (SB3's PPO trains the PPO spec)."""
    return "ppo" if algo == SB3_PPO else algo


def load(args, algo_name: str):
    """``(spec, config)`` of the run: the spec file with the run's seed."""
    from flowrl.experiment import load_spec, make_config
    spec = load_spec(spec_path(args, algo_name))
    return spec, make_config(spec["algo"], {"env": spec["env"], **spec["config"],
                                            "seed": args.seed})


def describe(args, algo_name: str, config) -> dict:
    """What a run records of its spec: the file, the frame side and the CNN."""
    return {"spec": spec_path(args, algo_name),
            "screen_size": config.env_config.get("screen_size", 84),
            "conv_filters": config.model.conv_filters}


def child(args) -> None:
    if args.child == SB3_PPO:
        return child_sb3_ppo(args)
    algo_name = args.child.removeprefix("flowrl-")
    if algo_name not in ALGOS:
        raise SystemExit(f"unknown system {args.child!r}; choose from "
                         f"{[system_name(a) for a in ALGOS + [SB3_PPO]]}")
    import torch
    torch.set_num_threads(1)
    from flowrl.experiment import algorithm_class
    from training import spy_episodes
    spec, config = load(args, algo_name)
    out = describe(args, algo_name, config)
    if config.backend == "ray":
        import ray
        t = time.time()
        ray.init(address="local", num_cpus=config.num_workers + 2, include_dashboard=False,
                 log_to_driver=False, configure_logging=False)
        out["ray_init_s"] = time.time() - t
    budget_s = args.budget_min * 60.0
    curve = Curve(args.target, args.curve_every)
    algo = algorithm_class(spec["algo"])(config)
    seen = spy_episodes(algo, curve.add)
    out["startup_s"] = harness.since_start()
    steps, t_train = 0, time.perf_counter()
    try:
        while harness.since_start() < budget_s and curve.at_target is None:
            r = algo.train()
            steps = int(r["timesteps_total"])
            curve.update(steps)
        curve.update(steps, force=True)
    finally:
        algo.stop()
    train_s = time.perf_counter() - t_train
    if curve.episodes == 0 and not seen[0] and harness.since_start() > 600:
        raise RuntimeError("no completed episode reached the benchmark in 10 minutes: "
                           "spy_episodes no longer matches how flowrl reports episodes")
    write_result(out, curve, steps, train_s, budget_s)


def write_result(out: dict, curve: Curve, steps: int, train_s: float, budget_s: float) -> None:
    harness.write_result({**out, **curve.result(), "env_steps": steps, "train_s": train_s,
                          "steps_per_s": steps / train_s if train_s > 0 else math.nan,
                          "from_start_s": harness.since_start(), "budget_s": budget_s})


# -- Stable-Baselines3 PPO at the spec's settings ----------------------------------------
def sb3_ppo(config, seed: int, total_timesteps: int):
    """SB3 ``PPO`` on Pong with the settings of ``config`` (a flowrl ``PPOConfig``;
    see the module docstring), its lr schedule laid over ``total_timesteps``."""
    import gymnasium as gym
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from stable_baselines3.common.vec_env import VecFrameStack

    from atari_throughput import sb3_pong
    from flowrl.models.base import orthogonal_init
    from flowrl.models.visionnet import VisionNetwork
    from flowrl.ops.train_ops import piecewise_lr
    m = config.model
    n_envs = max(1, config.num_workers) * config.num_envs_per_worker
    batch = n_envs * config.rollout_fragment_length
    refused = {"kl_coeff": config.kl_coeff != 0, "model.use_lstm": m.use_lstm,
               "model.custom_model": m.custom_model is not None,
               "model.vf_share_layers": not m.vf_share_layers,
               "train_batch_size": config.train_batch_size != batch}
    if any(refused.values()):
        raise SystemExit(f"{SB3_PPO} cannot train this spec: "
                         f"{', '.join(k for k, v in refused.items() if v)} (module docstring)")
    env = VecFrameStack(make_atari_env(
        sb3_pong, n_envs=n_envs, seed=seed,
        wrapper_kwargs={"screen_size": config.env_config.get("screen_size", 84)},
        env_kwargs={"frameskip": 1, "repeat_action_probability": 0.0}), 4)

    class Trunk(BaseFeaturesExtractor):
        """The spec's CNN trunk (convolutions, then ``post_fcnet_hiddens``)."""

        def __init__(self, space):
            net = VisionNetwork(space, gym.spaces.Discrete(1), None, m, "sb3")
            super().__init__(space, net.num_outputs)
            self.trunk = net.trunk

        def forward(self, obs):  # SB3 has scaled the uint8 frames to [0, 1] already
            return self.trunk(obs)

    schedule = config.lr_schedule
    lr = (lambda left: piecewise_lr(schedule, (1.0 - left) * total_timesteps)) \
        if schedule else config.lr
    algo = SB3PPO("CnnPolicy", env, learning_rate=lr, n_steps=config.rollout_fragment_length,
                  batch_size=config.sgd_minibatch_size, n_epochs=config.num_sgd_iter,
                  gamma=config.gamma, gae_lambda=config.lambda_, clip_range=config.clip_param,
                  clip_range_vf=config.vf_clip_param, ent_coef=config.entropy_coeff,
                  vf_coef=config.vf_loss_coeff, max_grad_norm=config.grad_clip or math.inf,
                  seed=seed, device="cpu", verbose=0,
                  policy_kwargs={"features_extractor_class": Trunk, "net_arch": [],
                                 "ortho_init": False,
                                 "optimizer_kwargs": {"eps": config.adam_epsilon}})
    orthogonal_init(algo.policy.action_net, 0.01)
    orthogonal_init(algo.policy.value_net, 1.0)
    return algo


def child_sb3_ppo(args) -> None:
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    spec, config = load(args, spec_algo(SB3_PPO))
    torch.set_num_threads(config.torch_threads or 1)
    total = int(spec.get("stop", {}).get("timesteps_total", 10_000_000))
    algo = sb3_ppo(config, args.seed, total)
    out = {**describe(args, spec_algo(SB3_PPO), config), "startup_s": harness.since_start()}
    budget_s = args.budget_min * 60.0
    curve = Curve(args.target, args.curve_every)

    class Track(BaseCallback):
        def _on_step(self) -> bool:
            curve.add(i["episode"]["r"] for i in self.locals["infos"] if "episode" in i)
            curve.update(self.num_timesteps)
            return harness.since_start() < budget_s and curve.at_target is None

    t_train = time.perf_counter()
    algo.learn(total_timesteps=total, callback=Track())
    curve.update(algo.num_timesteps, force=True)
    algo.get_env().close()
    write_result(out, curve, algo.num_timesteps, time.perf_counter() - t_train, budget_s)


KEYS = ["to_zero_s", "to_target_s", "to_zero_steps", "to_target_steps", "final_score",
        "best_score", "steps_per_s", "env_steps", "startup_s", "from_start_s"]
TARGET_KEYS = ["to_target_s", "to_target_steps"]


def report(runs: list[dict], target: float, budget_min: float) -> None:
    def fmt(v, f="{:,.0f}") -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f.format(v)

    valid = [r for r in runs if r.get("valid")]
    for r in valid:
        res = r["result"]
        points = "; ".join(f"{p[0] / 60:.1f} min {p[1] / 1e6:.2f}M: {fmt(p[2], '{:+.1f}')}"
                           for p in res["curve"][::max(1, len(res["curve"]) // 12)])
        print(f"curve {r['system']} seed {r['seed']} (min from start, env steps: score): "
              f"{points}")
    frames = {r["system"]: "{0}x{0}".format(r["result"].get("screen_size", 84)) for r in valid}
    columns = [("min to >= 0", "to_zero_s", "{:.1f}", 60),
               (f"min to >= {target:+g}", "to_target_s", "{:.1f}", 60),
               (f"M steps to {target:+g}", "to_target_steps", "{:.2f}", 1e6),
               ("final score", "final_score", "{:+.1f}"), ("best score", "best_score", "{:+.1f}"),
               ("env steps/s", "steps_per_s", "{:,.0f}"), ("start-up s", "startup_s", "{:.1f}")]
    rows = [[g.system, frames.get(g.system, "-"), g.label,
             *(harness.fmt_figure(g.figures.get(key), *rest) for _, key, *rest in columns)]
            for g in harness.summarize(runs, KEYS, TARGET_KEYS) if g.n]
    harness.print_table(["system", "frames", "runs", *(c[0] for c in columns)], rows,
                        title=f"Pong, 100-game mean of whole-game scores, {os.cpu_count()} "
                              f"CPUs, budget {budget_min:g} min from process start: median "
                              "[min-max] (targets: >= 0 within 45 min, >= +18 within 90)")


def score_at(curve: list, index: int, at: float, end: float | None = None) -> float | None:
    """The score of the last curve point whose ``curve[i][index]`` (0: seconds from
    start, 1: env steps) is ``<= at``; None before the first score or past ``end``
    (the run's last seconds or env steps; default its last curve point), as a run
    that stopped earlier has no score there.

    >>> curve = [[10.0, 1000, None, 0], [20.0, 2000, -20.0, 3], [30.0, 3000, -19.0, 8]]
    >>> [score_at(curve, 1, s) for s in (1500, 2000, 2999, 3000, 3001)]
    [None, -20.0, -20.0, -19.0, None]
    >>> score_at(curve, 0, 35.0, end=36.0)
    -19.0
    """
    end = curve[-1][index] if end is None and curve else end
    if not curve or at > end:
        return None
    before = [p for p in curve if p[index] <= at]
    return before[-1][2] if before else None


def compare(paths: list[str], at_steps: list[float], at_min: list[float]) -> None:
    import json
    rows = []
    for path in paths:
        saved = json.loads(Path(path).read_text())
        for r in saved["runs"]:
            res = r.get("result") or {}
            if not res.get("curve"):
                continue
            curve = res["curve"]
            name = f"{Path(path).name} {r['system']} seed {r['seed']}" + \
                ("" if r.get("valid") else " (invalid)")
            cells = [f"{saved.get('commit', '?')[:7]}"]
            for m in at_steps:
                cells.append(fmt_score(score_at(curve, 1, m * 1e6, res.get("env_steps"))))
            for m in at_min:
                cells.append(fmt_score(score_at(curve, 0, m * 60, res.get("from_start_s"))))
            rows.append([name, *cells])
    harness.print_table(["run", "commit", *[f"{m:g}M steps" for m in at_steps],
                         *[f"{m:g} min" for m in at_min]], rows,
                        title="Pong, 100-game mean at equal env steps and at equal minutes "
                              "from process start (-: before the first game or past the run)")


def fmt_score(v: float | None) -> str:
    return "-" if v is None else f"{v:+.1f}"


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", nargs="+", default=["impala"], choices=ALGOS + [SB3_PPO],
                   help=f"flowrl algorithms, or {SB3_PPO}: SB3 at the PPO spec's settings")
    p.add_argument("--config", default=None, metavar="FILE.yaml",
                   help="a spec to train instead of tuned_examples/<algo>-pong.yaml "
                        "(give one --algo)")
    p.add_argument("--target", type=float, default=18.0)
    p.add_argument("--budget-min", type=float, default=90.0,
                   help="wall budget per run, minutes from process start")
    p.add_argument("--curve-every", type=float, default=10.0,
                   help="seconds between two points of the saved curve")
    p.add_argument("--compare", nargs="+", metavar="JSON", default=None,
                   help="train nothing: the scores of these saved runs at --at-steps and "
                        "--at-min")
    p.add_argument("--at-steps", type=float, nargs="+", default=[1.0, 1.5, 2.0, 2.5, 3.0],
                   metavar="M", help="env steps, in millions, for --compare")
    p.add_argument("--at-min", type=float, nargs="+", default=[45.0, 90.0], metavar="MIN",
                   help="minutes from process start, for --compare")
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    for path in args.compare or []:
        if not os.path.exists(path):
            p.error(f"--compare {path}: no such file")
    if args.budget_min <= 0 or args.curve_every <= 0:
        p.error("--budget-min and --curve-every must be > 0")
    if args.config and len({spec_algo(a) for a in args.algo}) != 1:
        p.error(f"--config trains one spec: give one --algo (or ppo and {SB3_PPO})")
    if args.config and not os.path.exists(args.config):
        p.error(f"--config {args.config}: no such file")
    if args.quick:
        args.budget_min = min(args.budget_min, 1.0)
        if args.seeds is None:
            args.seeds = 1
    if args.run_timeout == 900.0:  # the harness's default: the budget plus a margin
        args.run_timeout = args.budget_min * 60 + 600
    return args


def main(argv=None) -> None:
    args = parse(argv)
    if args.compare:
        compare(args.compare, args.at_steps, args.at_min)
        return
    if args.child:
        child(args)
        return
    child_args = harness.forward(args, "target", "budget_min", "curve_every")
    if args.config:
        child_args += ["--config", os.path.abspath(args.config)]
    systems = [system_name(a) for a in args.algo]
    meta = {"env": "ALE/Pong-v5", "target": args.target, "budget_min": args.budget_min,
            "specs": {a: spec_path(args, spec_algo(a)) for a in args.algo}}
    runs, meta = harness.run(args, "atari_learning", __file__, systems, child_args, meta)
    report(runs, meta["target"], meta["budget_min"])


if __name__ == "__main__":
    main()
