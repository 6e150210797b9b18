"""Every tuned example reaches its reward goal (slow: ``python -m pytest -m slow``).

Each YAML in tuned_examples/ names an algorithm, an env, a reward goal
(``stop.episode_reward_mean``, or ``stop["evaluation/episode_reward_mean"]`` for an
offline algorithm, whose training plays no episode) and a step budget
(``stop.timesteps_total``); the run must stop because the goal was reached, not
because the budget ran out.
New algorithms add their YAML there and are picked up here; those on the Ray
backend (``config.backend: ray``, or an algorithm whose default it is, as DD-PPO)
run in the test session's shared Ray. A spec whose run is far too long for this
test (Pong: hours on 2 CPUs) says why in ``skip_slow_test`` and is skipped here;
its benchmark measures it instead.
"""

from __future__ import annotations

import glob
import json
import os

import pytest
import yaml

from flowrl.cli import main
from flowrl.errors import ConfigError
from flowrl.experiment import algorithm_class, load_spec, make_config

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SPECS = sorted(glob.glob(os.path.join(ROOT, "tuned_examples", "*.yaml")))


def _backend(path: str) -> str:
    """The backend ``path`` runs on: its ``config.backend``, else its algorithm's default."""
    with open(path) as f:
        spec = yaml.safe_load(f)
    return spec["config"].get("backend", algorithm_class(spec["algo"]).config_class.backend)


#: Ray-backend examples share the test session's Ray (2 CPUs), as the other Ray tests do.
PARAMS = [pytest.param(p, id=os.path.basename(p),
                       marks=[pytest.mark.ray] if _backend(p) == "ray" else [])
          for p in SPECS]


def reward_goal(stop: dict) -> str:
    """The stop key of a spec's reward goal: the evaluation's when it has one."""
    return ("evaluation/episode_reward_mean" if "evaluation/episode_reward_mean" in stop
            else "episode_reward_mean")


def test_every_tuned_example_has_a_reward_goal_and_a_budget():
    assert SPECS
    for path in SPECS:
        spec = load_spec(path)  # also checks the keys, skip_slow_test's reason included
        assert {reward_goal(spec["stop"]), "timesteps_total"} <= set(spec["stop"]), path
        make_config(spec["algo"], {"env": spec["env"], **spec["config"]})  # builds


def test_skip_slow_test_needs_a_reason(tmp_path):
    path = tmp_path / "spec.yaml"
    path.write_text("algo: ppo\nenv: CartPole-v1\nskip_slow_test: ''\n")
    with pytest.raises(ConfigError, match="skip_slow_test='': give the reason"):
        load_spec(str(path))
    path.write_text("algo: ppo\nenv: CartPole-v1\nskip_slow_test: too long\n")
    assert load_spec(str(path))["skip_slow_test"] == "too long"


@pytest.mark.slow
@pytest.mark.timeout(3600)
@pytest.mark.parametrize("path", PARAMS)
def test_tuned_example_reaches_its_goal(path, tmp_path, request):
    with open(path) as f:
        spec = yaml.safe_load(f)
    if spec.get("skip_slow_test"):
        pytest.skip(spec["skip_slow_test"])
    if "mujoco" in spec["env"]:
        pytest.importorskip("mujoco")
    if _backend(path) == "ray":
        request.getfixturevalue("ray_session")
    key = reward_goal(spec["stop"])
    goal = spec["stop"][key]
    assert main(["train", "--config", path, "--run-dir", str(tmp_path), "--quiet",
                 "--no-tensorboard"]) == 0
    (run_dir,) = list(tmp_path.iterdir())
    with open(run_dir / "result.jsonl") as f:
        last = json.loads(f.read().splitlines()[-1])
    reached = (last["episode_reward_mean"] if key == "episode_reward_mean"
               else last.get("evaluation", {}).get("episode_reward_mean", float("nan")))
    assert reached >= goal, (path, last["timesteps_total"])
