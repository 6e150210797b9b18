"""CQL and BC on a medium SAC policy's Hopper-v5 dataset, against the data's own return; resumable.

One system, ``flowrl``, each seed a fresh process (see ``benchmarks/harness.py``)
running the pipeline, stage by stage:

1. **Behaviour policy.** SAC at CleanRL's Hopper settings trains until it scores
   ``--behaviour-target`` (1100, about a third of an expert's 3300: D4RL's
   "medium") or ``--sac-max-steps`` run out. It is judged by
   ``--behaviour-episodes`` (20) evaluation episodes acting stochastically, as it
   will record, taken whenever the mean of its last 10 training episodes reaches
   the target: a window of training episodes alone can catch a lucky streak (a
   first run's window read 1,137 where its recording returned 513).
2. **Dataset.** ``--dataset-steps`` env steps (1M) of that policy acting
   stochastically, as it trained, written by ``output`` (Parquet). The behaviour
   return is the mean return of the episodes recorded.
3. **CQL** (``input`` the dataset; the settings of RLlib 1.x's tuned example for
   D4RL's hopper-medium, ``hopper-cql.yaml``: 256x256x256 networks, actor rate 1e-4,
   critic 3e-4, entropy 1e-4, ``bc_iters`` 20000, ``min_q_weight`` 5, 10 sampled
   actions) for ``--cql-updates`` updates of 256 rows, then ``--eval-episodes``
   greedy episodes on the env. The env is never stepped for training (an env
   wrapper counts: ``offline_env_steps`` stays 0).
4. **BC** on the same data, with CQL's policy network (256x256x256),
   ``--bc-updates`` batches of 256 rows, rate 1e-3, evaluated the same way.

Reported: the behaviour return, CQL's and BC's evaluated returns, CQL / behaviour
and CQL / BC. **Target:** CQL above the behaviour return. CQL and BC are also
evaluated every ``--eval-every`` updates (10,000); the result's ``cql_curve`` and
``bc_curve`` hold those ``[updates, return]`` pairs (evaluation steps are not
counted in ``offline_env_steps``), and ``cql_learner`` and ``bc_learner`` the
learner's figures of the last iteration before each point (for CQL: ``mean_q``,
``cql_loss``, ``entropy``, ``alpha_value``, ...), to show why a curve moves.

Sittings. The pipeline takes many hours on 2 CPUs, so each invocation works at most
``--sitting-minutes`` (default: no limit), then saves where it is under
``--state-dir`` (default ``runs/offline_cql/``: SAC's checkpoint with its replay
buffer, the dataset's finished files, CQL's and BC's checkpoints, and
``progress.json``) and exits; the next invocation with the same options goes on
from there. A child that stops before the end reports ``complete: false`` and the
stage it reached. Delete a seed's state directory (or pass ``--restart``) to start
over, or pass ``--redo-from STAGE`` to discard that stage's results and the later
stages' and go on from the state before it (``behaviour``: SAC goes on training from
its checkpoint until it meets the behaviour criterion again). CQL and BC save their
checkpoints at every stop, finished or not: an invocation asking for more
``--cql-updates`` (or ``--bc-updates``) than were trained goes back to that stage and
continues it. A stage trained with other settings than the script's (an older
version's) is not continued: the invocation stops, naming the settings that differ.

Every stage's Algorithm runs torch on ``--torch-threads`` (2: the machine's cores; this script
makes no throughput claim, and a CQL update, compute-bound in its 7,680-row critic
passes, runs about 1.6x as fast on two threads as on one).

    python benchmarks/offline_cql.py --sitting-minutes 240     # one seed, in sittings
    python benchmarks/offline_cql.py --quick --no-idle-wait    # smoke run (Pendulum-v1)
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

SYSTEMS = ["flowrl"]
KEYS = ["sac_env_steps", "behaviour_train_score", "behaviour_eval", "dataset_rows",
        "behaviour_return", "cql_eval", "bc_eval", "cql_over_behaviour", "cql_over_bc",
        "offline_env_steps"]
STAGES = ("behaviour", "dataset", "cql", "bc", "done")
NET = {"fcnet_hiddens": [256, 256], "fcnet_activation": "relu"}
#: RLlib 1.x's hopper-cql.yaml networks, for CQL's critics and actor and for BC.
NET3 = {"fcnet_hiddens": [256, 256, 256], "fcnet_activation": "relu"}
#: CleanRL's sac_continuous_action.py settings (as benchmarks/mujoco_offpolicy.py).
SAC_SETTINGS = dict(num_workers=0, rollout_fragment_length=1, train_batch_size=256,
                    gamma=0.99, tau=0.005, buffer_size=1_000_000, learning_starts=5000,
                    target_network_update_freq=0, Q_model=NET, policy_model=NET,
                    optimization={"actor_learning_rate": 3e-4, "critic_learning_rate": 1e-3,
                                  "entropy_learning_rate": 1e-3},
                    checkpoint_replay_buffer=True, timesteps_per_iteration=1000)
#: RLlib 1.x's tuned CQL example for D4RL's hopper-medium (hopper-cql.yaml).
CQL_SETTINGS = dict(train_batch_size=256, buffer_size=1_000_000, Q_model=NET3,
                    policy_model=NET3, bc_iters=20000, min_q_weight=5.0, num_actions=10,
                    temperature=1.0, tau=0.005, target_network_update_freq=0,
                    optimization={"actor_learning_rate": 1e-4, "critic_learning_rate": 3e-4,
                                  "entropy_learning_rate": 1e-4})
BC_SETTINGS = dict(lr=1e-3, train_batch_size=256, rollout_fragment_length=256,
                   model=NET3, postprocess_inputs=True, input_config={"shuffle": True})
WINDOW = 10
DEFAULT_STATE_DIR = Path(__file__).resolve().parents[1] / "runs" / "offline_cql"


class CountingEnv:
    """An env creator whose envs count every step into ``CountingEnv.steps``."""

    steps = 0

    def __init__(self, env_id: str):
        self.env_id = env_id

    def __call__(self, env_config):
        import gymnasium as gym

        class Counted(gym.Wrapper):
            def step(self, action):
                CountingEnv.steps += 1
                return self.env.step(action)

        return Counted(gym.make(self.env_id))


class Progress:
    """The seed's state between sittings (``progress.json``): the stage reached and
    each stage's figures."""

    def __init__(self, directory: Path):
        self.dir, self.path = directory, directory / "progress.json"
        self.data = json.loads(self.path.read_text()) if self.path.exists() else {
            "stage": "behaviour"}

    def __getitem__(self, key):
        return self.data.get(key)

    def save(self, **figures) -> None:
        self.data.update(figures)
        self.dir.mkdir(parents=True, exist_ok=True)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text(json.dumps(self.data))
        tmp.replace(self.path)


class Sitting:
    """The wall-clock budget of this invocation (``--sitting-minutes``), and its
    progress lines (at most one a minute: every stage runs for many minutes)."""

    def __init__(self, minutes: float | None):
        self.deadline = None if not minutes else time.time() + 60 * minutes
        self.last_progress = time.time()

    def over(self) -> bool:
        return self.deadline is not None and time.time() > self.deadline

    def progress(self, message: str) -> None:
        if time.time() - self.last_progress >= 60:
            harness.progress(message)
            self.last_progress = time.time()


def behaviour(args, p: Progress, sitting: Sitting) -> bool:
    """Stage 1: SAC trained to the behaviour target; True when done."""
    import numpy as np

    from flowrl.algorithms import SAC, SACConfig
    algo = SAC(SACConfig(env=args.env, seed=args.seed, **SAC_SETTINGS,
                         torch_threads=args.torch_threads, evaluation_config={"explore": True},
                         evaluation_duration=args.behaviour_episodes))
    ckpt = p.dir / "sac"
    window = EpisodeWindow(WINDOW, p["sac_window"] or [], 0)
    evaluated, evaluated_at = None, None

    def good_enough() -> bool:
        """The behaviour criterion (module docstring), evaluating at most once per
        training iteration."""
        nonlocal evaluated, evaluated_at
        if not window.score() >= args.behaviour_target:   # NaN before any episode
            return False
        if evaluated_at != steps:
            evaluated = algo.evaluate()["evaluation"]["episode_reward_mean"]
            evaluated_at = steps
            harness.progress(f"SAC {steps:,} steps, score {window.score():,.0f}, evaluated "
                             f"{evaluated:,.0f} over {args.behaviour_episodes} episodes")
        return evaluated >= args.behaviour_target

    try:
        if p["sac_env_steps"]:
            algo.restore(str(ckpt))
        spy_episodes(algo, window.add_returns)
        steps = p["sac_env_steps"] or 0
        while not (good_enough() or steps >= args.sac_max_steps or sitting.over()):
            steps = algo.train()["timesteps_total"]
            sitting.progress(f"SAC {steps:,} steps, score {window.score():,.0f}")
        harness.progress(f"SAC {steps:,} steps, score {window.score():,.0f}")
        algo.save(str(ckpt))
        np.savez(p.dir / "behaviour_weights.npz", **algo.get_policy().get_weights())
    finally:
        algo.stop()
    done = (evaluated is not None and evaluated >= args.behaviour_target
            or steps >= args.sac_max_steps)
    p.save(sac_env_steps=steps, sac_window=list(window.returns),
           behaviour_train_score=window.score(), behaviour_eval=evaluated,
           stage="dataset" if done else "behaviour")
    return done


def record(args, p: Progress, sitting: Sitting) -> bool:
    """Stage 2: the behaviour policy's dataset, in whole files per sitting."""
    import numpy as np

    from flowrl.algorithms import SAC, SACConfig
    rows, returns = p["dataset_rows"] or 0, p["behaviour_returns"] or []
    algo = SAC(SACConfig(env=args.env, **{**SAC_SETTINGS, "checkpoint_replay_buffer": False,
                                          "rollout_fragment_length": 1000},
                         output=str(p.dir / "data"), seed=args.seed + len(returns),
                         torch_threads=args.torch_threads))
    with np.load(p.dir / "behaviour_weights.npz") as saved:
        algo.get_policy().set_weights(dict(saved))
    worker = algo.workers.local_worker()
    try:
        while rows < args.dataset_steps and not sitting.over():
            rows += worker.sample().count   # acting only: the policy is not trained
            returns += [e["episode_reward"] for e in worker.episode_stats()]
            sitting.progress(f"dataset {rows:,} rows")
    finally:
        algo.stop()   # closes the dataset's files
    done = rows >= args.dataset_steps
    p.save(dataset_rows=rows, behaviour_returns=returns,
           behaviour_return=sum(returns) / len(returns) if returns else math.nan,
           stage="cql" if done else "dataset")
    harness.progress(f"dataset {rows:,} rows, behaviour return {p['behaviour_return']:,.1f}")
    return done


def evaluate_return(algo) -> float:
    """``algo``'s evaluated mean return; the env steps of evaluation are not
    training's, so ``CountingEnv.steps`` is left as it was."""
    before = CountingEnv.steps
    mean = algo.evaluate()["evaluation"]["episode_reward_mean"]
    CountingEnv.steps = before
    return mean


def learner_figures(result: dict) -> dict[str, float]:
    """The default policy's learner figures in a ``train()`` result, numbers only."""
    stats = result["info"]["learner"].get("default_policy", {})
    return {k: float(v) for k, v in stats.items()
            if isinstance(v, (int, float)) and math.isfinite(v)}


def stage_settings(name: str) -> dict:
    """The settings that shape a stage's checkpoint and curve, as JSON stores them."""
    return json.loads(json.dumps({"cql": CQL_SETTINGS, "bc": BC_SETTINGS}[name]))


def check_settings(p: Progress, name: str) -> None:
    """Refuse to continue a stage that earlier sittings trained with other settings
    (its checkpoint would not fit, or its curve would mix two runs)."""
    saved, now = p[f"{name}_settings"], stage_settings(name)
    if p[f"{name}_updates"] and saved is not None and saved != now:
        changed = sorted(k for k in saved.keys() | now.keys() if saved.get(k) != now.get(k))
        raise SystemExit(f"{p.dir}: {name} was trained for {p[f'{name}_updates']:,} updates "
                         f"with other settings ({', '.join(changed)} differ); pass "
                         f"--redo-from {name} to train it again with this script's")


#: The offline stages, each trained (and probed, ``cql_probe.py``) by :func:`offline_algorithm`.
OFFLINE_STAGES = ("cql", "bc")


def offline_algorithm(name: str, env: str, data: str, seed: int, episodes: int,
                      torch_threads: int):
    """A new Algorithm of offline stage ``name`` (``cql`` or ``bc``) at this script's
    settings, reading the dataset in ``data`` and evaluating ``episodes`` episodes of
    ``env`` (counted by :class:`CountingEnv`)."""
    from flowrl.algorithms import BC, CQL, BCConfig, CQLConfig
    common = dict(env=CountingEnv(env), input=data, seed=seed, evaluation_duration=episodes,
                  torch_threads=torch_threads)
    if name == "cql":
        return CQL(CQLConfig(**common, **CQL_SETTINGS, timesteps_per_iteration=256 * 100))
    return BC(BCConfig(**common, **BC_SETTINGS))


def train_offline(name: str, updates: int, args, p: Progress, sitting: Sitting) -> bool:
    """Stages 3 and 4: ``updates`` updates of stage ``name``'s Algorithm
    (:func:`offline_algorithm`) from the dataset, evaluated
    every ``--eval-every`` updates on the way (``<name>_curve``) and at the end
    (``<name>_eval``); True when done. Its checkpoint is saved at every stop, so a
    later sitting asking for more updates continues it (:func:`reopen_to_extend`)."""
    after = STAGES[STAGES.index(name) + 1]
    if p[f"{name}_eval"] is not None and (p[f"{name}_updates"] or 0) >= updates:
        p.save(stage=after)   # done in an earlier sitting; a stage before it was extended
        return True
    ckpt = p.dir / name
    check_settings(p, name)
    algo = offline_algorithm(name, args.env, str(p.dir / "data"), args.seed,
                             args.eval_episodes, args.torch_threads)
    before = CountingEnv.steps
    curve, learner = p[f"{name}_curve"] or [], p[f"{name}_learner"] or []
    try:
        if p[f"{name}_updates"]:
            algo.restore(str(ckpt))
        done_updates = p[f"{name}_updates"] or 0
        while done_updates < updates and not sitting.over():
            last, r = done_updates, algo.train()
            done_updates = r["info"]["num_steps_trained"] // 256
            sitting.progress(f"{name} {done_updates:,} updates")
            if args.eval_every and done_updates // args.eval_every > last // args.eval_every:
                curve.append([done_updates, evaluate_return(algo)])
                learner.append({"updates": done_updates, **learner_figures(r)})
                harness.progress(f"{name} {done_updates:,} updates, evaluated "
                                 f"{curve[-1][1]:,.1f}")
        stepped = CountingEnv.steps - before + (p["offline_env_steps"] or 0)
        figures = {f"{name}_updates": done_updates, "offline_env_steps": stepped,
                   f"{name}_curve": curve, f"{name}_learner": learner,
                   f"{name}_settings": stage_settings(name)}
        if done_updates >= updates:
            figures[f"{name}_eval"] = evaluate_return(algo)
            harness.progress(f"{name}: {figures[f'{name}_eval']:,.1f}")
        algo.save(str(ckpt))
    finally:
        algo.stop()
    done = done_updates >= updates
    p.save(**figures, stage=after if done else name)
    return done


def reopen_to_extend(p: Progress, wanted: dict[str, int]) -> None:
    """Go back to the first offline stage (``cql``, ``bc``) that finished with fewer
    updates than ``wanted`` now asks, dropping its final evaluation: it continues
    from its checkpoint. The stages after it keep their results."""
    for name in OFFLINE_STAGES:
        past = STAGES.index(p["stage"]) > STAGES.index(name)
        if past and (p[f"{name}_updates"] or 0) < wanted[name]:
            if not (p.dir / name).exists():
                raise SystemExit(f"{p.dir}: {name} finished at {p[f'{name}_updates']:,} "
                                 f"updates without a checkpoint to continue from; pass "
                                 f"--redo-from {name} to train it again")
            p.data.pop(f"{name}_eval", None)
            p.save(stage=name)
            return


def seed_dir(args, seed: int) -> Path:
    """Where one seed's state lives between sittings."""
    return Path(args.state_dir) / f"{args.env}{'-quick' if args.quick else ''}-seed{seed}"


#: What each stage leaves in a seed's directory: its figures in ``progress.json``
#: and its files. SAC's checkpoint, its step count and its episode window are not
#: among them: redoing ``behaviour`` trains on from them.
STAGE_OUTPUTS = {
    "behaviour": (("behaviour_train_score", "behaviour_eval"), ("behaviour_weights.npz",)),
    "dataset": (("dataset_rows", "behaviour_returns", "behaviour_return"), ("data",)),
    "cql": (("cql_updates", "cql_eval", "cql_curve", "cql_learner", "cql_settings",
             "offline_env_steps"), ("cql",)),
    "bc": (("bc_updates", "bc_eval", "bc_curve", "bc_learner", "bc_settings"), ("bc",)),
}


def redo_from(p: Progress, stage: str) -> None:
    """Discard the results of ``stage`` and of every later stage, so the next
    sitting starts there (:data:`STAGE_OUTPUTS` says what each stage leaves)."""
    if p["stage"] is None or STAGES.index(p["stage"]) < STAGES.index(stage):
        raise SystemExit(f"--redo-from {stage}: {p.dir} has not reached that stage "
                         f"(it is at {p['stage']!r})")
    for later in STAGES[STAGES.index(stage):-1]:
        figures, files = STAGE_OUTPUTS[later]
        for name in files:
            path = p.dir / name
            if path.is_dir():
                shutil.rmtree(path)
            else:
                path.unlink(missing_ok=True)
        for key in figures:
            p.data.pop(key, None)
    p.save(stage=stage)


def child(args) -> dict:
    p = Progress(seed_dir(args, args.seed))
    sitting = Sitting(args.sitting_minutes)
    steps = {
        "behaviour": lambda: behaviour(args, p, sitting),
        "dataset": lambda: record(args, p, sitting),
        "cql": lambda: train_offline("cql", args.cql_updates, args, p, sitting),
        "bc": lambda: train_offline("bc", args.bc_updates, args, p, sitting),
    }
    reopen_to_extend(p, {"cql": args.cql_updates, "bc": args.bc_updates})
    while p["stage"] != "done" and steps[p["stage"]]():
        pass
    cql, bc, behaviour_return = (p["cql_eval"], p["bc_eval"], p["behaviour_return"])

    def over(a, b):
        return a / abs(b) if a is not None and b else math.nan

    return {"complete": p["stage"] == "done", "stage": p["stage"],
            "sac_env_steps": p["sac_env_steps"],
            "behaviour_train_score": p["behaviour_train_score"],
            "behaviour_eval": p["behaviour_eval"],
            "dataset_rows": p["dataset_rows"], "behaviour_return": behaviour_return,
            "cql_eval": cql, "bc_eval": bc, "cql_curve": p["cql_curve"],
            "bc_curve": p["bc_curve"], "cql_learner": p["cql_learner"],
            "bc_learner": p["bc_learner"],
            "cql_over_behaviour": over(cql, behaviour_return), "cql_over_bc": over(cql, bc),
            "offline_env_steps": p["offline_env_steps"],
            "reached": bool(cql is not None and behaviour_return is not None
                            and cql > behaviour_return)}


def report(runs: list[dict], env: str) -> None:
    for r in runs:
        res = r.get("result") or {}
        if r.get("valid") and not res.get("complete"):
            print(f"seed {r['seed']}: stopped at stage {res.get('stage')!r}, resumable")
    groups = harness.summarize(runs, KEYS, [])
    harness.print_groups(groups, [
        ("SAC steps to behaviour", "sac_env_steps", "{:,.0f}"),
        ("behaviour policy evaluated (stochastic)", "behaviour_eval", "{:,.1f}"),
        ("dataset rows", "dataset_rows", "{:,.0f}"),
        ("behaviour return", "behaviour_return", "{:,.1f}"),
        ("CQL (eval)", "cql_eval", "{:,.1f}"), ("BC (eval)", "bc_eval", "{:,.1f}"),
        ("CQL / behaviour", "cql_over_behaviour", "{:.2f}x"),
        ("CQL / BC", "cql_over_bc", "{:.2f}x"),
        ("env steps while training offline", "offline_env_steps", "{:,.0f}")],
        title=f"Offline {env} from a medium SAC policy's data: CQL's evaluated return above "
              "the data's behaviour return, next to BC (median [min-max] over seeds)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--env", default="Hopper-v5")
    p.add_argument("--behaviour-target", type=float, default=1100.0)
    p.add_argument("--behaviour-episodes", type=int, default=20,
                   help="evaluation episodes that judge the behaviour policy")
    p.add_argument("--sac-max-steps", type=int, default=1_000_000)
    p.add_argument("--dataset-steps", type=int, default=1_000_000)
    p.add_argument("--cql-updates", type=int, default=200_000)
    p.add_argument("--bc-updates", type=int, default=50_000)
    p.add_argument("--eval-episodes", type=int, default=10)
    p.add_argument("--eval-every", type=int, default=10_000,
                   help="evaluate CQL and BC every this many updates too (0: only at the end)")
    p.add_argument("--sitting-minutes", type=float, default=None,
                   help="work at most this long, then save and stop (default: no limit)")
    p.add_argument("--state-dir", default=str(DEFAULT_STATE_DIR))
    p.add_argument("--restart", action="store_true",
                   help="delete the state of this invocation's seeds first")
    p.add_argument("--redo-from", choices=STAGES[:-1],
                   help="discard this stage's results and the later stages', keep the rest")
    p.add_argument("--torch-threads", type=int, default=2)
    harness.add_arguments(p, default_seeds=1)
    args = p.parse_args(argv)
    if args.quick:   # Pendulum, tiny sizes: a smoke run of every stage
        SAC_SETTINGS.update(learning_starts=200, buffer_size=5000,
                            timesteps_per_iteration=200)
        CQL_SETTINGS.update(bc_iters=5, num_actions=2)
    if args.quick:
        args.env = "Pendulum-v1"
    harness.shorten_for_quick(args, seeds=1, behaviour_target=-2000.0, behaviour_episodes=2,
                              sac_max_steps=400, dataset_steps=2000, cql_updates=10, eval_every=50,
                              bc_updates=4, eval_episodes=1)
    if args.child:
        harness.write_result(child(args))
        return
    for seed in harness.settings_from(args).seeds:
        directory = seed_dir(args, seed)
        if args.restart:
            shutil.rmtree(directory, ignore_errors=True)
        elif args.redo_from:
            redo_from(Progress(directory), args.redo_from)
    s = harness.settings_from(args)
    s.run_timeout = max(s.run_timeout, 24 * 3600.0)
    runs, _ = harness.run(args, f"offline_cql-{args.env}", __file__, args.systems,
                          harness.forward(args, "env", "behaviour_target",
                                          "behaviour_episodes", "sac_max_steps",
                                          "torch_threads", "dataset_steps", "cql_updates",
                                          "bc_updates", "eval_episodes", "eval_every",
                                          "sitting_minutes",
                                          "state_dir", "quick"),
                          meta={"sac": SAC_SETTINGS, "cql": CQL_SETTINGS, "bc": BC_SETTINGS,
                                "env": args.env, "behaviour_target": args.behaviour_target,
                                "behaviour_episodes": args.behaviour_episodes,
                                "torch_threads": args.torch_threads,
                                "dataset_steps": args.dataset_steps,
                                "cql_updates": args.cql_updates, "bc_updates": args.bc_updates,
                                "eval_episodes": args.eval_episodes},
                          settings=s, resumable=True)
    report(runs, args.env)


if __name__ == "__main__":
    main()
