"""Numbers written as strings: PyYAML reads ``1e-3`` and ``1e6`` (no dot, or an
exponent without a sign) as strings, and so does ``--set lr=1e-3``. Every
algorithm's config, its nested numeric fields and the stop criteria read them as
the numbers they spell; a string an int field cannot take stays a ConfigError
naming the field."""

from __future__ import annotations

import os

import pytest
import yaml

from flowrl.algorithms import ALGORITHMS, DQNConfig, PPOConfig
from flowrl.errors import ConfigError
from flowrl.experiment import apply_overrides, check_spec, load_spec, make_config, read_numbers


def test_pyyaml_reads_these_numbers_as_strings():
    # The premise: if PyYAML ever reads them as numbers, the coercion below is moot.
    assert yaml.safe_load("[1e-3, 1e6, 1.5e1, 2.5e-4]") == ["1e-3", "1e6", "1.5e1", 0.00025]


# what an algorithm's config needs beyond an env: CQL trains from a dataset only
NEEDS = {"cql": {"input": os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(
    __file__))), "tuned_examples", "data", "pendulum-sac-replay")}}


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_every_algorithm_config_reads_numeric_strings(algo):
    config = ALGORITHMS[algo].config_class(env="CartPole-v1", lr="1e-3", gamma="9.9e-1",
                                            train_batch_size="1e3", rollout_fragment_length="5e1",
                                            **NEEDS.get(algo, {}))
    assert (config.lr, config.gamma) == (0.001, 0.99)
    assert (config.train_batch_size, config.rollout_fragment_length) == (1000, 50)
    assert type(config.train_batch_size) is int and type(config.rollout_fragment_length) is int


@pytest.mark.parametrize("algo", sorted(ALGORITHMS))
def test_a_non_integral_string_for_an_int_field_names_the_field(algo):
    cls = ALGORITHMS[algo].config_class
    with pytest.raises(ConfigError, match=rf"^{cls.__name__}\.train_batch_size='15e-1': "
                                          r"must be an int >= 1"):
        cls(env="CartPole-v1", train_batch_size="15e-1")
    with pytest.raises(ConfigError, match=rf"^{cls.__name__}\.lr='fast': must be a number"):
        cls(env="CartPole-v1", lr="fast")
    with pytest.raises(ConfigError, match=rf"^{cls.__name__}\.lr='nan': must be a number"):
        cls(env="CartPole-v1", lr="nan")


def test_strings_of_string_fields_are_left_alone():
    # Only a value its check refuses is read as a number: a str field keeps its text.
    config = PPOConfig(env="CartPole-v1", env_config={}, backend="local")
    assert config.backend == "local"
    with pytest.raises(ConfigError, match=r"PPOConfig\.backend='1e3': must be one of"):
        PPOConfig(env="CartPole-v1", backend="1e3")


def test_nested_numeric_fields_read_numeric_strings():
    config = PPOConfig(env="CartPole-v1", lr_schedule=[[0, "2.5e-4"], ["1e7", 0.0]])
    assert config.lr_schedule == [[0, 0.00025], [10_000_000, 0.0]]
    dqn = DQNConfig(env="CartPole-v1", exploration_config={"epsilon_timesteps": "1e4"})
    assert dqn.exploration_config["epsilon_timesteps"] == 10_000
    with pytest.raises(ConfigError, match=r"lr_schedule=\[\[0, 0.001\], \['15e-1', 0.0\]\]"):
        PPOConfig(env="CartPole-v1", lr_schedule=[[0, 0.001], ["15e-1", 0.0]])


def test_a_yaml_spec_and_overrides_with_numbers_yaml_reads_as_strings(tmp_path):
    path = tmp_path / "ppo.yaml"
    path.write_text("algo: ppo\nenv: CartPole-v1\nstop: {timesteps_total: 1e6, time_total_s: 6e2}\n"
                    "config:\n  lr: 1e-3\n  lr_schedule: [[0, 2.5e-4], [1e7, 0.0]]\n"
                    "  train_batch_size: 4e3\n")
    spec = apply_overrides(load_spec(str(path)), ["sgd_minibatch_size=1e2",
                                                  "stop.training_iteration=1e1"])
    assert spec["stop"] == {"timesteps_total": 1_000_000, "time_total_s": 600,
                            "training_iteration": 10}
    config = make_config(spec["algo"], {"env": spec["env"], **spec["config"]})
    assert (config.lr, config.train_batch_size, config.sgd_minibatch_size) == (0.001, 4000, 100)
    assert config.lr_schedule == [[0, 0.00025], [10_000_000, 0.0]]


def test_stop_criteria_read_numeric_strings_and_keep_their_checks():
    assert check_spec({"stop": {"timesteps_total": "1e6", "episode_reward_mean": "4.5e2"}}
                      )["stop"] == {"timesteps_total": 1_000_000, "episode_reward_mean": 450}
    with pytest.raises(ConfigError, match=r"stop\.timesteps_total='15e-1': must be an int >= 1"):
        check_spec({"stop": {"timesteps_total": "15e-1"}})
    with pytest.raises(ConfigError, match=r"stop\.episode_reward_mean='high': must be a number"):
        check_spec({"stop": {"episode_reward_mean": "high"}})


def test_read_numbers_reads_only_finite_numbers():
    assert read_numbers(["1e3", "0.5", "-2", "inf", "nan", "1e999", "x", None, True]) == [
        1000, 0.5, -2, "inf", "nan", "1e999", "x", None, True]
    assert read_numbers(("1e3",)) == (1000,) and read_numbers({"k": ["1e1"]}) == {"k": [10]}
