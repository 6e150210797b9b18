"""DQN (Mnih et al. 2015) with double Q, dueling heads, n-step returns and a Huber loss.

With ``Q`` the online network and ``Q'`` the target network, a stored n-step row
``(s_t, a_t, R_t, s_{t+k}, d_t)`` (:func:`n_step_transitions`) gives the target::

    y_t = R_t + d_t · Q'(s_{t+k}, argmax_a Q(s_{t+k}, a))     (double Q)
    y_t = R_t + d_t · max_a Q'(s_{t+k}, a)                     (plain DQN)

where ``R_t = Σ_{j<k} γ^j r_{t+j}`` and ``d_t = γ^k`` (0 if the episode terminated
within the k steps). The loss is the importance-weighted mean Huber loss of the
TD error ``δ_t = Q(s_t, a_t) - y_t``. Dueling heads (Wang et al. 2016) compute
``Q(s, a) = V(s) + A(s, a) - mean_a A(s, a)``.

Exploration is epsilon-greedy: epsilon falls linearly from ``initial_epsilon`` to
``final_epsilon`` over the first ``epsilon_timesteps`` steps this policy acted
(``exploration_config``), unless :meth:`DQNPolicy.set_epsilon` fixed it (Ape-X gives
each worker its own constant epsilon). The step count and the RNG are exploration
state, kept in :meth:`DQNPolicy.get_state` and :meth:`DQNPolicy.exploration_state`.
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
from flowrl.models.catalog import is_image
from flowrl.policies.numpy_acting import (NumpyMLP, ParameterGuard, SnapshotCache,
                                           in_chunks, max_rows, obs_rows)
from flowrl.models.config import model_config
from flowrl.policies.maths import linear_schedule
from flowrl.policies.torch_policy import (load_weights, make_adam, model_obs, module_weights,
                                          to_numpy_tree, to_torch_tree)

SB = SampleBatch
#: Column of postprocessed DQN rows: γ^k for the k rewards summed, 0 after a termination.
N_STEP_DISCOUNT = "n_step_discount"
#: Column of worker-side initial priorities (``|δ| + eps``), read by the replay side.
PRIORITIES = "priorities"

DEFAULT_EXPLORATION = {"initial_epsilon": 1.0, "final_epsilon": 0.02, "epsilon_timesteps": 10000}


def n_step_transitions(rewards: np.ndarray, terminateds: np.ndarray, truncateds: np.ndarray,
                       *, n: int, gamma: float) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """n-step returns of one time-ordered trajectory ``(T,)`` (it may hold several
    episodes, each ending at a terminated or truncated row).

    For row ``t`` the window is rows ``t .. e`` with ``e`` the earliest of ``t + n - 1``,
    the episode's last row and ``T - 1``. Returns ``(R, last, discount)``:
    ``R_t = Σ_{j=0}^{e-t} γ^j r_{t+j}``, ``last_t = e`` (whose ``new_obs`` is the
    bootstrap state) and ``discount_t = γ^{e-t+1}``, or 0 when row ``e`` terminated.

    >>> R, last, d = n_step_transitions(np.array([1., 1., 1.]), np.array([0, 0, 1], bool),
    ...                                 np.zeros(3, bool), n=2, gamma=0.5)
    >>> R.tolist(), last.tolist(), d.tolist()
    ([1.5, 1.5, 1.0], [1, 2, 2], [0.25, 0.0, 0.0])
    """
    rewards = np.asarray(rewards, dtype=np.float64)
    T = len(rewards)
    done = np.asarray(terminateds, bool) | np.asarray(truncateds, bool)
    t = np.arange(T)
    ret = np.zeros(T)
    last = t.copy()
    alive = np.ones(T, bool)
    for k in range(n):
        idx = t + k
        valid = alive & (idx < T)
        j = np.minimum(idx, T - 1)
        ret += np.where(valid, gamma ** k * rewards[j], 0.0)
        last = np.where(valid, idx, last)
        alive = valid & ~done[j]
    discount = gamma ** (last - t + 1.0) * ~np.asarray(terminateds, bool)[last]
    return ret.astype(np.float32), last, discount.astype(np.float32)


#: The bookkeeping columns an n-step replay row keeps from its trajectory, row for row
#: (RLlib 1.x's n-step rows kept them too): a recording of the rows can then be read
#: as episodes (BC, MARWIL) and scored off-policy. The policy's other outputs
#: (``vf_preds``, ``action_dist_inputs``) are not kept: replay holds every row.
KEPT_COLUMNS = (SB.EPS_ID, SB.T, SB.AGENT_INDEX, SB.ACTION_LOGP)


def n_step_batch(batch: SampleBatch, *, n_step: int, gamma: float) -> SampleBatch:
    """The replay rows of one time-ordered trajectory (:func:`n_step_transitions`):
    ``obs``, ``actions``, ``rewards`` (the n-step return), ``new_obs`` (the bootstrap
    state), ``terminateds`` and ``truncateds`` (of the bootstrap row),
    ``n_step_discount`` (γ^k, 0 after a termination) and the trajectory's
    :data:`KEPT_COLUMNS` it has. Every Q-learning policy stores these.

    >>> b = SampleBatch(obs=[0, 1, 2], actions=[0, 1, 0], rewards=[1., 1., 1.],
    ...                 new_obs=[1, 2, 3], terminateds=[False, False, True], t=[0, 1, 2])
    >>> out = n_step_batch(b, n_step=2, gamma=0.5)
    >>> out["new_obs"].tolist(), out["n_step_discount"].tolist(), out["t"].tolist()
    ([2, 3, 3], [0.25, 0.0, 0.0], [0, 1, 2])
    """
    term = np.asarray(batch[SB.TERMINATEDS], bool)
    trunc = batch.get(SB.TRUNCATEDS)
    trunc = np.zeros_like(term) if trunc is None else np.asarray(trunc, bool)
    ret, last, discount = n_step_transitions(batch[SB.REWARDS], term, trunc, n=n_step,
                                             gamma=gamma)
    rows = {SB.OBS: batch[SB.OBS], SB.ACTIONS: batch[SB.ACTIONS], SB.REWARDS: ret,
            SB.NEXT_OBS: batch[SB.NEXT_OBS][last], SB.TERMINATEDS: term[last],
            N_STEP_DISCOUNT: discount}
    if SB.TRUNCATEDS in batch:
        rows[SB.TRUNCATEDS] = trunc[last]
    rows.update({k: batch[k] for k in KEPT_COLUMNS if k in batch})
    return SampleBatch(rows)


def linear_epsilon(timesteps: int, *, initial_epsilon: float, final_epsilon: float,
                   epsilon_timesteps: int) -> float:
    """Epsilon after ``timesteps`` steps: linear from initial to final, then flat.

    >>> linear_epsilon(50, initial_epsilon=1.0, final_epsilon=0.0, epsilon_timesteps=100)
    0.5
    """
    return linear_schedule(timesteps, start=initial_epsilon, end=final_epsilon,
                           duration=epsilon_timesteps)


def huber(x: torch.Tensor, delta: float = 1.0) -> torch.Tensor:
    """Elementwise Huber loss: ``x²/2`` for ``|x| <= δ``, else ``δ(|x| - δ/2)``."""
    a = x.abs()
    return torch.where(a <= delta, 0.5 * x * x, delta * (a - 0.5 * delta))


class _ImageTorso(nn.Module):
    """The CNN of :class:`~flowrl.models.visionnet.VisionNetwork` as a torso:
    observations (uint8 images stay uint8 until it scales them) to features."""

    def __init__(self, obs_space: gym.Space, model_config):
        super().__init__()
        from flowrl.models.visionnet import VisionNetwork
        self.net = VisionNetwork(obs_space, gym.spaces.Discrete(1), None, model_config, "torso")
        self.out_features = int(self.net.num_outputs)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net({"obs": obs}, [], None)[0]


class QNetwork(nn.Module):
    """A torso, then Q heads over ``hiddens`` (dueling: a value and an advantage
    stream). The torso is a ReLU MLP over ``model_config.fcnet_hiddens`` for flat
    observations of ``obs_dim`` values, the built-in CNN for images (``obs_space``
    a rank-3 ``Box``; ``conv_filters`` and ``post_fcnet_hiddens`` apply)."""

    def __init__(self, obs_dim: int, num_actions: int, model_config,
                 hiddens: Sequence[int], dueling: bool, obs_space: gym.Space | None = None):
        super().__init__()
        if obs_space is not None and is_image(obs_space):
            self.torso: nn.Module = _ImageTorso(obs_space, model_config)
            last = self.torso.out_features
        else:
            layers: list[nn.Module] = []
            last = obs_dim
            for h in model_config.fcnet_hiddens:
                layers += [nn.Linear(last, h), nn.ReLU()]
                last = h
            self.torso = nn.Sequential(*layers)

        def head(out: int) -> nn.Sequential:
            mods: list[nn.Module] = []
            size = last
            for h in hiddens:
                mods += [nn.Linear(size, h), nn.ReLU()]
                size = h
            mods.append(nn.Linear(size, out))
            return nn.Sequential(*mods)

        self.advantage = head(num_actions)
        self.value = head(1) if dueling else None

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        z = self.torso(obs)
        a = self.advantage(z)
        if self.value is None:
            return a
        return self.value(z) + a - a.mean(dim=1, keepdim=True)


class QActingModule(nn.Module):
    """A :class:`QNetwork` as one module for export (:mod:`flowrl.export`), as
    :class:`~flowrl.policies.torch_policy.ActingModule` is for actor-critics:
    ``forward(obs) -> (action_dist_inputs, value)``, the Q-values ``(B, A)`` (the
    greedy action is their argmax) and ``max_a Q(s, a)`` ``(B,)``, what
    :meth:`DQNPolicy.compute_actions` reports. It holds its own copy of the network."""

    #: The outputs' names, in order (ONNX names them so).
    output_names = ("action_dist_inputs", "value")

    def __init__(self, model: QNetwork, obs_dim: int, *, discrete: bool, image: bool):
        super().__init__()
        self.model, self.obs_dim, self.discrete, self.image = model, obs_dim, discrete, image

    def forward(self, obs: torch.Tensor):
        q = self.model(model_obs(obs, self.obs_dim, discrete=self.discrete, image=self.image))
        return q, q.max(dim=1).values


class _NumpyQNetwork:
    """Numpy views of a :class:`QNetwork` (see :mod:`flowrl.policies.numpy_acting`)."""

    __slots__ = ("guard", "parts", "max_rows")

    @classmethod
    def build(cls, model: nn.Module) -> "_NumpyQNetwork | None":
        if type(model) is not QNetwork:
            return None
        parts = {}
        for name in ("torso", "advantage", "value"):
            seq = getattr(model, name)
            parts[name] = None if seq is None else NumpyMLP.build(seq)
            if seq is not None and parts[name] is None:
                return None
        self = cls()
        self.guard, self.parts = ParameterGuard(model), parts
        self.max_rows = max_rows(*parts.values())
        return self

    def __call__(self, x: np.ndarray) -> np.ndarray:
        """``Q(s, ·)`` for ``(B, obs_dim)`` rows, ``max_rows`` rows per forward."""
        return in_chunks(self._forward, x, self.max_rows)

    def _forward(self, x: np.ndarray) -> np.ndarray:
        z = self.parts["torso"](x)
        a = self.parts["advantage"](z)
        value = self.parts["value"]
        if value is None:
            return a
        return value(z) + a - a.mean(axis=1, keepdims=True)


class DQNPolicy:
    """Epsilon-greedy Q-learning policy; see the module docstring.

    Keyword args: ``model`` (a :class:`~flowrl.models.ModelConfig`, a dict of its
    fields or hidden sizes; ``hidden_sizes`` is the older spelling of hidden sizes:
    the torso, see :class:`QNetwork`; ``use_lstm`` and custom models are refused),
    ``hiddens`` (heads), ``lr`` (Adam),
    ``gamma``, ``n_step``, ``double_q``, ``dueling``, ``grad_clip`` (global norm or
    None), ``exploration_config`` (``initial_epsilon``, ``final_epsilon``,
    ``epsilon_timesteps``), ``worker_side_prioritization`` (postprocessed rows get
    a ``priorities`` column ``|δ| + prioritized_replay_eps``), ``seed``,
    ``numpy_inference`` (Q-values for acting through numpy views of the online
    network at every batch size, in ``NUMPY_MAX_MACS`` chunks, the default; False
    forces torch; see :mod:`flowrl.policies.numpy_acting`). Exploration is the same
    either way: it only reads the Q-values.

    >>> p = DQNPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    >>> p.set_epsilon(1.0)
    >>> actions, extra = p.compute_actions(np.zeros((5, 4), np.float32))
    >>> actions.shape, extra["action_dist_inputs"].shape, p.cur_epsilon()
    ((5,), (5, 2), 1.0)
    """

    def __init__(self, observation_space: gym.Space, action_space: gym.Space, *,
                 model: Any = None, hidden_sizes: Sequence[int] | None = None,
                 hiddens: Sequence[int] = (64,),
                 lr: float = 5e-4, gamma: float = 0.99, n_step: int = 1,
                 double_q: bool = True, dueling: bool = True, grad_clip: float | None = 40.0,
                 exploration_config: dict | None = None,
                 worker_side_prioritization: bool = False,
                 prioritized_replay_eps: float = 1e-6, seed: int | None = None,
                 numpy_inference: bool = True, **unused: Any):
        name = type(self).__name__
        if not isinstance(action_space, gym.spaces.Discrete):
            raise ConfigError(f"{name}: the env's action space {action_space} is not "
                              "supported; DQN needs a Discrete action space: choose an env "
                              "with discrete actions (e.g. CartPole-v1)")
        config = model_config(model, hidden_sizes)
        if config.use_lstm:
            raise ConfigError(f"{name}: model.use_lstm=True is not supported; DQN and Ape-X "
                              "learn from replayed single transitions, so use a feed-forward "
                              "model (an MLP, or the CNN for images) or a recurrent algorithm "
                              "(PPO, IMPALA, APPO, A2C, A3C, PG)")
        if config.custom_model is not None:
            raise ConfigError(f"{name}: model.custom_model is not supported; DQN builds its "
                              "own Q network (model.fcnet_hiddens or model.conv_filters for "
                              "the torso, hiddens for the heads)")
        self.model_config = config
        if isinstance(observation_space, gym.spaces.Box):
            obs_dim = int(np.prod(observation_space.shape))
        elif isinstance(observation_space, gym.spaces.Discrete):
            obs_dim = int(observation_space.n)
        else:
            raise ConfigError(f"{name}: observation space {observation_space} is not "
                              "supported; use a Box or Discrete space")
        explore = {**DEFAULT_EXPLORATION, **(exploration_config or {})}
        unknown = sorted(set(explore) - set(DEFAULT_EXPLORATION) - {"type"})
        if unknown:
            raise ConfigError(f"{name}(exploration_config=...): unknown keys {unknown}; use "
                              f"{sorted(DEFAULT_EXPLORATION)}")
        for field, ok in (("lr", lr > 0), ("gamma", 0 <= gamma <= 1),
                          ("n_step", isinstance(n_step, int) and n_step >= 1),
                          ("grad_clip", grad_clip is None or grad_clip > 0),
                          ("exploration_config", 0 <= explore["final_epsilon"] <= 1
                           and 0 <= explore["initial_epsilon"] <= 1
                           and explore["epsilon_timesteps"] >= 0)):
            if not ok:
                raise ConfigError(f"{name}({field}=...) is out of range; see the {name} "
                                  "docstring for valid values")
        self.observation_space, self.action_space = observation_space, action_space
        self.lr, self.gamma, self.n_step = lr, gamma, n_step
        self.double_q, self.grad_clip = double_q, grad_clip
        self.exploration_config = {k: explore[k] for k in DEFAULT_EXPLORATION}
        self.worker_side_prioritization = worker_side_prioritization
        self.prioritized_replay_eps = prioritized_replay_eps
        self._obs_dim, self.num_actions = obs_dim, int(action_space.n)
        with torch.random.fork_rng(devices=[]):
            if seed is not None:
                torch.manual_seed(seed)
            self.model = QNetwork(obs_dim, self.num_actions, config, list(hiddens), dueling,
                                  observation_space)
            self.target_model = QNetwork(obs_dim, self.num_actions, config, list(hiddens),
                                         dueling, observation_space)
        self.target_model.load_state_dict(self.model.state_dict())
        for p in self.target_model.parameters():
            p.requires_grad_(False)
        self._optimizer: torch.optim.Adam | None = None  # see the optimizer property
        self._rng = np.random.default_rng(seed)
        self.timesteps = 0
        self.fixed_epsilon: float | None = None
        self.numpy_inference = bool(numpy_inference)
        self._numpy_cache = SnapshotCache(_NumpyQNetwork.build)

    # -- exploration ---------------------------------------------------------------
    @property
    def optimizer(self) -> torch.optim.Adam:
        """A ``torch.optim.Adam`` over the online network
        (:func:`~flowrl.policies.torch_policy.make_adam`), created on first use, as
        ``TorchPolicy.optimizer``."""
        if self._optimizer is None:
            self._optimizer = make_adam(self.model.parameters(), self.lr)
        return self._optimizer

    def cur_epsilon(self) -> float:
        """The epsilon the next exploring action uses."""
        if self.fixed_epsilon is not None:
            return self.fixed_epsilon
        return linear_epsilon(self.timesteps, **self.exploration_config)

    def set_epsilon(self, epsilon: float | None) -> None:
        """Fix epsilon (``None`` returns to the ``exploration_config`` schedule)."""
        if epsilon is not None and not 0 <= epsilon <= 1:
            raise ConfigError(f"DQNPolicy.set_epsilon({epsilon!r}): must be in [0, 1]")
        self.fixed_epsilon = None if epsilon is None else float(epsilon)

    def exploration_state(self) -> dict[str, Any]:
        """Steps acted, fixed epsilon and the action RNG's state."""
        return {"timesteps": self.timesteps, "fixed_epsilon": self.fixed_epsilon,
                "rng": self._rng.bit_generator.state}

    def set_exploration_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`exploration_state` returned."""
        self.timesteps, self.fixed_epsilon = state["timesteps"], state["fixed_epsilon"]
        self._rng.bit_generator.state = state["rng"]

    # -- acting -------------------------------------------------------------------
    def _obs_tensor(self, obs) -> torch.Tensor:
        obs = np.asarray(obs)
        if not obs.flags.writeable:  # arrays from Ray's object store are read-only
            obs = obs.copy()
        return model_obs(torch.as_tensor(obs), self._obs_dim,
                         discrete=isinstance(self.observation_space, gym.spaces.Discrete),
                         image=is_image(self.observation_space))

    def acting_module(self) -> QActingModule:
        """A copy of the online network as a :class:`QActingModule` (observations in,
        Q-values and their max out).

        >>> p = DQNPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
        >>> q, value = p.acting_module()(torch.zeros(3, 4))
        >>> tuple(q.shape), bool((value == q.max(dim=1).values).all())
        ((3, 2), True)
        """
        return QActingModule(copy.deepcopy(self.model), self._obs_dim,
                             discrete=isinstance(self.observation_space, gym.spaces.Discrete),
                             image=is_image(self.observation_space))

    def _numpy_snapshot(self) -> "_NumpyQNetwork | None":
        return self._numpy_cache.get(self.model) if self.numpy_inference else None

    def q_values(self, obs_batch) -> np.ndarray:
        """``Q(s, ·)`` of the online network, shape ``(B, num_actions)`` (through numpy
        for the built-in network at every batch size, see ``numpy_inference``)."""
        snap = self._numpy_snapshot()
        if snap is not None:
            return snap(obs_rows(obs_batch, self._obs_dim,
                                 isinstance(self.observation_space, gym.spaces.Discrete)))
        with torch.inference_mode():
            return self.model(self._obs_tensor(obs_batch)).numpy()

    def compute_actions(self, obs_batch, explore: bool = True) -> tuple[np.ndarray, dict]:
        """Epsilon-greedy actions for ``(B, *obs_shape)`` observations (greedy without
        ``explore``); counts ``B`` exploration steps. ``extra`` has ``action_logp``
        (under the epsilon-greedy distribution), ``vf_preds`` (max Q) and
        ``action_dist_inputs`` (the Q values)."""
        q = self.q_values(obs_batch)
        B, A = q.shape
        actions = q.argmax(axis=1)
        eps = self.cur_epsilon() if explore else 0.0
        if explore:
            rand = self._rng.random(B) < eps
            if rand.any():
                actions = np.where(rand, self._rng.integers(0, A, size=B), actions)
            self.timesteps += B
        greedy = actions == q.argmax(axis=1)
        prob = eps / A + (1.0 - eps) * greedy
        return actions.astype(np.int64), {
            SB.ACTION_LOGP: np.log(np.maximum(prob, 1e-12)).astype(np.float32),
            SB.VF_PREDS: q.max(axis=1).astype(np.float32),
            SB.ACTION_DIST_INPUTS: q.astype(np.float32)}

    def value(self, obs_batch) -> np.ndarray:
        """``max_a Q(s, a)`` for a batch, shape ``(B,)``."""
        return self.q_values(obs_batch).max(axis=1)

    # -- postprocessing -------------------------------------------------------------
    def postprocess_trajectory(self, batch: SampleBatch, last_value: float = 0.0) -> SampleBatch:
        """n-step rows for one time-ordered trajectory (see :func:`n_step_transitions`):
        ``obs``, ``actions``, ``rewards`` (n-step return), ``new_obs`` (bootstrap
        state), ``terminateds``, ``n_step_discount``, plus ``priorities`` with
        worker-side prioritization. ``last_value`` is not needed (Q bootstraps)."""
        out = n_step_batch(batch, n_step=self.n_step, gamma=self.gamma)
        if self.worker_side_prioritization:
            td = self.compute_td_error(out)
            out[PRIORITIES] = (np.abs(td) + self.prioritized_replay_eps).astype(np.float32)
        return out

    # -- learning ---------------------------------------------------------------------
    def _td(self, batch: SampleBatch) -> torch.Tensor:
        obs = self._obs_tensor(batch[SB.OBS])
        next_obs = self._obs_tensor(batch[SB.NEXT_OBS])
        actions = torch.tensor(np.asarray(batch[SB.ACTIONS]), dtype=torch.long)
        rewards = torch.tensor(np.asarray(batch[SB.REWARDS], dtype=np.float32))
        discount = torch.tensor(np.asarray(batch[N_STEP_DISCOUNT], dtype=np.float32))
        q = self.model(obs).gather(1, actions.unsqueeze(1)).squeeze(1)
        with torch.no_grad():
            q_next_target = self.target_model(next_obs)
            if self.double_q:
                best = self.model(next_obs).argmax(dim=1, keepdim=True)
            else:
                best = q_next_target.argmax(dim=1, keepdim=True)
            target = rewards + discount * q_next_target.gather(1, best).squeeze(1)
        return q - target, q

    def compute_td_error(self, batch: SampleBatch) -> np.ndarray:
        """Signed TD errors ``Q(s, a) - y`` of the rows of ``batch`` under the current
        weights, shape ``(n,)``; weights are not changed."""
        with torch.no_grad():
            td, _ = self._td(batch)
        return td.numpy().copy()

    def learn_on_batch(self, batch: SampleBatch, *, num_sgd_iter: int | None = None,
                       sgd_minibatch_size: int | None = None,
                       rng: np.random.Generator | None = None) -> dict[str, float]:
        """Adam steps on the importance-weighted Huber loss (``weights`` column, else
        1): by default one step on the whole batch; ``num_sgd_iter`` epochs over
        ``sgd_minibatch_size``-row minibatches through the shared loop
        (:func:`~flowrl.policies.sgd.minibatch_sgd`) when given. Stats: ``loss``,
        ``mean_q``, ``mean_td_error`` (of |δ|), ``grad_gnorm``, ``cur_lr``,
        ``cur_epsilon``; ``custom_metrics`` when callbacks run ``on_learn_on_batch``
        first (:func:`~flowrl.callbacks.learn_callbacks`)."""
        if batch.count == 0:
            raise ConfigError("DQNPolicy.learn_on_batch got an empty batch")
        custom = learn_callbacks(self, batch)
        if (num_sgd_iter or 1) == 1 and not sgd_minibatch_size:
            stats = self.sgd_step(batch)
        else:
            from flowrl.policies.sgd import minibatch_sgd
            stats = minibatch_sgd(batch, num_sgd_iter=num_sgd_iter or 1,
                                  sgd_minibatch_size=sgd_minibatch_size,
                                  rng=self._rng if rng is None else rng, step=self.sgd_step)
        if custom is not None:
            stats["custom_metrics"] = custom
        return stats

    def sgd_step(self, batch: SampleBatch) -> dict[str, float]:
        """One Adam step on ``batch`` (see :meth:`learn_on_batch`)."""
        td, q = self._td(batch)
        w = batch.get("weights")
        w = torch.ones_like(td) if w is None else torch.tensor(np.asarray(w, np.float32))
        loss = (w * huber(td)).mean()
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        norm = nn.utils.clip_grad_norm_(self.model.parameters(),
                                        self.grad_clip if self.grad_clip else math.inf)
        self.optimizer.step()
        return {"loss": float(loss.detach()), "mean_q": float(q.detach().mean()),
                "mean_td_error": float(td.detach().abs().mean()), "grad_gnorm": float(norm),
                "cur_lr": self.optimizer.param_groups[0]["lr"],
                "cur_epsilon": self.cur_epsilon()}

    def update_target(self) -> None:
        """Copy the online network's weights into the target network."""
        self.target_model.load_state_dict(self.model.state_dict())

    # -- weights and state ---------------------------------------------------------------
    def get_weights(self) -> dict[str, np.ndarray]:
        """Online network parameters as ``{name: numpy array}`` (copies)."""
        return module_weights(self.model)

    def set_weights(self, weights: dict[str, np.ndarray]) -> None:
        """Load what :meth:`get_weights` returned (the target network is kept)."""
        load_weights(self.model, weights, "DQNPolicy.set_weights")

    def get_state(self) -> dict[str, Any]:
        """Online and target weights, optimizer state and exploration state."""
        return {"weights": self.get_weights(),
                "target": {k: v.numpy().copy() for k, v in self.target_model.state_dict().items()},
                "optimizer": to_numpy_tree(self.optimizer.state_dict()),
                "exploration": self.exploration_state()}

    def set_state(self, state: dict[str, Any]) -> None:
        """Restore what :meth:`get_state` returned."""
        self.set_weights(state["weights"])
        self.target_model.load_state_dict({k: torch.tensor(v) for k, v in state["target"].items()})
        self.optimizer.load_state_dict(to_torch_tree(state["optimizer"]))
        self.set_exploration_state(state["exploration"])


__all__ = ["DQNPolicy", "QNetwork", "QActingModule", "n_step_transitions", "n_step_batch",
           "linear_epsilon",
           "huber", "N_STEP_DISCOUNT", "PRIORITIES"]
