"""WorkerSet on the in-process and Ray backends."""

from __future__ import annotations

import numpy as np
import pytest

from flowrl.errors import ConfigError
from flowrl.policies import A2CPolicy, PGPolicy
from flowrl.workers import PolicySpec, RolloutWorker, WorkerConfig, WorkerSet, make_multi_agent

CONFIG = WorkerConfig(rollout_fragment_length=5, num_envs_per_worker=2, seed=0,
                      policy_config={"hidden_sizes": (8,)})


def weights_equal(a, b):
    return all(np.array_equal(a[pid][k], b[pid][k]) for pid in a for k in a[pid])


def perturb(worker):
    worker.set_weights({pid: {k: v + 1.0 for k, v in w.items()}
                        for pid, w in worker.get_weights().items()})


def test_local_backend_sync_and_foreach():
    ws = WorkerSet("CartPole-v1", A2CPolicy, CONFIG, num_workers=2, backend="local")
    assert ws.backend == "local"
    local, remotes = ws.local_worker(), ws.remote_workers()
    assert [w.worker_index for w in remotes] == [1, 2]
    assert all(weights_equal(local.get_weights(), w.get_weights()) for w in remotes)
    perturb(local)
    assert not weights_equal(local.get_weights(), remotes[0].get_weights())
    ws.sync_weights()
    assert all(weights_equal(local.get_weights(), w.get_weights()) for w in remotes)
    assert ws.foreach_worker(lambda w: w.sample().count) == [10, 10, 10]
    assert ws.foreach_policy(lambda p, pid: pid) == ["default_policy"] * 3
    assert ws.trainable_policies() == ["default_policy"]
    ws.stop()
    assert ws.remote_workers() == []


def test_from_existing_does_not_own_its_workers():
    local = RolloutWorker("CartPole-v1", policy=PGPolicy, rollout_fragment_length=3)
    remote = RolloutWorker("CartPole-v1", policy=PGPolicy, rollout_fragment_length=3, worker_index=1)
    ws = WorkerSet.from_existing(local, [remote])
    assert ws.backend == "local" and ws.remote_workers() == [remote]
    ws.stop()
    assert remote.sample().count == 3 and local.sample().count == 3  # still usable


def test_multi_agent_worker_set():
    cfg = WorkerConfig(rollout_fragment_length=5,
                       policies={"p0": PolicySpec(PGPolicy), "p1": PolicySpec(A2CPolicy)},
                       policy_mapping_fn=lambda agent: f"p{agent}", policies_to_train=["p1"])
    ws = WorkerSet(make_multi_agent("CartPole-v1", 2), None, cfg, num_workers=1, backend="local")
    assert ws.trainable_policies() == ["p1"]
    assert sorted(ws.foreach_policy(lambda p, pid: pid)) == ["p0", "p0", "p1", "p1"]
    ws.stop()


@pytest.mark.parametrize("kwargs,match", [
    (dict(backend="threads"), "backend='threads'"),
    (dict(num_workers=-1), "num_workers=-1"),
])
def test_worker_set_errors(kwargs, match):
    with pytest.raises(ConfigError, match=match):
        WorkerSet("CartPole-v1", PGPolicy, CONFIG, **kwargs)


def test_worker_config_validation():
    with pytest.raises(ConfigError, match="WorkerConfig.rollout_fragment_length=0"):
        WorkerConfig(rollout_fragment_length=0)
    with pytest.raises(ConfigError, match="policy_mapping_fn is None"):
        WorkerConfig(policies={"a": PolicySpec(PGPolicy), "b": PolicySpec(PGPolicy)})


def test_auto_backend_without_remote_workers_is_local():
    ws = WorkerSet("CartPole-v1", PGPolicy, CONFIG, num_workers=0)
    assert ws.backend == "local" and ws.remote_workers() == []
    ws.stop()


@pytest.mark.ray
def test_ray_backend_broadcasts_with_one_put(ray_session, monkeypatch):
    ray = ray_session
    ws = WorkerSet("CartPole-v1", A2CPolicy, CONFIG, num_workers=2, backend="auto")
    try:
        assert ws.backend == "ray"
        remotes = ws.remote_workers()
        local = ws.local_worker()
        perturb(local)
        puts = []
        real_put = ray.put
        monkeypatch.setattr(ray, "put", lambda value, **kw: puts.append(1) or real_put(value, **kw))
        ws.sync_weights()
        assert len(puts) == 1
        remote_weights = ray.get([w.get_weights.remote() for w in remotes])
        assert all(weights_equal(local.get_weights(), rw) for rw in remote_weights)
        assert ws.foreach_worker(lambda w: w.worker_index) == [0, 1, 2]
        counts = ray.get([w.sample.remote() for w in remotes])
        assert [b.count for b in counts] == [10, 10]
        # workers are seeded by index, so their data differs
        assert not np.array_equal(counts[0]["obs"], counts[1]["obs"])
    finally:
        ws.stop()
    assert ws.remote_workers() == []


# -- create_env_on_driver ---------------------------------------------------------------

ENVS_MADE: list[int] = []


def counted_cartpole(env_config):
    import gymnasium as gym
    ENVS_MADE.append(1)
    return gym.make("CartPole-v1")


class DriverCannotReset:
    """CartPole whose reset raises in the process that built the algorithm (the
    driver: ``env_config["driver_pid"]``), as an env needing a simulator or GPU only
    the workers have would."""

    def __new__(cls, env_config):
        import os

        import gymnasium as gym

        class Env(gym.Wrapper):
            def reset(self, **kwargs):
                if os.getpid() == env_config["driver_pid"]:
                    raise RuntimeError("no simulator on the driver")
                return self.env.reset(**kwargs)
        return Env(gym.make("CartPole-v1"))


@pytest.mark.parametrize("policies", [
    None, {"a": PolicySpec(PGPolicy), "b": PolicySpec(A2CPolicy)}])
def test_without_env_on_driver_the_local_worker_takes_the_remote_spaces(policies):
    multi = policies is not None
    cfg = WorkerConfig(rollout_fragment_length=5, seed=0, create_env_on_driver=False,
                       policies=policies,
                       policy_mapping_fn=(lambda agent: "ab"[agent]) if multi else None)
    env = make_multi_agent("CartPole-v1", 2) if multi else "CartPole-v1"
    ws = WorkerSet(env, None if multi else PGPolicy, cfg, num_workers=2, backend="local")
    local, remote = ws.local_worker(), ws.remote_workers()[0]
    assert local.env is None and local.envs == [] and remote.env is not None
    assert local.policy_spaces() == remote.policy_spaces()
    assert sorted(local.policy_spaces()) == (["a", "b"] if multi else ["default_policy"])
    assert weights_equal(local.get_weights(), remote.get_weights())
    assert ws.foreach_worker(lambda w: len(w.episode_stats())) == [0, 0, 0]
    batch = remote.sample()
    assert local.learn_on_batch(batch)               # the driver's worker still trains
    with pytest.raises(ConfigError, match=r"RolloutWorker.sample \(worker 0\): this worker has "
                                          r"no env.*create_env_on_driver=True"):
        local.sample()
    ws.stop()


@pytest.mark.parametrize("on_driver, made", [(False, 2), (True, 3)])
def test_algorithms_make_no_env_on_the_driver_unless_asked(on_driver, made):
    """RLlib 1.x's create_env_on_driver=False by default: two remote workers, two
    envs; the driver's policy still acts and trains, and evaluation still plays."""
    from flowrl.algorithms import PG, PGConfig
    ENVS_MADE.clear()
    config = PGConfig(env=counted_cartpole, num_workers=2, rollout_fragment_length=25,
                      train_batch_size=50, seed=0, evaluation_duration=2,
                      **({} if not on_driver else {"create_env_on_driver": True}))
    assert PGConfig(env="CartPole-v1").create_env_on_driver is False
    with PG(config) as algo:
        assert len(ENVS_MADE) == made
        assert (algo.workers.local_worker().env is not None) == on_driver
        assert algo.train()["timesteps_total"] == 50
        actions, _ = algo.get_policy().compute_actions(np.zeros((3, 4), np.float32), False)
        assert actions.shape == (3,)
        assert algo.evaluate()["evaluation"]["episodes_this_iter"] == 2


@pytest.mark.ray
def test_an_env_that_cannot_reset_on_the_driver_trains_on_ray_workers(ray_session):
    import os

    from flowrl.algorithms import PG, PGConfig
    config = PGConfig(env=DriverCannotReset, env_config={"driver_pid": os.getpid()},
                      backend="ray", num_workers=1, num_cpus_per_worker=0,
                      rollout_fragment_length=25, train_batch_size=25, seed=0)
    with PG(config) as algo:
        assert algo.train()["timesteps_total"] == 25
