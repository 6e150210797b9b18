"""PPO's minibatch SGD gives bit-identical weights to a plain PyTorch loop, and its
advantages are standardized per minibatch when asked.

The policy's SGD path takes shortcuts (one gather per epoch, contiguous minibatch
views, a single-tower step through ``backward``, the KL and entropy terms outside
autograd when their coefficients are 0); the reference here takes none of them:
it gathers each minibatch by index, keeps every loss term in the graph, and
clips and steps as written in the PPO paper's pseudo-code.
"""

from __future__ import annotations

import copy
import math

import gymnasium as gym
import numpy as np
import pytest
import torch

from flowrl.algorithms import PPO, PPOConfig
from flowrl.batch import SampleBatch as SB
from flowrl.errors import ConfigError
from flowrl.models.sequences import SEQ_MASK
from flowrl.ops.multi_gpu import set_towers
from flowrl.policies import PPOPolicy
from flowrl.policies.ppo import standardize_advantages
from flowrl.policies.torch_policy import LoadedBatch


def _batch(n: int, seed: int) -> SB:
    rng = np.random.default_rng(seed)
    logits = rng.normal(size=(n, 2)).astype(np.float32)
    logp = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
    actions = rng.integers(0, 2, n)
    return SB(**{SB.OBS: rng.normal(size=(n, 4)).astype(np.float32), SB.ACTIONS: actions,
                 SB.ACTION_DIST_INPUTS: logits,
                 SB.ACTION_LOGP: logp[np.arange(n), actions].astype(np.float32),
                 SB.ADVANTAGES: rng.normal(size=n).astype(np.float32),
                 SB.VF_PREDS: rng.normal(size=n).astype(np.float32),
                 SB.VALUE_TARGETS: rng.normal(size=n).astype(np.float32)})


def _reference_sgd(model, batch: SB, *, epochs, size, seed, lr, clip, vf_clip, vf_coeff,
                   kl_coeff, ent_coeff, grad_clip, norm_adv=False):
    """Every minibatch gathered by index, every loss term in the graph; with
    ``norm_adv`` each minibatch's advantages standardized first (CleanRL)."""
    opt = torch.optim.Adam(model.parameters(), lr=lr, fused=True)
    t = {k: torch.as_tensor(v) for k, v in batch.items()}
    rng = np.random.default_rng(seed)
    for _ in range(epochs):
        perm = rng.permutation(batch.count)
        for start in range(0, batch.count, size):
            idx = torch.as_tensor(perm[start:start + size])
            mb = {k: v[idx] for k, v in t.items()}
            logp_all = torch.log_softmax(model.pi(mb[SB.OBS]), dim=-1)
            old_all = torch.log_softmax(mb[SB.ACTION_DIST_INPUTS], dim=-1)
            logp = logp_all.gather(-1, mb[SB.ACTIONS].long().unsqueeze(-1)).squeeze(-1)
            ratio = torch.exp(logp - mb[SB.ACTION_LOGP])
            adv = mb[SB.ADVANTAGES]
            if norm_adv:
                wide = adv.double()
                adv = ((wide - wide.mean()) / (wide.std(unbiased=False) + 1e-8)).float()
            surrogate = torch.min(adv * ratio, adv * ratio.clamp(1 - clip, 1 + clip))
            kl = (old_all.exp() * (old_all - logp_all)).sum(-1)
            entropy = -(logp_all.exp() * logp_all).sum(-1)
            value = model.vf(mb[SB.OBS]).squeeze(-1)
            old_value, targets = mb[SB.VF_PREDS], mb[SB.VALUE_TARGETS]
            clipped = old_value + (value - old_value).clamp(-vf_clip, vf_clip)
            vf_loss = torch.max((value - targets).pow(2), (clipped - targets).pow(2))
            total = (-surrogate + kl_coeff * kl + vf_coeff * vf_loss
                     - ent_coeff * entropy).mean()
            opt.zero_grad(set_to_none=True)
            total.backward()
            torch.nn.utils.clip_grad_norm_(list(model.parameters()), grad_clip)
            opt.step()
    return total.item()


@pytest.mark.parametrize("kl_coeff,ent_coeff,norm_adv", [(0.0, 0.0, False), (0.2, 0.01, False),
                                                         (0.0, 0.01, True)])
def test_ppo_sgd_is_bit_identical_to_a_plain_loop(kl_coeff, ent_coeff, norm_adv):
    hp = dict(lr=1e-3, clip=0.2, vf_clip=10.0, vf_coeff=0.5, kl_coeff=kl_coeff,
              ent_coeff=ent_coeff, grad_clip=0.5)
    policy = PPOPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=3,
                       lr=hp["lr"], clip_param=hp["clip"], vf_clip_param=hp["vf_clip"],
                       vf_loss_coeff=hp["vf_coeff"], kl_coeff=kl_coeff,
                       entropy_coeff=ent_coeff, grad_clip=hp["grad_clip"],
                       num_sgd_iter=3, sgd_minibatch_size=64,
                       standardize_advantages="minibatch" if norm_adv else "batch")
    reference = copy.deepcopy(policy.model)
    batch = _batch(200, seed=1)  # 64-row minibatches and a 8-row remainder
    if norm_adv:  # advantages far from standardized, so that skipping the step shows
        batch = batch.with_columns(**{SB.ADVANTAGES: 5 + 3 * batch[SB.ADVANTAGES]})
    stats = policy.learn_on_batch(batch, rng=np.random.default_rng(7))
    last_total = _reference_sgd(reference, batch, epochs=3, size=64, seed=7, norm_adv=norm_adv,
                                **hp)
    for (name, got), want in zip(policy.model.named_parameters(), reference.parameters()):
        assert torch.equal(got, want), name
    assert math.isfinite(stats["total_loss"]) and math.isfinite(last_total)
    assert stats["kl"] >= 0 and stats["entropy"] > 0
    assert stats["cur_kl_coeff"] == pytest.approx(kl_coeff)


def test_loaded_minibatches_cover_rows_once_and_towers_share_the_gather():
    policy = PPOPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=0)
    set_towers(policy, [torch.device("cpu")] * 2)  # two towers, one device: one copy
    loaded = policy.load_batch(_batch(50, seed=2))
    mbs = list(loaded.minibatches(16, seed=np.random.default_rng(0)))
    assert [mb.count for mb in mbs] == [16, 16, 16, 2]
    assert all(mb.copies[0][SB.OBS].data_ptr() == mb.copies[1][SB.OBS].data_ptr()
               for mb in mbs)
    seen = torch.cat([mb.copies[0][SB.VF_PREDS] for mb in mbs])
    assert sorted(seen.tolist()) == sorted(loaded.copies[0][SB.VF_PREDS].tolist())
    perm = np.random.default_rng(0).permutation(50)
    assert torch.equal(seen, loaded.copies[0][SB.VF_PREDS][torch.as_tensor(perm)])


def test_minibatch_advantages_are_standardized_before_the_tower_split():
    """Two towers train as one: the minibatch's own mean and std, not each shard's."""
    batch = _batch(128, seed=4)
    adv = batch[SB.ADVANTAGES].copy()
    adv[:64] = 10 + 4 * adv[:64]  # each tower's shard has its own scale
    batch = batch.with_columns(**{SB.ADVANTAGES: adv})
    weights = []
    for towers in (1, 2):
        policy = PPOPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2), seed=5,
                           standardize_advantages="minibatch")
        set_towers(policy, [torch.device("cpu")] * towers)
        for _ in range(3):
            policy.sgd_step(batch)  # unshuffled: the first half goes to tower 1
        weights.append(policy.get_weights())
    for k in weights[0]:
        np.testing.assert_allclose(weights[1][k], weights[0][k], rtol=1e-5, atol=1e-6)


def test_standardize_advantages_leaves_sequence_padding_out():
    adv = torch.tensor([[1.0, 3.0, 99.0], [5.0, 7.0, 9.0], [2.0, 2.0, 2.0]])
    mask = torch.tensor([[True, True, False], [True, True, True], [True, True, True]])
    loaded = LoadedBatch([{SB.ADVANTAGES: adv, SEQ_MASK: mask}], 3, rows=np.array([0, 1]))
    out = standardize_advantages(loaded).copies[0][SB.ADVANTAGES]
    real = np.array([1.0, 3.0, 5.0, 7.0, 9.0])  # rows 0 and 1 without the padded 99
    want = (real - real.mean()) / (real.std() + 1e-8)
    np.testing.assert_allclose(out[0, :2].numpy(), want[:2], rtol=1e-6)
    np.testing.assert_allclose(out[1].numpy(), want[2:], rtol=1e-6)


def test_standardize_advantages_is_checked():
    with pytest.raises(ConfigError, match=r"standardize_advantages='episode'.*'minibatch'"):
        PPOPolicy(gym.spaces.Box(-1, 1, (4,)), gym.spaces.Discrete(2),
                  standardize_advantages="episode")
    with pytest.raises(ConfigError, match=r"PPOConfig.standardize_advantages"):
        PPOConfig(env="CartPole-v1", standardize_advantages="all")


def test_ppo_plan_standardizes_per_minibatch_in_the_policy():
    algo = PPO(PPOConfig(env="CartPole-v1", num_workers=1,
                         num_envs_per_worker=2, rollout_fragment_length=32,
                         train_batch_size=128, sgd_minibatch_size=32, num_sgd_iter=2,
                         standardize_advantages="minibatch", seed=0, num_cpus_per_worker=0))
    try:
        assert "ppo/standardize" not in algo.plan.to_dot()
        assert algo.get_policy().standardize_advantages == "minibatch"
        start = algo.get_policy().get_weights()
        r = algo.train()
        assert r["info"]["num_steps_trained"] == 128
        assert math.isfinite(r["info"]["learner"]["default_policy"]["total_loss"])
        after = algo.get_policy().get_weights()
        assert any(not np.array_equal(start[k], after[k]) for k in start)
    finally:
        algo.stop()
    batch_mode = PPO(PPOConfig(env="CartPole-v1", num_workers=0, seed=0))
    try:
        assert "ppo/standardize" in batch_mode.plan.to_dot()
    finally:
        batch_mode.stop()
