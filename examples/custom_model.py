"""A custom torch model, written as for RLlib 1.x, trained by flowrl unchanged.

``ResidualMLP`` has RLlib's ``TorchModelV2`` shape: the constructor takes
``(obs_space, action_space, num_outputs, model_config, name)`` and initialises both
base classes, ``forward(input_dict, state, seq_lens)`` returns the action
distribution's inputs and the (empty) state, and ``value_function()`` returns V(s)
for the rows of the last forward. Porting one from RLlib means changing its import
(``from flowrl.models import TorchModelV2``) and registering it
(``register_model`` for ``ModelCatalog.register_custom_model``); the class body
stays as it was. Its options arrive in ``model_config["custom_model_config"]``.

    python examples/custom_model.py [--iters N] [--backend local|ray]
"""

from __future__ import annotations

import argparse
import os

import numpy as np
from torch import nn

from flowrl.algorithms import PPO, PPOConfig
from flowrl.models import TorchModelV2, register_model


class ResidualMLP(TorchModelV2, nn.Module):
    """A shared residual trunk with policy and value heads."""

    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        TorchModelV2.__init__(self, obs_space, action_space, num_outputs, model_config, name)
        nn.Module.__init__(self)
        width = model_config["custom_model_config"].get("width", 64)
        self.embed = nn.Linear(int(np.prod(obs_space.shape)), width)
        self.block = nn.Sequential(nn.Tanh(), nn.Linear(width, width), nn.Tanh(),
                                   nn.Linear(width, width))
        self.logits = nn.Linear(width, num_outputs)
        self.value_head = nn.Linear(width, 1)
        self._features = None

    def forward(self, input_dict, state, seq_lens):
        x = self.embed(input_dict["obs_flat"])
        self._features = (x + self.block(x)).tanh()
        return self.logits(self._features), state

    def value_function(self):
        return self.value_head(self._features).squeeze(-1)


register_model("residual_mlp", ResidualMLP)


def main(argv=None) -> list:
    small = os.environ.get("CI") == "true"
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--iters", type=int, default=4 if small else 20)
    p.add_argument("--backend", default="local", choices=["local", "ray"])
    args = p.parse_args(argv)
    config = PPOConfig(env="CartPole-v1", num_workers=1, backend=args.backend, seed=0,
                       model={"custom_model": "residual_mlp",
                              "custom_model_config": {"width": 32}},
                       rollout_fragment_length=256, train_batch_size=512,
                       sgd_minibatch_size=128, num_sgd_iter=6, lr=1e-3, kl_coeff=0.0)
    curve = []
    with PPO(config) as algo:
        print(type(algo.workers.local_worker().get_policy().model).__name__, "on",
              args.backend)
        for _ in range(args.iters):
            r = algo.train()
            curve.append(r["episode_reward_mean"])
            print(f"iter {r['training_iteration']:3d}  mean return {r['episode_reward_mean']:6.1f}")
    return curve


if __name__ == "__main__":
    main()
