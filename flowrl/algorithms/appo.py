"""APPO: asynchronous PPO on IMPALA's architecture (RLlib 1.x ``APPO``).

The same plan as :mod:`flowrl.algorithms.impala` (actors, optional tree
aggregation and replay, a learner thread behind queues, weights back to the
producing workers), with PPO's clipped surrogate as the loss
(:class:`~flowrl.policies.APPOPolicy`): GAE advantages by default
(``vtrace=False``), V-trace ones with ``vtrace=True``, and an adaptive KL penalty
with ``use_kl_loss``. RLlib's separate target network is not kept: the behaviour
policy of each batch (its ``action_logp``) is the ratio's denominator.

>>> algo = APPO(APPOConfig(env="CartPole-v1", num_workers=1, train_batch_size=100, seed=0))
>>> r = algo.train()
>>> r["info"]["num_steps_trained"] >= 100, "kl" in r["info"]["learner"]["default_policy"]
(True, True)
>>> algo.stop()
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from flowrl.algorithms.impala import (IMPALA, IMPALAConfig, async_learner_plan,
                                      make_learner_thread)
from flowrl.algorithms.validators import boolean, number
from flowrl.graph.stream import LocalStream
from flowrl.ops import UpdateKL
from flowrl.policies import APPOPolicy


@dataclass
class APPOConfig(IMPALAConfig):
    """IMPALA's fields plus PPO's: ``clip_param=0.4``, ``use_kl_loss=False``,
    ``kl_coeff=1.0``, ``kl_target=0.01``, ``lambda_=1.0`` (GAE), and
    ``vtrace=False`` by default, as RLlib 1.x. Where IMPALA's defaults differ from
    RLlib 1.x (``min_time_s_per_reporting``, the model) APPO's do too; ``num_gpus``
    is 0 in both.

    >>> APPOConfig(env="CartPole-v1", clip_param=0)
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: APPOConfig.clip_param=0: must be a number > 0 and <= 1e+06
    """

    vtrace: bool = False
    clip_param: float = 0.4
    use_kl_loss: bool = False
    kl_coeff: float = 1.0
    kl_target: float = 0.01
    lambda_: float = 1.0

    checks: ClassVar[dict[str, tuple]] = {
        "clip_param": number(0, open_lo=True), "use_kl_loss": boolean(), "kl_coeff": number(0),
        "kl_target": number(0, open_lo=True), "lambda_": number(0, 1),
    }


class _UpdateKL:
    """After each learner result: adapt the KL coefficient from its ``kl`` stat."""

    def __init__(self, workers, learner):
        self.update, self.learner = UpdateKL(workers), learner

    def __call__(self, item: tuple) -> tuple:
        with self.learner.lock:
            self.update(item[1])
        return item


class APPO(IMPALA):
    """Asynchronous PPO; see the module docstring."""

    config_class = APPOConfig
    policy_class = APPOPolicy
    name = "appo"

    @classmethod
    def policy_config(cls, config: APPOConfig) -> dict[str, Any]:
        return {**super().policy_config(config), "clip_param": config.clip_param,
                "use_kl_loss": config.use_kl_loss, "kl_coeff": config.kl_coeff,
                "kl_target": config.kl_target, "lambda_": config.lambda_}

    def execution_plan(self, workers, config: APPOConfig) -> LocalStream:
        self.learner_thread = learner = make_learner_thread(workers, config, self.name)
        after = _UpdateKL(workers, learner) if config.use_kl_loss else None
        return async_learner_plan(workers, config, learner, self.name, after_train=after)


__all__ = ["APPO", "APPOConfig"]
