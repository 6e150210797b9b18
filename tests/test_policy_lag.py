"""Policy lag you can see (issue 43, deliverable 1): versions on workers and batches,
lag, queue and busy figures in results, ``max_policy_lag``, and the broadcast after a
restore (issue 44 #7)."""

from __future__ import annotations

import logging

import numpy as np
import pytest

from flowrl.algorithms import APPO, APPOConfig, IMPALA, IMPALAConfig, PPOConfig
from flowrl.algorithms.impala import BroadcastUpdateLearnerWeights, ReportLearnerDiagnostics
from flowrl.batch import SampleBatch
from flowrl.checkpoint import read_checkpoint
from flowrl.errors import ConfigError
from flowrl.loggers import ResultLogger, read_scalars
from flowrl.metrics import (STEPS_SAMPLED_COUNTER, STEPS_TRAINED_COUNTER, MetricsContext,
                            using_metrics)
from flowrl.ops import LearnerThread
from flowrl.policies import IMPALAPolicy
from flowrl.workers import RolloutWorker

BACKENDS = ["local", pytest.param("ray", marks=pytest.mark.ray)]
LAG_KEYS = {"mean", "p95", "max", "mean_env_steps", "p95_env_steps", "max_env_steps",
            "rows", "taken", "dropped"}


def _worker(seed: int = 0) -> RolloutWorker:
    return RolloutWorker("CartPole-v1", policy=IMPALAPolicy, rollout_fragment_length=20,
                         seed=seed)


def test_batches_carry_the_version_of_the_weights_that_acted():
    learner, actor = _worker(), _worker(1)
    try:
        first = actor.sample()
        assert first[SampleBatch.POLICY_VERSION].tolist() == [0] * 20
        learner.learn_on_batch(first)
        learner.learn_on_batch(first)
        assert learner.policy_versions == {"default_policy": 2}
        actor.set_weights(learner.get_weights(), learner.policy_versions)
        assert actor.sample()[SampleBatch.POLICY_VERSION].tolist() == [2] * 20
        actor.set_weights(learner.get_weights())  # no versions: they stay
        assert actor.policy_versions == {"default_policy": 2}
        fresh = _worker(2)
        fresh.set_state(learner.get_state())
        assert fresh.policy_versions == {"default_policy": 2}
        fresh.stop()
    finally:
        learner.stop()
        actor.stop()


def _train(worker: RolloutWorker, items: list, answers: int, **settings) -> tuple:
    """Queue ``items`` for a LearnerThread on ``worker``, start it, and return its first
    ``answers`` answers, its diagnostics and, after a second call, its fresh ones."""
    learner = LearnerThread(worker, learner_queue_size=4, **settings)
    for item in items:
        learner.inqueue.put(item)
    learner.start()
    try:
        out = [learner.outqueue.get(timeout=60) for _ in range(answers)]
        return out, learner.diagnostics(), learner.diagnostics()
    finally:
        learner.stop()
        worker.stop()


def test_each_training_pass_counts_its_rows_lag_then():
    worker = _worker()
    _, figures, _ = _train(worker, [worker.sample()], 2, num_sgd_iter=2)
    lag = figures["policy_lag"]
    # the same 20 rows, trained at versions 0 and 1
    assert lag["rows"] == 40 and lag["mean"] == pytest.approx(0.5) and lag["max"] == 1
    assert lag["taken"] == 20
    assert lag["max_env_steps"] == 20


def test_the_learner_measures_each_rows_lag_when_it_trains_on_it():
    worker = _worker()
    batches = [worker.sample() for _ in range(3)]  # all acted by version 0
    answers, figures, after = _train(worker, batches, 3)
    assert [count for count, _ in answers] == [20, 20, 20]
    assert worker.policy_versions == {"default_policy": 3}
    lag = figures["policy_lag"]
    assert set(lag) == LAG_KEYS
    # taken at versions 0, 1 and 2; 20 and 40 env steps trained before the 2nd and 3rd
    assert lag["rows"] == 60 and lag["max"] == 2 and lag["mean"] == pytest.approx(1.0)
    assert lag["mean_env_steps"] == pytest.approx(20.0) and lag["max_env_steps"] == 40
    assert lag["dropped"] == 0
    assert figures["learner_queue"]["size_max"] == 2
    assert figures["learner_queue"]["size_mean"] == pytest.approx(1.0)
    assert 0 < figures["learner_busy_frac"] <= 1
    assert "policy_lag" not in after  # it starts over


def test_max_policy_lag_drops_stale_rows_and_answers_their_sources():
    worker = _worker()
    batches = [(f"source-{i}", worker.sample()) for i in range(3)]
    answers, figures, _ = _train(worker, batches, 3, max_policy_lag=1)
    # the third batch (lag 2) trains nothing; its source still gets an answer
    assert [(a[0], a[2]) for a in answers] == [(20, "source-0"), (20, "source-1"),
                                              (0, "source-2")]
    assert answers[2][1] == {}
    assert worker.policy_versions == {"default_policy": 2}
    assert figures["policy_lag"]["dropped"] == 20 and figures["policy_lag"]["max"] == 1
    assert figures["policy_lag"]["taken"] == 60


def test_max_policy_lag_keeps_the_fresh_fragments_of_a_mixed_batch():
    worker = _worker()
    old = worker.sample()
    worker.count_updates(["default_policy"])
    worker.count_updates(["default_policy"])
    new = worker.sample()
    [(count, _)], figures, _ = _train(worker, [SampleBatch.concat_samples([old, new])], 1,
                                      max_policy_lag=1)
    assert count == 20 and figures["policy_lag"]["dropped"] == 20
    assert figures["policy_lag"]["rows"] == 20 and figures["policy_lag"]["max"] == 0


def test_max_policy_lag_is_checked_and_only_for_a_learner_queue():
    with pytest.raises(ConfigError, match=r"IMPALAConfig.max_policy_lag=-1: must be an int >= 0"):
        IMPALAConfig(env="CartPole-v1", max_policy_lag=-1)
    with pytest.raises(ConfigError, match=r"PPOConfig.max_policy_lag=4: .*without a learner queue.*"
                                          r"Remove it"):
        PPOConfig(env="CartPole-v1", max_policy_lag=4)
    with pytest.raises(ConfigError, match="max_policy_lag"):
        LearnerThread(_FakeWorker(), max_policy_lag=-2)
    assert APPOConfig(env="CartPole-v1", max_policy_lag=0).max_policy_lag == 0


class _FakeWorker:
    policy_versions = {"default_policy": 0}


def _check_result(r: dict) -> None:
    info = r["info"]
    lag = info["policy_lag"]
    assert set(lag) == LAG_KEYS
    assert 0 <= lag["mean"] <= lag["max"] and lag["p95"] <= lag["max"]
    assert 0 <= lag["mean_env_steps"] <= lag["max_env_steps"]
    assert lag["rows"] > 0
    assert set(info["learner_queue"]) == {"size_mean", "size_max"}
    assert 0 <= info["learner_queue"]["size_mean"] <= info["learner_queue"]["size_max"] <= 16
    assert 0 < info["learner_busy_frac"] <= 1


@pytest.mark.parametrize("backend", BACKENDS)
def test_impala_results_report_lag_queue_and_busy_share(backend, request, tmp_path):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    algo = IMPALA(IMPALAConfig(env="CartPole-v1", num_workers=2, backend=backend, seed=3,
                               min_time_s_per_reporting=0.3))
    try:
        results = [algo.train() for _ in range(3)]
        # iterations are timed (0.3 s), so a loaded machine makes fewer updates in them:
        # train on until the learner has made a few, whatever the machine's speed
        while (algo.workers.local_worker().policy_versions["default_policy"] <= 5
               and len(results) < 100):
            results.append(algo.train())
        for r in results:
            _check_result(r)
        # the workers act with the learner's weights: their versions follow its updates
        learner_version = algo.workers.local_worker().policy_versions["default_policy"]
        remote = algo.workers.foreach_worker(lambda w: w.policy_versions["default_policy"])
        assert learner_version > 5 and all(0 < v <= learner_version for v in remote[1:])
        stats = algo._run.stats()
        assert "policy lag" in stats["impala/learner_diagnostics"]["extra"]
        assert "policy lag: mean" in algo.to_dot()
    finally:
        algo.stop()
    with ResultLogger(str(tmp_path)) as log:
        log.log(results[-1])
    scalars = read_scalars(str(tmp_path))
    assert {"info/policy_lag/mean", "info/policy_lag/p95_env_steps",
            "info/learner_queue/size_max", "info/learner_busy_frac"} <= set(scalars)


def test_appo_with_max_policy_lag_zero_trains_only_on_fresh_rows():
    algo = APPO(APPOConfig(env="CartPole-v1", num_workers=2, seed=4, max_policy_lag=0,
                           min_time_s_per_reporting=0.3))
    try:
        results = [algo.train() for _ in range(3)]
        counters = algo._run.metrics.counters
    finally:
        algo.stop()
    dropped = sum(r["info"]["policy_lag"]["dropped"] for r in results)
    assert dropped > 0 and counters["num_policy_lag_dropped"] == dropped
    assert all(r["info"]["policy_lag"]["max"] == 0 for r in results)
    assert counters[STEPS_TRAINED_COUNTER] < counters[STEPS_SAMPLED_COUNTER]


class _Figures:
    max_policy_lag = 2

    def __init__(self, *figures):
        self.figures = list(figures)

    def diagnostics(self):
        return self.figures.pop(0)


def _lag(rows: int, dropped: int) -> dict:
    return {"policy_lag": {"mean": 1.0, "p95": 2.0, "max": 2.0, "mean_env_steps": 9.0,
                           "p95_env_steps": 9.0, "max_env_steps": 9.0, "rows": 2 * rows,
                           "taken": rows + dropped, "dropped": dropped},
            "learner_busy_frac": 0.5}


def test_an_iteration_dropping_over_half_its_rows_warns_naming_the_setting(caplog):
    op = ReportLearnerDiagnostics(_Figures(_lag(600, 400), _lag(400, 600)), "impala")
    metrics = MetricsContext()
    with using_metrics(metrics), caplog.at_level(logging.WARNING, logger="flowrl"):
        first = op({"info": {}})
        assert not caplog.messages
        second = op({"info": {}})
    assert first["info"]["num_policy_lag_dropped"] == 400
    assert second["info"]["num_policy_lag_dropped"] == metrics.counters[
        "num_policy_lag_dropped"] == 1000
    assert second["info"]["policy_lag"]["dropped"] == 600
    assert caplog.messages == [
        "impala: the learner dropped 600 of the 1000 rows it took this iteration as staler "
        "than max_policy_lag=2; raise max_policy_lag, or lower learner_queue_size or "
        "max_sample_requests_in_flight_per_worker so that samples wait less"]
    assert op.node_stats()["policy lag"] == "mean 1.0, p95 2, max 2 updates; dropped 600"


def test_a_resumed_run_continues_its_versions_and_lag_counters(tmp_path):
    config = IMPALAConfig(env="CartPole-v1", num_workers=1, seed=5, max_policy_lag=0,
                          min_time_s_per_reporting=0.3)
    algo = IMPALA(config)
    try:
        for _ in range(2):
            algo.train()
        algo.save(str(tmp_path / "ckpt"))
    finally:
        algo.stop()
    saved = read_checkpoint(str(tmp_path / "ckpt"))  # the learner went on after the save
    version = saved["worker"]["policy_versions"]["default_policy"]
    dropped = saved["metrics"]["counters"]["num_policy_lag_dropped"]
    assert version > 0 and dropped > 0
    resumed = IMPALA(config)
    try:
        resumed.restore(str(tmp_path / "ckpt"))
        assert resumed.workers.local_worker().policy_versions["default_policy"] == version
        remote = resumed.workers.foreach_worker(lambda w: w.policy_versions["default_policy"])
        assert remote[1:] == [version]
        r = resumed.train()
        _check_result(r)
        # versions and the dropped count go on from the checkpoint: no jump in lag
        assert r["info"]["policy_lag"]["max"] == 0
        assert resumed._run.metrics.counters["num_policy_lag_dropped"] >= dropped
        assert resumed.workers.local_worker().policy_versions["default_policy"] > version
    finally:
        resumed.stop()


class _Recorder:
    def __init__(self):
        self.sent = []

    def set_weights(self, weights, versions=None):
        self.sent.append((weights, versions))


def test_a_restore_makes_the_next_broadcast_send_the_restored_weights():
    """Issue 44 #7: with broadcast_interval > 1 the cached snapshot was sent again."""
    worker = _worker()
    learner = LearnerThread(worker)
    op = BroadcastUpdateLearnerWeights(learner, None, broadcast_interval=3)
    source = _Recorder()
    try:
        with using_metrics(MetricsContext()):
            op((20, {}, [source]))
            restored = {pid: {k: np.zeros_like(v) for k, v in w.items()}
                        for pid, w in worker.get_weights().items()}
            with learner.lock:
                worker.set_weights(restored, {"default_policy": 7})
                learner.weights_changed()
            op((20, {}, [source]))
    finally:
        worker.stop()
    weights, versions = source.sent[-1]
    assert versions == {"default_policy": 7}
    for k, v in weights["default_policy"].items():
        assert not np.asarray(v).any(), k
