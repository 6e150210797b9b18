"""Model-based hooks: keep the workers' dynamics models in step with the driver's.

A model-based policy carries a ``dynamics_model``: a torch module (often an
ensemble) with a ``normalizations`` attribute (a dict of numpy arrays: the input
and target statistics the model was fit with) and ``set_norms(normalizations)``.
The driver (the local worker) fits it on real transitions; these functions then
copy it to the remote workers, which use it to imagine rollouts. Envs may offer
``reward_fn``, ``termination_fn`` and ``dynamics_fn`` so imagined steps score and
end the way real ones do; :func:`set_policy_with_env_fn` hands them to the policies.

None of these touch metrics; they are plain functions to call inside a plan's
operators (see ``examples/model_based.py``).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowrl.errors import ConfigError

ENV_FN_TYPES = ("reward", "termination", "dynamics")


def _model_policies(worker) -> dict[str, Any]:
    return {pid: p for pid, p in worker.policy_map.items()
            if getattr(p, "dynamics_model", None) is not None}


def ensemble_weights(worker) -> dict[str, dict[str, np.ndarray]]:
    """``{policy_id: dynamics_model.state_dict() as numpy}`` for ``worker``'s policies
    that carry a ``dynamics_model``."""
    return {pid: {k: v.detach().cpu().numpy().copy()
                  for k, v in p.dynamics_model.state_dict().items()}
            for pid, p in _model_policies(worker).items()}


def _set_ensembles(worker, weights: dict[str, dict[str, np.ndarray]]) -> None:
    import torch  # here, not at the top: `import flowrl.ops` stays free of torch

    for pid, state in weights.items():
        model = worker.get_policy(pid).dynamics_model
        model.load_state_dict({k: torch.as_tensor(np.array(v)) for k, v in state.items()})


def sync_ensemble(workers) -> None:
    """Copy the local worker's dynamics models (every policy with a
    ``dynamics_model``) to every remote worker: one ``ray.put`` of the state dicts,
    then one call per worker, in submission order (so each worker's next request
    sees the new model).

    >>> import torch
    >>> from flowrl.policies import PGPolicy
    >>> from flowrl.workers import WorkerSet
    >>> class WithModel(PGPolicy):
    ...     def __init__(self, *a, **kw):
    ...         super().__init__(*a, **kw)
    ...         self.dynamics_model = torch.nn.Linear(4, 4)
    >>> ws = WorkerSet("CartPole-v1", WithModel, num_workers=1, backend="local")
    >>> torch.nn.init.zeros_(ws.local_worker().get_policy().dynamics_model.bias)
    ... # doctest: +ELLIPSIS
    Parameter containing:...
    >>> sync_ensemble(ws)
    >>> ws.remote_workers()[0].get_policy().dynamics_model.bias.abs().sum().item()
    0.0
    >>> ws.stop()
    """
    if workers.remote_workers():
        workers.apply_to_remotes(_set_ensembles, ensemble_weights(workers.local_worker()))


def _set_norms(worker, norms: dict[str, Any]) -> None:
    for pid, n in norms.items():
        worker.get_policy(pid).dynamics_model.set_norms(n)


def sync_stats(workers) -> None:
    """Copy the local worker's dynamics-model normalization statistics
    (``dynamics_model.normalizations``) to every remote worker's policies through
    ``set_norms``, with one ``ray.put``."""
    if workers.remote_workers():
        norms = {pid: p.dynamics_model.normalizations
                 for pid, p in _model_policies(workers.local_worker()).items()}
        workers.apply_to_remotes(_set_norms, norms)


class _InstallEnvFn:
    def __init__(self, fn_type: str):
        self.name = f"{fn_type}_fn"

    def __call__(self, worker) -> int:
        env = worker.env
        fn = getattr(env, self.name, None)
        if fn is None and hasattr(env, "unwrapped"):  # gymnasium wrappers do not forward
            fn = getattr(env.unwrapped, self.name, None)
        if fn is None:
            return 0
        worker.foreach_policy(lambda p, _: setattr(p, self.name, fn))
        return len(worker.policy_map)


def set_policy_with_env_fn(workers, fn_type: str = "reward") -> int:
    """Install the env's ``<fn_type>_fn`` (``"reward"``, ``"termination"`` or
    ``"dynamics"``) as the attribute of the same name on every policy of every
    worker, each from that worker's own ``worker.env``; workers whose env does not
    provide it are left alone. Returns how many policies got it.

    >>> from flowrl.policies import PGPolicy
    >>> from flowrl.workers import WorkerSet
    >>> ws = WorkerSet("CartPole-v1", PGPolicy, num_workers=1, backend="local")
    >>> set_policy_with_env_fn(ws, "termination")
    0
    >>> set_policy_with_env_fn(ws, "value")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: set_policy_with_env_fn(fn_type='value'): choose one of ['reward', 'termination', 'dynamics']
    >>> ws.stop()
    """
    if fn_type not in ENV_FN_TYPES:
        raise ConfigError(f"set_policy_with_env_fn(fn_type={fn_type!r}): choose one of "
                          f"{list(ENV_FN_TYPES)}")
    return sum(workers.foreach_worker(_InstallEnvFn(fn_type)))


__all__ = ["sync_ensemble", "sync_stats", "set_policy_with_env_fn", "ensemble_weights",
           "ENV_FN_TYPES"]
