"""RolloutWorker: batch layout, episode boundaries, bootstrapping, seeding, training API."""

from __future__ import annotations

import gymnasium as gym
import numpy as np
import pytest

from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError
from flowrl.policies import A2CPolicy, PGPolicy, PPOPolicy
from flowrl.workers import PolicySpec, RolloutWorker, make_multi_agent

SB = SampleBatch


#: A2C with ``new_obs`` kept in its batches (A2C itself bootstraps from
#: ``bootstrap_value`` and leaves it out), so these tests can read the transitions.
A2CKeepingNewObs = type("A2CKeepingNewObs", (A2CPolicy,), {"trains_on_new_obs": True})


def make_worker(**kwargs):
    defaults = dict(policy=A2CKeepingNewObs, num_envs=3, rollout_fragment_length=40, seed=0)
    return RolloutWorker("CartPole-v1", **{**defaults, **kwargs})


def env_trajectories(batch, num_envs, T):
    return [batch[i * T:(i + 1) * T] for i in range(num_envs)]


def test_sample_size_and_columns():
    w = make_worker()
    b = w.sample()
    assert isinstance(b, SampleBatch) and b.count == 3 * 40
    assert {SB.OBS, SB.NEXT_OBS, SB.ACTIONS, SB.REWARDS, SB.TERMINATEDS, SB.TRUNCATEDS,
            SB.EPS_ID, SB.T, SB.AGENT_INDEX, SB.ACTION_LOGP, SB.VF_PREDS,
            SB.ACTION_DIST_INPUTS, SB.ADVANTAGES, SB.VALUE_TARGETS} <= set(b)
    assert all(v.flags.c_contiguous for v in b.values())
    w.stop()
    plain = make_worker(policy=A2CPolicy)
    assert set(plain.sample()) == set(b) - {SB.NEXT_OBS}
    plain.stop()


def test_no_transition_crosses_an_episode_boundary():
    T = 120
    w = make_worker(rollout_fragment_length=T)
    b = w.sample()
    seen_done = 0
    for traj in env_trajectories(b, 3, T):
        done = traj[SB.TERMINATEDS] | traj[SB.TRUNCATEDS]
        for t in range(T - 1):
            if done[t]:
                seen_done += 1
                assert traj[SB.EPS_ID][t + 1] != traj[SB.EPS_ID][t]
                assert traj[SB.T][t + 1] == 0
                # new_obs is the real final state: CartPole ends outside its bounds
                # (12 degrees: 0.20944 rad)
                x, theta = traj[SB.NEXT_OBS][t][0], traj[SB.NEXT_OBS][t][2]
                assert abs(x) > 2.4 or abs(theta) > 12 * 2 * np.pi / 360
            else:
                np.testing.assert_array_equal(traj[SB.NEXT_OBS][t], traj[SB.OBS][t + 1])
                assert traj[SB.EPS_ID][t + 1] == traj[SB.EPS_ID][t]
                assert traj[SB.T][t + 1] == traj[SB.T][t] + 1
    assert seen_done > 0  # random CartPole episodes are short
    # the next fragment continues where this one stopped
    b2 = w.sample()
    last = b[T - 1:T]
    if not (last[SB.TERMINATEDS][0] or last[SB.TRUNCATEDS][0]):
        np.testing.assert_array_equal(b2[SB.OBS][0], last[SB.NEXT_OBS][0])
        assert b2[SB.EPS_ID][0] == last[SB.EPS_ID][0]


def test_truncation_and_fragment_end_bootstrap_from_value():
    gamma = 0.9
    w = make_worker(env_config={"max_episode_steps": 4}, rollout_fragment_length=10,
                    policy_config={"gamma": gamma, "lambda_": 0.95})
    b = w.sample()
    policy = w.get_policy()
    trunc = b[SB.TRUNCATEDS] & ~b[SB.TERMINATEDS]
    assert trunc.any()
    v_final = policy.value(b[SB.NEXT_OBS][trunc])
    np.testing.assert_allclose(b[SB.BOOTSTRAP_VALUE][trunc], v_final, rtol=1e-5)
    # the last step of a truncated episode: target = r + γ V(final obs)
    np.testing.assert_allclose(b[SB.VALUE_TARGETS][trunc],
                               b[SB.REWARDS][trunc] + gamma * v_final, rtol=1e-5)
    # a trajectory cut by the fragment bootstraps from V(s_T)
    for traj in env_trajectories(b, 3, 10):
        if not (traj[SB.TERMINATEDS][-1] or traj[SB.TRUNCATEDS][-1]):
            v_next = policy.value(traj[SB.NEXT_OBS][-1:])[0]
            assert traj[SB.VALUE_TARGETS][-1] == pytest.approx(traj[SB.REWARDS][-1] + gamma * v_next, rel=1e-5)


def test_episode_stats_match_the_batch_and_drain():
    w = make_worker(rollout_fragment_length=100)
    b = w.sample()
    stats = w.episode_stats()
    done = b[SB.TERMINATEDS] | b[SB.TRUNCATEDS]
    assert len(stats) == int(done.sum()) > 0
    # episodes that started inside this fragment: the length is t + 1 at the done row
    lengths = sorted((b[SB.T][done] + 1).tolist())
    assert sorted(s["episode_len"] for s in stats) == lengths
    assert all(s["episode_reward"] == s["episode_len"] for s in stats)  # CartPole: +1 per step
    assert w.episode_stats() == []


def test_seeding_is_deterministic_and_differs_per_worker():
    a, b = make_worker(seed=5), make_worker(seed=5)
    c = make_worker(seed=5, worker_index=1)
    sa, sb, sc = a.sample(), b.sample(), c.sample()
    for k in sa:
        np.testing.assert_array_equal(sa[k], sb[k])
    assert not np.array_equal(sa[SB.OBS], sc[SB.OBS])
    assert sc[SB.EPS_ID].min() >= 1 << 32  # episode ids are unique across workers


def test_box_action_space_is_clipped_for_the_env_only():
    w = RolloutWorker("Pendulum-v1", policy=PPOPolicy, policy_config={"hidden_sizes": (16,)},
                      num_envs=2, rollout_fragment_length=8, seed=0)
    b = w.sample()
    assert b[SB.ACTIONS].shape == (16, 1) and b[SB.ACTIONS].dtype == np.float32
    assert b[SB.ACTION_DIST_INPUTS].shape == (16, 2)
    w.stop()


def test_training_api_round_trips():
    w = make_worker(policy=PPOPolicy, policy_config={"num_sgd_iter": 2, "sgd_minibatch_size": 32})
    b = w.sample()
    stats = w.learn_on_batch(b)
    assert list(stats) == ["default_policy"] and "kl" in stats["default_policy"]
    grads, gstats = w.compute_gradients(b)
    assert list(grads) == ["default_policy"] and "total_loss" in gstats["default_policy"]
    before = w.get_weights()["default_policy"]
    w.apply_gradients(grads)
    after = w.get_weights()["default_policy"]
    assert any(not np.array_equal(before[k], after[k]) for k in before)
    other = make_worker(policy=PPOPolicy, seed=1)
    other.set_weights(w.get_weights())
    obs = b[SB.OBS][:5]
    np.testing.assert_array_equal(other.get_policy().value(obs), w.get_policy().value(obs))
    other.set_state(w.get_state())
    assert other.foreach_policy(lambda p, pid: (pid, p.kl_coeff)) == [("default_policy", w.get_policy().kl_coeff)]
    assert w.apply(lambda worker, x: worker.worker_index + x, 1) == 1


def test_shard_items_feed_the_shard_host_protocol():
    w = make_worker(num_envs=1, rollout_fragment_length=5)
    w.flowrl_install("run", lambda items: (b.count for b in items))
    assert w.flowrl_pull("run", 3) == ([5, 5, 5], False)
    w.flowrl_uninstall("run")


def test_multi_agent_sampling_and_training():
    w = RolloutWorker(make_multi_agent("CartPole-v1", 3),
                      policies={"a": PolicySpec(A2CPolicy, config={"lr": 1e-3}), "b": PGPolicy},
                      policy_mapping_fn=lambda agent: "a" if agent < 2 else "b",
                      policies_to_train=["a"], num_envs=2, rollout_fragment_length=30, seed=0)
    mb = w.sample()
    assert isinstance(mb, MultiAgentBatch) and mb.env_steps() == 60
    assert set(mb.policy_batches) == {"a", "b"}
    a = mb.policy_batches["a"]
    assert set(np.unique(a[SB.AGENT_INDEX]).tolist()) == {0, 1}
    assert mb.agent_steps() == sum(b.count for b in mb.policy_batches.values()) > 60
    # rows of one agent's trajectory are consecutive; no transition crosses its end
    same = (a[SB.EPS_ID][1:] == a[SB.EPS_ID][:-1]) & (a[SB.AGENT_INDEX][1:] == a[SB.AGENT_INDEX][:-1])
    cont = same & ~(a[SB.TERMINATEDS] | a[SB.TRUNCATEDS])[:-1]
    assert cont.any()
    np.testing.assert_array_equal(a[SB.NEXT_OBS][:-1][cont], a[SB.OBS][1:][cont])
    assert np.all(np.diff(a[SB.T])[same] == 1)
    b_before = w.get_weights(["b"])["b"]
    stats = w.learn_on_batch(mb)
    assert list(stats) == ["a"]
    b_after = w.get_weights(["b"])["b"]
    assert all(np.array_equal(b_before[k], b_after[k]) for k in b_before)
    assert all("policy_rewards" in s for s in w.episode_stats())


def test_config_errors():
    with pytest.raises(ConfigError, match="exactly one of policy="):
        RolloutWorker("CartPole-v1")
    with pytest.raises(ConfigError, match="num_envs=0"):
        RolloutWorker("CartPole-v1", policy=PGPolicy, num_envs=0)
    with pytest.raises(ConfigError, match="unknown policy ids \\['nope'\\]"):
        RolloutWorker("CartPole-v1", policy=PGPolicy, policies_to_train=["nope"])
    with pytest.raises(ConfigError, match="not in policies"):
        RolloutWorker(make_multi_agent("CartPole-v1", 2), policies={"a": PGPolicy, "b": PGPolicy},
                      policy_mapping_fn=lambda agent: "c")
    with pytest.raises(ConfigError, match="env must be a registered gymnasium id"):
        RolloutWorker(3, policy=PGPolicy)


def test_env_creator_receives_env_config():
    seen = {}

    def creator(cfg):
        seen.update(cfg)
        return gym.make("CartPole-v1")

    RolloutWorker(creator, env_config={"k": 1}, policy=PGPolicy, rollout_fragment_length=2).sample()
    assert seen == {"k": 1}


@pytest.mark.ray
def test_worker_runs_as_a_ray_actor(ray_session):
    ray = ray_session
    actor = ray.remote(RolloutWorker).remote("CartPole-v1", policy=PGPolicy, num_envs=2,
                                            rollout_fragment_length=10, seed=0, worker_index=1)
    try:
        batch = ray.get(actor.sample.remote())
        assert batch.count == 20
        local = RolloutWorker("CartPole-v1", policy=PGPolicy, num_envs=2,
                              rollout_fragment_length=10, seed=0, worker_index=1)
        np.testing.assert_array_equal(batch[SB.OBS], local.sample()[SB.OBS])
    finally:
        ray.kill(actor)
