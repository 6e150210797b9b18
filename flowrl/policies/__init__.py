"""Torch policies (PG, A2C/A3C, PPO, IMPALA, APPO, DQN, MARWIL, BC, SAC, DDPG/TD3) and the
pure RL maths they use.

Names resolve on first use (PEP 562), so importing a light submodule such as
``flowrl.policies.sgd`` (the operators do) does not import torch.
"""

from __future__ import annotations

from flowrl.lazy import lazy_attributes

# Light (numpy-only) names are bound now; ``vtrace`` must be, since the import of
# its submodule would otherwise leave the package attribute ``vtrace`` the module.
from flowrl.policies.maths import discounted_returns, explained_variance, gae
from flowrl.policies.sgd import minibatch_sgd
from flowrl.policies.vtrace import vtrace

_WHERE = {
    "A2CPolicy": "a2c", "APPOPolicy": "appo", "BCPolicy": "marwil", "DDPGPolicy": "ddpg",
    "DQNPolicy": "dqn",
    "Categorical": "distributions", "DiagGaussian": "distributions",
    "IMPALAPolicy": "impala", "MARWILPolicy": "marwil", "PGPolicy": "pg", "PPOPolicy": "ppo",
    "MultiCategorical": "distributions", "LoadedBatch": "torch_policy",
    "TorchPolicy": "torch_policy", "SACPolicy": "sac", "SquashedGaussian": "distributions",
}

__all__ = ["TorchPolicy", "MultiCategorical", "PGPolicy", "A2CPolicy", "PPOPolicy",
           "Categorical", "DiagGaussian", "discounted_returns", "gae", "explained_variance",
           "IMPALAPolicy", "APPOPolicy", "vtrace", "minibatch_sgd", "LoadedBatch", "DQNPolicy",
           "MARWILPolicy", "BCPolicy", "SACPolicy", "SquashedGaussian", "DDPGPolicy"]


__getattr__, __dir__ = lazy_attributes(__name__, _WHERE, globals(), __all__)
