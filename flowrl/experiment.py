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
``training_iteration`` (the first one reached stops). ``config`` keys are the
algorithm config's dataclass fields. ``--set key=value`` overrides one config
field (``value`` is parsed as YAML: ``0.01``, ``[32, 32]``, ``null``);
``--set env_config.size=5`` sets one key of a dict field and ``--set
stop.timesteps_total=1000`` one stop criterion. Unknown names are ConfigErrors that
suggest the closest valid one (difflib):

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
import difflib
import math
from typing import Any, Sequence

from flowrl.errors import ConfigError

SPEC_KEYS = ("algo", "env", "stop", "config", "skip_slow_test")
STOP_KEYS = ("episode_reward_mean", "timesteps_total", "training_iteration")


def closest(name: str, choices: Sequence[str]) -> str | None:
    """The valid name ``name`` most likely misspells: a close difflib match, else one
    sharing its first ``_``-separated word (``lr_rate`` -> ``lr``), else None.

    >>> closest("lr_rate", ["lr", "gamma", "lambda_"]), closest("gamme", ["gamma"])
    ('lr', 'gamma')
    """
    choices = list(choices)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    if close:
        return close[0]
    head = name.lower().split("_")[0]
    same_head = [c for c in choices if head and c.lower().split("_")[0] == head]
    if same_head:
        return max(same_head, key=lambda c: difflib.SequenceMatcher(None, name, c).ratio())
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.4)
    return close[0] if close else None


def suggest(name: str, choices: Sequence[str]) -> str:
    """The hint for a misspelt ``name``: ``did you mean 'x'?`` (:func:`closest`),
    else the valid choices.

    >>> suggest("gamme", ["gamma", "lr"]), suggest("zzz", ["lr"])
    ("did you mean 'gamma'?", "choose from ['lr']")
    """
    close = closest(name, choices)
    return f"did you mean {close!r}?" if close else f"choose from {sorted(choices)}"


def algorithm_class(name: Any):
    """The algorithm class registered as ``name`` (case-insensitive) in
    ``flowrl.algorithms.ALGORITHMS``; ConfigError with a suggestion otherwise."""
    from flowrl.algorithms import ALGORITHMS
    cls = ALGORITHMS.get(name.lower()) if isinstance(name, str) else None
    if cls is None:
        raise ConfigError(f"unknown algorithm {name!r}; {suggest(str(name), list(ALGORITHMS))} "
                          f"(choose one of {sorted(ALGORITHMS)})")
    return cls


def config_fields(cls) -> list[str]:
    """The config field names of algorithm class ``cls``."""
    return [f.name for f in dataclasses.fields(cls.config_class)]


def make_config(algo: Any, fields: dict[str, Any]):
    """``algo``'s config class built from ``fields`` (validated); an unknown field
    is a ConfigError naming it with the closest valid name."""
    cls = algorithm_class(algo) if not isinstance(algo, type) else algo
    valid = config_fields(cls)
    for name in fields:
        if name not in valid:
            raise ConfigError(f"unknown field {name!r} in {cls.name} config; "
                              f"{suggest(str(name), valid)}")
    return cls.config_class(**fields)


def read_yaml(path: str) -> Any:
    """The YAML document in file ``path`` (None for an empty file); an unreadable
    file or bad YAML is a one-line ConfigError naming ``--config path``."""
    import yaml
    try:
        with open(path) as f:
            return yaml.safe_load(f)
    except OSError as e:
        raise ConfigError(f"--config {path!r}: cannot read it ({e.strerror or e})") from None
    except yaml.YAMLError as e:
        first = str(e).splitlines()[0] if str(e) else "bad YAML"
        raise ConfigError(f"--config {path!r}: not valid YAML ({first})") from None


def load_spec(path: str) -> dict[str, Any]:
    """Read and check a YAML experiment spec (see the module docstring)."""
    data = read_yaml(path)
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ConfigError(f"--config {path!r}: expected a mapping with keys {list(SPEC_KEYS)}, "
                          f"got {type(data).__name__}")
    return check_spec(data, f"--config {path!r}")


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
        check_stop(key, value, f"{where}: stop.{key}")
    if "skip_slow_test" in data:
        reason = data["skip_slow_test"]
        if not isinstance(reason, str) or not reason.strip():
            raise ConfigError(f"{where}: skip_slow_test={reason!r}: give the reason the slow "
                              "test skips this spec, as a non-empty string")
        spec["skip_slow_test"] = reason
    return spec


def check_stop(key: Any, value: Any, where: str) -> None:
    """ConfigError unless ``key`` is a stop criterion and ``value`` a usable bound."""
    if key not in STOP_KEYS:
        raise ConfigError(f"{where}: unknown stop criterion {key!r}; "
                          f"{suggest(str(key), STOP_KEYS)}")
    if key == "episode_reward_mean":
        if isinstance(value, bool) or not isinstance(value, (int, float)) or math.isnan(value):
            raise ConfigError(f"{where}={value!r}: must be a number")
    elif isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ConfigError(f"{where}={value!r}: must be an int >= 1")


def parse_override(text: str) -> tuple[str, Any]:
    """``"key=value"`` -> ``(key, value)`` with ``value`` parsed as YAML."""
    import yaml
    key, sep, raw = str(text).partition("=")
    key = key.strip()
    if not sep or not key:
        raise ConfigError(f"--set {text!r}: write key=value, e.g. --set lr=0.0005")
    try:
        value = yaml.safe_load(raw) if raw.strip() else ""
    except yaml.YAMLError:
        value = raw
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
            check_stop(rest, value, f"--set {key}")
            spec["stop"][rest] = value
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


__all__ = ["suggest", "closest", "load_spec", "check_spec", "apply_overrides", "parse_override",
           "make_config", "algorithm_class", "config_fields", "STOP_KEYS"]
