"""MultiGPUTrainOneStep on a multi-agent worker set: ``policies=`` picks what is trained."""

from __future__ import annotations

import numpy as np

import flowrl
from flowrl.ops import MultiGPUTrainOneStep, synchronous_parallel_sample
from flowrl.policies import PPOPolicy
from flowrl.workers import PolicySpec, WorkerConfig, WorkerSet, make_multi_agent


def _two_policy_workers() -> WorkerSet:
    cfg = WorkerConfig(rollout_fragment_length=32, seed=0, policy_config={"hidden_sizes": (8,)},
                       policies={"a": PolicySpec(PPOPolicy), "b": PolicySpec(PPOPolicy)},
                       policy_mapping_fn=lambda agent, episode: "ab"[agent],
                       policies_to_train=["a"])
    return WorkerSet(make_multi_agent("CartPole-v1", 2), None, cfg, num_workers=1,
                     backend="local")


def _same(x: dict, y: dict) -> bool:
    return all(np.array_equal(x[k], y[k]) for k in x)


def _train(ws: WorkerSet, op: MultiGPUTrainOneStep) -> dict:
    batch = synchronous_parallel_sample(ws)[0]
    with flowrl.Plan(flowrl.from_iterable(lambda: [batch]).for_each(op)).compile() as run:
        _, info = next(run)
    return info


def test_multi_gpu_trains_and_broadcasts_exactly_the_given_policies():
    ws = _two_policy_workers()
    try:
        local, remote = ws.local_worker(), ws.remote_workers()[0]
        before, remote_before = local.get_weights(), remote.get_weights()
        info = _train(ws, MultiGPUTrainOneStep(ws, num_gpus=2, sgd_minibatch_size=16,
                                               policies=["b"], seed=0))
        after, remote_after = local.get_weights(), remote.get_weights()
        assert list(info) == ["b"]
        assert _same(before["a"], after["a"])               # "a" (policies_to_train) untouched
        assert not _same(before["b"], after["b"])
        assert local.get_policy("a").num_towers == 1        # only trained policies get towers
        assert local.get_policy("b").num_towers == 2
        assert _same(after["b"], remote_after["b"])         # "b" broadcast, "a" not re-sent
        assert _same(remote_before["a"], remote_after["a"])
    finally:
        ws.stop()


def test_multi_gpu_default_trains_policies_to_train():
    ws = _two_policy_workers()
    try:
        before = ws.local_worker().get_weights()
        info = _train(ws, MultiGPUTrainOneStep(ws, num_gpus=2, sgd_minibatch_size=16, seed=0))
        after = ws.local_worker().get_weights()
        assert list(info) == ["a"]
        assert not _same(before["a"], after["a"]) and _same(before["b"], after["b"])
    finally:
        ws.stop()


def test_recurrent_training_inputs_stay_on_the_towers_device():
    # A CUDA tower's batch tensors must not go through numpy (which cannot hold
    # them) nor land on the CPU; the meta device stands in for CUDA here.
    import gymnasium as gym
    import torch

    from flowrl.batch import SampleBatch as SB
    policy = PPOPolicy(gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2), seed=0,
                       model={"use_lstm": True, "fcnet_hiddens": [8], "lstm_cell_size": 4})
    policy.model.to("meta")
    meta = torch.device("meta")
    train = {SB.OBS: torch.zeros(2, 3, device=meta),
             SB.PREV_ACTIONS: torch.zeros(2, dtype=torch.int64, device=meta),
             SB.PREV_REWARDS: torch.zeros(2, device=meta),
             # one-step sequences: torch cannot pack meta tensors into longer ones
             "seq_lens": torch.ones(2, dtype=torch.int64)}
    for i, state in enumerate(policy.get_initial_state()):
        train[f"state_in_{i}"] = torch.zeros(2, *state.shape, device=meta)
    dist_inputs, values = policy.model_out(train)
    assert dist_inputs.device == meta and values.device == meta
    assert dist_inputs.shape == (2, 2)


def _vtrace_weights(batch, towers: int) -> dict:
    import torch

    from flowrl.ops.multi_gpu import set_towers
    from flowrl.policies import IMPALAPolicy
    from flowrl.workers import RolloutWorker

    worker = RolloutWorker("CartPole-v1", policy=IMPALAPolicy, seed=0)
    policy = worker.get_policy()
    set_towers(policy, [torch.device("cpu")] * towers)
    policy.learn_on_batch(batch, num_sgd_iter=2, sgd_minibatch_size=0)
    worker.stop()
    return policy.get_weights()


def test_towers_split_a_vtrace_batch_on_trajectory_boundaries():
    # One env, one 75-step fragment: an even split cuts an episode in two, and
    # V-trace would then cut that trace where single-tower training does not.
    from flowrl.ops.multi_gpu import set_towers
    from flowrl.policies import IMPALAPolicy
    from flowrl.workers import RolloutWorker

    worker = RolloutWorker("CartPole-v1", policy=IMPALAPolicy, rollout_fragment_length=75,
                           seed=0)
    batch = worker.sample()
    worker.stop()
    eps = batch["eps_id"]
    assert batch.count == 75 and eps[36] == eps[37] == eps[38]  # the even split falls mid-episode
    one, two = _vtrace_weights(batch, 1), _vtrace_weights(batch, 2)
    for k in one:
        np.testing.assert_allclose(two[k], one[k], rtol=0, atol=1e-6)
