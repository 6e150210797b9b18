"""SAC (or TD3) on MuJoCo at CleanRL's settings: flowrl vs Stable-Baselines3, resumable.

Systems (each seed of each in a fresh process, interleaved, on an idle CPU; see
``benchmarks/harness.py``), ``--algo sac`` (default) or ``--algo td3``, raw gymnasium
envs (no normalization, as CleanRL's off-policy scripts), one torch thread:

- ``flowrl``: ``SAC(SACConfig(...))`` (``TD3(TD3Config(...))``) on the local backend,
  no remote workers: one env step, then one update, as CleanRL.
- ``sb3``: Stable-Baselines3 ``SAC`` (``TD3``) with ``train_freq=1``,
  ``gradient_steps=1``.

Settings, CleanRL's ``sac_continuous_action.py`` / ``td3_continuous_action.py``
(:data:`MATCHED`): 256x256 ReLU networks, batch 256, gamma 0.99, tau 0.005 after
every update, a 1M-row buffer, 1M env steps. SAC: critic rate 1e-3, actor rate
3e-4, alpha learned from 1 (rate 1e-3) towards ``-dim(A)``, 5k steps before
learning. TD3: rates 3e-4, policy delay 2, target noise 0.2 clipped at 0.5,
Gaussian exploration noise 0.1, 25k steps before learning. Where the systems
differ from CleanRL:

- CleanRL and SB3 act uniformly at random before learning starts; so does flowrl's
  TD3 (``random_timesteps``), while flowrl's SAC acts with the untrained policy (as
  RLlib 1.x did).
- SAC: CleanRL updates the actor and alpha twice every second step
  (``policy_frequency=2``); flowrl and SB3 once every step (the same count). SB3
  has one learning rate for all its optimizers: here a subclass sets CleanRL's
  per-optimizer rates where SB3 sets its rate (``_update_learning_rate``). SB3's
  critic loss has a factor 1/2 (immaterial under Adam) and clamps log-stds to
  [-20, 2] (flowrl, RLlib: [-5, 2]).

Sittings. A 1M-step run takes hours on 2 CPUs, so each child trains at most
``--sitting-steps`` env steps (default: all), then saves its state under
``--state-dir`` (default ``runs/mujoco_offpolicy/``; flowrl: a checkpoint with the
replay buffer; SB3: its model and
replay buffer; both: the benchmark's curve and counters) and exits. The next
invocation with the same options resumes every unfinished run from its state (its
envs start new episodes), so a run's figures add up over sittings. Training seconds
count training only, not the saves and restores (timed apart as ``save_s`` and
``restore_s``). Delete a run's state directory to start it over.

Score: the mean return of the last 10 completed training episodes (raw rewards).
The curve has a point every ``--curve-every`` env steps (default 50k): env steps,
training seconds, score. The table gives per system the score at 300k steps and at
the end, env steps/s, training seconds and the ratio of flowrl's env steps/s to
SB3's; CleanRL's published 1M-step mean (v4 envs) is in the title.

    python benchmarks/mujoco_offpolicy.py --env Hopper-v5                 # SAC, 3 seeds
    python benchmarks/mujoco_offpolicy.py --env HalfCheetah-v5 --sitting-steps 200000
    python benchmarks/mujoco_offpolicy.py --algo td3 --env Hopper-v5
    python benchmarks/mujoco_offpolicy.py --quick --no-idle-wait           # smoke run
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)
from training import EpisodeWindow, spy_episodes  # noqa: E402  (stdlib only at import)

SYSTEMS = ["flowrl", "sb3"]
BASELINE = "sb3"
ALGOS = ("sac", "td3")

#: CleanRL's sac_continuous_action.py and td3_continuous_action.py settings.
MATCHED = {
    "sac": dict(hidden=(256, 256), batch=256, gamma=0.99, tau=0.005, buffer=1_000_000,
                learning_starts=5000, q_lr=1e-3, policy_lr=3e-4, alpha_lr=1e-3,
                initial_alpha=1.0),
    "td3": dict(hidden=(256, 256), batch=256, gamma=0.99, tau=0.005, buffer=1_000_000,
                learning_starts=25_000, q_lr=3e-4, policy_lr=3e-4, policy_delay=2,
                target_noise=0.2, target_noise_clip=0.5, exploration_noise=0.1),
}

#: CleanRL's published mean episodic return at 1M steps (v4 envs).
CLEANRL_SCORES = {("sac", "Hopper-v5"): 2310.0, ("sac", "HalfCheetah-v5"): 9635.0,
                  ("sac", "Walker2d-v5"): 3591.0, ("td3", "Hopper-v5"): 3135.0,
                  ("td3", "HalfCheetah-v5"): 9583.0, ("td3", "Walker2d-v5"): 4058.0}
#: Episodes the score averages.
WINDOW = 10
#: The env steps the table compares scores at, besides the end.
COMPARE_AT = 300_000
#: Where runs keep their state between sittings (``runs/`` is git-ignored).
DEFAULT_STATE_DIR = Path(__file__).resolve().parents[1] / "runs" / "mujoco_offpolicy"


class RunState:
    """The benchmark's own figures of one run, kept across sittings in ``progress.json``
    beside the run's checkpoint: env steps, training seconds, the window of returns,
    the curve and one entry per sitting."""

    def __init__(self, directory: Path):
        self.dir = directory
        self.path = directory / "progress.json"
        saved = json.loads(self.path.read_text()) if self.path.exists() else {}
        self.env_steps = int(saved.get("env_steps", 0))
        self.train_s = float(saved.get("train_s", 0.0))
        self.window = EpisodeWindow(WINDOW, saved.get("window", []),
                                    int(saved.get("episodes", 0)))
        self.add_returns, self.score = self.window.add_returns, self.window.score
        self.curve: list[list[float]] = saved.get("curve", [])
        self.sittings: list[dict] = saved.get("sittings", [])
        self.resumed = bool(saved)

    @property
    def episodes(self) -> int:
        return self.window.episodes

    def advance(self, env_steps: int, train_s: float, every: int) -> None:
        """Training went on to ``env_steps`` (``train_s`` more seconds); a curve point
        when it passed a multiple of ``every``."""
        before, self.env_steps = self.env_steps, int(env_steps)
        self.train_s += train_s
        if self.env_steps // every > before // every:
            self.curve.append([self.env_steps, round(self.train_s, 2), self.score()])
            harness.progress(f"{self.env_steps / 1e6:.2f}M env steps, {self.episodes} "
                             f"episodes, score {self.score():,.0f}, {self.train_s:,.0f} s")

    def save(self, sitting: dict) -> None:
        self.sittings.append(sitting)
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps({"env_steps": self.env_steps, "train_s": self.train_s,
                                   "episodes": self.episodes,
                                   "window": list(self.window.returns),
                                   "curve": self.curve, "sittings": self.sittings}))
        tmp.replace(self.path)

    def score_at(self, steps: int) -> float:
        """The curve's score at the first point at or past ``steps`` (NaN before)."""
        return next((s for at, _, s in self.curve if at >= steps), math.nan)

    def result(self, timesteps: int) -> dict:
        sitting = self.sittings[-1] if self.sittings else {}
        return {"complete": self.env_steps >= timesteps, "env_steps": self.env_steps,
                "train_s": self.train_s,
                "steps_per_s": self.env_steps / self.train_s if self.train_s else math.nan,
                "final_score": self.score(), "score_300k": self.score_at(COMPARE_AT),
                "episodes": self.episodes, "sittings": len(self.sittings),
                "sitting_steps_per_s": sitting.get("steps_per_s", math.nan),
                "save_s": sitting.get("save_s"), "restore_s": sitting.get("restore_s"),
                "curve": self.curve}


def state_dir(args, system: str, seed: int) -> Path:
    quick = "-quick" if args.quick else ""
    return Path(args.state_dir) / f"{args.algo}-{args.env}{quick}-{system}-seed{seed}"


def sitting_goal(args, state: RunState) -> int:
    """The env steps this sitting trains to."""
    if not args.sitting_steps:
        return args.timesteps
    return min(args.timesteps, state.env_steps + args.sitting_steps)


# -- flowrl ----------------------------------------------------------------------------
def flowrl_algorithm(args, seed: int):
    """The flowrl algorithm of ``--algo`` at :data:`MATCHED`'s settings."""
    m = MATCHED[args.algo]
    model = {"fcnet_hiddens": m["hidden"], "fcnet_activation": "relu"}
    common = dict(env=args.env, backend="local", seed=seed, num_workers=0,
                  rollout_fragment_length=1, train_batch_size=m["batch"], gamma=m["gamma"],
                  tau=m["tau"], buffer_size=m["buffer"], learning_starts=m["learning_starts"],
                  target_network_update_freq=0, checkpoint_replay_buffer=True,
                  timesteps_per_iteration=min(1000, args.curve_every), torch_threads=1)
    if args.algo == "sac":
        from flowrl.algorithms import SAC, SACConfig
        return SAC(SACConfig(**common, Q_model=model, policy_model=model,
                             initial_alpha=m["initial_alpha"],
                             optimization={"actor_learning_rate": m["policy_lr"],
                                           "critic_learning_rate": m["q_lr"],
                                           "entropy_learning_rate": m["alpha_lr"]}))
    from flowrl.algorithms import TD3, TD3Config
    # CleanRL acts uniformly at random until learning starts
    return TD3(TD3Config(**common, actor_hiddens=list(m["hidden"]),
                         critic_hiddens=list(m["hidden"]), actor_lr=m["policy_lr"],
                         critic_lr=m["q_lr"], policy_delay=m["policy_delay"],
                         smooth_target_policy=True, target_noise=m["target_noise"],
                         target_noise_clip=m["target_noise_clip"],
                         exploration_config={"type": "GaussianNoise",
                                             "stddev": m["exploration_noise"],
                                             "random_timesteps": m["learning_starts"]}))


def child_flowrl(args, seed: int) -> dict:
    state = RunState(state_dir(args, "flowrl", seed))
    algo = flowrl_algorithm(args, seed)
    restore_s = None
    try:
        ckpt = state.dir / "checkpoint"
        if state.resumed:
            t = time.time()
            algo.restore(str(ckpt))
            restore_s = time.time() - t
        spy_episodes(algo, state.add_returns)
        goal, start_steps = sitting_goal(args, state), state.env_steps
        sitting_s = 0.0
        while state.env_steps < goal:
            t = time.time()
            r = algo.train()
            dt = time.time() - t
            sitting_s += dt
            state.advance(r["timesteps_total"], dt, args.curve_every)
        t = time.time()
        algo.save(str(ckpt))
        save_s = time.time() - t
    finally:
        algo.stop()
    state.save({"steps": state.env_steps - start_steps, "train_s": sitting_s,
                "steps_per_s": (state.env_steps - start_steps) / sitting_s if sitting_s
                else math.nan, "save_s": save_s, "restore_s": restore_s})
    return state.result(args.timesteps)


# -- Stable-Baselines3 -------------------------------------------------------------------
def sb3_model(args, seed: int, env, saved: Path | None):
    """SB3's ``SAC``/``TD3`` at :data:`MATCHED`'s settings (loaded from ``saved``, with
    its replay buffer, when given)."""
    import numpy as np
    import torch
    from stable_baselines3 import SAC as SB3SAC
    from stable_baselines3 import TD3 as SB3TD3
    from stable_baselines3.common.noise import NormalActionNoise
    m = MATCHED[args.algo]
    rates: dict[str, float] = {"actor": m["policy_lr"], "critic": m["q_lr"],
                               "ent_coef": m.get("alpha_lr", m["q_lr"])}

    class CleanRLRates(SB3SAC):
        """SB3's SAC with CleanRL's rate per optimizer (SB3 sets one for all)."""

        def _update_learning_rate(self, optimizers) -> None:
            own = {id(self.actor.optimizer): rates["actor"],
                   id(self.critic.optimizer): rates["critic"]}
            if self.ent_coef_optimizer is not None:
                own[id(self.ent_coef_optimizer)] = rates["ent_coef"]
            optimizers = optimizers if isinstance(optimizers, list) else [optimizers]
            for opt in optimizers:
                for group in opt.param_groups:
                    group["lr"] = own[id(opt)]

    cls = CleanRLRates if args.algo == "sac" else SB3TD3
    if saved is not None:
        model = cls.load(str(saved / "model.zip"), env=env, device="cpu")
        model.load_replay_buffer(str(saved / "replay.pkl"))
        return model
    kwargs = dict(buffer_size=m["buffer"], learning_starts=m["learning_starts"],
                  batch_size=m["batch"], tau=m["tau"], gamma=m["gamma"], train_freq=1,
                  gradient_steps=1, seed=seed, device="cpu", verbose=0,
                  policy_kwargs=dict(net_arch=list(m["hidden"]),
                                     activation_fn=torch.nn.ReLU))
    if args.algo == "sac":
        return cls("MlpPolicy", env, learning_rate=m["q_lr"], ent_coef="auto_1.0",
                   target_update_interval=1, target_entropy="auto", **kwargs)
    dims = env.action_space.shape[-1]
    return cls("MlpPolicy", env, learning_rate=m["policy_lr"], policy_delay=m["policy_delay"],
               target_policy_noise=m["target_noise"], target_noise_clip=m["target_noise_clip"],
               action_noise=NormalActionNoise(np.zeros(dims),
                                              m["exploration_noise"] * np.ones(dims)),
               **kwargs)


def child_sb3(args, seed: int) -> dict:
    import gymnasium as gym
    import torch
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.monitor import Monitor
    torch.set_num_threads(1)
    state = RunState(state_dir(args, "sb3", seed))
    env = Monitor(gym.make(args.env))
    env.reset(seed=seed + 1000 * len(state.sittings))
    t = time.time()
    model = sb3_model(args, seed, env, state.dir if state.resumed else None)
    restore_s = time.time() - t if state.resumed else None
    clock = {"t": None}
    every = min(1000, args.curve_every)  # as flowrl's iterations

    class Progress(BaseCallback):
        """Feeds finished episodes to the state and advances it every ``every`` env
        steps, as flowrl's iterations do."""

        def _on_training_start(self) -> None:
            clock["t"] = time.time()

        def _on_step(self) -> bool:
            state.add_returns(info["episode"]["r"] for info in self.locals["infos"]
                              if "episode" in info)
            if self.num_timesteps % every == 0:
                now = time.time()
                state.advance(self.num_timesteps, now - clock["t"], args.curve_every)
                clock["t"] = now
            return True

    goal, start_steps = sitting_goal(args, state), state.env_steps
    t0 = time.time()
    model.learn(total_timesteps=goal - state.env_steps, callback=Progress(),
                reset_num_timesteps=not state.resumed)
    sitting_s = time.time() - t0
    if state.env_steps != model.num_timesteps:  # the steps after the last 1000
        state.advance(model.num_timesteps, time.time() - clock["t"], args.curve_every)
    t = time.time()
    state.dir.mkdir(parents=True, exist_ok=True)
    model.save(str(state.dir / "model.zip"))
    model.save_replay_buffer(str(state.dir / "replay.pkl"))
    save_s = time.time() - t
    env.close()
    state.save({"steps": state.env_steps - start_steps, "train_s": sitting_s,
                "steps_per_s": (state.env_steps - start_steps) / sitting_s if sitting_s
                else math.nan, "save_s": save_s, "restore_s": restore_s})
    return state.result(args.timesteps)


def child(args) -> None:
    fn = {"flowrl": child_flowrl, "sb3": child_sb3}.get(args.child)
    if fn is None:
        raise SystemExit(f"unknown system {args.child!r}; choose from {SYSTEMS}")
    harness.write_result(fn(args, args.seed))


KEYS = ["score_300k", "final_score", "env_steps", "steps_per_s", "train_s", "sittings"]


def report(runs: list[dict], meta: dict) -> None:
    def fmt(v) -> str:
        return "-" if v is None or (isinstance(v, float) and math.isnan(v)) else f"{v:,.0f}"

    valid = [r for r in runs if r.get("valid")]
    for r in valid:
        res = r["result"]
        points = "; ".join(f"{steps / 1000:g}k: {fmt(score)} @ {train_s:,.0f}s"
                           for steps, train_s, score in res["curve"])
        done = "complete" if res["complete"] else f"at {res['env_steps']:,} steps, resumable"
        print(f"curve {r['system']} seed {r['seed']} ({done}, {res['sittings']} sittings): "
              f"{points or '-'}")
    groups = [g for g in harness.summarize(runs, KEYS) if g.n]
    rates = {g.system: g.figures.get("steps_per_s") for g in groups}
    algo, env = meta.get("algo", "sac"), meta.get("env")
    harness.print_groups(groups, [
        ("score at 300k", "score_300k", "{:,.0f}"), ("score at end", "final_score", "{:,.0f}"),
        ("env steps", "env_steps", "{:,.0f}"), ("env steps/s", "steps_per_s", "{:,.1f}"),
        ("training s", "train_s", "{:,.0f}"),
        (f"env steps/s / {BASELINE}",
         lambda g: harness.fmt_ratio(harness.ratio(rates.get(g.system), rates.get(BASELINE))))],
        title=f"{algo.upper()} {env}, CleanRL settings: median [min-max] over seeds; score = "
              f"mean return of the last {WINDOW} training episodes; CleanRL's 1M-step mean "
              f"{CLEANRL_SCORES.get((algo, env), math.nan):g}")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--algo", default="sac", choices=ALGOS)
    p.add_argument("--env", default="Hopper-v5", help="a gymnasium MuJoCo id (Box actions)")
    p.add_argument("--timesteps", type=int, default=1_000_000)
    p.add_argument("--sitting-steps", type=int, default=None,
                   help="env steps each run trains in this invocation before it saves its "
                        "state and stops (default: to --timesteps)")
    p.add_argument("--curve-every", type=int, default=50_000)
    p.add_argument("--state-dir", default=str(DEFAULT_STATE_DIR),
                   help="where runs keep their state between sittings")
    p.add_argument("--restart", action="store_true",
                   help="delete the state of this invocation's runs first")
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    harness.add_arguments(p, default_seeds=3)
    p.set_defaults(run_timeout=12 * 3600.0)
    args = p.parse_args(argv)
    if args.quick:  # tiny learning_starts too, so a smoke run trains
        for m in MATCHED.values():
            m.update(learning_starts=500, buffer=10_000)
    harness.shorten_for_quick(args, timesteps=1500, curve_every=500)
    if args.child:
        child(args)
        return
    if args.restart:
        for system in args.systems:
            for seed in harness.settings_from(args).seeds:
                shutil.rmtree(state_dir(args, system, seed), ignore_errors=True)
    options = ("algo", "env", "timesteps", "sitting_steps", "curve_every", "state_dir",
               "quick")
    runs, meta = harness.run(args, f"mujoco_offpolicy-{args.algo}-{args.env}", __file__,
                             args.systems, harness.forward(args, *options),
                             meta={"algo": args.algo, "env": args.env,
                                   "timesteps": args.timesteps,
                                   "sitting_steps": args.sitting_steps,
                                   "matched": MATCHED[args.algo],
                                   "cleanrl_score": CLEANRL_SCORES.get((args.algo, args.env))},
                             resumable=True)
    report(runs, meta)


if __name__ == "__main__":
    main()
