"""DDPG and TD3 as plans: DQN's replay plan with a deterministic actor-critic.

The plan is DQN's (:func:`flowrl.algorithms.dqn.replay_plan`): rollouts are
stored into a replay buffer (gated by ``learning_starts``); in turn by
``training_intensity``, replayed batches train the policy
(:class:`~flowrl.policies.ddpg.DDPGPolicy`: the critics every step, the actor
every ``policy_delay`` steps), priorities flow back with ``prioritized_replay``,
and the target networks move ``tau`` towards the online ones whenever
``target_network_update_freq`` more steps were trained (0: after every train
step, whatever the fragment length and ``training_intensity``; RLlib 1.x counted
steps sampled, the same with its defaults of one sampled step per train step).

TD3 is DDPG with its three tricks on, as in RLlib 1.x: twin critics
(``twin_q``), delayed actor updates (``policy_delay=2``) and target policy
smoothing (``smooth_target_policy``), exploring with Gaussian noise instead of
Ornstein-Uhlenbeck.

>>> algo = TD3(TD3Config(env="Pendulum-v1", learning_starts=64, timesteps_per_iteration=128,
...                      actor_hiddens=(16,), critic_hiddens=(16,), seed=0))
>>> r = algo.train()
>>> r["timesteps_total"] >= 128, r["info"]["num_steps_trained"] > 0
(True, True)
>>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from flowrl.algorithms.base import LazyClass
from flowrl.algorithms.dqn import DQN, ReplayConfig, replay_plan
from flowrl.algorithms.validators import hidden_sizes, int_ge, number, one_of, or_none, str_dict
from flowrl.config_text import read_numbers
from flowrl.errors import ConfigError
from flowrl.graph.stream import LocalStream
from flowrl.policies.action_noise import GAUSSIAN, ORNSTEIN_UHLENBECK, noise_settings

ACTIVATIONS = ("relu", "tanh", "elu")


@dataclass
class DDPGConfig(ReplayConfig):
    """DDPG hyperparameters with RLlib 1.x's names and defaults (the replay settings
    are :class:`~flowrl.algorithms.dqn.ReplayConfig`'s).

    ``actor_hiddens``/``critic_hiddens`` and their ``*_hidden_activation`` shape
    the networks (``model`` is not used); ``actor_lr``/``critic_lr`` are their Adam
    step sizes; ``tau`` the soft target update; ``twin_q``, ``policy_delay``,
    ``smooth_target_policy``, ``target_noise``, ``target_noise_clip`` are TD3's
    tricks (off here); ``l2_reg`` the weight penalty; ``use_huber`` a Huber critic
    loss; ``exploration_config`` the action noise
    (:mod:`flowrl.policies.action_noise`: ``type`` "OrnsteinUhlenbeckNoise" or
    "GaussianNoise"; keys missing from it keep this config's defaults when the
    type is the default one, the type's own defaults otherwise).

    >>> DDPGConfig(env="Pendulum-v1", tau=0)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: DDPGConfig.tau=0: must be a number > 0 and <= 1
    """

    #: The exploration an empty ``exploration_config`` gives (RLlib 1.x's default).
    default_exploration: ClassVar[dict] = {
        "type": ORNSTEIN_UHLENBECK, "random_timesteps": 1000, "ou_base_scale": 0.1,
        "ou_theta": 0.15, "ou_sigma": 0.2, "initial_scale": 1.0, "final_scale": 0.02,
        "scale_timesteps": 10000}

    num_workers: int = 0
    rollout_fragment_length: int = 1
    train_batch_size: int = 256
    buffer_size: int = 50000
    learning_starts: int = 1500
    target_network_update_freq: int = 0
    grad_clip: float | None = None
    twin_q: bool = False
    policy_delay: int = 1
    smooth_target_policy: bool = False
    target_noise: float = 0.2
    target_noise_clip: float = 0.5
    actor_hiddens: tuple = (400, 300)
    actor_hidden_activation: str = "relu"
    critic_hiddens: tuple = (400, 300)
    critic_hidden_activation: str = "relu"
    actor_lr: float = 1e-3
    critic_lr: float = 1e-3
    tau: float = 0.002
    l2_reg: float | None = 1e-6
    use_huber: bool = False
    huber_threshold: float = 1.0
    exploration_config: dict = field(default_factory=dict)

    checks: ClassVar[dict[str, tuple]] = {
        "policy_delay": int_ge(1), "target_noise": number(0), "target_noise_clip": number(0),
        "actor_hiddens": hidden_sizes(), "critic_hiddens": hidden_sizes(),
        "actor_hidden_activation": one_of(ACTIVATIONS),
        "critic_hidden_activation": one_of(ACTIVATIONS),
        "actor_lr": number(0, open_lo=True), "critic_lr": number(0, open_lo=True),
        "tau": number(0, 1, open_lo=True), "l2_reg": or_none(number(0)),
        "huber_threshold": number(0, open_lo=True), "exploration_config": str_dict(),
        "grad_clip": or_none(number(0, open_lo=True)),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        self.actor_hiddens = tuple(self.actor_hiddens)
        self.critic_hiddens = tuple(self.critic_hiddens)
        if self.model.use_lstm or self.model.custom_model is not None:
            field_ = "use_lstm=True" if self.model.use_lstm else "custom_model"
            raise ConfigError(f"{name}.model.{field_}: not supported; {name[:-6]} learns from "
                              "replayed single transitions with its own actor and critic "
                              "networks: set actor_hiddens and critic_hiddens instead")
        # read_numbers: random_timesteps: 1e4 in YAML is a string
        given = read_numbers(dict(self.exploration_config))
        base = self.default_exploration
        if given.get("type", base["type"]) != base["type"]:
            base = {}
        self.exploration_config = noise_settings({**base, **given}, f"{name}.exploration_config",
                                                 self.default_exploration["type"])


@dataclass
class TD3Config(DDPGConfig):
    """TD3 hyperparameters: :class:`DDPGConfig` with RLlib 1.x's TD3 defaults (twin
    critics, ``policy_delay=2``, target policy smoothing, Gaussian exploration with
    10,000 random steps first, ``tau=0.005``, ``l2_reg=0``, a 1M-row uniform buffer,
    ``train_batch_size=100``, ``learning_starts=10000``).

    >>> TD3Config(env="Pendulum-v1").exploration_config["type"]
    'GaussianNoise'
    """

    default_exploration: ClassVar[dict] = {
        "type": GAUSSIAN, "random_timesteps": 10000, "stddev": 0.1, "initial_scale": 1.0,
        "final_scale": 1.0, "scale_timesteps": 1}

    twin_q: bool = True
    policy_delay: int = 2
    smooth_target_policy: bool = True
    tau: float = 0.005
    l2_reg: float | None = 0.0
    train_batch_size: int = 100
    buffer_size: int = 1000000
    prioritized_replay: bool = False
    learning_starts: int = 10000


def ddpg_policy_config(config: DDPGConfig, algorithm: str) -> dict[str, Any]:
    """The :class:`~flowrl.policies.ddpg.DDPGPolicy` keyword arguments of ``config``;
    ``algorithm`` names the algorithm in the policy's errors."""
    keys = ("actor_hiddens", "actor_hidden_activation", "critic_hiddens",
            "critic_hidden_activation", "actor_lr", "critic_lr", "tau", "gamma", "n_step",
            "twin_q", "policy_delay", "smooth_target_policy", "target_noise",
            "target_noise_clip", "l2_reg", "use_huber", "huber_threshold", "grad_clip",
            "exploration_config", "worker_side_prioritization", "prioritized_replay_eps")
    return {**{k: getattr(config, k) for k in keys}, "algorithm": algorithm}


class DDPG(DQN):
    """Deep deterministic policy gradient on DQN's replay plan; see the module
    docstring. ``algo.local_replay_buffer`` is the buffer the plan stores into."""

    config_class = DDPGConfig
    policy_class = LazyClass("flowrl.policies.ddpg:DDPGPolicy")
    name = "ddpg"
    example_env = "Pendulum-v1"  # continuous actions only

    @classmethod
    def policy_config(cls, config: DDPGConfig) -> dict[str, Any]:
        return ddpg_policy_config(config, cls.__name__)

    @classmethod
    def execution_plan(cls, workers, config: DDPGConfig, *, local_buffer=None) -> LocalStream:
        return replay_plan(workers, config, local_buffer, name=cls.name,
                           target_by_steps_trained=True)


class TD3(DDPG):
    """Twin delayed DDPG; see the module docstring."""

    config_class = TD3Config
    name = "td3"


__all__ = ["DDPG", "DDPGConfig", "TD3", "TD3Config", "ddpg_policy_config"]
