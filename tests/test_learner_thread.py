"""LearnerThread: minibatch buffer, multi-tower loading, starvation, death and stop."""

from __future__ import annotations

import threading
import time

import numpy as np
import pytest

import flowrl
from flowrl.algorithms import IMPALA, IMPALAConfig
from flowrl.errors import ConfigError, FlowError
from flowrl.ops import Dequeue, LearnerThread
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


def test_driver_pausing_between_train_calls_does_not_starve_the_learner():
    # The driver stops calling train() for several learner_queue_timeouts (an
    # evaluation, a debugger pause): nothing is being waited for, so no error.
    timeout = 1.0
    algo = IMPALA(IMPALAConfig(env="CartPole-v1", num_workers=1, backend="local", seed=0,
                               rollout_fragment_length=20, train_batch_size=40,
                               learner_queue_timeout=timeout))
    try:
        algo.train()
        time.sleep(3 * timeout)   # test_idle_clock_stops... pauses twice, on the run itself
        assert algo.learner_thread.is_alive(), algo.learner_thread.error
        result = algo.train()
        assert result["info"]["num_steps_trained"] > 0
    finally:
        algo.stop()


def test_a_driver_waiting_on_a_starved_learner_still_fails_naming_it(worker):
    learner = LearnerThread(worker, learner_queue_timeout=0.3, name="starving")
    label = "learner thread 'starving' (learner_queue_timeout=0.3)"
    learner.start()
    try:
        run = flowrl.Plan(Dequeue(learner.outqueue, check=learner.check, label=label)).compile()
        with pytest.raises(FlowError, match=r"LearnerThread 'starving': no train batch arrived "
                                            r"for learner_queue_timeout=0.3 s while the driver "
                                            r"ran the plan"):
            run.take(1)   # the driver waits on the learner, which waits on an empty queue
        assert not learner.is_alive()
    finally:
        learner.stop()


def test_idle_clock_stops_while_the_run_is_not_driven(worker):
    # The run's driver takes one result, then pauses far beyond the timeout with the
    # learner's queue empty; its next wait finds the learner alive and fed.
    learner = LearnerThread(worker, learner_queue_timeout=1.0, name="paused")
    results = Dequeue(learner.outqueue, check=learner.check, label="learner 'paused'")
    with flowrl.Plan(results).compile() as run:
        learner.start()
        for _ in range(2):
            feeder = threading.Timer(0.2, learner.inqueue.put, (worker.sample(),))
            feeder.start()   # the batch arrives while the driver waits, not before
            assert run.take(1)[0][0] == 10
            feeder.join()
            time.sleep(2.5)  # the driver does not call the run: the queue stays empty
            assert learner.is_alive(), learner.error
    learner.stop()
    assert learner.check()


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


def test_latest_weights_never_wait_for_the_update_in_progress(worker):
    """A weight broadcast reads the weights of the last finished update while the
    learner is inside the next one (holding its lock): the driver never stalls on
    SGD, so the samplers it feeds keep sampling."""
    entered, release = threading.Event(), threading.Event()
    policy = worker.get_policy()
    learn = policy.learn_on_batch

    def slow_learn(*args, **kwargs):
        out = learn(*args, **kwargs)
        if learner.num_steps >= 1:   # the second update blocks until released
            entered.set()
            assert release.wait(60)
        return out

    policy.learn_on_batch = slow_learn
    learner = LearnerThread(worker)
    before = learner.latest_weights()["default_policy"]["pi.0.weight"].copy()
    learner.start()
    try:
        learner.inqueue.put(worker.sample())
        _results(learner, 1)
        after_first = worker.get_weights()["default_policy"]["pi.0.weight"].copy()
        learner.inqueue.put(worker.sample())
        assert entered.wait(60)          # update 2 runs and holds the lock
        assert learner.lock.locked()
        snapshot = learner.latest_weights()["default_policy"]["pi.0.weight"]
        # a read that took the lock could only return once update 2 let it go, which
        # it does only after `release` (set below) or its 60 s wait failing
        assert learner.lock.locked() and learner.num_steps == 1
        assert np.array_equal(snapshot, after_first) and not np.array_equal(snapshot, before)
        release.set()
        _results(learner, 1)
        newest = learner.latest_weights()["default_policy"]["pi.0.weight"]
        assert not np.array_equal(newest, after_first)
        assert np.array_equal(newest, worker.get_weights()["default_policy"]["pi.0.weight"])
        learner.weights_changed()        # e.g. a restore set new weights
        assert learner.weights_updated
    finally:
        release.set()
        learner.stop()
