"""PPO on MuJoCo at CleanRL's settings for 1M env steps: flowrl vs Stable-Baselines3.

Systems (each seed of each in a fresh process, interleaved, on an idle CPU; see
``benchmarks/harness.py``):

- ``flowrl``: ``PPO(PPOConfig(..., backend="local"))`` on the env creator
  :func:`flowrl.envs.mujoco.normalized_env` (CleanRL's wrappers: raw-return
  episode statistics innermost, ClipAction, NormalizeObservation and a clip to
  [-10, 10], NormalizeReward(gamma) and a clip to [-10, 10]).
- ``sb3``: Stable-Baselines3 PPO on ``make_vec_env`` (``Monitor`` innermost, so
  raw returns) under ``VecNormalize`` (observations and rewards, clips 10,
  gamma 0.99); SB3 clips actions to the bounds itself.

Settings, CleanRL's ``ppo_continuous_action.py`` for every system: 1 env, 2048
steps per rollout, 10 epochs of 64-row minibatches (320 SGD steps per rollout),
lr 3e-4 annealed linearly to 0 over the run (flowrl: ``lr_schedule``), gamma
0.99, GAE lambda 0.95, clip 0.2, no entropy bonus, no KL penalty, global
gradient-norm clip 0.5, separate 64x64 tanh policy and value MLPs with a
state-independent log-std, one torch thread. Value loss: CleanRL's is
``0.5 * vf_coef * max(unclipped, clipped)`` squared errors with vf_coef 0.5 and
a value clip of 0.2; flowrl's loss has no 1/2, so ``vf_loss_coeff=0.25`` and
``vf_clip_param=0.2`` give the same term. SB3 runs with the settings its users
copy from CleanRL (``vf_coef=0.5``, SB3's default of no value clipping), which
weighs its unclipped squared error twice as much as CleanRL's.

flowrl runs CleanRL's initialisation (hidden layers orthogonal with gain
sqrt(2) and zero biases: ``model.orthogonal_init``), Adam eps 1e-5
(``adam_epsilon``) and advantages standardized per 64-row minibatch
(``standardize_advantages="minibatch"``), as SB3 does too. Runs saved at commits
up to 7f0e5a3 used torch's default init, eps 1e-8 and per-batch
standardization. One known difference remains: a time-limit truncation
bootstraps from V(s_T) (CleanRL: treated as a termination; SB3: bootstraps too).

Score: the mean raw return of the last 100 completed training episodes (as
CleanRL's and SB3's logs report them), read after every rollout+SGD iteration.
flowrl's raw returns are read from the ``RecordEpisodeStatistics`` wrapper in its
workers' envs: until flowrl's sampler reports ``info["episode"]``, its own
``episode_reward_mean`` is the return of the *normalized* rewards (kept in the
curve as ``reported``). ``reached`` means the score got to ``--target`` (default
CleanRL's published 1M-step score for the env) at some iteration; the time to it
is given for the runs that reached it.

Figures per run: the curve (env steps, training seconds, score) after every
iteration, the final and best score, training wall time, time from process start,
start-up, env steps/s, time to the target. On this 2-core machine, idle, a
1M-step Hopper run takes about 12 min for flowrl and 21 min for SB3; each run
writes a progress line every 100k env steps to its log (the harness prints the
log's path as the run starts).

    python benchmarks/mujoco_ppo.py --env Hopper-v5                # 3 seeds x 2 systems
    python benchmarks/mujoco_ppo.py --env HalfCheetah-v5 --seeds 1
    python benchmarks/mujoco_ppo.py --quick --no-idle-wait          # smoke run
    python benchmarks/mujoco_ppo.py --combine A.json B.json          # one table of saved files
"""

from __future__ import annotations

import argparse
import collections
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)

SYSTEMS = ["flowrl", "sb3"]
BASELINE = "sb3"

#: CleanRL's ppo_continuous_action.py: one set of hyperparameters for every system.
MATCHED = dict(num_envs=1, num_steps=2048, minibatch=64, epochs=10, lr=3e-4, gamma=0.99,
               lam=0.95, clip=0.2, vf_clip=0.2, vf_coef=0.5, ent_coef=0.0, grad_clip=0.5,
               hidden=(64, 64), clip_obs=10.0, clip_reward=10.0)

#: CleanRL's published mean episodic return of ppo_continuous_action at 1M steps.
CLEANRL_SCORES = {"Hopper-v5": 2231.0, "HalfCheetah-v5": 1823.0, "Walker2d-v5": 3050.0}

#: Env steps between two rows of the printed curve (and two progress lines).
CURVE_EVERY = 100_000


def passes_curve_mark(before: int, steps: int) -> bool:
    """Whether an iteration from ``before`` to ``steps`` env steps passes a multiple
    of :data:`CURVE_EVERY` (its point then makes a row of the curve).

    >>> passes_curve_mark(98_304, 100_352), passes_curve_mark(100_352, 102_400)
    (True, False)
    """
    return steps // CURVE_EVERY > before // CURVE_EVERY


class Tracker:
    """The benchmark's own 100-episode window of raw returns and its curve."""

    def __init__(self, target: float):
        self.target = target
        self.window: collections.deque[float] = collections.deque(maxlen=100)
        self.episodes = 0
        self.curve: list[list[float]] = []  # [env steps, train s, score, reported]
        self.reached_at = None  # (train seconds, env steps, seconds from process start)
        self.t_start = self.ready_s = None

    def start(self) -> None:
        self.ready_s = harness.since_start()
        self.t_start = time.time()

    def add_returns(self, returns) -> None:
        for r in returns:
            self.window.append(float(r))
            self.episodes += 1

    def score(self) -> float:
        return sum(self.window) / len(self.window) if self.window else math.nan

    def after_iteration(self, env_steps: int, reported: float = math.nan) -> None:
        train_s = time.time() - self.t_start
        score = self.score()
        before = self.curve[-1][0] if self.curve else 0
        self.curve.append([int(env_steps), round(train_s, 2), score, reported])
        if self.reached_at is None and score >= self.target:
            self.reached_at = (train_s, int(env_steps), harness.since_start())
        if passes_curve_mark(before, env_steps):
            harness.progress(f"{env_steps / 1e6:.2f}M env steps, {self.episodes} episodes, "
                             f"score {score:,.0f}, {train_s:,.0f} s training")

    def result(self, **extra) -> dict:
        steps, train_s = (self.curve[-1][:2] if self.curve else (0, math.nan))
        reached = self.reached_at is not None
        to_s, to_steps, to_from_start = self.reached_at if reached else (math.nan,) * 3
        scores = [c[2] for c in self.curve if not math.isnan(c[2])]
        return {"reached": reached, "final_score": self.score(),
                "best_score": max(scores) if scores else math.nan,
                "startup_s": self.ready_s, "train_s": train_s,
                "from_start_s": harness.since_start(), "env_steps": steps,
                "steps_per_s": steps / train_s if train_s else math.nan,
                "to_target_s": to_s, "to_target_steps": to_steps,
                "to_target_from_start_s": to_from_start, "episodes": self.episodes,
                "curve": self.curve, **extra}


def _raw_returns(worker) -> list[tuple[int, list[float]]]:
    """``(episodes so far, raw returns of the last 100)`` of each env of ``worker``
    (runs where the worker lives)."""
    from flowrl.envs.mujoco import episode_statistics
    out = []
    for venv in worker.envs:
        for env in venv.envs:
            stats = episode_statistics(env)
            out.append((stats.episode_count, [float(r) for r in stats.return_queue]))
    return out


# -- flowrl ----------------------------------------------------------------------------
def child_flowrl(args, seed: int) -> dict:
    t = time.time()
    from flowrl.algorithms import PPO, PPOConfig
    from flowrl.envs.mujoco import normalized_env
    imports_s = time.time() - t
    m = MATCHED
    batch = m["num_envs"] * m["num_steps"]
    config = PPOConfig(
        env=normalized_env, env_config={"id": args.env, "gamma": m["gamma"],
                                        "clip_obs": m["clip_obs"],
                                        "clip_reward": m["clip_reward"]},
        backend="local", seed=seed, num_workers=0, num_envs_per_worker=m["num_envs"],
        rollout_fragment_length=m["num_steps"], train_batch_size=batch,
        sgd_minibatch_size=m["minibatch"], num_sgd_iter=m["epochs"], lr=m["lr"],
        lr_schedule=[[0, m["lr"]], [args.timesteps, 0.0]], gamma=m["gamma"],
        lambda_=m["lam"], clip_param=m["clip"], vf_clip_param=m["vf_clip"],
        vf_loss_coeff=0.5 * m["vf_coef"],  # CleanRL's 0.5 * vf_coef (see the docstring)
        entropy_coeff=m["ent_coef"], kl_coeff=0.0, grad_clip=m["grad_clip"],
        adam_epsilon=1e-5, standardize_advantages="minibatch",
        model={"fcnet_hiddens": m["hidden"], "orthogonal_init": True}, torch_threads=1)
    t = time.time()
    algo = PPO(config)
    build_s = time.time() - t
    tracker = Tracker(args.target)
    seen: dict[tuple[int, int], int] = {}
    tracker.start()
    try:
        while True:
            r = algo.train()
            for w, envs in enumerate(algo.workers.foreach_worker(_raw_returns)):
                for e, (count, returns) in enumerate(envs):
                    new = count - seen.get((w, e), 0)
                    seen[(w, e)] = count
                    tracker.add_returns(returns[len(returns) - min(new, len(returns)):])
            tracker.after_iteration(r["timesteps_total"], r.get("episode_reward_mean", math.nan))
            if r["timesteps_total"] >= args.timesteps:
                break
    finally:
        algo.stop()
    return tracker.result(imports_s=imports_s, build_s=build_s)


# -- Stable-Baselines3 -------------------------------------------------------------------
def child_sb3(args, seed: int) -> dict:
    t = time.time()
    import torch
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize
    imports_s = time.time() - t
    torch.set_num_threads(1)
    m = MATCHED
    t = time.time()
    env = VecNormalize(make_vec_env(args.env, n_envs=m["num_envs"], seed=seed),
                       norm_obs=True, norm_reward=True, clip_obs=m["clip_obs"],
                       clip_reward=m["clip_reward"], gamma=m["gamma"], epsilon=1e-8)
    lr = m["lr"]
    model = SB3PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0,
                   n_steps=m["num_steps"], batch_size=m["minibatch"], n_epochs=m["epochs"],
                   learning_rate=lambda progress_remaining: lr * progress_remaining,
                   gamma=m["gamma"], gae_lambda=m["lam"], clip_range=m["clip"],
                   clip_range_vf=None, vf_coef=m["vf_coef"], ent_coef=m["ent_coef"],
                   max_grad_norm=m["grad_clip"], target_kl=None,
                   policy_kwargs=dict(net_arch=dict(pi=list(m["hidden"]), vf=list(m["hidden"])),
                                      activation_fn=torch.nn.Tanh))
    build_s = time.time() - t
    tracker = Tracker(args.target)

    class Curve(BaseCallback):
        """Adds each finished episode's raw return; records the curve after each SGD phase."""

        def __init__(self):
            super().__init__()
            self.rollouts = 0

        def _on_rollout_start(self) -> None:
            if self.rollouts:  # the previous iteration's SGD has just finished
                tracker.after_iteration(self.num_timesteps)
            self.rollouts += 1

        def _on_step(self) -> bool:
            tracker.add_returns(info["episode"]["r"] for info in self.locals["infos"]
                                if "episode" in info)
            return True

    tracker.start()
    model.learn(total_timesteps=args.timesteps, callback=Curve())
    tracker.after_iteration(model.num_timesteps)  # the last iteration's SGD
    env.close()
    return tracker.result(imports_s=imports_s, build_s=build_s)


def child(args) -> None:
    if args.child == "flowrl":
        result = child_flowrl(args, args.seed)
    elif args.child == "sb3":
        result = child_sb3(args, args.seed)
    else:
        raise SystemExit(f"unknown system {args.child!r}; choose from {SYSTEMS}")
    harness.write_result(result)


KEYS = ["final_score", "best_score", "train_s", "from_start_s", "startup_s", "steps_per_s",
        "env_steps", "to_target_s", "to_target_from_start_s"]
TARGET_KEYS = ["to_target_s", "to_target_from_start_s"]


def report(runs: list[dict], env: str, target: float) -> None:
    """Per-run lines, the curves every ``CURVE_EVERY`` steps, and the summary table."""
    def fmt(v) -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.0f}"

    valid = [r for r in runs if r.get("valid")]
    rows = [[r["system"], r["seed"], *(fmt(r["result"].get(k)) for k in (
                "final_score", "best_score", "train_s", "from_start_s", "steps_per_s",
                "to_target_s")), fmt(r.get("own_cpu_s")),
             f"{r.get('foreign_mean_cores', math.nan):.2f}"] for r in valid]
    harness.print_table(["system", "seed", "final score", "best score", "training s",
                         "from start s", "env steps/s", f"training s to {target:g}",
                         "own CPU s", "foreign load (cores)"], rows,
                        title=f"PPO {env}: every run (score: mean raw return of the last 100 "
                              "training episodes)")
    for r in valid:
        points, before = [], 0
        for steps, train_s, score, *_ in r["result"]["curve"]:
            if passes_curve_mark(before, steps):
                points.append(f"{steps // 1000}k: {fmt(score)} @ {train_s:,.0f}s")
            before = steps
        print(f"curve {r['system']} seed {r['seed']}: " + "; ".join(points))
    # Every run trains for the same env steps, so training time compares over all of a
    # system's runs, whether or not they reached the target.
    train_s = {system: harness.median_range(r["result"]["train_s"] for r in valid
                                            if r["system"] == system)
               for system in dict.fromkeys(r["system"] for r in valid)}
    groups = [g for g in harness.summarize(runs, KEYS, TARGET_KEYS) if g.n]
    harness.print_groups(groups, [
        ("final score", "final_score", "{:,.0f}"), ("best score", "best_score", "{:,.0f}"),
        ("training s", "train_s", "{:,.0f}"),
        (f"{BASELINE} training s / this (all runs)",
         lambda g: harness.fmt_ratio(harness.ratio(train_s.get(BASELINE), train_s[g.system]))),
        ("from start s", "from_start_s", "{:,.0f}"), ("env steps/s", "steps_per_s", "{:,.0f}"),
        (f"training s to {target:g}", "to_target_s", "{:,.0f}")],
        title=f"PPO {env}, CleanRL settings: median [min-max]; CleanRL's published 1M-step "
              f"score {CLEANRL_SCORES.get(env, math.nan):g}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--env", default="Hopper-v5", help="a gymnasium MuJoCo id (Box actions)")
    p.add_argument("--timesteps", type=int, default=1_000_000)
    p.add_argument("--target", type=float, default=None,
                   help="score to time (default: CleanRL's published 1M-step score)")
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    harness.add_arguments(p, default_seeds=3)
    p.set_defaults(run_timeout=4 * 3600.0)  # a 1M-step run takes tens of minutes
    p.add_argument("--combine", type=argparse.FileType("r"), nargs="+", default=None,
                   metavar="JSON", help="run nothing: print one table of the runs in several "
                   "saved results files of the same env (e.g. one per system)")
    args = p.parse_args(argv)
    if args.combine:
        import json
        docs = [json.load(f) for f in args.combine]
        envs = {d["meta"]["env"] for d in docs}
        if len(envs) != 1:
            raise SystemExit(f"--combine: the files are of several envs {sorted(envs)}; "
                             "give files of one env")
        for f, d in zip(args.combine, docs):
            print(f"{f.name}: {d['benchmark']}, started {d['started_utc']}, commit "
                  f"{d.get('commit')}, systems {d['systems']}")
        report([r for d in docs for r in d["runs"]], envs.pop(), docs[0]["meta"]["target"])
        return
    if args.target is None:
        args.target = CLEANRL_SCORES.get(args.env, math.inf)
    harness.shorten_for_quick(args, timesteps=4 * MATCHED["num_steps"])
    if args.child:
        child(args)
        return
    runs, meta = harness.run(args, f"mujoco_ppo-{args.env}", __file__, args.systems,
                             harness.forward(args, "env", "timesteps", "target"),
                             meta={"env": args.env, "timesteps": args.timesteps,
                                   "target": args.target, "matched": MATCHED,
                                   "cleanrl_score": CLEANRL_SCORES.get(args.env)})
    report(runs, meta["env"], meta["target"])  # a saved run's own, with --report


if __name__ == "__main__":
    main()
