"""Sweep specs: what ``flowrl tune --config sweep.yaml`` reads, checks and runs on Ray Tune.

A sweep spec is a YAML mapping; only ``algo`` and ``env`` are required::

    algo: ppo
    env: CartPole-v1
    config:                       # the algorithm config's fields; any may be a search space
      num_workers: 0
      lr: {loguniform: [0.0001, 0.01]}
      num_sgd_iter: {choice: [4, 8]}
      train_batch_size: {grid_search: [1024, 2048]}
    stop: {episode_reward_mean: 450, timesteps_total: 200000}   # per trial, first reached
    num_samples: 4                # samples of the search space (x the grid)
    scheduler: {type: asha, max_t: 50, grace_period: 5}          # asha | pbt | none
    metric: episode_reward_mean   # default
    mode: max                     # default
    storage_path: runs/tune       # default; the experiment is <storage_path>/<name>
    name: ppo-cartpole            # default <algo>-<env>
    resume: false                 # true: continue <storage_path>/<name> if it exists
    checkpoint_frequency: 1       # every N iterations (0: only at the end); default 1
    keep_checkpoints: 3           # per trial; default 3 (PBT clones from recent ones)
    max_concurrent_trials: null   # default: as many as the CPUs allow
    search_seed: null             # seeds the sampling of choice/uniform/loguniform

Search spaces (a mapping with exactly one of these keys, on a top-level
``config`` field): ``{grid_search: [v, ...]}`` (every value, each
``num_samples`` times), ``{choice: [v, ...]}``, ``{uniform: [low, high]}``,
``{loguniform: [low, high]}`` (``0 < low < high``). ``stop`` takes
``episode_reward_mean``, ``timesteps_total``, ``training_iteration``,
``time_total_s`` (as ``flowrl train``); without ``episode_reward_mean`` the env's
reward threshold is used.
Schedulers: ``asha`` (``time_attr``, ``max_t``, ``grace_period``,
``reduction_factor``, ``brackets``) and ``pbt`` (``time_attr``,
``perturbation_interval``, ``burn_in_period``, ``hyperparam_mutations``: config
field -> list of values or a ``choice``/``uniform``/``loguniform`` space,
``quantile_fraction``, ``resample_probability``); a bare ``asha``/``pbt`` takes
the defaults (pbt then needs ``hyperparam_mutations``, so give the mapping).

The whole spec is checked before any trial starts (:func:`check_sweep`): an
unknown key, config field or scheduler parameter, a malformed search space, and
any value of a space that the algorithm's config rejects are ConfigErrors that
name it:

>>> check_sweep({"algo": "ppo", "env": "CartPole-v1",
...              "config": {"lr": {"choice": [0.001, -1]}}})
Traceback (most recent call last):
...
flowrl.errors.ConfigError: sweep: config.lr: choice value -1: PPOConfig.lr=-1: must be a number > 0 and <= 10
>>> check_sweep({"algo": "ppo", "env": "CartPole-v1", "shceduler": "asha"})
Traceback (most recent call last):
...
flowrl.errors.ConfigError: sweep: unknown key 'shceduler'; did you mean 'scheduler'?
>>> spec = check_sweep({"algo": "ppo", "env": "CartPole-v1",
...                     "config": {"lr": {"uniform": [0.001, 0.01]}}})
>>> spec["stop"], spec["metric"], spec["mode"], spec["name"]
({'episode_reward_mean': 475.0}, 'episode_reward_mean', 'max', 'ppo-CartPole-v1')

:func:`run_sweep` runs a checked spec with ``tune.Tuner`` (trials are
:func:`flowrl.tune.trainable` of the algorithm) and returns Tune's ResultGrid;
:func:`summary` describes the best trial and any that failed.
"""

from __future__ import annotations

import copy
import math
import os
import re
from typing import Any, Sequence

from flowrl.config_text import read_numbers
from flowrl.errors import ConfigError, TrialError
from flowrl.experiment import (algorithm_class, check_stop, config_fields, datasets_beside,
                               make_config, read_yaml,
                               run_name, suggest)

SWEEP_KEYS = ("algo", "env", "config", "stop", "num_samples", "scheduler", "metric", "mode",
              "storage_path", "name", "resume", "checkpoint_frequency", "keep_checkpoints",
              "max_concurrent_trials", "search_seed")
SPACES = ("grid_search", "choice", "uniform", "loguniform")
TIME_ATTRS = ("training_iteration", "timesteps_total", "time_total_s")
SCHEDULER_PARAMS = {
    "asha": ("time_attr", "max_t", "grace_period", "reduction_factor", "brackets"),
    "pbt": ("time_attr", "perturbation_interval", "burn_in_period", "hyperparam_mutations",
            "quantile_fraction", "resample_probability"),
}
DEFAULT_STORAGE = os.path.join("runs", "tune")


def _is_number(v: Any) -> bool:
    return (not isinstance(v, bool) and isinstance(v, (int, float))
            and math.isfinite(v))


def _int_at_least(v: Any, lo: int) -> bool:
    return not isinstance(v, bool) and isinstance(v, int) and v >= lo


def space_kind(value: Any) -> str | None:
    """The search-space kind ``value`` is (``"choice"``, ...), or None for a plain
    value: a mapping whose only key is one of :data:`SPACES`.

    >>> space_kind({"choice": [1, 2]}), space_kind({"fcnet_hiddens": [32]}), space_kind(3)
    ('choice', None, None)
    """
    if isinstance(value, dict) and len(value) == 1:
        (key,) = value
        if key in SPACES:
            return key
    return None


def space_values(kind: str, arg: Any, where: str, allowed: Sequence[str] = SPACES) -> list:
    """The values to check for search space ``{kind: arg}``: every option of a
    grid/choice, the bounds (as floats, read from numeric strings too) of a
    uniform/loguniform. ConfigError, naming ``where``, when the space is malformed or
    ``kind`` not ``allowed``.

    >>> space_values("loguniform", ["1e-4", 1e-2], "lr")
    [0.0001, 0.01]
    """
    if kind not in allowed:
        raise ConfigError(f"{where}: {kind} is not allowed here; use one of {list(allowed)}")
    if kind in ("grid_search", "choice"):
        if not isinstance(arg, list) or not arg:
            raise ConfigError(f"{where}: {{{kind}: ...}} takes a non-empty list of values, "
                              f"got {arg!r}")
        return list(arg)
    arg = read_numbers(arg)  # YAML reads bounds such as 1e-4 as strings
    if (not isinstance(arg, list) or len(arg) != 2 or not all(_is_number(v) for v in arg)
            or not arg[0] < arg[1]):
        raise ConfigError(f"{where}: {{{kind}: [low, high]}} takes two numbers with low < high, "
                          f"got {arg!r}")
    if kind == "loguniform" and arg[0] <= 0:
        raise ConfigError(f"{where}: {{loguniform: [low, high]}} needs 0 < low, got {arg!r}")
    return [float(arg[0]), float(arg[1])]


def _check_values(cls: type, env: Any, config: dict, where: str) -> None:
    """Build the algorithm's config once with every field at its first candidate,
    then once per other candidate of each searched field (the others at their
    first), so every value of every space is checked by the config's own checks."""
    candidates: dict[str, list] = {}
    for name, value in config.items():
        kind = space_kind(value)
        candidates[name] = ([value] if kind is None else
                            space_values(kind, value[kind], f"{where}: config.{name}"))
    first = {name: values[0] for name, values in candidates.items()}

    def build(fields: dict, name: str | None, value: Any) -> None:
        try:
            make_config(cls, {"env": env, **fields})
        except ConfigError as e:
            if name is None:
                raise ConfigError(f"{where}: config: {e}") from None
            kind = space_kind(config[name])
            floats = " (uniform/loguniform sample floats; use choice or grid_search for "\
                     "an int field)" if kind in ("uniform", "loguniform") else ""
            raise ConfigError(f"{where}: config.{name}: {kind} value {value!r}: {e}{floats}") \
                from None

    for name, values in candidates.items():
        for value in values:
            build({**first, name: value}, name if space_kind(config[name]) else None, value)
    if not candidates:
        build({}, None, None)


def _check_scheduler(raw: Any, fields: Sequence[str], where: str) -> dict | None:
    """The scheduler as ``{"type": ..., params...}`` or None; ConfigError when unknown."""
    if raw is None or (isinstance(raw, str) and raw.lower() in ("none", "fifo")):
        return None
    if isinstance(raw, str):
        raw = {"type": raw}
    if not isinstance(raw, dict):
        raise ConfigError(f"{where}: scheduler must be asha, pbt, none or a mapping with "
                          f"'type', got {raw!r}")
    kind = str(raw.get("type", "")).lower()
    if kind not in SCHEDULER_PARAMS:
        raise ConfigError(f"{where}: scheduler.type={raw.get('type')!r}: choose one of "
                          f"{sorted(SCHEDULER_PARAMS)} (or scheduler: none)")
    params = {k: v for k, v in raw.items() if k != "type"}
    at = f"{where}: scheduler ({kind})"
    for key, value in params.items():
        if key not in SCHEDULER_PARAMS[kind]:
            raise ConfigError(f"{at}: unknown parameter {key!r}; "
                              f"{suggest(str(key), SCHEDULER_PARAMS[kind])}")
        ok, what = {
            "time_attr": (lambda v: v in TIME_ATTRS, f"one of {list(TIME_ATTRS)}"),
            "max_t": (lambda v: _int_at_least(v, 1), "an int >= 1"),
            "grace_period": (lambda v: _int_at_least(v, 1), "an int >= 1"),
            "reduction_factor": (lambda v: _is_number(v) and v > 1, "a number > 1"),
            "brackets": (lambda v: _int_at_least(v, 1), "an int >= 1"),
            "perturbation_interval": (lambda v: _is_number(v) and v > 0, "a number > 0"),
            "burn_in_period": (lambda v: _is_number(v) and v >= 0, "a number >= 0"),
            "hyperparam_mutations": (lambda v: isinstance(v, dict) and bool(v),
                                     "a non-empty mapping of config field -> values"),
            "quantile_fraction": (lambda v: _is_number(v) and 0 <= v <= 0.5,
                                  "a number in [0, 0.5]"),
            "resample_probability": (lambda v: _is_number(v) and 0 <= v <= 1,
                                     "a number in [0, 1]"),
        }[key]
        if not ok(value):
            raise ConfigError(f"{at}: {key}={value!r}: must be {what}")
    if kind == "asha" and params.get("grace_period", 1) > params.get("max_t", 100):
        raise ConfigError(f"{at}: grace_period={params.get('grace_period', 1)} is above "
                          f"max_t={params.get('max_t', 100)}; make grace_period <= max_t")
    if kind == "pbt":
        mutations = params.get("hyperparam_mutations")
        if not mutations:
            raise ConfigError(f"{at}: give hyperparam_mutations: {{config field: [values] or "
                              "{choice|uniform|loguniform: ...}}, what exploit/explore changes")
        for name, value in mutations.items():
            if name not in fields:
                raise ConfigError(f"{at}: hyperparam_mutations: unknown config field {name!r}; "
                                  f"{suggest(str(name), fields)}")
            kind_ = space_kind(value)
            if kind_ is not None:
                space_values(kind_, value[kind_], f"{at}: hyperparam_mutations.{name}",
                             allowed=("choice", "uniform", "loguniform"))
            elif not isinstance(value, list) or not value:
                raise ConfigError(f"{at}: hyperparam_mutations.{name}={value!r}: give a "
                                  "non-empty list of values or a choice/uniform/loguniform space")
    return {"type": kind, **params}


def check_sweep(data: dict[str, Any], where: str = "sweep") -> dict[str, Any]:
    """A normalised, checked copy of sweep spec ``data`` (see the module docstring);
    ConfigError naming the first problem. Builds no algorithm and starts nothing."""
    from flowrl.algorithms.validators import check_env, gym_spec
    if not isinstance(data, dict):
        raise ConfigError(f"{where}: expected a mapping with keys {list(SWEEP_KEYS)}, "
                          f"got {type(data).__name__}")
    for key in data:
        if key not in SWEEP_KEYS:
            raise ConfigError(f"{where}: unknown key {key!r}; {suggest(str(key), SWEEP_KEYS)}")
    if data.get("algo") is None:
        raise ConfigError(f"{where}: give the algorithm: 'algo: ppo'")
    cls = algorithm_class(data["algo"])
    config = copy.deepcopy(data.get("config") or {})
    if not isinstance(config, dict):
        raise ConfigError(f"{where}: 'config' must be a mapping of config fields, got {config!r}")
    env = data.get("env")
    if env is None:
        env = config.pop("env", None)
    elif "env" in config:
        raise ConfigError(f"{where}: give the env once: 'env:' at the top, not in config")
    if env is None:
        raise ConfigError(f"{where}: give the env: 'env: CartPole-v1'")
    if space_kind(env) is not None:
        raise ConfigError(f"{where}: env={env!r}: sweep one env per spec; search spaces go on "
                          "config fields")
    check_env(env, f"{where}: env")
    fields = config_fields(cls)
    for name in config:
        if name not in fields:
            raise ConfigError(f"{where}: unknown field {name!r} in {cls.name} config; "
                              f"{cls.config_class.unknown_field_hint(name)}")
    _check_values(cls, env, config, where)

    stop = copy.deepcopy(data.get("stop") or {})
    if not isinstance(stop, dict):
        raise ConfigError(f"{where}: 'stop' must be a mapping, got {stop!r}")
    for key, value in stop.items():
        stop[key] = check_stop(key, value, f"{where}: stop.{key}")
    if "episode_reward_mean" not in stop and isinstance(env, str):
        try:
            threshold = gym_spec(env).reward_threshold
        except Exception:  # noqa: BLE001  (check_env already accepted the env)
            threshold = None
        if threshold is not None:
            stop["episode_reward_mean"] = float(threshold)
    if not stop:
        raise ConfigError(f"{where}: env {env!r} has no reward threshold; give stop: "
                          "{episode_reward_mean: R} or timesteps_total / training_iteration")

    spec: dict[str, Any] = {"algo": cls.name, "env": env, "config": config, "stop": stop}
    for key, default, ok, what in (
            ("num_samples", 1, lambda v: _int_at_least(v, 1), "an int >= 1"),
            ("metric", "episode_reward_mean", lambda v: isinstance(v, str) and v != "",
             "a result field name"),
            ("mode", "max", lambda v: v in ("max", "min"), "max or min"),
            ("storage_path", DEFAULT_STORAGE, lambda v: isinstance(v, str) and v != "",
             "a directory path"),
            ("name", run_name(cls.name, env),
             lambda v: isinstance(v, str) and re.fullmatch(r"[A-Za-z0-9_.=-]+", v) is not None,
             "a directory name (letters, digits, _ . = -)"),
            ("resume", False, lambda v: isinstance(v, bool), "true or false"),
            ("checkpoint_frequency", 1, lambda v: _int_at_least(v, 0), "an int >= 0"),
            ("keep_checkpoints", 3, lambda v: v is None or _int_at_least(v, 1),
             "an int >= 1 or null (all)"),
            ("max_concurrent_trials", None, lambda v: v is None or _int_at_least(v, 1),
             "an int >= 1 or null"),
            ("search_seed", None, lambda v: v is None or _int_at_least(v, 0),
             "an int >= 0 or null")):
        value = data.get(key, default)
        if value is None and key not in ("keep_checkpoints", "max_concurrent_trials",
                                         "search_seed"):
            value = default
        if not ok(value):
            raise ConfigError(f"{where}: {key}={value!r}: must be {what}")
        spec[key] = value
    spec["scheduler"] = _check_scheduler(data.get("scheduler"), fields, where)
    if spec["scheduler"] is not None and spec["scheduler"]["type"] == "pbt" \
            and spec["checkpoint_frequency"] == 0:
        raise ConfigError(f"{where}: scheduler pbt clones trials through checkpoints; set "
                          "checkpoint_frequency >= 1")
    return spec


def load_sweep(path: str, overrides: Sequence[str] = ()) -> dict[str, Any]:
    """Read the sweep spec in YAML file ``path``, apply ``overrides``
    (:func:`apply_sweep_overrides`) and check it (:func:`check_sweep`)."""
    data = read_yaml(path)
    if data is None:
        data = {}
    if overrides and isinstance(data, dict):
        data = apply_sweep_overrides(data, overrides)
    spec = check_sweep(data, f"--config {path!r}")
    spec["config"] = datasets_beside(spec["config"], os.path.dirname(os.path.abspath(path)))
    return spec


def apply_sweep_overrides(data: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of raw spec ``data`` with each ``key=value`` applied: a top-level
    sweep key (``num_samples=2``, ``stop.timesteps_total=1000``) or a config field
    (``lr=0.01``, ``lr={choice: [0.001, 0.01]}``); check the result with
    :func:`check_sweep`.

    >>> apply_sweep_overrides({"algo": "ppo"}, ["num_samples=2", "lr={choice: [0.1, 0.2]}"])
    {'algo': 'ppo', 'num_samples': 2, 'config': {'lr': {'choice': [0.1, 0.2]}}}
    """
    from flowrl.experiment import apply_overrides, parse_override
    data = copy.deepcopy(data)
    rest = []
    for text in overrides:
        key, value = parse_override(text)
        if key in SWEEP_KEYS and key not in ("config", "stop"):
            data[key] = value
        else:
            rest.append(text)
    if rest:
        merged = apply_overrides({"config": data.get("config") or {},
                                  "stop": data.get("stop") or {}}, rest)
        data["config"] = merged["config"]
        if merged["stop"]:
            data["stop"] = merged["stop"]
    return data


def _domain(kind: str, arg: Any) -> Any:
    from ray import tune
    if kind == "grid_search":
        return tune.grid_search(list(arg))
    if kind == "choice":
        return tune.choice(list(arg))
    if kind == "uniform":
        return tune.uniform(float(arg[0]), float(arg[1]))
    return tune.loguniform(float(arg[0]), float(arg[1]))


def param_space(spec: dict[str, Any]) -> dict[str, Any]:
    """Tune's ``param_space`` for checked spec ``spec``: ``env`` and the config
    fields, search spaces as Tune domains."""
    space: dict[str, Any] = {"env": spec["env"]}
    for name, value in spec["config"].items():
        kind = space_kind(value)
        space[name] = value if kind is None else _domain(kind, value[kind])
    return space


def make_scheduler(spec: dict[str, Any]) -> Any:
    """The Tune scheduler of checked spec ``spec`` (None: FIFO)."""
    sched = spec["scheduler"]
    if sched is None:
        return None
    from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining
    params = {k: v for k, v in sched.items() if k != "type"}
    if sched["type"] == "asha":
        return ASHAScheduler(**params)
    mutations = {}
    for name, value in params.pop("hyperparam_mutations").items():
        kind = space_kind(value)
        mutations[name] = list(value) if kind is None else _domain(kind, value[kind])
    return PopulationBasedTraining(hyperparam_mutations=mutations, **params)


def experiment_path(spec: dict[str, Any]) -> str:
    """``<storage_path>/<name>`` as an absolute path."""
    return os.path.join(os.path.abspath(spec["storage_path"]), spec["name"])


def make_tuner(spec: dict[str, Any], *, verbose: int = 1, callbacks: Sequence[Any] = ()):
    """A ``tune.Tuner`` for checked spec ``spec``: a new experiment at
    :func:`experiment_path`, or, with ``resume: true`` and a restorable experiment
    there, that experiment continued (each unfinished or errored trial from its last
    checkpoint; ``Tuner.restore``). Returns ``(tuner, resumed)``."""
    from ray import tune

    from flowrl.tune import trainable
    trainable_cls = trainable(spec["algo"])
    path = experiment_path(spec)
    if spec["resume"] and tune.Tuner.can_restore(path):
        return tune.Tuner.restore(path, trainable_cls, resume_unfinished=True,
                                  resume_errored=True), True
    name = spec["name"]
    storage = os.path.abspath(spec["storage_path"])
    n = 1
    while os.path.exists(os.path.join(storage, name)):   # a fresh experiment never mixes
        n += 1                                            # with an old one's trials
        name = f"{spec['name']}_{n}"
    checkpoints = tune.CheckpointConfig(checkpoint_frequency=spec["checkpoint_frequency"],
                                        checkpoint_at_end=True,
                                        num_to_keep=spec["keep_checkpoints"])
    from ray.tune.search import BasicVariantGenerator
    tuner = tune.Tuner(
        trainable_cls, param_space=param_space(spec),
        tune_config=tune.TuneConfig(metric=spec["metric"], mode=spec["mode"],
                                    num_samples=spec["num_samples"],
                                    scheduler=make_scheduler(spec),
                                    search_alg=BasicVariantGenerator(
                                        random_state=spec["search_seed"]),
                                    # a finished trial's process takes the next trial
                                    # (reset_config rebuilds the algorithm)
                                    reuse_actors=True,
                                    max_concurrent_trials=spec["max_concurrent_trials"]),
        run_config=tune.RunConfig(name=name, storage_path=storage, stop=dict(spec["stop"]),
                                  checkpoint_config=checkpoints, verbose=verbose,
                                  callbacks=list(callbacks)))
    return tuner, False


def trial_error(error: BaseException | None) -> str | None:
    """The one-line reason a trial failed: the :class:`~flowrl.errors.TrialError`
    in ``error``'s chain (Ray wraps it), else the first line of ``error``."""
    seen = set()
    e = error
    while e is not None and id(e) not in seen:
        seen.add(id(e))
        if isinstance(e, TrialError):
            return str(e)
        nxt = getattr(e, "cause", None) or e.__cause__
        if nxt is None:
            nxt = next((a for a in getattr(e, "args", ()) if isinstance(a, BaseException)), None)
        e = nxt
    if error is None:
        return None
    text = str(error).strip()
    return f"{type(error).__name__}: {text.splitlines()[0] if text else ''}"


def summary(grid: Any, spec: dict[str, Any]) -> tuple[str, int]:
    """A text summary of ResultGrid ``grid`` (the best trial by the spec's metric
    over all its results, each failed trial with its reason) and the number of
    failed trials."""
    metric, mode = spec["metric"], spec["mode"]
    lines = []
    failed = [r for r in grid if r.error is not None]
    lines.append(f"trials: {len(grid)} ({len(grid) - len(failed)} finished, "
                 f"{len(failed)} failed)")
    try:
        best = grid.get_best_result(metric=metric, mode=mode, scope="all",
                                    filter_nan_and_inf=True)
    except RuntimeError:
        best = None
    if best is None or not best.metrics:
        lines.append(f"best trial: none reported {metric}")
    else:
        df = best.metrics_dataframe
        value = best.metrics.get(metric)
        where = ""
        if df is not None and metric in df:
            idx = df[metric].idxmax() if mode == "max" else df[metric].idxmin()
            row = df.loc[idx]
            value = row[metric]
            where = (f" at iteration {int(row['training_iteration'])}"
                     + (f", {int(row['timesteps_total'])} timesteps"
                        if "timesteps_total" in row else ""))
        searched = {k: best.config.get(k) for k in spec["config"]
                    if space_kind(spec["config"][k]) is not None}
        lines.append(f"best trial: {os.path.basename(best.path)}: {metric} {value:.4g}{where}")
        if searched:
            lines.append("  config: " + ", ".join(f"{k}={v!r}" for k, v in searched.items()))
        last = best.metrics
        last_value = last.get(metric)
        lines.append(f"  last result: iteration {last.get('training_iteration')}, "
                     f"{last.get('timesteps_total')} timesteps, {metric} "
                     + (f"{last_value:.4g}" if isinstance(last_value, (int, float))
                        else str(last_value)))
        if best.checkpoint is not None:
            lines.append(f"  checkpoint: {best.checkpoint.path}")
    for r in failed:
        lines.append(f"failed: {os.path.basename(r.path)}: {trial_error(r.error)}")
    lines.append(f"experiment: {grid.experiment_path}")
    return "\n".join(lines), len(failed)


def run_sweep(spec: dict[str, Any], *, verbose: int = 1, callbacks: Sequence[Any] = ()):
    """Run checked spec ``spec`` on Ray Tune (starting Ray if it is not running,
    as the algorithms do) and return ``(ResultGrid, resumed)``."""
    from flowrl.runtime.calls import ensure_ray
    ensure_ray(os.cpu_count() or 1)
    tuner, resumed = make_tuner(spec, verbose=verbose, callbacks=callbacks)
    return tuner.fit(), resumed


__all__ = ["check_sweep", "load_sweep", "apply_sweep_overrides", "param_space",
           "make_scheduler", "make_tuner", "run_sweep", "summary", "trial_error",
           "space_kind", "space_values", "experiment_path", "SWEEP_KEYS", "SPACES"]
