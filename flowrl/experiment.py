"""Experiment specs: what ``flowrl train --config FILE.yaml --set key=value`` reads.

A spec is a YAML mapping with four keys (all optional in the file; the command
line may supply ``algo`` and ``env``), plus an optional fifth::

    algo: ppo
    env: CartPole-v1
    stop: {episode_reward_mean: 450, timesteps_total: 200000}
    config: {num_workers: 2, lr: 0.001, model: [64, 64]}

``skip_slow_test`` (a non-empty string, the reason) tells the slow test of
``tuned_examples/`` to skip a spec too long for it (Atari runs of hours); ``flowrl
train`` ignores it. ``stop`` keys are result fields: ``episode_reward_mean``, ``timesteps_total``,
``training_iteration``, ``time_total_s`` (seconds of training; the first one reached
stops), and ``evaluation/episode_reward_mean``, the evaluation's mean (for offline
algorithms, whose training plays no episode). ``config`` keys are the algorithm config's dataclass fields. Numbers written
without a dot, which YAML reads as strings (``lr: 1e-3``, ``timesteps_total: 1e6``),
are read as numbers (:func:`~flowrl.config_text.read_numbers`). ``--set key=value`` overrides one config
field (``value`` is parsed as YAML: ``0.01``, ``[32, 32]``, ``null``);
``--set env_config.size=5`` sets one key of a dict field and ``--set
stop.timesteps_total=1000`` one stop criterion. A file or value that is not YAML is
a ConfigError naming the line and column of the problem (:func:`yaml_problem`).
A relative dataset path (``input``) that is not found from the current directory
is looked for beside the config file (:func:`datasets_beside`), so a config that
ships with its data (``tuned_examples/bc-cartpole.yaml``) runs from anywhere.
Unknown names are ConfigErrors that suggest the closest valid one (difflib):

>>> make_config("ppo", {"env": "CartPole-v1", "lr_rate": 0.1})
Traceback (most recent call last):
...
flowrl.errors.ConfigError: unknown field 'lr_rate' in ppo config; did you mean 'lr'?
>>> spec = apply_overrides({"algo": "pg", "env": "CartPole-v1", "config": {}},
...                        ["lr=0.01", "model=[32, 32]", "stop.training_iteration=3"])
>>> spec["config"], spec["stop"]
({'lr': 0.01, 'model': [32, 32]}, {'training_iteration': 3})
>>> make_config(spec["algo"], {"env": spec["env"], **spec["config"]}).model.fcnet_hiddens
(32, 32)
"""

from __future__ import annotations

import copy
import dataclasses
import glob
import math
import os
import pathlib
import re
from typing import Any, Sequence

# algorithm_class, closest, read_numbers and suggest live below this module and stay
# importable from here.
from flowrl.algorithms import algorithm_class
from flowrl.config_text import closest, read_numbers, suggest  # noqa: F401
from flowrl.errors import ConfigError

SPEC_KEYS = ("algo", "env", "stop", "config", "skip_slow_test")
STOP_KEYS = ("episode_reward_mean", "timesteps_total", "training_iteration", "time_total_s",
             "evaluation/episode_reward_mean")
#: Stop keys whose bound is a mean return (any number).
REWARD_STOP_KEYS = ("episode_reward_mean", "evaluation/episode_reward_mean")


def config_fields(cls) -> list[str]:
    """The config field names of algorithm class ``cls``."""
    return [f.name for f in dataclasses.fields(cls.config_class)]


def make_config(algo: Any, fields: dict[str, Any]):
    """``algo``'s config class built from ``fields`` (validated); an unknown field
    is a ConfigError naming it and how to fix it (the closest valid name, or for a
    setting of RLlib 1.x, :meth:`~flowrl.algorithms.AlgorithmConfig.unknown_field_hint`)."""
    cls = algorithm_class(algo) if not isinstance(algo, type) else algo
    valid = config_fields(cls)
    for name in fields:
        if name not in valid:
            raise ConfigError(f"unknown field {name!r} in {cls.name} config; "
                              f"{cls.config_class.unknown_field_hint(name)}")
    return cls.config_class(**fields)


def yaml_problem(error: Any, text: str) -> str:
    """What PyYAML's ``error`` (raised while reading ``text``) says is wrong and where,
    as 1-based line and column (PyYAML counts from 0), with the line's own text and
    what the parser was inside of: ``line 3, column 10: mapping values are not allowed
    here; the line reads '  lr: 0.1: 2'``.

    >>> import yaml
    >>> text = "config:\\n  model: [32, 32\\n  lr: 1\\n"
    >>> try:
    ...     yaml.safe_load(text)
    ... except yaml.YAMLError as e:
    ...     print(yaml_problem(e, text))
    line 3, column 5: expected ',' or ']', but got ':' (while parsing a flow sequence from \
line 2, column 10); the line reads '  lr: 1'
    """
    mark = getattr(error, "problem_mark", None) or getattr(error, "context_mark", None)
    problem = getattr(error, "problem", None) or getattr(error, "context", None)
    position = getattr(error, "position", None)  # a ReaderError's: bytes that are not text
    if mark is not None and problem is not None:
        line, column = mark.line, mark.column
        inside, at = getattr(error, "context", None), getattr(error, "context_mark", None)
        if inside and inside != problem:
            problem += f" ({inside}" + (f" from line {at.line + 1}, column {at.column + 1})"
                                        if at else ")")
    elif position is not None:
        before = text[:position]
        line, column = before.count("\n"), position - (before.rfind("\n") + 1)
        problem = f"{getattr(error, 'reason', 'unreadable text')}: save it as UTF-8"
    else:
        return str(error).splitlines()[0] if str(error) else type(error).__name__
    lines = text.splitlines()
    reads = (f"; the line reads {lines[line][:80]!r}" if line < len(lines)
             else "; the text ends there")
    return f"line {line + 1}, column {column + 1}: {problem}{reads}"


def read_yaml(path: str) -> Any:
    """The YAML document in file ``path`` (None for an empty file); an unreadable
    file or bad YAML is a one-line ConfigError naming ``--config path`` and, for bad
    YAML, the line and column (1-based) and what is wrong there (:func:`yaml_problem`)."""
    import yaml
    try:
        with open(path, "rb") as f:  # PyYAML decodes it: UTF-8, or UTF-16 with a BOM
            data = f.read()
    except OSError as e:
        raise ConfigError(f"--config {path!r}: cannot read it ({e.strerror or e})") from None
    try:
        return yaml.safe_load(data)
    except yaml.YAMLError as e:
        text = data.decode("utf-8", errors="replace")
        raise ConfigError(f"--config {path!r}: not valid YAML at {yaml_problem(e, text)}; "
                          "fix the file there") from None


def load_spec(path: str) -> dict[str, Any]:
    """Read and check a YAML experiment spec (see the module docstring); its dataset
    paths are found as :func:`datasets_beside` says."""
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path!r}: expected a mapping with keys {list(SPEC_KEYS)}, "
                          f"got {type(data).__name__}")
    spec = check_spec(data, f"--config {path!r}")
    spec["config"] = datasets_beside(spec["config"], os.path.dirname(os.path.abspath(path)))
    return spec


def _beside(path: Any, directory: str) -> Any:
    if (not isinstance(path, str) or path == "sampler" or os.path.isabs(path)
            or glob.glob(path)):
        return path
    candidate = os.path.join(directory, path)
    return candidate if glob.glob(candidate) else path


def datasets_beside(config: dict[str, Any], directory: str) -> dict[str, Any]:
    """``config`` with each relative dataset path of ``input`` (a path or glob, a
    list of them, or the keys of a mixed-input dict), also in ``evaluation_config``,
    that matches nothing from the current directory but matches beside the config
    file (in ``directory``) replaced by that path, so a config file that ships with
    its data runs from any directory. Paths that match here, or nowhere, stay as
    they are (a path that matches nowhere is the config's error to report).

    >>> import tempfile
    >>> d = tempfile.mkdtemp(); os.makedirs(os.path.join(d, "data"))
    >>> datasets_beside({"input": "data", "lr": 0.1}, d) == {"input": os.path.join(d, "data"),
    ...                                                       "lr": 0.1}
    True
    >>> datasets_beside({"input": {"sampler": 0.5, "no/such/dir": 0.5}}, d)
    {'input': {'sampler': 0.5, 'no/such/dir': 0.5}}
    """
    def resolve(value: Any) -> Any:
        if isinstance(value, list):
            return [_beside(v, directory) for v in value]
        if isinstance(value, dict):
            return {_beside(k, directory): v for k, v in value.items()}
        return _beside(value, directory)

    config = dict(config)
    if "input" in config:
        config["input"] = resolve(config["input"])
    evaluation = config.get("evaluation_config")
    if isinstance(evaluation, dict) and "input" in evaluation:
        config["evaluation_config"] = {**evaluation, "input": resolve(evaluation["input"])}
    return config


def check_spec(data: dict[str, Any], where: str = "spec") -> dict[str, Any]:
    """A normalised copy of spec ``data``: unknown keys, a non-mapping ``config``
    or ``stop`` and bad stop values are ConfigErrors."""
    for key in data:
        if key not in SPEC_KEYS:
            raise ConfigError(f"{where}: unknown key {key!r}; {suggest(str(key), SPEC_KEYS)}")
    spec = {"algo": data.get("algo"), "env": data.get("env"),
            "stop": copy.deepcopy(data.get("stop") or {}),
            "config": copy.deepcopy(data.get("config") or {})}
    for key in ("stop", "config"):
        if not isinstance(spec[key], dict):
            raise ConfigError(f"{where}: {key!r} must be a mapping, got {spec[key]!r}")
    for key, value in spec["stop"].items():
        spec["stop"][key] = check_stop(key, value, f"{where}: stop.{key}")
    if "skip_slow_test" in data:
        reason = data["skip_slow_test"]
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigError(f"{where}: skip_slow_test={reason!r}: give the reason the slow "
                              "test skips this spec, as a non-empty string")
        spec["skip_slow_test"] = reason
    return spec


def tuned_examples_dir() -> pathlib.Path:
    """The directory of the tuned examples (``<algo>-<env>.yaml`` specs): in an
    installed package ``flowrl/tuned_examples/``, where the wheel puts them, else
    ``tuned_examples/`` beside the ``flowrl`` package of a source checkout.

    >>> (tuned_examples_dir() / "ppo-pong.yaml").is_file()
    True
    """
    package = pathlib.Path(__file__).resolve().parent
    installed = package / "tuned_examples"
    return installed if installed.is_dir() else package.parent / "tuned_examples"


def atari_defaults(algo: str) -> tuple[pathlib.Path, dict[str, Any]] | None:
    """``(path, config)``: the tuned Pong example of algorithm ``algo``
    (``<algo>-pong.yaml`` in :func:`tuned_examples_dir`) and its ``config`` block,
    which ``flowrl train ALGO --env ALE/...`` starts from when no ``--config`` is
    given (algorithm defaults are tuned for CartPole); None when ``algo`` has no
    such example. The example's ``algo`` must be ``algo`` (a ConfigError otherwise).

    >>> path, config = atari_defaults("impala")
    >>> path.name, config["model"]["zero_mean"]
    ('impala-pong.yaml', True)
    >>> atari_defaults("a2c") is None
    True
    """
    path = tuned_examples_dir() / f"{algo}-pong.yaml"
    if not path.is_file():
        return None
    spec = load_spec(str(path))
    if spec["algo"] != algo:
        raise ConfigError(f"{path}: algo is {spec['algo']!r}; the Atari defaults of {algo!r} "
                          f"must be an {algo!r} spec")
    return path, spec["config"]


def check_stop(key: Any, value: Any, where: str) -> int | float:
    """The bound of stop criterion ``key``: ``value``, or the number a string such as
    ``"1e6"`` spells (:func:`read_numbers`). ConfigError unless ``key`` is a stop
    criterion and the bound usable: a number for ``episode_reward_mean`` and
    ``evaluation/episode_reward_mean``, a number > 0 (seconds) for ``time_total_s``,
    an int >= 1 for the others.

    >>> check_stop("timesteps_total", "1e6", "stop.timesteps_total")
    1000000
    >>> check_stop("training_iteration", "1.5", "stop.training_iteration")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: stop.training_iteration='1.5': must be an int >= 1
    """
    if key not in STOP_KEYS:
        raise ConfigError(f"{where}: unknown stop criterion {key!r}; "
                          f"{suggest(str(key), STOP_KEYS)}")
    bound = read_numbers(value) if isinstance(value, str) else value
    number = not isinstance(bound, bool) and isinstance(bound, (int, float))
    if key in REWARD_STOP_KEYS:
        if not number or math.isnan(bound):
            raise ConfigError(f"{where}={value!r}: must be a number")
    elif key == "time_total_s":
        if not number or not math.isfinite(bound) or bound <= 0:
            raise ConfigError(f"{where}={value!r}: must be a number of seconds > 0")
    elif not isinstance(bound, int) or isinstance(bound, bool) or bound < 1:
        raise ConfigError(f"{where}={value!r}: must be an int >= 1")
    return bound


def reward_reached(result: dict, stop: dict) -> str | None:
    """Why ``result`` meets a reward criterion of ``stop`` (None when none): the
    train mean or the evaluation's mean (``evaluation/episode_reward_mean``, on
    iterations that evaluated) at or above its bound.

    >>> reward_reached({"episode_reward_mean": float("nan"),
    ...                 "evaluation": {"episode_reward_mean": 480.0}},
    ...                {"evaluation/episode_reward_mean": 450})
    'evaluation/episode_reward_mean 480 >= 450'
    """
    means = {"episode_reward_mean": result.get("episode_reward_mean", math.nan),
             "evaluation/episode_reward_mean":
                 (result.get("evaluation") or {}).get("episode_reward_mean", math.nan)}
    for key in REWARD_STOP_KEYS:
        target, mean = stop.get(key), means[key]
        if target is not None and not math.isnan(mean) and mean >= target:
            return f"{key} {mean:.5g} >= {target}"
    return None


def run_name(algo: str, env: Any) -> str:
    """``<algo>-<env>`` as a file name, what run directories (``flowrl train``) and
    Tune experiments (``flowrl tune``) are named after: an env creator by its
    ``__name__``, and every run of characters other than letters, digits, ``_``,
    ``.`` and ``-`` (the ``/`` of a namespace, the ``:`` of ``module:Name``, which
    some file systems and tools refuse) replaced by one ``_``.

    >>> run_name("ppo", "ALE/Pong-v5"), run_name("pg", "my_envs:Corridor")
    ('ppo-ALE_Pong-v5', 'pg-my_envs_Corridor')
    """
    env_name = env if isinstance(env, str) else getattr(env, "__name__", "env")
    return re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{algo}-{env_name}")


def parse_override(text: str) -> tuple[str, Any]:
    """``"key=value"`` -> ``(key, value)`` with ``value`` parsed as YAML. A value that
    is not YAML is a ConfigError naming the key, where in the value the problem is
    (1-based; :func:`yaml_problem`) and how to pass it as text instead:

    >>> parse_override("model=[32, 32]")
    ('model', [32, 32])
    >>> parse_override("model=[32, 32")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: --set model='[32, 32': not valid YAML at line 1, column 8: \
expected ',' or ']', but got '<stream end>' (while parsing a flow sequence from line 1, \
column 1); the line reads '[32, 32'; fix the value, or quote it to pass it as text: \
--set 'model="..."'
    """
    import yaml
    key, sep, raw = str(text).partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {text!r}: write key=value, e.g. --set lr=0.0005")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError as e:
        raise ConfigError(f"--set {key}={raw!r}: not valid YAML at {yaml_problem(e, raw)}; fix "
                          f"the value, or quote it to pass it as text: --set '{key}=\"...\"'"
                          ) from None
    return key, value


def apply_overrides(spec: dict[str, Any], overrides: Sequence[str]) -> dict[str, Any]:
    """A copy of ``spec`` with each ``key=value`` of ``overrides`` applied in order."""
    spec = copy.deepcopy(spec)
    spec.setdefault("stop", {})
    spec.setdefault("config", {})
    for text in overrides:
        key, value = parse_override(text)
        head, dot, rest = key.partition(".")
        if head == "stop" and dot:
            spec["stop"][rest] = check_stop(rest, value, f"--set {key}")
        elif dot:
            if not rest:
                raise ConfigError(f"--set {text!r}: write field.key=value, e.g. "
                                  "--set env_config.size=5")
            current = spec["config"].get(head, {})
            if head == "model" and isinstance(current, (list, tuple)):
                current = {"fcnet_hiddens": list(current)}  # hidden sizes, as a dict
            if not isinstance(current, dict):
                raise ConfigError(f"--set {key}: config field {head!r} is not a mapping")
            spec["config"][head] = {**current, rest: value}
        else:
            spec["config"][key] = value
    return spec


__all__ = ["suggest", "closest", "read_numbers", "yaml_problem", "read_yaml", "load_spec",
           "check_spec", "apply_overrides", "parse_override", "make_config", "algorithm_class",
           "config_fields", "run_name", "tuned_examples_dir", "atari_defaults", "STOP_KEYS",
           "REWARD_STOP_KEYS", "reward_reached", "datasets_beside"]
