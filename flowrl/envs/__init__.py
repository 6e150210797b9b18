"""flowrl's own envs, registered with gymnasium under ``flowrl/`` on import.

- ``flowrl/StatelessCartPole-v1``, ``flowrl/CueRecall-v0``: tasks that need memory
  (:mod:`flowrl.envs.memory`);
- ``flowrl/MinAtarBreakout-v0``: a 10x10 pixel task for CNN policies
  (:mod:`flowrl.envs.pixels`, ``pip install 'flowrl[minatar]'``);
- ``flowrl/MultiAgentCartPole-v1``: a multi-agent env id (not in gymnasium's
  registry, which holds single-agent envs; :mod:`flowrl.envs.multi_agent`, which
  also defines the multi-agent env protocol :class:`MultiAgentEnv` and
  :func:`make_multi_agent`; :class:`PettingZooEnv` wraps a PettingZoo env in it);
- ``ALE/...-v5`` ids are ale-py's; :func:`make_atari` adds the DeepMind
  preprocessing (:mod:`flowrl.envs.atari`, ``pip install 'flowrl[atari]'``).

Rollout workers build envs from the id string in their own process;
:func:`ensure_registered` makes an id's namespace known there first. An env may
also be named by a reference ``"pkg.mod:Name"`` (:func:`env_reference`): a class
or function of an importable module, or gymnasium's ``"module:EnvId"``.
Importing this package imports neither minatar nor ale-py.

>>> import gymnasium as gym
>>> env = gym.make("flowrl/CueRecall-v0", num_cues=2, delay=3)
>>> env.observation_space.shape, env.action_space
((4,), Discrete(2))
"""

from __future__ import annotations

import difflib
import inspect
from typing import Any, Callable

import gymnasium as gym

from flowrl.envs.atari import PREPROCESSOR_PREFS, import_ale, is_atari_id, make_atari
from flowrl.envs.memory import CueRecall, StatelessCartPole
from flowrl.envs.multi_agent import MultiAgentEnv, make_multi_agent, multi_agent_creator
from flowrl.envs.pettingzoo import PettingZooEnv
from flowrl.envs.pixels import MinAtarEnv
from flowrl.errors import ConfigError

_IDS = {
    "flowrl/StatelessCartPole-v1": dict(entry_point="flowrl.envs.memory:StatelessCartPole",
                                        max_episode_steps=500, reward_threshold=475.0),
    "flowrl/CueRecall-v0": dict(entry_point="flowrl.envs.memory:CueRecall",
                                reward_threshold=0.99),
    "flowrl/MinAtarBreakout-v0": dict(entry_point="flowrl.envs.pixels:MinAtarEnv",
                                      kwargs={"game": "breakout"}),
}


def register_envs() -> None:
    """Register the ``flowrl/`` ids that gymnasium's registry lacks (importing this
    package does it; calling it again changes nothing)."""
    for env_id, kwargs in _IDS.items():
        if env_id not in gym.registry:
            gym.register(env_id, **kwargs)


register_envs()


def ensure_registered(env_id: str, where: str = "") -> None:
    """Make ``env_id`` known to gymnasium in this process: ``flowrl/`` ids by
    :func:`register_envs`, ``ALE/`` ids by importing ale-py (a ConfigError saying
    ``pip install 'flowrl[atari]'`` when it is missing, starting with ``where``,
    default the id). Other ids are left to gymnasium.

    >>> ensure_registered("flowrl/StatelessCartPole-v1")
    >>> gym.spec("flowrl/StatelessCartPole-v1").reward_threshold
    475.0
    """
    if isinstance(env_id, str) and env_id.startswith("flowrl/"):
        register_envs()
    elif is_atari_id(env_id):
        import_ale(where or repr(env_id))


def env_reference(env: Any, where: str = "env") -> Callable[[dict], Any] | None:
    """The env creator that ``env``, a reference ``"pkg.mod:Name"``, names: attribute
    ``Name`` of module ``pkg.mod``, a ``gymnasium.Env`` subclass or a function,
    which workers call as ``Name(env_config)`` (RLlib 1.x's convention for env
    classes). None when ``env`` is no reference, and for gymnasium's own
    ``"module:EnvId"``: an env id that ``module`` registers when imported, which
    ``gymnasium.make`` makes. Both forms import the module, here and in every
    process that makes the env (Ray workers included), so it must be importable
    there. A ConfigError naming ``where``, the reference and the fix otherwise
    (see :mod:`flowrl.user_code`).

    >>> env_reference("CartPole-v1"), env_reference("gymnasium.envs.classic_control:CartPole-v1")
    (None, None)
    >>> env = env_reference("flowrl.envs.turn_based:TicTacToe")({})
    >>> type(env).__name__
    'TicTacToe'
    >>> env_reference("flowrl.envs.memory:NoSuchEnv-v0")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: env='flowrl.envs.memory:NoSuchEnv-v0': module 'flowrl.envs.memory' has no attribute 'NoSuchEnv-v0' and registers no gymnasium env of that id; give 'module:EnvClass' (a gymnasium.Env subclass or a function env_config -> env) or 'module:EnvId' with an id the module registers (gymnasium.register)
    """
    from flowrl.user_code import import_module, is_module_name, split_reference
    parts = split_reference(env)
    if parts is None:
        return None
    module_name, name = parts
    at = f"{where}={env!r}"
    try:
        module = import_module(module_name, at)
    except ConfigError as e:
        raise ConfigError(f"{e}; an env named 'module:EnvClass' or 'module:EnvId' needs its "
                          "module importable wherever the env is made") from None
    try:
        gym.spec(name)
        return None                       # gymnasium's "module:EnvId"
    except Exception:  # gymnasium raises several error types, all meaning "not registered"
        pass
    obj: Any = module
    for attr in name.split(".") if is_module_name(name) else [name]:
        obj = getattr(obj, attr, None)
    if obj is None:
        close = difflib.get_close_matches(name, [n for n in dir(module) if not n.startswith("_")],
                                          n=1)
        hint = f"did you mean {module_name}:{close[0]}? otherwise " if close else ""
        raise ConfigError(f"{at}: module {module_name!r} has no attribute {name!r} and registers "
                          f"no gymnasium env of that id; {hint}give 'module:EnvClass' (a "
                          "gymnasium.Env subclass or a function env_config -> env) or "
                          "'module:EnvId' with an id the module registers (gymnasium.register)")
    if not callable(obj):
        raise ConfigError(f"{at}: {name} is a {type(obj).__name__}, not an env class or a "
                          "function env_config -> env")
    try:
        signature = inspect.signature(obj)
    except (TypeError, ValueError):  # a builtin without a signature: the call decides
        return obj
    try:
        signature.bind({})
    except TypeError:
        raise ConfigError(f"{at}: workers call {name}(env_config) with the env_config dict, "
                          f"and {name}{signature} takes no such argument; give it one "
                          "(def __init__(self, env_config=None)), or register the env with "
                          "gymnasium.register and name its id ('module:EnvId')") from None
    return obj


def reports_episode_infos(env: Any) -> bool:
    """Whether ``env``'s wrapper chain (``env``, ``env.env``, ``env.env.env``...)
    holds a ``gymnasium.wrappers.RecordEpisodeStatistics`` (or its vector
    version). Such an env reports each finished episode as ``info["episode"]``
    (``"r"`` return, ``"l"`` length), and those are the returns to report: for
    :func:`make_atari`, whole games with unclipped scores, where the env's own
    ``terminated`` and rewards are per life and clipped.

    >>> reports_episode_infos(gym.make("CartPole-v1"))
    False
    >>> reports_episode_infos(gym.wrappers.RecordEpisodeStatistics(gym.make("CartPole-v1")))
    True
    """
    kinds = (gym.wrappers.RecordEpisodeStatistics, gym.wrappers.vector.RecordEpisodeStatistics)
    seen = set()
    while env is not None and id(env) not in seen:
        if isinstance(env, kinds):
            return True
        seen.add(id(env))
        env = getattr(env, "env", None)
    return False


__all__ = ["StatelessCartPole", "CueRecall", "MinAtarEnv", "make_atari", "is_atari_id",
           "ensure_registered", "register_envs", "env_reference", "reports_episode_infos",
           "PREPROCESSOR_PREFS",
           "multi_agent_creator", "MultiAgentEnv", "make_multi_agent", "PettingZooEnv"]
