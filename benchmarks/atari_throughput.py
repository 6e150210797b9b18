"""Env frames/s on ALE/Pong-v5 at equal settings: flowrl IMPALA/APPO/PPO beside the
emulator's own limit, a plain loop, Sample Factory, RLlib and Stable-Baselines3.

Every system uses ``--workers`` sampling processes (default 2, one per core of the
machine this was written for) with ``--envs-per-worker`` envs each, fragments of
``--fragment`` steps, and the same CNN (``--model``: ``nature``, the Nature DQN
stack 32x8/4, 64x4/2, 64x3/1 then 512; or ``small``, the 2013 DQN stack 16x8/4,
32x4/2 then 256), policy and value sharing it, on the DeepMind preprocessing
(no-op starts, frame skip 4 with max-pool, 84x84 grayscale, 4 stacked frames,
episodic life, clipped rewards; sticky actions off). Figures are **env frames/s**:
agent steps x 4 (the frame skip), counted over a ``--seconds`` window that starts
``--warmup`` seconds after the first steps.

Systems (each seed of each in a fresh process, interleaved, on an idle CPU; see
``benchmarks/harness.py``):

- ``ale-raw``: the physical limit. One process per worker steps its envs (flowrl's
  :func:`flowrl.envs.make_atari` stack, which is gymnasium's wrappers plus an
  episodic-life wrapper) with random actions: no model, no learning.
- ``plain-loop``: one process per worker, a gymnasium ``SyncVectorEnv`` of the same
  envs plus the same CNN's batched forward pass in plain torch (one thread) and a
  categorical sample: what flowrl's sampling does, with no flowrl code. No learning.
  flowrl's target: sampling >= 0.8x this.
- ``flowrl-sample``: flowrl's sampling alone, laid out as the plain loop: one
  process per worker, each a ``RolloutWorker`` with IMPALA's policy and the same
  CNN calling ``sample()`` (episode tracking, batch building and all). No learning,
  no Ray: the target's numerator.
- ``flowrl-impala``, ``flowrl-appo``, ``flowrl-ppo``: flowrl on Ray, sampling plus
  learning (IMPALA/APPO: train batch ``--train-batch``, the learner on its thread
  beside the samplers; PPO: one fragment per env per iteration, ``--sgd-iter``
  epochs of ``--minibatch`` rows).
- ``sf-appo``: Sample Factory 2.x APPO, run by ``--sf-python`` (a venv of its own,
  made by ``benchmarks/setup_sample_factory.sh``: SF pins gymnasium 0.29 and
  numpy < 2). Its own Atari wrappers (SB3's: the same preprocessing) on
  ``ALE/Pong-v5``; train batch ``--train-batch`` in one minibatch; env frames as
  SF counts them (its learner's env steps with the frame skip).
- ``rllib-impala``, ``rllib-appo``: RLlib 2.58 on the new API stack with its
  ``wrap_atari_for_new_api_stack`` (84x84, frame stack 4), the same conv stack
  with "valid" padding; RLlib's policy and value heads each get their own dense
  layer of the model's width (its default model cannot share one).
- ``sb3-ppo``: Stable-Baselines3 PPO, ``make_atari_env`` (its ``AtariWrapper``) in a
  ``SubprocVecEnv`` of workers x envs-per-worker processes, ``VecFrameStack(4)``,
  ``CnnPolicy`` (NatureCNN, or the small stack), n_steps = ``--fragment``, PPO's
  epochs and minibatch as flowrl-ppo's.

A system that cannot run here (SF venv missing, RLlib or SB3 not installed) is
reported as skipped with the reason, never dropped silently.

The tables: frames/s per system (median [min-max] over seeds), each system's
ratio to ``flowrl-impala``, and the targets: flowrl sampling vs the plain loop
(>= 0.8x), flowrl end to end vs RLlib IMPALA (>= 2x) and vs Sample Factory
(>= 1.0x), and each system's share of the raw ALE limit.

    bash benchmarks/setup_sample_factory.sh                   # once: SF's own venv
    python benchmarks/atari_throughput.py                     # 10 systems x 3 seeds
    python benchmarks/atari_throughput.py --model small --systems ale-raw plain-loop flowrl-impala
    python benchmarks/atari_throughput.py --quick --no-idle-wait   # smoke: 1 seed, short windows
"""

from __future__ import annotations

import argparse
import math
import os
import shutil
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only; the SF venv's interpreter imports it too)

ENV_ID = "ALE/Pong-v5"
FRAME_SKIP = 4
#: name -> (conv filters [out, kernel, stride], dense layers after them)
MODELS = {
    "nature": (((32, 8, 4), (64, 4, 2), (64, 3, 1)), (512,)),
    "small": (((16, 8, 4), (32, 4, 2)), (256,)),
}
#: Sample Factory's names for the same conv stacks (sample_factory/model/encoder.py).
SF_CONV = {"nature": "convnet_atari", "small": "convnet_impala"}
SYSTEMS = ["ale-raw", "plain-loop", "flowrl-sample", "flowrl-impala", "flowrl-appo", "flowrl-ppo",
           "sf-appo", "rllib-impala", "rllib-appo", "sb3-ppo"]
BASELINE = "flowrl-impala"
DEFAULT_SF_PYTHON = "/work/venvs/sf/bin/python"


# -- the shared window: warm-up, then a timed count --------------------------------------
class Window:
    """Counts steps over ``seconds`` after ``warmup`` seconds from the first :meth:`add`
    (whose time from process start is the run's ``first_result_s``)."""

    def __init__(self, warmup: float, seconds: float):
        self.warmup, self.seconds = warmup, seconds
        self.first = self.t0 = self.t1 = None
        self.first_result_s = math.nan
        self.total = 0
        self.at_t0 = self.at_t1 = 0

    def add(self, steps: int) -> bool:
        """Add ``steps`` done just now; False once the window is over (later calls
        change nothing: a system may report steps after it was told to stop)."""
        if self.t1 is not None:
            return False
        now = time.perf_counter()
        if self.first is None:
            self.first, self.first_result_s = now, harness.since_start()
        self.total += steps
        if self.t0 is None and now - self.first >= self.warmup:
            self.t0, self.at_t0 = now, self.total
        if self.t0 is not None and now - self.t0 >= self.seconds:
            self.t1, self.at_t1 = now, self.total
            return False
        return True

    def result(self) -> dict:
        if self.t1 is None:
            raise RuntimeError("the window did not close (too few steps?)")
        wall = self.t1 - self.t0
        steps = self.at_t1 - self.at_t0
        return {"frames_per_s": steps * FRAME_SKIP / wall, "agent_steps_per_s": steps / wall,
                "window_s": wall, "window_steps": steps, "first_result_s": self.first_result_s}


def add_window_arguments(p: argparse.ArgumentParser, *, seconds: float,
                         warmup: float) -> None:
    """``--seconds`` and ``--warmup`` of each run's :class:`Window`."""
    p.add_argument("--seconds", type=float, default=seconds, help="measured window per run")
    p.add_argument("--warmup", type=float, default=warmup,
                   help="seconds after the first steps before the window")


def check_window_arguments(p: argparse.ArgumentParser, args: argparse.Namespace) -> None:
    """Refuse a window that cannot close; ``--quick`` shortens it (one seed, 4 s after 2 s)."""
    if args.seconds <= 0 or args.warmup < 0:
        p.error("--seconds must be > 0 and --warmup >= 0")
    harness.shorten_for_quick(args, seeds=1, seconds=4.0, warmup=2.0)


def conv_net(model: str, in_channels: int, num_actions: int):
    """The plain-torch CNN of ``model``: (logits head, value head) over one trunk."""
    from torch import nn
    filters, dense = MODELS[model]
    layers, c, hw = [], in_channels, 84
    for out, k, s in filters:
        layers += [nn.Conv2d(c, out, k, s), nn.ReLU()]
        c, hw = out, (hw - k) // s + 1
    layers.append(nn.Flatten())
    width = c * hw * hw
    for d in dense:
        layers += [nn.Linear(width, d), nn.ReLU()]
        width = d

    class Net(nn.Module):
        def __init__(self):
            super().__init__()
            self.trunk = nn.Sequential(*layers)
            self.logits = nn.Linear(width, num_actions)
            self.value = nn.Linear(width, 1)

        def forward(self, obs):
            x = self.trunk(obs.float() / 255.0)
            return self.logits(x), self.value(x).squeeze(-1)

    return Net()


# -- ale-raw and plain-loop: one process per worker --------------------------------------
def _loop_worker(kind: str, args_dict: dict, seed: int, out) -> None:
    import numpy as np
    import torch
    torch.set_num_threads(1)
    from flowrl.envs.atari import make_atari
    a = argparse.Namespace(**args_dict)
    window = Window(a.warmup, a.seconds)
    if kind == "ale-raw":
        envs = [make_atari(ENV_ID, {}) for _ in range(a.envs_per_worker)]
        for i, env in enumerate(envs):
            env.reset(seed=seed + i)
            env.action_space.seed(seed + i)
        going = True
        while going:
            for env in envs:
                _, _, term, trunc, _ = env.step(env.action_space.sample())
                if term or trunc:
                    env.reset()
            going = window.add(len(envs))
    elif kind == "flowrl-sample":
        from flowrl.algorithms import IMPALA, IMPALAConfig
        from flowrl.workers import RolloutWorker
        config = IMPALAConfig(env=ENV_ID, model=flowrl_model(a.model))
        worker = RolloutWorker(ENV_ID, policy=IMPALA.policy_class,
                               policy_config=IMPALA.policy_config(config),
                               num_envs=a.envs_per_worker, rollout_fragment_length=a.fragment,
                               seed=seed, torch_threads=1)
        try:
            while window.add(worker.sample().env_steps()):
                pass
        finally:
            worker.stop()
    else:
        import gymnasium as gym
        venv = gym.vector.SyncVectorEnv([lambda: make_atari(ENV_ID, {})] * a.envs_per_worker)
        obs, _ = venv.reset(seed=seed)
        torch.manual_seed(seed)
        net = conv_net(a.model, obs.shape[1], int(venv.single_action_space.n))
        going = True
        with torch.no_grad():
            while going:
                logits, _ = net(torch.from_numpy(obs))
                actions = torch.distributions.Categorical(logits=logits).sample().numpy()
                obs, _, _, _, _ = venv.step(actions.astype(np.int64))
                going = window.add(a.envs_per_worker)
    out.put(window.result())


def child_processes(kind: str, args) -> dict:
    """``args.workers`` processes of :func:`_loop_worker`; frames/s summed over them."""
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    out = ctx.Queue()
    procs = [ctx.Process(target=_loop_worker, args=(kind, vars(args), args.seed * 1000 + 100 * w,
                                                    out)) for w in range(args.workers)]
    for p in procs:
        p.start()
    results = [out.get(timeout=args.warmup + args.seconds + 600) for _ in procs]
    for p in procs:
        p.join()
    return {"frames_per_s": sum(r["frames_per_s"] for r in results),
            "agent_steps_per_s": sum(r["agent_steps_per_s"] for r in results),
            "window_s": max(r["window_s"] for r in results),
            "first_result_s": max(r["first_result_s"] for r in results)}


# -- flowrl -------------------------------------------------------------------------------
def flowrl_model(model: str) -> dict:
    filters, dense = MODELS[model]
    return {"conv_filters": [list(f) for f in filters], "post_fcnet_hiddens": list(dense),
            "vf_share_layers": True}


def child_flowrl(args, algo_name: str) -> dict:
    import ray

    from training import start_ray
    out = {"ray_init_s": start_ray(args.workers + 2)}
    from flowrl.algorithms import APPO, IMPALA, PPO, APPOConfig, IMPALAConfig, PPOConfig
    common = dict(env=ENV_ID, backend="ray", seed=args.seed, num_workers=args.workers,
                  num_envs_per_worker=args.envs_per_worker,
                  rollout_fragment_length=args.fragment, num_cpus_per_worker=0,
                  model=flowrl_model(args.model), torch_threads=1)
    if algo_name == "ppo":
        batch = args.workers * args.envs_per_worker * args.fragment
        algo = PPO(PPOConfig(**common, train_batch_size=batch, num_sgd_iter=args.sgd_iter,
                             sgd_minibatch_size=min(args.minibatch, batch)))
    else:
        cls, config_cls = {"impala": (IMPALA, IMPALAConfig), "appo": (APPO, APPOConfig)}[algo_name]
        algo = cls(config_cls(**common, train_batch_size=args.train_batch))
    try:
        counters = algo.metrics.counters
        window = Window(args.warmup, args.seconds)
        last = 0
        while True:
            algo.train()
            now = counters["num_steps_sampled"]
            if now and not window.add(now - last):
                break
            last = now
        out.update(window.result())
    finally:
        algo.stop()
        ray.shutdown()
    return out


# -- Sample Factory (run by its own venv's interpreter) ------------------------------------
def child_sf(args) -> dict:
    """Re-run this script with ``--sf-python`` as ``--child sf-appo-run``; the harness's
    environment (result path, start time) goes with it."""
    argv = [args.sf_python, os.path.abspath(__file__), "--child", "sf-appo-run",
            "--seed", str(args.seed), *child_args(args)]
    proc = subprocess.run(argv, env={**os.environ, "PYTHONPATH": ""})
    if proc.returncode:
        raise SystemExit(f"Sample Factory run failed (exit {proc.returncode}): {argv}")
    return {}  # the inner run wrote the result


def register_ale_ids() -> None:
    """Register the ``ALE/`` ids. ``import ale_py`` does it, except under SF's gymnasium
    0.29, where ale-py 0.12's vector env fails to import (gymnasium 1.x's
    ``AutoresetMode``) and its ``__init__`` then skips the registration; its single
    env works there, so register it directly (same emulator version as every other
    system)."""
    import ale_py  # noqa: F401
    import gymnasium as gym
    if ENV_ID not in gym.registry:
        from ale_py.registration import register_v0_v4_envs, register_v5_envs
        register_v0_v4_envs()
        register_v5_envs()


def sf_make_env(full_env_name, cfg, env_config, render_mode=None):
    """SF's own Atari stack (sf_examples.atari.atari_utils.make_atari_env) on ALE/Pong-v5
    made like PongNoFrameskip-v4 (frameskip 1, no sticky actions)."""
    import gymnasium as gym
    register_ale_ids()
    from sf_examples.atari.atari_utils import (ClipRewardEnv, EpisodicLifeEnv, FireResetEnv,
                                               MaxAndSkipEnv, NoopResetEnv, NumpyObsWrapper)
    env = gym.make(ENV_ID, frameskip=1, repeat_action_probability=0.0, render_mode=render_mode)
    env = gym.wrappers.RecordEpisodeStatistics(env)
    env = NoopResetEnv(env, noop_max=30)
    env = MaxAndSkipEnv(env, skip=cfg.env_frameskip)
    env = EpisodicLifeEnv(env)
    if "FIRE" in env.unwrapped.get_action_meanings():
        env = FireResetEnv(env)
    env = ClipRewardEnv(env)
    env = gym.wrappers.ResizeObservation(env, (84, 84))
    env = gym.wrappers.GrayScaleObservation(env)
    env = gym.wrappers.FrameStack(env, cfg.env_framestack)
    return NumpyObsWrapper(env)


def child_sf_run(args) -> None:
    import tempfile
    from sample_factory.algo.runners.runner import AlgoObserver
    from sample_factory.cfg.arguments import parse_full_cfg, parse_sf_args
    from sample_factory.envs.env_utils import register_env
    from sample_factory.train import make_runner
    from sf_examples.atari.atari_params import atari_override_defaults
    register_env("ale_pong_v5", sf_make_env)
    train_dir = tempfile.mkdtemp(prefix="flowrl-bench-sf-")
    _, dense = MODELS[args.model]
    splits = 2 if args.envs_per_worker % 2 == 0 else 1
    argv = ["--env", "ale_pong_v5", "--algo", "APPO", "--experiment", f"bench{args.seed}",
            "--train_dir", train_dir, "--device", "cpu", "--seed", str(args.seed),
            "--num_workers", str(args.workers), "--num_envs_per_worker",
            str(args.envs_per_worker), "--worker_num_splits", str(splits),
            "--rollout", str(args.fragment), "--batch_size", str(args.train_batch),
            "--num_batches_per_epoch", "1", "--num_epochs", "1", "--async_rl", "True",
            "--serial_mode", "False", "--encoder_conv_architecture", SF_CONV[args.model],
            "--encoder_conv_mlp_layers", *map(str, dense), "--save_every_sec", "100000",
            "--save_best_every_sec", "100000", "--train_for_seconds",
            str(int(args.warmup + args.seconds + 120)), "--train_for_env_steps", "10000000000",
            "--with_wandb", "False", "--restart_behavior", "overwrite"]
    parser, partial = parse_sf_args(argv=argv)
    atari_override_defaults(partial.env, parser)
    cfg = parse_full_cfg(parser, argv)
    _, runner = make_runner(cfg)
    window = Window(args.warmup, args.seconds)
    state = {"last": 0}

    class Count(AlgoObserver):
        def on_training_step(self, runner, training_iteration_since_resume):
            frames = sum(runner.env_steps.values())  # summaries_use_frameskip: frames
            if frames and not window.add((frames - state["last"]) // FRAME_SKIP):
                runner.cfg.train_for_env_steps = 0  # SF's own end-of-training test stops it
            state["last"] = frames

    runner.register_observer(Count())
    try:
        if runner.init() != 0:
            raise SystemExit("Sample Factory's runner did not start")
        runner.run()
    finally:
        shutil.rmtree(train_dir, ignore_errors=True)
    harness.write_result(window.result())


# -- RLlib -------------------------------------------------------------------------------
def rllib_env(env_config: dict):
    import ale_py  # noqa: F401
    import gymnasium as gym
    from ray.rllib.env.wrappers.atari_wrappers import wrap_atari_for_new_api_stack
    env = gym.make(ENV_ID, frameskip=1, repeat_action_probability=0.0)
    return wrap_atari_for_new_api_stack(env, dim=84, frameskip=FRAME_SKIP, framestack=4)


def child_rllib(args, name: str) -> dict:
    import ray

    from training import build_rllib, find_metric, start_ray
    out = {"ray_init_s": start_ray(args.workers + 2)}
    from ray.rllib.algorithms.appo import APPOConfig
    from ray.rllib.algorithms.impala import IMPALAConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.tune.registry import register_env
    register_env("bench_pong", rllib_env)
    filters, dense = MODELS[args.model]
    cls = {"impala": IMPALAConfig, "appo": APPOConfig}[name]
    config = (cls().environment("bench_pong")
              .env_runners(num_env_runners=args.workers,
                           num_envs_per_env_runner=args.envs_per_worker,
                           rollout_fragment_length=args.fragment, num_cpus_per_env_runner=0)
              .training(train_batch_size_per_learner=args.train_batch)
              .rl_module(model_config=DefaultModelConfig(
                  conv_filters=[[o, k, s, "valid"] for o, k, s in filters],
                  head_fcnet_hiddens=list(dense), vf_share_layers=True))
              .reporting(min_time_s_per_iteration=0.5)
              .debugging(seed=args.seed))
    algo = build_rllib(config)
    try:
        window = Window(args.warmup, args.seconds)
        last = 0
        deadline = time.perf_counter() + 600
        while True:
            r = algo.train()
            now = int(find_metric(r, "num_env_steps_sampled_lifetime"))
            if not now and time.perf_counter() > deadline:
                raise RuntimeError(f"RLlib {name} sampled nothing in 600 s")
            if now and not window.add(now - last):
                break
            last = now
        out.update(window.result())
    finally:
        algo.stop()
        ray.shutdown()
    return out


# -- Stable-Baselines3 ---------------------------------------------------------------------
def sb3_pong(**kwargs):
    """ALE/Pong-v5 made in an SB3 subprocess (a callable: the env id alone would not
    import ale-py there, and then gymnasium has no ``ALE/`` ids)."""
    import ale_py  # noqa: F401
    import gymnasium as gym
    return gym.make(ENV_ID, **kwargs)


def child_sb3(args) -> dict:
    import torch
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_atari_env
    from stable_baselines3.common.torch_layers import BaseFeaturesExtractor
    from stable_baselines3.common.vec_env import SubprocVecEnv, VecFrameStack
    torch.set_num_threads(1)
    n_envs = args.workers * args.envs_per_worker
    env = VecFrameStack(make_atari_env(sb3_pong, n_envs=n_envs, seed=args.seed,
                                       vec_env_cls=SubprocVecEnv,
                                       env_kwargs={"frameskip": 1,
                                                   "repeat_action_probability": 0.0}), 4)
    policy_kwargs = {}
    if args.model != "nature":  # CnnPolicy's NatureCNN is the nature stack already
        model = args.model

        class Small(BaseFeaturesExtractor):
            def __init__(self, space):
                _, dense = MODELS[model]
                super().__init__(space, dense[-1])
                self.trunk = conv_net(model, space.shape[0], 1).trunk

            def forward(self, obs):  # SB3 has scaled the uint8 images to [0, 1] already
                return self.trunk(obs)

        policy_kwargs = {"features_extractor_class": Small}
    batch = n_envs * args.fragment
    algo = SB3PPO("CnnPolicy", env, seed=args.seed, device="cpu", verbose=0,
                  n_steps=args.fragment, batch_size=min(args.minibatch, batch),
                  n_epochs=args.sgd_iter, policy_kwargs=policy_kwargs)
    window = Window(args.warmup, args.seconds)

    class Count(BaseCallback):
        def _on_step(self) -> bool:
            return window.add(n_envs)

    algo.learn(total_timesteps=10**10, callback=Count())
    env.close()
    return window.result()


# -- parent side -------------------------------------------------------------------------
def skip_reasons(systems, sf_python: str) -> dict[str, str]:
    """Why each system that cannot run here cannot (checked in fresh interpreters)."""
    reasons = {}

    def importable(python: str, module: str) -> str | None:
        try:
            p = subprocess.run([python, "-c", f"import {module}"], capture_output=True,
                               text=True, timeout=120)
        except (OSError, subprocess.SubprocessError) as e:
            return str(e)
        return None if p.returncode == 0 else (p.stderr.strip().splitlines() or ["?"])[-1]

    for system in systems:
        why = None
        if system == "sf-appo":
            if not os.path.exists(sf_python):
                why = (f"no Sample Factory interpreter at {sf_python}; run "
                       "bash benchmarks/setup_sample_factory.sh or give --sf-python")
            else:
                err = importable(sf_python, "sample_factory, sf_examples.atari.atari_utils, ale_py")
                why = err and f"{sf_python} cannot import Sample Factory: {err}"
        elif system.startswith("rllib-"):
            err = importable(sys.executable, "ray.rllib, ale_py")
            why = err and f"RLlib not importable: {err}"
        elif system == "sb3-ppo":
            err = importable(sys.executable, "stable_baselines3, ale_py, cv2")
            why = err and f"Stable-Baselines3 not importable: {err}"
        if why:
            reasons[system] = why
    return reasons


def child_args(args) -> list[str]:
    return harness.forward(args, "workers", "envs_per_worker", "fragment", "train_batch",
                           "minibatch", "sgd_iter", "model", "seconds", "warmup", "sf_python")


def child(args) -> None:
    name = args.child
    if name == "sf-appo-run":
        child_sf_run(args)
        return
    if name in ("ale-raw", "plain-loop", "flowrl-sample"):
        result = child_processes(name, args)
    elif name.startswith("flowrl-"):
        result = child_flowrl(args, name.split("-", 1)[1])
    elif name == "sf-appo":
        child_sf(args)
        return
    elif name.startswith("rllib-"):
        result = child_rllib(args, name.split("-", 1)[1])
    elif name == "sb3-ppo":
        result = child_sb3(args)
    else:
        raise SystemExit(f"unknown system {name!r}; choose from {SYSTEMS}")
    harness.write_result(result)


KEYS = ["frames_per_s", "agent_steps_per_s", "first_result_s", "window_s"]
#: (what, ours, theirs, target ratio)
TARGETS = [("flowrl sampling vs plain loop", "flowrl-sample", "plain-loop", 0.8),
           ("flowrl IMPALA vs RLlib IMPALA", "flowrl-impala", "rllib-impala", 2.0),
           ("flowrl APPO vs Sample Factory APPO", "flowrl-appo", "sf-appo", 1.0),
           ("flowrl IMPALA vs Sample Factory APPO", "flowrl-impala", "sf-appo", 1.0)]


def report(runs: list[dict], systems, skipped: dict[str, str], meta: dict) -> None:
    groups = {g.system: g for g in harness.summarize(runs, KEYS)}
    fps = {s: (groups[s].figures.get("frames_per_s") if s in groups else None) for s in systems}
    limit = fps.get("ale-raw")
    rows = []
    for system in systems:
        g = groups.get(system)
        if system in skipped:
            rows.append([system, "skipped", "-", "-", "-", "-", skipped[system]])
            continue
        if g is None:
            failed = [r for r in runs if r["system"] == system]
            rows.append([system, f"0 runs ({len(failed)} failed)" if failed else "0 runs",
                         "-", "-", "-", "-", ""])
            continue
        f = g.figures.get
        vs = harness.ratio(f("frames_per_s"), fps.get(BASELINE))
        share = harness.ratio(f("frames_per_s"), limit)
        rows.append([system, g.label, harness.fmt_figure(f("frames_per_s"), "{:,.0f}"),
                     "-" if math.isnan(vs) else f"{vs:.2f}x",
                     "-" if math.isnan(share) else f"{share:.2f}",
                     harness.fmt_figure(f("first_result_s"), "{:.1f}"), ""])
    harness.print_table(["system", "runs", "env frames/s", f"/ {BASELINE}", "/ raw ALE",
                         "first steps s (from start)", "note"], rows,
                        title=f"{ENV_ID}, {meta['workers']} workers x {meta['envs_per_worker']} "
                              f"envs, fragment {meta['fragment']}, {meta['model']} CNN: "
                              "median [min-max] over seeds")
    rows = []
    for what, ours, theirs, target in TARGETS:
        x = harness.ratio(fps.get(ours), fps.get(theirs))
        rows.append([what, "-" if math.isnan(x) else f"{x:.2f}x", f">= {target}x",
                     "-" if math.isnan(x) else ("ok" if x >= target else "BELOW")])
    harness.print_table(["comparison", "ratio of medians", "target", ""], rows,
                        title="targets (issue 24)")


def parse(argv=None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="+", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--model", default="nature", choices=sorted(MODELS),
                   help="the CNN every system uses")
    p.add_argument("--workers", type=int, default=2, help="sampling processes per system")
    p.add_argument("--envs-per-worker", type=int, default=4)
    p.add_argument("--fragment", type=int, default=50, help="steps per env per rollout")
    p.add_argument("--train-batch", type=int, default=500,
                   help="IMPALA/APPO rows per SGD step (Sample Factory: its batch_size)")
    p.add_argument("--minibatch", type=int, default=200, help="PPO minibatch rows")
    p.add_argument("--sgd-iter", type=int, default=2, help="PPO epochs per rollout")
    add_window_arguments(p, seconds=30.0, warmup=15.0)
    p.set_defaults(run_timeout=1200.0)  # a hung system (e.g. SF after an env error) ends
    p.add_argument("--sf-python", default=os.environ.get("SF_PYTHON", DEFAULT_SF_PYTHON),
                   help="the Python of Sample Factory's venv "
                        "(benchmarks/setup_sample_factory.sh makes it)")
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    for name in ("workers", "envs_per_worker", "fragment", "train_batch", "minibatch",
                 "sgd_iter"):
        if getattr(args, name) < 1:
            p.error(f"--{name.replace('_', '-')} must be >= 1")
    check_window_arguments(p, args)
    return args


def main(argv=None) -> None:
    args = parse(argv)
    if args.child:
        child(args)
        return
    skipped = {} if args.report else skip_reasons(args.systems, args.sf_python)
    for system, why in skipped.items():
        print(f"skipping {system}: {why}", flush=True)
    runnable = [x for x in args.systems if x not in skipped]
    meta = {"env": ENV_ID, "model": args.model, "workers": args.workers,
            "envs_per_worker": args.envs_per_worker, "fragment": args.fragment,
            "train_batch": args.train_batch, "minibatch": args.minibatch,
            "sgd_iter": args.sgd_iter, "seconds": args.seconds, "warmup": args.warmup,
            "systems": args.systems, "skipped": skipped}
    runs, meta = harness.run(args, "atari_throughput", __file__, runnable, child_args(args),
                             meta)
    report(runs, meta["systems"], meta.get("skipped", {}), meta)


if __name__ == "__main__":
    main()
