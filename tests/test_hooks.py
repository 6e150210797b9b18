"""Algorithm hooks as build_trainer had them, build_algorithm, and WorkerSet helpers."""

from __future__ import annotations

import numpy as np
import pytest

from flowrl.algorithms import PG, PGConfig, build_algorithm
from flowrl.algorithms.base import Algorithm
from flowrl.errors import ConfigError
from flowrl.policies import A2CPolicy, PGPolicy
from flowrl.workers import WorkerConfig, WorkerSet

EVENTS: list = []


def _record_env(env, worker_index):
    # runs where the worker lives; on the local backend that is this process
    EVENTS.append(("validate_env", worker_index, type(env).__name__))


def test_build_algorithm_calls_hooks_in_order():
    EVENTS.clear()

    def get_policy_class(config):
        EVENTS.append("get_policy_class")
        return A2CPolicy

    def make_workers(algo, *, env, policy_class, worker_config, num_workers, backend):
        EVENTS.append(("make_workers", policy_class.__name__, num_workers))
        return WorkerSet(env, policy_class, worker_config, num_workers=num_workers,
                         backend=backend)

    MyAlgo = build_algorithm(
        "my_algo", PGConfig, PGPolicy, PG.execution_plan,
        get_policy_class=get_policy_class,
        before_init=lambda algo: EVENTS.append("before_init"),
        make_workers=make_workers, validate_env=_record_env,
        after_init=lambda algo: EVENTS.append(("after_init", algo.plan.name)))
    assert issubclass(MyAlgo, Algorithm) and MyAlgo.name == "my_algo"
    algo = MyAlgo(env="CartPole-v1", num_workers=2, rollout_fragment_length=50,
                  train_batch_size=100, seed=0)
    try:
        # (the driver's worker has no env to validate: create_env_on_driver=False)
        assert EVENTS == ["get_policy_class", "before_init", ("make_workers", "A2CPolicy", 2),
                          ("validate_env", 1, "TimeLimit"), ("validate_env", 2, "TimeLimit"),
                          ("after_init", "my_algo")]
        assert type(algo.get_policy()) is A2CPolicy
        assert algo.train()["timesteps_total"] == 100
    finally:
        algo.stop()


def test_a_hook_that_raises_names_the_hook():
    def reject(env, worker_index):
        if worker_index == 1:
            raise RuntimeError("this env is not welcome")

    Strict = build_algorithm("strict", PGConfig, PGPolicy, PG.execution_plan,
                             validate_env=reject)
    with pytest.raises(ConfigError, match="strict: hook validate_env raised RuntimeError: "
                                          "this env is not welcome"):
        Strict(env="CartPole-v1", num_workers=1)
    Broken = build_algorithm("broken", PGConfig, PGPolicy, PG.execution_plan,
                             after_init=lambda algo: 1 / 0)
    with pytest.raises(ConfigError, match="hook after_init raised ZeroDivisionError"):
        Broken(env="CartPole-v1")

    class Sub(PG):
        def before_init(self):
            raise ConfigError("before_init wants a seed")

    with pytest.raises(ConfigError, match="^before_init wants a seed$"):
        Sub(env="CartPole-v1")


def test_build_algorithm_rejects_bad_parts():
    with pytest.raises(ConfigError, match="unknown hooks \\['after_train'\\]"):
        build_algorithm("x", PGConfig, PGPolicy, PG.execution_plan, after_train=print)
    with pytest.raises(ConfigError, match="give the config class"):
        build_algorithm("x", dict, PGPolicy, PG.execution_plan)
    NoPolicy = build_algorithm("nopol", PGConfig, None, PG.execution_plan)
    with pytest.raises(ConfigError, match="no policy class"):
        NoPolicy(env="CartPole-v1")


def test_subclass_hooks_and_worker_env():
    class Checked(PG):
        seen: list = []

        @staticmethod
        def validate_env(env, worker_index):
            if env.spec.id != "CartPole-v1":
                raise ValueError(f"worker {worker_index}: only CartPole")

        def after_init(self):
            self.seen.append(self.workers.local_worker().env.spec.id)

    algo = Checked(env="CartPole-v1", train_batch_size=50, rollout_fragment_length=50)
    assert Checked.seen == ["CartPole-v1"]
    algo.stop()
    with pytest.raises(ConfigError, match="hook validate_env raised ValueError: worker 0: "
                                          "only CartPole"):
        Checked(env="Acrobot-v1")


@pytest.mark.ray
def test_ray_foreach_policy_kwargs_travel_with_one_put_and_validate_env_runs_remotely(
        ray_session, monkeypatch):
    ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=10,
                                                         policy_config={"hidden_sizes": (8,)}),
                   num_workers=2, backend="ray")
    try:
        import ray
        puts = []
        real_put = ray.put
        monkeypatch.setattr(ray, "put", lambda value, **kw: puts.append(1) or real_put(value, **kw))
        big = {k: np.full(1000, 2.0) for k in "abc"}

        def set_bias(policy, pid, weights, scale):
            w = policy.get_weights()
            name = sorted(w)[-1]
            w[name] = w[name] * 0 + weights["a"][0] * scale
            policy.set_weights(w)
            return float(w[name].ravel()[0])

        assert ws.foreach_policy(set_bias, weights=big, scale=3.0) == [6.0, 6.0, 6.0]
        assert len(puts) == 1
        envs = ws.foreach_worker(lambda w: (w.worker_index, w.env.spec.id))
        assert envs == [(0, "CartPole-v1"), (1, "CartPole-v1"), (2, "CartPole-v1")]
    finally:
        ws.stop()
