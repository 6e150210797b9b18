"""Fuzzed bad input: every field of every algorithm config, and every CLI flag.

Hypothesis draws values for one field at a time (every dataclass field of every
class in ``flowrl.algorithms.ALGORITHMS``, so algorithms added later are covered
without touching this file) and for every ``flowrl train`` flag. The outcome must
be a ConfigError naming the field, or a config that builds and trains one short
step (when that step is cheap: local backend, small batches, quick reporting);
any other exception fails the test, and the per-test timeout catches hangs.
``FLOWRL_FUZZ_EXAMPLES=200 python -m pytest tests/test_fuzz_config.py`` fuzzes
deeper (random rather than derandomized draws).
"""

from __future__ import annotations

import dataclasses
import math
import os

import pytest
import torch
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from flowrl.algorithms import ALGORITHMS
from flowrl.cli import main
from flowrl.errors import ConfigError

DEEP = int(os.environ.get("FLOWRL_FUZZ_EXAMPLES", 0))

# Small settings every fuzzed config starts from (only fields the config has).
SMALL = {"env": "CartPole-v1", "num_workers": 0, "num_envs_per_worker": 1,
         "rollout_fragment_length": 16, "train_batch_size": 32, "sgd_minibatch_size": 16,
         "num_sgd_iter": 1, "seed": 0}

# Per-algorithm additions to SMALL, for algorithms whose small settings differ (an
# algorithm that needs remote workers, a replay warm-up to shorten, ...).
SMALL_BY_ALGO: dict[str, dict] = {
    "a3c": {"num_workers": 1},
    "impala": {"num_workers": 1},
    "appo": {"num_workers": 1},
    "apex": {"num_workers": 1, "learning_starts": 64, "timesteps_per_iteration": 64},
    "dqn": {"learning_starts": 64, "timesteps_per_iteration": 64},
    "ddppo": {"num_workers": 1},
    "apex_ddpg": {"env": "Pendulum-v1", "num_workers": 1, "learning_starts": 64,
                  "timesteps_per_iteration": 64},
    "cql": {"env": "Pendulum-v1", "input": os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
        "tuned_examples", "data", "pendulum-sac-replay")},
}

ENV_IDS = ["CartPole-v1", "Pendulum-v1", "MountainCarContinuous-v0", "Acrobot-v1",
           "FrozenLake-v1", "NoSuchEnv-v0", ""]

values = st.one_of(
    st.none(), st.booleans(),
    st.integers(-3, 70), st.integers(-2**70, 2**70),
    st.floats(allow_nan=True, allow_infinity=True), st.floats(-2.0, 2.0),
    st.text(max_size=8), st.sampled_from(ENV_IDS + ["local", "ray", "auto"]),
    st.lists(st.integers(-2, 40), max_size=3), st.tuples(st.integers(-2, 40)),
    st.dictionaries(st.text(max_size=6), st.integers(-3, 3), max_size=2),
    st.fixed_dictionaries({"policies": st.one_of(st.integers(), st.text(max_size=3),
                                                 st.dictionaries(st.text(max_size=3),
                                                                 st.integers(), max_size=2))}),
)

FIELDS = sorted({(name, f.name) for name, cls in ALGORITHMS.items()
                 for f in dataclasses.fields(cls.config_class)})


# Algorithms whose fuzzed configs also run one train step; the others (learner
# threads, replay warm-ups, remote-only workers) are validated and not run here:
# their own test files train them at known-good settings.
TRAINED = {"pg", "a2c", "ppo"}


def cheap(config) -> bool:
    """Whether one train step of ``config`` is quick enough to run here."""
    if type(config).__name__.removesuffix("Config").lower() not in TRAINED:
        return False
    get = lambda name, default=0: getattr(config, name, default)  # noqa: E731
    steps = get("rollout_fragment_length", 1) * get("num_envs_per_worker", 1)
    return (get("backend") == "local" and get("num_workers") <= 2 and steps <= 2000
            and get("train_batch_size", 1) <= 2000 and get("timesteps_per_iteration") <= 2000
            and get("min_time_s_per_reporting") <= 0.5 and sum(get("model").fcnet_hiddens) <= 1024
            and get("num_sgd_iter", 1) <= 8 and get("torch_threads", 1) in (None, 1, 2)
            and get("num_gpus") <= 2)


@pytest.fixture(autouse=True)
def keep_torch_threads():
    threads = torch.get_num_threads()
    yield
    torch.set_num_threads(threads)


@pytest.fixture(autouse=True)
def in_a_scratch_directory(tmp_path, monkeypatch):
    """A fuzzed ``output`` (any text) records its dataset under the current directory:
    a scratch one, not the checkout."""
    monkeypatch.chdir(tmp_path)


@pytest.mark.parametrize("algo, field", FIELDS)
@settings(max_examples=DEEP or 8, deadline=None, derandomize=not DEEP,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(value=values)
def test_every_config_field(algo, field, value):
    cls = ALGORITHMS[algo]
    names = {f.name for f in dataclasses.fields(cls.config_class)}
    base = {k: v for k, v in {**SMALL, **SMALL_BY_ALGO.get(algo, {})}.items() if k in names}
    try:
        cls.config_class(**base)
    except ConfigError as e:
        pytest.fail(f"the small settings for {algo} are invalid ({e}); add what it needs to "
                    "SMALL_BY_ALGO in this file")
    try:
        config = cls.config_class(**{**base, field: value})
    except ConfigError as e:
        assert field in str(e), f"{algo} {field}={value!r}: {e}"
        return
    if not cheap(config):
        return
    try:
        algo_obj = cls(config)
    except ConfigError as e:  # found while building (e.g. the env rejects env_config)
        assert field in str(e), f"{algo} {field}={value!r}: {e}"
        return
    with algo_obj:
        r = algo_obj.train()
    assert r["training_iteration"] == 1 and r["timesteps_total"] > 0


flag_values = st.one_of(st.integers(-3, 3).map(str), st.floats(allow_nan=True).map(str),
                        st.text(max_size=6), st.sampled_from(["", "-1", "nan", "inf", "1e3"]))

FLAGS = {
    "--num-workers": flag_values, "--backend": st.sampled_from(["local", "ray", "x", ""]),
    "--stop-reward": flag_values, "--stop-timesteps": flag_values, "--stop-iters": flag_values,
    "--checkpoint-freq": flag_values, "--keep-checkpoints": flag_values,
    "--seed": flag_values, "--eval-interval": flag_values,
    "--env": st.sampled_from(ENV_IDS), "--restore": st.text(max_size=5),
    "--config": st.text(max_size=5), "--checkpoint-dir": st.text(max_size=5),
    "--run-dir": st.text(max_size=5) | st.just("\x00"),
    "--set": st.builds(lambda k, v: f"{k}={v}",
                       st.sampled_from(sorted({f for _, f in FIELDS}) + ["lr_rate", "stop.x"]),
                       st.text(max_size=5)),
}


@settings(max_examples=DEEP or 20, deadline=None, derandomize=not DEEP,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(flags=st.dictionaries(st.sampled_from(sorted(FLAGS)), st.just(None), min_size=1,
                             max_size=3).flatmap(
    lambda d: st.fixed_dictionaries({k: FLAGS[k] for k in d})))
def test_every_cli_flag(flags, tmp_path_factory, capsys, monkeypatch):
    run_dir = tmp_path_factory.mktemp("runs")
    monkeypatch.chdir(run_dir)               # relative paths drawn below land here
    argv = ["train", "pg", "--env", "CartPole-v1", "--stop-iters", "1", "--run-dir",
            str(run_dir), "--quiet", "--no-tensorboard", "--num-workers", "0",
            "--set", "train_batch_size=32", "--set", "rollout_fragment_length=16"]
    for flag, value in flags.items():
        argv += [flag, value] if not value.startswith("-") else [f"{flag}={value}"]
    if flags.get("--backend") == "ray":
        argv += ["--backend", "local"]      # Ray runs are covered by the Ray tests
    code = main(argv)
    err = capsys.readouterr().err
    assert code in (0, 2), (argv, code, err)
    if code == 2:
        assert "error" in err and "Traceback" not in err
        last = err.strip().splitlines()[-1]
        names = {"--env"}                    # the fixed flags above are valid
        for flag, value in flags.items():
            names |= {flag, flag.lstrip("-").replace("-", "_")}
            if flag == "--set":
                names.add(value.partition("=")[0].split(".")[-1].strip() or "--set")
        assert any(name in last for name in names), (argv, last)


@settings(max_examples=DEEP or 10, deadline=None, derandomize=not DEEP,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(path=st.text(max_size=5), episodes=flag_values, seed=flag_values)
def test_every_evaluate_flag(path, episodes, seed, tmp_path_factory, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path_factory.mktemp("eval"))
    argv = ["evaluate", path, f"--episodes={episodes}", f"--seed={seed}"]
    assert main(argv) == 2                   # nothing to evaluate there: a usage error
    err = capsys.readouterr().err
    assert "error" in err and "Traceback" not in err


@settings(max_examples=DEEP or 10, deadline=None, derandomize=not DEEP,
          suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(algo=st.sampled_from(sorted(ALGORITHMS) + ["x"]), env=st.sampled_from(ENV_IDS),
       workers=st.integers(-2, 3).map(str) | st.text(max_size=3),
       fmt=st.sampled_from(["dot", "svg", "png", "x"]), out=st.text(max_size=5))
def test_every_plan_flag(algo, env, workers, fmt, out, tmp_path_factory, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path_factory.mktemp("plan"))
    argv = ["plan", algo, f"--env={env}", f"--num-workers={workers}", "--format", fmt,
            f"-o={out}"]
    code = main(argv)
    err = capsys.readouterr().err
    assert code in (0, 1, 2), (argv, code, err)
    if code == 1:            # run-time failures: no Graphviz, or -o cannot be written
        assert "Graphviz" in err or "cannot write" in err, (argv, err)
    assert "Traceback" not in err


def test_nan_and_inf_are_rejected_by_name():
    with pytest.raises(ConfigError, match="PPOConfig.lr=inf"):
        ALGORITHMS["ppo"].config_class(env="CartPole-v1", lr=math.inf)
