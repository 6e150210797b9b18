"""Algorithms as plans: a typed config, a policy, and an ``execution_plan``.

>>> sorted(ALGORITHMS)
['a2c', 'a3c', 'apex', 'appo', 'ddppo', 'dqn', 'impala', 'pg', 'ppo']
"""

from flowrl.algorithms.a2c import A2C, A2CConfig
from flowrl.algorithms.a3c import A3C, A3CConfig
from flowrl.algorithms.apex import ApeX, ApeXConfig
from flowrl.algorithms.appo import APPO, APPOConfig
from flowrl.algorithms.base import Algorithm, AlgorithmConfig, build_algorithm
from flowrl.algorithms.ddppo import DDPPO, DDPPOConfig
from flowrl.algorithms.dqn import DQN, DQNConfig
from flowrl.algorithms.impala import IMPALA, IMPALAConfig
from flowrl.algorithms.pg import PG, PGConfig
from flowrl.algorithms.ppo import PPO, PPOConfig

ALGORITHMS = {"pg": PG, "a2c": A2C, "ppo": PPO, "a3c": A3C, "impala": IMPALA, "appo": APPO,
              "dqn": DQN, "apex": ApeX, "ddppo": DDPPO}

__all__ = ["Algorithm", "AlgorithmConfig", "build_algorithm", "PG", "PGConfig", "A2C",
           "A2CConfig", "PPO", "PPOConfig", "ALGORITHMS", "A3C", "A3CConfig", "IMPALA",
           "IMPALAConfig", "APPO", "APPOConfig", "DQN", "DQNConfig", "ApeX", "ApeXConfig",
           "DDPPO", "DDPPOConfig"]
