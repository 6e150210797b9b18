"""Memory proofs (issue 23): PPO with and without an LSTM on tasks that need memory.

Tasks (``--task``) and the systems run on each (every seed of every system in a
fresh process, interleaved; see ``benchmarks/harness.py``):

- ``stateless-cartpole``: ``flowrl/StatelessCartPole-v1`` (CartPole-v1 observing
  cart position and pole angle only), target train mean 450.

  - ``flowrl-lstm``: ``tuned_examples/ppo-lstm-stateless-cartpole.yaml`` as it is
    (local backend);
  - ``flowrl-mlp``: the same config with ``model.use_lstm: false`` (the ``lstm_*``
    fields dropped): the same MLP torso, no memory;
  - ``rllib-lstm``: RLlib 2.x PPO (new API stack) at RLlib's own config for this
    env (``rllib/examples/connectors/prev_actions_prev_rewards.py``: LSTM over a
    32-unit linear layer shared by policy and value, previous action and reward
    fed in, max_seq_len 20, lr 3e-4, 6 epochs, 4000-step batches,
    vf_loss_coeff 0.01; RLlib's defaults otherwise, i.e. 2 env runners). RLlib's
    ``StatelessCartPole`` class has no time limit, so it is wrapped in
    ``TimeLimit(500)`` as the flowrl id is registered.

- ``cue-recall``: ``flowrl/CueRecall-v0`` with the tuned example's ``env_config``
  (4 cues, 10 blank steps), target 0.95; a memoryless policy scores 1/4 in
  expectation. Systems ``flowrl-lstm`` (``tuned_examples/ppo-lstm-cue-recall.yaml``)
  and ``flowrl-mlp`` (the same without the LSTM).

The success criterion is computed by this script the same way for every system:
the mean return of the last 100 completed training episodes (a full window),
checked after each training iteration. Every run records its curve: per
iteration ``[env steps, training seconds, window mean]`` (thinned to at most
``CURVE_POINTS`` points), saved with the run's figures. ``--max-steps`` and
``--max-seconds`` bound training (a run without memory uses the whole budget).

    python benchmarks/memory_proofs.py --task stateless-cartpole --seeds 3
    python benchmarks/memory_proofs.py --task cue-recall
    python benchmarks/memory_proofs.py --quick --no-idle-wait     # smoke run
"""

from __future__ import annotations

import argparse
import math
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
TASKS = {
    "stateless-cartpole": dict(spec="ppo-lstm-stateless-cartpole.yaml", target=450.0,
                               systems=["flowrl-lstm", "flowrl-mlp", "rllib-lstm"],
                               max_steps=1_000_000),
    "cue-recall": dict(spec="ppo-lstm-cue-recall.yaml", target=0.95,
                       systems=["flowrl-lstm", "flowrl-mlp"], max_steps=300_000),
}
SYSTEMS = ["flowrl-lstm", "flowrl-mlp", "rllib-lstm"]
#: Curve points kept per run in the JSON (thinned evenly, the last point always kept).
CURVE_POINTS = 200


def thin(points: list, n: int = CURVE_POINTS) -> list:
    """At most ``n`` of ``points``, evenly spaced, the last one always kept.

    >>> thin(list(range(10)), 4)
    [0, 3, 6, 9]
    """
    if len(points) <= n:
        return list(points)
    step = (len(points) - 1) / (n - 1)
    return [points[round(i * step)] for i in range(n)]


def tuned_spec(task: str) -> dict:
    from flowrl.experiment import load_spec
    return load_spec(os.path.join(ROOT, "tuned_examples", TASKS[task]["spec"]))


def without_lstm(model: dict) -> dict:
    """The tuned example's model dict with the LSTM switched off (its fields dropped).

    >>> without_lstm({"use_lstm": True, "lstm_cell_size": 64, "max_seq_len": 16, "fcnet_hiddens": [64]})
    {'fcnet_hiddens': [64], 'use_lstm': False}
    """
    kept = {k: v for k, v in model.items()
            if not k.startswith("lstm_") and k not in ("use_lstm", "max_seq_len")}
    return {**kept, "use_lstm": False}


def make_tracker(args):
    from training import Tracker  # the benchmarks' shared 100-episode window

    class CurveTracker(Tracker):
        """Tracker that also records ``[env steps, training s, window mean]`` per iteration."""

        def __init__(self, *a, **kw):
            super().__init__(*a, **kw)
            self.curve: list[list[float]] = []

        def after_iteration(self, env_steps: int) -> bool:
            stop = super().after_iteration(env_steps)
            mean = self.mean()
            self.curve.append([int(env_steps), round(self.train_s, 2),
                               None if math.isnan(mean) else round(mean, 4)])
            return stop

    return CurveTracker(args.target, args.max_steps, args.max_seconds)


# -- flowrl ----------------------------------------------------------------------------
def child_flowrl(args, seed: int, lstm: bool) -> dict:
    from flowrl.experiment import make_config
    from training import n_params, train_flowrl
    spec = tuned_spec(args.task)
    fields = {"env": spec["env"], **spec["config"], "seed": seed}
    if not lstm:
        fields["model"] = without_lstm(fields["model"])
    if args.quick:
        fields.update(train_batch_size=1024, sgd_minibatch_size=256)
    config = make_config(spec["algo"], fields)
    from flowrl.algorithms import ALGORITHMS
    algo = ALGORITHMS[spec["algo"]](config)
    tracker = make_tracker(args)
    train_flowrl(algo, tracker)
    params = n_params(algo.get_policy().model)
    return tracker.result(params=params, curve=thin(tracker.curve))


# -- RLlib ----------------------------------------------------------------------------
def child_rllib(args, seed: int) -> dict:
    if args.task != "stateless-cartpole":
        raise SystemExit("rllib-lstm runs on --task stateless-cartpole only (RLlib's own "
                         "tuned LSTM config is for that env)")
    import gymnasium as gym
    import ray
    from ray.rllib.algorithms.ppo import PPOConfig
    from ray.rllib.connectors.env_to_module import FlattenObservations, PrevActionsPrevRewards
    from ray.rllib.core.rl_module.default_model_config import DefaultModelConfig
    from ray.rllib.examples.envs.classes.stateless_cartpole import StatelessCartPole
    from ray.tune import register_env
    from torch import nn

    from training import build_rllib, n_params, rllib_episode_callback, train_rllib
    ray.init(num_cpus=os.cpu_count() or 1, include_dashboard=False, log_to_driver=False)
    register_env("bench-stateless-cartpole",
                 lambda _: gym.wrappers.TimeLimit(StatelessCartPole(), max_episode_steps=500))

    def env_to_module(env, spaces, device):
        return [PrevActionsPrevRewards(n_prev_rewards=1, n_prev_actions=1),
                FlattenObservations()]

    config = (PPOConfig().environment("bench-stateless-cartpole")
              .env_runners(env_to_module_connector=env_to_module)
              .callbacks(rllib_episode_callback())
              .debugging(seed=seed)
              .training(num_epochs=6, lr=3e-4, train_batch_size=4000 if not args.quick else 1000,
                        vf_loss_coeff=0.01)
              .rl_module(model_config=DefaultModelConfig(
                  use_lstm=True, max_seq_len=20, fcnet_hiddens=[32],
                  fcnet_activation="linear", fcnet_kernel_initializer=nn.init.xavier_uniform_,
                  fcnet_bias_initializer=nn.init.constant_,
                  fcnet_bias_initializer_kwargs={"val": 0.0}, vf_share_layers=True)))
    algo = build_rllib(config)
    params = n_params(algo.learner_group._learner.module["default_policy"])
    tracker = make_tracker(args)
    train_rllib(algo, tracker)
    ray.shutdown()
    return tracker.result(params=params, curve=thin(tracker.curve))


def child(args) -> None:
    if args.child == "flowrl-lstm":
        result = child_flowrl(args, args.seed, lstm=True)
    elif args.child == "flowrl-mlp":
        result = child_flowrl(args, args.seed, lstm=False)
    elif args.child == "rllib-lstm":
        result = child_rllib(args, args.seed)
    else:
        raise SystemExit(f"unknown system {args.child!r}; choose from {SYSTEMS}")
    harness.write_result(result)


# -- report -----------------------------------------------------------------------------
def curve_text(curve: list, target: float, width: int = 10) -> str:
    """A compact curve: ``width`` evenly spaced ``steps:mean`` points.

    >>> curve_text([[1000, 1.0, None], [2000, 2.0, 20.0], [3000, 3.0, 40.0]], 450, 2)
    '1k:-  3k:40'
    """
    points = thin(curve, width)
    return "  ".join(f"{s / 1000:.0f}k:{'-' if m is None else f'{m:.3g}'}"
                     for s, _, m in points)


def report(runs: list[dict], target: float, task: str) -> None:
    rows = []
    for run in runs:
        r = run.get("result") or {}
        status = ("reached" if r.get("reached") else "not reached") if run.get("ok") \
            else f"FAILED (rc {run.get('returncode')})"
        rows.append([run["system"], run["seed"], status,
                     "-" if not r.get("reached") else f"{r['train_s']:.0f}",
                     "-" if not r.get("reached") else f"{r['env_steps']:,}",
                     "-" if r.get("final_mean") is None else f"{r['final_mean']:.3g}",
                     f"{r['env_steps']:,}" if r else "-",
                     "-" if not r.get("train_s") else f"{r['train_s']:.0f}",
                     "-" if not r.get("steps_per_s") else f"{r['steps_per_s']:,.0f}"])
    harness.print_table(["system", "seed", f"target {target:g}", "time to target s",
                         "env steps to target", "final mean (100 ep)", "env steps run",
                         "train s run", "env steps/s"], rows,
                        title=f"memory proofs, {task}: one row per run")
    print("\ncurves (env steps : 100-episode train mean)")
    for run in runs:
        curve = (run.get("result") or {}).get("curve")
        if curve:
            print(f"  {run['system']} seed {run['seed']}: {curve_text(curve, target)}")
    for run in runs:
        if not run.get("ok"):
            print(f"\n{run['system']} seed {run['seed']} failed; log tail:\n"
                  + (run.get("log_tail") or "").strip()[-1500:])


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--task", choices=sorted(TASKS), default="stateless-cartpole")
    p.add_argument("--systems", nargs="*", default=None, choices=SYSTEMS,
                   help="default: every system of the task")
    p.add_argument("--target", type=float, default=None, help="default: the task's")
    p.add_argument("--max-steps", type=int, default=None, help="default: the task's")
    p.add_argument("--max-seconds", type=float, default=600.0)
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    task = TASKS[args.task]
    args.target = task["target"] if args.target is None else args.target
    args.max_steps = task["max_steps"] if args.max_steps is None else args.max_steps
    harness.shorten_for_quick(args, max_steps=4096, max_seconds=30)
    if args.child:
        child(args)
        return
    systems = args.systems or task["systems"]
    child_args = harness.forward(args, "task", "target", "max_steps", "max_seconds", "quick")
    runs, meta = harness.run(args, f"memory_proofs-{args.task}", __file__, systems, child_args,
                             meta={"task": args.task, "target": args.target,
                                   "max_steps": args.max_steps,
                                   "max_seconds": args.max_seconds, "spec": task["spec"]})
    report(runs, meta["target"], meta["task"])


if __name__ == "__main__":
    main()
