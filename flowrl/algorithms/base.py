"""``Algorithm`` and ``AlgorithmConfig``: the shared shell around an execution plan.

An algorithm is a typed config (validated in ``__post_init__``; a bad value is a
ConfigError naming the field), a policy class, and a static
``execution_plan(workers, config) -> LocalStream`` that reads like the algorithm.
``Algorithm.__init__`` builds the WorkerSet (starting Ray first when
``backend="ray"`` and Ray is not running; ``RAY_ADDRESS`` is respected), builds
the :class:`~flowrl.Plan` (``algo.plan``) and compiles it into a run.
``train()`` is one reporting step of that run (``next(run)``). The config and its
validation live in :mod:`flowrl.algorithms.config` and
:mod:`flowrl.algorithms.validators` (re-exported here), what a checkpoint holds
and how it is checked in :mod:`flowrl.checkpoint`.

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
import functools
import importlib
import inspect
import logging
import math
import os
from typing import Any, Callable, ClassVar

from flowrl import checkpoint
from flowrl.algorithms.config import (ALGORITHM_BACKENDS, AlgorithmConfig,  # noqa: F401
                                      user_modules)
from flowrl.algorithms.validators import check_env, check_env_config, gym_spec  # noqa: F401
from flowrl.callbacks import call_hook, make_callbacks, overrides
from flowrl.checkpoint import (CHECKPOINT_FILE, restore_local_worker,  # noqa: F401
                               saved_config)
from flowrl.envs.multi_agent import MultiAgentEnv
from flowrl.errors import ConfigError, DivergedError, EnvError, FlowError
from flowrl.graph.plan import Plan
from flowrl.graph.stream import LocalStream
from flowrl.offline.settings import SAMPLER, check_input_config, input_sources
from flowrl.metrics import LEARNER_INFO
from flowrl.offline.estimators import required_columns
from flowrl.ops.evaluation import DatasetEvaluation, Evaluation
from flowrl.ops.metric_ops import TRAINING_ITERATION
from flowrl.runtime.calls import ensure_ray, resolve_backend
from flowrl.user_code import module_roots
from flowrl.workers import WorkerConfig, WorkerSet
from flowrl.workers.dataset_input import DEFAULT_INPUT_COLUMNS, check_dataset, make_reader
from flowrl.workers.rollout_worker import (as_policy_spec, check_policy_config,
                                           policy_parameters)


def _has_multi_agent_env(worker) -> bool:
    return isinstance(worker.env, MultiAgentEnv)


def _validate_worker_env(validate: Callable[[Any, int], None], worker) -> None:
    if worker.env is not None:  # the driver's worker has none (create_env_on_driver)
        validate(worker.env, worker.worker_index)


def nonfinite_loss(learner_info: dict[str, Any]) -> tuple[str, str, float] | None:
    """The first ``(policy_id, stat, value)`` among learner stats ``{policy_id:
    stats}`` whose name holds ``"loss"`` and whose value is NaN or infinite; None
    when every loss is finite.

    >>> nonfinite_loss({"p0": {"critic_loss": 1.0}, "p1": {"actor_loss": float("nan")}})
    ('p1', 'actor_loss', nan)
    >>> nonfinite_loss({"p0": {"total_loss": 0.5, "custom_metrics": {}}}) is None
    True
    """
    for pid, stats in learner_info.items():
        if not isinstance(stats, dict):
            continue
        for key, value in stats.items():
            if "loss" in key and isinstance(value, (int, float)) and not math.isfinite(value):
                return pid, key, float(value)
    return None


class LazyClass:
    """A class attribute that names a class as ``"module:Name"`` and imports it on
    first access, so importing an algorithm's module does not import torch (the
    policy modules do); :meth:`Algorithm.__init__` overlaps that import with
    ``ray.init``.

    >>> class Holder:
    ...     cls = LazyClass("collections:OrderedDict")
    >>> Holder.cls.__name__, Holder.__dict__["cls"].module
    ('OrderedDict', 'collections')
    """

    def __init__(self, path: str):
        self.module, _, self.name = path.partition(":")

    def __get__(self, obj: Any, owner: Any = None) -> Any:
        return getattr(importlib.import_module(self.module), self.name)


def _configured_lr(worker: Any) -> None:
    """Set each trainable policy's optimizer back to the policy's configured ``lr``."""
    for policy_id in worker.policies_to_train:
        policy = worker.policy_map[policy_id]
        lr, optimizer = getattr(policy, "lr", None), getattr(policy, "optimizer", None)
        if lr is not None and optimizer is not None:
            for group in optimizer.param_groups:
                group["lr"] = lr


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
    #: An env whose spaces the algorithm takes, for building it where no env is given
    #: (``flowrl plan ALGO``): discrete actions, or continuous ones for DDPG/TD3.
    example_env: ClassVar[str] = "CartPole-v1"

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
        #: Why training stopped on a NaN or infinite loss (None while every loss is finite).
        self._diverged: str | None = None
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
            # One backend for the training and the evaluation workers; the run follows
            # them (compile's "auto": Ray when the plan reads Ray actor handles).
            backend = self._backend = resolve_backend(
                config.backend, self.name, creates=config.num_workers + eval_remotes)
            if backend == "ray" and config.num_workers + eval_remotes > 0:
                lazy = policy_class is None and isinstance(declared, LazyClass)
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
                num_workers=config.num_workers, backend=backend)
            validate = type(self).validate_env
            self._hook("validate_env", self.workers.foreach_worker,
                       functools.partial(_validate_worker_env, validate))
            self._check_input(config)
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
            self.workers.recovery.count_in(self._run.metrics)  # the run's counters
            self._hook("after_init", self.after_init)
        except BaseException:
            if getattr(self, "_run", None) is not None:
                self._run.stop()
            if self.workers is not None:
                self.workers.stop()
            if self._evaluation is not None:
                self._evaluation.stop()
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
    def input_columns(cls, config: AlgorithmConfig) -> tuple[str, ...]:
        """The columns a dataset ``input`` must have for this algorithm (checked on
        every file when the algorithm is built; RLlib's ``dones`` counts as
        ``terminateds``). Default: :data:`~flowrl.workers.dataset_input.DEFAULT_INPUT_COLUMNS`
        (``obs``, ``actions``, ``rewards``, ``terminateds``); an algorithm that
        needs more (``new_obs``) or less says so here."""
        return DEFAULT_INPUT_COLUMNS

    def _check_input(self, config: AlgorithmConfig) -> None:
        """Check each dataset of ``config.input`` against the algorithm and the env
        (:func:`~flowrl.workers.dataset_input.check_dataset`), on the driver, before
        the plan runs."""
        datasets = [s for s, _ in input_sources(config.input, "input") if s != SAMPLER]
        if not datasets:
            return
        local = self.workers.local_worker()
        multi_agent = any(self.workers.foreach_worker(_has_multi_agent_env))
        input_config = check_input_config(config.input_config, "input_config")
        for paths in datasets:
            reader = make_reader(paths, input_config, where=f"{type(config).__name__}.input")
            try:
                check_dataset(reader, local.policy_spaces(), multi_agent=multi_agent,
                              columns=self.input_columns(config), who=type(self).__name__)
            finally:
                reader.close()

    @classmethod
    def worker_config(cls, config: AlgorithmConfig, policy_class: Any = None) -> WorkerConfig:
        """The :class:`WorkerConfig` for ``config``; multi-agent policies with no class
        get ``policy_class`` (default: the algorithm's ``policy_class``). Each
        multi-agent policy gets the algorithm's policy settings that its class takes
        (a SAC policy in a TD3 config gets ``gamma`` and ``tau``, not ``policy_delay``),
        then its own ``config``, every key of which its class must take."""
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
                accepted = (None if spec.policy_class is None
                            else policy_parameters(spec.policy_class))
                shared = {k: v for k, v in policy_config.items()
                          if accepted is None or k in accepted}
                policies[pid] = dataclasses.replace(spec, config={**shared, **spec.config})
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
            imports=config.imports, python_path=module_roots(user_modules(config)),
            input=config.input, input_config=config.input_config,
            postprocess_inputs=config.postprocess_inputs, output=config.output,
            output_config=config.output_config)

    # -- running -----------------------------------------------------------------
    @property
    def metrics(self):
        """The run's :class:`~flowrl.metrics.MetricsContext` (counters, timers, info)."""
        return self._run.metrics

    def to_dot(self) -> str:
        """The plan as DOT text with the run's live figures on each node (items/s,
        busy share, queue depth, and an operator's own figures, such as IMPALA's
        policy lag): ``Plan.to_dot(run.stats())``."""
        return self.plan.to_dot(self._run.stats())

    def _make_evaluation(self) -> Evaluation:
        """The evaluation step and its own WorkerSet (``evaluation_config`` applied,
        envs made for evaluation); see :class:`~flowrl.ops.evaluation.Evaluation`. With
        a held-out dataset as ``evaluation_config["input"]``, the step that scores the
        policy on it instead (:class:`~flowrl.ops.evaluation.DatasetEvaluation`)."""
        config, explore = self.config.for_evaluation()
        held_out = self.config.evaluation_dataset()
        if held_out is not None:
            reader = make_reader(held_out, check_input_config(config.input_config,
                                                              "evaluation_config"),
                                 where="evaluation_config['input']", seed=config.seed)
            try:
                check_dataset(reader, self.workers.local_worker().policy_spaces(),
                              multi_agent=False, who=f"{self.name} evaluation",
                              columns=(*DEFAULT_INPUT_COLUMNS, *required_columns(
                                  config.off_policy_estimation_methods)))
                return DatasetEvaluation(
                    reader, self.workers, methods=config.off_policy_estimation_methods,
                    gamma=config.gamma, interval=self.config.evaluation_interval,
                    duration=self.config.evaluation_duration, seed=config.seed)
            except BaseException:
                reader.close()
                raise
        # Evaluation plays its envs one by one; its driver worker plays the episodes of
        # a lost evaluation worker, so it has envs whatever create_env_on_driver says.
        # It plays the envs whatever the training input, and records nothing.
        worker_config = dataclasses.replace(
            self.worker_config(config, self._policy_class), explore=explore, training=False,
            vector_env="sync", create_env_on_driver=True, input="sampler", output=None)
        workers = WorkerSet(config.env, self._policy_class, worker_config,
                            num_workers=self.config.evaluation_num_workers,
                            backend=self._backend)
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
        changed it.

        Every algorithm's learner stats are checked: a loss (a stat whose name holds
        ``"loss"``) that is NaN or infinite raises :class:`~flowrl.errors.DivergedError`
        naming it, its policy and the iteration; from then on ``train()`` and
        :meth:`save` raise it too, so no checkpoint of those weights is written."""
        if self._evaluation is not None:
            self._evaluation.before_iteration(
                self._run.metrics.counters.get(TRAINING_ITERATION, 0) + 1)
        if self._diverged is not None:
            raise DivergedError(self._diverged)
        try:
            result = next(self._run)
        except StopIteration:
            raise FlowError(f"{self.name}: the plan ended (was stop() called?); build a new "
                            "algorithm to train again") from None
        bad = nonfinite_loss(result.get("info", {}).get(LEARNER_INFO, {}))
        if bad is not None:
            pid, key, value = bad
            self._diverged = (
                f"{self.name}: loss {key!r} of policy {pid!r} is {value} at training "
                f"iteration {result.get(TRAINING_ITERATION)}; training stopped, and this "
                "algorithm saves no checkpoint of its weights (the last good checkpoint "
                "stays as it was): restore that checkpoint and lower the learning rates "
                "(or clip gradients), or look for NaN or infinite observations and rewards")
            raise DivergedError(self._diverged)
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
        estimators of an evaluation on a held-out dataset (FQE's fit), the
        driver's python/numpy/torch global RNG states, the worker seeds, the config's
        fields (when they can be stored, for ``flowrl evaluate``), the spaces each
        policy was built for (as text: a restore with an env of other spaces names
        both envs) and :meth:`extra_state`. The write goes aside and is renamed into place
        (:func:`flowrl.checkpoint.write_checkpoint`): a failed save raises FlowError
        and, unless it says otherwise, leaves an earlier checkpoint at ``path``
        byte-identical. After a NaN or infinite loss (see :meth:`train`) it writes
        nothing and raises :class:`~flowrl.errors.DivergedError`.
        """
        if self._diverged is not None:
            raise DivergedError(f"{self.name}.save({path!r}): not saved: {self._diverged}")
        states = dict(self.workers.foreach_worker(_indexed_state))
        state = {"algorithm": self.name,
                 "worker": states.pop(0),
                 "remote_workers": states,
                 "metrics": self._run.metrics.save(),
                 "rng": checkpoint.global_rng_state(),
                 "seeds": {"seed": self.config.seed,
                           "num_workers": len(self.workers.remote_workers())},
                 "config": checkpoint.config_fields(self.config),
                 "spaces": checkpoint.policy_spaces_text(self.workers.local_worker()),
                 "extra": self.extra_state()}
        if isinstance(self._evaluation, DatasetEvaluation):  # FQE's fit on held-out data
            state["evaluation"] = self._evaluation.get_state()
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
        state = checkpoint.read_checkpoint(path, allow_pickle=allow_pickle)
        self.restore_state(state, f"{self.name}.restore({path!r})")

    def restore_state(self, state: dict[str, Any], where: str | None = None) -> None:
        """Apply a checkpoint's ``state`` as :func:`~flowrl.checkpoint.read_checkpoint`
        returned it (see :meth:`restore`), for a caller that has read it already;
        ``where`` names the caller in errors."""
        where = where or f"{self.name}.restore_state({state.get('path')!r})"
        remotes = checkpoint.check_algorithm_state(state, self.name, where)
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
        checkpoint.set_global_rng_state(state.get("rng"))
        if isinstance(self._evaluation, DatasetEvaluation):
            self._evaluation.set_state(state.get("evaluation") or {})
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
        where = f"{cls.__name__}.from_checkpoint({path!r})"
        state = checkpoint.read_checkpoint(path, allow_pickle=allow_pickle)
        saved = state.get("algorithm")
        if cls is Algorithm:
            from flowrl.algorithms import algorithm_class
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
            algo.restore_state(state, where)
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
            evaluation.stop()

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


__all__ = ["Algorithm", "AlgorithmConfig", "LazyClass", "check_env", "check_env_config",
           "gym_spec", "ensure_ray", "build_algorithm", "HOOKS", "nonfinite_loss"]
