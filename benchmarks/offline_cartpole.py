"""Offline learning on CartPole-v1 from datasets recorded by flowrl's PPO: BC, MARWIL and IS/WIS.

One system, ``flowrl``, each seed a fresh process (see ``benchmarks/harness.py``)
running the whole pipeline:

1. **Expert.** PPO with its tuned CartPole settings trains until its 100-episode
   train mean is >= ``--expert-target`` (450) or ``--ppo-max-steps`` run out.
2. **Datasets** (``output``, Parquet): ``--expert-steps`` env steps (100k) of the
   expert acting stochastically, as it trained, and ``--expert-steps / 2`` steps
   of an untrained policy (near uniform, "random"). The mixed-quality dataset is
   half of the expert's steps plus the random ones.
3. **BC on the expert data**: ``input`` is the expert dataset; the env is never
   stepped for training (an env wrapper counts its steps: ``offline_env_steps``
   must stay 0). ``--updates`` train batches of 2000 rows, lr 1e-3; then
   ``--eval-episodes`` greedy episodes on the env (evaluation).
   **Target:** an evaluated mean >= 450.
4. **MARWIL vs BC on the mixed data**: the same updates and evaluation for
   MARWIL (``beta`` 1, the norm's update rate 1e-2, so the weights follow the
   returns' scale) and for BC. **Target:** MARWIL's mean above BC's.
5. **IS/WIS**: the expert, as target, estimated on its own logged episodes
   (the whole ones; gamma 1, so estimates are undiscounted returns) against its
   true mean return, measured on ``--eval-episodes`` fresh episodes acted the same
   stochastic way.
   **Target:** both within 10%.

Figures per run: PPO's env steps to the expert, the expert's train mean, the
datasets' rows, BC's evaluated mean on expert data, MARWIL's and BC's on mixed
data and their ratio, IS's and WIS's relative errors, and the env steps taken
while training offline (0). Per figure the median [min-max] over seeds.

    python benchmarks/offline_cartpole.py            # 2 seeds: ~10 min idle
    python benchmarks/offline_cartpole.py --quick --no-idle-wait   # smoke run
"""

from __future__ import annotations

import argparse
import math
import os
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)

SYSTEMS = ["flowrl"]
KEYS = ["ppo_env_steps", "expert_train_mean", "expert_rows", "random_rows",
        "bc_expert_eval", "marwil_mixed_eval", "bc_mixed_eval", "marwil_over_bc",
        "is_rel_error", "wis_rel_error", "offline_env_steps"]
PPO_SETTINGS = dict(num_workers=0, num_envs_per_worker=8, rollout_fragment_length=64,
           train_batch_size=2048, sgd_minibatch_size=256, num_sgd_iter=6, lr=1e-3)
OFFLINE_SETTINGS = dict(lr=1e-3, train_batch_size=2000, rollout_fragment_length=1000,
               input_config={"shuffle": True}, off_policy_estimation_methods=[])
MARWIL_SETTINGS = dict(beta=1.0, moving_average_sqd_adv_norm_update_rate=1e-2)


class CountingEnv:
    """An env creator whose envs count every step into ``CountingEnv.steps``."""

    steps = 0

    def __call__(self, env_config):
        import gymnasium as gym

        class Counted(gym.Wrapper):
            def step(self, action):
                CountingEnv.steps += 1
                return self.env.step(action)

        return Counted(gym.make("CartPole-v1"))


def train_expert(args, workdir: str):
    """PPO trained to the expert target; returns (checkpoint path, env steps, mean)."""
    from flowrl.algorithms import PPO
    algo = PPO(env="CartPole-v1", seed=args.seed, **PPO_SETTINGS)
    try:
        r = {"timesteps_total": 0, "episode_reward_mean": math.nan}
        while r["timesteps_total"] < args.ppo_max_steps:
            r = algo.train()
            if r["episode_reward_mean"] >= args.expert_target:
                break
        harness.progress(f"expert: {r['episode_reward_mean']:.1f} after "
                         f"{r['timesteps_total']} steps")
        return (algo.save(os.path.join(workdir, "expert")), r["timesteps_total"],
                r["episode_reward_mean"])
    finally:
        algo.stop()


def record(checkpoint: str | None, out: str, steps: int, seed: int) -> int:
    """``steps`` env steps of the checkpoint's policy (an untrained one for None),
    written by ``output`` into ``out``; the rows written."""
    from flowrl.algorithms import PPO
    from flowrl.algorithms import Algorithm
    changes = dict(output=out, num_workers=0, num_envs_per_worker=8,
                   rollout_fragment_length=125, seed=seed)
    algo = (Algorithm.from_checkpoint(checkpoint, **changes) if checkpoint
            else PPO(env="CartPole-v1", **{**PPO_SETTINGS, **changes}))
    worker, rows = algo.workers.local_worker(), 0
    try:
        while rows < steps:
            rows += worker.sample().count  # acting only: the policy is not trained
    finally:
        algo.stop()  # closes the dataset's files
    return rows


def train_offline(cls, config_cls, data, args, **extra) -> tuple[float, int]:
    """(evaluated mean, env steps taken while training) of ``cls`` trained from
    ``data`` for ``args.updates`` train batches."""
    before = CountingEnv.steps
    algo = cls(config_cls(env=CountingEnv(), input=data, seed=args.seed,
                          evaluation_duration=args.eval_episodes, **OFFLINE_SETTINGS, **extra))
    try:
        for _ in range(args.updates):
            algo.train()
        stepped = CountingEnv.steps - before
        mean = algo.evaluate()["evaluation"]["episode_reward_mean"]
    finally:
        algo.stop()
    harness.progress(f"{cls.__name__} on {os.path.basename(str(data))}: {mean:.1f}")
    return mean, stepped


def estimate_own_data(checkpoint: str, data: str, args) -> tuple[float, float]:
    """Relative errors of IS and WIS (gamma 1) of the expert on its own logged data
    against its true mean return, acting stochastically as it logged."""
    from flowrl.algorithms import Algorithm
    from flowrl.batch import SampleBatch
    from flowrl.offline.estimators import (ImportanceSampling, WeightedImportanceSampling,
                                           whole_episodes)
    from flowrl.offline.reader import DatasetReader
    algo = Algorithm.from_checkpoint(checkpoint, num_workers=0, seed=args.seed + 1)
    try:
        policy = algo.get_policy()
        reader = DatasetReader([data], format="parquet")
        episodes = whole_episodes(SampleBatch.concat_samples(list(reader.read_pass(0))))
        reader.close()
        # Episodes the recording cut off (each env's last) would bias both estimates down.
        batch = SampleBatch.concat_samples([
            e for e in episodes.split_by_episode()
            if e["terminateds"][-1] or e["truncateds"][-1]])
        errors = []
        true = true_return(algo, args.eval_episodes)
        for estimator in (ImportanceSampling(gamma=1.0), WeightedImportanceSampling(gamma=1.0)):
            est = estimator.estimate(batch, policy)
            errors.append(abs(est["v_target"] - true) / true)
            harness.progress(f"{estimator.name}: {est['v_target']:.1f} (logged "
                             f"{est['v_behavior']:.1f}, true {true:.1f}, "
                             f"{est['num_episodes']} episodes)")
    finally:
        algo.stop()
    return errors[0], errors[1]


def true_return(algo, episodes: int) -> float:
    """The mean return of ``episodes`` fresh episodes of ``algo``'s policy, exploring."""
    import gymnasium as gym
    env, total = gym.make("CartPole-v1"), 0.0
    for e in range(episodes):
        obs, _ = env.reset(seed=10_000 + e)
        done = False
        while not done:
            action = algo.compute_single_action(obs, explore=True)
            obs, reward, term, trunc, _ = env.step(action)
            total, done = total + reward, term or trunc
    return total / episodes


def child(args) -> dict:
    workdir = tempfile.mkdtemp(prefix="offline_cartpole-")
    expert_ckpt, ppo_steps, expert_mean = train_expert(args, workdir)
    expert, random_ = os.path.join(workdir, "expert-data"), os.path.join(workdir, "random-data")
    expert_rows = record(expert_ckpt, expert, args.expert_steps, args.seed)
    random_rows = record(None, random_, args.expert_steps // 2, args.seed)
    half_expert = sorted(os.path.join(expert, f) for f in os.listdir(expert)
                         if f.endswith(".parquet"))
    half_expert = half_expert[:max(1, len(half_expert) // 2)]

    from flowrl.algorithms import BC, MARWIL, BCConfig, MARWILConfig
    bc_expert, stepped = train_offline(BC, BCConfig, expert, args)
    mixed = [*half_expert, random_]
    marwil_mixed, stepped_m = train_offline(MARWIL, MARWILConfig, mixed, args, **MARWIL_SETTINGS)
    bc_mixed, stepped_b = train_offline(BC, BCConfig, mixed, args)
    is_err, wis_err = estimate_own_data(expert_ckpt, expert, args)
    return {"ppo_env_steps": ppo_steps, "expert_train_mean": expert_mean,
            "expert_rows": expert_rows, "random_rows": random_rows,
            "bc_expert_eval": bc_expert, "marwil_mixed_eval": marwil_mixed,
            "bc_mixed_eval": bc_mixed,
            "marwil_over_bc": marwil_mixed / bc_mixed if bc_mixed else math.nan,
            "is_rel_error": is_err, "wis_rel_error": wis_err,
            "offline_env_steps": stepped + stepped_m + stepped_b,
            "reached": bool(bc_expert >= 450 and marwil_mixed > bc_mixed
                            and max(is_err, wis_err) <= 0.10)}


def report(runs: list[dict]) -> None:
    groups = harness.summarize(runs, KEYS, [])
    harness.print_groups(groups, [
        ("PPO steps to expert", "ppo_env_steps", "{:,.0f}"),
        ("expert train mean", "expert_train_mean", "{:,.1f}"),
        ("BC on expert (eval)", "bc_expert_eval", "{:,.1f}"),
        ("MARWIL on mixed (eval)", "marwil_mixed_eval", "{:,.1f}"),
        ("BC on mixed (eval)", "bc_mixed_eval", "{:,.1f}"),
        ("MARWIL / BC on mixed", "marwil_over_bc", "{:.2f}x"),
        ("IS rel. error", "is_rel_error", "{:.3f}"),
        ("WIS rel. error", "wis_rel_error", "{:.3f}"),
        ("env steps while training offline", "offline_env_steps", "{:,.0f}")],
        title="Offline CartPole-v1: BC >= 450 on expert data, MARWIL > BC on mixed data, "
              "IS/WIS within 10% (median [min-max]; 'reached': all three held)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--expert-target", type=float, default=450.0)
    p.add_argument("--ppo-max-steps", type=int, default=400_000)
    p.add_argument("--expert-steps", type=int, default=100_000)
    p.add_argument("--updates", type=int, default=300,
                   help="train batches of 2000 rows per offline algorithm")
    p.add_argument("--eval-episodes", type=int, default=20)
    harness.add_arguments(p, default_seeds=2)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, seeds=1, expert_target=60.0, ppo_max_steps=20_000,
                              expert_steps=4_000, updates=3, eval_episodes=2)
    if args.child:
        import torch
        torch.set_num_threads(1)
        harness.write_result(child(args))
        return
    s = harness.settings_from(args)
    s.run_timeout = max(s.run_timeout, 3600.0)
    runs, _ = harness.run(args, "offline_cartpole", __file__, args.systems,
                          harness.forward(args, "expert_target", "ppo_max_steps",
                                          "expert_steps", "updates", "eval_episodes"),
                          meta={"ppo": PPO_SETTINGS, "offline": OFFLINE_SETTINGS, "marwil": MARWIL_SETTINGS,
                                "expert_target": args.expert_target,
                                "expert_steps": args.expert_steps, "updates": args.updates,
                                "eval_episodes": args.eval_episodes}, settings=s)
    report(runs)


if __name__ == "__main__":
    main()
