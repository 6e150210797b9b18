"""Custom code named by strings: ``env: "pkg.mod:Class"``, ``custom_model:
"pkg.mod:Class"``, ``--import MODULE`` / ``imports``, in YAML, ``--set`` and Python,
on the driver and in Ray workers; the errors; run directory names."""

from __future__ import annotations

import itertools
import json
import os
import sys
import textwrap

import pytest

from flowrl import checkpoint
from flowrl.algorithms import PG
from flowrl.cli import main
from flowrl.errors import ConfigError

SMALL = {"train_batch_size": 40, "rollout_fragment_length": 40, "seed": 0}
FAST = ["--set", "train_batch_size=40", "--set", "rollout_fragment_length=40", "--quiet",
        "--no-tensorboard"]

ENVS_AND_MODELS = '''
import gymnasium as gym
import numpy as np
from torch import nn

from flowrl.models import TorchModelV2, register_model


class Corridor(gym.Env):
    """Walk right to the end; built as Corridor(env_config)."""

    def __init__(self, env_config=None):
        self.length = dict(env_config or {}).get("length", 3)
        self.action_space = gym.spaces.Discrete(2)
        self.observation_space = gym.spaces.Box(0.0, 50.0, (1,), np.float32)

    def reset(self, *, seed=None, options=None):
        super().reset(seed=seed)
        self.pos, self.t = 0, 0
        return np.array([self.pos], np.float32), {}

    def step(self, action):
        self.pos, self.t = max(0, self.pos + (1 if action == 1 else -1)), self.t + 1
        done = self.pos >= self.length
        return (np.array([self.pos], np.float32), 1.0 if done else -0.1, done,
                self.t >= 20, {})


def make_corridor(env_config):
    return Corridor(env_config)


class NoConfig(gym.Env):
    def __init__(self):
        pass


class Tiny(TorchModelV2):
    def __init__(self, obs_space, action_space, num_outputs, model_config, name):
        super().__init__(obs_space, action_space, num_outputs, model_config, name)
        self.pi = nn.Linear(int(np.prod(obs_space.shape)), num_outputs)
        self.v = nn.Linear(int(np.prod(obs_space.shape)), 1)

    def forward(self, input_dict, state, seq_lens):
        self._x = input_dict["obs_flat"].float()
        return self.pi(self._x), state

    def value_function(self):
        return self.v(self._x).squeeze(1)


gym.register("ENV_ID", entry_point=Corridor, kwargs={"env_config": None})
register_model("MODEL_NAME", Tiny)
'''

_names = itertools.count()


@pytest.fixture
def user_module(tmp_path, monkeypatch):
    """A factory: write a module of envs and models in a directory of its own (on
    this process's sys.path only) under a fresh name; returns its name, the env id
    it registers and the model name it registers."""
    made = []

    def write(source: str = ENVS_AND_MODELS) -> tuple[str, str, str]:
        n = next(_names)
        name, env_id, model = f"uc_mod_{os.getpid()}_{n}", f"UcCorridor{n}-v0", f"uc_tiny_{n}"
        directory = tmp_path / f"mods{n}"
        directory.mkdir()
        (directory / f"{name}.py").write_text(source.replace("ENV_ID", env_id).replace("MODEL_NAME", model))
        monkeypatch.syspath_prepend(str(directory))
        made.append(name)
        return name, env_id, model

    yield write
    for name in made:
        sys.modules.pop(name, None)


def run_dirs(root) -> list:
    return sorted(root.iterdir())


def test_references_in_python_build_the_env_and_model_they_name(user_module):
    mod, _, _ = user_module()
    for env in (f"{mod}:Corridor", f"{mod}:make_corridor"):
        with PG(env=env, env_config={"length": 2}, model={"custom_model": f"{mod}:Tiny"},
                **SMALL) as algo:
            assert algo.train()["timesteps_total"] == 40
            worker = algo.workers.local_worker()
            assert type(worker.env.unwrapped).__name__ == "Corridor"
            assert worker.env.unwrapped.length == 2
            assert type(algo.get_policy().model).__name__ == "Tiny"
            assert algo.config.env == env                   # the string stays in the config
            assert algo.config.model.custom_model == f"{mod}:Tiny"


def test_yaml_and_set_take_references_and_the_checkpoint_keeps_them_as_text(
        user_module, tmp_path):
    mod, _, _ = user_module()
    spec = tmp_path / "spec.yaml"
    spec.write_text(textwrap.dedent(f"""
        algo: pg
        env: "{mod}:Corridor"
        stop: {{training_iteration: 1}}
        config: {{model: {{custom_model: "{mod}:Tiny"}}, env_config: {{length: 2}}}}
    """))
    assert main(["train", "--config", str(spec), "--run-dir", str(tmp_path / "a"), *FAST]) == 0
    assert main(["train", "pg", "--env", f"{mod}:make_corridor", "--set",
                 f"model.custom_model={mod}:Tiny", "--stop-iters", "1", "--run-dir",
                 str(tmp_path / "b"), *FAST]) == 0
    for root, env in ((tmp_path / "a", f"{mod}:Corridor"), (tmp_path / "b", f"{mod}:make_corridor")):
        (run,) = run_dirs(root)
        assert ":" not in run.name and run.name.startswith(f"pg-{mod}_")
        ck = checkpoint.latest_checkpoint(str(run / "checkpoint"))
        assert sorted(os.listdir(ck)) == ["arrays.safetensors", "state.json"]   # no pickle
        config = checkpoint.read_checkpoint(ck)["config"]
        assert config["env"] == env and config["model"]["custom_model"] == f"{mod}:Tiny"


def test_run_directories_have_no_colon_for_gymnasiums_module_env_id(tmp_path):
    assert main(["train", "pg", "--env", "gymnasium.envs.classic_control:CartPole-v1",
                 "--stop-iters", "1", "--run-dir", str(tmp_path), *FAST]) == 0
    (run,) = run_dirs(tmp_path)
    assert run.name.startswith("pg-gymnasium.envs.classic_control_CartPole-v1-")


def test_import_registers_envs_and_models_before_anything_is_built(user_module, tmp_path,
                                                                   capsys):
    mod, env_id, model = user_module()
    args = ["train", "pg", "--env", env_id, "--set", f"model.custom_model={model}",
            "--stop-iters", "1", *FAST]
    assert main([*args, "--run-dir", str(tmp_path / "without")]) == 2
    assert "import it first (flowrl --import MODULE" in capsys.readouterr().err
    assert main([*args, "--import", mod, "--run-dir", str(tmp_path / "with")]) == 0
    (run,) = run_dirs(tmp_path / "with")
    state = checkpoint.read_checkpoint(str(run))
    assert list(state["config"]["imports"]) == [mod]   # saved: evaluate imports it again
    assert main(["evaluate", str(run), "--episodes", "1"]) == 0
    assert f"pg {env_id}: 1 episodes" in capsys.readouterr().out


def test_tune_passes_imports_to_every_trial(user_module, tmp_path, monkeypatch):
    import flowrl.sweep
    mod, env_id, _ = user_module()
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"algo: pg\nenv: {env_id}\nstop: {{training_iteration: 1}}\n"
                     "config: {lr: {grid_search: [0.01, 0.02]}}\n")
    seen = {}
    monkeypatch.setattr(flowrl.sweep, "run_sweep",
                        lambda spec, verbose: (seen.setdefault("space",
                                                               flowrl.sweep.param_space(spec)),
                                               False))
    monkeypatch.setattr(flowrl.sweep, "summary", lambda grid, spec: ("done", 0))
    assert main(["tune", "--config", str(sweep), "--import", mod, "--quiet"]) == 0
    assert seen["space"]["imports"] == [mod] and seen["space"]["env"] == env_id


BROKEN = {
    "raises": "raise RuntimeError('no licence server')\n",
    "needs": "import flowrl_no_such_dependency\n",
}


@pytest.mark.parametrize("case, expected", [
    ("no_module", r"env='uc_nowhere_pkg\.envs:Corridor': cannot import module "
                  r"'uc_nowhere_pkg\.envs' \(No module named 'uc_nowhere_pkg'\); make "
                  r"'uc_nowhere_pkg' importable: install it or add the directory holding it to "
                  r"PYTHONPATH.*'module:EnvId' needs its module importable"),
    ("no_attribute", r"env='<mod>:Coridor': module '<mod>' has no attribute 'Coridor' and "
                     r"registers no gymnasium env of that id; did you mean <mod>:Corridor\?"),
    ("no_env_config", r"env='<mod>:NoConfig': workers call NoConfig\(env_config\).*takes no such "
                      r"argument; give it one"),
    ("model_attribute", r"model\.custom_model='<mod>:Tin': module '<mod>' has no attribute 'Tin'; "
                        r"did you mean 'Tiny'\?"),
    ("model_syntax", r"model\.custom_model='my models:Tiny': write a class of an importable "
                     r"module as 'pkg\.mod:Class'"),
    ("model_name", r"custom_model='nobody_registered_this'.*no model is registered.*flowrl "
                   r"--import MODULE"),
    ("raises", r"importing module 'BROKEN' raised RuntimeError: no licence server; fix the "
               r"module"),
    ("needs", r"importing module 'BROKEN' failed: it imports 'flowrl_no_such_dependency', "
              r"which is not installed; install it"),
])
def test_errors_name_the_reference_the_module_and_the_fix(user_module, case, expected):
    mod, _, _ = user_module()
    fields = {"env": f"{mod}:Corridor"}
    if case == "no_module":
        fields["env"] = "uc_nowhere_pkg.envs:Corridor"
    elif case == "no_attribute":
        fields["env"] = f"{mod}:Coridor"
    elif case == "no_env_config":
        fields["env"] = f"{mod}:NoConfig"
    elif case == "model_attribute":
        fields["model"] = {"custom_model": f"{mod}:Tin"}
    elif case == "model_syntax":
        fields["model"] = {"custom_model": "my models:Tiny"}
    elif case == "model_name":
        fields["model"] = {"custom_model": "nobody_registered_this"}
    else:
        broken, _, _ = user_module(BROKEN[case])
        fields["imports"] = [broken]
        expected = expected.replace("BROKEN", broken)
    with pytest.raises(ConfigError, match=expected.replace("<mod>", mod)) as info:
        with PG(**fields, **SMALL):
            pass
    assert "\n" not in str(info.value)


def test_cli_import_errors_exit_2_naming_the_module(capsys):
    assert main(["train", "pg", "--env", "CartPole-v1", "--import", "uc_nowhere_pkg"]) == 2
    err = capsys.readouterr().err
    assert ("--import 'uc_nowhere_pkg': cannot import module 'uc_nowhere_pkg'" in err
            and "PYTHONPATH" in err)
    assert main(["evaluate", "nowhere", "--import", "my-envs"]) == 2
    assert "'my-envs' is not a module name" in capsys.readouterr().err


@pytest.mark.ray
def test_ray_workers_import_what_the_driver_found_on_its_own_sys_path(ray_session, user_module):
    """The module lives in a directory only the driver's sys.path holds (neither
    installed, nor on PYTHONPATH, nor the current directory): remote workers get it
    on theirs, import ``imports`` and resolve the references themselves."""
    mod, env_id, model = user_module()
    for env, custom in ((env_id, model), (f"{mod}:Corridor", f"{mod}:Tiny")):
        imports = [mod] if env == env_id else []          # a reference needs no import
        with PG(env=env, imports=imports, model={"custom_model": custom}, backend="ray",
                num_workers=1, **SMALL) as algo:
            assert algo.train()["timesteps_total"] == 40   # sampled by the remote worker
            built = algo.workers.foreach_worker(
                lambda w: (w.worker_index, type(w.env.unwrapped).__name__ if w.env else None,
                           type(w.get_policy().model).__name__))
            assert sorted(built) == [(0, None, "Tiny"), (1, "Corridor", "Tiny")]
