"""Checks for config fields: each a ``(ok, what)`` pair, where ``ok(value)`` says
whether a value passes and ``what`` completes "must be ..." in the ConfigError.

A config class lists its fields' checks in its ``checks`` table
(:class:`~flowrl.algorithms.config.AlgorithmConfig` runs every class's table in
its ``__post_init__``); algorithms' configs build theirs from these:

>>> ok, what = or_none(int_ge(1))
>>> ok(None), ok(3), ok(0), what
(True, True, False, 'an int >= 1 or None')

The env checks (:func:`check_env`, :func:`check_env_config`) name the config
field in their errors; the CLI and sweeps use them too.
"""

from __future__ import annotations

import difflib
import importlib
import inspect
import math
import os
from typing import Any, Callable

from flowrl.envs import ensure_registered, env_reference, multi_agent_creator
from flowrl.envs.multi_agent import MULTI_AGENT_IDS, check_multi_agent_env_config
from flowrl.errors import ConfigError
from flowrl.workers import PolicySpec


def int_ge(lo: int) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= lo,
            f"an int >= {lo}")


def int_between(lo: int, hi: int) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi,
            f"an int between {lo} and {hi}")


# Numeric config fields stay within this magnitude unless a field says otherwise:
# beyond it float32 maths on the learner (squared gradients, clipping norms)
# overflows, and training dies with NaNs instead of a ConfigError.
MAX_MAGNITUDE = 1e6


def number(lo: float, hi: float = MAX_MAGNITUDE, *, open_lo: bool = False):
    """A finite number in ``[lo, hi]`` (``(lo, hi]`` with ``open_lo``); NaN and
    infinities never pass."""
    def ok(v):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        try:
            v = float(v)
        except OverflowError:  # an int too large for a float
            return False
        return math.isfinite(v) and (v > lo if open_lo else v >= lo) and v <= hi
    lo_s = f"> {lo}" if open_lo else f">= {lo}"
    return ok, f"a number {lo_s} and <= {hi:g}"


def one_of(choices: tuple) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: isinstance(v, str) and v in choices), f"one of {list(choices)}"


def str_dict() -> tuple[Callable[[Any], bool], str]:
    return (lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
            "a dict with str keys")


def hidden_sizes() -> tuple[Callable[[Any], bool], str]:
    def ok(v):
        return (isinstance(v, (list, tuple)) and len(v) > 0
                and all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in v))
    return ok, "the hidden layer sizes, a non-empty list of ints > 0, e.g. (64, 64)"


def lr_schedule_pairs() -> tuple[Callable[[Any], bool], str]:
    """RLlib 1.x's ``lr_schedule``: ``[[timestep, lr], ...]``, piecewise linear in the
    env steps sampled (:func:`flowrl.ops.train_ops.piecewise_lr`)."""
    is_int = int_ge(0)[0]
    is_lr = number(0, 10)[0]

    def ok(v):
        if not isinstance(v, (list, tuple)) or not v or not all(
                isinstance(p, (list, tuple)) and len(p) == 2 and is_int(p[0]) and is_lr(p[1])
                for p in v):
            return False
        ts = [p[0] for p in v]
        return ts[0] == 0 and all(a < b for a, b in zip(ts, ts[1:])) and v[0][1] > 0
    return ok, ("a list of [timestep, lr] pairs: int timesteps from 0, increasing; lrs "
                "between 0 and 10, the first > 0 (e.g. [[0, 0.0003], [1000000, 0]] anneals "
                "linearly to 0 over 1M env steps)")


MULTIAGENT_KEYS = ("policies", "policy_mapping_fn", "policies_to_train", "count_steps_by")


def multiagent_table() -> tuple[Callable[[Any], bool], str]:
    def ok(v):
        if not isinstance(v, dict) or set(v) - set(MULTIAGENT_KEYS):
            return False
        policies, fn, train = (v.get(k) for k in MULTIAGENT_KEYS[:3])
        return ((policies is None or (isinstance(policies, dict) and all(
                    isinstance(k, str) and (spec is None or isinstance(spec, PolicySpec)
                                            or callable(spec)
                                            or isinstance(spec, tuple))  # checked at build
                    for k, spec in policies.items())))
                and (fn is None or callable(fn) or (isinstance(fn, dict) and all(
                    isinstance(p, str) for p in fn.values())))
                and (train is None or callable(train) or (
                    isinstance(train, (list, tuple, set))
                    and all(isinstance(p, str) for p in train))))
    return ok, ("a dict with keys among " + ", ".join(MULTIAGENT_KEYS) + " (policies: "
                "{id: PolicySpec, the seeds' (policy_class, obs_space, act_space, config) "
                "4-tuple, a policy class or None}, policy_mapping_fn: a callable or an "
                "{agent_id: policy_id} dict, "
                "policies_to_train: a list of ids, count_steps_by: 'env_steps' or "
                "'agent_steps')")



def boolean() -> tuple[Callable[[Any], bool], str]:
    return (lambda v: isinstance(v, bool)), "True or False"


def module_names() -> tuple[Callable[[Any], bool], str]:
    from flowrl.user_code import is_module_name
    return ((lambda v: isinstance(v, (list, tuple)) and all(is_module_name(m) for m in v)),
            "a list of module names to import, e.g. ['my_envs', 'my_models.nets']")


def path_text() -> tuple[Callable[[Any], bool], str]:
    """A non-empty string or ``os.PathLike`` (a file or directory path)."""
    return (lambda v: isinstance(v, os.PathLike) or (isinstance(v, str) and v != ""),
            "a path (a non-empty string)")


def or_none(check):
    ok, what = check
    return (lambda v: v is None or ok(v)), f"{what} or None"



_MAKE_KWARGS = {"max_episode_steps", "disable_env_checker", "render_mode", "autoreset",
                "apply_api_compatibility"}


def gym_spec(env_id: str):
    """``gymnasium.spec(env_id)``, also for gymnasium.make's ``"module:env_id"`` form, which
    imports ``module`` (where the env registers itself) first. Raises what gymnasium
    raises for an unknown id, and ModuleNotFoundError for a module that is not there.

    >>> gym_spec("gymnasium.envs.classic_control:CartPole-v1").id
    'CartPole-v1'
    """
    import gymnasium as gym
    module, _, name = env_id.rpartition(":")
    if module:
        importlib.import_module(module)
    return gym.spec(name)


def check_env_config(env: Any, env_config: dict, where: str) -> None:
    """For a registered gymnasium id, a ConfigError naming ``where`` when
    ``env_config`` has a key the env's constructor does not take (found from its
    signature, without building the env)."""
    if not isinstance(env, str) or not env_config:
        return
    if multi_agent_creator(env) is not None:
        check_multi_agent_env_config(env, env_config, where)
        return
    import gymnasium as gym
    try:
        spec = gym_spec(env)
        creator = spec.entry_point
        if isinstance(creator, str):
            creator = gym.envs.registration.load_env_creator(creator)
        params = inspect.signature(creator).parameters.values()
    except Exception:  # an entry point that cannot be inspected: the env decides
        return
    if any(p.kind is p.VAR_KEYWORD for p in params):
        return
    accepted = {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
    accepted |= _MAKE_KWARGS
    unknown = sorted(set(env_config) - accepted)
    if unknown:
        raise ConfigError(f"{where}: {env!r} takes no argument {unknown[0]!r}; it takes "
                          f"{sorted(accepted - _MAKE_KWARGS)} (and gymnasium.make's "
                          f"{sorted(_MAKE_KWARGS)})")



def check_env(env: Any, where: str) -> None:
    """A ConfigError (a FlowError) naming ``env`` unless it is a registered gymnasium
    id, gymnasium's ``"module:EnvId"``, a reference ``"pkg.mod:Name"`` to an env
    class or creator (:func:`flowrl.envs.env_reference`, which imports the module),
    a flowrl multi-agent id (:mod:`flowrl.envs.multi_agent`) or a callable
    ``env_creator(env_config)``."""
    if callable(env):
        return
    if not isinstance(env, str) or not env:
        raise ConfigError(f"{where}={env!r}: give a registered gymnasium env id "
                          "(e.g. 'CartPole-v1') or a callable env_creator(env_config)")
    if multi_agent_creator(env) is not None or env_reference(env, where) is not None:
        return
    import gymnasium as gym
    ensure_registered(env, f"{where}={env!r}")  # flowrl/ and ALE/ ids register on import
    try:
        gym_spec(env)
    except Exception:  # gymnasium raises several error types, all meaning "unknown"
        close = difflib.get_close_matches(env, [*gym.registry, *MULTI_AGENT_IDS], n=5,
                                          cutoff=0.5)
        hint = f"did you mean one of {close}? " if close else ""
        raise ConfigError(f"{where}={env!r}: unknown gymnasium environment; {hint}choose a "
                          "registered id (gymnasium.pprint_registry() lists them); for an env "
                          "a module registers, import it first (flowrl --import MODULE, the "
                          "config field imports) or write 'module:EnvId'; or name an env "
                          "class or creator as 'module:Name', or pass a callable") from None
