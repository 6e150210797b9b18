"""The ``flowrl`` command: ``flowrl train``, ``flowrl evaluate``, ``flowrl export``,
``flowrl tune`` and ``flowrl plan``.

``flowrl train [ALGO] [--env ENV] [--config FILE.yaml] [--set key=value ...]
[--restore PATH]`` trains until a stop criterion holds: ``--stop-reward`` (default: the env's
registered reward threshold, e.g. 475 for CartPole-v1), ``--stop-timesteps``,
``--stop-iters``, ``--stop-time SECONDS`` (``time_total_s``, which a restored run
continues; the first one reached stops). After every iteration it shows the
iteration, timesteps, mean return, episodes, steps/s and time: on a terminal as a
live table (rich), otherwise (a log file, nohup, Slurm) as one plain line, flushed
at once; with ``--eval-interval N`` also the last evaluation's mean return;
nothing with ``--quiet``. Its last line says why it stopped, the last mean return
and where the results and the checkpoint are. ``--config`` reads an experiment
spec (algo, env, stop, config; see :mod:`flowrl.experiment`) and ``--set``
overrides one field; unknown names get a suggestion, and numbers YAML reads as
strings (``--set lr=1e-3``, ``--stop-timesteps 1e6``) are read as numbers. Each
run writes ``<run-dir>/<algo>-<env>-<time>/`` with
``result.jsonl`` (one result per iteration; evaluations under ``evaluation``),
TensorBoard event files with the same scalars (``evaluation/episode_reward_mean``
...), and ``checkpoint/`` (or ``--checkpoint-dir D``) holding numbered
checkpoints ``checkpoint_NNNNNN/``: every ``--checkpoint-freq N`` iterations (the
last ``--keep-checkpoints K`` kept) and a final one at the end or on Ctrl-C.
Saves are atomic (:mod:`flowrl.checkpoint`); a periodic save that fails is
skipped, counted in the results (``num_checkpoints_skipped``) and logged once per
reason. ``--restore PATH`` continues a checkpoint, a checkpoint directory (its
latest complete checkpoint that reads: a corrupt newest one gives way to an older
one, with a warning), a run directory or a Ray Tune trial's; it is read
and applied before anything is written, so a failed restore exits 2 with a
one-line reason and writes nothing. ALGO, ``--env`` and the config default to the
checkpoint's (``flowrl train --restore PATH`` alone continues it as it was
trained); what the command line gives overrides them. A checkpoint inside a run
directory continues that run: results are appended to its ``result.jsonl`` and
TensorBoard files, checkpoints join its ``checkpoint/``, unless ``--run-dir``
asks for a new run directory. Restoring runs no code from the checkpoint;
one whose extra state was pickled (``user_state.pkl``) is refused unless
``--restore-allow-pickle`` says its source is trusted.

Atari: for an ``ALE/...`` env without ``--config`` (or ``--restore``), ``flowrl
train ALGO`` starts from the ``config`` block of ALGO's tuned Pong example
(``tuned_examples/<algo>-pong.yaml``, shipped with the package:
:func:`flowrl.experiment.atari_defaults`) instead of the algorithm's defaults, which
are tuned for CartPole; flags and ``--set`` override it field by field, and the
first line it prints (on stderr) names the file, or says that ALGO has none.

Custom code: ``--env pkg.mod:Class`` and ``--set model.custom_model=pkg.mod:Class``
name a class of an importable module (:mod:`flowrl.user_code`), and ``--import
MODULE`` (repeatable, on every command) imports a module before anything is built,
for modules that register envs or models; ``train``, ``tune`` and ``plan`` add it
to the config field ``imports``, which rollout workers and Tune trials import too.
Modules are looked up among the installed packages, on ``PYTHONPATH`` and, last, in
the current directory.

``flowrl evaluate CHECKPOINT [--episodes N] [--video DIR] [--allow-pickle]`` plays
N episodes with the checkpoint's policy and prints the mean and std of the return;
``--video DIR`` records each episode there as an MP4 (gymnasium's ``RecordVideo``;
``pip install 'flowrl[video]'``). CHECKPOINT is a checkpoint, a directory of them
(the latest), a run directory or a Ray Tune trial's
(:func:`flowrl.checkpoint.resolve_checkpoint`).

``flowrl export CHECKPOINT --format torchscript|onnx -o FILE [--policy-id ID]``
writes the checkpoint's policy model as a file that serves without flowrl
(:mod:`flowrl.export`): observations in, the action distribution's inputs and
the value out; ONNX needs ``pip install 'flowrl[export]'``.

``flowrl tune --config SWEEP.yaml [--set key=value ...] [--resume]`` runs a
hyperparameter sweep on Ray Tune (:mod:`flowrl.sweep`: the spec is checked whole
before any trial starts) and prints the best trial and any failed trial's reason;
it exits 1 when a trial failed.

``flowrl plan ALGO [--env ENV] [--format dot|svg|png] [-o FILE]`` writes the
algorithm's plan as DOT text or, through Graphviz, SVG/PNG, to FILE or (without
``-o``) to stdout, byte for byte (``flowrl plan ppo --format svg > ppo.svg``).
Without ``--env`` it builds the algorithm on its ``example_env`` (CartPole-v1;
Pendulum-v1 for DDPG, TD3 and Ape-X DDPG), on the local backend unless ``--set
backend=ray`` (DD-PPO's plan needs it).

Exit codes: 0 done (stop criterion reached), 1 a run-time failure (its message
is printed), 2 bad input (unknown algorithm or env, bad option, unusable
checkpoint), 130 interrupted (Ctrl-C: a final checkpoint is written first; a
second Ctrl-C stops at once), 143 terminated (SIGTERM, as schedulers and ``kill``
send it: handled as Ctrl-C is).

>>> main(["train", "nope", "--env", "CartPole-v1"])
2
"""

from __future__ import annotations

import argparse
import datetime
import logging
import math
import os
import signal
import sys
import time
from typing import Any, Sequence

from flowrl.errors import ConfigError, FlowError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED, EXIT_TERMINATED = 0, 1, 2, 130, 143
#: Where ``flowrl train`` puts new run directories unless ``--run-dir`` says otherwise.
DEFAULT_RUN_DIR = "runs"
log = logging.getLogger("flowrl.cli")


def check_env(env: str, where: str) -> None:
    from flowrl.algorithms.validators import check_env as check
    check(env, where)


def _algorithms() -> dict[str, Any]:
    from flowrl.algorithms import ALGORITHMS
    return ALGORITHMS


def _int_at_least(lo: int):
    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not an int") from None
        if value < lo:
            raise argparse.ArgumentTypeError(f"{value} is not >= {lo}")
        return value
    parse.__name__ = f"int >= {lo}"
    return parse


def _number(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number") from None
    if math.isnan(value):
        raise argparse.ArgumentTypeError("nan is not a reward bound")
    return value


def _stop_bound(key: str):
    def parse(text: str) -> int | float:
        from flowrl.experiment import check_stop
        try:
            return check_stop(key, text, key)
        except ConfigError as e:
            raise argparse.ArgumentTypeError(str(e)) from None
    parse.__name__ = key
    return parse


def _path(text: str) -> str:
    if "\x00" in text:
        raise argparse.ArgumentTypeError(f"{text!r} holds a NUL character; give a file path")
    return text


CHECKPOINT_HELP = ("checkpoint, a directory of checkpoints (its latest), a run directory, or "
                   "a Ray Tune trial's checkpoint or trial directory")


def _module(text: str) -> str:
    from flowrl.user_code import is_module_name
    if not is_module_name(text):
        raise argparse.ArgumentTypeError(f"{text!r} is not a module name; give a dotted "
                                         "module name such as my_envs or pkg.envs")
    return text


def _add_import(parser: argparse.ArgumentParser, workers: bool) -> None:
    also = (" Rollout workers (and Tune trials) import it too (config field imports)."
            if workers else "")
    parser.add_argument("--import", dest="imports", action="append", default=[],
                        type=_module, metavar="MODULE",
                        help="import MODULE before anything is built (repeatable): a module "
                        "that registers envs (gymnasium.register) or models "
                        "(flowrl.models.register_model). It must be installed, on PYTHONPATH "
                        "or in the current directory." + also)


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flowrl", description="Distributed RL training loops "
                                "as dataflow plans.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train an algorithm on an env")
    t.add_argument("algo", nargs="?", default=None,
                   help="algorithm: " + ", ".join(sorted(_algorithms())) +
                   " (or 'algo:' in --config)")
    t.add_argument("--env", default=None, help="gymnasium env id, e.g. CartPole-v1")
    t.add_argument("--config", type=_path, default=None, metavar="FILE.yaml",
                   help="experiment spec: algo, env, stop, config (see tuned_examples/)")
    t.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="override a config field (value parsed as YAML); repeatable")
    t.add_argument("--num-workers", type=_int_at_least(0), default=None,
                   help="remote rollout workers")
    t.add_argument("--backend", choices=["local", "ray"], default=None)
    t.add_argument("--stop-reward", type=_number, default=None,
                   help="stop when episode_reward_mean >= R (default: the env's threshold)")
    t.add_argument("--stop-timesteps", type=_stop_bound("timesteps_total"), default=None,
                   metavar="N", help="stop when timesteps_total >= N (1e6 works)")
    t.add_argument("--stop-iters", type=_int_at_least(1), default=None)
    t.add_argument("--stop-time", type=_stop_bound("time_total_s"), default=None,
                   metavar="SECONDS", help="stop when the run has trained this long "
                   "(time_total_s, which a restored run continues)")
    t.add_argument("--checkpoint-dir", type=_path, default=None, help="where checkpoints go "
                   "(default: <run dir>/checkpoint)")
    t.add_argument("--checkpoint-freq", type=_int_at_least(0), default=0, metavar="N",
                   help="also checkpoint every N iterations (0: only at the end)")
    t.add_argument("--keep-checkpoints", type=_int_at_least(1), default=None, metavar="K",
                   help="keep only the newest K checkpoints (default: all)")
    t.add_argument("--restore", type=_path, default=None,
                   help="what to continue from: " + CHECKPOINT_HELP)
    t.add_argument("--restore-allow-pickle", action="store_true",
                   help="let --restore load the checkpoint's user_state.pkl (pickled "
                   "extra state); unpickling can run any code: only for checkpoints you trust")
    t.add_argument("--run-dir", type=_path, default=None,
                   help=f"parent of a new run directory (default: {DEFAULT_RUN_DIR}); a "
                   "--restore of a checkpoint inside a run directory appends to that run "
                   "unless --run-dir is given")
    t.add_argument("--seed", type=int, default=None)
    t.add_argument("--eval-interval", type=_int_at_least(1), default=None, metavar="N",
                   help="evaluate every N iterations (evaluation_interval; episodes: "
                   "--set evaluation_duration=K, default 10)")
    t.add_argument("--no-tensorboard", action="store_true", help="no TensorBoard event files")
    t.add_argument("--quiet", action="store_true", help="no live display")
    _add_import(t, workers=True)
    e = sub.add_parser("evaluate", help="play episodes with a checkpoint's policy")
    e.add_argument("checkpoint", type=_path, help=CHECKPOINT_HELP)
    e.add_argument("--allow-pickle", action="store_true",
                   help="load the checkpoint's user_state.pkl (say, a config with an env "
                   "creator function); unpickling can run any code: only for checkpoints "
                   "you trust")
    e.add_argument("--episodes", type=_int_at_least(1), default=10)
    e.add_argument("--seed", type=int, default=None)
    e.add_argument("--explore", action="store_true",
                   help="sample actions instead of taking the most likely one")
    e.add_argument("--video", type=_path, default=None, metavar="DIR",
                   help="record every episode as an MP4 in DIR (needs moviepy: pip install "
                   "'flowrl[video]')")
    _add_import(e, workers=False)
    x = sub.add_parser("export", help="write a checkpoint's policy model as TorchScript or ONNX")
    x.add_argument("checkpoint", type=_path, help=CHECKPOINT_HELP)
    x.add_argument("--format", choices=["torchscript", "onnx"], required=True,
                   help="torchscript: torch.jit.load serves it; onnx: onnxruntime does "
                   "(needs pip install 'flowrl[export]')")
    x.add_argument("-o", "--output", type=_path, required=True, metavar="FILE",
                   help="file to write (e.g. policy.pt, policy.onnx)")
    x.add_argument("--policy-id", default="default_policy", metavar="ID",
                   help="which policy of a multi-agent checkpoint (default: default_policy)")
    x.add_argument("--allow-pickle", action="store_true",
                   help="load the checkpoint's user_state.pkl; only for checkpoints you trust")
    _add_import(x, workers=False)
    tu = sub.add_parser("tune", help="run a hyperparameter sweep on Ray Tune")
    tu.add_argument("--config", type=_path, required=True, metavar="SWEEP.yaml",
                    help="sweep spec: algo, env, config (with grid_search/choice/uniform/"
                    "loguniform values), stop, num_samples, scheduler, ... (see "
                    "examples/tune_sweep.yaml)")
    tu.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="override a sweep key (num_samples=2, stop.timesteps_total=1000) or "
                    "a config field (lr={choice: [0.001, 0.01]}); repeatable")
    tu.add_argument("--resume", action="store_true",
                    help="continue the experiment <storage_path>/<name> if it exists "
                    "(resume: true)")
    tu.add_argument("--quiet", action="store_true", help="no Tune progress table")
    _add_import(tu, workers=True)
    pl = sub.add_parser("plan", help="write an algorithm's plan as DOT/SVG/PNG")
    pl.add_argument("algo", help="algorithm: " + ", ".join(sorted(_algorithms())))
    pl.add_argument("--env", default=None,
                    help="gymnasium env id (default: CartPole-v1, or Pendulum-v1 for "
                    "algorithms with continuous actions only)")
    pl.add_argument("--num-workers", type=_int_at_least(0), default=2)
    pl.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                    help="config override, e.g. --set num_aggregation_workers=1 (repeatable)")
    pl.add_argument("--format", choices=["dot", "svg", "png"], default=None,
                    help="default: from -o's suffix, else dot")
    pl.add_argument("-o", "--output", type=_path, default=None,
                    help="file to write (default: stdout; a PNG only when it is not a terminal)")
    _add_import(pl, workers=False)
    return p


def _import_user_modules(modules: Sequence[str]) -> None:
    """Let modules in the current directory be imported, as ``python -m`` does (after
    every other entry of ``sys.path``, so they never shadow installed packages; Ray
    workers started here look there too), then import ``--import``'s modules."""
    from flowrl.user_code import import_modules
    if os.getcwd() not in sys.path and "" not in sys.path:
        sys.path.append(os.getcwd())
    import_modules(modules, "--import")


def _with_imports(config: dict[str, Any], modules: Sequence[str]) -> None:
    """Add ``--import``'s modules to ``config``'s field ``imports`` (after those it
    lists), so that rollout workers and Tune trials import them too."""
    listed = config.get("imports") or []
    if modules and isinstance(listed, (list, tuple)):
        config["imports"] = [*listed, *(m for m in modules if m not in listed)]


def _error(msg: str, code: int) -> int:
    first = str(msg).strip().splitlines()[0] if str(msg).strip() else type(msg).__name__
    print(f"flowrl: error: {first if code == EXIT_USAGE else str(msg)}", file=sys.stderr)
    return code


def _algo_class(name: str):
    from flowrl.experiment import algorithm_class
    return algorithm_class(name)


def _default_stop_reward(env: Any) -> float | None:
    from flowrl.algorithms.validators import gym_spec
    if not isinstance(env, str):
        return None
    try:
        return gym_spec(env).reward_threshold
    except Exception:  # unknown ids are reported by the config check
        return None


def _fmt(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1f}"


def _is_terminal(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


class _Progress:
    """What ``flowrl train`` shows after each iteration: nothing when ``quiet``; on a
    terminal a rich table refreshed in place; otherwise (a log file, nohup, Slurm)
    a title line and then one plain line per iteration, flushed at once:
    ``iter 3 | timesteps 600 | mean return 24.1 | episodes 25 | steps/s ... |
    time (s) ...``. With ``evaluation`` both also show the last evaluation's mean
    return and iteration."""

    def __init__(self, title: str, quiet: bool, evaluation: bool = False):
        self.title, self.evaluation = title, evaluation
        self.lines = not quiet and not _is_terminal(sys.stdout)
        self.table = not quiet and not self.lines
        self.live = None
        self._last_eval: tuple[int, float] | None = None

    def __enter__(self):
        if self.table:
            from rich.live import Live
            self.live = Live(self._table(None), refresh_per_second=4, transient=False)
            self.live.__enter__()
        elif self.lines:
            print(self.title, flush=True)
        return self

    def _cells(self, r: dict, steps_per_s: float) -> dict[str, str]:
        if "evaluation" in r:
            self._last_eval = (r["training_iteration"], r["evaluation"]["episode_reward_mean"])
        cells = {"iter": str(r["training_iteration"]), "timesteps": str(r["timesteps_total"]),
                 "mean return": _fmt(r["episode_reward_mean"]),
                 "episodes": str(r["episodes_total"]), "steps/s": f"{steps_per_s:,.0f}",
                 "time (s)": f"{r['time_total_s']:.1f}"}
        if self.evaluation:
            it, mean = self._last_eval or (None, None)
            cells.update({"eval return": _fmt(mean), "eval iter": "-" if it is None else str(it)})
        return cells

    def _table(self, cells: dict[str, str] | None):
        from rich.table import Table
        t = Table(title=self.title)
        cols = ["iter", "timesteps", "mean return", "episodes", "steps/s", "time (s)"]
        if self.evaluation:
            cols += ["eval return", "eval iter"]
        for col in cols:
            t.add_column(col, justify="right")
        if cells is not None:
            t.add_row(*cells.values())
        return t

    def update(self, r: dict, steps_per_s: float) -> None:
        if self.table:
            self.live.update(self._table(self._cells(r, steps_per_s)))
        elif self.lines:
            cells = self._cells(r, steps_per_s)
            print(" | ".join(f"{name} {value}" for name, value in cells.items()), flush=True)

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)


class _Interrupts:
    """SIGINT (Ctrl-C) or SIGTERM (what schedulers, ``kill`` and ``timeout`` send) while
    training: the first sets ``requested`` to the signal's number, and the loop writes
    its final checkpoint after the current iteration and exits 130 (SIGINT) or 143
    (SIGTERM); a second signal raises KeyboardInterrupt (a stop at once)."""

    SIGNALS = {signal.SIGINT: ("interrupted", EXIT_INTERRUPTED),
               signal.SIGTERM: ("terminated (SIGTERM)", EXIT_TERMINATED)}

    def __init__(self):
        self.requested: int | None = None
        self._previous: dict[int, object] = {}

    def _handle(self, signum, frame):
        if self.requested is not None:
            raise KeyboardInterrupt
        self.requested = signum

    @property
    def outcome(self) -> tuple[int, str]:
        """``(exit code, stop reason)`` for the signal that was received."""
        reason, code = self.SIGNALS[self.requested]
        return code, reason

    def __enter__(self):
        for signum in self.SIGNALS:
            try:
                self._previous[signum] = signal.signal(signum, self._handle)
            except ValueError:  # not the main thread: the signals keep their handlers
                break
        return self

    def __exit__(self, *exc):
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)


class _Checkpointer:
    """Numbered checkpoints in one directory: periodic ones that may be skipped
    (counted, each reason logged once) and a final one that must succeed."""

    def __init__(self, algo, directory: str, freq: int, keep: int | None):
        self.algo, self.directory, self.freq, self.keep = algo, directory, freq, keep
        self.skipped = 0
        self.last_path: str | None = None
        self.last_iteration: int | None = None
        self._reasons: set[str] = set()

    def _save(self, iteration: int) -> str:
        from flowrl import checkpoint
        path = self.algo.save(os.path.join(self.directory, checkpoint.checkpoint_name(iteration)))
        self.last_path, self.last_iteration = os.path.dirname(path), iteration
        if self.keep is not None:
            checkpoint.prune_checkpoints(self.directory, self.keep)
        return path

    def periodic(self, iteration: int) -> None:
        if not self.freq or iteration % self.freq:
            return
        try:
            self._save(iteration)
        except (FlowError, OSError) as e:
            self.skipped += 1
            reason = str(e).splitlines()[0]
            from flowrl.checkpoint import checkpoint_name
            target = os.path.abspath(os.path.join(self.directory, checkpoint_name(iteration)))
            key = reason.replace(target, "<checkpoint>")   # the same cause at every iteration
            if key not in self._reasons:
                self._reasons.add(key)
                log.warning("checkpoint at iteration %d skipped (later skips for the same "
                            "reason are only counted): %s", iteration, reason)

    def final(self, iteration: int) -> str | None:
        if iteration == self.last_iteration:
            return self.last_path
        self._save(iteration)
        return self.last_path


def _read_restore(args: argparse.Namespace) -> dict[str, Any]:
    """The checkpoint ``--restore`` names, read before anything is built or written
    (a corrupt newest checkpoint of a directory gives way to an older one)."""
    from flowrl import checkpoint
    try:
        return checkpoint.read_checkpoint(args.restore, allow_pickle=args.restore_allow_pickle)
    except ConfigError as e:
        raise ConfigError(f"--restore: {e}") from None


def _restored_spec(args: argparse.Namespace, restored: dict[str, Any]) -> dict[str, Any] | None:
    """``{"algo", "env", "config"}`` of the checkpoint ``--restore`` read, what the
    command line then overrides; None when its config cannot be rebuilt (not saved,
    or pickled without ``--restore-allow-pickle``) and the command line names the
    algorithm and the env itself, which then start from the defaults."""
    from flowrl.checkpoint import saved_config
    from flowrl.experiment import algorithm_class
    where = f"--restore {args.restore!r}"
    try:
        saved_config(algorithm_class(restored.get("algorithm")), restored, where)  # checked
    except ConfigError as e:
        if args.algo is not None and (args.env is not None or args.config is not None):
            log.info("%s; building the config from the command line", e)
            return None
        raise ConfigError(f"{e}; or give the algorithm and the env on the command line "
                          "(flowrl train ALGO --env ENV --restore ...)") from None
    fields = dict(restored["config"])
    return {"algo": restored["algorithm"], "env": fields.pop("env", None), "config": fields}


def _atari_defaults(args: argparse.Namespace) -> tuple[dict[str, Any] | None, str | None]:
    """``(base, notice)`` for ``flowrl train ALGO --env ALE/...`` (or ``--set
    env=ALE/...``) without ``--config``: the tuned Pong example of ALGO as the layer
    beneath the command line (:func:`flowrl.experiment.atari_defaults`) and the line
    that says so; for an algorithm without one, no base and a line saying its
    defaults are not tuned for Atari; ``(None, None)`` for other envs."""
    from flowrl.envs.atari import is_atari_id
    from flowrl.experiment import (algorithm_class, atari_defaults, parse_override,
                                   tuned_examples_dir)
    env = args.env
    if env is None:
        env = next((v for k, v in reversed([parse_override(t) for t in args.set])
                    if k == "env"), None)
    if args.algo is None or not is_atari_id(env):
        return None, None
    name = algorithm_class(args.algo).name
    found = atari_defaults(name)
    if found is None:
        return None, (f"{env}: {name} has no tuned Atari example ({name}-pong.yaml in "
                      f"{_shown_path(tuned_examples_dir())}), so its defaults, which are not "
                      "tuned for Atari, apply; --config FILE.yaml or --set KEY=VALUE to "
                      "change them")
    path, config = found
    return ({"algo": name, "env": None, "config": config},
            f"{env}: using the Atari defaults of {_shown_path(path)} (its config block); "
            "--set KEY=VALUE changes one, --config FILE.yaml replaces them")


def _shown_path(path: Any) -> str:
    """``path`` relative to the current directory when it lies below it, else absolute."""
    relative = os.path.relpath(path)
    return relative if not relative.startswith(os.pardir) else os.path.abspath(path)


def _train_spec(args: argparse.Namespace, base: dict[str, Any] | None = None) -> dict[str, Any]:
    """The experiment spec from ``base`` (a restored checkpoint's algo, env and
    config, or the Atari defaults), overridden in turn by --config (its algo, env,
    stop and each config field it sets), the positional/flag values and --set
    (``--set model.x=...`` changes one key of the model the layers below gave)."""
    from flowrl.experiment import apply_overrides, check_spec, load_spec
    spec = load_spec(args.config) if args.config else check_spec({})
    if base is not None:
        spec["algo"] = spec["algo"] if spec["algo"] is not None else base["algo"]
        spec["config"] = {**base["config"], **spec["config"]}
    if args.algo is not None:
        spec["algo"] = args.algo
    if args.env is not None:
        spec["env"] = args.env
    for name, value in (("num_workers", args.num_workers), ("backend", args.backend),
                        ("seed", args.seed), ("evaluation_interval", args.eval_interval)):
        if value is not None:
            spec["config"][name] = value
    spec = apply_overrides(spec, args.set)
    _with_imports(spec["config"], args.imports)
    if spec["algo"] is None:
        raise ConfigError("give the algorithm: flowrl train ALGO, 'algo:' in --config, or "
                          "--restore CHECKPOINT to continue one")
    if spec["env"] is None:
        spec["env"] = spec["config"].pop("env", None)
    if spec["env"] is None and base is not None:
        spec["env"] = base["env"]
    if spec["env"] is None:
        raise ConfigError("give the env: --env ENV, 'env:' in --config, or --restore "
                          "CHECKPOINT to continue one")
    stop = spec["stop"]
    for flag, key in (("stop_reward", "episode_reward_mean"),
                      ("stop_timesteps", "timesteps_total"), ("stop_iters", "training_iteration"),
                      ("stop_time", "time_total_s")):
        if getattr(args, flag) is not None:
            stop[key] = getattr(args, flag)
    return spec


def _layered_spec(args: argparse.Namespace,
                  restored: dict[str, Any] | None) -> tuple[dict[str, Any], str | None]:
    """``(spec, notice)``: what ``flowrl train`` trains, the command line over the
    restored checkpoint's spec or, without ``--restore`` and ``--config``, over an
    ALE env's Atari defaults; ``notice`` is the line saying where those came from."""
    base = _restored_spec(args, restored) if restored is not None else None
    notice = None
    if base is None and args.config is None:
        base, notice = _atari_defaults(args)
    return _train_spec(args, base), notice


def train(args: argparse.Namespace) -> int:
    from flowrl.experiment import algorithm_class, make_config
    from flowrl.loggers import ResultLogger
    restored = _read_restore(args) if args.restore else None
    spec, notice = _layered_spec(args, restored)
    if notice is not None:
        print(notice, file=sys.stderr, flush=True)
    cls = algorithm_class(spec["algo"])
    if restored is not None and restored.get("algorithm") != cls.name:
        raise ConfigError(f"--restore {args.restore!r}: the checkpoint is from "
                          f"{restored.get('algorithm')!r}, not {cls.name!r}")
    if "env" in spec["config"]:
        raise ConfigError("give the env once: 'env:' at the top of the spec or --env, "
                          "not in config")
    config = make_config(cls, {"env": spec["env"], **spec["config"]})
    stop = spec["stop"]
    if "episode_reward_mean" not in stop:
        threshold = _default_stop_reward(config.env)
        if threshold is not None:
            stop["episode_reward_mean"] = threshold
    if not stop:
        raise ConfigError(f"env {config.env!r} has no reward threshold; give --stop-reward, "
                          "--stop-timesteps, --stop-iters or --stop-time")
    algo = cls(config)
    try:
        if restored is not None:
            algo.restore_state(restored, f"--restore {args.restore!r}")  # read once, above
        return _train_loop(args, algo, stop, ResultLogger, restored)
    finally:
        algo.stop()


def _run_directory(args: argparse.Namespace, algo: Any,
                   restored: dict[str, Any] | None) -> tuple[str, bool]:
    """``(run directory, resumed)``: the run directory the restored checkpoint was
    written into, to go on appending to (unless ``--run-dir`` asks for a new one
    elsewhere), else a new ``<run-dir>/<algo>-<env>-<time>``."""
    from flowrl import checkpoint
    from flowrl.experiment import run_name
    if restored is not None and args.run_dir is None:
        owner = checkpoint.run_directory(restored["path"])
        if owner is not None:
            return owner, True
    parent = args.run_dir if args.run_dir is not None else DEFAULT_RUN_DIR
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    name = f"{run_name(algo.name, algo.config.env)}-{stamp}"
    run_dir = os.path.join(parent, name)
    n = 1
    while os.path.exists(run_dir):
        n += 1
        run_dir = os.path.join(parent, f"{name}_{n}")
    return run_dir, False


def _train_loop(args, algo, stop: dict[str, Any], logger_cls,
                restored: dict[str, Any] | None = None) -> int:
    from flowrl.experiment import reward_reached
    run_dir, resumed = _run_directory(args, algo, restored)
    title = f"flowrl {algo.name} {algo.config.env}"
    if resumed:
        title += (f", resumed at iteration {algo.metrics.counters.get('training_iteration', 0)} "
                  f"in {run_dir}")
    ckpt = _Checkpointer(algo, args.checkpoint_dir or os.path.join(run_dir, "checkpoint"),
                         args.checkpoint_freq, args.keep_checkpoints)
    code, reason = EXIT_OK, ""
    iteration = None
    start = time.perf_counter()
    steps_at_start = algo.metrics.counters.get("num_steps_sampled", 0)
    with logger_cls(run_dir, tensorboard=not args.no_tensorboard) as results, \
            _Interrupts() as interrupts, \
            _Progress(title, args.quiet,
                      evaluation=algo.config.evaluation_interval is not None) as progress:
        while True:
            if interrupts.requested is not None:
                code, reason = interrupts.outcome
                break
            r = algo.train()
            iteration = r["training_iteration"]
            ckpt.periodic(iteration)
            r["num_checkpoints_skipped"] = ckpt.skipped
            elapsed = time.perf_counter() - start
            rate = (r["timesteps_total"] - steps_at_start) / max(elapsed, 1e-9)
            results.log(r)
            progress.update(r, rate)
            reason = reward_reached(r, stop) or ""
            for key in ("timesteps_total", "training_iteration", "time_total_s"):
                if not reason and key in stop and r[key] >= stop[key]:
                    value = f"{r[key]:.1f}" if isinstance(r[key], float) else r[key]
                    reason = f"{key} {value} >= {stop[key]}"
            if reason:
                break
        path = ckpt.final(iteration) if iteration is not None else None
    where = path if path else "none (no iteration finished)"
    last = (f"mean return {_fmt(r['episode_reward_mean'])} at iteration {iteration}"
            if iteration is not None else "no iteration finished")
    print(f"{chr(10) if progress.table else ''}stopped: {reason}; {last}; results "
          f"{os.path.join(run_dir, 'result.jsonl')}; checkpoint {where}", flush=True)
    return code


def evaluate(args: argparse.Namespace) -> int:
    from flowrl.evaluation import evaluate_policy, import_moviepy, load_for_evaluation
    if args.video is not None:  # before the checkpoint is loaded
        import_moviepy(f"--video {args.video}")
    algo = load_for_evaluation(args.checkpoint, allow_pickle=args.allow_pickle)
    try:
        r = evaluate_policy(algo, args.episodes, seed=args.seed, explore=args.explore,
                            video_dir=args.video)
    finally:
        algo.stop()
    print(f"{algo.name} {algo.config.env}: {args.episodes} episodes, mean return "
          f"{r['mean']:.2f} +- {r['std']:.2f} (std; min {r['min']:.1f}, max {r['max']:.1f}, "
          f"mean length {sum(r['lengths']) / len(r['lengths']):.1f})")
    if args.video is not None:
        print(f"videos in {args.video}")
    return EXIT_OK


def export(args: argparse.Namespace) -> int:
    from flowrl.evaluation import load_for_evaluation
    from flowrl.export import EXPORTERS, import_onnx
    if args.format == "onnx":  # before the checkpoint is loaded
        import_onnx("--format onnx")
    loaded = load_for_evaluation(args.checkpoint, allow_pickle=args.allow_pickle)
    try:
        path = EXPORTERS[args.format](loaded.get_policy(args.policy_id), args.output)
    finally:
        loaded.stop()
    print(f"wrote {path} ({args.format}: {loaded.name} policy {args.policy_id!r} of "
          f"{loaded.config.env})")
    return EXIT_OK


def tune(args: argparse.Namespace) -> int:
    from flowrl.sweep import load_sweep, run_sweep, summary
    spec = load_sweep(args.config, args.set + (["resume=true"] if args.resume else []))
    _with_imports(spec["config"], args.imports)
    grid, resumed = run_sweep(spec, verbose=0 if args.quiet else 1)
    text, failed = summary(grid, spec)
    print(("resumed " if resumed else "") + text)
    return EXIT_FAILED if failed else EXIT_OK


def plan(args: argparse.Namespace) -> int:
    cls = _algo_class(args.algo)
    env = args.env if args.env is not None else cls.example_env
    check_env(env, "--env")
    fmt = args.format
    if fmt is None:
        suffix = os.path.splitext(args.output or "")[1].lstrip(".").lower()
        fmt = suffix if suffix in ("svg", "png") else "dot"
    if fmt == "png" and not args.output and _is_terminal(sys.stdout):
        raise ConfigError("--format png without -o writes the image's bytes to stdout, which "
                          "is a terminal here; give -o FILE.png or redirect stdout "
                          "(flowrl plan ALGO --format png > plan.png)")
    from flowrl.experiment import apply_overrides, check_spec, make_config
    spec = apply_overrides(check_spec({"config": {"num_workers": args.num_workers}}), args.set)
    _with_imports(spec["config"], args.imports)
    # local unless --set backend=ray (DD-PPO's plan needs Ray's worker processes)
    fields = {"env": env, "backend": "local", **spec["config"]}
    algo = cls(make_config(cls, fields))
    try:
        if fmt == "dot":
            text = algo.plan.to_dot()
            if args.output:
                with open(args.output, "w") as f:
                    f.write(text)
            else:
                sys.stdout.write(text)
        elif args.output:
            path = args.output
            if not path.lower().endswith("." + fmt):
                path += "." + fmt
            algo.plan.render(path)
        else:
            _write_binary_stdout(algo.plan.to_image(fmt), f"--format {fmt}")
    finally:
        algo.stop()
    if args.output:
        print(f"wrote {args.output}", file=sys.stderr)
    return EXIT_OK


def _write_binary_stdout(data: bytes, what: str) -> None:
    """Write ``data`` to stdout as it is (no newline or encoding changes), after any
    text already written there."""
    sys.stdout.flush()
    binary = getattr(sys.stdout, "buffer", None)
    if binary is None:  # stdout replaced by a text-only stream
        raise ConfigError(f"{what}: stdout here takes text only, not an image's bytes; "
                          "give -o FILE")
    binary.write(data)
    binary.flush()


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flowrl`` command; returns the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed the usage error
        return int(e.code or 0)
    try:
        _import_user_modules(args.imports)
        return {"train": train, "evaluate": evaluate, "export": export, "plan": plan,
                "tune": tune}[args.command](args)
    except ConfigError as e:
        return _error(str(e), EXIT_USAGE)
    except FlowError as e:
        return _error(str(e), EXIT_FAILED)
    except OSError as e:  # a run directory or output file that cannot be written
        where = f"{e.filename}: " if e.filename else ""
        return _error(f"cannot write {where}{e.strerror or e}", EXIT_FAILED)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
