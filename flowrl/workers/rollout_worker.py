"""``RolloutWorker``: envs plus policies; samples experience and trains on request.

A worker owns ``num_envs`` copies of an env and one or more policies. Single-agent
envs are stepped as one gymnasium vector env with one batched policy forward per
step (:class:`~flowrl.workers.sampler.VectorSampler`); a
:class:`~flowrl.envs.MultiAgentEnv` runs through
:class:`~flowrl.workers.multi_agent_sampler.MultiAgentSampler` and yields
:class:`~flowrl.batch.MultiAgentBatch` es.

The same object works in-process and as a Ray actor (``ray.remote(RolloutWorker)``):
every method takes and returns plain picklable data. As a
:class:`~flowrl.ShardHost` its shard is ``sample()`` forever.

Seeding: with ``seed`` set, the worker uses ``seed + 1000 * worker_index`` for its
policies' initial weights and action sampling, and env ``i`` is reset with that
plus ``i``; workers differ from each other and every run repeats.

Per-policy results (``learn_on_batch``, ``compute_gradients``, ``get_weights``)
are dicts keyed by policy id for single- and multi-agent workers alike.

Callbacks (``callbacks=``, see :mod:`flowrl.callbacks`): the worker builds its own
instance (``worker.callbacks``); its sampler runs the episode hooks,
:meth:`RolloutWorker.sample` runs ``on_sample_end``, and the worker's real
policies get it as ``policy.callbacks`` when ``on_learn_on_batch`` is overridden.
"""

from __future__ import annotations

import difflib
import functools
import inspect
import os
import sys
from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Iterator, Sequence

import gymnasium as gym
import numpy as np

from flowrl.batch import DEFAULT_POLICY_ID, MultiAgentBatch, SampleBatch
from flowrl.callbacks import call_hook, episode_callbacks, make_callbacks, overrides
from flowrl.envs import reports_episode_infos
from flowrl.errors import ConfigError, EnvError, FlowError
from flowrl.offline.settings import (SAMPLER, check_input_config, check_output_config,
                                     input_sources)
from flowrl.offline.writer import DatasetWriter
from flowrl.runtime.shard_host import ShardHost
from flowrl.envs.multi_agent import MultiAgentEnv
from flowrl.workers.dataset_input import DatasetInput
from flowrl.workers.episode import Episode
from flowrl.workers.multi_agent_sampler import MultiAgentSampler, as_mapping_fn, spaces_match
from flowrl.workers.sampler import VectorSampler



@dataclass(frozen=True)
class PolicySpec:
    """How to build one policy: ``policy_class(obs_space, act_space, **config, seed=...)``.

    ``policy_class`` is a policy class or any factory with that signature; ``None``
    means the algorithm's own policy (an :class:`~flowrl.algorithms.Algorithm`
    fills it in). Spaces left ``None`` are taken from the env: for a multi-agent
    env, from the agents the policy mapping sends to this policy (probed at build
    time), else the spaces all agents share.
    """

    policy_class: Callable[..., Any] | None = None
    observation_space: gym.Space | None = None
    action_space: gym.Space | None = None
    config: dict = field(default_factory=dict)


def as_policy_spec(pid: str, value: Any, default_class: Callable[..., Any] | None = None
                   ) -> PolicySpec:
    """A :class:`PolicySpec` from what ``multiagent.policies`` may hold for ``pid``.

    Accepts a PolicySpec, the seeds' 4-tuple ``(policy_class, obs_space, act_space,
    config)``, a policy class/factory, or None. A missing class becomes
    ``default_class``.

    >>> as_policy_spec("p", (None, None, None, {"lr": 0.1}), default_class=dict).config
    {'lr': 0.1}
    """
    if value is None:
        spec = PolicySpec()
    elif isinstance(value, PolicySpec):
        spec = value
    elif isinstance(value, tuple):
        if len(value) != 4:
            raise ConfigError(f"multiagent.policies[{pid!r}]: a tuple must be (policy_class, "
                              f"observation_space, action_space, config), got {len(value)} "
                              "items; or give a PolicySpec")
        cls, obs, act, config = value
        spec = PolicySpec(cls, obs, act, dict(config or {}))
    elif callable(value):
        spec = PolicySpec(value)
    else:
        raise ConfigError(f"multiagent.policies[{pid!r}]={value!r}: give a PolicySpec, a "
                          "(policy_class, obs_space, act_space, config) tuple, a policy class "
                          "or None")
    if spec.policy_class is None and default_class is not None:
        spec = PolicySpec(default_class, spec.observation_space, spec.action_space, spec.config)
    return spec


def policy_parameters(factory: Callable[..., Any]) -> frozenset[str] | None:
    """The keyword arguments policy class/factory ``factory`` takes, or None when it
    takes any. A class's are those of its ``__init__`` and, while that passes
    ``**kwargs`` on, its bases' (in MRO order).

    >>> from flowrl.policies import PGPolicy
    >>> {"lr", "gamma", "model"} <= policy_parameters(PGPolicy), "n_step" in policy_parameters(PGPolicy)
    (True, False)
    >>> policy_parameters(lambda obs, act, **config: None) is None
    True
    """
    if isinstance(factory, type):
        inits = [c.__dict__["__init__"] for c in factory.__mro__
                 if c is not object and "__init__" in c.__dict__]
        skip = 1  # self
    else:
        inits, skip = [factory], 0
    names: set[str] = set()
    for init in inits:
        try:
            params = list(inspect.signature(init).parameters.values())[skip:]
        except (TypeError, ValueError):  # no signature to read: the factory decides
            return None
        names |= {p.name for p in params if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)}
        if not any(p.kind is p.VAR_KEYWORD for p in params):
            return frozenset(names)
    return None if not isinstance(factory, type) else frozenset(names)


def check_policy_config(factory: Callable[..., Any], config: dict, where: str) -> None:
    """A ConfigError naming ``where`` and the key when ``config`` has a key that
    policy class/factory ``factory`` does not take (see :func:`policy_parameters`)."""
    accepted = policy_parameters(factory)
    if accepted is None:
        return
    unknown = sorted(set(config) - accepted, key=str)
    if unknown:
        from flowrl.graph.node import describe_callable
        keys = sorted(accepted - {"observation_space", "action_space", "obs_space",
                                  "act_space", "seed"})
        close = difflib.get_close_matches(str(unknown[0]), keys, n=3)
        hint = f"did you mean {close}? " if close else ""
        raise ConfigError(f"{where}: config key {unknown[0]!r} is not a parameter of "
                          f"{describe_callable(factory)}; {hint}it takes {keys}; remove the "
                          "key or give this policy a class that takes it")


def make_env_creator(env, env_config: dict, preprocessor_pref: str | None = "deepmind", *,
                 training: bool = True) -> Callable[[], Any]:
    """A function making one env: ``env(env_config)`` for a creator, and for a
    reference ``"pkg.mod:Name"`` to one (:func:`flowrl.envs.env_reference`, which
    imports ``pkg.mod`` in this process); for a flowrl multi-agent id
    (:mod:`flowrl.envs.multi_agent`), its creator's; for an id,
    ``gymnasium.make(env, **env_config)`` after making the id's namespace known in
    this process (a Ray worker imports nothing for it otherwise: ``flowrl/`` ids
    need :mod:`flowrl.envs`, ``ALE/`` ids ale-py). ``ALE/`` ids go through
    :func:`flowrl.envs.make_atari` with ``preprocessor_pref`` and ``training``
    (False for evaluation: whole games, raw rewards)."""
    if isinstance(env, str):
        from flowrl.envs import (ensure_registered, env_reference, is_atari_id, make_atari,
                                 multi_agent_creator)
        creator = multi_agent_creator(env) or env_reference(env)
        if creator is not None:
            return lambda: creator(env_config)
        ensure_registered(env)
        if is_atari_id(env):
            return lambda: make_atari(env, env_config, preprocessor_pref=preprocessor_pref,
                                      training=training)
        return lambda: gym.make(env, **env_config)
    if callable(env):
        return lambda: env(env_config)
    raise ConfigError(f"RolloutWorker(env={env!r}): env must be a registered gymnasium id "
                      "or a callable env_creator(env_config) -> env")


def describe_env(env: Any) -> str:
    """How messages name ``env``: a gymnasium id quoted, a creator by its name.

    >>> describe_env("CartPole-v1"), describe_env(dict)
    ("'CartPole-v1'", 'dict')
    """
    from flowrl.graph.node import describe_callable
    return repr(env) if isinstance(env, str) else describe_callable(env)


def build_env_part(env: Any, worker_index: int, what: str, fn: Callable[[], Any]) -> Any:
    """``fn()``, where an exception that is not a FlowError (raised by the env's
    constructor or ``reset``: ``what``) becomes an :class:`~flowrl.errors.EnvError`
    naming the env and the worker, the env's exception chained."""
    try:
        return fn()
    except FlowError:
        raise
    except Exception as e:
        raise env_error(env, worker_index, what, e) from e


def env_error(env: Any, worker_index: int, what: str, error: BaseException) -> EnvError:
    """The :class:`~flowrl.errors.EnvError` for ``error``, raised by ``env``'s ``what``
    (constructor, reset, step) on worker ``worker_index``; chain ``error`` to it.

    >>> env_error("CartPole-v1", 2, "step", ValueError("bad action"))
    EnvError("env 'CartPole-v1' raised ValueError in its step on worker 2: bad action; fix the env or its env_config")
    """
    where = "worker 0 (the local worker)" if worker_index == 0 else f"worker {worker_index}"
    return EnvError(f"env {describe_env(env)} raised {type(error).__name__} in its {what} on "
                    f"{where}: {error}; fix the env or its env_config")


def stacks_frames(env: Any, preprocessor_pref: str | None) -> bool:
    """Whether ``env``'s observations are frame stacks, each next observation the
    last one shifted by one frame: ``ALE/`` ids under the DeepMind preprocessing
    (gymnasium's wrappers or EnvPool's alike).

    >>> stacks_frames("ALE/Pong-v5", "deepmind"), stacks_frames("ALE/Pong-v5", None)
    (True, False)
    """
    from flowrl.envs import is_atari_id
    return is_atari_id(env) and preprocessor_pref is not None


#: The choices of ``vector_env``: how a worker steps its ``num_envs`` envs.
VECTOR_ENVS = ("sync", "async", "envpool")


def make_vector_env(kind: str, first: Any, create: Callable[[], Any], num_envs: int, *,
                    env: Any = None, env_config: dict | None = None,
                    preprocessor_pref: str | None = "deepmind",
                    training: bool = True) -> gym.vector.VectorEnv:
    """``num_envs`` envs as one gymnasium vector env in ``SAME_STEP`` autoreset mode.

    ``kind`` ``"sync"``: a ``SyncVectorEnv`` stepping ``first`` and ``num_envs - 1``
    more envs from ``create`` one after the other in this process. ``"async"``: an
    ``AsyncVectorEnv`` with one subprocess per env (all made by ``create`` there;
    ``first`` stays in this process for the worker's ``env``), stepped in parallel.
    Its observations come back through shared memory, in the observation space's
    own dtype (Atari frames stay uint8), and are copied out of it on every step,
    so a sampler may keep them across steps. The subprocesses are started the
    platform's default way (fork on Linux: ``spawn`` and ``forkserver`` would re-run
    a user's script that lacks an ``if __name__ == "__main__"`` guard); ``close()``
    ends them, and they end by themselves when the worker's process dies. Reset
    with the same seeds, both kinds give the same observations, rewards and infos.
    ``"envpool"``: ``ALE/`` ids ``env`` only,
    stepped in EnvPool's thread pool with its own DeepMind preprocessing
    (:class:`~flowrl.envs.envpool_env.EnvPoolVectorEnv`, made from ``env``,
    ``env_config``, ``preprocessor_pref`` and ``training``; same spaces and
    reporting, other frames).

    RLlib 1.x names this ``remote_worker_envs``: True makes each env a Ray actor
    (``"async"`` makes each a subprocess of its worker instead), False steps them
    in the worker (``"sync"``).

    >>> venv = make_vector_env("sync", gym.make("CartPole-v1"),
    ...                        lambda: gym.make("CartPole-v1"), 3)
    >>> venv.num_envs, type(venv).__name__
    (3, 'SyncVectorEnv')
    >>> venv.close()
    """
    same_step = gym.vector.AutoresetMode.SAME_STEP
    if kind == "sync":
        return gym.vector.SyncVectorEnv(
            [lambda: first] + [lambda: flat_observations(create())] * (num_envs - 1),
            autoreset_mode=same_step)
    if kind == "async":
        return gym.vector.AsyncVectorEnv(
            [lambda: flat_observations(create())] * num_envs, shared_memory=True, copy=True,
            autoreset_mode=same_step)
    if kind == "envpool":
        from flowrl.envs.envpool_env import EnvPoolVectorEnv
        return EnvPoolVectorEnv(env, num_envs, env_config, preprocessor_pref=preprocessor_pref,
                                training=training)
    raise ConfigError(f"vector_env={kind!r}: choose one of {list(VECTOR_ENVS)}")


def flat_observations(env: Any) -> Any:
    """``env`` with ``Dict``/``Tuple`` observations flattened to one ``Box`` (gymnasium's
    ``FlattenObservation``: discrete parts one-hot), as models take them; any
    other env as it is."""
    if isinstance(getattr(env, "observation_space", None), (gym.spaces.Dict, gym.spaces.Tuple)):
        return gym.wrappers.FlattenObservation(env)
    return env


def _set_torch_threads(n: int) -> None:
    """``torch.set_num_threads(n)`` now if torch is imported, else for when it is:
    torch takes its intra-op thread count from ``OMP_NUM_THREADS`` at import, and a
    worker imports it with its first torch policy."""
    torch = sys.modules.get("torch")
    if torch is not None:
        torch.set_num_threads(n)
    else:
        os.environ["OMP_NUM_THREADS"] = str(n)


class RolloutWorker(ShardHost):
    """Samples from ``num_envs`` envs with its policies; see the module docstring.

    Give either ``policy`` (a class/factory for the single policy
    ``"default_policy"``, built with ``policy_config``) or ``policies`` (policy id ->
    :class:`PolicySpec`, the seeds' 4-tuple or a class) with
    ``policy_mapping_fn(agent_id, episode) -> policy id``, called once per agent per
    episode (a one-argument ``fn(agent_id)`` is accepted too). ``env`` is the env
    object the creator returned first (``worker.env``). ``preprocessor_pref``
    (``"deepmind"`` or None) applies to ``ALE/`` ids only
    (:func:`flowrl.envs.make_atari`). ``training=False`` makes the envs for
    evaluation (Atari: whole games, raw scores) for :meth:`play_episodes`.
    ``callbacks``: a :class:`~flowrl.callbacks.DefaultCallbacks` subclass, a list of
    them, or None. ``vector_env`` (one of :data:`VECTOR_ENVS`) is how a single-agent
    env's ``num_envs`` copies are stepped (:func:`make_vector_env`); with
    ``"async"`` or ``"envpool"`` the callbacks' ``base_env.get_sub_environments()``
    is empty (the envs live in other processes or in EnvPool).

    ``imports``: modules to import before anything is built (modules that register
    the env or the model; :func:`flowrl.user_code.import_modules`).

    Offline data (RLlib 1.x's settings; :mod:`flowrl.offline`): ``output`` (a
    directory, None: off) writes every sampled batch there, with ``new_obs``, under
    ``output_config`` (:func:`~flowrl.offline.settings.check_output_config`);
    ``input`` other than ``"sampler"`` makes :meth:`sample` read recorded batches
    (:mod:`flowrl.workers.dataset_input`) under ``input_config``, recomputing their
    postprocessing with ``postprocess_inputs``. ``num_workers`` (the remote workers
    of the worker's set) shards the dataset: remote worker ``i`` reads share
    ``i - 1`` of ``num_workers``.

    ``spaces`` (policy id -> ``(observation_space, action_space)``) makes a worker
    without an env: its policies are built for those spaces and nothing is made or
    reset (a driver worker with ``create_env_on_driver=False``, whose remote workers
    report the spaces: :meth:`policy_spaces`). It trains, computes actions and
    holds weights like any worker; ``env`` is None, :meth:`sample` and
    :meth:`play_episodes` are ConfigErrors and :meth:`episode_stats` is empty.

    >>> from flowrl.policies import PGPolicy
    >>> w = RolloutWorker("CartPole-v1", policy=PGPolicy, num_envs=2,
    ...                   rollout_fragment_length=10, seed=0)
    >>> batch = w.sample()
    >>> batch.count, sorted(w.get_weights()), w.policies_to_train
    (20, ['default_policy'], ['default_policy'])
    >>> w.stop()
    """

    def __init__(self, env, *, env_config: dict | None = None,
                 policy: Callable[..., Any] | None = None, policy_config: dict | None = None,
                 policies: dict[str, PolicySpec | Callable[..., Any]] | None = None,
                 policy_mapping_fn: Callable[..., str] | None = None,
                 policies_to_train: Iterable[str] | None = None,
                 num_envs: int = 1, rollout_fragment_length: int = 200,
                 seed: int | None = None, worker_index: int = 0, explore: bool = True,
                 torch_threads: int | None = None, preprocessor_pref: str | None = "deepmind",
                 training: bool = True, callbacks: Any = None, vector_env: str = "sync",
                 spaces: dict[str, tuple[gym.Space, gym.Space]] | None = None,
                 imports: Sequence[str] = (), input: Any = SAMPLER,
                 input_config: dict | None = None, postprocess_inputs: bool = False,
                 output: str | None = None, output_config: dict | None = None,
                 num_workers: int = 0):
        if imports:
            from flowrl.user_code import import_modules
            import_modules(imports, f"RolloutWorker (worker {worker_index}) imports")
        if vector_env not in VECTOR_ENVS:
            raise ConfigError(f"RolloutWorker(vector_env={vector_env!r}): choose one of "
                              f"{list(VECTOR_ENVS)}")
        for name, value in (("num_envs", num_envs),
                            ("rollout_fragment_length", rollout_fragment_length)):
            if not isinstance(value, int) or value < 1:
                raise ConfigError(f"RolloutWorker({name}={value!r}): must be an int >= 1")
        if (policy is None) == (policies is None):
            raise ConfigError("RolloutWorker: give exactly one of policy= (a single policy "
                              "class/factory) or policies= (policy id -> PolicySpec)")
        if torch_threads is not None:
            _set_torch_threads(torch_threads)
        self.worker_index = worker_index
        self.env_config = dict(env_config or {})
        self.num_envs, self.rollout_fragment_length = num_envs, rollout_fragment_length
        self.seed = None if seed is None else seed + 1000 * worker_index
        self.base_seed = seed   # what every worker of the set shuffles a dataset with
        if policies is None:
            policies = {DEFAULT_POLICY_ID: PolicySpec(policy, config=dict(policy_config or {}))}
        specs = {pid: as_policy_spec(pid, s) for pid, s in policies.items()}
        for pid, spec in specs.items():
            if spec.policy_class is None:
                raise ConfigError(f"RolloutWorker: policy {pid!r} has no policy_class; give one "
                                  "in its PolicySpec (None is filled in only by an Algorithm)")
        policy_mapping_fn = as_mapping_fn(policy_mapping_fn)
        self.callbacks = make_callbacks(callbacks)
        self._on_sample_end = overrides(self.callbacks, "on_sample_end")
        self._on_learn = overrides(self.callbacks, "on_learn_on_batch")

        self.preprocessor_pref = preprocessor_pref
        self.vector_env = vector_env
        self.num_workers = num_workers
        self.input_sources = input_sources(input, "RolloutWorker(input=...)")
        self.input_config = check_input_config(input_config or {},
                                               "RolloutWorker(input_config=...)")
        self.postprocess_inputs = postprocess_inputs
        self.dataset_input: DatasetInput | None = None  # built at the first sample()
        self.output_writer = None if output is None else self._make_writer(
            output, check_output_config(output_config or {}, "RolloutWorker(output_config=...)"))
        create = make_env_creator(env, self.env_config, preprocessor_pref, training=training)
        self._spaces: dict[str, tuple[gym.Space, gym.Space]] = {}  # per policy, as built
        first = self.env = (None if spaces is not None else
                            build_env_part(env, worker_index, "constructor", create))
        eps_base = worker_index << 32
        if first is None:  # no env: the policies take the spaces given
            self.envs, self.sampler = [], None
            missing = sorted(set(specs) - set(spaces))
            if missing:
                raise ConfigError(f"RolloutWorker(spaces=...): no spaces for policies "
                                  f"{missing}; give (observation_space, action_space) for "
                                  f"every policy of {sorted(specs)}")
            self.policy_map = {pid: self._build_policy(pid, spec, *spaces[pid])
                               for pid, spec in specs.items()}
        elif isinstance(first, MultiAgentEnv):
            if vector_env != "sync":
                raise ConfigError(f"RolloutWorker(vector_env={vector_env!r}): env "
                                  f"{describe_env(env)} is a MultiAgentEnv, whose envs are "
                                  "stepped in the worker's process; use vector_env='sync'")
            if policy_mapping_fn is None:
                if len(specs) != 1:
                    raise ConfigError("RolloutWorker: a multi-agent env with several "
                                      "policies needs policy_mapping_fn(agent_id, episode) -> "
                                      "policy id")
                only = next(iter(specs))
                policy_mapping_fn = lambda agent_id, episode: only  # noqa: E731
            self.envs = [first] + [build_env_part(env, worker_index, "constructor", create)
                                   for _ in range(num_envs - 1)]
            self.policy_map = self._build_multi_agent(specs, first, policy_mapping_fn)
            self.sampler = build_env_part(env, worker_index, "reset", lambda: MultiAgentSampler(
                self.envs, self.policy_map, policy_mapping_fn,
                fragment_length=rollout_fragment_length, seed=self.seed,
                explore=explore, eps_id_base=eps_base,
                callbacks=episode_callbacks(self.callbacks, worker=self, envs=self.envs,
                                            policies=self.policy_map)))
        else:
            if len(specs) != 1:
                raise ConfigError(f"RolloutWorker: env {env!r} is single-agent but "
                                  f"{len(specs)} policies were given; give one policy or a "
                                  "MultiAgentEnv")
            first = self.env = flat_observations(first)
            self.envs = [build_env_part(env, worker_index, "constructor",
                                        lambda: make_vector_env(
                vector_env, first, create, num_envs, env=env, env_config=self.env_config,
                preprocessor_pref=preprocessor_pref, training=training))]
            venv = self.envs[0]
            (pid, spec), = specs.items()
            self.policy_map = {pid: self._build_policy(
                pid, spec, venv.single_observation_space, venv.single_action_space)}
            # (VectorSampler resets the envs when it is built)
            self.sampler = build_env_part(env, worker_index, "reset", lambda: VectorSampler(
                venv, self.policy_map[pid], fragment_length=rollout_fragment_length,
                step_error=functools.partial(env_error, env, worker_index, "step"),
                frame_stacks=stacks_frames(env, preprocessor_pref),
                record_new_obs=output is not None,
                seed=self.seed, explore=explore, eps_id_base=eps_base,
                episode_infos=reports_episode_infos(first),
                callbacks=episode_callbacks(self.callbacks, worker=self,
                                            envs=getattr(venv, "envs", []),
                                            policies=self.policy_map)))
        self.policy_mapping_fn = policy_mapping_fn
        to_train = list(self.policy_map) if policies_to_train is None else list(policies_to_train)
        unknown = sorted(set(to_train) - set(self.policy_map))
        if unknown:
            raise ConfigError(f"RolloutWorker(policies_to_train=...): unknown policy ids "
                              f"{unknown}; known: {sorted(self.policy_map)}")
        self.policies_to_train = to_train
        #: ``{pid: version}``: learner updates behind each policy's weights; sampled
        #: batches carry it per row (``SampleBatch.POLICY_VERSION``).
        self.policy_versions: dict[str, int] = {pid: 0 for pid in self.policy_map}

    def _build_policy(self, pid: str, spec: PolicySpec, obs_space, act_space):
        kwargs = {"seed": self.seed, **spec.config}
        check_policy_config(spec.policy_class, kwargs, f"RolloutWorker: policies[{pid!r}]")
        self._spaces[pid] = (spec.observation_space or obs_space, spec.action_space or act_space)
        return self._with_callbacks(spec.policy_class(*self._spaces[pid], **kwargs))

    def policy_spaces(self) -> dict[str, tuple[gym.Space, gym.Space]]:
        """``{policy_id: (observation_space, action_space)}``: the spaces each policy
        was built for (what a worker without an env is built from, as ``spaces=``).

        >>> from flowrl.policies import PGPolicy
        >>> w = RolloutWorker("CartPole-v1", policy=PGPolicy, rollout_fragment_length=10)
        >>> bare = RolloutWorker("CartPole-v1", policy=PGPolicy, spaces=w.policy_spaces())
        >>> bare.env, bare.policy_spaces() == w.policy_spaces(), bare.episode_stats()
        (None, True, [])
        >>> w.stop(); bare.stop()
        """
        return dict(self._spaces)

    def _require_env(self, method: str) -> None:
        if self.env is None:
            raise ConfigError(f"RolloutWorker.{method} (worker {self.worker_index}): this "
                              "worker has no env (built from spaces: the driver's worker with "
                              "create_env_on_driver=False and remote workers); sample the "
                              "remote workers, or set create_env_on_driver=True")

    def _with_callbacks(self, policy):
        """``policy``, given the worker's callbacks when they run ``on_learn_on_batch``."""
        if self._on_learn:
            policy.callbacks = self.callbacks
        return policy

    def _build_multi_agent(self, specs, env: MultiAgentEnv, mapping_fn) -> dict[str, Any]:
        # Probe the mapping once per agent (episode_id -1) to learn which spaces each
        # policy must accept; a policy no agent was sent to takes the spaces all agents
        # share (random mappings) or its PolicySpec's.
        probe = Episode(-1, 0, mapping_fn)
        spaces: dict[str, tuple] = {}
        for agent in env.possible_agents:
            pid = probe.policy_for(agent)
            if pid not in specs:
                raise ConfigError(f"RolloutWorker: policy_mapping_fn({agent!r}) returned "
                                  f"{pid!r}, which is not in policies {sorted(specs)}")
            agent_spaces = (env.observation_spaces[agent], env.action_spaces[agent])
            spec = specs[pid]
            for what, mine, theirs in (("observation", spec.observation_space, agent_spaces[0]),
                                       ("action", spec.action_space, agent_spaces[1])):
                if mine is not None and not spaces_match(mine, theirs):
                    raise ConfigError(
                        f"RolloutWorker: agent {agent!r} has {what} space {theirs} but "
                        f"policy_mapping_fn maps it to policy {pid!r}, whose PolicySpec says "
                        f"{mine}; fix the PolicySpec spaces or the mapping")
            spaces.setdefault(pid, agent_spaces)
        shared = None
        agents = list(env.possible_agents)
        if agents and all(spaces_match(env.observation_spaces[a], env.observation_spaces[agents[0]])
                          and spaces_match(env.action_spaces[a], env.action_spaces[agents[0]])
                          for a in agents):
            shared = (env.observation_spaces[agents[0]], env.action_spaces[agents[0]])
        out = {}
        for pid, spec in specs.items():
            obs_space, act_space = spaces.get(pid) or shared or (None, None)
            if (spec.observation_space or obs_space) is None or \
                    (spec.action_space or act_space) is None:
                raise ConfigError(f"RolloutWorker: no agent maps to policy {pid!r} and the "
                                  "agents' spaces differ, so its spaces are unknown; set "
                                  "PolicySpec observation_space and action_space")
            out[pid] = self._build_policy(pid, spec, obs_space, act_space)
            if getattr(out[pid], "is_recurrent", False):
                raise ConfigError(f"RolloutWorker: policy {pid!r} is recurrent (model.use_lstm "
                                  "or a stateful custom model), which multi-agent sampling does "
                                  "not carry state for yet; use a feed-forward model for "
                                  "multi-agent envs")
        return out

    # -- sampling ----------------------------------------------------------------
    def sample(self) -> SampleBatch | MultiAgentBatch:
        """``num_envs * rollout_fragment_length`` env steps, postprocessed.

        A :class:`SampleBatch` for single-agent envs, a :class:`MultiAgentBatch`
        for multi-agent envs. With a dataset ``input``, recorded batches of at least
        as many env steps instead (:class:`~flowrl.workers.dataset_input.DatasetInput`).
        With ``output``, the batch is written (:meth:`record`). Runs the callbacks'
        ``on_sample_end`` on it. A worker without an env raises ConfigError, unless
        it reads a dataset only.
        """
        if self.input_sources == [(SAMPLER, 1.0)]:
            batch = self._sample_env()
        else:
            batch = self.input_reader().sample()
        batch = self._stamp_versions(batch)
        self.record(batch)
        if self._on_sample_end:
            call_hook(self.callbacks, "on_sample_end", worker=self, samples=batch)
        return batch

    def _sample_env(self) -> SampleBatch | MultiAgentBatch:
        self._require_env("sample")
        return self.sampler.sample()

    def input_reader(self) -> DatasetInput:
        """The worker's :class:`DatasetInput` (RLlib 1.x's ``input_reader``), for a
        dataset ``input``; built on first use: remote worker ``i``
        of ``num_workers`` reads shard ``i - 1``; the driver's worker, which samples
        only when there are no remote workers, reads all of it."""
        if self.dataset_input is None:
            shards = self.num_workers if self.worker_index > 0 else 1
            self.dataset_input = DatasetInput(
                self.input_sources, self.input_config, policies=self.policy_map,
                spaces=self.policy_spaces(), multi_agent=isinstance(self.env, MultiAgentEnv),
                min_steps=self.rollout_fragment_length * self.num_envs,
                postprocess=self.postprocess_inputs,
                sample_env=self._sample_env if self.env is not None else None,
                seed=self.base_seed, shard_index=max(self.worker_index - 1, 0),
                num_shards=max(shards, 1), where=f"input (worker {self.worker_index})")
        return self.dataset_input

    def _make_writer(self, output: str, config: dict) -> DatasetWriter:
        return DatasetWriter(output, format=config["format"],
                             max_rows_per_file=config["max_rows_per_file"],
                             compression=config["compression"],
                             compress_columns=config["compress_columns"],
                             worker_index=self.worker_index)

    def record(self, batch: SampleBatch | MultiAgentBatch) -> None:
        """Write ``batch`` to the worker's ``output`` dataset (nothing without one)."""
        if self.output_writer is not None:
            self.output_writer.write(batch)

    def close_output(self) -> None:
        """Finish the ``output`` files written so far (each gets its final name);
        later batches go to new files. :meth:`stop` calls it."""
        if self.output_writer is not None:
            self.output_writer.close()

    def _stamp_versions(self, batch: SampleBatch | MultiAgentBatch):
        """``batch`` with a ``policy_version`` column: the version of the weights that
        acted, per policy (weights only change between two ``sample()`` calls)."""
        parts = (batch.policy_batches.items() if isinstance(batch, MultiAgentBatch)
                 else [(next(iter(self.policy_map)), batch)])
        for pid, rows in parts:
            rows[SampleBatch.POLICY_VERSION] = np.full(rows.count, self.policy_versions[pid],
                                                       np.int64)
        return batch

    def shard_items(self) -> Iterator[SampleBatch | MultiAgentBatch]:
        """``sample()`` forever (this worker's shard for the dataflow runtime)."""
        while True:
            yield self.sample()

    def play_episodes(self, schedule: list[list[int]], *, explore: bool = False,
                      seed: int | None = None, max_steps: int | None = None) -> list[dict]:
        """Play whole episodes on this worker's envs for an evaluation: env ``i`` plays
        the episode indices ``schedule[i]`` (:func:`flowrl.workers.play.play_episodes`;
        episode ``e`` resets with ``seed + e``). Single-agent envs only. It steps the
        sampler's envs directly, so it is for workers that do not :meth:`sample`
        (evaluation workers)."""
        from flowrl.workers.play import MAX_EPISODE_STEPS, play_episodes
        self._require_env("play_episodes")
        if isinstance(self.env, MultiAgentEnv) or len(self.policy_map) != 1:
            raise ConfigError(f"RolloutWorker.play_episodes (worker {self.worker_index}): "
                              "evaluation plays single-agent envs with one policy; this "
                              "worker's env is multi-agent")
        if not isinstance(self.envs[0], gym.vector.SyncVectorEnv):
            raise ConfigError(f"RolloutWorker.play_episodes (worker {self.worker_index}): "
                              "evaluation steps the envs one by one, which needs "
                              "vector_env='sync'")
        policy = next(iter(self.policy_map.values()))
        return play_episodes(self.envs[0].envs, policy, schedule, explore=explore, seed=seed,
                             max_steps=MAX_EPISODE_STEPS if max_steps is None else max_steps,
                             callbacks=self.sampler.callbacks)

    def episode_stats(self) -> list[dict]:
        """Completed episodes since the last call: ``episode_reward``, ``episode_len``
        (and ``policy_rewards`` for multi-agent). Draining: each episode is reported once.
        Empty for a worker without an env."""
        return self.sampler.episode_stats() if self.sampler is not None else []

    # -- policies ----------------------------------------------------------------
    def get_policy(self, policy_id: str = DEFAULT_POLICY_ID):
        """The policy object for ``policy_id``."""
        return self._policy(policy_id, "get_policy")

    def _policy(self, policy_id: str, method: str):
        """The policy for ``policy_id``; a ConfigError naming ``method`` for an unknown id."""
        try:
            return self.policy_map[policy_id]
        except KeyError:
            raise ConfigError(f"RolloutWorker.{method}({policy_id!r}): no such policy; "
                              f"known: {sorted(self.policy_map)}") from None

    def foreach_policy(self, fn: Callable[..., Any], **kwargs: Any) -> list:
        """``[fn(policy, policy_id, **kwargs) for every policy]``, each the real policy
        (:meth:`get_policy`)."""
        return [fn(self.get_policy(pid), pid, **kwargs) for pid in list(self.policy_map)]

    def foreach_trainable_policy(self, fn: Callable[..., Any], **kwargs: Any) -> list:
        """``fn(policy, policy_id, **kwargs)`` for each policy in ``policies_to_train``,
        each the real policy (:meth:`get_policy`)."""
        return [fn(self.get_policy(pid), pid, **kwargs) for pid in self.policies_to_train]

    def apply(self, fn: Callable[..., Any], *args: Any) -> Any:
        """``fn(self, *args)``; runs a function on the worker (wherever it lives)."""
        return fn(self, *args)

    def _per_policy(self, batch, policies: Iterable[str] | None = None) -> dict[str, SampleBatch]:
        if isinstance(batch, SampleBatch):
            if len(self.policy_map) != 1:
                raise ConfigError("RolloutWorker: a plain SampleBatch is ambiguous with "
                                  f"policies {sorted(self.policy_map)}; pass a MultiAgentBatch")
            return {next(iter(self.policy_map)): batch}
        trained = set(self.policies_to_train if policies is None else policies)
        unknown = sorted(trained - set(self.policy_map))
        if unknown:
            raise ConfigError(f"RolloutWorker: cannot train unknown policies {unknown}; "
                              f"known: {sorted(self.policy_map)}")
        return {pid: b for pid, b in batch.policy_batches.items()
                if pid in trained and b.count > 0}

    def learn_on_batch(self, batch: SampleBatch | MultiAgentBatch,
                       policies: Iterable[str] | None = None) -> dict[str, dict]:
        """Train ``policies`` (default: ``policies_to_train``) on their part of
        ``batch``: ``{pid: stats}`` for the policies that had rows (each one update:
        :meth:`count_updates`)."""
        stats = {pid: self.get_policy(pid).learn_on_batch(b)
                 for pid, b in self._per_policy(batch, policies).items()}
        self.count_updates(stats)
        return stats

    def compute_gradients(self, batch) -> tuple[dict[str, list], dict[str, dict]]:
        """``({pid: grads}, {pid: stats})`` for the trainable policies; weights unchanged."""
        grads, stats = {}, {}
        for pid, b in self._per_policy(batch).items():
            grads[pid], stats[pid] = self.get_policy(pid).compute_gradients(b)
        return grads, stats

    def apply_gradients(self, grads: dict[str, list]) -> None:
        """Apply ``{pid: grads}`` from :meth:`compute_gradients` (one update each)."""
        for pid, g in grads.items():
            self.get_policy(pid).apply_gradients(g)
        self.count_updates(grads)

    def count_updates(self, policies: Iterable[str]) -> None:
        """One more learner update for each of ``policies``: their versions grow by 1.
        Whoever trains a policy outside :meth:`learn_on_batch` /
        :meth:`apply_gradients` (a learner thread) calls it."""
        for pid in policies:
            self.policy_versions[pid] = self.policy_versions.get(pid, 0) + 1

    def get_weights(self, policies: Iterable[str] | None = None) -> dict[str, dict]:
        """``{pid: weights}`` for ``policies`` (default: all)."""
        ids = self.policy_map if policies is None else policies
        return {pid: self._policy(pid, "get_weights").get_weights() for pid in ids}

    def set_weights(self, weights: dict[str, dict],
                    versions: dict[str, int] | None = None) -> None:
        """Load ``{pid: weights}``; policies not mentioned keep theirs. ``versions``
        (``{pid: version}``, the sender's :attr:`policy_versions`) says which
        learner update the weights come from; without it the versions stay."""
        for pid, w in weights.items():
            self._policy(pid, "set_weights").set_weights(w)
        if versions is not None:
            self.policy_versions.update({pid: int(v) for pid, v in versions.items()
                                         if pid in weights})

    def get_state(self) -> dict[str, Any]:
        """Every policy's state (weights, optimizer, RNG) for checkpoints, and where a
        dataset input is in its datasets."""
        state = {"policies": {pid: p.get_state() for pid, p in self.policy_map.items()},
                 "policies_to_train": list(self.policies_to_train),
                 "policy_versions": dict(self.policy_versions)}
        if self.dataset_input is not None:
            state["dataset_input"] = self.dataset_input.get_state()
        return state

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned. A policy state that an older flowrl's
        torch-free replica saved on a remote worker (marked ``"numpy_replica": True``)
        holds only what acting uses and goes to ``policy.set_acting_state``."""
        for pid, s in state["policies"].items():
            policy = self._policy(pid, "set_state")
            if s.get("numpy_replica") is True:
                policy.set_acting_state(s)
            else:
                policy.set_state(s)
        self.policies_to_train = list(state["policies_to_train"])
        # (checkpoints from before policy versions lack them: the versions stay)
        self.policy_versions.update({pid: int(v) for pid, v in
                                     state.get("policy_versions", {}).items()})
        # (checkpoints from before reader positions, or of a worker that had read no
        # dataset, lack them: the input reads from where it is)
        if "dataset_input" in state:
            self.input_reader().set_state(state["dataset_input"])

    def stop(self) -> None:
        """Finish the ``output`` files, close the dataset input's files and the envs
        (``"async"``: their subprocesses end), and ``env`` where it is not one of
        them (``"async"``, ``"envpool"``)."""
        self.close_output()
        if self.dataset_input is not None:
            self.dataset_input.close()
        for env in self.envs:
            env.close()
        if self.vector_env != "sync" and self.env is not None:
            self.env.close()


__all__ = ["RolloutWorker", "PolicySpec", "VECTOR_ENVS", "make_vector_env", "env_error",
           "stacks_frames", "as_policy_spec", "check_policy_config", "policy_parameters",
           "describe_env"]
