"""Ape-X DDPG (RLlib 1.x's APEX_DDPG): DDPG or TD3 on the Ape-X plan.

Remote workers sample with the deterministic actor plus exploration noise whose
scale is fixed per worker (worker ``i`` of ``N``: ``0.4 ** (1 + 7 i / (N - 1))``
times the configured noise, as RLlib's per-worker noise), compute their rows'
initial priorities, and send them to ``num_replay_buffer_shards`` replay actors;
the learner thread trains the actor and critics on replayed batches and sends the
TD errors back as priorities (see :mod:`flowrl.algorithms.apex`). Every
DDPG/TD3 setting applies: set ``twin_q``, ``policy_delay`` and
``smooth_target_policy`` for Ape-X TD3.

>>> algo = ApexDDPG(ApexDDPGConfig(env="Pendulum-v1", num_workers=2, learning_starts=100,
...                                actor_hiddens=(16,), critic_hiddens=(16,),
...                                timesteps_per_iteration=400, seed=0))
>>> r = algo.train()
>>> r["timesteps_total"] >= 400, len(algo.replay_actors)
(True, 2)
>>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from flowrl.algorithms.apex import ApeX, ApexSettings
from flowrl.algorithms.base import LazyClass
from flowrl.algorithms.ddpg import DDPGConfig, ddpg_policy_config


@dataclass
class ApexDDPGConfig(ApexSettings, DDPGConfig):
    """Ape-X DDPG hyperparameters: :class:`~flowrl.algorithms.apex.ApexSettings` on
    top of :class:`~flowrl.algorithms.ddpg.DDPGConfig`, with RLlib 1.x's APEX_DDPG
    defaults (``n_step=3``, ``train_batch_size=512``, worker-side prioritization,
    50-step fragments) except the sizes, scaled as :class:`ApeXConfig`'s:
    ``buffer_size=100000``, ``learning_starts=1000`` per replay actor,
    ``timesteps_per_iteration=5000``, and the target networks soft-updated after
    every learner step (``target_network_update_freq=0``, RLlib 500000).

    >>> ApexDDPGConfig(env="Pendulum-v1", num_workers=0)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: ApexDDPGConfig.num_workers=0: Ape-X samples on remote workers; set num_workers >= 1 (or use DDPG or TD3)
    """

    single_process: ClassVar[str] = "DDPG or TD3"

    n_step: int = 3
    train_batch_size: int = 512
    buffer_size: int = 100000
    learning_starts: int = 1000
    target_network_update_freq: int = 0
    timesteps_per_iteration: int = 5000


class ApexDDPG(ApeX):
    """DDPG/TD3 with distributed prioritized replay; see the module docstring."""

    config_class = ApexDDPGConfig
    policy_class = LazyClass("flowrl.policies.ddpg:DDPGPolicy")
    name = "apex_ddpg"
    example_env = "Pendulum-v1"  # continuous actions only

    @classmethod
    def policy_config(cls, config: ApexDDPGConfig) -> dict[str, Any]:
        return ddpg_policy_config(config, cls.__name__)

    @staticmethod
    def set_worker_exploration(policy, amount: float) -> None:
        """A remote worker's noise scale is ``amount``."""
        policy.set_noise_scale(amount)


__all__ = ["ApexDDPG", "ApexDDPGConfig"]
