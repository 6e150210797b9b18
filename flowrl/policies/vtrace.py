"""V-trace off-policy value targets and policy-gradient advantages (Espeholt et al. 2018).

Notation of the paper, time-major arrays of shape ``[T, B]`` (``T`` steps of ``B``
independent sequences); ``bootstrap_value`` is ``V(x_T)``, shape ``[B]``:

- ``ρ_t = min(ρ̄, π(a_t|x_t) / μ(a_t|x_t))`` (``clip_rho_threshold`` ρ̄),
  ``c_t = min(1, π/μ)``, ``ρ^pg_t = min(ρ̄_pg, π/μ)`` (``clip_pg_rho_threshold``);
- ``δ_t V = ρ_t (r_t + γ_t V(x_{t+1}) - V(x_t))`` with ``V(x_T)`` the bootstrap;
- ``v_s - V(x_s) = δ_s V + γ_s c_s (v_{s+1} - V(x_{s+1}))``, ``v_T = V(x_T)``;
- policy-gradient advantage ``A_s = ρ^pg_s (r_s + γ_s v_{s+1} - V(x_s))``.

``γ_t`` is the per-step discount ``discounts[t]`` (0 where an episode terminated).
The targets are constants for the learner: with torch inputs the outputs carry no
gradient. A threshold of ``None`` means no clipping.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from flowrl.errors import ConfigError


def _is_torch(x: Any) -> bool:
    return type(x).__module__.startswith("torch")


def vtrace(behaviour_logp, target_logp, discounts, rewards, values, bootstrap_value,
           clip_rho_threshold: float | None = 1.0,
           clip_pg_rho_threshold: float | None = 1.0) -> tuple[Any, Any]:
    """``(vs, pg_advantages)``, both ``[T, B]``, from log-probabilities of the actions
    taken under the behaviour policy μ and the target policy π (see the module
    docstring). Inputs are all numpy arrays or all torch tensors; outputs match.

    On-policy (π = μ) with thresholds >= 1, ``vs`` is the n-step bootstrapped
    return: one step, reward 1, discount 0.9, ``V(x_1) = 2`` gives ``1 + 0.9 * 2``.

    >>> z = np.zeros((1, 1))
    >>> vs, adv = vtrace(z, z, np.full((1, 1), 0.9), np.ones((1, 1)), np.zeros((1, 1)),
    ...                  np.full(1, 2.0))
    >>> vs.tolist(), adv.tolist()
    ([[2.8]], [[2.8]])
    """
    torch_in = _is_torch(rewards)
    if torch_in:
        import torch
        with torch.no_grad():
            arrays = [t.detach().to(torch.float64).cpu().numpy()
                      for t in (behaviour_logp, target_logp, discounts, rewards, values,
                                bootstrap_value)]
        device, dtype = rewards.device, rewards.dtype
    else:
        arrays = [np.asarray(a, dtype=np.float64)
                  for a in (behaviour_logp, target_logp, discounts, rewards, values,
                            bootstrap_value)]
    mu, pi, gamma, r, v, boot = arrays
    if r.ndim != 2:
        raise ConfigError(f"vtrace: rewards must be time-major [T, B], got shape {r.shape}")
    for name, a in (("behaviour_logp", mu), ("target_logp", pi), ("discounts", gamma),
                    ("values", v)):
        if a.shape != r.shape:
            raise ConfigError(f"vtrace: {name} has shape {a.shape} but rewards has "
                              f"{r.shape}; give every input as [T, B]")
    if boot.shape != r.shape[1:]:
        raise ConfigError(f"vtrace: bootstrap_value has shape {boot.shape}; expected "
                          f"[B] = {r.shape[1:]}")
    for name, thr in (("clip_rho_threshold", clip_rho_threshold),
                      ("clip_pg_rho_threshold", clip_pg_rho_threshold)):
        if thr is not None and not thr > 0:
            raise ConfigError(f"vtrace({name}={thr!r}): must be > 0 or None (no clipping)")
    ratio = np.exp(pi - mu)
    rho = ratio if clip_rho_threshold is None else np.minimum(clip_rho_threshold, ratio)
    c = np.minimum(1.0, ratio)
    rho_pg = ratio if clip_pg_rho_threshold is None else np.minimum(clip_pg_rho_threshold, ratio)
    v_next = np.concatenate([v[1:], boot[None]], axis=0)
    delta = rho * (r + gamma * v_next - v)
    # v_s - V(x_s) = δ_s + γ_s c_s (v_{s+1} - V(x_{s+1})): one reverse scan.
    diff = np.empty_like(r)
    acc = np.zeros(r.shape[1:])
    for t in range(len(r) - 1, -1, -1):
        acc = delta[t] + gamma[t] * c[t] * acc
        diff[t] = acc
    vs = v + diff
    vs_next = np.concatenate([vs[1:], boot[None]], axis=0)
    pg_adv = rho_pg * (r + gamma * vs_next - v)
    if torch_in:
        import torch
        return (torch.as_tensor(vs, dtype=dtype, device=device),
                torch.as_tensor(pg_adv, dtype=dtype, device=device))
    return vs, pg_adv


__all__ = ["vtrace"]
