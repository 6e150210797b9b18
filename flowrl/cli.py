"""The ``flowrl`` command: ``flowrl train`` and ``flowrl plan``.

``flowrl train ALGO --env ENV`` trains with a live progress display (rich) until a
stop criterion holds: ``--stop-reward`` (default: the env's registered reward
threshold, e.g. 475 for CartPole-v1), ``--stop-timesteps``, ``--stop-iters``
(the first one reached stops). Each run writes ``<run-dir>/<algo>-<env>-<time>/``
with ``result.jsonl`` (one result per iteration) and ``checkpoint/`` (written at
the end, also on Ctrl-C; or under ``--checkpoint-dir``).
``--restore CKPT`` continues a checkpoint (weights, optimizer, counters).

``flowrl plan ALGO [--env ENV] [--format dot|svg|png] [-o FILE]`` writes the
algorithm's plan as DOT text (stdout without ``-o``) or, through Graphviz, SVG/PNG.

Exit codes: 0 done (stop criterion reached), 1 a run-time failure (its message
is printed), 2 bad input (unknown algorithm or env, bad option), 130 interrupted.

>>> main(["train", "nope", "--env", "CartPole-v1"])
2
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import sys
import time
from typing import Any, Sequence

from flowrl.errors import ConfigError, FlowError

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130


def check_env(env: str, where: str) -> None:
    from flowrl.algorithms.base import check_env as check
    check(env, where)


def _algorithms() -> dict[str, Any]:
    from flowrl.algorithms import ALGORITHMS
    return ALGORITHMS


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="flowrl", description="Distributed RL training loops "
                                "as dataflow plans.")
    sub = p.add_subparsers(dest="command", required=True)
    t = sub.add_parser("train", help="train an algorithm on an env")
    t.add_argument("algo", help="algorithm: " + ", ".join(sorted(_algorithms())))
    t.add_argument("--env", required=True, help="gymnasium env id, e.g. CartPole-v1")
    t.add_argument("--num-workers", type=int, default=None, help="remote rollout workers")
    t.add_argument("--backend", choices=["local", "ray"], default="local")
    t.add_argument("--stop-reward", type=float, default=None,
                   help="stop when episode_reward_mean >= R (default: the env's threshold)")
    t.add_argument("--stop-timesteps", type=int, default=None)
    t.add_argument("--stop-iters", type=int, default=None)
    t.add_argument("--checkpoint-dir", default=None, help="where the final checkpoint goes "
                   "(default: <run dir>/checkpoint)")
    t.add_argument("--restore", default=None, help="checkpoint to continue from")
    t.add_argument("--run-dir", default="runs", help="parent of the run directory")
    t.add_argument("--seed", type=int, default=None)
    t.add_argument("--quiet", action="store_true", help="no live display")
    pl = sub.add_parser("plan", help="write an algorithm's plan as DOT/SVG/PNG")
    pl.add_argument("algo", help="algorithm: " + ", ".join(sorted(_algorithms())))
    pl.add_argument("--env", default="CartPole-v1")
    pl.add_argument("--num-workers", type=int, default=2)
    pl.add_argument("--format", choices=["dot", "svg", "png"], default=None,
                    help="default: from -o's suffix, else dot")
    pl.add_argument("-o", "--output", default=None, help="file to write (default: stdout)")
    return p


def _error(msg: str, code: int) -> int:
    print(f"flowrl: error: {msg}", file=sys.stderr)
    return code


def _algo_class(name: str):
    algos = _algorithms()
    cls = algos.get(name.lower())
    if cls is None:
        raise ConfigError(f"unknown algorithm {name!r}; choose one of {sorted(algos)}")
    return cls


def _build(cls, overrides: dict[str, Any]):
    fields = {k: v for k, v in overrides.items() if v is not None}
    return cls(cls.config_class(**fields))


def _default_stop_reward(env: str) -> float | None:
    import gymnasium as gym
    try:
        return gym.spec(env).reward_threshold
    except Exception:  # unknown ids are reported by the config check
        return None


def _fmt(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.1f}"


def _jsonable(x: Any) -> Any:
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if isinstance(x, float) and math.isnan(x):
        return None
    if hasattr(x, "item"):
        return x.item()
    return x


class _Progress:
    """The live display: a rich table refreshed after every iteration."""

    def __init__(self, title: str, quiet: bool):
        self.title, self.quiet = title, quiet
        self.live = None

    def __enter__(self):
        if not self.quiet:
            from rich.live import Live
            self.live = Live(self._table(None), refresh_per_second=4, transient=False)
            self.live.__enter__()
        return self

    def _table(self, r: dict | None, steps_per_s: float = 0.0):
        from rich.table import Table
        t = Table(title=self.title)
        for col in ("iter", "timesteps", "mean return", "episodes", "steps/s", "time (s)"):
            t.add_column(col, justify="right")
        if r is not None:
            t.add_row(str(r["training_iteration"]), str(r["timesteps_total"]),
                      _fmt(r["episode_reward_mean"]), str(r["episodes_total"]),
                      f"{steps_per_s:,.0f}", f"{r['time_total_s']:.1f}")
        return t

    def update(self, r: dict, steps_per_s: float) -> None:
        if self.live is not None:
            self.live.update(self._table(r, steps_per_s))

    def __exit__(self, *exc):
        if self.live is not None:
            self.live.__exit__(*exc)


def train(args: argparse.Namespace) -> int:
    cls = _algo_class(args.algo)
    check_env(args.env, "--env")
    stop_reward = args.stop_reward if args.stop_reward is not None else \
        _default_stop_reward(args.env)
    if stop_reward is None and args.stop_timesteps is None and args.stop_iters is None:
        raise ConfigError(f"env {args.env!r} has no reward threshold; give --stop-reward, "
                          "--stop-timesteps or --stop-iters")
    algo = _build(cls, {"env": args.env, "num_workers": args.num_workers,
                        "backend": args.backend, "seed": args.seed})
    stamp = datetime.datetime.now().strftime("%Y%m%d-%H%M%S")
    env_name = args.env.replace("/", "_")
    run_dir = os.path.join(args.run_dir, f"{cls.name}-{env_name}-{stamp}")
    os.makedirs(run_dir, exist_ok=True)
    ckpt_dir = args.checkpoint_dir or os.path.join(run_dir, "checkpoint")
    code, reason = EXIT_OK, ""
    try:
        if args.restore:
            algo.restore(args.restore)
        start = time.perf_counter()
        steps_at_start = algo.metrics.counters.get("num_steps_sampled", 0)
        with open(os.path.join(run_dir, "result.jsonl"), "a") as log, \
                _Progress(f"flowrl {cls.name} {args.env}", args.quiet) as progress:
            while True:
                r = algo.train()
                elapsed = time.perf_counter() - start
                rate = (r["timesteps_total"] - steps_at_start) / max(elapsed, 1e-9)
                log.write(json.dumps(_jsonable(r)) + "\n")
                log.flush()
                progress.update(r, rate)
                mean = r["episode_reward_mean"]
                if stop_reward is not None and not math.isnan(mean) and mean >= stop_reward:
                    reason = f"episode_reward_mean {mean:.1f} >= {stop_reward}"
                elif args.stop_timesteps is not None and r["timesteps_total"] >= args.stop_timesteps:
                    reason = f"timesteps_total {r['timesteps_total']} >= {args.stop_timesteps}"
                elif args.stop_iters is not None and r["training_iteration"] >= args.stop_iters:
                    reason = f"training_iteration {r['training_iteration']} >= {args.stop_iters}"
                if reason:
                    break
    except KeyboardInterrupt:
        code, reason = EXIT_INTERRUPTED, "interrupted"
    finally:
        try:
            path = algo.save(ckpt_dir)
        finally:
            algo.stop()
    print(f"{'' if args.quiet else chr(10)}stopped: {reason}; results {os.path.join(run_dir, 'result.jsonl')}; "
          f"checkpoint {path}")
    return code


def plan(args: argparse.Namespace) -> int:
    cls = _algo_class(args.algo)
    check_env(args.env, "--env")
    fmt = args.format
    if fmt is None:
        suffix = os.path.splitext(args.output or "")[1].lstrip(".").lower()
        fmt = suffix if suffix in ("svg", "png") else "dot"
    if fmt != "dot" and not args.output:
        raise ConfigError(f"--format {fmt} needs -o FILE")
    algo = _build(cls, {"env": args.env, "num_workers": args.num_workers, "backend": "local"})
    try:
        if fmt == "dot":
            text = algo.plan.to_dot()
            if args.output:
                with open(args.output, "w") as f:
                    f.write(text)
            else:
                sys.stdout.write(text)
        else:
            path = args.output
            if not path.lower().endswith("." + fmt):
                path += "." + fmt
            algo.plan.render(path)
    finally:
        algo.stop()
    if args.output:
        print(f"wrote {args.output}", file=sys.stderr)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``flowrl`` command; returns the exit code."""
    parser = _parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as e:  # argparse already printed the usage error
        return int(e.code or 0)
    try:
        return train(args) if args.command == "train" else plan(args)
    except ConfigError as e:
        return _error(str(e), EXIT_USAGE)
    except FlowError as e:
        return _error(str(e), EXIT_FAILED)
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED


if __name__ == "__main__":
    sys.exit(main())
