"""PPO on CartPole-v1 to a 100-episode train mean of 450: flowrl vs Stable-Baselines3 vs RLlib.

Systems (each seed of each in a fresh process, interleaved, on an idle CPU; see
``benchmarks/harness.py``):

- ``flowrl-local``: ``PPO(PPOConfig(..., backend="local"))`` (the CLI default);
  its 2 workers are in-process objects.
- ``flowrl-ray``: the same with ``backend="ray"``: 2 worker actors sample in
  parallel while the driver learns.
- ``sb3``: Stable-Baselines3 PPO, every env in one process (``DummyVecEnv``).
- ``rllib``: RLlib 2.x PPO (new API stack), 2 env runners, local learner.

Modes:

- ``--matched`` (default): identical work for every system: 16 envs x 128
  steps = 2048 env steps per iteration, 6 epochs of 256-row minibatches (48 SGD
  steps per iteration, 23.4 per 1,000 env steps), lr 1e-3 constant, gamma 0.99,
  GAE lambda 0.95, clip 0.2, value loss coefficient 0.5 without value clipping,
  no entropy bonus, no KL penalty, global gradient-norm clip 0.5, separate
  64x64 tanh policy and value MLPs (9,155 parameters), one torch thread in the
  learner. The table prints each system's *measured* parameter count and SGD
  steps (optimizer steps counted by a hook) per 1,000 env steps, so the match
  is visible. Known residual differences: SB3 standardizes advantages per
  minibatch (flowrl and RLlib per train batch); Adam's eps is 1e-5 in SB3,
  1e-8 in flowrl and RLlib.
- ``--tuned``: each system at its own published tuned CartPole config: flowrl's
  ``PPOConfig`` defaults; rl-zoo's SB3 PPO (8 envs, n_steps 32, batch 256, 20
  epochs, gamma 0.98, GAE 0.8, lr and clip linear from 1e-3 / 0.2 to 0 over the
  zoo's 1e5 steps, which also caps the run as in the zoo); RLlib's tuned example
  (lr 3e-4, 6 epochs, vf_loss_coeff 0.01, one 32-unit linear layer shared by
  policy and value; RLlib defaults otherwise).

The success criterion is computed by this script, the same way for everyone:
the mean return of the last 100 completed training episodes (a full window),
checked at the same point, after each training iteration (sampling + SGD).
flowrl's episodes come from its workers' episode statistics, SB3's from its
``Monitor`` infos, RLlib's from an ``on_episode_end`` callback.

Figures per run: start-up (process start to ready to train: imports,
``ray.init``, building workers), time to the first training result from process
start, training time to the target, time from process start to the target,
env steps, env steps/s (steps / training time). ``--max-steps`` and
``--max-seconds`` bound training.

    python benchmarks/ppo_cartpole.py --matched            # 5 seeds x 4 systems
    python benchmarks/ppo_cartpole.py --tuned
    python benchmarks/ppo_cartpole.py --quick --no-idle-wait   # smoke run
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)
from training import (STARTUP_COLUMNS, Tracker, build_rllib, count_steps,  # noqa: E402
                      n_params, rllib_episode_callback, train_flowrl, train_rllib)

SYSTEMS = ["flowrl-local", "flowrl-ray", "sb3", "rllib"]
BASELINE = "sb3"

# --matched: one set of hyperparameters for every system.
MATCHED = dict(envs_per_worker=8, workers=2, steps_per_env=128, minibatch=256, epochs=6,
               lr=1e-3, gamma=0.99, lam=0.95, clip=0.2, vf_coeff=0.5, grad_clip=0.5,
               hidden=(64, 64))


# -- flowrl ----------------------------------------------------------------------------
def child_flowrl(args, seed: int, backend: str) -> dict:
    phases = {}
    t = time.time()
    from flowrl.algorithms import PPO, PPOConfig
    phases["imports_s"] = time.time() - t
    if backend == "ray":
        from flowrl.algorithms.base import ensure_ray
        t = time.time()
        ensure_ray(os.cpu_count() or 1, preload=["flowrl.policies.ppo"])  # as PPO(config)
        phases["ray_init_s"] = time.time() - t
    if args.mode == "matched":
        m = MATCHED
        config = PPOConfig(env="CartPole-v1", backend=backend, seed=seed,
                           num_workers=m["workers"], num_envs_per_worker=m["envs_per_worker"],
                           rollout_fragment_length=m["steps_per_env"],
                           train_batch_size=m["workers"] * m["envs_per_worker"]
                           * m["steps_per_env"],
                           sgd_minibatch_size=m["minibatch"], num_sgd_iter=m["epochs"],
                           lr=m["lr"], gamma=m["gamma"], lambda_=m["lam"],
                           clip_param=m["clip"], vf_loss_coeff=m["vf_coeff"],
                           vf_clip_param=1e6, entropy_coeff=0.0, kl_coeff=0.0,  # 1e6: no clipping
                           grad_clip=m["grad_clip"], model=m["hidden"])
    else:
        config = PPOConfig(env="CartPole-v1", backend=backend, seed=seed)
    if args.quick:
        config = config.replace(train_batch_size=min(config.train_batch_size, 1024),
                                rollout_fragment_length=min(config.rollout_fragment_length, 64))
    t = time.time()
    algo = PPO(config)
    phases["build_s"] = time.time() - t
    policy = algo.get_policy()
    sgd = count_steps([policy.optimizer])
    tracker = Tracker(args.target, args.max_steps, args.max_seconds)
    train_flowrl(algo, tracker)
    return tracker.result(params=n_params(policy.model), sgd_steps=sgd[0], **phases)


# -- Stable-Baselines3 -------------------------------------------------------------------
def child_sb3(args, seed: int) -> dict:
    phases = {}
    t = time.time()
    import torch
    from stable_baselines3 import PPO as SB3PPO
    from stable_baselines3.common.callbacks import BaseCallback
    from stable_baselines3.common.env_util import make_vec_env
    phases["imports_s"] = time.time() - t
    torch.set_num_threads(1)
    t = time.time()
    if args.mode == "matched":
        m = MATCHED
        n_envs = m["workers"] * m["envs_per_worker"]
        n_steps = m["steps_per_env"] if not args.quick else 64
        kwargs = dict(n_steps=n_steps, batch_size=m["minibatch"], n_epochs=m["epochs"],
                      learning_rate=m["lr"], gamma=m["gamma"], gae_lambda=m["lam"],
                      clip_range=m["clip"], clip_range_vf=None, vf_coef=m["vf_coeff"],
                      ent_coef=0.0, max_grad_norm=m["grad_clip"], target_kl=None,
                      policy_kwargs=dict(net_arch=dict(pi=list(m["hidden"]),
                                                       vf=list(m["hidden"])),
                                         activation_fn=torch.nn.Tanh))
        total = args.max_steps
    else:
        def linear(v):
            return lambda progress_remaining: progress_remaining * v

        n_envs = 8
        kwargs = dict(n_steps=32, batch_size=256, gae_lambda=0.8, gamma=0.98, n_epochs=20,
                      ent_coef=0.0, learning_rate=linear(1e-3), clip_range=linear(0.2))
        total = 100_000  # rl-zoo's n_timesteps: the schedules decay to 0 over it
    env = make_vec_env("CartPole-v1", n_envs=n_envs, seed=seed)
    model = SB3PPO("MlpPolicy", env, seed=seed, device="cpu", verbose=0, **kwargs)
    phases["build_s"] = time.time() - t
    sgd = count_steps([model.policy.optimizer])
    tracker = Tracker(args.target, args.max_steps, args.max_seconds)

    class Check(BaseCallback):
        """Collects episode returns; checks the window after each training iteration."""

        def __init__(self):
            super().__init__()
            self.rollouts = 0
            self.stop = False

        def _on_rollout_start(self) -> None:
            if self.rollouts:  # the previous iteration's SGD has just finished
                self.stop = tracker.after_iteration(self.num_timesteps)
            self.rollouts += 1

        def _on_step(self) -> bool:
            tracker.add_returns(info["episode"]["r"] for info in self.locals["infos"]
                                if "episode" in info)
            return not self.stop

    cb = Check()
    tracker.start()
    model.learn(total_timesteps=total, callback=cb)
    if not cb.stop:  # learn() ended at total_timesteps after a full iteration
        tracker.after_iteration(model.num_timesteps)
    env.close()
    return tracker.result(params=n_params(model.policy), sgd_steps=sgd[0], **phases)


# -- RLlib ----------------------------------------------------------------------------
def child_rllib(args, seed: int) -> dict:
    phases = {}
    t = time.time()
    import ray
    import torch
    from ray.rllib.algorithms.ppo import PPOConfig as RLlibPPOConfig
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    phases["imports_s"] = time.time() - t
    torch.set_num_threads(1)
    t = time.time()
    ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
    phases["ray_init_s"] = time.time() - t

    t = time.time()
    config = (RLlibPPOConfig().environment("CartPole-v1").callbacks(rllib_episode_callback())
              .debugging(seed=seed))
    if args.mode == "matched":
        m = MATCHED
        frag = m["steps_per_env"] if not args.quick else 64
        config = (config
                  .env_runners(num_env_runners=m["workers"],
                               num_envs_per_env_runner=m["envs_per_worker"],
                               rollout_fragment_length=frag)
                  .training(train_batch_size_per_learner=m["workers"] * m["envs_per_worker"]
                            * frag, minibatch_size=m["minibatch"], num_epochs=m["epochs"],
                            lr=m["lr"], gamma=m["gamma"], lambda_=m["lam"],
                            clip_param=m["clip"], vf_loss_coeff=m["vf_coeff"],
                            vf_clip_param=math.inf, entropy_coeff=0.0, use_kl_loss=False,
                            kl_coeff=0.0, grad_clip=m["grad_clip"],
                            grad_clip_by="global_norm")
                  .rl_module(model_config=DefaultModelConfig(
                      fcnet_hiddens=list(m["hidden"]), fcnet_activation="tanh",
                      vf_share_layers=False)))
    else:
        config = (config.training(lr=3e-4, num_epochs=6, vf_loss_coeff=0.01)
                  .rl_module(model_config=DefaultModelConfig(
                      fcnet_hiddens=[32], fcnet_activation="linear", vf_share_layers=True)))
    algo = build_rllib(config)
    phases["build_s"] = time.time() - t
    learner = algo.learner_group._learner
    module = learner.module["default_policy"]
    sgd = count_steps(learner._named_optimizers.values())
    tracker = Tracker(args.target, args.max_steps, args.max_seconds)
    train_rllib(algo, tracker)
    ray.shutdown()
    return tracker.result(params=n_params(module), sgd_steps=sgd[0], **phases)


CHILDREN = {"flowrl-local": lambda args, seed: child_flowrl(args, seed, "local"),
            "flowrl-ray": lambda args, seed: child_flowrl(args, seed, "ray"),
            "sb3": child_sb3, "rllib": child_rllib}


KEYS = ["steps_per_s", "train_s", "from_start_s", "startup_s", "first_result_s", "env_steps",
        "params", "sgd_per_1k", "imports_s", "ray_init_s", "build_s", "final_mean"]
TARGET_KEYS = ["from_start_s"]


def report(runs: list[dict], target: float, mode: str) -> None:
    groups = harness.summarize(runs, KEYS, TARGET_KEYS)
    base = next((g for g in groups if g.system == BASELINE and g.reached), None)
    # Throughput is compared between any two groups (each median is over one group);
    # time from process start only between groups that reached the target.
    base_speed = next((g.figures["steps_per_s"] for g in groups
                       if g.system == BASELINE and "steps_per_s" in g.figures), None)

    def speed(g):
        return harness.fmt_ratio(harness.ratio(g.figures.get("steps_per_s"), base_speed))

    def quicker(g):
        return harness.fmt_ratio(harness.ratio(base.figures.get("from_start_s"),
                                               g.figures.get("from_start_s"))
                                 if base and g.reached else math.nan)

    harness.print_groups(groups, [
        ("env steps/s", "steps_per_s", "{:,.0f}"), (f"steps/s vs {BASELINE}", speed),
        (f"{BASELINE} from-start / this", quicker),
        (f"training to {target:g} s", harness.fmt_train_s),
        ("from process start s", "from_start_s", "{:,.1f}"),
        ("start-up s", "startup_s", "{:,.1f}"), ("first result s", "first_result_s", "{:,.1f}"),
        ("env steps", "env_steps", "{:,.0f}"), ("params", "params", "{:,.0f}"),
        ("SGD steps/1k env steps", "sgd_per_1k", "{:.1f}")],
        title=f"PPO CartPole-v1 --{mode}: median [min-max]; 'reached' rows use only the "
              "runs that reached the target")
    harness.print_groups([g for g in groups if g.n], STARTUP_COLUMNS,
                         title="start-up breakdown (seconds)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    mode = p.add_mutually_exclusive_group()
    mode.add_argument("--matched", dest="mode", action="store_const", const="matched")
    mode.add_argument("--tuned", dest="mode", action="store_const", const="tuned")
    p.set_defaults(mode="matched")
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--target", type=float, default=450.0)
    p.add_argument("--max-steps", type=int, default=300_000)
    p.add_argument("--max-seconds", type=float, default=180.0)
    harness.add_arguments(p)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, max_steps=6144, max_seconds=30)
    if args.child:
        harness.write_result(CHILDREN[args.child](args, args.seed))
        return
    child_args = [f"--{args.mode}", *harness.forward(args, "target", "max_steps",
                                                     "max_seconds", "quick")]
    runs, meta = harness.run(args, f"ppo_cartpole-{args.mode}", __file__, args.systems,
                             child_args, meta={"mode": args.mode, "target": args.target,
                                               "max_steps": args.max_steps,
                                               "max_seconds": args.max_seconds,
                                               "matched": MATCHED})
    report(runs, meta["target"], meta["mode"])  # a saved run's own, with --report


if __name__ == "__main__":
    main()
