"""Torch policies (PG, A2C/A3C, PPO, IMPALA, APPO, DQN) and the pure RL maths they use."""

from flowrl.policies.a2c import A2CPolicy
from flowrl.policies.appo import APPOPolicy
from flowrl.policies.dqn import DQNPolicy
from flowrl.policies.distributions import Categorical, DiagGaussian
from flowrl.policies.impala import IMPALAPolicy
from flowrl.policies.maths import discounted_returns, explained_variance, gae
from flowrl.policies.pg import PGPolicy
from flowrl.policies.ppo import PPOPolicy
from flowrl.policies.sgd import minibatch_sgd
from flowrl.policies.torch_policy import ActorCriticModel, LoadedBatch, TorchPolicy
from flowrl.policies.vtrace import vtrace

__all__ = ["TorchPolicy", "ActorCriticModel", "PGPolicy", "A2CPolicy", "PPOPolicy",
           "Categorical", "DiagGaussian", "discounted_returns", "gae", "explained_variance",
           "IMPALAPolicy", "APPOPolicy", "vtrace", "minibatch_sgd", "LoadedBatch", "DQNPolicy"]
