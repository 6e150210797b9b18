"""``WorkerSet``: one local rollout worker on the driver plus ``num_workers`` remote ones.

The local worker holds the policies the learner trains; remote workers sample.
With ``backend="ray"`` the remote workers are Ray actors
(``ray.remote(RolloutWorker)``, ``num_cpus_per_worker`` CPUs each, one torch thread
each); with ``backend="local"`` they are in-process :class:`RolloutWorker`
instances, which the local runtime steps exactly like actors (useful for tests and
debugging). ``backend="auto"`` picks ``"ray"`` when ``num_workers > 0`` and Ray is
already initialised, else ``"local"``; flowrl never calls ``ray.init()`` for you.

Remote workers start with the local worker's weights. ``stop()`` releases only the
workers this set created (not those passed to :meth:`WorkerSet.from_existing`).

>>> from flowrl.policies import PGPolicy
>>> ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=5, seed=0),
...                num_workers=2, backend="local")
>>> len(ws.remote_workers()), ws.foreach_worker(lambda w: w.worker_index)
(2, [0, 1, 2])
>>> ws.stop()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Sequence

from flowrl.errors import ConfigError
from flowrl.workers.rollout_worker import PolicySpec, RolloutWorker

BACKENDS = ("auto", "local", "ray")


@dataclass
class WorkerConfig:
    """Settings every rollout worker of a :class:`WorkerSet` is built with.

    ``policy_config`` holds the policy's keyword hyperparameters (``lr``,
    ``gamma``, ``lambda_``, ``hidden_sizes``...). For multi-agent envs set
    ``policies`` (policy id -> :class:`PolicySpec`), ``policy_mapping_fn`` and
    optionally ``policies_to_train``; the WorkerSet's ``policy`` argument is then
    ignored. ``remote_torch_threads`` is applied inside Ray worker processes only.

    >>> WorkerConfig(num_envs_per_worker=0)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: WorkerConfig.num_envs_per_worker=0: must be an int >= 1
    """

    env_config: dict = field(default_factory=dict)
    num_envs_per_worker: int = 1
    rollout_fragment_length: int = 200
    seed: int | None = None
    explore: bool = True
    policy_config: dict = field(default_factory=dict)
    policies: dict[str, PolicySpec] | None = None
    policy_mapping_fn: Callable[[Any], str] | None = None
    policies_to_train: Sequence[str] | None = None
    num_cpus_per_worker: float = 1.0
    remote_torch_threads: int | None = 1

    def __post_init__(self) -> None:
        for name in ("num_envs_per_worker", "rollout_fragment_length"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < 1:
                raise ConfigError(f"WorkerConfig.{name}={value!r}: must be an int >= 1")
        if self.num_cpus_per_worker < 0:
            raise ConfigError(f"WorkerConfig.num_cpus_per_worker={self.num_cpus_per_worker!r}: "
                              "must be >= 0")
        if self.policies is not None and len(self.policies) > 1 and self.policy_mapping_fn is None:
            raise ConfigError("WorkerConfig.policy_mapping_fn is None but policies has "
                              f"{len(self.policies)} entries; give policy_mapping_fn(agent_id)")

    def worker_kwargs(self, policy: Callable[..., Any] | None) -> dict[str, Any]:
        """Keyword arguments for :class:`RolloutWorker` (besides env and index)."""
        kwargs: dict[str, Any] = dict(
            env_config=self.env_config, num_envs=self.num_envs_per_worker,
            rollout_fragment_length=self.rollout_fragment_length, seed=self.seed,
            explore=self.explore, policies_to_train=self.policies_to_train)
        if self.policies is not None:
            kwargs.update(policies=self.policies, policy_mapping_fn=self.policy_mapping_fn)
        else:
            kwargs.update(policy=policy, policy_config=self.policy_config)
        return kwargs


class WorkerSet:
    """A local :class:`RolloutWorker` plus remote ones; see the module docstring."""

    def __init__(self, env, policy: Callable[..., Any] | None = None,
                 config: WorkerConfig | None = None, num_workers: int = 0,
                 backend: str = "auto"):
        config = config or WorkerConfig()
        if not isinstance(num_workers, int) or num_workers < 0:
            raise ConfigError(f"WorkerSet(num_workers={num_workers!r}): must be an int >= 0")
        if backend not in BACKENDS:
            raise ConfigError(f"WorkerSet(backend={backend!r}): choose one of {BACKENDS}")
        if policy is None and config.policies is None:
            raise ConfigError("WorkerSet: give a policy class, or config.policies for "
                              "multi-agent")
        if backend == "auto":
            backend = "ray" if num_workers > 0 and _ray_initialized() else "local"
        if backend == "ray" and not _ray_initialized():
            raise ConfigError("WorkerSet(backend='ray'): Ray is not initialised; call "
                              "ray.init() first or use backend='local'")
        self.backend = backend
        self.config = config
        kwargs = config.worker_kwargs(policy)
        self._local = RolloutWorker(env, worker_index=0, **kwargs)
        if backend == "ray":
            import ray
            actor = ray.remote(num_cpus=config.num_cpus_per_worker)(RolloutWorker)
            self._remotes = [actor.remote(env, worker_index=i, **kwargs,
                                          torch_threads=config.remote_torch_threads)
                             for i in range(1, num_workers + 1)]
        else:
            self._remotes = [RolloutWorker(env, worker_index=i, **kwargs)
                             for i in range(1, num_workers + 1)]
        self._owned = True
        if self._remotes:
            self.sync_weights()

    @classmethod
    def from_existing(cls, local_worker: Any, remote_workers: Sequence = ()) -> "WorkerSet":
        """Wrap workers created elsewhere; ``stop()`` will leave them running.

        Workers are duck-typed: any object (or Ray actor of a class) with the methods
        the plan calls (``sample``, ``compute_gradients``, ``apply_gradients``,
        ``get_weights``, ``set_weights``...) will do. The backend is ``"ray"`` when
        the remotes are Ray actor handles, else ``"local"``.
        """
        self = cls.__new__(cls)
        self._local, self._remotes = local_worker, list(remote_workers)
        self.backend = "ray" if any(_is_actor_handle(w) for w in self._remotes) else "local"
        self.config = None
        self._owned = False
        return self

    def local_worker(self) -> RolloutWorker:
        """The driver's worker (holds the policies the learner trains)."""
        return self._local

    def remote_workers(self) -> list:
        """Remote workers: Ray actor handles, or in-process workers (local backend)."""
        return list(self._remotes)

    def sync_weights(self, policies: Sequence[str] | None = None) -> None:
        """Send the local worker's weights to every remote worker.

        Ray: one ``ray.put`` per broadcast, then ``set_weights.remote(ref)`` on each
        actor; the calls are not awaited, but actor calls run in submission order,
        so each worker's next ``sample()`` uses the new weights.
        """
        if not self._remotes:
            return
        weights = self._local.get_weights(policies)
        if self.backend == "ray":
            import ray
            ref = ray.put(weights)
            for w in self._remotes:
                w.set_weights.remote(ref)
        else:
            for w in self._remotes:
                w.set_weights(weights)

    def foreach_worker(self, fn: Callable[[RolloutWorker], Any]) -> list:
        """``fn(worker)`` on every worker, local first then remotes in order."""
        results = [fn(self._local)]
        if self.backend == "ray":
            import ray
            results += ray.get([w.apply.remote(fn) for w in self._remotes])
        else:
            results += [fn(w) for w in self._remotes]
        return results

    def foreach_policy(self, fn: Callable[[Any, str], Any]) -> list:
        """``fn(policy, policy_id)`` for every policy of every worker, flattened."""
        return [r for rs in self.foreach_worker(lambda w: w.foreach_policy(fn)) for r in rs]

    def trainable_policies(self) -> list[str]:
        """Ids of the policies the local worker trains."""
        return list(self._local.policies_to_train)

    def stop(self) -> None:
        """Stop the workers this set created (local envs closed, actors killed).

        A set from :meth:`from_existing` owns nothing and leaves its workers running.
        """
        if not self._owned:
            return
        self._local.stop()
        if self.backend == "ray":
            import ray
            for w in self._remotes:
                ray.kill(w)
        else:
            for w in self._remotes:
                w.stop()
        self._remotes = []


def _is_actor_handle(obj: Any) -> bool:
    return type(obj).__name__ == "ActorHandle" and type(obj).__module__.startswith("ray")


def _ray_initialized() -> bool:
    try:
        import ray
    except ImportError:  # ray is a dependency, but keep the local path importable
        return False
    return ray.is_initialized()


__all__ = ["WorkerSet", "WorkerConfig"]
