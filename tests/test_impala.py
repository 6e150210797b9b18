"""IMPALA/APPO: configs, the seeds' AsyncSamples optimizer cases, plans, release."""

from __future__ import annotations

import threading

import pytest

from async_mocks import slow_cartpole
from flowrl.algorithms import APPO, IMPALA, APPOConfig, IMPALAConfig
from flowrl.errors import ConfigError, FlowError

RAY = pytest.param("ray", marks=pytest.mark.ray)


def _backend(backend, request):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    return backend


def _wait_for(algo, sampled: int, trained: int, max_iters: int = 200) -> dict:
    for _ in range(max_iters):
        info = algo.train()["info"]
        if info["num_steps_sampled"] >= sampled and info["num_steps_trained"] >= trained:
            return info
    raise AssertionError(f"only {info['num_steps_sampled']} sampled and "
                         f"{info['num_steps_trained']} trained after {max_iters} iterations")


def _impala(backend, **fields):
    fields = {"env": "CartPole-v1", "num_workers": 2, "seed": 0, "backend": backend, **fields}
    return IMPALA(IMPALAConfig(**fields))


@pytest.mark.parametrize("field, value, match", [
    ("num_data_loader_buffers", 0, "num_data_loader_buffers=0: must be an int >= 1"),
    ("minibatch_buffer_size", 0, "minibatch_buffer_size=0: must be an int >= 1"),
    ("learner_queue_size", 0, "learner_queue_size=0: must be an int >= 1"),
    ("learner_queue_timeout", 0, "learner_queue_timeout=0: must be a number > 0"),
    ("broadcast_interval", 0, "broadcast_interval=0: must be an int >= 1"),
    ("replay_proportion", -0.5, "replay_proportion=-0.5: must be a number >= 0"),
    ("replay_buffer_num_slots", -1, "replay_buffer_num_slots=-1: must be an int >= 0"),
    ("max_sample_requests_in_flight_per_worker", 0, "max_sample_requests_in_flight_per_worker=0"),
    ("num_aggregation_workers", 3, r"num_aggregation_workers=3: must be <= num_workers \(2\)"),
    ("num_workers", 0, "num_workers=0: the actors sample on remote workers"),
    ("replay_proportion", 0.5, "needs replay_buffer_num_slots > 0"),
    ("vtrace", "yes", "vtrace='yes': must be True or False"),
    ("vtrace_clip_rho_threshold", 0, "vtrace_clip_rho_threshold=0"),
])
def test_impala_config_checks_name_field_and_fix(field, value, match):
    with pytest.raises(ConfigError, match=match):
        IMPALAConfig(**{"env": "CartPole-v1", "num_workers": 2, field: value})


def test_reject_bad_configs_minibatch_buffer_over_loader_buffers():
    with pytest.raises(ValueError, match=r"minibatch_buffer_size=4: must be <= "
                                         r"num_data_loader_buffers \(2\)"):
        IMPALAConfig(env="CartPole-v1", num_data_loader_buffers=2, minibatch_buffer_size=4)
    with pytest.raises(ConfigError, match=r"minibatch_buffer_size=2.*num_gpus > 0"):
        IMPALAConfig(env="CartPole-v1", num_gpus=1, minibatch_buffer_size=2)


def test_appo_config_defaults_and_checks():
    c = APPOConfig(env="CartPole-v1")
    assert (c.vtrace, c.clip_param, c.use_kl_loss, c.rollout_fragment_length,
            c.train_batch_size, c.learner_queue_timeout) == (False, 0.4, False, 50, 500, 300.0)
    with pytest.raises(ConfigError, match="kl_target=0: must be a number > 0"):
        APPOConfig(env="CartPole-v1", kl_target=0)


@pytest.mark.parametrize("fragment", [50, 25, 74])
@pytest.mark.parametrize("num_gpus", [1, 2])
def test_train_batch_100_reaches_1000_sampled_and_trained(num_gpus, fragment):
    with _impala("local", num_gpus=num_gpus, train_batch_size=100,
                 rollout_fragment_length=fragment) as algo:
        info = _wait_for(algo, 1000, 1000)
        assert algo.get_policy().num_towers == num_gpus
    assert info["num_steps_trained"] >= 1000


def _alive_actors(class_name: str) -> set[str]:
    from ray._private import state  # the GCS actor table (no dashboard in tests)
    return {a["ActorID"] for a in state.actors().values()
            if a["State"] == "ALIVE" and class_name in str(a.get("ActorClassName", ""))}


@pytest.mark.parametrize("backend", ["local", RAY])
def test_multi_tier_aggregation_with_one_aggregator(backend, request):
    backend = _backend(backend, request)
    before = _alive_actors("AggregatorHost") if backend == "ray" else set()
    # learner_queue_size=1 bounds how far sampling runs ahead of training (a full
    # queue blocks the plan), so the replayed steps show: trained ~ 1.5 x (sampled - lag).
    with _impala(backend, num_aggregation_workers=1, train_batch_size=100,
                 replay_proportion=0.5, replay_buffer_num_slots=4,
                 learner_queue_size=1) as algo:
        info = _wait_for(algo, 0, 3000)
        dot = algo.plan.to_dot()
        assert "impala/aggregate" in dot and "subgraph cluster_aggregators" in dot
        if backend == "ray":
            assert len(_alive_actors("AggregatorHost") - before) == 1
    # Replayed batches are trained, not counted as sampled (were they counted, trained
    # would trail sampled); stop released the aggregator.
    assert info["num_steps_trained"] > info["num_steps_sampled"]
    if backend == "ray":
        import time
        deadline = time.monotonic() + 60
        while _alive_actors("AggregatorHost") - before and time.monotonic() < deadline:
            time.sleep(0.5)  # ray.kill is asynchronous; the GCS table follows shortly
        assert not _alive_actors("AggregatorHost") - before


def test_multi_tier_aggregation_bad_config():
    with pytest.raises(ConfigError, match=r"num_aggregation_workers=4: must be <= num_workers"):
        IMPALAConfig(env="CartPole-v1", num_workers=2, num_aggregation_workers=4)


def test_multi_gpu_parallel_load():
    with _impala("local", num_gpus=2, num_data_loader_buffers=2,
                 train_batch_size=100) as algo:
        _wait_for(algo, 1000, 1000)
        assert len(algo.learner_thread._loaders) == 2


def test_learner_queue_timeout_with_a_slow_env():
    algo = _impala("local", env=slow_cartpole,
                   env_config={"sleep_s": 0.01}, rollout_fragment_length=150,
                   train_batch_size=150, learner_queue_timeout=0.5, num_workers=1)
    try:
        with pytest.raises(FlowError, match=r"learner_thread.*learner_queue_timeout=0.5"):
            _wait_for(algo, 1000, 1000)
    finally:
        algo.stop()
    assert not algo.learner_thread.is_alive()


def test_stop_releases_the_learner_thread_and_queues():
    before = {t.ident for t in threading.enumerate()}
    algo = _impala("local", train_batch_size=100, num_data_loader_buffers=2)
    algo.train()
    learner = algo.learner_thread
    algo.stop()
    algo.stop()
    assert not learner.is_alive() and not any(t.is_alive() for t in learner._loaders)
    assert {t.ident for t in threading.enumerate() if t.name.startswith("flowrl-impala")} - before == set()


def test_plan_reads_like_the_paper():
    with _impala("local", num_aggregation_workers=1) as algo:
        g = algo.plan.graph
        ids = set(g.nodes)
    for node in ("impala/rollouts", "impala/aggregate", "impala/learner_thread.inqueue",
                 "impala/learner_thread.outqueue", "impala/broadcast_weights"):
        assert node in ids, sorted(ids)


def test_weights_go_back_to_producing_workers_every_broadcast_interval():
    with _impala("local", train_batch_size=50, broadcast_interval=3) as algo:
        for _ in range(9):
            algo.train()
        counters = algo.metrics.counters
        assert counters["num_weight_broadcasts"] >= 9
        assert 1 <= counters["num_weight_syncs"] <= 1 + counters["num_weight_broadcasts"] // 3


@pytest.mark.slow   # the default suite checks their updates on a bandit (test_learning_updates)
@pytest.mark.parametrize("cls, config", [(IMPALA, IMPALAConfig), (APPO, APPOConfig)])
def test_quick_learning_progress(cls, config):
    algo = cls(config(env="CartPole-v1", num_workers=2, seed=0, num_envs_per_worker=4,
                      train_batch_size=200, lr=2e-3, timesteps_per_iteration=1500))
    try:
        first = algo.train()["episode_reward_mean"]
        best = max(algo.train()["episode_reward_mean"] for _ in range(7))
        assert best > first + 10, (first, best)
    finally:
        algo.stop()


def test_appo_kl_loss_adapts_the_coefficient():
    algo = APPO(APPOConfig(env="CartPole-v1", num_workers=1, train_batch_size=100,
                           use_kl_loss=True, kl_target=1.0, seed=0))
    try:
        for _ in range(3):
            result = algo.train()
        assert "kl" in result["info"]["learner"]["default_policy"]
        assert algo.get_policy().kl_coeff < 1.0  # KLs far below the target halve it
    finally:
        algo.stop()


def test_save_and_restore_between_learner_updates(tmp_path):
    with _impala("local", train_batch_size=100) as algo:
        algo.train()
        algo.save(str(tmp_path))
        trained = algo.metrics.counters["num_steps_trained"]
    with _impala("local", train_batch_size=100) as again:
        again.restore(str(tmp_path))
        assert again.metrics.counters["num_steps_trained"] == trained
        assert again.train()["info"]["num_steps_trained"] > trained


def test_next_values_come_from_the_next_row_or_one_forward_over_the_cut_rows():
    # V(s_{t+1}) is the next row's value where that row is s_{t+1}; the rest come from
    # a forward over their new_obs: together, exactly a forward over every new_obs.
    import torch

    from flowrl.batch import SampleBatch as SB
    from flowrl.policies import IMPALAPolicy
    from flowrl.workers import RolloutWorker
    worker = RolloutWorker("CartPole-v1", policy=IMPALAPolicy, num_envs=3,
                           rollout_fragment_length=40, seed=3)
    policy = worker.get_policy()
    batch = worker.sample()
    train = policy._train_tensors(batch)
    with torch.no_grad():
        _, values = policy.model_out(train)
        got = policy._next_values(train, values)
        policy.model({"obs_flat": train[SB.NEXT_OBS]}, [], None)
        want = policy.model.value_function()
    assert (~batch[SB.TERMINATEDS]).sum() > 100 and batch[SB.TERMINATEDS].any()
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)
