"""Errors name the real culprit, not a hook the user never wrote (issue 25, part 5)."""

from __future__ import annotations

import os

import gymnasium as gym
import pytest

from flowrl.algorithms import PG, PGConfig, build_algorithm
from flowrl.errors import ConfigError, EnvError
from flowrl.policies import PGPolicy
from flowrl.workers import PolicySpec, RolloutWorker, make_multi_agent


BACKENDS = ["local", pytest.param("ray", marks=pytest.mark.ray)]


def broken_map(env_config):
    raise ValueError("no such map")


class ResetFails(gym.Env):
    observation_space = gym.spaces.Box(-1.0, 1.0, (2,))
    action_space = gym.spaces.Discrete(2)

    def __init__(self, env_config=None):
        pass

    def reset(self, *, seed=None, options=None):
        raise RuntimeError("the simulator is not running")


class BuildsOnlyInTheDriver:
    """An env creator that fails outside the process that made it (a remote worker)."""

    def __init__(self):
        self.pid = os.getpid()

    def __call__(self, env_config):
        if os.getpid() != self.pid:
            raise OSError("license server unreachable")
        return gym.make("CartPole-v1")


class SecondBuildFails:
    """An env creator whose second env fails: the second remote worker's (local backend, no
    env on the driver)."""

    def __init__(self):
        self.calls = 0

    def __call__(self, env_config):
        self.calls += 1
        if self.calls > 1:
            raise OSError("license server unreachable")
        return gym.make("CartPole-v1")


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_env_constructor_that_raises_names_the_env_and_the_local_worker(request, backend):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    with pytest.raises(EnvError, match=r"^env broken_map raised ValueError in its constructor on "
                                       r"worker 0 \(the local worker\): no such map") as info:
        PG(PGConfig(env=broken_map, num_workers=1, create_env_on_driver=True, backend=backend))
    assert "hook" not in str(info.value) and isinstance(info.value.__cause__, ValueError)


@pytest.mark.parametrize("backend", BACKENDS)
def test_without_an_env_on_the_driver_the_first_remote_worker_is_named(request, backend):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    with pytest.raises(EnvError, match=r"^env broken_map raised ValueError in its constructor on "
                                       r"worker 1: no such map"):
        PG(PGConfig(env=broken_map, num_workers=1, backend=backend))


@pytest.mark.parametrize("backend", BACKENDS)
def test_an_env_reset_that_raises_names_the_env_and_the_worker(request, backend):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    with pytest.raises(EnvError, match=r"env ResetFails raised RuntimeError in its reset on "
                                       r"worker 0 .*the simulator is not running"):
        PG(PGConfig(env=ResetFails, num_workers=1, create_env_on_driver=True, backend=backend))


def test_a_remote_workers_env_failure_names_that_worker_locally():
    with pytest.raises(EnvError, match=r"env SecondBuildFails raised OSError in its "
                                       r"constructor on worker 2: license server unreachable"):
        PG(PGConfig(env=SecondBuildFails(), num_workers=2, backend="local"))


@pytest.mark.ray
def test_a_remote_workers_env_failure_names_that_worker_on_ray(ray_session):
    with pytest.raises(EnvError, match=r"env BuildsOnlyInTheDriver raised OSError in its "
                                       r"constructor on worker [12]: license server unreachable"):
        PG(PGConfig(env=BuildsOnlyInTheDriver(), num_workers=2, backend="ray"))


def test_a_hook_the_user_wrote_is_still_named():
    def make_workers(algo, **kwargs):
        raise RuntimeError("no cluster")

    Custom = build_algorithm("custom", PGConfig, PGPolicy, PG.execution_plan,
                             make_workers=make_workers)
    with pytest.raises(ConfigError, match="custom: hook make_workers raised RuntimeError: "
                                          "no cluster; fix the make_workers hook"):
        Custom(env="CartPole-v1")


def _multiagent(spec):
    return {"policies": {"pg_policy": spec},
            "policy_mapping_fn": lambda agent, episode: "pg_policy"}


@pytest.mark.parametrize("spec", [(None, None, None, {"n_step": 3}),
                                  PolicySpec(config={"n_step": 3})])
def test_a_policy_config_key_the_policy_does_not_take_names_the_policy_and_key(spec):
    with pytest.raises(ConfigError, match=r"^PGConfig\.multiagent\.policies\['pg_policy'\]: "
                                          r"config key 'n_step' is not a parameter of PGPolicy"):
        PG(PGConfig(env=make_multi_agent("CartPole-v1", 2), multiagent=_multiagent(spec)))


def test_a_misspelt_policy_config_key_gets_a_suggestion_and_workers_check_too():
    with pytest.raises(ConfigError, match=r"policies\['pg_policy'\]: config key 'gama' .*"
                                          r"did you mean \['gamma'\]"):
        PG(PGConfig(env=make_multi_agent("CartPole-v1", 2),
                    multiagent=_multiagent((None, None, None, {"gama": 0.9}))))
    with pytest.raises(ConfigError, match=r"RolloutWorker: policies\['p'\]: config key "
                                          r"'n_step'"):
        RolloutWorker(make_multi_agent("CartPole-v1", 2),
                      policies={"p": (PGPolicy, None, None, {"n_step": 3})},
                      policy_mapping_fn=lambda agent, episode: "p")
