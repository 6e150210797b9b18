"""``Algorithm`` and ``AlgorithmConfig``: the shared shell around an execution plan.

An algorithm is a typed config (validated in ``__post_init__``; a bad value is a
ConfigError naming the field), a policy class, and a static
``execution_plan(workers, config) -> LocalStream`` that reads like the algorithm.
``Algorithm.__init__`` builds the WorkerSet (starting Ray first when
``backend="ray"`` and Ray is not running; ``RAY_ADDRESS`` is respected), builds
the :class:`~flowrl.Plan` (``algo.plan``) and compiles it into a run.
``train()`` is one reporting step of that run (``next(run)``).

Checkpoints (:meth:`Algorithm.save` / :meth:`Algorithm.restore`, written
atomically by :mod:`flowrl.checkpoint`) hold the local worker's state (weights,
optimizer state, RNG, e.g. PPO's KL coefficient), the remote workers' policy
states, the run's metrics (counters, info: iteration, total time), the driver's
global RNG states, the config and the subclass's :meth:`Algorithm.extra_state`
(exploration state, replay buffers), so a restored algorithm, in this process or
a fresh one, continues where the saved one was. Remote workers' states are keyed
by ``worker_index``; reading a checkpoint runs no code unless ``restore(...,
allow_pickle=True)`` lets it load pickled user state.
:meth:`Algorithm.from_checkpoint` rebuilds an algorithm, config included, from a
checkpoint alone, and :meth:`Algorithm.compute_single_action` /
:meth:`Algorithm.predict` act on observations outside the plan
(:mod:`flowrl.inference`).
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import importlib
import inspect
import logging
import math
import os
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from flowrl.callbacks import call_hook, check_callbacks, make_callbacks, overrides
from flowrl.checkpoint import CHECKPOINT_FILE  # noqa: F401  (re-exported)
from flowrl.envs import PREPROCESSOR_PREFS, ensure_registered, env_reference, multi_agent_creator
from flowrl.envs.multi_agent import MULTI_AGENT_IDS, check_multi_agent_env_config
from flowrl.errors import ConfigError, EnvError, FlowError
from flowrl.evaluation import Evaluation
from flowrl.experiment import read_numbers, suggest
from flowrl.graph.plan import Plan
from flowrl.graph.stream import LocalStream
from flowrl.models.config import ModelConfig
from flowrl.ops.metric_ops import TRAINING_ITERATION
from flowrl.policies.replica import NumpyActingPolicy
from flowrl.runtime.calls import BACKENDS, ensure_ray
from flowrl.user_code import import_modules, load_reference, module_roots, split_reference
from flowrl.workers import PolicySpec, WorkerConfig, WorkerSet
from flowrl.workers.multi_agent_env import MultiAgentEnv
from flowrl.workers.rollout_worker import VECTOR_ENVS, as_policy_spec, check_policy_config

#: An algorithm's backends: the runtime's, less "auto" (an algorithm says where it runs).
ALGORITHM_BACKENDS = tuple(b for b in BACKENDS if b != "auto")
COUNT_STEPS_BY = ("env_steps", "agent_steps")


def _int_ge(lo: int) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= lo,
            f"an int >= {lo}")


def _int_between(lo: int, hi: int) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi,
            f"an int between {lo} and {hi}")


# Numeric config fields stay within this magnitude unless a field says otherwise:
# beyond it float32 maths on the learner (squared gradients, clipping norms)
# overflows, and training dies with NaNs instead of a ConfigError.
MAX_MAGNITUDE = 1e6


def _num(lo: float, hi: float = MAX_MAGNITUDE, *, open_lo: bool = False):
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


def _one_of(choices: tuple) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: isinstance(v, str) and v in choices), f"one of {list(choices)}"


def _str_dict() -> tuple[Callable[[Any], bool], str]:
    return (lambda v: isinstance(v, dict) and all(isinstance(k, str) for k in v),
            "a dict with str keys")


def _sizes() -> tuple[Callable[[Any], bool], str]:
    def ok(v):
        return (isinstance(v, (list, tuple)) and len(v) > 0
                and all(isinstance(h, int) and not isinstance(h, bool) and h > 0 for h in v))
    return ok, "the hidden layer sizes, a non-empty list of ints > 0, e.g. (64, 64)"


def _lr_schedule() -> tuple[Callable[[Any], bool], str]:
    """RLlib 1.x's ``lr_schedule``: ``[[timestep, lr], ...]``, piecewise linear in the
    env steps sampled (:func:`flowrl.ops.train_ops.piecewise_lr`)."""
    is_int = _int_ge(0)[0]
    is_lr = _num(0, 10)[0]

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


def _multiagent() -> tuple[Callable[[Any], bool], str]:
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
    import inspect

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


_BOOL = (lambda v: isinstance(v, bool), "True or False")

#: What ``AlgorithmConfig.evaluation_config`` may override for evaluation workers.
EVALUATION_OVERRIDES = ("explore", "env", "env_config", "num_envs_per_worker",
                        "preprocessor_pref", "num_cpus_per_worker", "seed")
#: Bound on ``evaluation_duration`` (episodes per evaluation).
MAX_EVALUATION_EPISODES = 100_000


def _module_names() -> tuple[Callable[[Any], bool], str]:
    from flowrl.user_code import is_module_name
    return ((lambda v: isinstance(v, (list, tuple)) and all(is_module_name(m) for m in v)),
            "a list of module names to import, e.g. ['my_envs', 'my_models.nets']")


def _or_none(check):
    ok, what = check
    return (lambda v: v is None or ok(v)), f"{what} or None"


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


#: Settings of RLlib 1.x's configs (its COMMON_CONFIG and those of the algorithms
#: flowrl has) that flowrl names differently.
RLLIB_RENAMED = {"evaluation_num_episodes": "evaluation_duration",
                 "min_iter_time_s": "min_time_s_per_reporting"}
#: Other settings of RLlib 1.x's configs. One that is no field of a config is
#: answered with how to add it (:meth:`AlgorithmConfig.unknown_field_hint`), not
#: with a field whose name happens to look alike.
RLLIB_KEYS = frozenset({
    "_disable_execution_plan_api", "_disable_preprocessor_api", "_fake_gpus",
    "action_space", "batch_mode", "clip_actions", "clip_rewards", "collect_metrics_timeout",
    "compress_observations", "custom_eval_function", "custom_resources_per_worker",
    "eager_tracing", "explore", "exploration_config", "extra_python_environs_for_driver",
    "extra_python_environs_for_worker", "fake_sampler", "framework", "horizon",
    "in_evaluation", "input", "input_evaluation", "local_tf_session_args", "log_level",
    "log_sys_usage", "logger_config", "metrics_smoothing_episodes", "monitor",
    "no_done_at_end", "normalize_actions", "num_cpus_for_driver", "num_gpus_per_worker",
    "observation_filter", "observation_space", "optimizer", "output",
    "output_compress_columns", "output_max_file_size", "placement_strategy",
    "postprocess_inputs", "record_env", "remote_env_batch_wait_ms", "remote_worker_envs",
    "render_env", "replay_sequence_length", "sample_async", "sample_collector",
    "shuffle_buffer_size", "simple_optimizer", "soft_horizon", "synchronize_filters",
    "tf_session_args",
    # PPO, A2C/A3C, IMPALA/APPO, DQN/Ape-X, DD-PPO
    "after_train_step", "before_learn_on_batch", "decay", "entropy_coeff_schedule",
    "epsilon", "final_prioritized_replay_beta", "keep_local_weights_in_sync",
    "microbatch_size", "momentum", "noisy", "num_atoms", "num_multi_gpu_tower_stacks",
    "opt_type", "prioritized_replay_beta_annealing_timesteps", "replay_buffer_config",
    "shuffle_sequences", "sigma0", "store_buffer_in_checkpoints",
    "torch_distributed_backend", "use_critic", "use_gae", "v_max", "v_min",
    "vtrace_drop_last_ts",
})


@dataclass
class AlgorithmConfig:
    """Fields shared by every algorithm (RLlib 1.x names where one exists).

    ``model`` is a :class:`~flowrl.models.ModelConfig`, a dict of its fields
    (``{"use_lstm": True}``, ``{"conv_filters": [[16, 3, 1]]}``) or the hidden
    layer sizes of the MLPs (``(64, 64)``), read into a ModelConfig;
    ``multiagent`` may hold ``policies`` (id -> PolicySpec, the seeds' 4-tuple
    ``(policy_class, obs_space, act_space, config)``, a policy class, or None; a
    None class means the algorithm's policy), ``policy_mapping_fn(agent_id,
    episode)`` (or, as a YAML spec can write it, an ``{agent_id: policy_id}`` dict
    naming ids of ``policies``), ``policies_to_train`` and ``count_steps_by``
    (``"env_steps"`` or ``"agent_steps"``).
    ``backend`` is ``"local"`` (in-process workers, the embedded default) or
    ``"ray"`` (remote workers are Ray actors). ``torch_threads`` sets the
    driver process's torch threads (``torch.set_num_threads``): the default 1
    suits small MLPs, whose ops are too small to split across threads
    (``benchmarks/ppo_cartpole.py`` measures it), and async learners (IMPALA, APPO),
    whose learner thread shares the cores with the samplers; a synchronous
    algorithm learning a CNN while its workers wait gains from more (PPO on Pong:
    1.35x env steps/s with 2 on 2 cores, ``benchmarks/torch_threads.py``); None
    leaves torch's setting alone.

    Failures of remote workers (Ray): ``recreate_failed_workers`` (default True)
    replaces a worker that died or stayed silent for ``sample_timeout_s`` seconds
    (None: the 600 s default bound) with a new one (same ``worker_index``, current
    weights); ``ignore_worker_failures`` drops it instead; with neither, a lost
    worker is a WorkerError. ``max_worker_restarts`` (None: no limit) caps the
    replacements over the whole run. Results report ``num_healthy_workers``,
    ``num_worker_restarts`` and ``num_lost_requests``.

    Defaults here are flowrl's, not RLlib 1.x's ``COMMON_CONFIG``: ``num_workers``
    0 (RLlib 2), ``lr`` 1e-3 (RLlib 1e-4), ``model`` ``fcnet_hiddens=(64, 64)``
    (RLlib ``(256, 256)``); ``rollout_fragment_length``, ``train_batch_size`` (200)
    and ``gamma`` (0.99) agree. Each algorithm's config says where its own defaults
    follow RLlib 1.x and where they differ.

    A numeric field also takes a string that spells a number, since PyYAML reads
    ``lr: 1e-3`` (no dot) as one, and so does ``--set lr=1e-3``: ``"1e-3"`` is read
    as 0.001 and ``"1e6"`` as 1000000, also inside lists such as ``lr_schedule:
    [[0, 2.5e-4], [1e7, 0.0]]`` (:func:`flowrl.experiment.read_numbers`). A string
    the field cannot take as a number (``"1.5"`` for ``train_batch_size``) is a
    ConfigError naming the field.

    ``preprocessor_pref`` (RLlib's name) applies to ``ALE/`` env ids only:
    ``"deepmind"`` (default) wraps them in the DeepMind preprocessing, None leaves
    the raw ale-py env (:func:`flowrl.envs.make_atari`). Workers get it with
    ``env_config``, through :class:`~flowrl.workers.WorkerConfig`.

    ``vector_env`` is how each rollout worker steps its ``num_envs_per_worker``
    envs, always as one batch with one batched policy forward: ``"sync"``
    (default; gymnasium's ``SyncVectorEnv``, one after the other in the worker) or
    ``"async"`` (gymnasium's ``AsyncVectorEnv``, one subprocess per env stepping in
    parallel; single-agent envs only; evaluation workers always use ``"sync"``).
    Results are the same for both. ``"envpool"`` (``ALE/`` ids, ``pip install
    envpool``) steps them in EnvPool's threads with its own DeepMind
    preprocessing: the same spaces and whole-game reporting, other frames, so
    its runs do not repeat sync ones
    (:mod:`flowrl.envs.envpool_env`). RLlib 1.x's nearest setting is
    ``remote_worker_envs`` (True: each env a Ray actor; flowrl's ``"async"`` uses
    subprocesses instead); see :func:`~flowrl.workers.rollout_worker.make_vector_env`
    and ``benchmarks/vector_envs.py``.

    ``callbacks`` (RLlib 1.x's name): a :class:`~flowrl.callbacks.DefaultCallbacks`
    subclass or a list of them, or None; see :mod:`flowrl.callbacks`.

    Custom code by name (:mod:`flowrl.user_code`): ``env`` and
    ``model.custom_model`` take a reference ``"pkg.mod:Name"`` (an env class or
    creator called as ``Name(env_config)``, a model class), which stays a string in
    the config and is imported where it is built. ``imports`` (flowrl's own; ``flowrl
    train --import MODULE``) lists modules imported before the config is checked,
    in this process and in every rollout worker: modules that register envs
    (``gymnasium.register``) or models (:func:`flowrl.models.register_model`). Remote
    Ray workers also get the directories those modules were found in on their
    ``PYTHONPATH`` (:func:`flowrl.user_code.module_roots`).

    ``create_env_on_driver`` (RLlib 1.x's name and default, False): with
    ``num_workers >= 1`` the driver's worker makes no env (nothing is built or
    reset on the driver for training); it builds its policies from the spaces
    remote worker 1 reports, and trains, holds the weights and computes actions
    as before. True gives it envs as well (they are not sampled while there are
    remote workers). With ``num_workers=0`` the driver's worker samples, so it
    always has envs. Evaluation (``evaluation_interval``, :meth:`Algorithm.evaluate`)
    has its own workers and its driver worker always has an env: it plays the
    episodes when ``evaluation_num_workers`` is 0, and those of a lost
    evaluation worker.

    Evaluation (RLlib 1.x names; :mod:`flowrl.evaluation`): with
    ``evaluation_interval=N`` (None: off) iterations ``N, 2N, ...`` report
    ``result["evaluation"]`` over exactly ``evaluation_duration`` whole episodes
    (default 10) played with the learner's current weights on a WorkerSet of
    their own: ``evaluation_num_workers`` remote workers, or with 0 the driver's
    evaluation worker. ``evaluation_config`` overrides fields for it (keys among
    :data:`EVALUATION_OVERRIDES`); it does not explore unless it says
    ``"explore": True``. ``evaluation_parallel_to_training`` (needs
    ``evaluation_num_workers >= 1``) starts each evaluation before the training
    step of its iteration, with the weights that step starts from; on Ray it runs
    beside the step, on the local backend just before it. Evaluation steps are
    not counted in ``timesteps_total``.

    >>> AlgorithmConfig(env="CartPole-v1", num_workers=-1)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: AlgorithmConfig.num_workers=-1: must be an int >= 0
    """

    env: Any = None
    env_config: dict = field(default_factory=dict)
    num_workers: int = 0
    num_envs_per_worker: int = 1
    rollout_fragment_length: int = 200
    train_batch_size: int = 200
    lr: float = 1e-3
    gamma: float = 0.99
    model: Any = field(default_factory=ModelConfig)
    multiagent: dict = field(default_factory=dict)
    num_gpus: float = 0
    num_cpus_per_worker: float = 1.0
    timesteps_per_iteration: int = 0
    min_time_s_per_reporting: float = 0.0
    seed: int | None = None
    backend: str = "local"
    torch_threads: int | None = 1
    recreate_failed_workers: bool = True
    ignore_worker_failures: bool = False
    max_worker_restarts: int | None = None
    sample_timeout_s: float | None = None
    preprocessor_pref: str | None = "deepmind"
    callbacks: Any = None
    imports: tuple = ()
    vector_env: str = "sync"
    create_env_on_driver: bool = False
    evaluation_interval: int | None = None
    evaluation_duration: int = 10
    evaluation_num_workers: int = 0
    evaluation_config: dict = field(default_factory=lambda: {"explore": False})
    evaluation_parallel_to_training: bool = False
    #: Drop rows acted by weights more than this many learner updates old (None: off).
    #: Only algorithms with a learner queue (IMPALA, APPO) have stale rows to drop.
    max_policy_lag: int | None = None
    has_learner_queue: ClassVar[bool] = False

    checks: ClassVar[dict[str, tuple]] = {
        "num_workers": _int_ge(0), "num_envs_per_worker": _int_ge(1),
        "max_policy_lag": _or_none(_int_ge(0)),
        "rollout_fragment_length": _int_ge(1), "train_batch_size": _int_ge(1),
        "lr": _num(0, 10, open_lo=True), "gamma": _num(0, 1), "num_gpus": _num(0),
        "num_cpus_per_worker": _num(0), "timesteps_per_iteration": _int_ge(0),
        "min_time_s_per_reporting": _num(0), "torch_threads": _or_none(_int_ge(1)),
        "backend": _one_of(ALGORITHM_BACKENDS), "seed": _or_none(_int_between(0, 2**32 - 1)),
        "env_config": _str_dict(), "multiagent": _multiagent(), "imports": _module_names(),
        "recreate_failed_workers": _BOOL, "ignore_worker_failures": _BOOL,
        "max_worker_restarts": _or_none(_int_ge(0)),
        "sample_timeout_s": _or_none(_num(0, open_lo=True)),
        "preprocessor_pref": _or_none(_one_of(PREPROCESSOR_PREFS)),
        "vector_env": _one_of(VECTOR_ENVS), "create_env_on_driver": _BOOL,
        "evaluation_interval": _or_none(_int_ge(1)),
        "evaluation_duration": _int_between(1, MAX_EVALUATION_EPISODES),
        "evaluation_num_workers": _int_ge(0), "evaluation_config": _str_dict(),
        "evaluation_parallel_to_training": _BOOL,
    }

    def __new__(cls, *args: Any, **fields: Any) -> "AlgorithmConfig":
        # The dataclass's __init__ would answer an unknown keyword with a bare TypeError.
        names = cls._field_names()
        for key in fields:
            if key not in names:
                raise ConfigError(f"{cls.__name__}({key}=...): unknown field {key!r}; "
                                  f"{cls.unknown_field_hint(key)}")
        return super().__new__(cls)

    @classmethod
    def unknown_field_hint(cls, key: Any) -> str:
        """How to fix ``key``, a name that is no field of this config: for a setting of
        RLlib 1.x, flowrl's name for it (:data:`RLLIB_RENAMED`) or how to add it to a
        config subclass (:data:`RLLIB_KEYS`); otherwise the field it most likely
        misspells (:func:`flowrl.experiment.suggest`). Constructors, ``config[key]``
        and :func:`flowrl.experiment.make_config` all answer with it.

        >>> AlgorithmConfig.unknown_field_hint("gama")
        "did you mean 'gamma'?"
        >>> AlgorithmConfig.unknown_field_hint("min_iter_time_s")
        "RLlib 1.x's 'min_iter_time_s' is 'min_time_s_per_reporting' here"
        >>> AlgorithmConfig.unknown_field_hint("simple_optimizer").split(": remove it")[0]
        "RLlib 1.x has this setting and flowrl's AlgorithmConfig does not"
        """
        names = cls._field_names()
        if isinstance(key, str) and RLLIB_RENAMED.get(key) in names:
            return f"RLlib 1.x's {key!r} is {RLLIB_RENAMED[key]!r} here"
        if isinstance(key, str) and key in RLLIB_KEYS:
            return (f"RLlib 1.x has this setting and flowrl's {cls.__name__} does not: "
                    "remove it, or, if your code reads it, declare it on a config subclass "
                    f"(@dataclass class MyConfig({cls.__name__}): {key}: Any = None) and "
                    "build the algorithm with that class (build_algorithm(name, MyConfig, "
                    "...))")
        return suggest(str(key), sorted(names))

    def __post_init__(self) -> None:
        name = type(self).__name__
        if self.max_policy_lag is not None and not self.has_learner_queue:
            raise ConfigError(
                f"{name}.max_policy_lag={self.max_policy_lag!r}: this algorithm trains "
                "without a learner queue, so no batch waits to go stale; only IMPALA and "
                "APPO take max_policy_lag. Remove it")
        for cls in reversed(type(self).__mro__):
            for f, (ok, what) in vars(cls).get("checks", {}).items():
                value = getattr(self, f)
                if ok(value):
                    continue
                number = read_numbers(value)  # "1e-3" from YAML or --set: the number it spells
                if not ok(number):
                    raise ConfigError(f"{name}.{f}={value!r}: must be {what}")
                setattr(self, f, number)
        self.imports = tuple(self.imports)
        import_modules(self.imports, f"{name}.imports")   # they may register the env or model
        self.model = ModelConfig.coerce(self.model, f"{name}.model")
        if split_reference(self.model.custom_model) is not None:
            load_reference(self.model.custom_model, f"{name}.model.custom_model")
        by = self.multiagent.get("count_steps_by", "env_steps")
        if by not in COUNT_STEPS_BY:
            raise ConfigError(f"{name}.multiagent['count_steps_by']={by!r}: choose one of "
                              f"{list(COUNT_STEPS_BY)}")
        self._check_policy_table(name)
        check_env(self.env, f"{name}.env")
        check_env_config(self.env, self._make_kwargs(name), f"{name}.env_config")
        check_callbacks(self.callbacks, f"{name}.callbacks")
        if self.vector_env == "envpool":
            from flowrl.envs.envpool_env import envpool_task, import_envpool
            try:
                envpool_task(self.env, self.env_config, self.preprocessor_pref)
            except ConfigError as e:
                raise ConfigError(f"{name}.vector_env='envpool': {e}") from None
            import_envpool(f"{name}.vector_env='envpool'")
        self._check_evaluation(name)

    def _make_kwargs(self, name: str) -> dict:
        """``env_config`` less the keys that are the Atari preprocessing's rather than
        the env constructor's (``screen_size``, checked here)."""
        from flowrl.envs.atari import is_atari_id, screen_size_of
        if not (is_atari_id(self.env) and isinstance(self.env_config, dict)):
            return self.env_config
        kwargs = dict(self.env_config)
        try:
            screen_size_of(self.env, kwargs, self.preprocessor_pref)
        except ConfigError as e:
            raise ConfigError(f"{name}.env_config: {e}") from None
        return kwargs

    def _check_policy_table(self, name: str) -> None:
        table = self.multiagent.get("policy_mapping_fn")
        if not isinstance(table, dict):
            return
        policies = sorted(self.multiagent.get("policies") or {})
        for agent, pid in table.items():
            if pid not in policies:
                raise ConfigError(f"{name}.multiagent['policy_mapping_fn'][{agent!r}]={pid!r}: "
                                  f"no such policy in multiagent.policies ({policies}); map "
                                  "the agent to one of them or add it there")

    def _check_evaluation(self, name: str) -> None:
        if self.evaluation_parallel_to_training and self.evaluation_num_workers == 0:
            raise ConfigError(f"{name}.evaluation_parallel_to_training=True needs evaluation "
                              "workers to run beside training; set evaluation_num_workers >= 1 "
                              "or evaluation_parallel_to_training=False")
        unknown = sorted(set(self.evaluation_config) - set(EVALUATION_OVERRIDES))
        if unknown:
            raise ConfigError(f"{name}.evaluation_config: unknown key {unknown[0]!r}; it may "
                              f"override {list(EVALUATION_OVERRIDES)}")
        explore = self.evaluation_config.get("explore", False)
        if not isinstance(explore, bool):
            raise ConfigError(f"{name}.evaluation_config['explore']={explore!r}: must be True "
                              "or False")
        if set(self.evaluation_config) - {"explore"}:
            try:
                self.for_evaluation()
            except ConfigError as e:
                raise ConfigError(f"{name}.evaluation_config={self.evaluation_config!r}: "
                                  f"{e}") from None

    def for_evaluation(self) -> tuple["AlgorithmConfig", bool]:
        """``(config, explore)`` for evaluation workers: this config with
        ``evaluation_config``'s overrides applied, and whether they explore (False
        unless ``evaluation_config`` says ``"explore": True``)."""
        overrides = {"explore": False, **self.evaluation_config}
        explore = overrides.pop("explore")
        return dataclasses.replace(self, evaluation_config={}, **overrides), explore

    @property
    def count_steps_by(self) -> str:
        """``multiagent["count_steps_by"]`` (default ``"env_steps"``): how plans count
        batch sizes (e.g. ``ConcatBatches(count_steps_by=...)``)."""
        return self.multiagent.get("count_steps_by", "env_steps")

    def replace(self, **changes: Any) -> "AlgorithmConfig":
        """A validated copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)

    # -- read as a mapping, as RLlib 1.x code reads its config dict ------------------
    #: RLlib 1.x keys spelled differently here (``lambda`` is a Python keyword).
    MAPPING_ALIASES: ClassVar[dict[str, str]] = {"lambda": "lambda_"}

    def _field_for(self, key: Any) -> str | None:
        name = self.MAPPING_ALIASES.get(key, key) if isinstance(key, str) else None
        return name if name in self._field_names() else None

    @classmethod
    def _field_names(cls) -> frozenset[str]:
        return frozenset(f.name for f in dataclasses.fields(cls))

    def __getitem__(self, key: str) -> Any:
        """``config[key]``: the field ``key`` (``"lambda"`` reads ``lambda_``), so RLlib
        1.x code that reads its config as a dict runs as written. Read-only: change a
        config with :meth:`replace`. ``config["multiagent"]`` gives the multiagent
        dict with RLlib 1.x's defaults filled in (``policies`` ``{}``,
        ``policy_mapping_fn`` and ``policies_to_train`` None, ``count_steps_by``
        ``"env_steps"``), so ``config["multiagent"]["count_steps_by"]`` works;
        the ``multiagent`` attribute stays what was given. A key that is no field is
        a KeyError saying how to fix it (:meth:`unknown_field_hint`: the close field,
        or for a setting of RLlib 1.x that flowrl lacks, how to add it).

        >>> c = AlgorithmConfig(env="CartPole-v1", lr=0.01)
        >>> c["lr"], c.get("lr"), "lr" in c, c.get("framework", "torch"), "framework" in c
        (0.01, 0.01, True, 'torch', False)
        >>> c["multiagent"]["count_steps_by"]
        'env_steps'
        >>> c["gama"]
        Traceback (most recent call last):
        ...
        KeyError: "AlgorithmConfig has no field 'gama' (did you mean 'gamma'?)"
        """
        name = self._field_for(key)
        if name is None:
            raise KeyError(f"{type(self).__name__} has no field {key!r} "
                           f"({self.unknown_field_hint(key)})")
        value = getattr(self, name)
        if name == "multiagent":
            value = {"policies": {}, "policy_mapping_fn": None, "policies_to_train": None,
                     "count_steps_by": "env_steps", **value}
        return value

    def get(self, key: str, default: Any = None) -> Any:
        """``config[key]``, or ``default`` when ``key`` is no field (``dict.get``)."""
        return self[key] if self._field_for(key) is not None else default

    def __contains__(self, key: object) -> bool:
        """Whether ``key`` is a field (or an RLlib spelling of one, like ``"lambda"``)."""
        return self._field_for(key) is not None

    def keys(self) -> list[str]:
        """The field names, so ``dict(config)`` and ``{**config}`` give a plain dict."""
        return [f.name for f in dataclasses.fields(self)]


def user_modules(config: AlgorithmConfig) -> list[str]:
    """The modules of custom code ``config`` names: its ``imports``, the module of a
    ``"module:Name"`` env or ``custom_model``, and the module defining an env
    creator or model class given as an object.

    >>> user_modules(AlgorithmConfig(env="flowrl.envs.turn_based:TicTacToe", imports=["json"]))
    ['json', 'flowrl.envs.turn_based']
    """
    modules = list(config.imports)
    for value in (config.env, config.model.custom_model):
        parts = split_reference(value)
        if parts is not None:
            modules.append(parts[0])
        elif callable(value) and isinstance(getattr(value, "__module__", None), str):
            modules.append(value.__module__)
    return modules


def _validate_worker_env(validate: Callable[[Any, int], None], worker) -> None:
    if worker.env is not None:  # the driver's worker has none (create_env_on_driver)
        validate(worker.env, worker.worker_index)


class _LazyClass:
    """A class attribute that names a class as ``"module:Name"`` and imports it on
    first access, so importing an algorithm's module does not import torch (the
    policy modules do); :meth:`Algorithm.__init__` overlaps that import with
    ``ray.init``.

    >>> class Holder:
    ...     cls = _LazyClass("collections:OrderedDict")
    >>> Holder.cls.__name__, Holder.__dict__["cls"].module
    ('OrderedDict', 'collections')
    """

    def __init__(self, path: str):
        self.module, _, self.name = path.partition(":")

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return getattr(importlib.import_module(self.module), self.name)


def _global_rng_state() -> dict[str, Any]:
    import random

    import numpy as np
    import torch
    return {"python": random.getstate(), "numpy": np.random.get_state(),
            "torch": torch.get_rng_state().numpy().copy()}


def _set_global_rng_state(state: dict[str, Any] | None) -> None:
    if not state:
        return
    import random

    import numpy as np
    import torch
    random.setstate(state["python"])
    np.random.set_state(state["numpy"])
    torch.set_rng_state(torch.tensor(state["torch"]))


def _config_state(config: AlgorithmConfig) -> dict[str, Any] | None:
    """The config's fields for a checkpoint (``flowrl evaluate`` rebuilds the config
    from them), or None when one of them can be neither stored nor pickled. Fields
    that are functions or classes (an env creator, a mapping function) end up in the
    checkpoint's ``user_state.pkl``."""
    from flowrl import checkpoint
    fields = {f.name: getattr(config, f.name) for f in dataclasses.fields(config) if f.init}
    fields["model"] = config.model.to_dict()
    try:
        checkpoint.encode_state(fields)
    except FlowError:
        return None
    return fields


def saved_config(cls: type, state: dict[str, Any], where: str) -> AlgorithmConfig:
    """The config of algorithm class ``cls`` rebuilt from a checkpoint's ``state``
    (what :func:`_config_state` stored), validated as any config is. A ConfigError
    naming ``where`` when the checkpoint holds none, when a field was pickled and
    the checkpoint was read without ``allow_pickle``, or when this flowrl's config
    refuses it. :meth:`Algorithm.from_checkpoint` and
    :func:`flowrl.evaluation.load_for_evaluation` both use it."""
    from flowrl import checkpoint
    fields = state.get("config")
    if not isinstance(fields, dict):
        raise ConfigError(f"{where}: the checkpoint holds no config (it could not be stored "
                          "when saved); build the algorithm from its config and call "
                          "restore() instead")
    pickled = checkpoint.find_pickled(fields)
    if pickled is not None:
        raise ConfigError(f"{where}: its config field {pickled.where} ({pickled.type_name}) "
                          "was saved with pickle, and unpickling can run any code: pass "
                          "allow_pickle=True (CLI: --allow-pickle) only for a checkpoint you "
                          "trust")
    try:
        return cls.config_class(**fields)
    except (TypeError, FlowError) as e:
        raise ConfigError(f"{where}: its config cannot be rebuilt here "
                          f"({type(e).__name__}: {e})") from None


def _configured_lr(worker: Any) -> None:
    """Set each trainable policy's optimizer back to the policy's configured ``lr``.
    A worker acting through a numpy replica has no optimizer to reset (it builds one
    at the configured rate when it first needs one), and asking the worker for its
    real policy would import torch there: such policies are left alone."""
    for policy_id in worker.policies_to_train:
        policy = worker.policy_map[policy_id]
        if isinstance(policy, NumpyActingPolicy):
            continue
        lr, optimizer = getattr(policy, "lr", None), getattr(policy, "optimizer", None)
        if lr is not None and optimizer is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr


def _env_text(env: Any) -> str:
    """How restore errors name an env: an id quoted, a creator by its name, an env
    read back from a checkpoint's pickle by its type."""
    from flowrl.checkpoint import PickledValue
    from flowrl.workers.rollout_worker import describe_env
    return env.type_name if isinstance(env, PickledValue) else describe_env(env)


def policy_spaces_text(local: Any) -> dict[str, dict[str, str]]:
    """``{policy_id: {"observation_space": ..., "action_space": ...}}`` of the
    driver's worker ``local``, as text (``str`` of each gymnasium space): what a
    checkpoint records of the env its policies were built for."""
    return {pid: {"observation_space": str(obs), "action_space": str(act)}
            for pid, (obs, act) in local.policy_spaces().items()}


def restore_local_worker(local: Any, state: dict[str, Any], where: str, env: Any) -> None:
    """Give the driver's worker ``local`` a checkpoint's ``worker`` state (weights,
    optimizer and RNG states of its policies), ``state`` being the whole checkpoint
    and ``env`` the config's env. A ConfigError naming ``where`` when the
    checkpoint's policies differ from the worker's; when the spaces its policies
    were built for (``state["spaces"]``) differ, naming the env of the checkpoint
    and of the config and the spaces that differ; when the model does not fit,
    naming both envs where they differ (checkpoints without spaces).
    :meth:`Algorithm.restore` and :func:`flowrl.evaluation.load_for_evaluation`
    both use it."""
    worker_state = state["worker"]
    saved_policies = set(worker_state["policies"])
    if saved_policies != set(local.policy_map):
        raise ConfigError(f"{where}: the checkpoint has policies {sorted(saved_policies)}, "
                          f"this algorithm {sorted(local.policy_map)}")
    config = state.get("config") if isinstance(state.get("config"), dict) else {}
    trained_on = (f"env {_env_text(config['env'])}" if config.get("env") is not None
                  else "an env it does not name")
    here = f"this config's env is {_env_text(env)}"
    saved_spaces = state.get("spaces") if isinstance(state.get("spaces"), dict) else {}
    for pid, spaces in sorted(policy_spaces_text(local).items()):
        saved = saved_spaces.get(pid)
        if not isinstance(saved, dict):
            continue          # a checkpoint written before spaces were recorded
        differ = [f"{key.replace('_', ' ')} {saved.get(key)} there, {spaces[key]} here"
                  for key in ("observation_space", "action_space") if saved.get(key) != spaces[key]]
        if differ:
            raise ConfigError(f"{where}: the checkpoint was trained on {trained_on} and "
                              f"{here}, and policy {pid!r} sees other spaces: "
                              f"{'; '.join(differ)}; restore it with the env (and env_config) "
                              "it was trained on, or train a new policy for this env")
    try:
        local.set_state(worker_state)
    except ConfigError as e:
        if config.get("env") is not None and config.get("env") != env:
            raise ConfigError(f"{where}: the checkpoint was trained on {trained_on} and "
                              f"{here}, and its model does not fit ({e}); restore it with the "
                              "env it was trained on") from None
        raise ConfigError(f"{where}: the checkpoint's model does not fit this config "
                          f"({e}); use the model settings it was trained with") from None


def _indexed_state(worker) -> tuple[int, dict[str, Any]]:
    """``(worker_index, state)`` of ``worker``: a checkpoint keys workers' states by
    their index, which a restarted or dropped worker does not change."""
    return worker.worker_index, worker.get_state()


def _set_indexed_state(states: dict[int, dict[str, Any]], worker) -> None:
    """Give ``worker`` the state saved for its ``worker_index``, if there is one."""
    if worker.worker_index in states:
        worker.set_state(states[worker.worker_index])


class Algorithm:
    """Base class: subclasses set ``config_class``, ``policy_class``, ``name`` and
    implement ``policy_config(config)`` and ``execution_plan(workers, config)``.

    ``Algorithm(config)`` or ``Algorithm(**fields)``; see the module docstring.
    """

    config_class: ClassVar[type] = AlgorithmConfig
    policy_class: ClassVar[Any] = None
    name: ClassVar[str] = "algorithm"
    #: Remote workers :meth:`from_checkpoint` keeps (:meth:`inference_config`): none,
    #: or one for an algorithm that samples only on remote workers.
    inference_workers: ClassVar[int] = 0

    def __init__(self, config: AlgorithmConfig | None = None, **fields: Any):
        if config is None:
            config = self.config_class(**fields)
        elif fields:
            config = config.replace(**fields)
        if not isinstance(config, self.config_class):
            raise ConfigError(f"{type(self).__name__}(config=...) takes a "
                              f"{self.config_class.__name__}, got {type(config).__name__}")
        self.config = config
        self.workers = None
        #: The driver's callbacks instance (``on_train_result``); workers build their own.
        self.callbacks = make_callbacks(config.callbacks)
        self._evaluation: Evaluation | None = None
        try:
            policy_class = self._hook("get_policy_class", self.get_policy_class, config)
            declared = inspect.getattr_static(type(self), "policy_class", None)  # not imported yet
            if policy_class is None and declared is None and not config.multiagent.get("policies"):
                raise ConfigError(f"{self.name}: no policy class: get_policy_class returned None "
                                  "and the algorithm has no default policy; return a policy "
                                  "class or set multiagent.policies")
            self._hook("before_init", self.before_init)
            eval_remotes = config.evaluation_num_workers if config.evaluation_interval else 0
            if config.backend == "ray" and config.num_workers + eval_remotes > 0:
                lazy = policy_class is None and isinstance(declared, _LazyClass)
                ensure_ray(max(os.cpu_count() or 1,
                               (config.num_workers + eval_remotes) * config.num_cpus_per_worker),
                           preload=[declared.module] if lazy else [])
            self._policy_class = policy_class if policy_class is not None else self.policy_class
            if config.torch_threads is not None:
                import torch
                torch.set_num_threads(config.torch_threads)
            self.workers = self._hook(
                "make_workers", self.make_workers, env=config.env,
                policy_class=self._policy_class,
                worker_config=self.worker_config(config, self._policy_class),
                num_workers=config.num_workers, backend=config.backend)
            validate = type(self).validate_env
            self._hook("validate_env", self.workers.foreach_worker,
                       functools.partial(_validate_worker_env, validate))
            output = self.execution_plan(self.workers, config)
            if not isinstance(output, LocalStream):
                raise FlowError(f"{type(self).__name__}.execution_plan must return a LocalStream "
                                f"of result dicts, got {output!r}")
            if config.evaluation_interval is not None:
                self._evaluation = self._make_evaluation()
                output = output.for_each(self._evaluation, name="evaluation")
            self.plan = Plan(output, name=self.name)
            timeout = {} if config.sample_timeout_s is None else {
                "remote_timeout_s": config.sample_timeout_s}
            self._run = self.plan.compile(backend="auto", seed=config.seed or 0,
                                          local_worker=self.workers.local_worker(), **timeout)
            restarts = getattr(self.workers, "restarts", None)
            if restarts is not None:  # replacements count in the run's one counter
                restarts.report_to(self._run.metrics)
            self._hook("after_init", self.after_init)
        except BaseException:
            if getattr(self, "_run", None) is not None:
                self._run.stop()
            if self.workers is not None:
                self.workers.stop()
            if self._evaluation is not None:
                self._evaluation.workers.stop()
            raise
        self.last_result: dict | None = None

    #: What each hook does by default, for messages about a hook the user did not write.
    _HOOK_STEPS: ClassVar[dict[str, str]] = {
        "get_policy_class": "choosing the policy class", "before_init": "before_init",
        "make_workers": "building the workers", "validate_env": "validating the envs",
        "after_init": "after_init"}

    def _hook(self, name: str, fn: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        """Run hook ``name``; an error is blamed on the hook only when the user wrote
        it (overrode it or passed it to build_algorithm). An env that fails to build
        or reset is an EnvError naming the env and the worker, whoever called it."""
        written = (inspect.getattr_static(type(self), name, None)
                   is not inspect.getattr_static(Algorithm, name, None))
        try:
            return fn(*args, **kwargs)
        except EnvError:
            raise
        except FlowError as e:
            if name in str(e) or not written:
                raise
            raise type(e)(f"{self.name}: hook {name} raised: {e}") from e
        except Exception as e:
            if not written:
                raise ConfigError(f"{self.name}: {self._HOOK_STEPS[name]} raised "
                                  f"{type(e).__name__}: {e}") from e
            raise ConfigError(f"{self.name}: hook {name} raised {type(e).__name__}: {e}; fix "
                              f"the {name} hook or the config it checks") from e

    # -- build_trainer-style hooks (override in subclasses or via build_algorithm) --
    @staticmethod
    def get_policy_class(config: AlgorithmConfig) -> Any:
        """The policy class to use for ``config``; None means ``policy_class``.
        Called first."""
        return None

    def before_init(self) -> None:
        """Called after ``get_policy_class``, before the workers are built."""

    def make_workers(self, *, env: Any, policy_class: Any, worker_config: WorkerConfig,
                     num_workers: int, backend: str) -> WorkerSet:
        """Build the :class:`WorkerSet` (override to customize; RLlib's ``_make_workers``)."""
        return WorkerSet(env, policy_class, worker_config, num_workers=num_workers,
                         backend=backend)

    @staticmethod
    def validate_env(env: Any, worker_index: int) -> None:
        """Check each worker's env (``worker.env``) where the worker lives, local worker
        first (when it has one: ``create_env_on_driver``) then every remote one; raise
        to reject it. A staticmethod: it runs in
        the worker's process, without the algorithm."""

    def after_init(self) -> None:
        """Called last, once the workers, the plan and its run exist."""

    @classmethod
    def policy_config(cls, config: AlgorithmConfig) -> dict[str, Any]:
        """The policy's keyword hyperparameters, from the typed config."""
        return {"model": config.model.resolved(), "lr": config.lr, "gamma": config.gamma}

    @staticmethod
    def execution_plan(workers: WorkerSet, config: AlgorithmConfig) -> LocalStream:
        raise NotImplementedError("subclasses build their plan here")

    @classmethod
    def worker_config(cls, config: AlgorithmConfig, policy_class: Any = None) -> WorkerConfig:
        """The :class:`WorkerConfig` for ``config``; multi-agent policies with no class
        get ``policy_class`` (default: the algorithm's ``policy_class``)."""
        policy_class = policy_class if policy_class is not None else cls.policy_class
        policy_config = cls.policy_config(config)
        ma = config.multiagent
        policies = None
        if ma.get("policies"):
            policies = {}
            for pid, value in ma["policies"].items():
                spec = as_policy_spec(pid, value, default_class=policy_class)
                if spec.policy_class is not None:
                    check_policy_config(spec.policy_class, spec.config,
                                        f"{type(config).__name__}.multiagent.policies[{pid!r}]")
                policies[pid] = dataclasses.replace(spec, config={**policy_config, **spec.config})
        return WorkerConfig(
            env_config=config.env_config, num_envs_per_worker=config.num_envs_per_worker,
            rollout_fragment_length=config.rollout_fragment_length, seed=config.seed,
            policy_config=policy_config, policies=policies,
            policy_mapping_fn=ma.get("policy_mapping_fn"),
            policies_to_train=ma.get("policies_to_train"),
            num_cpus_per_worker=config.num_cpus_per_worker,
            recreate_failed_workers=config.recreate_failed_workers,
            ignore_worker_failures=config.ignore_worker_failures,
            max_worker_restarts=config.max_worker_restarts,
            sample_timeout_s=config.sample_timeout_s,
            preprocessor_pref=config.preprocessor_pref, callbacks=config.callbacks,
            vector_env=config.vector_env, create_env_on_driver=config.create_env_on_driver,
            imports=config.imports, python_path=module_roots(user_modules(config)))

    # -- running -----------------------------------------------------------------
    @property
    def metrics(self):
        """The run's :class:`~flowrl.metrics.MetricsContext` (counters, timers, info)."""
        return self._run.metrics

    def to_dot(self) -> str:
        """The plan as DOT text with the run's live figures on each node (items/s,
        busy share, queue depth, and an operator's own figures, such as IMPALA's
        policy lag): ``Plan.to_dot(run.stats())``."""
        return self._run.plan.to_dot(self._run.stats())

    def _make_evaluation(self) -> Evaluation:
        """The evaluation step and its own WorkerSet (``evaluation_config`` applied,
        envs made for evaluation); see :class:`~flowrl.evaluation.Evaluation`."""
        config, explore = self.config.for_evaluation()
        # Evaluation plays its envs one by one; its driver worker plays the episodes of
        # a lost evaluation worker, so it has envs whatever create_env_on_driver says.
        worker_config = dataclasses.replace(
            self.worker_config(config, self._policy_class), explore=explore, training=False,
            vector_env="sync", create_env_on_driver=True)
        workers = WorkerSet(config.env, self._policy_class, worker_config,
                            num_workers=self.config.evaluation_num_workers,
                            backend=self.config.backend)
        try:
            if isinstance(workers.local_worker().env, MultiAgentEnv):
                raise ConfigError(f"{self.name}: evaluation (evaluation_interval="
                                  f"{self.config.evaluation_interval!r}) plays single-agent envs "
                                  "and this env is multi-agent; leave evaluation_interval None")
        except BaseException:
            workers.stop()
            raise
        return Evaluation(workers, self.workers, interval=self.config.evaluation_interval,
                          duration=self.config.evaluation_duration, explore=explore,
                          parallel=self.config.evaluation_parallel_to_training,
                          seed=config.seed)

    @property
    def evaluation_workers(self) -> WorkerSet | None:
        """The evaluation WorkerSet (None until evaluation is configured or first run)."""
        return self._evaluation.workers if self._evaluation is not None else None

    def evaluate(self) -> dict[str, Any]:
        """Run one evaluation now with the learner's current weights and return
        ``{"evaluation": {...}}`` (RLlib 1.x's shape; the inner dict is what
        ``result["evaluation"]`` holds: exactly ``evaluation_duration`` episodes).
        Builds the evaluation workers on first use when ``evaluation_interval`` is
        None. Touches no counter."""
        if self._evaluation is None:
            self._evaluation = self._make_evaluation()
        iteration = self._run.metrics.counters.get(TRAINING_ITERATION, 0)
        return {"evaluation": self._evaluation.evaluate(iteration)}

    def train(self) -> dict[str, Any]:
        """Run the plan to its next result: one reporting step. Returns the result dict
        (with ``"evaluation"`` on every ``evaluation_interval``-th iteration), after the
        callbacks' ``on_train_result`` (``algorithm=self``, also as ``trainer=``)
        changed it."""
        if self._evaluation is not None:
            self._evaluation.before_iteration(
                self._run.metrics.counters.get(TRAINING_ITERATION, 0) + 1)
        try:
            result = next(self._run)
        except StopIteration:
            raise FlowError(f"{self.name}: the plan ended (was stop() called?); build a new "
                            "algorithm to train again") from None
        if overrides(self.callbacks, "on_train_result"):
            call_hook(self.callbacks, "on_train_result", algorithm=self, trainer=self,
                      result=result)
        self.last_result = result
        return result

    def get_policy(self, policy_id: str = "default_policy"):
        """The learner's (local worker's) policy."""
        return self.workers.local_worker().get_policy(policy_id)

    def compute_single_action(self, observation: Any, state: Any = None, *,
                              explore: bool = False, policy_id: str = "default_policy",
                              prev_action: Any = None, prev_reward: float | None = None) -> Any:
        """The action of policy ``policy_id`` (the learner's) for one observation,
        as the env takes it (RLlib 1.x's name; :func:`flowrl.inference.compute_single_action`).

        ``observation`` is one observation of the env the config builds (Dict and
        Tuple ones are flattened as the workers flatten them). The greedy action
        unless ``explore``. A recurrent policy returns ``(action, state_out)``,
        starting from ``state`` (None: the initial state) and taking the previous
        step's ``prev_action`` and ``prev_reward`` (None: zeros); any other returns
        the action alone. A wrong shape is a ConfigError (a ValueError) naming the
        shape the policy takes. Touches no counter.

        >>> from flowrl.algorithms import PPO
        >>> with PPO(env="CartPole-v1", seed=0) as algo:
        ...     algo.compute_single_action([0.0, 0.0, 0.0, 0.0]) in (0, 1)
        True
        """
        from flowrl import inference
        return inference.compute_single_action(
            self.get_policy(policy_id), observation, state, explore=explore,
            prev_action=prev_action, prev_reward=prev_reward, env=self._driver_env(),
            where=f"{type(self).__name__}.compute_single_action")

    def predict(self, observation: Any, state: Any = None, episode_start: Any = None,
                deterministic: bool = True, *, policy_id: str = "default_policy",
                prev_action: Any = None, prev_reward: Any = None) -> tuple[Any, Any]:
        """``(actions, state)`` for one observation or a batch, as Stable-Baselines3's
        ``predict`` (:func:`flowrl.inference.predict`): one observation gives one
        action, a batch ``(B, *obs_shape)`` an array of ``B``; ``state`` is None
        unless the policy is recurrent, and rows whose ``episode_start`` is true
        start from the initial state. ``deterministic=False`` samples.

        >>> import numpy as np
        >>> from flowrl.algorithms import PPO
        >>> with PPO(env="CartPole-v1", seed=0) as algo:
        ...     actions, state = algo.predict(np.zeros((5, 4), np.float32))
        >>> actions.shape, state
        ((5,), None)
        """
        from flowrl import inference
        return inference.predict(
            self.get_policy(policy_id), observation, state, episode_start, deterministic,
            prev_action=prev_action, prev_reward=prev_reward, env=self._driver_env(),
            where=f"{type(self).__name__}.predict")

    def _driver_env(self) -> Any:
        """The driver's worker's env (None when it has none), whose observation
        flattening acting outside the loop applies."""
        return getattr(self.workers.local_worker(), "env", None)

    # -- checkpoints ---------------------------------------------------------------
    def extra_state(self) -> dict[str, Any]:
        """Algorithm-specific state for checkpoints (exploration state, replay
        buffers, ...); :meth:`save` stores it and :meth:`restore` hands it to
        :meth:`restore_extra_state`. Plain data (dicts, lists, tuples, str, numbers,
        None) and numpy arrays / torch tensors are stored as JSON and safetensors;
        any other object is pickled into the checkpoint's ``user_state.pkl``, which
        :meth:`restore` reads only with ``allow_pickle=True``. The default has none."""
        return {}

    def restore_extra_state(self, state: dict[str, Any]) -> None:
        """Apply what :meth:`extra_state` returned when the checkpoint was saved."""

    def save(self, path: str) -> str:
        """Write a checkpoint into directory ``path`` atomically; returns its
        ``state.json`` (the layout: :mod:`flowrl.checkpoint`).

        A checkpoint holds the local worker's state (weights, optimizer state, the
        policies' RNGs), every remote worker's policy state (their sampling RNGs)
        keyed by its ``worker_index``, the run's metrics (counters, info), the
        driver's python/numpy/torch global RNG states, the worker seeds, the config's
        fields (when they can be stored, for ``flowrl evaluate``), the spaces each
        policy was built for (as text: a restore with an env of other spaces names
        both envs) and :meth:`extra_state`. The write goes aside and is renamed into place
        (:func:`flowrl.checkpoint.write_checkpoint`): a failed save raises FlowError
        and, unless it says otherwise, leaves an earlier checkpoint at ``path``
        byte-identical.
        """
        from flowrl import checkpoint
        states = dict(self.workers.foreach_worker(_indexed_state))
        state = {"algorithm": self.name,
                 "worker": states.pop(0),
                 "remote_workers": states,
                 "metrics": self._run.metrics.save(),
                 "rng": _global_rng_state(),
                 "seeds": {"seed": self.config.seed,
                           "num_workers": len(self.workers.remote_workers())},
                 "config": _config_state(self.config),
                 "spaces": policy_spaces_text(self.workers.local_worker()),
                 "extra": self.extra_state()}
        return checkpoint.write_checkpoint(path, state)

    def restore(self, path: str, *, allow_pickle: bool = False) -> None:
        """Load a checkpoint written by :meth:`save`: its ``state.json``, its
        directory, or a directory of numbered checkpoints (the latest complete one).

        Restores weights, optimizer and RNG states, counters and :meth:`extra_state`,
        except the learning rate: a torch optimizer's state carries the rate of the
        run that saved it, and the optimizers take this config's ``lr`` instead (so
        ``--restore ... --set lr=X`` and PBT's mutated rates apply); with an
        ``lr_schedule`` the restored rate stays, the schedule's at the saved step;
        each remote worker gets the policy state saved for its ``worker_index`` (a
        worker with none keeps its own) and then the restored weights. Reading runs
        no code from the checkpoint: state that was pickled (``user_state.pkl``) is
        loaded only with ``allow_pickle=True``, for checkpoints you trust. Raises
        ConfigError with a one-line reason (nothing is changed or written) when the
        checkpoint is missing, unreadable, of format 1, from another algorithm or
        from an incompatible model, or needs pickle and ``allow_pickle`` is False.
        """
        from flowrl import checkpoint
        state = checkpoint.read_checkpoint(path, allow_pickle=allow_pickle)
        self._restore_state(state, f"{self.name}.restore({path!r})")

    def _restore_state(self, state: dict[str, Any], where: str) -> None:
        """Apply a checkpoint's ``state`` as read by
        :func:`~flowrl.checkpoint.read_checkpoint` (see :meth:`restore`)."""
        from flowrl import checkpoint
        if state.get("algorithm") != self.name:
            raise ConfigError(f"{where}: the checkpoint is from {state.get('algorithm')!r}, "
                              f"not {self.name!r}")
        missing = sorted({"worker", "metrics"} - set(state))
        if missing or not isinstance(state["worker"], dict) or "policies" not in state["worker"]:
            raise ConfigError(f"{where}: the checkpoint lacks {missing or ['worker.policies']}; "
                              "it was not written by Algorithm.save()")
        remotes = state.get("remote_workers") or {}
        if not isinstance(remotes, dict):
            raise ConfigError(f"{where}: the checkpoint's remote_workers is not a mapping of "
                              "worker_index to state; it was not written by Algorithm.save()")
        for part in ("worker", "remote_workers", "metrics", "rng", "extra"):
            found = checkpoint.find_pickled(state.get(part))
            if found is not None:
                raise ConfigError(
                    f"{where}: {found.where} ({found.type_name}) was saved with pickle in "
                    f"{found.file}, and unpickling can run any code: pass allow_pickle=True "
                    "(CLI: --restore-allow-pickle) only for a checkpoint from a source you "
                    "trust, or make extra_state() return plain data and arrays")
        restore_local_worker(self.workers.local_worker(), state, where, self.config.env)
        self.workers.foreach_worker(functools.partial(_set_indexed_state, remotes))
        unsaved = sorted(set(self.workers.worker_indices()) - set(remotes))
        if unsaved:
            logging.getLogger("flowrl").info(
                "%s: the checkpoint has no state for remote workers %s; their samplers start "
                "from the config's seed", where, unsaved)
        if getattr(self.config, "lr_schedule", None) is None:
            self.workers.foreach_worker(_configured_lr)
        self.workers.sync_weights()
        self._run.metrics.restore(state["metrics"])
        _set_global_rng_state(state.get("rng"))
        self.restore_extra_state(state.get("extra") or {})

    @classmethod
    def inference_config(cls, config: AlgorithmConfig) -> AlgorithmConfig:
        """The config :meth:`from_checkpoint` rebuilds a saved ``config`` with: the
        local backend, :attr:`inference_workers` remote workers (in-process there)
        and no evaluation workers; the rest as saved."""
        return config.replace(backend="local", num_workers=cls.inference_workers,
                              evaluation_num_workers=0, evaluation_parallel_to_training=False)

    @classmethod
    def from_checkpoint(cls, path: str, *, allow_pickle: bool = False,
                        **changes: Any) -> "Algorithm":
        """The algorithm a checkpoint holds, rebuilt from it alone: ``path`` is a
        checkpoint, a directory of numbered checkpoints (its latest complete one), a
        ``flowrl train`` run directory (the latest in its ``checkpoint/``), or a Ray
        Tune trial's checkpoint directory or trial directory
        (:func:`~flowrl.checkpoint.resolve_checkpoint`).

        On ``Algorithm`` it builds the algorithm the checkpoint names; on a subclass
        it builds that subclass, and a checkpoint of another algorithm is a
        ConfigError naming both. The config is the saved one (``algo.config``) made
        for acting by :meth:`inference_config`: the local backend and no remote
        workers (one, in-process, where the algorithm samples only on them; DD-PPO,
        which runs only on Ray, keeps one there), so inference needs no cluster;
        ``changes`` then override any field (``num_workers=4, backend="ray"`` to
        train on at full size).

        Restored, as :meth:`restore` restores them: the driver's weights, optimizer
        and RNG states, the counters and result info (``training_iteration``,
        ``timesteps_total``, the smoothing window), the driver's global RNG states
        and :meth:`extra_state` (exploration state, replay buffers). Not restored:
        the saved backend and worker counts (unless ``changes`` give them back),
        remote workers' sampler states for indices the rebuilt algorithm lacks,
        and the envs, which start fresh. Config fields or extra state saved with
        pickle (an env creator function, a custom class) load only with
        ``allow_pickle=True``, for checkpoints you trust. ConfigError (one line)
        when the checkpoint cannot be read or rebuilt.

        >>> import tempfile
        >>> from flowrl.algorithms import PG
        >>> d = tempfile.mkdtemp()
        >>> with PG(env="CartPole-v1", train_batch_size=50, rollout_fragment_length=50,
        ...         seed=0) as algo:
        ...     _ = algo.train(); _ = algo.save(d)
        >>> with Algorithm.from_checkpoint(d) as restored:
        ...     counters = restored.metrics.counters
        ...     type(restored).__name__, restored.config.num_workers, counters["training_iteration"]
        ('PG', 0, 1)
        """
        from flowrl import checkpoint
        where = f"{cls.__name__}.from_checkpoint({path!r})"
        state = checkpoint.read_checkpoint(path, allow_pickle=allow_pickle)
        saved = state.get("algorithm")
        if cls is Algorithm:
            from flowrl.experiment import algorithm_class
            try:
                cls = algorithm_class(saved)
            except ConfigError as e:
                raise ConfigError(f"{where}: the checkpoint is from algorithm {saved!r}, which "
                                  f"is not built in ({e}); call from_checkpoint on the class "
                                  "that wrote it") from None
        elif saved != cls.name:
            raise ConfigError(f"{where}: the checkpoint is from {saved!r}, not {cls.name!r}; "
                              "call it on that algorithm's class, or on Algorithm to build "
                              "whichever algorithm the checkpoint names")
        config = cls.inference_config(saved_config(cls, state, where))
        if changes:
            config = config.replace(**changes)
        algo = cls(config)
        try:
            algo._restore_state(state, where)
        except BaseException:
            algo.stop()
            raise
        return algo

    def stop(self) -> None:
        """Stop the run and the workers (idempotent)."""
        run = getattr(self, "_run", None)
        if run is not None:
            run.stop()
        self.workers.stop()
        self._stop_evaluation()

    def _stop_evaluation(self) -> None:
        """Stop the evaluation workers, if any (idempotent; for subclasses' ``stop``)."""
        evaluation = getattr(self, "_evaluation", None)
        if evaluation is not None:
            evaluation.cancel()
            evaluation.workers.stop()

    def __enter__(self) -> "Algorithm":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self.config.env!r}, backend={self.config.backend!r})"


HOOKS = ("get_policy_class", "validate_env", "before_init", "after_init", "make_workers")
_STATIC_HOOKS = ("get_policy_class", "validate_env")


def build_algorithm(name: str, default_config: type, default_policy: Any,
                    execution_plan: Callable[[WorkerSet, Any], LocalStream],
                    **hooks: Callable[..., Any]) -> type:
    """An :class:`Algorithm` subclass from parts, for users porting RLlib's
    ``build_trainer``.

    ``default_config`` is the config class (an :class:`AlgorithmConfig` subclass),
    ``default_policy`` the policy class (may be None when ``get_policy_class``
    always answers or every multi-agent policy names its class),
    ``execution_plan(workers, config) -> LocalStream`` of result dicts. ``hooks``
    may be ``get_policy_class(config)``, ``validate_env(env, worker_index)``,
    ``before_init(algo)``, ``after_init(algo)`` and ``make_workers(algo, *, env,
    policy_class, worker_config, num_workers, backend)``; they run in the order
    get_policy_class, before_init, (make_workers), validate_env on every worker,
    after_init. A hook that raises is a ConfigError naming it.

    >>> from flowrl.algorithms.pg import PG, PGConfig
    >>> from flowrl.policies import PGPolicy
    >>> seen = []
    >>> MyPG = build_algorithm("my_pg", PGConfig, PGPolicy, PG.execution_plan,
    ...                        after_init=lambda algo: seen.append(algo.name))
    >>> algo = MyPG(env="CartPole-v1", train_batch_size=100, rollout_fragment_length=100)
    >>> MyPG.name, seen, algo.train()["timesteps_total"]
    ('my_pg', ['my_pg'], 100)
    >>> algo.stop()
    """
    if not isinstance(name, str) or not name:
        raise ConfigError(f"build_algorithm(name={name!r}): give a non-empty string")
    if not (isinstance(default_config, type) and issubclass(default_config, AlgorithmConfig)):
        raise ConfigError(f"build_algorithm({name!r}, default_config={default_config!r}): give "
                          "the config class, an AlgorithmConfig subclass")
    if not callable(execution_plan):
        raise ConfigError(f"build_algorithm({name!r}, execution_plan={execution_plan!r}): give "
                          "a function execution_plan(workers, config) -> LocalStream")
    unknown = sorted(set(hooks) - set(HOOKS))
    if unknown:
        raise ConfigError(f"build_algorithm({name!r}): unknown hooks {unknown}; the hooks are "
                          f"{list(HOOKS)}")
    attrs: dict[str, Any] = {"name": name, "config_class": default_config,
                             "policy_class": default_policy,
                             "execution_plan": staticmethod(execution_plan),
                             "__doc__": f"Algorithm {name!r} built with build_algorithm."}
    for hook, fn in hooks.items():
        if fn is None:
            continue
        if not callable(fn):
            raise ConfigError(f"build_algorithm({name!r}, {hook}={fn!r}): a hook must be callable")
        attrs[hook] = staticmethod(fn) if hook in _STATIC_HOOKS else fn
    class_name = "".join(part.capitalize() for part in name.replace("-", "_").split("_")) or "Algo"
    return type(class_name, (Algorithm,), attrs)


__all__ = ["Algorithm", "AlgorithmConfig", "check_env", "check_env_config", "gym_spec",
           "ensure_ray", "build_algorithm", "HOOKS"]
