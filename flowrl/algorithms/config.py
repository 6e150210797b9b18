"""``AlgorithmConfig``: the typed config every algorithm's config extends.

A config is a dataclass whose ``__post_init__`` validates it: each class's
``checks`` table (field -> ``(ok, what)``, built from
:mod:`flowrl.algorithms.validators`) and the checks that span fields (the env and
its ``env_config``, the multi-agent table, evaluation overrides, callbacks).
A bad value is a ConfigError naming the field. Configs also read as mappings,
as RLlib 1.x code reads its config dict.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, ClassVar

from flowrl.algorithms.validators import (boolean, check_env, check_env_config, int_between,
                                          int_ge, module_names, multiagent_table, number,
                                          one_of, or_none, path_text, str_dict)
from flowrl.callbacks import check_callbacks
from flowrl.config_text import read_numbers, suggest
from flowrl.envs import PREPROCESSOR_PREFS
from flowrl.errors import ConfigError
from flowrl.models.config import ModelConfig
from flowrl.offline.estimators import method_options
from flowrl.offline.minari_data import import_minari
from flowrl.offline.parquet import import_pyarrow
from flowrl.offline.reader import list_files
from flowrl.offline.rllib_json import import_lz4
from flowrl.offline.settings import (SAMPLER, check_input_config, check_output_config,
                                     dataset_format, input_sources)
from flowrl.runtime.calls import BACKENDS
from flowrl.user_code import import_modules, load_reference, split_reference
from flowrl.workers.rollout_worker import VECTOR_ENVS

#: An algorithm's backends: the runtime's, less "auto" (an algorithm says where it runs).
ALGORITHM_BACKENDS = tuple(b for b in BACKENDS if b != "auto")
COUNT_STEPS_BY = ("env_steps", "agent_steps")


#: What ``AlgorithmConfig.evaluation_config`` may override for evaluation workers.
EVALUATION_OVERRIDES = ("explore", "env", "env_config", "num_envs_per_worker",
                        "preprocessor_pref", "num_cpus_per_worker", "seed", "input",
                        "input_config")
#: Bound on ``evaluation_duration`` (episodes per evaluation).
MAX_EVALUATION_EPISODES = 100_000

#: Settings of RLlib 1.x's configs (its COMMON_CONFIG and those of the algorithms
#: flowrl has) that flowrl names differently.
RLLIB_RENAMED = {"evaluation_num_episodes": "evaluation_duration",
                 "input_evaluation": "off_policy_estimation_methods",
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
    "in_evaluation", "local_tf_session_args", "log_level",
    "log_sys_usage", "logger_config", "metrics_smoothing_episodes", "monitor",
    "no_done_at_end", "normalize_actions", "num_cpus_for_driver", "num_gpus_per_worker",
    "observation_filter", "observation_space", "optimizer",
    "output_compress_columns", "output_max_file_size", "placement_strategy",
    "record_env", "remote_env_batch_wait_ms", "remote_worker_envs",
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
    [[0, 2.5e-4], [1e7, 0.0]]`` (:func:`flowrl.config_text.read_numbers`). A string
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

    Offline data (RLlib 1.x names; :mod:`flowrl.offline`, ``docs/offline.md``):
    ``output`` (a directory; None: off) makes every rollout worker write each batch
    it samples there, under ``output_config`` (``format``: ``"parquet"``, the default,
    or ``"json"``, RLlib 1.x's JSON lines; ``max_rows_per_file``; ``compression``, the
    Parquet codec; ``compress_columns``, the JSON columns packed as RLlib packed
    them). ``input`` (``"sampler"``: step the envs) set to a dataset (a path, a
    glob or a list of them) makes the workers read recorded batches instead, each
    remote worker its own share, so the plan trains from data unchanged; a dict
    ``{"sampler": 0.5, PATH: 0.5}`` mixes sources by probability. ``input_config``:
    ``format`` (None: from the file names), ``shuffle`` (seeded by ``seed``) and
    ``on_error`` (``"raise"``, or ``"skip"`` unreadable files with a warning).
    ``postprocess_inputs`` recomputes the recorded batches' postprocessing
    (advantages, value targets) with the current policy. A dataset path with no
    file is a ConfigError here.

    Evaluation (RLlib 1.x names; :mod:`flowrl.ops.evaluation`): with
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
    not counted in ``timesteps_total``. ``evaluation_config={"input": PATH}``
    evaluates on a held-out dataset instead of the env: the policy is scored
    off-policy on the dataset's first ``evaluation_duration`` episodes by the
    ``off_policy_estimation_methods`` (:class:`~flowrl.ops.evaluation.DatasetEvaluation`).

    ``off_policy_estimation_methods`` (RLlib 1.x's ``input_evaluation``; default
    none): the off-policy estimates, ``"is"``, ``"wis"``, ``"fqe"`` (a list, or a
    dict of name to options), reported under ``result["off_policy_estimation"]``
    by plans that estimate their train batches (MARWIL, BC) and under
    ``result["evaluation"]["off_policy_estimation"]`` by evaluation on a dataset.
    Single-agent only.

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
    input: Any = "sampler"
    input_config: dict = field(default_factory=dict)
    postprocess_inputs: bool = False
    output: str | None = None
    output_config: dict = field(default_factory=dict)
    off_policy_estimation_methods: Any = field(default_factory=list)
    has_learner_queue: ClassVar[bool] = False

    checks: ClassVar[dict[str, tuple]] = {
        "num_workers": int_ge(0), "num_envs_per_worker": int_ge(1),
        "max_policy_lag": or_none(int_ge(0)),
        "rollout_fragment_length": int_ge(1), "train_batch_size": int_ge(1),
        "lr": number(0, 10, open_lo=True), "gamma": number(0, 1), "num_gpus": number(0),
        "num_cpus_per_worker": number(0), "timesteps_per_iteration": int_ge(0),
        "min_time_s_per_reporting": number(0), "torch_threads": or_none(int_ge(1)),
        "backend": one_of(ALGORITHM_BACKENDS), "seed": or_none(int_between(0, 2**32 - 1)),
        "env_config": str_dict(), "multiagent": multiagent_table(), "imports": module_names(),
        "recreate_failed_workers": boolean(), "ignore_worker_failures": boolean(),
        "max_worker_restarts": or_none(int_ge(0)),
        "sample_timeout_s": or_none(number(0, open_lo=True)),
        "preprocessor_pref": or_none(one_of(PREPROCESSOR_PREFS)),
        "vector_env": one_of(VECTOR_ENVS), "create_env_on_driver": boolean(),
        "evaluation_interval": or_none(int_ge(1)),
        "evaluation_duration": int_between(1, MAX_EVALUATION_EPISODES),
        "evaluation_num_workers": int_ge(0), "evaluation_config": str_dict(),
        "evaluation_parallel_to_training": boolean(),
        "postprocess_inputs": boolean(), "output": or_none(path_text()),
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
        misspells (:func:`flowrl.config_text.suggest`). Constructors, ``config[key]``
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
        self._check_offline(name)
        methods = method_options(self.off_policy_estimation_methods,
                                 f"{name}.off_policy_estimation_methods")
        if methods and self.multiagent.get("policies"):
            raise ConfigError(f"{name}.off_policy_estimation_methods={list(methods)}: "
                              "off-policy estimates are single-agent; set it to [] for a "
                              "multi-agent config")
        self._check_evaluation(name)

    def _check_offline(self, name: str) -> None:
        """``input`` and ``output`` with their configs; a dataset that names no file
        fails here, before anything is built."""
        output = check_output_config(self.output_config, f"{name}.output_config")
        if self.output is not None:
            if output["format"] == "parquet":
                import_pyarrow(f"{name}.output_config['format']='parquet'")
            elif output["compress_columns"]:
                import_lz4(f"{name}.output_config['compress_columns']")
        input_config = check_input_config(self.input_config, f"{name}.input_config")
        for source, _ in input_sources(self.input, f"{name}.input"):
            if source != SAMPLER:
                where = f"{name}.input"
                fmt = dataset_format(source, input_config["format"], where)
                list_files(source, fmt, where)
                if fmt == "parquet":
                    import_pyarrow(where)
                elif fmt == "minari":
                    import_minari(where)

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
        if self.evaluation_dataset() is not None and not self.off_policy_estimation_methods:
            raise ConfigError(f"{name}.evaluation_config['input']: evaluation on a dataset "
                              "scores the policy off-policy, and off_policy_estimation_methods "
                              "is empty; set it, e.g. ['is', 'wis']")

    def evaluation_dataset(self) -> tuple[str, ...] | None:
        """The held-out dataset ``evaluation_config["input"]`` names (its paths), or
        None when evaluation plays the env. A dataset mixed with ``"sampler"`` is a
        ConfigError: an evaluation reads data or plays the env.

        >>> AlgorithmConfig(env="CartPole-v1").evaluation_dataset() is None
        True
        """
        name = type(self).__name__
        value = self.evaluation_config.get("input", SAMPLER)
        sources = input_sources(value, f"{name}.evaluation_config['input']")
        datasets = [s for s, _ in sources if s != SAMPLER]
        if datasets and len(sources) > 1:
            raise ConfigError(f"{name}.evaluation_config['input']={value!r}: evaluation reads "
                              "one dataset or plays the env; give a path (or a list of "
                              "paths) or 'sampler'")
        return datasets[0] if datasets else None

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
