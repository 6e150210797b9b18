"""DQN: n-step maths, the policy (double Q, dueling, Huber, epsilon), the plan,
checkpoints (in a fresh process), the CLI, and the seeds' synchronous-replay case."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import gymnasium as gym
import numpy as np
import pytest
import torch
from hypothesis import given, settings, strategies as st

import flowrl
from flowrl.algorithms import DQN, DQNConfig
from flowrl.algorithms.dqn import round_robin_weights
from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError
from flowrl.ops import (LearningStarts, ParallelRollouts, StoreToReplayBuffer,
                        TrainOneStep, UpdateReplayPriorities)
from flowrl.policies import DQNPolicy
from flowrl.policies.dqn import N_STEP_DISCOUNT, huber, n_step_transitions
from flowrl.replay import PrioritizedReplayBuffer
from flowrl.workers import RolloutWorker, WorkerSet, make_multi_agent

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
OBS, ACT = gym.spaces.Box(-1, 1, (3,)), gym.spaces.Discrete(2)


pytestmark = pytest.mark.usefixtures("one_torch_thread")


# -- n-step returns ----------------------------------------------------------------------
def _n_step_loop(r, term, trunc, n, gamma):
    T = len(r)
    out = []
    for t in range(T):
        ret, k, e = 0.0, 0, t
        while k < n and t + k < T:
            ret += gamma ** k * r[t + k]
            e = t + k
            k += 1
            if term[e] or trunc[e]:
                break
        out.append((ret, e, 0.0 if term[e] else gamma ** (e - t + 1)))
    return out


@settings(max_examples=40, deadline=None)
@given(rows=st.lists(st.tuples(st.floats(-5, 5), st.sampled_from(["", "term", "trunc"])),
                     min_size=1, max_size=25),
       n=st.integers(1, 5), gamma=st.sampled_from([0.0, 0.5, 0.9, 1.0]))
def test_n_step_transitions_match_a_plain_loop(rows, n, gamma):
    r = np.array([x for x, _ in rows])
    term = np.array([d == "term" for _, d in rows])
    trunc = np.array([d == "trunc" for _, d in rows])
    R, last, disc = n_step_transitions(r, term, trunc, n=n, gamma=gamma)
    for t, (ret, e, d) in enumerate(_n_step_loop(r, term, trunc, n, gamma)):
        assert R[t] == pytest.approx(ret, abs=1e-4)
        assert last[t] == e
        assert disc[t] == pytest.approx(d)


# -- the policy --------------------------------------------------------------------------
def _batch(policy, n=8, seed=0):
    rng = np.random.default_rng(seed)
    return SampleBatch(obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32),
                       actions=rng.integers(0, 2, n), rewards=rng.normal(size=n).astype(np.float32),
                       new_obs=rng.uniform(-1, 1, (n, 3)).astype(np.float32),
                       terminateds=rng.random(n) < 0.3,
                       **{N_STEP_DISCOUNT: np.full(n, 0.9, np.float32)})


@pytest.mark.parametrize("double_q", [True, False])
def test_td_error_is_q_minus_the_double_q_target(double_q):
    p = DQNPolicy(OBS, ACT, double_q=double_q, seed=0)
    p.learn_on_batch(_batch(p, seed=1))  # online and target now differ
    b = _batch(p, seed=2)
    with torch.no_grad():
        q = p.model(torch.tensor(b["obs"]))
        q_next = p.model(torch.tensor(b["new_obs"]))
        q_next_t = p.target_model(torch.tensor(b["new_obs"]))
    rows = np.arange(b.count)
    best = (q_next if double_q else q_next_t).numpy().argmax(1)
    y = b["rewards"] + 0.9 * q_next_t.numpy()[rows, best]
    np.testing.assert_allclose(p.compute_td_error(b), q.numpy()[rows, b["actions"]] - y,
                               rtol=1e-5, atol=1e-6)
    p.update_target()
    assert all(torch.equal(a, c) for a, c in zip(p.model.state_dict().values(),
                                                  p.target_model.state_dict().values()))


def test_dueling_advantages_are_centred_and_huber_is_huber():
    p = DQNPolicy(OBS, ACT, dueling=True, seed=0)
    x = torch.randn(5, 3)
    z = p.model.torso(x)
    a, v = p.model.advantage(z), p.model.value(z)
    np.testing.assert_allclose(p.model(x).detach(), (v + a - a.mean(1, keepdim=True)).detach())
    np.testing.assert_allclose(huber(torch.tensor([0.5, -3.0])).numpy(), [0.125, 2.5])
    assert DQNPolicy(OBS, ACT, dueling=False).model.value is None


def test_epsilon_schedule_set_epsilon_and_exploration_state():
    p = DQNPolicy(OBS, ACT, seed=0, exploration_config={"initial_epsilon": 1.0,
                                                      "final_epsilon": 0.1,
                                                      "epsilon_timesteps": 100})
    obs = np.zeros((50, 3), np.float32)
    assert p.cur_epsilon() == 1.0
    p.compute_actions(obs)
    assert p.cur_epsilon() == pytest.approx(0.55)
    p.compute_actions(obs)
    p.compute_actions(obs)
    assert p.cur_epsilon() == pytest.approx(0.1)
    greedy = p.compute_actions(obs, explore=False)[0]
    assert len(set(greedy.tolist())) == 1            # one observation, one greedy action
    p.set_epsilon(1.0)
    acts = np.concatenate([p.compute_actions(obs)[0] for _ in range(20)])
    assert 0.4 < acts.mean() < 0.6                   # uniform over two actions
    state = p.exploration_state()
    q = DQNPolicy(OBS, ACT, seed=5)
    q.set_exploration_state(state)
    q.set_weights(p.get_weights())
    assert q.cur_epsilon() == 1.0
    np.testing.assert_array_equal(q.compute_actions(obs)[0], p.compute_actions(obs)[0])
    with pytest.raises(ConfigError, match=r"set_epsilon\(1.5\)"):
        p.set_epsilon(1.5)
    with pytest.raises(ConfigError, match="Discrete action space"):
        DQNPolicy(OBS, gym.spaces.Box(-1, 1, (2,)))


def test_learning_reduces_the_td_error_on_a_fixed_batch():
    p = DQNPolicy(OBS, ACT, lr=1e-2, seed=0)
    b = _batch(p, n=32, seed=3)
    before = np.abs(p.compute_td_error(b)).mean()
    for _ in range(100):
        p.learn_on_batch(b)
    assert np.abs(p.compute_td_error(b)).mean() < 0.5 * before


# -- config and plan ----------------------------------------------------------------------
def test_config_checks():
    with pytest.raises(ConfigError, match=r"learning_starts=60000: must be <= buffer_size \(50000\)"):
        DQNConfig(env="CartPole-v1", learning_starts=60000)
    with pytest.raises(ConfigError, match=r"exploration_config has unknown keys \['eps'\]"):
        DQNConfig(env="CartPole-v1", exploration_config={"eps": 0.1})
    with pytest.raises(ConfigError, match=r"n_step=0"):
        DQNConfig(env="CartPole-v1", n_step=0)
    with pytest.raises(ConfigError, match=r"training_intensity=0"):
        DQNConfig(env="CartPole-v1", training_intensity=0)


def test_training_intensity_sets_the_concurrently_weights():
    cfg = DQNConfig(env="CartPole-v1", training_intensity=32, train_batch_size=32,
                    rollout_fragment_length=4, num_envs_per_worker=2)
    assert round_robin_weights(cfg) == [1, 8.0]       # natural: 32 / (4 * 2) = 4
    algo = DQN(cfg.replace(learning_starts=32, timesteps_per_iteration=64, seed=0))
    try:
        (node,) = [n for n in algo.plan.nodes if n.op == "concurrently"]
        assert algo.plan.node_id(node) == "dqn/concurrently"
        assert node.params["weights"] == [1, 8.0] and node.params["mode"] == "round_robin"
        r = algo.train()
        # trained rows / sampled rows after warm-up follows the intensity
        stored = r["timesteps_total"] - 32
        assert r["info"]["num_steps_trained"] == pytest.approx(32 * stored, rel=0.35)
    finally:
        algo.stop()


QUICK = dict(env="CartPole-v1", lr=1e-3, n_step=3, train_batch_size=64, learning_starts=1000,
             exploration_config={"epsilon_timesteps": 4000, "final_epsilon": 0.02},
             timesteps_per_iteration=2000, training_intensity=8, seed=0)


@pytest.mark.slow   # the default suite checks DQN's update on a bandit (test_learning_updates)
def test_dqn_learns_cartpole_quickly():
    """Clear progress (not the goal): random play scores about 20."""
    algo = DQN(DQNConfig(**QUICK))
    try:
        rewards = [algo.train()["episode_reward_mean"] for _ in range(4)]
    finally:
        algo.stop()
    assert rewards[-1] > 45 and rewards[-1] > rewards[0] + 20, rewards


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_dqn_reaches_450_on_cartpole():
    algo = DQN(DQNConfig(**QUICK))
    try:
        for _ in range(150):
            if algo.train()["episode_reward_mean"] >= 450:
                return
        pytest.fail(f"DQN stayed below 450: {algo.last_result['episode_reward_mean']}")
    finally:
        algo.stop()


# -- checkpoints --------------------------------------------------------------------------
RESTORE = textwrap.dedent("""
    import json, sys
    import numpy as np
    from flowrl.algorithms import DQN, DQNConfig
    algo = DQN(DQNConfig(env="CartPole-v1", learning_starts=64, timesteps_per_iteration=128,
                         checkpoint_replay_buffer=True, seed=7))
    algo.restore(sys.argv[1])
    p = algo.get_policy()
    s = algo.local_replay_buffer.sample(16)
    print(json.dumps({"entries": len(algo.local_replay_buffer), "timesteps": p.timesteps,
                      "eps": p.cur_epsilon(), "rows": s["batch_row_ids"].tolist(),
                      "steps": algo.metrics.counters["num_steps_sampled"]}))
    algo.stop()
""")


def test_save_restore_keeps_exploration_and_the_buffer_in_a_fresh_process(tmp_path):
    algo = DQN(DQNConfig(env="CartPole-v1", learning_starts=64, timesteps_per_iteration=128,
                         checkpoint_replay_buffer=True, seed=0))
    try:
        algo.train()
        algo.train()
        algo.save(str(tmp_path / "ckpt"))
        p = algo.get_policy()
        expect = {"entries": len(algo.local_replay_buffer), "timesteps": p.timesteps,
                  "eps": p.cur_epsilon(),
                  "rows": algo.local_replay_buffer.sample(16)["batch_row_ids"].tolist(),
                  "steps": algo.metrics.counters["num_steps_sampled"]}
    finally:
        algo.stop()
    assert expect["timesteps"] > 0 and expect["entries"] > 0
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([ROOT, os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", RESTORE, str(tmp_path / "ckpt")], env=env,
                         capture_output=True, text=True, timeout=120, check=True).stdout
    assert json.loads(out.strip().splitlines()[-1]) == expect


def test_without_checkpoint_replay_buffer_the_buffer_stays_out(tmp_path):
    from flowrl import checkpoint
    algo = DQN(DQNConfig(env="CartPole-v1", learning_starts=32, timesteps_per_iteration=64,
                         seed=0))
    try:
        algo.train()
        extra = checkpoint.read_checkpoint(algo.save(str(tmp_path / "c")))["extra"]
    finally:
        algo.stop()
    index, states = extra["exploration"][0]
    assert "replay_buffer" not in extra and index == 0
    assert states["default_policy"]["timesteps"] > 0


def test_cli_trains_dqn(tmp_path):
    from flowrl.cli import main
    assert main(["train", "dqn", "--env", "CartPole-v1", "--stop-iters", "1", "--run-dir",
                 str(tmp_path), "--seed", "0", "--quiet"]) == 0
    (run_dir,) = list(tmp_path.iterdir())
    (line,) = (run_dir / "result.jsonl").read_text().splitlines()
    r = json.loads(line)
    assert r["timesteps_total"] >= 1000 and r["info"]["num_steps_trained"] > 0


# -- the seeds' synchronous replay optimizer case, ported ------------------------------------
def test_seed_sync_replay_two_dqn_policies_on_multi_cartpole():
    """The seeds' SyncReplayOptimizer case: two DQN policies (gamma 0.95, 3-step) on
    3-agent CartPole, one replay buffer per policy, one 32-row SGD step per 50-step
    fragment once 1000 steps are stored, epsilon annealed by hand, targets updated
    every 20 iterations; done when an iteration's episodes average 25 per agent.

    As in the seed, the result is the mean over the episodes that ended in that
    iteration (RLlib 1.x's ``collect_metrics``), a low bar (random play sums about
    22 per agent); the learning checks are the DQN tests above."""
    n = 3
    worker = RolloutWorker(make_multi_agent("CartPole-v1", n),
                           policies={pid: _spec(DQNPolicy, {"gamma": 0.95, "n_step": 3})
                                     for pid in ("p1", "p2")},
                           policy_mapping_fn=lambda agent_id: ["p1", "p2"][agent_id % 2],
                           rollout_fragment_length=50, seed=0)
    workers = WorkerSet.from_existing(worker, [])
    buffers = {pid: PrioritizedReplayBuffer(10000, seed=0) for pid in ("p1", "p2")}
    store = StoreToReplayBuffer(local_buffer=buffers)
    # Before learning starts a step only samples and stores; afterwards it also trains.
    warm = LearningStarts(store, learning_starts=1000)
    replay = iter(_replay_batches(buffers))
    train = TrainOneStep(workers)
    update = UpdateReplayPriorities(workers, local_buffer=buffers)

    def step(batch):
        if warm(batch):
            update(train(next(replay)))
        return batch

    run = flowrl.Plan(ParallelRollouts(workers).for_each(store).for_each(step)).compile(seed=0)
    try:
        for i in range(200):
            worker.foreach_policy(lambda p, _: p.set_epsilon(max(0.02, 1 - i * .02))
                                  if isinstance(p, DQNPolicy) else None)
            next(run)
            episodes = worker.episode_stats()
            if i % 20 == 0:
                worker.foreach_policy(lambda p, _: p.update_target()
                                      if isinstance(p, DQNPolicy) else None)
            if episodes and np.mean([e["episode_reward"] for e in episodes]) >= 25 * n:
                break
        else:
            pytest.fail("failed to improve reward")
        assert run.metrics.counters["num_steps_sampled"] == 50 * (i + 1)
    finally:
        run.stop()
        worker.stop()
    assert {"p1", "p2"} <= set(episodes[-1]["policy_rewards"])
    assert all(len(b) > 0 for b in buffers.values())


def _replay_batches(buffers):
    from flowrl.batch import MultiAgentBatch
    while True:
        yield MultiAgentBatch({pid: b.sample(32) for pid, b in buffers.items()}, 32)


@pytest.mark.slow
@pytest.mark.timeout(1800)
def test_multi_agent_dqn_learns():
    algo = DQN(DQNConfig(**{**QUICK, "env": make_multi_agent("CartPole-v1", 2),
                            "multiagent": {"policies": {"p1": None, "p2": None},
                                           "policy_mapping_fn": lambda a: ["p1", "p2"][a % 2]}}))
    try:
        for _ in range(30):
            if algo.train()["episode_reward_mean"] >= 300:  # two agents
                break
        else:
            pytest.fail(f"stayed at {algo.last_result['episode_reward_mean']}")
        assert sorted(algo.local_replay_buffer) == ["p1", "p2"]
    finally:
        algo.stop()


def _spec(cls, config):
    from flowrl.workers import PolicySpec
    return PolicySpec(cls, config=config)


def test_exploration_states_are_restored_by_worker_index_not_position():
    from flowrl.algorithms.dqn import indexed_exploration_states, restore_exploration
    from flowrl.workers import WorkerConfig
    ws = WorkerSet("CartPole-v1", DQNPolicy, WorkerConfig(), num_workers=2, backend="local")
    try:
        for w, eps in zip([ws.local_worker(), *ws.remote_workers()], [0.1, 0.2, 0.3]):
            w.get_policy().set_epsilon(eps)
        saved = ws.foreach_worker(indexed_exploration_states)
        assert [idx for idx, _ in saved] == [0, 1, 2]
        for w in [ws.local_worker(), *ws.remote_workers()]:
            w.get_policy().set_epsilon(None)
        # a restored set may list its workers in another order (restarts, a dropped one)
        restore_exploration(ws, list(reversed(saved)))
        got = {w.worker_index: w.get_policy().fixed_epsilon
               for w in [ws.local_worker(), *ws.remote_workers()]}
        assert got == {0: 0.1, 1: 0.2, 2: 0.3}
        # a worker missing from the checkpoint keeps its own state
        ws.remote_workers()[1].get_policy().set_epsilon(0.9)
        restore_exploration(ws, saved[:2])
        assert ws.remote_workers()[1].get_policy().fixed_epsilon == 0.9
    finally:
        ws.stop()


@pytest.mark.parametrize("n_step", [1, 3])
def test_pong_trains_alike_with_frames_stored_once_or_whole(monkeypatch, n_step):
    # The replay buffer's frame store only saves memory: DQN on Pong (n-step rows
    # from two envs taking turns, prioritized) learns the same weights either way.
    pytest.importorskip("ale_py")
    import flowrl.replay.buffers as buffers

    def train() -> tuple[list[np.ndarray], dict]:
        algo = DQN(DQNConfig(env="ALE/Pong-v5", seed=0, n_step=n_step, num_envs_per_worker=2,
                             rollout_fragment_length=20, prioritized_replay=True,
                             learning_starts=200, timesteps_per_iteration=400,
                             train_batch_size=16, buffer_size=1000, hiddens=[32],
                             model={"conv_filters": [[8, 8, 4], [8, 4, 2]]}))
        try:
            for _ in range(2):
                algo.train()
            (weights,) = algo.workers.local_worker().get_weights().values()
            return [weights[k] for k in sorted(weights)], algo.local_replay_buffer.stats()
        finally:
            algo.stop()

    once, once_stats = train()
    monkeypatch.setattr(buffers, "holds_frame_stacks", lambda obs, new_obs: False)
    whole, whole_stats = train()
    assert once_stats["num_sampled"] == whole_stats["num_sampled"] >= 10 * 16  # 10+ updates
    assert once_stats["bytes_per_row"] < whole_stats["bytes_per_row"] / 3
    for a, b in zip(once, whole):
        np.testing.assert_array_equal(a, b)
