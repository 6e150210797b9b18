"""Algorithms as plans: a typed config, a policy, and an ``execution_plan``.

>>> sorted(ALGORITHMS)
['a2c', 'apex', 'dqn', 'pg', 'ppo']
"""

from flowrl.algorithms.a2c import A2C, A2CConfig
from flowrl.algorithms.apex import ApeX, ApeXConfig
from flowrl.algorithms.dqn import DQN, DQNConfig
from flowrl.algorithms.base import Algorithm, AlgorithmConfig
from flowrl.algorithms.pg import PG, PGConfig
from flowrl.algorithms.ppo import PPO, PPOConfig

ALGORITHMS = {"pg": PG, "a2c": A2C, "ppo": PPO, "dqn": DQN, "apex": ApeX}

__all__ = ["Algorithm", "AlgorithmConfig", "PG", "PGConfig", "A2C", "A2CConfig", "PPO",
           "PPOConfig", "DQN", "DQNConfig", "ApeX", "ApeXConfig",
           "ALGORITHMS"]
