"""Torch policies (PG, A2C, PPO, DQN) and the pure RL maths they use."""

from flowrl.policies.a2c import A2CPolicy
from flowrl.policies.dqn import DQNPolicy
from flowrl.policies.distributions import Categorical, DiagGaussian
from flowrl.policies.maths import discounted_returns, explained_variance, gae
from flowrl.policies.pg import PGPolicy
from flowrl.policies.ppo import PPOPolicy
from flowrl.policies.torch_policy import ActorCriticModel, TorchPolicy

__all__ = ["TorchPolicy", "ActorCriticModel", "PGPolicy", "A2CPolicy", "PPOPolicy", "DQNPolicy",
           "Categorical", "DiagGaussian", "discounted_returns", "gae", "explained_variance"]
