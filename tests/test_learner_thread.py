"""LearnerThread: minibatch buffer, multi-tower loading, starvation, death and stop."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from flowrl.errors import ConfigError, FlowError
from flowrl.ops import LearnerThread
from flowrl.policies import A2CPolicy
from flowrl.workers import RolloutWorker


@pytest.fixture
def worker():
    w = RolloutWorker("CartPole-v1", policy=A2CPolicy, rollout_fragment_length=10, seed=0)
    yield w
    w.stop()


def _results(learner, n):
    return [learner.outqueue.get(timeout=60) for _ in range(n)]


def test_minibatch_buffer_visits_each_batch_num_sgd_iter_times(worker):
    learner = LearnerThread(worker, minibatch_buffer_size=2, num_sgd_iter=3)
    a, b = worker.sample(), worker.sample().slice(0, 7)
    learner.inqueue.put(("A", a))
    learner.inqueue.put(("B", b))
    learner.start()
    try:
        out = _results(learner, 6)
    finally:
        learner.stop()
    assert [(count, src) for count, _, src in out] == [(10, "A"), (7, "B")] * 3
    assert learner.num_steps == 6 and not learner.is_alive()
    assert "total_loss" in out[0][1]["default_policy"]


def test_learner_trains_the_local_worker(worker):
    before = worker.get_weights()["default_policy"]["pi.0.weight"].copy()
    learner = LearnerThread(worker)
    learner.start()
    learner.inqueue.put(worker.sample())
    _results(learner, 1)
    learner.stop()
    assert learner.weights_updated
    assert not np.array_equal(before, worker.get_weights()["default_policy"]["pi.0.weight"])


def test_multi_tower_parallel_load(worker):
    learner = LearnerThread(worker, num_gpus=2, num_data_loader_buffers=2,
                            minibatch_buffer_size=2, num_sgd_iter=2)
    assert learner.multi_tower and worker.get_policy().num_towers == 2
    learner.start()
    try:
        for _ in range(4):
            learner.inqueue.put(worker.sample())
        out = _results(learner, 8)
    finally:
        learner.stop()
    assert [c for c, _ in out] == [10] * 8
    assert not any(t.is_alive() for t in learner._loaders)


def test_bad_settings_name_the_field(worker):
    with pytest.raises(ConfigError, match=r"minibatch_buffer_size=4, num_data_loader_buffers=2"):
        LearnerThread(worker, num_data_loader_buffers=2, minibatch_buffer_size=4)
    with pytest.raises(ConfigError, match=r"learner_queue_timeout=0"):
        LearnerThread(worker, learner_queue_timeout=0)
    with pytest.raises(ConfigError, match=r"learner_queue_size=0"):
        LearnerThread(worker, learner_queue_size=0)


def test_starved_learner_fails_naming_thread_and_setting(worker):
    learner = LearnerThread(worker, learner_queue_timeout=0.2, name="starving")
    learner.start()
    learner.join(30)
    assert not learner.is_alive()
    with pytest.raises(FlowError, match=r"'starving'.*learner_queue_timeout=0.2"):
        learner.check()


def test_learner_that_dies_reports_why(worker):
    learner = LearnerThread(worker, name="broken")
    learner.start()
    learner.inqueue.put(worker.sample().with_columns(obs=np.zeros((10, 7), np.float32)))
    learner.join(30)
    with pytest.raises(FlowError, match=r"LearnerThread 'broken' died while training"):
        learner.check()


def test_stop_wakes_a_blocked_learner_at_once(worker):
    learner = LearnerThread(worker, num_data_loader_buffers=2, learner_queue_timeout=3600)
    learner.start()
    learner.stop(timeout=30)
    assert not learner.is_alive() and learner.check()
    assert not [t for t in threading.enumerate() if t.name.startswith("flowrl-learner")]
