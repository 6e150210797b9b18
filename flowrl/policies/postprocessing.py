"""Postprocessing of sampled trajectories: advantages and value targets in numpy
(GAE with a critic, discounted returns without), the part of acting that runs on
the worker after each fragment."""

from __future__ import annotations

from typing import Sequence

import numpy as np

from flowrl.batch import SampleBatch
from flowrl.policies.maths import discounted_returns, gae

SB = SampleBatch


class Postprocessing:
    """Advantages and value targets for trajectories, in numpy (a mixin: the class
    sets ``use_critic``, ``use_gae``, ``gamma`` and ``lambda_``), inherited by
    :class:`~flowrl.policies.TorchPolicy`.

    ``use_gae`` (RLlib 1.x's name) False makes both columns the discounted returns
    even with a critic, which then only bootstraps cut and truncated episodes
    (MARWIL, whose loss subtracts ``V(s)`` itself)."""

    use_critic = True
    use_gae = True
    gamma: float
    lambda_: float

    def postprocess_trajectory(self, batch: SampleBatch, last_value: float = 0.0) -> SampleBatch:
        """A new batch with ``advantages`` and ``value_targets`` for one trajectory.

        ``batch`` holds one env's (one agent's) consecutive steps in time order; it
        may span several episodes, each ending at a ``terminateds``/``truncateds``
        row. Truncated rows bootstrap from the ``bootstrap_value`` column
        (``V(final obs)``); ``last_value`` is ``V(s_T)`` after the last row when the
        fragment cut an episode (0 when the last row ends its episode). With a
        critic this is GAE(γ, λ); without one (or without ``use_gae``), advantages
        are discounted returns.
        """
        term = batch[SB.TERMINATEDS]
        trunc = batch.get(SB.TRUNCATEDS)
        boot = batch.get(SB.BOOTSTRAP_VALUE)
        if trunc is not None and boot is None:
            boot = np.zeros(batch.count, np.float32)
        return self._with_advantages(batch, term, last_value, trunc, boot)

    def _with_advantages(self, batch: SampleBatch, term, last_value: float, trunc,
                         boot) -> SampleBatch:
        """``batch`` plus ``advantages`` and ``value_targets``: GAE(γ, λ) with a critic
        and ``use_gae``, discounted returns otherwise."""
        if self.use_critic and self.use_gae:
            adv, targets = gae(batch[SB.REWARDS], batch[SB.VF_PREDS], term, last_value,
                               gamma=self.gamma, lam=self.lambda_, truncateds=trunc,
                               bootstrap_values=boot)
        else:
            adv = targets = discounted_returns(batch[SB.REWARDS], term, last_value,
                                               gamma=self.gamma, truncateds=trunc,
                                               bootstrap_values=boot)
        return batch.with_columns(**{SB.ADVANTAGES: adv, SB.VALUE_TARGETS: targets})

    def postprocess_trajectories(self, batch: SampleBatch, ends: Sequence[int],
                                 last_values: Sequence[float]) -> SampleBatch:
        """:meth:`postprocess_trajectory` of several trajectories stored back to back.

        Trajectory ``i`` is rows ``ends[i-1]:ends[i]`` of ``batch`` (``ends`` ascending,
        the last equal to ``batch.count``), with ``last_values[i]`` its
        ``last_value``. The result equals concatenating ``postprocess_trajectory``
        of each slice; for this class it is ONE pass over all rows, a trajectory's
        end acting as a time-limit cut that bootstraps from its ``last_value``. A
        subclass that overrides :meth:`postprocess_trajectory` gets the loop.

        >>> import gymnasium as gym
        >>> from flowrl.policies import PGPolicy
        >>> p = PGPolicy(gym.spaces.Box(-1, 1, (1,)), gym.spaces.Discrete(2), gamma=0.5)
        >>> b = SampleBatch(rewards=np.ones(4, np.float32), terminateds=np.zeros(4, bool))
        >>> p.postprocess_trajectories(b, [2, 4], [2.0, 0.0])["advantages"].tolist()
        [2.0, 2.0, 1.5, 1.0]
        """
        ends = np.asarray(ends, np.int64)
        if type(self).postprocess_trajectory is not Postprocessing.postprocess_trajectory:
            starts = np.r_[0, ends[:-1]]
            parts = [self.postprocess_trajectory(batch.slice(s, e), last_value=float(v))
                     for s, e, v in zip(starts.tolist(), ends.tolist(), last_values)]
            return parts[0] if len(parts) == 1 else SampleBatch.concat_samples(parts)
        n = batch.count
        term = np.asarray(batch[SB.TERMINATEDS], bool)
        trunc = batch.get(SB.TRUNCATEDS)
        trunc = np.zeros(n, bool) if trunc is None else np.asarray(trunc, bool)
        boot = batch.get(SB.BOOTSTRAP_VALUE)
        boot = np.zeros(n, np.float32) if boot is None else np.asarray(boot, np.float32)
        cut = np.zeros(n, bool)
        cut[ends - 1] = True
        cut &= ~(term | trunc)
        boot = boot.copy()
        boot[ends - 1] = np.where(cut[ends - 1], np.asarray(last_values, np.float32),
                                  boot[ends - 1])
        return self._with_advantages(batch, term, 0.0, trunc | cut, boot)


__all__ = ["Postprocessing"]
