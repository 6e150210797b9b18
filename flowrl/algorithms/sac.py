"""SAC as a plan: DQN's replay plan with SAC's policy and a soft target update.

The plan is :func:`~flowrl.algorithms.dqn.replay_plan`: rollouts ->
``StoreToReplayBuffer`` (gated by ``LearningStarts``) and, in turn by
``training_intensity``, ``Replay`` -> ``TrainOneStep`` (one critic, actor and
entropy step: :class:`~flowrl.policies.sac.SACPolicy`) -> ``UpdateReplayPriorities``
(with ``prioritized_replay``) -> ``UpdateTargetNetwork``, which Polyak-averages
the critics into their targets with ``tau``. The target update counts steps
trained: with ``target_network_update_freq=0`` (the default) it follows every
train step, whatever ``training_intensity`` is (RLlib 1.x counted steps sampled,
the same with its defaults of one sampled step per train step).

>>> algo = SAC(SACConfig(env="Pendulum-v1", learning_starts=64, timesteps_per_iteration=128,
...                      train_batch_size=32, Q_model=[32], policy_model=[32], seed=0))
>>> r = algo.train()
>>> r["timesteps_total"] >= 128, r["info"]["num_steps_trained"] > 0
(True, True)
>>> sorted(r["info"]["learner"]["default_policy"])[:3]
['actor_loss', 'alpha_loss', 'alpha_value']
>>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from flowrl.algorithms.base import LazyClass
from flowrl.algorithms.dqn import DQN, ReplayConfig, replay_plan
from flowrl.algorithms.validators import number, or_none, str_dict
from flowrl.config_text import read_numbers
from flowrl.errors import ConfigError
from flowrl.graph.stream import LocalStream
from flowrl.models.config import ModelConfig, check_mlp_config

#: ``optimization``'s keys and RLlib 1.x's defaults for them.
DEFAULT_OPTIMIZATION = {"actor_learning_rate": 3e-4, "critic_learning_rate": 3e-4,
                        "entropy_learning_rate": 3e-4}


def _sac_model() -> ModelConfig:
    return ModelConfig(fcnet_hiddens=(256, 256), fcnet_activation="relu")


@dataclass
class SACConfig(ReplayConfig):
    """SAC hyperparameters: RLlib 1.x's names and defaults (``twin_q=True``,
    ``tau=5e-3``, ``initial_alpha=1.0``, ``target_entropy="auto"``, ``n_step=1``,
    ``buffer_size=1e6``, ``prioritized_replay=False``, ``learning_starts=1500``,
    ``rollout_fragment_length=1``, ``train_batch_size=256``,
    ``target_network_update_freq=0``, ``timesteps_per_iteration=100``, 3e-4 for
    each rate of ``optimization``, 256x256 ReLU networks), plus the replay settings of
    :class:`~flowrl.algorithms.dqn.ReplayConfig`.

    ``Q_model`` and ``policy_model`` are :class:`~flowrl.models.ModelConfig` s (or
    dicts of their fields, or hidden sizes) of the critics and the policy: MLPs
    over flat observations (``fcnet_hiddens``, ``fcnet_activation``).
    ``optimization`` holds ``actor_learning_rate``, ``critic_learning_rate`` and
    ``entropy_learning_rate`` (missing keys keep their defaults); ``target_entropy``
    is a number or ``"auto"`` (``-dim(A)`` for ``Box``, ``0.98 log n`` for
    ``Discrete(n)``); ``grad_clip`` clips each optimizer's gradients (None: off).
    ``model`` and ``lr`` are not used.

    >>> SACConfig(env="Pendulum-v1", optimization={"actor_lr": 1e-3})
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: SACConfig.optimization has unknown keys ['actor_lr']; use ['actor_learning_rate', 'critic_learning_rate', 'entropy_learning_rate']
    """

    rollout_fragment_length: int = 1
    train_batch_size: int = 256
    buffer_size: int = 1_000_000
    prioritized_replay: bool = False
    learning_starts: int = 1500
    target_network_update_freq: int = 0
    timesteps_per_iteration: int = 100
    twin_q: bool = True
    tau: float = 5e-3
    initial_alpha: float = 1.0
    target_entropy: Any = "auto"
    optimization: dict = field(default_factory=lambda: dict(DEFAULT_OPTIMIZATION))
    grad_clip: float | None = None
    Q_model: Any = field(default_factory=_sac_model)
    policy_model: Any = field(default_factory=_sac_model)

    checks: ClassVar[dict[str, tuple]] = {
        "tau": number(0, 1, open_lo=True), "initial_alpha": number(0, open_lo=True),
        "grad_clip": or_none(number(0, open_lo=True)), "optimization": str_dict(),
    }

    def __post_init__(self) -> None:
        super().__post_init__()
        name = type(self).__name__
        if not isinstance(self.twin_q, bool):
            raise ConfigError(f"{name}.twin_q={self.twin_q!r}: must be true or false")
        entropy = read_numbers(self.target_entropy)
        if entropy != "auto" and not (isinstance(entropy, (int, float))
                                      and not isinstance(entropy, bool)
                                      and abs(entropy) < float("inf")):
            raise ConfigError(f"{name}.target_entropy={self.target_entropy!r}: give a number "
                              "or 'auto' (-dim(A) for Box actions, 0.98 log n for Discrete(n))")
        self.target_entropy = entropy
        rates = {**DEFAULT_OPTIMIZATION, **read_numbers(self.optimization)}
        unknown = sorted(set(rates) - set(DEFAULT_OPTIMIZATION))
        if unknown:
            raise ConfigError(f"{name}.optimization has unknown keys {unknown}; use "
                              f"{sorted(DEFAULT_OPTIMIZATION)}")
        for key, value in rates.items():
            if not (isinstance(value, (int, float)) and not isinstance(value, bool)
                    and 0 < value <= 1):
                raise ConfigError(f"{name}.optimization[{key!r}]={value!r}: must be a "
                                  "number in (0, 1]")
        self.optimization = rates
        self.Q_model = ModelConfig.coerce(self.Q_model, f"{name}.Q_model")
        self.policy_model = ModelConfig.coerce(self.policy_model, f"{name}.policy_model")
        check_mlp_config(self.Q_model, f"{name}.Q_model", "SAC")
        check_mlp_config(self.policy_model, f"{name}.policy_model", "SAC")
        if self.worker_side_prioritization:
            raise ConfigError(f"{name}.worker_side_prioritization=True: not supported; SAC's "
                              "plan computes priorities on the learner (set "
                              "prioritized_replay=True for prioritized replay)")


class SAC(DQN):
    """Soft Actor-Critic; see the module docstring. ``algo.local_replay_buffer`` is
    the buffer the plan stores into (in checkpoints with
    ``checkpoint_replay_buffer``)."""

    config_class = SACConfig
    policy_class = LazyClass("flowrl.policies.sac:SACPolicy")
    name = "sac"

    @classmethod
    def policy_config(cls, config: SACConfig) -> dict[str, Any]:
        return {"Q_model": config.Q_model, "policy_model": config.policy_model,
                "twin_q": config.twin_q, "tau": config.tau,
                "initial_alpha": config.initial_alpha, "target_entropy": config.target_entropy,
                "gamma": config.gamma, "n_step": config.n_step,
                "grad_clip": config.grad_clip, **config.optimization}

    @staticmethod
    def execution_plan(workers, config: SACConfig, *, local_buffer=None) -> LocalStream:
        return replay_plan(workers, config, local_buffer, name="sac",
                           target_by_steps_trained=True)


__all__ = ["SAC", "SACConfig", "DEFAULT_OPTIMIZATION"]
