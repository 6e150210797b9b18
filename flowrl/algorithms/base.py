"""``Algorithm`` and ``AlgorithmConfig``: the shared shell around an execution plan.

An algorithm is a typed config (validated in ``__post_init__``; a bad value is a
ConfigError naming the field), a policy class, and a static
``execution_plan(workers, config) -> LocalStream`` that reads like the algorithm.
``Algorithm.__init__`` builds the WorkerSet (starting Ray first when
``backend="ray"`` and Ray is not running; ``RAY_ADDRESS`` is respected), builds
the :class:`~flowrl.Plan` (``algo.plan``) and compiles it into a run.
``train()`` is one reporting step of that run (``next(run)``).

Checkpoints (:meth:`Algorithm.save` / :meth:`Algorithm.restore`) hold the local
worker's state (weights, optimizer state, RNG, e.g. PPO's KL coefficient) and
the run's metrics (counters, info: iteration, total time), so a restored
algorithm, in this process or a fresh one, continues where the saved one was.
"""

from __future__ import annotations

import dataclasses
import difflib
import os
import pickle
from dataclasses import dataclass, field
from typing import Any, Callable, ClassVar

from flowrl.errors import ConfigError, FlowError
from flowrl.graph.plan import Plan
from flowrl.graph.stream import LocalStream
from flowrl.workers import PolicySpec, WorkerConfig, WorkerSet

BACKENDS = ("local", "ray")
CHECKPOINT_FILE = "algorithm_state.pkl"


def _int_ge(lo: int) -> tuple[Callable[[Any], bool], str]:
    return (lambda v: isinstance(v, int) and not isinstance(v, bool) and v >= lo,
            f"an int >= {lo}")


def _num(lo: float, hi: float = float("inf"), *, open_lo: bool = False):
    def ok(v):
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return False
        return (v > lo if open_lo else v >= lo) and v <= hi
    lo_s = f"> {lo}" if open_lo else f">= {lo}"
    return ok, (f"a number {lo_s}" if hi == float("inf") else f"a number {lo_s} and <= {hi}")


_BOOL = (lambda v: isinstance(v, bool), "True or False")


def _or_none(check):
    ok, what = check
    return (lambda v: v is None or ok(v)), f"{what} or None"


def check_env(env: Any, where: str) -> None:
    """A ConfigError (a FlowError) naming ``env`` unless it is a registered gymnasium
    id or a callable ``env_creator(env_config)``."""
    if callable(env):
        return
    if not isinstance(env, str) or not env:
        raise ConfigError(f"{where}={env!r}: give a registered gymnasium env id "
                          "(e.g. 'CartPole-v1') or a callable env_creator(env_config)")
    import gymnasium as gym
    try:
        gym.spec(env)
    except Exception:  # gymnasium raises several error types, all meaning "unknown"
        close = difflib.get_close_matches(env, list(gym.registry), n=5, cutoff=0.5)
        hint = f"did you mean one of {close}? " if close else ""
        raise ConfigError(f"{where}={env!r}: unknown gymnasium environment; {hint}choose a "
                          "registered id (gymnasium.pprint_registry() lists them), register it "
                          "with gymnasium.register, or pass an env_creator callable") from None


@dataclass
class AlgorithmConfig:
    """Fields shared by every algorithm (RLlib 1.x names where one exists).

    ``model`` is the hidden layer sizes of the policy and value MLPs;
    ``multiagent`` may hold ``policies`` (id -> PolicySpec, policy class or None
    for the algorithm's policy), ``policy_mapping_fn`` and ``policies_to_train``.
    ``backend`` is ``"local"`` (in-process workers, the embedded default) or
    ``"ray"`` (remote workers are Ray actors). ``torch_threads`` sets the
    driver process's torch threads (``torch.set_num_threads``): the default 1
    suits small MLPs, whose ops are too small to split across threads
    (``benchmarks/ppo_cartpole.py`` measures it); None leaves torch's setting alone.

    Failures of remote workers (Ray): ``recreate_failed_workers`` (default True)
    replaces a worker that died or stayed silent for ``sample_timeout_s`` seconds
    (None: the 600 s default bound) with a new one (same ``worker_index``, current
    weights); ``ignore_worker_failures`` drops it instead; with neither, a lost
    worker is a WorkerError. ``max_worker_restarts`` (None: no limit) caps the
    replacements over the whole run. Results report ``num_healthy_workers``,
    ``num_worker_restarts`` and ``num_lost_requests``.

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
    model: tuple = (64, 64)
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

    checks: ClassVar[dict[str, tuple]] = {
        "num_workers": _int_ge(0), "num_envs_per_worker": _int_ge(1),
        "rollout_fragment_length": _int_ge(1), "train_batch_size": _int_ge(1),
        "lr": _num(0, open_lo=True), "gamma": _num(0, 1), "num_gpus": _num(0),
        "num_cpus_per_worker": _num(0), "timesteps_per_iteration": _int_ge(0),
        "min_time_s_per_reporting": _num(0), "torch_threads": _or_none(_int_ge(1)),
        "recreate_failed_workers": _BOOL, "ignore_worker_failures": _BOOL,
        "max_worker_restarts": _or_none(_int_ge(0)),
        "sample_timeout_s": _or_none(_num(0, open_lo=True)),
    }

    def __post_init__(self) -> None:
        name = type(self).__name__
        for cls in reversed(type(self).__mro__):
            for f, (ok, what) in vars(cls).get("checks", {}).items():
                value = getattr(self, f)
                if not ok(value):
                    raise ConfigError(f"{name}.{f}={value!r}: must be {what}")
        if self.backend not in BACKENDS:
            raise ConfigError(f"{name}.backend={self.backend!r}: choose one of {list(BACKENDS)}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)):
            raise ConfigError(f"{name}.seed={self.seed!r}: must be an int or None")
        model = self.model
        if isinstance(model, int) or not all(isinstance(h, int) and not isinstance(h, bool)
                                             and h > 0 for h in model) or not len(model):
            raise ConfigError(f"{name}.model={model!r}: give the hidden layer sizes, e.g. (64, 64)")
        self.model = tuple(model)
        unknown = sorted(set(self.multiagent) - {"policies", "policy_mapping_fn",
                                                 "policies_to_train"})
        if unknown:
            raise ConfigError(f"{name}.multiagent has unknown keys {unknown}; use policies, "
                              "policy_mapping_fn, policies_to_train")
        check_env(self.env, f"{name}.env")

    def replace(self, **changes: Any) -> "AlgorithmConfig":
        """A validated copy with ``changes`` applied."""
        return dataclasses.replace(self, **changes)


def ensure_ray(num_cpus: float) -> None:
    """Start Ray if it is not running: ``RAY_ADDRESS`` (a cluster) if set, else a local
    instance with ``num_cpus`` CPUs and no dashboard."""
    import ray
    if ray.is_initialized():
        return
    if os.environ.get("RAY_ADDRESS"):
        ray.init(address=os.environ["RAY_ADDRESS"], log_to_driver=False)
    else:
        ray.init(num_cpus=int(max(1, num_cpus)), include_dashboard=False, log_to_driver=False)


class Algorithm:
    """Base class: subclasses set ``config_class``, ``policy_class``, ``name`` and
    implement ``policy_config(config)`` and ``execution_plan(workers, config)``.

    ``Algorithm(config)`` or ``Algorithm(**fields)``; see the module docstring.
    """

    config_class: ClassVar[type] = AlgorithmConfig
    policy_class: ClassVar[Any] = None
    name: ClassVar[str] = "algorithm"

    def __init__(self, config: AlgorithmConfig | None = None, **fields: Any):
        if config is None:
            config = self.config_class(**fields)
        elif fields:
            config = config.replace(**fields)
        if not isinstance(config, self.config_class):
            raise ConfigError(f"{type(self).__name__}(config=...) takes a "
                              f"{self.config_class.__name__}, got {type(config).__name__}")
        self.config = config
        if config.torch_threads is not None:
            import torch
            torch.set_num_threads(config.torch_threads)
        if config.backend == "ray" and config.num_workers > 0:
            ensure_ray(max(os.cpu_count() or 1, config.num_workers * config.num_cpus_per_worker))
        self.workers = WorkerSet(config.env, self.policy_class, self.worker_config(config),
                                 num_workers=config.num_workers, backend=config.backend)
        try:
            output = self.execution_plan(self.workers, config)
            if not isinstance(output, LocalStream):
                raise FlowError(f"{type(self).__name__}.execution_plan must return a LocalStream "
                                f"of result dicts, got {output!r}")
            self.plan = Plan(output, name=self.name)
            timeout = {} if config.sample_timeout_s is None else {
                "remote_timeout_s": config.sample_timeout_s}
            self._run = self.plan.compile(backend="auto", seed=config.seed or 0,
                                          local_worker=self.workers.local_worker(), **timeout)
        except BaseException:
            self.workers.stop()
            raise
        self.last_result: dict | None = None

    # -- hooks for subclasses ----------------------------------------------------
    @classmethod
    def policy_config(cls, config: AlgorithmConfig) -> dict[str, Any]:
        """The policy's keyword hyperparameters, from the typed config."""
        return {"hidden_sizes": config.model, "lr": config.lr, "gamma": config.gamma}

    @staticmethod
    def execution_plan(workers: WorkerSet, config: AlgorithmConfig) -> LocalStream:
        raise NotImplementedError("subclasses build their plan here")

    @classmethod
    def worker_config(cls, config: AlgorithmConfig) -> WorkerConfig:
        policy_config = cls.policy_config(config)
        ma = config.multiagent
        policies = None
        if ma.get("policies"):
            policies = {}
            for pid, spec in ma["policies"].items():
                if spec is None:
                    spec = PolicySpec(cls.policy_class)
                elif not isinstance(spec, PolicySpec):
                    spec = PolicySpec(spec)
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
            sample_timeout_s=config.sample_timeout_s)

    # -- running -----------------------------------------------------------------
    @property
    def metrics(self):
        """The run's :class:`~flowrl.metrics.MetricsContext` (counters, timers, info)."""
        return self._run.metrics

    def train(self) -> dict[str, Any]:
        """Run the plan to its next result: one reporting step. Returns the result dict."""
        try:
            result = next(self._run)
        except StopIteration:
            raise FlowError(f"{self.name}: the plan ended (was stop() called?); build a new "
                            "algorithm to train again") from None
        self.last_result = result
        return result

    def get_policy(self, policy_id: str = "default_policy"):
        """The learner's (local worker's) policy."""
        return self.workers.local_worker().get_policy(policy_id)

    # -- checkpoints ---------------------------------------------------------------
    def save(self, path: str) -> str:
        """Write a checkpoint into directory ``path`` (created); returns the file written."""
        os.makedirs(path, exist_ok=True)
        state = {"algorithm": self.name, "worker": self.workers.local_worker().get_state(),
                 "metrics": self._run.metrics.save()}
        file = os.path.join(path, CHECKPOINT_FILE)
        tmp = file + ".tmp"
        with open(tmp, "wb") as f:
            pickle.dump(state, f, protocol=pickle.HIGHEST_PROTOCOL)
        os.replace(tmp, file)
        return file

    def restore(self, path: str) -> None:
        """Load a checkpoint written by :meth:`save` (its directory or file): weights,
        optimizer state and counters; remote workers get the restored weights."""
        file = os.path.join(path, CHECKPOINT_FILE) if os.path.isdir(path) else path
        if not os.path.exists(file):
            raise ConfigError(f"{self.name}.restore({path!r}): no checkpoint there (expected "
                              f"{CHECKPOINT_FILE} written by save())")
        with open(file, "rb") as f:
            state = pickle.load(f)
        if state.get("algorithm") != self.name:
            raise ConfigError(f"{self.name}.restore({path!r}): the checkpoint is from "
                              f"{state.get('algorithm')!r}, not {self.name!r}")
        self.workers.local_worker().set_state(state["worker"])
        self.workers.sync_weights()
        self._run.metrics.restore(state["metrics"])

    def stop(self) -> None:
        """Stop the run and the workers (idempotent)."""
        run = getattr(self, "_run", None)
        if run is not None:
            run.stop()
        self.workers.stop()

    def __enter__(self) -> "Algorithm":
        return self

    def __exit__(self, *exc) -> None:
        self.stop()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(env={self.config.env!r}, backend={self.config.backend!r})"


__all__ = ["Algorithm", "AlgorithmConfig", "check_env", "ensure_ray"]
