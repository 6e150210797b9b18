"""Ape-X: per-worker epsilons, replay actors, learner thread, priorities flowing back,
weight syncs, checkpoints, failures (a dead learner, a killed replay actor)."""

from __future__ import annotations

import numpy as np
import pytest

from flowrl.algorithms import ApeX, ApeXConfig
from flowrl.algorithms.apex import apex_epsilon, apex_weights
from flowrl.errors import ConfigError, FlowError, OperatorError, WorkerError

SMALL = dict(env="CartPole-v1", learning_starts=100, timesteps_per_iteration=600,
             rollout_fragment_length=25, train_batch_size=64, buffer_size=4000,
             max_weight_sync_delay=100, seed=0)


def test_epsilons_follow_the_apex_schedule():
    eps = [apex_epsilon(i, 8) for i in range(8)]
    assert eps[0] == pytest.approx(0.4) and eps[-1] == pytest.approx(0.4 ** 8)
    assert all(a > b for a, b in zip(eps, eps[1:]))
    assert apex_epsilon(0, 1) == 0.4
    assert apex_weights(ApeXConfig(env="CartPole-v1", training_intensity=20.48)) == [1, 4, 4]


def test_config_checks():
    with pytest.raises(ConfigError, match=r"learning_starts=3000: must be <= buffer_size / "
                                          r"num_replay_buffer_shards \(2000\)"):
        ApeXConfig(env="CartPole-v1", buffer_size=4000, learning_starts=3000)
    with pytest.raises(ConfigError, match="max_weight_sync_delay=0"):
        ApeXConfig(env="CartPole-v1", max_weight_sync_delay=0)
    with pytest.raises(ConfigError, match="Ape-X samples on remote workers"):
        ApeXConfig(**{**SMALL, "num_workers": 0})


def test_eight_workers_in_process_train_and_send_priorities_back(tmp_path):
    algo = ApeX(ApeXConfig(**SMALL, num_workers=8, checkpoint_replay_buffer=True))
    try:
        r = algo.train()
        r = algo.train()
        info = r["info"]
        assert r["timesteps_total"] >= 1200 and info["num_steps_trained"] > 0
        assert info["num_weight_broadcasts"] > 0
        # each remote worker explores with its own constant epsilon
        eps = [w.get_policy().cur_epsilon() for w in algo.workers.remote_workers()]
        assert eps == pytest.approx([apex_epsilon(i, 8) for i in range(8)])
        # worker-side priorities arrived with the rows; learner TD errors came back
        stats = [a.stats() for a in algo.replay_actors]
        assert all(s["num_entries"] > 0 for s in stats)
        assert sum(s["num_priority_updates"] for s in stats) == info["num_priority_updates"] > 0
        assert all(s["max_priority"] != 1.0 for s in stats)
        path = algo.save(str(tmp_path / "ckpt"))
        saved = [a.get_state() for a in algo.replay_actors]
    finally:
        algo.stop()
    again = ApeX(ApeXConfig(**SMALL, num_workers=8, checkpoint_replay_buffer=True))
    try:
        again.restore(path)
        for a, s in zip(again.replay_actors, saved):
            np.testing.assert_array_equal(a.get_state()["priorities"], s["priorities"])
            assert a.stats()["num_entries"] == len(s["row_ids"])
        assert again.workers.remote_workers()[3].get_policy().cur_epsilon() == \
            pytest.approx(apex_epsilon(3, 8))
    finally:
        again.stop()


def test_a_dead_learner_thread_fails_the_run_naming_it():
    algo = ApeX(ApeXConfig(**SMALL, num_workers=2))
    try:
        def broken(batch, **kwargs):
            raise RuntimeError("boom")
        algo.get_policy().learn_on_batch = broken
        with pytest.raises(FlowError, match=r"LearnerThread 'apex-learner' died while "
                                            "training: RuntimeError: boom"):
            algo.train()
    finally:
        algo.stop()


@pytest.mark.ray
def test_apex_on_ray_and_a_killed_replay_actor(ray_session):
    ray = ray_session
    algo = ApeX(ApeXConfig(**SMALL, num_workers=2, backend="ray"))
    try:
        r = algo.train()
        assert r["info"]["num_steps_trained"] > 0
        stats = ray.get([a.stats.remote() for a in algo.replay_actors])
        assert sum(s["num_priority_updates"] for s in stats) > 0
        ray.kill(algo.replay_actors[1])
        with pytest.raises(FlowError) as info:
            for _ in range(20):
                algo.train()
        err = info.value.__cause__ if isinstance(info.value, OperatorError) else info.value
        assert isinstance(err, WorkerError)
        assert "apex/replay[1]" in str(err) or "replay actor 1 of 2" in str(err)
    finally:
        algo.stop()


@pytest.mark.slow
@pytest.mark.timeout(1800)
@pytest.mark.ray
def test_apex_runs_with_eight_ray_workers_on_two_cores(ray_session):
    algo = ApeX(ApeXConfig(**{**SMALL, "timesteps_per_iteration": 2000}, num_workers=8,
                           backend="ray"))
    try:
        results = [algo.train() for _ in range(5)]
        assert results[-1]["info"]["num_steps_trained"] > 0
        assert results[-1]["info"]["num_weight_broadcasts"] >= 8
    finally:
        algo.stop()


@pytest.mark.slow
def test_cli_trains_apex(tmp_path):
    from flowrl.cli import main
    assert main(["train", "apex", "--env", "CartPole-v1", "--num-workers", "2",
                 "--stop-iters", "1", "--run-dir", str(tmp_path), "--quiet"]) == 0
