"""Calls to workers through the backend's interface: bounded waits on really stuck
or killed actors, one restart counter (through checkpoints), the WorkerSet's units."""

from __future__ import annotations

import dataclasses
import os
import time

import pytest
from ray_helpers import kill

import flowrl
from flowrl.algorithms.ppo import PPO, PPOConfig
from flowrl.errors import WorkerError
from flowrl.metrics import MetricsContext
from flowrl.ops import CollectMetrics, ParallelRollouts, collect_metrics
from flowrl.policies import PGPolicy
from flowrl.runtime.backend import lost_reason
from flowrl.runtime.calls import IN_PROCESS, PendingCalls, calls_for
from flowrl.workers import WorkerConfig, WorkerSet

SMALL = dict(rollout_fragment_length=8, num_cpus_per_worker=0, seed=0)




def _hang(worker):
    time.sleep(3600)


# -- in-process: the interface and the units, against literal expected states ---------

def test_in_process_calls_run_at_once_and_raise_at_the_call():
    log = []
    p = IN_PROCESS.call(log, "append", 1)
    assert log == [1] and IN_PROCESS.wait([p], 0) == [p]
    assert IN_PROCESS.get(p, timeout=0, label="x", setting="s") is None
    with pytest.raises(ZeroDivisionError):
        IN_PROCESS.call(1, "__truediv__", 0)
    assert calls_for(object()) is IN_PROCESS


def test_pending_calls_take_finished_and_overdue_calls_in_order():
    pending = PendingCalls(IN_PROCESS)
    pending.add("a", IN_PROCESS.call([], "append", 0), "list a")
    pending.add("b", IN_PROCESS.call([], "append", 1), "list b")
    assert pending.oldest() == "a"
    assert pending.finished() == [("a", None), ("b", None)] and len(pending) == 0
    pending.add("c", IN_PROCESS.call([], "append", 2), "list c")
    assert pending.overdue(lambda key: 3600.0) == [] and len(pending) == 1
    assert pending.overdue() == ["c"] and len(pending) == 0


def test_recovery_decides_counts_and_reports_to_one_counter():
    ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(**SMALL, max_worker_restarts=2),
                   num_workers=3, backend="local")
    try:
        recovery, old = ws.recovery, ws.host(1)
        new = recovery.replace(1, old, "died", lost=2)
        assert new is ws.host(1) and new is not old and ws.worker_indices() == [1, 2, 3]
        assert recovery.replace(1, old, "died") is new       # found again: one replacement
        assert (recovery.num_restarts, recovery.num_dropped, recovery.per_key) == (1, 0, {1: 1})
        assert dict(recovery.metrics.counters) == {"num_lost_requests": 2,
                                                   "num_worker_restarts": 1}
        assert set(ws.starts.fresh) == {1} and ws.starts.still_starting() == set()
        metrics = MetricsContext()
        metrics.counters["num_worker_restarts"] = 5          # restored from a checkpoint
        recovery.count_in(metrics)
        assert metrics.counters["num_worker_restarts"] == 6 and ws.num_restarts == 6
        recovery.count_in(metrics)                           # binding twice adds nothing
        assert metrics.counters["num_worker_restarts"] == 6
        with pytest.raises(WorkerError, match=r"remote worker 3 was lost \(died\) after 6 "
                                              r"restart\(s\): max_worker_restarts=2 is used up"):
            recovery.replace(3, ws.host(3), "died")
    finally:
        ws.stop()
    dropping = WorkerSet("CartPole-v1", PGPolicy,
                         WorkerConfig(**SMALL, ignore_worker_failures=True),
                         num_workers=2, backend="local")
    try:
        lost = dropping.host(1)
        assert dropping.recovery.replace(1, lost, "died") is None
        assert dropping.recovery.replace(1, lost, "died") is None   # dropped already
        assert dropping.worker_indices() == [2] and dropping.host(1) is None
        assert (dropping.num_restarts, dropping.num_dropped) == (0, 1)
    finally:
        dropping.stop()
    strict = WorkerSet("CartPole-v1", PGPolicy,
                       WorkerConfig(**SMALL, recreate_failed_workers=False),
                       num_workers=1, backend="local")
    try:
        assert not strict.tolerates_failures and strict.restarter() is None
    finally:
        strict.stop()


def test_a_restart_is_one_counter_in_the_results():
    ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(**SMALL), num_workers=2,
                   backend="local")
    try:
        old = ws.remote_workers()[0]
        new = ws.restart_worker(1, reason="requested")
        assert new is not old and ws.worker_indices() == [1, 2] and ws.num_restarts == 1
        run = flowrl.Plan(ParallelRollouts(ws).for_each(CollectMetrics(ws))).compile()
        r = next(run)
        run.stop()
        # the result, the run's counter and the set read one number
        assert r["num_worker_restarts"] == r["info"]["num_worker_restarts"] == 1
        assert run.metrics.counters["num_worker_restarts"] == 1 and ws.num_restarts == 1
    finally:
        ws.stop()


# -- Ray: bounded waits on really stuck and really killed actors ------------------------

@pytest.mark.ray
def test_foreach_remote_worker_is_bounded(ray_session):
    ws = WorkerSet("CartPole-v1", PGPolicy,
                   WorkerConfig(**SMALL, sample_timeout_s=1.0, recreate_failed_workers=False),
                   num_workers=2, backend="ray")
    try:
        assert ws.foreach_remote_worker(lambda w: w.worker_index) == [1, 2]
        ws.remote_workers()[1].apply.remote(_hang)             # really stuck
        with pytest.raises(WorkerError, match=r"foreach_remote_worker: remote worker 2 \(a Ray "
                                              r"actor\) not answered within 1 s "
                                              r"\(sample_timeout_s\)"):
            ws.foreach_remote_worker(lambda w: w.worker_index)
    finally:
        ws.stop()


@pytest.mark.ray
def test_foreach_policy_replaces_a_killed_worker(ray_session):
    ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(**SMALL, sample_timeout_s=60.0),
                   num_workers=2, backend="ray")
    try:
        old = ws.remote_workers()[0]
        kill(old)
        # the dead worker's answer is missing; it is replaced
        assert ws.foreach_policy(lambda p, pid: pid) == ["default_policy"] * 2
        new = ws.remote_workers()[0]
        assert new is not old and ws.num_restarts == 1
        ray_session.get(new.flowrl_ping.remote(), timeout=600)   # started (a new process)
        assert ws.foreach_policy(lambda p, pid: pid) == ["default_policy"] * 3
    finally:
        ws.stop()


@pytest.mark.ray
def test_collect_metrics_names_a_killed_worker(ray_session):
    ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(**SMALL), num_workers=2,
                   backend="ray")
    try:
        assert collect_metrics(ws.local_worker(), ws.remote_workers())["episodes_this_iter"] == 0
        kill(ws.remote_workers()[1])
        with pytest.raises(WorkerError, match=r"remote worker 2 \(a Ray actor\) died or became "
                                              r"unreachable") as info:
            collect_metrics(ws.local_worker(), ws.remote_workers())
        assert lost_reason(info.value).startswith("died (")
    finally:
        ws.stop()


def _env_hanging_off_the_driver(driver_pid):
    def create(env_config):
        import os

        import gymnasium as gym
        if os.getpid() != driver_pid:
            time.sleep(3600)                     # a remote worker's env never builds
        return gym.make("CartPole-v1")
    return create


@pytest.mark.ray
def test_a_worker_that_never_starts_is_a_named_worker_error(ray_session, monkeypatch):
    import flowrl.workers.worker_set as worker_set
    monkeypatch.setattr(worker_set, "START_WAIT_S", 1.0)
    with pytest.raises(WorkerError, match=r"WorkerSet: remote worker 1 did not start within "
                                          r"1 s \(the larger of START_WAIT_S and "
                                          r"sample_timeout_s\)"):
        WorkerSet(_env_hanging_off_the_driver(os.getpid()), PGPolicy, WorkerConfig(**SMALL, sample_timeout_s=1.0),
                  num_workers=1, backend="ray")


@pytest.mark.ray
def test_a_restart_counts_once_and_survives_restore(ray_session, tmp_path):
    config = PPOConfig(env="CartPole-v1", num_workers=2, rollout_fragment_length=32,
                       train_batch_size=64, sgd_minibatch_size=32, num_sgd_iter=1,
                       num_cpus_per_worker=0, backend="ray", seed=0)
    algo = PPO(config)
    try:
        algo.train()
        kill(algo.workers.remote_workers()[1])
        results = [algo.train() for _ in range(2)]
        algo.save(str(tmp_path / "ck"))
    finally:
        algo.stop()
    last = results[-1]
    assert last["num_worker_restarts"] == last["info"]["num_worker_restarts"] == 1
    fresh = PPO(dataclasses.replace(config, backend="local"))   # the count is the set's
    try:
        fresh.restore(str(tmp_path / "ck"))
        assert fresh.workers.num_restarts == 1      # the run's one counter, restored
        assert fresh.train()["num_worker_restarts"] == 1
    finally:
        fresh.stop()
