"""DDPG (Lillicrap et al. 2016) and TD3 (Fujimoto et al. 2018): a deterministic actor
``μ(s) = tanh(f(s))`` in the unit box ``[-1, 1]``, one or two critics ``Q(s, a)``
over unit-box actions, and target copies ``μ'``, ``Q'`` that follow by soft
updates. The env gets ``μ(s)`` mapped onto its ``Box`` bounds
(:func:`~flowrl.policies.continuous.to_env_actions`), and batches hold those env
actions; learning maps them back (:func:`~flowrl.policies.continuous.to_unit_actions`).

A stored n-step row ``(s_t, a_t, R_t, s_{t+k}, d_t)`` (:func:`n_step_batch`, as
DQN's) gives the critic target::

    ã = μ'(s_{t+k})                                                 (DDPG)
    ã = clip(μ'(s_{t+k}) + clip(ε, -c, c) / h, -1, 1), ε ~ N(0, σ²)   (target smoothing)
    y_t = R_t + d_t · Q'(s_{t+k}, ã)                                 (one critic)
    y_t = R_t + d_t · min(Q'_1(s_{t+k}, ã), Q'_2(s_{t+k}, ã))        (twin_q)

with ``σ = target_noise`` and ``c = target_noise_clip`` in the env's action units,
as RLlib 1.x, and ``h = (high - low) / 2`` the unit box's scale. Each train step takes one Adam step on the critic loss, the
importance-weighted mean of ``½ δ²`` (or Huber) per critic with
``δ = Q(s_t, a_t) - y_t``, and, on every ``policy_delay``-th step (the first
included), one on the actor loss ``-mean Q_1(s, μ(s))`` against the critic just
updated. ``l2_reg`` adds ``l2_reg · ½ Σ W²`` over each network's weight matrices
to its loss. :meth:`DDPGPolicy.update_target` moves every target network
``τ`` of the way to its online network.

Exploration: :mod:`flowrl.policies.action_noise` (Gaussian or Ornstein-Uhlenbeck in
action units, random actions first). Every action, exploring or not, lies within
the bounds.
"""

from __future__ import annotations

import copy
import math
from typing import Any, Sequence

import gymnasium as gym
import numpy as np
import torch
from torch import nn

from flowrl.batch import SampleBatch
from flowrl.callbacks import learn_callbacks
from flowrl.errors import ConfigError
from flowrl.models.config import ModelConfig
from flowrl.policies.action_noise import ORNSTEIN_UHLENBECK, ActionNoise, noise_settings
from flowrl.policies.continuous import (StateActionQ, box_bounds, flat_obs_dim, flat_obs_tensor,
                                        mlp, soft_update, to_env_actions, to_unit_actions)
from flowrl.policies.dqn import N_STEP_DISCOUNT, PRIORITIES, huber, n_step_batch
from flowrl.policies.torch_policy import (load_weights, make_adam, model_obs, module_weights,
                                          to_numpy_tree, to_torch_tree)

SB = SampleBatch


def network_config(hiddens: Sequence[int], activation: str) -> ModelConfig:
    """The :class:`~flowrl.models.ModelConfig` of an MLP over ``hiddens`` with
    ``activation`` (what :func:`~flowrl.policies.continuous.mlp` builds from)."""
    return ModelConfig(fcnet_hiddens=tuple(hiddens), fcnet_activation=activation)


class Actor(nn.Module):
    """``μ(s)`` in the unit box: ``tanh`` of an MLP's outputs, ``(B, act_dim)`` in
    ``[-1, 1]`` (:func:`~flowrl.policies.continuous.to_env_actions` maps them onto
    the bounds)."""

    def __init__(self, obs_dim: int, act_dim: int, model_config: ModelConfig):
        super().__init__()
        self.net = mlp(obs_dim, act_dim, model_config)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self.net(obs))


class ActorActingModule(nn.Module):
    """The actor as one module for export (:mod:`flowrl.export`): ``forward(obs) ->
    actions``, the greedy actions ``μ(s)`` mapped onto the bounds ``(B, act_dim)``.
    It holds its own copy of the actor."""

    #: The outputs' names, in order (ONNX names them so).
    output_names = ("actions",)

    def __init__(self, actor: Actor, obs_dim: int, low: torch.Tensor, high: torch.Tensor, *,
                 discrete_obs: bool):
        super().__init__()
        self.actor, self.obs_dim, self.discrete_obs = actor, obs_dim, discrete_obs
        self.register_buffer("low", low.clone())
        self.register_buffer("high", high.clone())

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        unit = self.actor(model_obs(obs, self.obs_dim, discrete=self.discrete_obs, image=False))
        return self.low + (unit + 1.0) * (0.5 * (self.high - self.low))


def l2_penalty(module: nn.Module) -> torch.Tensor:
    """``½ Σ W²`` over the weight matrices of ``module`` (biases are not penalised)."""
    return sum(0.5 * (p * p).sum() for name, p in module.named_parameters()
               if not name.endswith("bias"))


def smoothed_target_actions(unit: torch.Tensor, half_range: torch.Tensor, *, noise: float,
                            noise_clip: float,
                            generator: torch.Generator | None = None) -> torch.Tensor:
    """TD3's target policy smoothing of unit-box actions ``(B, act_dim)``:
    ``clip(a + clip(ε, -c, c) / h, -1, 1)`` with ``ε ~ N(0, noise²)`` per element,
    ``c = noise_clip`` and ``h = half_range`` (``(high - low) / 2``), so ``noise``
    and ``noise_clip`` are in the env's action units, as in RLlib 1.x.

    >>> a = smoothed_target_actions(torch.zeros(1000, 1), torch.tensor([2.0]), noise=5.0,
    ...                             noise_clip=0.5)
    >>> float(a.abs().max())  # 0.5 action units on a range of 4
    0.25
    """
    eps = (torch.randn(unit.shape, generator=generator) * noise).clamp(-noise_clip, noise_clip)
    return (unit + eps / half_range).clamp(-1.0, 1.0)


class DDPGPolicy:
    """Deterministic actor-critic for ``Box`` actions; see the module docstring.

    Keyword args (RLlib 1.x names): ``actor_hiddens``, ``actor_hidden_activation``,
    ``critic_hiddens``, ``critic_hidden_activation``, ``actor_lr``, ``critic_lr``,
    ``tau``, ``gamma``, ``n_step``, ``twin_q``, ``policy_delay``,
    ``smooth_target_policy``, ``target_noise``, ``target_noise_clip``, ``l2_reg``,
    ``use_huber``, ``huber_threshold``, ``grad_clip`` (global norm per network, or
    None), ``exploration_config`` (see :mod:`flowrl.policies.action_noise`;
    ``default_exploration`` is the type used when it names none),
    ``worker_side_prioritization`` (rows get a ``priorities`` column
    ``|δ| + prioritized_replay_eps``), ``seed``, ``algorithm`` (the name its errors
    give). ``policy.model`` holds the online actor and critics, ``target_model``
    their targets.

    >>> p = DDPGPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2.0, 2.0, (1,)), seed=0)
    >>> actions, extra = p.compute_actions(np.zeros((5, 3), np.float32))
    >>> actions.shape, bool((np.abs(actions) <= 2).all())
    ((5, 1), True)
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 actor_hiddens: Sequence[int] = (400, 300), actor_hidden_activation: str = "relu",
                 critic_hiddens: Sequence[int] = (400, 300),
                 critic_hidden_activation: str = "relu", actor_lr: float = 1e-3,
                 critic_lr: float = 1e-3, tau: float = 0.002, gamma: float = 0.99,
                 n_step: int = 1, twin_q: bool = False, policy_delay: int = 1,
                 smooth_target_policy: bool = False, target_noise: float = 0.2,
                 target_noise_clip: float = 0.5, l2_reg: float | None = 1e-6,
                 use_huber: bool = False, huber_threshold: float = 1.0,
                 grad_clip: float | None = None, exploration_config: dict | None = None,
                 default_exploration: str = ORNSTEIN_UHLENBECK,
                 worker_side_prioritization: bool = False, prioritized_replay_eps: float = 1e-6,
                 seed: int | None = None, algorithm: str = "DDPG", **unused: Any):
        name = type(self).__name__
        if not isinstance(action_space, gym.spaces.Box):
            raise ConfigError(f"{algorithm} needs a Box action space; the env's action space "
                              f"is {action_space}: use an env with continuous actions (e.g. "
                              "Pendulum-v1), or DQN/PPO for discrete ones")
        low, high = (b.reshape(-1) for b in box_bounds(action_space, algorithm))
        dim = flat_obs_dim(observation_space, f"{algorithm} ({name})")
        for field, ok in (("actor_lr", actor_lr > 0), ("critic_lr", critic_lr > 0),
                          ("tau", 0 < tau <= 1), ("gamma", 0 <= gamma <= 1),
                          ("n_step", isinstance(n_step, int) and n_step >= 1),
                          ("policy_delay", isinstance(policy_delay, int) and policy_delay >= 1),
                          ("target_noise", target_noise >= 0),
                          ("target_noise_clip", target_noise_clip >= 0),
                          ("grad_clip", grad_clip is None or grad_clip > 0)):
            if not ok:
                raise ConfigError(f"{name}({field}=...) is out of range; see the {name} "
                                  "docstring for valid values")
        self.observation_space, self.action_space = observation_space, action_space
        self.shape = action_space.shape
        self.gamma, self.n_step, self.tau = gamma, n_step, tau
        self.twin_q, self.policy_delay = bool(twin_q), policy_delay
        self.smooth_target_policy = bool(smooth_target_policy)
        self.target_noise, self.target_noise_clip = target_noise, target_noise_clip
        self.l2_reg, self.grad_clip = l2_reg or 0.0, grad_clip
        self.use_huber, self.huber_threshold = use_huber, huber_threshold
        self.actor_lr, self.critic_lr = actor_lr, critic_lr
        self.worker_side_prioritization = worker_side_prioritization
        self.prioritized_replay_eps = prioritized_replay_eps
        self.noise = ActionNoise(
            noise_settings(exploration_config, f"{name}(exploration_config=...)",
                           default_exploration), low, high, seed=seed)
        self._obs_dim = dim
        self.low, self.high = torch.tensor(low), torch.tensor(high)
        actor_config = network_config(actor_hiddens, actor_hidden_activation)
        critic_config = network_config(critic_hiddens, critic_hidden_activation)
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            #: the online networks: ``model["actor"]`` and ``model["critics"]`` (one or two)
            self.model = nn.ModuleDict({
                "actor": Actor(dim, len(low), actor_config),
                "critics": nn.ModuleList(StateActionQ(dim, len(low), critic_config)
                                         for _ in range(2 if self.twin_q else 1))})
        self.target_model = copy.deepcopy(self.model).requires_grad_(False)
        self.actor, self.critics = self.model["actor"], self.model["critics"]
        self.target_actor = self.target_model["actor"]
        self.target_critics = self.target_model["critics"]
        self.actor_optimizer = make_adam(self.actor.parameters(), actor_lr)
        self.critic_optimizer = make_adam(self.critics.parameters(), critic_lr)
        self.generator = torch.Generator().manual_seed(0 if seed is None else seed)
        #: train steps taken (critic updates) and, of those, actor updates
        self.num_updates = 0
        self.num_actor_updates = 0
        self.last_actor_loss = math.nan

    # -- acting -------------------------------------------------------------------
    def _obs_tensor(self, obs) -> torch.Tensor:
        return flat_obs_tensor(obs, self._obs_dim, self.observation_space)

    def deterministic_actions(self, obs_batch) -> np.ndarray:
        """``μ(s)`` mapped onto the bounds, ``(B, act_dim)`` float32."""
        with torch.inference_mode():
            unit = self.actor(self._obs_tensor(obs_batch)).numpy()
        return to_env_actions(unit, self.low.numpy(), self.high.numpy())

    def acting_module(self) -> ActorActingModule:
        """A copy of the actor as an :class:`ActorActingModule` (observations in,
        greedy env actions out).

        >>> p = DDPGPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-2.0, 2.0, (1,)),
        ...                actor_hiddens=[8], critic_hiddens=[8], seed=0)
        >>> obs = np.zeros((4, 3), np.float32)
        >>> a = p.acting_module()(torch.as_tensor(obs)).detach().numpy()
        >>> bool(np.allclose(a, p.compute_actions(obs, explore=False)[0], atol=1e-6))
        True
        """
        return ActorActingModule(copy.deepcopy(self.actor), self._obs_dim, self.low, self.high,
                                 discrete_obs=isinstance(self.observation_space,
                                                         gym.spaces.Discrete))

    def compute_actions(self, obs_batch, explore: bool = True, **unused: Any
                        ) -> tuple[np.ndarray, dict]:
        """Actions for ``(B, *obs_shape)`` observations, shaped as the action space:
        ``μ(s)`` plus exploration noise (random at first) with ``explore``, clipped to
        the bounds; ``μ(s)`` without. Exploring counts ``B`` steps. ``extra`` is empty."""
        actions = self.noise(self.deterministic_actions(obs_batch), explore=explore)
        return actions.reshape(len(actions), *self.shape), {}

    def value(self, obs_batch, **unused: Any) -> np.ndarray:
        """``Q_1(s, μ(s))`` for a batch, shape ``(B,)``."""
        with torch.inference_mode():
            obs = self._obs_tensor(obs_batch)
            return self.critics[0](obs, self.actor(obs)).numpy()

    # -- exploration state (checkpoints, Ape-X) -----------------------------------
    def set_noise_scale(self, scale: float | None) -> None:
        """Fix the exploration noise's scale (None: anneal it again)."""
        self.noise.set_scale(scale)

    def exploration_state(self) -> dict[str, Any]:
        """Steps acted, fixed scale, the OU process and the noise RNG."""
        return self.noise.get_state()

    def set_exploration_state(self, state: dict[str, Any]) -> None:
        self.noise.set_state(state)

    # -- postprocessing -------------------------------------------------------------
    def postprocess_trajectory(self, batch: SampleBatch, last_value: float = 0.0) -> SampleBatch:
        """n-step replay rows (:func:`~flowrl.policies.dqn.n_step_batch`), plus
        ``priorities`` with worker-side prioritization. ``last_value`` is not
        needed (Q bootstraps)."""
        out = n_step_batch(batch, n_step=self.n_step, gamma=self.gamma)
        if self.worker_side_prioritization:
            td = self.compute_td_error(out)
            out[PRIORITIES] = (np.abs(td) + self.prioritized_replay_eps).astype(np.float32)
        return out

    # -- learning ---------------------------------------------------------------------
    def _tensors(self, batch: SampleBatch) -> tuple[torch.Tensor, ...]:
        """``(s, a, R, s', d)`` of ``batch``, ``a`` in the unit box."""
        obs = self._obs_tensor(batch[SB.OBS])
        next_obs = self._obs_tensor(batch[SB.NEXT_OBS])
        # torch.tensor copies: columns from Ray's object store are read-only
        actions = torch.tensor(np.asarray(batch[SB.ACTIONS], np.float32)).reshape(len(obs), -1)
        rewards = torch.tensor(np.asarray(batch[SB.REWARDS], np.float32))
        discount = torch.tensor(np.asarray(batch[N_STEP_DISCOUNT], np.float32))
        return obs, to_unit_actions(actions, self.low, self.high), rewards, next_obs, discount

    def critic_target(self, rewards: torch.Tensor, next_obs: torch.Tensor,
                      discount: torch.Tensor) -> torch.Tensor:
        """``y = R + d · Q'(s', ã)`` (min over twin critics; ``ã`` smoothed in action
        units when ``smooth_target_policy``), without gradients; shape ``(B,)``."""
        with torch.no_grad():
            next_actions = self.target_actor(next_obs)
            if self.smooth_target_policy:
                next_actions = smoothed_target_actions(
                    next_actions, 0.5 * (self.high - self.low), noise=self.target_noise,
                    noise_clip=self.target_noise_clip, generator=self.generator)
            q_next = torch.stack([q(next_obs, next_actions) for q in self.target_critics])
            return rewards + discount * q_next.min(dim=0).values

    def compute_td_error(self, batch: SampleBatch) -> np.ndarray:
        """Signed TD errors ``Q_1(s, a) - y`` of the rows of ``batch`` under the
        current weights, shape ``(n,)``; weights are not changed."""
        obs, actions, rewards, next_obs, discount = self._tensors(batch)
        with torch.no_grad():
            td = self.critics[0](obs, actions) - self.critic_target(rewards, next_obs, discount)
        return td.numpy().copy()

    def learn_on_batch(self, batch: SampleBatch, **unused: Any) -> dict[str, float]:
        """One train step on ``batch`` (see the module docstring; ``weights`` column
        for importance weights, else 1). Stats: ``critic_loss``, ``actor_loss`` (of
        the last actor update), ``mean_q``, ``max_q``, ``min_q``, ``mean_td_error``
        (of |δ|), ``num_actor_updates``, ``cur_noise_scale``; ``custom_metrics``
        when callbacks run ``on_learn_on_batch`` first."""
        if batch.count == 0:
            raise ConfigError("DDPGPolicy.learn_on_batch got an empty batch")
        custom = learn_callbacks(self, batch)
        obs, actions, rewards, next_obs, discount = self._tensors(batch)
        w = batch.get("weights")
        w = torch.ones_like(rewards) if w is None else torch.tensor(np.asarray(w, np.float32))
        y = self.critic_target(rewards, next_obs, discount)
        qs = [q(obs, actions) for q in self.critics]
        errors = [q - y for q in qs]
        per_row = [huber(td, self.huber_threshold) if self.use_huber else 0.5 * td * td
                   for td in errors]
        critic_loss = sum((w * e).mean() for e in per_row)
        if self.l2_reg:
            critic_loss = critic_loss + self.l2_reg * l2_penalty(self.critics)
        self._step(self.critic_optimizer, critic_loss, self.critics)
        if self.num_updates % self.policy_delay == 0:
            actor_loss = -self.critics[0](obs, self.actor(obs)).mean()
            if self.l2_reg:
                actor_loss = actor_loss + self.l2_reg * l2_penalty(self.actor)
            self._step(self.actor_optimizer, actor_loss, self.actor)
            self.last_actor_loss = float(actor_loss.detach())
            self.num_actor_updates += 1
        self.num_updates += 1
        q = qs[0].detach()
        stats = {"critic_loss": float(critic_loss.detach()),
                 "actor_loss": self.last_actor_loss,
                 "mean_q": float(q.mean()), "max_q": float(q.max()), "min_q": float(q.min()),
                 "mean_td_error": float(errors[0].detach().abs().mean()),
                 "num_actor_updates": self.num_actor_updates,
                 "cur_noise_scale": self.noise.cur_scale()}
        if custom is not None:
            stats["custom_metrics"] = custom
        return stats

    def _step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor,
              module: nn.Module) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.grad_clip:
            nn.utils.clip_grad_norm_(module.parameters(), self.grad_clip)
        optimizer.step()

    def update_target(self, tau: float | None = None) -> None:
        """Move the target actor and critics ``tau`` (default: the policy's) of the way
        to the online ones (:func:`~flowrl.policies.continuous.soft_update`)."""
        soft_update(self.target_model, self.model, self.tau if tau is None else tau)

    # -- weights and state ---------------------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        """The actor's and critics' parameters, ``{"actor.…" | "critics.…": numpy
        array}`` (copies)."""
        return module_weights(self.model)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Load what :meth:`get_weights` returned (the target networks are kept)."""
        load_weights(self.model, weights, f"{type(self).__name__}.set_weights")

    def get_state(self) -> dict[str, Any]:
        """Online and target weights, both optimizers' states, update counts (and the
        last actor loss, reported until the next actor update), the smoothing noise's
        generator and the exploration state."""
        return {"weights": self.get_weights(), "target": module_weights(self.target_model),
                "actor_optimizer": to_numpy_tree(self.actor_optimizer.state_dict()),
                "critic_optimizer": to_numpy_tree(self.critic_optimizer.state_dict()),
                "num_updates": self.num_updates, "num_actor_updates": self.num_actor_updates,
                "last_actor_loss": self.last_actor_loss,
                "generator": self.generator.get_state().numpy(),
                "exploration": self.exploration_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned."""
        self.set_weights(state["weights"])
        load_weights(self.target_model, state["target"], f"{type(self).__name__}.set_state")
        self.actor_optimizer.load_state_dict(to_torch_tree(state["actor_optimizer"]))
        self.critic_optimizer.load_state_dict(to_torch_tree(state["critic_optimizer"]))
        self.num_updates = int(state["num_updates"])
        self.num_actor_updates = int(state["num_actor_updates"])
        self.last_actor_loss = float(state["last_actor_loss"])
        self.generator.set_state(torch.as_tensor(np.asarray(state["generator"])))
        self.set_exploration_state(state["exploration"])


__all__ = ["DDPGPolicy", "Actor", "ActorActingModule", "smoothed_target_actions", "l2_penalty"]
