"""IMPALA's V-trace actor-critic loss (Espeholt et al. 2018) over flat train batches.

Train batches are rows ``(s_t, a_t, r_t, s_{t+1})`` in time order per trajectory
(env-major fragments, as workers sample them), possibly several trajectories and
workers concatenated. :func:`vtrace_inputs` turns them into one time-major
sequence ``[N, 1]`` for :func:`~flowrl.policies.vtrace.vtrace`: where the next row
does not continue this one (a terminal step, a time-limit truncation, the end of
a fragment, a different episode), the discount is 0 and a non-terminal cut adds
``γ V(s_{t+1})`` to the reward. That is exactly V-trace with the bootstrap
``V(x_T) = V(s_{t+1})`` at every cut, so the targets do not depend on how rows
were grouped into fragments. Rows must stay in order: train on whole batches or
unshuffled minibatches (``sgd_minibatch_size=0``, the IMPALA default).
"""

from __future__ import annotations

import torch

from flowrl.batch import SampleBatch as SB
from flowrl.errors import ConfigError
from flowrl.models.sequences import SEQ_BOOTSTRAP_VALUE, SEQ_LENS, SEQ_MASK, SEQ_WEIGHTS
from flowrl.policies.a2c import A2CPolicy
from flowrl.policies.torch_policy import torch_explained_variance
from flowrl.policies.vtrace import vtrace


def next_row_follows(train: dict[str, torch.Tensor]) -> torch.Tensor:
    """``(N,)`` bool: row ``i + 1`` is the step after row ``i`` in the same episode
    (False for the last row).

    >>> next_row_follows({SB.EPS_ID: torch.tensor([0, 0, 1]), SB.T: torch.tensor([3, 4, 0])}).tolist()
    [True, False, False]
    """
    eps, t = train[SB.EPS_ID], train[SB.T]
    follows = torch.zeros(len(eps), dtype=torch.bool, device=eps.device)
    follows[:-1] = (eps[1:] == eps[:-1]) & (t[1:] == t[:-1] + 1)
    return follows


def vtrace_inputs(train: dict[str, torch.Tensor], next_values: torch.Tensor,
                  gamma: float, *, ends: torch.Tensor | None = None
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(discounts, rewards)`` of shape ``(N,)`` for one flat sequence of rows (see the
    module docstring); ``next_values`` is ``V(s_{t+1})`` per row. Rows where ``ends``
    is True never continue into the next row (the end of a recurrent sequence, or
    padding).

    >>> train = {SB.EPS_ID: torch.tensor([0, 0, 0, 1]), SB.T: torch.tensor([0, 1, 2, 0]),
    ...          SB.TERMINATEDS: torch.tensor([False, False, True, False]),
    ...          SB.TRUNCATEDS: torch.tensor([False, False, False, False]),
    ...          SB.REWARDS: torch.ones(4)}
    >>> d, r = vtrace_inputs(train, torch.full((4,), 10.0), gamma=0.5)
    >>> d.tolist(), r.tolist()
    ([0.5, 0.5, 0.0, 0.0], [1.0, 1.0, 1.0, 6.0])
    """
    term = train[SB.TERMINATEDS].bool()
    trunc = train[SB.TRUNCATEDS].bool() if SB.TRUNCATEDS in train else torch.zeros_like(term)
    cont = next_row_follows(train) & ~term & ~trunc
    if ends is not None:
        cont &= ~ends
    discounts = gamma * cont.to(torch.float32)
    cut = (~term & ~cont).to(torch.float32)
    rewards = train[SB.REWARDS].to(torch.float32) + gamma * cut * next_values
    return discounts, rewards


class IMPALAPolicy(A2CPolicy):
    """Actor-critic trained with V-trace targets; defaults follow RLlib 1.x IMPALA.

    ``vtrace=True``: ``L = -mean(ρ^pg A^vtrace log π) + vf_loss_coeff · ½ mean((v_s -
    V)²) - entropy_coeff · mean(H)``, with the V-trace clipping thresholds
    ``vtrace_clip_rho_threshold`` and ``vtrace_clip_pg_rho_threshold``. Stats add
    how off-policy the rows were: ``mean_rho`` (mean π/μ), ``rho_clipped_frac`` and
    ``c_clipped_frac`` (shares of rows whose π/μ exceeds ρ̄ and 1), and
    ``vtrace_explained_var`` (of the V-trace targets by the values).
    ``vtrace=False``: the A3C loss on GAE advantages computed by the workers.

    >>> import gymnasium as gym
    >>> p = IMPALAPolicy(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(2), seed=0)
    >>> p.vtrace, p.lr, p.grad_clip
    (True, 0.0005, 40.0)
    """


    def __init__(self, observation_space, action_space, *, lr: float = 5e-4,
                 vtrace: bool = True, vtrace_clip_rho_threshold: float | None = 1.0,
                 vtrace_clip_pg_rho_threshold: float | None = 1.0, **kwargs):
        super().__init__(observation_space, action_space, lr=lr, **kwargs)
        self.vtrace = vtrace
        self.clip_rho, self.clip_pg_rho = vtrace_clip_rho_threshold, vtrace_clip_pg_rho_threshold

    #: Frame-stacked images: a ``new_frame`` column (:data:`SampleBatch.NEXT_FRAME`)
    #: may stand in for ``new_obs``; :meth:`_next_values` rebuilds the stacks it needs.
    takes_next_frame = True

    @property
    def trains_on_new_obs(self) -> bool:
        """True with flat V-trace: it bootstraps from ``V(new_obs)`` under the current
        model where a row's successor is not the next row (:meth:`_next_values`)."""
        return self.vtrace and not self.is_recurrent

    def _train_tensors(self, batch):
        out = super()._train_tensors(batch)
        if SB.NEXT_OBS in batch and not self.is_recurrent:
            out[SB.NEXT_OBS] = self._obs_tensor(batch[SB.NEXT_OBS])
        return out

    def vtrace_targets(self, train: dict[str, torch.Tensor], logp: torch.Tensor,
                       values: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(vs, pg_advantages)`` of shape ``(N,)`` for the rows of ``train``, with the
        current model as the target policy π and the batch's ``action_logp`` as μ.

        Flat rows run as one time-major sequence ``[N, 1]`` cut where rows do not
        continue (see the module docstring), bootstrapping from the current
        ``V(s_{t+1})``. A recurrent policy's ``B`` padded sequences run time-major
        as ``[T, B]``; each bootstraps from the behaviour policy's value after its
        last real step (``seq_bootstrap_value``: the next sequence's first value as
        the worker computed it, or ``V(s_T)`` at a fragment's end), and padding
        neither continues nor counts (its rows are masked out of the loss)."""
        if self.is_recurrent:
            return self._sequence_vtrace(train, logp, values)
        next_values = self._next_values(train, values)
        discounts, rewards = vtrace_inputs(train, next_values, self.gamma)
        vs, adv = vtrace(train[SB.ACTION_LOGP].float()[:, None], logp.detach()[:, None],
                         discounts[:, None], rewards[:, None], values.detach()[:, None],
                         torch.zeros(1), clip_rho_threshold=self.clip_rho,
                         clip_pg_rho_threshold=self.clip_pg_rho)
        return vs[:, 0], adv[:, 0]

    def _next_values(self, train: dict[str, torch.Tensor], values: torch.Tensor) -> torch.Tensor:
        """``V(s_{t+1})`` per row under the current model: the next row's value where
        the next row is ``s_{t+1}`` (the same episode, one step later), else one
        forward over just those rows' ``new_obs`` (fragment ends, time limits,
        terminal rows: at most a few per fragment, not a second pass over the batch).
        Where the batch has ``new_frame`` instead, a row's ``new_obs`` is its ``obs``
        shifted by one frame with ``new_frame`` appended."""
        next_values = torch.zeros_like(values)
        next_values[:-1] = values.detach()[1:]
        cut = torch.nonzero(~next_row_follows(train)).squeeze(-1)
        if len(cut):
            if SB.NEXT_OBS in train:
                new_obs = train[SB.NEXT_OBS][cut]
            else:
                new_obs = torch.cat([train[SB.OBS][cut, 1:], train[SB.NEXT_FRAME][cut, None]], 1)
            with torch.no_grad():
                self.model(self._input_dict(new_obs, training=True), [], None)
                next_values[cut] = self.model.value_function().to(values.dtype)
        return next_values

    def _sequence_vtrace(self, train, logp, values):
        if SEQ_BOOTSTRAP_VALUE not in train:
            raise ConfigError(f"{type(self).__name__}: V-trace over sequences needs the "
                              "batch's vf_preds and bootstrap_value columns (a RolloutWorker "
                              "records both)")
        lens = train[SEQ_LENS]
        batch = len(lens)
        steps = len(values) // batch
        last = torch.arange(batch, device=lens.device) * steps + lens - 1
        next_values = torch.zeros_like(values)
        next_values[:-1] = values.detach()[1:]
        next_values[last] = train[SEQ_BOOTSTRAP_VALUE].to(values.dtype)
        ends = ~train[SEQ_MASK]
        ends[last] = True
        discounts, rewards = vtrace_inputs(train, next_values, self.gamma, ends=ends)

        def time_major(x: torch.Tensor) -> torch.Tensor:
            return x.reshape(batch, steps).T

        vs, adv = vtrace(time_major(train[SB.ACTION_LOGP].float()), time_major(logp.detach()),
                         time_major(discounts), time_major(rewards),
                         time_major(values.detach()), torch.zeros(batch, device=values.device),
                         clip_rho_threshold=self.clip_rho, clip_pg_rho_threshold=self.clip_pg_rho)
        return vs.T.reshape(-1), adv.T.reshape(-1)

    def loss(self, train):
        if not self.vtrace:
            return super().loss(train)
        inputs, values = self.model_out(train)
        dist = self.dist_class(inputs)
        logp = dist.logp(train[SB.ACTIONS])
        vs, adv = self.vtrace_targets(train, logp, values)
        policy_loss = self.mean(-(logp * adv), train)
        vf_loss = 0.5 * self.mean((values - vs).pow(2), train)
        entropy = self.mean(dist.entropy(), train)
        total = policy_loss + self.vf_loss_coeff * vf_loss - self.entropy_coeff * entropy
        ratio = torch.exp(logp.detach() - train[SB.ACTION_LOGP].float())
        clip_rho = self.clip_rho if self.clip_rho is not None else float("inf")
        return total, {"policy_loss": policy_loss.detach(), "vf_loss": vf_loss.detach(),
                       "entropy": entropy.detach(),
                       # how off-policy the batch is, and how much V-trace cut it
                       "mean_rho": self.mean(ratio, train),
                       "rho_clipped_frac": self.mean((ratio > clip_rho).float(), train),
                       "c_clipped_frac": self.mean((ratio > 1.0).float(), train),
                       "vtrace_explained_var": torch_explained_variance(
                           values.detach(), vs, train.get(SEQ_WEIGHTS))}


__all__ = ["IMPALAPolicy", "vtrace_inputs", "next_row_follows"]
