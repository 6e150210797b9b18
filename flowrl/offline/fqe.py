"""Fitted Q evaluation (Le et al. 2019), the ``"fqe"`` off-policy estimate.

A Q-network of its own learns the target policy π's action values from logged
transitions by regressing, on each logged ``(s, a, r, s')``::

    Q(s, a)  <-  r + γ Σ_a' π(a'|s') Q̄(s', a')      (0 after a terminal step)

where Q̄ is a target copy that follows Q after every pass over the data
(``tau`` 1: a copy; less: a soft update). An episode's estimate is then
``v_target = Σ_a π(a|s_0) Q(s_0, a)`` at its first row, next to its logged
discounted return ``v_behavior`` (:func:`~flowrl.offline.estimators.summarize_estimates`).

``s'`` is the row's ``new_obs`` when the batch has that column, else the next
row's ``obs`` within the episode; a row with neither (the last row of a piece cut
before its end) trains nothing. Discrete actions only (π's probabilities of
every action are summed over); the target policy must be feedforward, since
its probabilities at ``s'`` are asked without a recurrent state. State kept: the
Q-network, its target copy and their optimizer, which keep learning from batch
to batch (RLlib's FQE model does too).
"""

from __future__ import annotations

import copy
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError
from flowrl.models.sequences import continues
from flowrl.offline.estimators import discounts, summarize_estimates
from flowrl.policies.torch_policy import (load_weights, make_adam, module_weights, to_numpy_tree,
                                          to_torch_tree)

SB = SampleBatch


def target_probabilities(policy: Any, obs: np.ndarray) -> np.ndarray:
    """π(·|s) of a policy with a Discrete action space, ``(B, num_actions)``: the
    softmax of the logits its greedy ``compute_actions`` reports."""
    _, extra = policy.compute_actions(obs, explore=False, vf_preds=False)
    logits = np.asarray(extra[SB.ACTION_DIST_INPUTS], np.float64)
    z = np.exp(logits - logits.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def next_observations(batch: SampleBatch) -> tuple[np.ndarray, np.ndarray]:
    """``(rows, next_obs)``: the rows whose successor state is known and that state
    (see the module docstring); terminal rows are included (their ``next_obs`` is
    their own ``obs``, which a terminal step never reads).

    >>> b = SampleBatch(obs=np.arange(4.0)[:, None], eps_id=[0, 0, 1, 1], t=[0, 1, 0, 1],
    ...                 terminateds=[False, True, False, False])
    >>> rows, nxt = next_observations(b)
    >>> rows.tolist(), nxt[:, 0].tolist()
    ([0, 1, 2], [1.0, 1.0, 3.0])
    """
    obs = np.asarray(batch[SB.OBS])
    term = np.asarray(batch[SB.TERMINATEDS], bool)
    if SB.NEXT_OBS in batch:
        return np.arange(batch.count), np.asarray(batch[SB.NEXT_OBS])
    eps = np.asarray(batch[SB.EPS_ID])
    t = np.asarray(batch[SB.T]) if SB.T in batch else None
    follows = (continues(eps, t) if t is not None else eps[1:] == eps[:-1])
    has_next = np.append(follows, False) & ~term
    rows = np.flatnonzero(has_next | term)
    nxt = obs.copy()
    nxt[:-1][has_next[:-1]] = obs[1:][has_next[:-1]]
    return rows, nxt[rows]


class FittedQEvaluation:
    """``"fqe"``: ``estimate(batch, policy)`` first fits the Q-network to ``batch``
    under ``policy`` (:meth:`train`), then estimates each episode of ``batch``.

    Options (RLlib's FQE names): ``n_iters`` passes over the batch per estimate
    (1), ``minibatch_size`` (None: the whole batch per step), ``lr`` (1e-3),
    ``tau`` (1.0), ``clip_grad_norm`` (100), ``hiddens`` of the Q MLP ((64, 64),
    ReLU), ``seed``. ``observation_space``/``action_space`` are the policy's.

    >>> import gymnasium as gym
    >>> fqe = FittedQEvaluation(gamma=0.9, observation_space=gym.spaces.Box(-1, 1, (2,)),
    ...                         action_space=gym.spaces.Discrete(3), seed=0)
    >>> fqe.q_values(np.zeros((4, 2), np.float32)).shape
    (4, 3)
    """

    name = "fqe"

    def __init__(self, *, gamma: float, observation_space: gym.Space, action_space: gym.Space,
                 n_iters: int = 1, minibatch_size: int | None = None, lr: float = 1e-3,
                 tau: float = 1.0, clip_grad_norm: float = 100.0,
                 hiddens: Sequence[int] = (64, 64), seed: int | None = None):
        where = "off_policy_estimation_methods['fqe']"
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError(f"{where}: fitted Q evaluation sums over discrete actions and "
                              f"the action space is {action_space}; use 'is' or 'wis'")
        for field, value, ok in (
                ("gamma", gamma, 0 <= gamma <= 1), ("n_iters", n_iters,
                                                    isinstance(n_iters, int) and n_iters >= 1),
                ("minibatch_size", minibatch_size, minibatch_size is None or (
                    isinstance(minibatch_size, int) and minibatch_size >= 1)),
                ("lr", lr, lr > 0), ("tau", tau, 0 < tau <= 1),
                ("clip_grad_norm", clip_grad_norm, clip_grad_norm > 0),
                ("hiddens", hiddens, all(isinstance(h, int) and h > 0 for h in hiddens))):
            if not ok:
                raise ConfigError(f"{where}: {field}={value!r} is out of range")
        self.gamma, self.n_iters, self.minibatch_size = gamma, n_iters, minibatch_size
        self.tau, self.clip_grad_norm = tau, clip_grad_norm
        self.observation_space = observation_space
        self._discrete_obs = isinstance(observation_space, gym.spaces.Discrete)
        obs_dim = (int(observation_space.n) if self._discrete_obs
                   else int(np.prod(observation_space.shape)))
        self._obs_dim = obs_dim
        self._rng = np.random.default_rng(seed)
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            layers: list[nn.Module] = []
            size = obs_dim
            for h in hiddens:
                layers += [nn.Linear(size, h), nn.ReLU()]
                size = h
            layers.append(nn.Linear(size, int(action_space.n)))
            self.q = nn.Sequential(*layers)
        self.target = copy.deepcopy(self.q).requires_grad_(False)
        self.optimizer = make_adam(self.q.parameters(), lr)

    def _features(self, obs: np.ndarray) -> torch.Tensor:
        x = torch.as_tensor(np.asarray(obs))
        if self._discrete_obs:
            return nn.functional.one_hot(x.long().reshape(-1), self._obs_dim).float()
        return x.reshape(len(x), self._obs_dim).float()

    def q_values(self, obs: np.ndarray) -> np.ndarray:
        """``Q(s, ·)`` for a batch of observations, ``(B, num_actions)``."""
        with torch.no_grad():
            return self.q(self._features(obs)).numpy()

    def train(self, batch: SampleBatch, policy: Any) -> float:
        """``n_iters`` passes of Q regression over ``batch``'s transitions (see the
        module docstring), the target copy updated after each; returns the last
        pass's mean squared error (NaN when no row has a known successor)."""
        if getattr(policy, "is_recurrent", False):
            raise ConfigError("off_policy_estimation_methods['fqe']: the target policy is "
                              "recurrent and fitted Q evaluation asks its action "
                              "probabilities without a state; use 'is' or 'wis'")
        rows, next_obs = next_observations(batch)
        if len(rows) == 0:
            return float("nan")
        obs = self._features(np.asarray(batch[SB.OBS])[rows])
        actions = torch.as_tensor(np.asarray(batch[SB.ACTIONS])[rows]).long()
        rewards = torch.as_tensor(np.asarray(batch[SB.REWARDS], np.float32)[rows])
        live = torch.as_tensor(~np.asarray(batch[SB.TERMINATEDS], bool)[rows]).float()
        next_x = self._features(next_obs)
        probs = torch.as_tensor(target_probabilities(policy, next_obs), dtype=torch.float32)
        size = self.minibatch_size or len(rows)
        loss_sum = 0.0
        for _ in range(self.n_iters):
            order = torch.as_tensor(self._rng.permutation(len(rows)))
            loss_sum, steps = 0.0, 0
            for start in range(0, len(rows), size):
                idx = order[start:start + size]
                with torch.no_grad():
                    v_next = (probs[idx] * self.target(next_x[idx])).sum(dim=1)
                    y = rewards[idx] + self.gamma * live[idx] * v_next
                q = self.q(obs[idx]).gather(1, actions[idx, None]).squeeze(1)
                loss = nn.functional.mse_loss(q, y)
                self.optimizer.zero_grad(set_to_none=True)
                loss.backward()
                nn.utils.clip_grad_norm_(self.q.parameters(), self.clip_grad_norm)
                self.optimizer.step()
                loss_sum, steps = loss_sum + float(loss.detach()), steps + 1
            with torch.no_grad():
                for p, tp in zip(self.q.parameters(), self.target.parameters()):
                    tp.mul_(1 - self.tau).add_(self.tau * p)
            loss_sum /= steps
        return loss_sum

    def values(self, obs: np.ndarray, policy: Any) -> np.ndarray:
        """``V^π(s) = Σ_a π(a|s) Q(s, a)`` for a batch of observations, ``(B,)``."""
        return (target_probabilities(policy, obs) * self.q_values(obs)).sum(axis=1)

    def get_state(self) -> dict[str, Any]:
        """What the fit has learnt so far, for checkpoints: the Q-network, its target
        copy, the optimizer's state and the minibatch generator's state (the fit
        carries on from batch to batch, so a restored run carries on from the fit
        it had, not from an untrained network)."""
        return {"q": module_weights(self.q), "target": module_weights(self.target),
                "optimizer": to_numpy_tree(self.optimizer.state_dict()),
                "rng": self._rng.bit_generator.state}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned (of an estimator of the same
        spaces and ``hiddens``)."""
        where = "off_policy_estimation_methods['fqe'] (restoring a checkpoint)"
        load_weights(self.q, state["q"], where)
        load_weights(self.target, state["target"], where)
        self.optimizer.load_state_dict(to_torch_tree(state["optimizer"]))
        self._rng.bit_generator.state = state["rng"]

    def estimate(self, batch: SampleBatch, policy: Any) -> dict[str, float]:
        loss = self.train(batch, policy)
        episodes = batch.split_by_episode()
        if not episodes:
            return {**summarize_estimates([]), "loss": loss}
        first_obs = np.stack([np.asarray(e[SB.OBS][0]) for e in episodes])
        v_target = self.values(first_obs, policy)
        v_behavior = [float((discounts(e.count, self.gamma)
                             * np.asarray(e[SB.REWARDS], np.float64)).sum()) for e in episodes]
        return {**summarize_estimates(list(zip(v_behavior, v_target.tolist()))), "loss": loss}


__all__ = ["FittedQEvaluation", "next_observations", "target_probabilities"]
