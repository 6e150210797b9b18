"""Algorithms as plans: a typed config, a policy, and an ``execution_plan``.

>>> sorted(ALGORITHMS)
['a2c', 'pg', 'ppo']
"""

from flowrl.algorithms.a2c import A2C, A2CConfig
from flowrl.algorithms.base import Algorithm, AlgorithmConfig, build_algorithm
from flowrl.algorithms.pg import PG, PGConfig
from flowrl.algorithms.ppo import PPO, PPOConfig

ALGORITHMS = {"pg": PG, "a2c": A2C, "ppo": PPO}

__all__ = ["Algorithm", "AlgorithmConfig", "build_algorithm", "PG", "PGConfig", "A2C", "A2CConfig", "PPO",
           "PPOConfig", "ALGORITHMS"]
