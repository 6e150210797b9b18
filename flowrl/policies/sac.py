"""Soft Actor-Critic (Haarnoja et al. 2018), for ``Box`` and ``Discrete`` actions.

Networks (each an MLP of its :class:`~flowrl.models.ModelConfig`): the policy π
(``policy_model``), one or two critics ``Q_1, Q_2`` (``Q_model``; two with
``twin_q``) and their target copies ``Q'_i``, and the entropy weight
``α = exp(log α)``. A replayed n-step row ``(s, a, R, s', d)`` (``d = γ^k``, 0 after
a termination: :func:`~flowrl.policies.dqn.n_step_batch`) gives, with
``a' ~ π(·|s')``::

    y      = R + d · (min_i Q'_i(s', a') - α log π(a'|s'))
    L_Q    = Σ_i mean(w · (Q_i(s, a) - y)²)                 (w: importance weights, else 1)
    L_π    = mean(α log π(ã|s) - min_i Q_i(s, ã)),  ã ~ π(·|s) reparameterised
    L_α    = -mean(log α · (log π(ã|s) + H̄))               (H̄: target_entropy)

one Adam step each (critics, then actor, then α: three optimizers with their own
learning rates), then the targets follow by Polyak averaging with ``tau``
(:meth:`SACPolicy.update_target`, called by the plan's target update).

``Box`` actions: π is a tanh-squashed Gaussian
(:class:`~flowrl.policies.distributions.SquashedGaussian`) on the unit box; the
env gets ``low + (a + 1)(high - low)/2`` (:mod:`flowrl.policies.continuous`), and
batches hold those env actions, mapped back to the unit box for the critics.
Densities, and so ``target_entropy="auto" = -dim(A)``, are of the unit-box
action. Infinite bounds are refused (ConfigError): a squashed policy needs them.

``Discrete`` actions (Christodoulou 2019): π is a categorical, the critics give
``Q(s, ·)`` for every action, and expectations over actions are exact sums:
``y = R + d · Σ_a' π(a'|s') (min_i Q'_i(s', a') - α log π(a'|s'))``,
``L_π = mean Σ_a π(a|s)(α log π(a|s) - min_i Q_i(s, a))``, ``L_α`` weighted by
π likewise, and ``"auto" = 0.98 · log n`` as in RLlib 1.x.

The critic loss is the mean squared TD error, as in the paper, CleanRL and
Stable-Baselines3 (RLlib 1.x took a Huber loss).
"""

from __future__ import annotations

import copy
import math
from typing import Any

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl.batch import SampleBatch
from flowrl.callbacks import learn_callbacks
from flowrl.errors import ConfigError
from flowrl.models.config import ModelConfig, check_mlp_config
from flowrl.policies.continuous import (StateActionQ, box_bounds, flat_obs_dim, mlp,
                                        soft_update, to_env_actions, to_unit_actions)
from flowrl.policies.distributions import LOG_STD_MAX, LOG_STD_MIN, SquashedGaussian
from flowrl.policies.dqn import N_STEP_DISCOUNT, n_step_batch
from flowrl.policies.numpy_acting import (NumpyMLP, ParameterGuard, SnapshotCache,
                                           categorical_mode, categorical_sample, in_chunks,
                                           max_rows, obs_rows, squashed_gaussian_act)
from flowrl.policies.torch_policy import (load_weights, make_adam, model_obs, module_weights,
                                          to_numpy_tree, to_torch_tree)

SB = SampleBatch

#: RLlib 1.x's network defaults for SAC's ``Q_model`` and ``policy_model``.
SAC_MODEL = ModelConfig(fcnet_hiddens=(256, 256), fcnet_activation="relu")


def auto_target_entropy(action_space: gym.Space) -> float:
    """RLlib 1.x's ``target_entropy="auto"``: ``-dim(A)`` for a ``Box``,
    ``0.98 · log n`` for ``Discrete(n)``.

    >>> auto_target_entropy(gym.spaces.Box(-1, 1, (3,))), round(auto_target_entropy(gym.spaces.Discrete(2)), 4)
    (-3.0, 0.6793)
    """
    if isinstance(action_space, gym.spaces.Discrete):
        return 0.98 * math.log(int(action_space.n))
    return -float(np.prod(action_space.shape))


class Critics(nn.Module):
    """``Q_1`` and, with ``twin``, ``Q_2``: :class:`StateActionQ` networks for
    ``Box`` actions (``forward(obs, unit_actions) -> [(B,), ...]``), or MLPs giving
    ``Q(s, ·)`` for ``Discrete(n)`` (``forward(obs) -> [(B, n), ...]``)."""

    def __init__(self, obs_dim: int, action_space: gym.Space, model_config, twin: bool):
        super().__init__()
        self.discrete = isinstance(action_space, gym.spaces.Discrete)

        def one() -> nn.Module:
            if self.discrete:
                return mlp(obs_dim, int(action_space.n), model_config)
            return StateActionQ(obs_dim, int(np.prod(action_space.shape)), model_config)

        self.q = nn.ModuleList([one() for _ in range(2 if twin else 1)])

    def forward(self, obs: torch.Tensor, actions: torch.Tensor | None = None
                ) -> list[torch.Tensor]:
        if self.discrete:
            return [q(obs) for q in self.q]
        return [q(obs, actions) for q in self.q]


class SACModel(nn.Module):
    """What :meth:`SACPolicy.get_weights` holds: ``policy`` (an MLP to the
    distribution inputs: ``2 · dim(A)`` means and log-stds, or ``n`` logits),
    ``critics`` (:class:`Critics`) and ``log_alpha``."""

    def __init__(self, obs_dim: int, action_space: gym.Space, policy_model, q_model,
                 twin_q: bool, initial_alpha: float):
        super().__init__()
        discrete = isinstance(action_space, gym.spaces.Discrete)
        outputs = int(action_space.n) if discrete else 2 * int(np.prod(action_space.shape))
        self.policy = mlp(obs_dim, outputs, policy_model)
        self.critics = Critics(obs_dim, action_space, q_model, twin_q)
        self.log_alpha = nn.Parameter(torch.tensor(math.log(initial_alpha)))


class PolicyActingModule(nn.Module):
    """SAC's policy network as one module for export (:mod:`flowrl.export`):
    ``forward(obs) -> action_dist_inputs``, ``(B, 2 · dim(A))`` squashed-Gaussian
    means and log-stds (the greedy action is ``tanh`` of the means, mapped onto the
    bounds) or ``(B, n)`` logits. It holds its own copy of the network."""

    #: The outputs' names, in order (ONNX names them so).
    output_names = ("action_dist_inputs",)

    def __init__(self, policy: nn.Module, obs_dim: int, *, discrete_obs: bool):
        super().__init__()
        self.policy, self.obs_dim, self.discrete_obs = policy, obs_dim, discrete_obs

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.policy(model_obs(obs, self.obs_dim, discrete=self.discrete_obs,
                                     image=False))


class _NumpyActor:
    """Numpy views of the policy MLP (see :mod:`flowrl.policies.numpy_acting`)."""

    __slots__ = ("guard", "net", "max_rows")

    @classmethod
    def build(cls, policy: nn.Module) -> "_NumpyActor | None":
        net = NumpyMLP.build(policy)
        if net is None:
            return None
        self = cls()
        self.guard, self.net, self.max_rows = ParameterGuard(policy), net, max_rows(net)
        return self

    def __call__(self, x: np.ndarray) -> np.ndarray:
        return in_chunks(self.net, x, self.max_rows)


class SACPolicy:
    """SAC's policy, critics and entropy weight; see the module docstring.

    Keyword args (RLlib 1.x names): ``Q_model``, ``policy_model`` (ModelConfigs,
    dicts of their fields or hidden sizes; MLPs only), ``twin_q``, ``tau``,
    ``initial_alpha``, ``target_entropy`` (a number or ``"auto"``), ``gamma``,
    ``n_step``, ``actor_learning_rate``, ``critic_learning_rate``,
    ``entropy_learning_rate``, ``grad_clip`` (global norm per optimizer, or
    None), ``seed``, ``numpy_inference`` (act through numpy views of the policy
    MLP, the default; False forces torch: the same forward, the same draws).

    Acting samples with the policy's seeded numpy generator (its state is in
    :meth:`get_state`); learning samples with its seeded ``torch.Generator``.

    >>> p = SACPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2, 2, (1,)), seed=0,
    ...               Q_model=[16], policy_model=[16])
    >>> actions, extra = p.compute_actions(np.zeros((4, 3), np.float32))
    >>> actions.shape, bool((np.abs(actions) <= 2).all()), sorted(extra)
    ((4, 1), True, ['action_dist_inputs', 'action_logp'])
    """

    #: The algorithm messages name (a subclass for another algorithm sets its own).
    algorithm = "SAC"

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 Q_model: Any = None, policy_model: Any = None, twin_q: bool = True,
                 tau: float = 5e-3, initial_alpha: float = 1.0,
                 target_entropy: float | str = "auto", gamma: float = 0.99, n_step: int = 1,
                 actor_learning_rate: float = 3e-4, critic_learning_rate: float = 3e-4,
                 entropy_learning_rate: float = 3e-4, grad_clip: float | None = None,
                 seed: int | None = None, numpy_inference: bool = True, **unused: Any):
        name, algo = type(self).__name__, self.algorithm
        if not isinstance(action_space, (gym.spaces.Box, gym.spaces.Discrete)):
            raise ConfigError(f"{algo}: the env's action space {action_space} is not supported; "
                              f"{algo} takes Box (continuous) or Discrete actions: choose an "
                              "env with one of those")
        self.discrete = isinstance(action_space, gym.spaces.Discrete)
        if not self.discrete:
            self.low, self.high = box_bounds(action_space, algo)
        self._obs_dim = flat_obs_dim(observation_space, f"{algo} ({name})")
        q_config = ModelConfig.coerce(SAC_MODEL if Q_model is None else Q_model, "Q_model")
        pi_config = ModelConfig.coerce(SAC_MODEL if policy_model is None else policy_model,
                                       "policy_model")
        check_mlp_config(q_config, f"{name}(Q_model=...)", algo)
        check_mlp_config(pi_config, f"{name}(policy_model=...)", algo)
        if target_entropy == "auto" or target_entropy is None:
            target_entropy = auto_target_entropy(action_space)
        for field, ok in (("tau", 0 < tau <= 1), ("initial_alpha", initial_alpha > 0),
                          ("gamma", 0 <= gamma <= 1),
                          ("n_step", isinstance(n_step, int) and n_step >= 1),
                          ("actor_learning_rate", actor_learning_rate > 0),
                          ("critic_learning_rate", critic_learning_rate > 0),
                          ("entropy_learning_rate", entropy_learning_rate > 0),
                          ("grad_clip", grad_clip is None or grad_clip > 0),
                          ("target_entropy", isinstance(target_entropy, (int, float))
                           and math.isfinite(target_entropy))):
            if not ok:
                raise ConfigError(f"{name}({field}=...) is out of range; see the {name} "
                                  "docstring for valid values")
        self.observation_space, self.action_space = observation_space, action_space
        self.Q_model, self.policy_model = q_config, pi_config
        self.twin_q, self.tau, self.gamma, self.n_step = bool(twin_q), float(tau), gamma, n_step
        self.target_entropy = float(target_entropy)
        self.grad_clip = grad_clip
        self.learning_rates = {"actor": actor_learning_rate, "critic": critic_learning_rate,
                               "entropy": entropy_learning_rate}
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.model = SACModel(self._obs_dim, action_space, pi_config, q_config,
                                  self.twin_q, initial_alpha)
        self.target_critics = copy.deepcopy(self.model.critics)
        self.target_critics.requires_grad_(False)
        self._optimizers: dict[str, torch.optim.Adam] | None = None
        #: the parameters each optimizer owns
        self._params = {"actor": list(self.model.policy.parameters()),
                        "critic": list(self.model.critics.parameters()),
                        "entropy": [self.model.log_alpha]}
        self.generator = torch.Generator()
        if seed is not None:
            self.generator.manual_seed(seed)
        else:
            self.generator.seed()
        self._rng = np.random.default_rng(seed)
        self.numpy_inference = bool(numpy_inference)
        self._numpy_cache = SnapshotCache(_NumpyActor.build)

    @property
    def optimizers(self) -> dict[str, torch.optim.Adam]:
        """``{"actor", "critic", "entropy"}`` Adam optimizers over the policy, the
        critics and ``log_alpha`` (one per entry of ``_params``, at its entry of
        ``learning_rates``), created on first use (a worker that only acts builds
        none)."""
        if self._optimizers is None:
            self._optimizers = {name: make_adam(params, self.learning_rates[name])
                                for name, params in self._params.items()}
        return self._optimizers

    @property
    def alpha(self) -> float:
        """The entropy weight ``α = exp(log α)``."""
        return float(self.model.log_alpha.detach().exp())

    # -- acting -------------------------------------------------------------------
    def _obs_tensor(self, obs) -> torch.Tensor:
        obs = np.asarray(obs)
        if not obs.flags.writeable:  # arrays from Ray's object store are read-only
            obs = obs.copy()
        return model_obs(torch.as_tensor(obs), self._obs_dim,
                         discrete=isinstance(self.observation_space, gym.spaces.Discrete),
                         image=False)

    def _dist_inputs(self, obs_batch) -> np.ndarray:
        """The policy MLP's outputs for a batch, through numpy views when it can."""
        snap = self._numpy_cache.get(self.model.policy) if self.numpy_inference else None
        if snap is not None:
            return snap(obs_rows(obs_batch, self._obs_dim,
                                 isinstance(self.observation_space, gym.spaces.Discrete)))
        with torch.inference_mode():
            return self.model.policy(self._obs_tensor(obs_batch)).numpy()

    def acting_module(self) -> PolicyActingModule:
        """A copy of the policy network as a :class:`PolicyActingModule`.

        >>> p = SACPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)),
        ...               policy_model=[8], Q_model=[8], seed=0)
        >>> tuple(p.acting_module()(torch.zeros(5, 3)).shape)
        (5, 4)
        """
        return PolicyActingModule(copy.deepcopy(self.model.policy), self._obs_dim,
                                  discrete_obs=isinstance(self.observation_space,
                                                          gym.spaces.Discrete))

    def compute_actions(self, obs_batch, explore: bool = True, **unused: Any
                        ) -> tuple[np.ndarray, dict]:
        """Actions for ``(B, *obs_shape)`` observations: sampled, or without
        ``explore`` the mode (``tanh(mean)``; the most likely action). ``Box``
        actions come within the env's bounds, ``(B, *shape)`` float32. ``extra`` has
        ``action_logp`` (unit-box density for ``Box``) and ``action_dist_inputs``."""
        inputs = self._dist_inputs(obs_batch)
        if self.discrete:
            actions, logp = (categorical_sample(inputs, self._rng.random(len(inputs)))
                             if explore else categorical_mode(inputs))
            actions = actions.astype(np.int64)
        else:
            unit, logp = squashed_gaussian_act(inputs, explore, self._rng,
                                               (LOG_STD_MIN, LOG_STD_MAX))
            actions = to_env_actions(unit.reshape(len(unit), *self.action_space.shape),
                                     self.low, self.high)
        return actions, {SB.ACTION_LOGP: np.asarray(logp, np.float32),
                         SB.ACTION_DIST_INPUTS: inputs.astype(np.float32, copy=False)}

    def value(self, obs_batch, **unused: Any) -> np.ndarray:
        """Zeros ``(B,)``: SAC bootstraps from its critics when it learns, and the
        samplers' value column is not used."""
        return np.zeros(len(obs_batch), np.float32)

    # -- postprocessing --------------------------------------------------------------
    def postprocess_trajectory(self, batch: SampleBatch, last_value: float = 0.0) -> SampleBatch:
        """n-step replay rows of one trajectory (:func:`~flowrl.policies.dqn.n_step_batch`)."""
        return n_step_batch(batch, n_step=self.n_step, gamma=self.gamma)

    # -- learning ---------------------------------------------------------------------
    def _tensors(self, batch: SampleBatch) -> dict[str, torch.Tensor]:
        actions = np.asarray(batch[SB.ACTIONS])
        if self.discrete:
            act = torch.as_tensor(actions, dtype=torch.long).reshape(-1)
        else:
            unit = to_unit_actions(actions.reshape(len(actions), -1).astype(np.float32),
                                   self.low.reshape(-1), self.high.reshape(-1))
            act = torch.as_tensor(np.asarray(unit, np.float32))
        w = batch.get("weights")
        return {"obs": self._obs_tensor(batch[SB.OBS]),
                "next_obs": self._obs_tensor(batch[SB.NEXT_OBS]), "actions": act,
                "rewards": torch.as_tensor(np.asarray(batch[SB.REWARDS], np.float32)),
                "discount": torch.as_tensor(np.asarray(batch[N_STEP_DISCOUNT], np.float32)),
                "weights": None if w is None else torch.as_tensor(np.asarray(w, np.float32))}

    def _targets(self, t: dict[str, torch.Tensor], alpha: torch.Tensor) -> torch.Tensor:
        """``y`` of the module docstring, without gradients."""
        with torch.no_grad():
            out = self.model.policy(t["next_obs"])
            if self.discrete:
                logp = torch.log_softmax(out, dim=-1)
                q_next = torch.min(*self.target_critics(t["next_obs"])) \
                    if self.twin_q else self.target_critics(t["next_obs"])[0]
                v_next = (logp.exp() * (q_next - alpha * logp)).sum(-1)
            else:
                a_next, logp = SquashedGaussian(out).rsample_logp(self.generator)
                qs = self.target_critics(t["next_obs"], a_next)
                v_next = (torch.min(*qs) if self.twin_q else qs[0]) - alpha * logp
            return t["rewards"] + t["discount"] * v_next

    def _critic_values(self, t: dict[str, torch.Tensor]) -> list[torch.Tensor]:
        """``Q_i(s, a)`` of the batch's actions, ``(B,)`` each."""
        if self.discrete:
            index = t["actions"].unsqueeze(1)
            return [q.gather(1, index).squeeze(1) for q in self.model.critics(t["obs"])]
        return self.model.critics(t["obs"], t["actions"])

    def compute_td_error(self, batch: SampleBatch) -> np.ndarray:
        """Per-row TD errors ``mean_i |Q_i(s, a) - y|`` under the current weights
        (RLlib 1.x's priority for SAC), ``(n,)``; weights are not changed."""
        t = self._tensors(batch)
        with torch.no_grad():
            y = self._targets(t, self.model.log_alpha.exp())
            td = torch.stack([(q - y).abs() for q in self._critic_values(t)]).mean(0)
        return td.numpy().copy()

    def learn_on_batch(self, batch: SampleBatch, **unused: Any) -> dict[str, float]:
        """One SAC update on ``batch`` (see :meth:`sgd_step`), ``custom_metrics`` added
        when callbacks run ``on_learn_on_batch`` first."""
        if batch.count == 0:
            raise ConfigError(f"{type(self).__name__}.learn_on_batch got an empty batch")
        custom = learn_callbacks(self, batch)
        stats = self.sgd_step(batch)
        if custom is not None:
            stats["custom_metrics"] = custom
        return stats

    def _step(self, name: str, loss: torch.Tensor) -> torch.Tensor | None:
        """Gradients of ``loss`` for the parameters optimizer ``name`` owns (and for
        no others: ``torch.autograd.grad``), clipped at ``grad_clip``, then its step.
        Returns the gradients' norm before clipping (None without ``grad_clip``)."""
        params = self._params[name]
        for p, g in zip(params, torch.autograd.grad(loss, params)):
            p.grad = g
        norm = nn.utils.clip_grad_norm_(params, self.grad_clip) if self.grad_clip else None
        self.optimizers[name].step()
        return norm

    def critic_losses(self, t: dict[str, torch.Tensor], q_data: list[torch.Tensor],
                      td_loss: torch.Tensor) -> tuple[dict[str, torch.Tensor],
                                                      dict[str, torch.Tensor]]:
        """The losses stepped after the targets are known, ``{optimizer name: loss}``,
        and the figures they report: SAC's is ``L_Q`` (``td_loss``) alone; a
        subclass adds terms (``q_data``: ``Q_i(s, a)`` of the batch's actions)."""
        return {"critic": td_loss}, {"critic_loss": td_loss}

    def actor_objective(self, t: dict[str, torch.Tensor], inputs: torch.Tensor,
                        actions: torch.Tensor | None) -> torch.Tensor:
        """What the actor maximises beside its entropy, per row ``(B,)``: for ``Box``
        actions ``min_i Q_i(s, ã)`` of the reparameterised ``actions`` (gradients
        reach the policy only, see :meth:`_step`), for ``Discrete`` ones
        ``Σ_a π(a|s) min_i Q_i(s, a)`` (``inputs``: the policy's logits; Q without
        gradients)."""
        if self.discrete:
            with torch.no_grad():
                q = self.model.critics(t["obs"])
                q = torch.min(*q) if self.twin_q else q[0]
            return (torch.softmax(inputs, dim=-1) * q).sum(-1)
        q = self.model.critics(t["obs"], actions)
        return torch.min(*q) if self.twin_q else q[0]

    def sgd_step(self, batch: SampleBatch) -> dict[str, float]:
        """The critic, actor and entropy steps of the module docstring on ``batch``.
        Stats: ``critic_loss``, ``actor_loss``, ``alpha_loss``, ``alpha_value``,
        ``entropy`` (``-mean log π``), ``mean_q``/``max_q``/``min_q`` (of
        ``Q_1(s, a)``), ``mean_td_error``, ``target_entropy`` and, with
        ``grad_clip``, each optimizer's gradient norm before clipping
        (``critic_grad_gnorm``, ``actor_grad_gnorm``, ``alpha_grad_gnorm``), plus
        the figures of :meth:`critic_losses`."""
        m, t = self.model, self._tensors(batch)
        alpha = m.log_alpha.detach().exp()
        y = self._targets(t, alpha)
        qs = self._critic_values(t)
        w = t["weights"]
        td_loss = sum(((q - y).pow(2) if w is None else w * (q - y).pow(2)).mean() for q in qs)
        losses, figures = self.critic_losses(t, qs, td_loss)
        norms = {name: self._step(name, loss) for name, loss in losses.items()}
        out = m.policy(t["obs"])
        if self.discrete:
            logp_all = torch.log_softmax(out, dim=-1)
            probs = logp_all.exp()
            actor_loss = ((probs * alpha * logp_all).sum(-1)
                          - self.actor_objective(t, out, None)).mean()
            logp = (probs * logp_all).sum(-1)  # -entropy per row
            alpha_loss = -(m.log_alpha * (probs.detach() * (
                logp_all.detach() + self.target_entropy)).sum(-1)).mean()
        else:
            a_pi, logp = SquashedGaussian(out).rsample_logp(self.generator)
            actor_loss = (alpha * logp - self.actor_objective(t, out, a_pi)).mean()
            alpha_loss = -(m.log_alpha * (logp.detach() + self.target_entropy)).mean()
        norms["actor"] = self._step("actor", actor_loss)
        norms["alpha"] = self._step("entropy", alpha_loss)
        q1 = qs[0].detach()
        figures = {**figures, "actor_loss": actor_loss,
                   "alpha_loss": alpha_loss, "alpha_value": m.log_alpha.exp(),
                   "entropy": -logp.mean(), "mean_q": q1.mean(), "max_q": q1.max(),
                   "min_q": q1.min(), "mean_td_error": (q1 - y).abs().mean(),
                   **{f"{k}_grad_gnorm": v for k, v in norms.items() if v is not None}}
        values = torch.stack([v.detach().reshape(()) for v in figures.values()]).tolist()
        return {**dict(zip(figures, values)), "target_entropy": self.target_entropy}

    def update_target(self) -> None:
        """Polyak-average the critics into the target critics with ``tau``
        (:func:`~flowrl.policies.continuous.soft_update`)."""
        soft_update(self.target_critics, self.model.critics, self.tau)

    # -- weights and state ---------------------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        """The policy, critics and ``log_alpha`` as ``{name: numpy array}`` (copies)."""
        return module_weights(self.model)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Load what :meth:`get_weights` returned (the target critics are kept)."""
        load_weights(self.model, weights, "SACPolicy.set_weights")

    def get_state(self) -> dict[str, Any]:
        """Weights, target critics, the three optimizers' states and both RNGs."""
        return {"weights": self.get_weights(),
                "target": {k: v.numpy().copy()
                           for k, v in self.target_critics.state_dict().items()},
                "optimizers": {k: to_numpy_tree(o.state_dict())
                               for k, o in self.optimizers.items()},
                "generator": self.generator.get_state().numpy().copy(),
                "rng": self._rng.bit_generator.state}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned."""
        self.set_weights(state["weights"])
        self.target_critics.load_state_dict({k: torch.tensor(v)
                                             for k, v in state["target"].items()})
        for k, o in self.optimizers.items():
            o.load_state_dict(to_torch_tree(state["optimizers"][k]))
        self.generator.set_state(torch.tensor(state["generator"]))
        self._rng.bit_generator.state = state["rng"]


__all__ = ["SACPolicy", "SACModel", "Critics", "PolicyActingModule", "auto_target_entropy",
           "SAC_MODEL"]
