"""Ray Tune: flowrl.tune.trainable, sweep specs (flowrl.sweep) and ``flowrl tune``.

Trials use tiny PPO CartPole settings; Tune runs on the shared 2-CPU Ray session.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import numpy as np
import pytest

from flowrl.errors import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
#: Tiny PPO on CartPole: 128 env steps per iteration, one SGD pass.
SMALL = dict(env="CartPole-v1", num_workers=0, num_envs_per_worker=1,
             rollout_fragment_length=64, train_batch_size=128, sgd_minibatch_size=64,
             num_sgd_iter=1)


def run_config(tmp_path, name, **kw):
    from ray import tune
    return tune.RunConfig(name=name, storage_path=str(tmp_path), verbose=0, **kw)


def progress(trial_dir) -> list[dict]:
    """A trial's reported results, in order (Tune's ``result.json``)."""
    with open(os.path.join(trial_dir, "result.json")) as f:
        return [json.loads(line) for line in f if line.strip()]


# -- resources -------------------------------------------------------------------------
def test_each_trial_reserves_its_driver_and_every_remote_worker():
    from flowrl.algorithms import PPO
    from flowrl.tune import bundles, trainable
    assert bundles(PPO, {"backend": "ray", "num_workers": 3}) == [{"CPU": 1.0}] * 4
    assert bundles(PPO, {"backend": "ray", "num_workers": 2, "num_cpus_per_worker": 0.5,
                         "num_gpus": 1, "evaluation_interval": 2,
                         "evaluation_num_workers": 1}) == [
        {"CPU": 1.0, "GPU": 1.0}, {"CPU": 0.5}, {"CPU": 0.5}, {"CPU": 0.5}]
    # evaluation workers only count while evaluation is on
    assert bundles(PPO, {"backend": "ray", "num_workers": 1,
                         "evaluation_num_workers": 2}) == [{"CPU": 1.0}] * 2
    # the local backend's workers live in the trial's own process; PPO's default is 2
    assert bundles(PPO, {}) == [{"CPU": 1.0}]
    # a bad value leaves the request at the default; setup() reports it
    assert bundles(PPO, {"backend": "ray", "num_workers": -1}) == [{"CPU": 1.0}]
    assert bundles(PPO, {"backend": "ray", "num_workers": float("inf")}) == [{"CPU": 1.0}]
    pgf = trainable(PPO).default_resource_request({"backend": "ray", "num_workers": 1})
    assert pgf.bundles == [{"CPU": 1.0}, {"CPU": 1.0}] and pgf.strategy == "PACK"


def test_trainable_takes_a_name_or_an_algorithm_class_and_nothing_else():
    from flowrl.algorithms import PG, PPO
    from flowrl.tune import FlowRLTrainable, trainable
    assert trainable("ppo") is trainable(PPO) and trainable(PG).__name__ == "PG"
    assert issubclass(trainable("dqn"), FlowRLTrainable)
    with pytest.raises(ConfigError, match="unknown algorithm 'pop'; did you mean 'ppo'"):
        trainable("pop")
    with pytest.raises(ConfigError, match=r"trainable\(dict\): give an algorithm name"):
        trainable(dict)


def test_importing_flowrl_does_not_import_ray_tune():
    code = ("import sys, flowrl, flowrl.algorithms, flowrl.cli, flowrl.sweep; "
            "print('ray.tune' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, "PYTHONPATH": ROOT}, check=True)
    assert out.stdout.strip() == "False"


# -- the trainable, driven directly (PBT's exploit is save + restore) ----------------------
def _policy_state(t):
    policy = t.algo.get_policy()
    return policy.get_weights(), policy.optimizer


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_loading_another_trials_checkpoint_clones_weights_optimizer_and_counters(ray_session):
    from flowrl.tune import trainable
    cls = trainable("ppo")
    source = cls(config={**SMALL, "lr": 1e-3, "seed": 1})
    target = cls(config={**SMALL, "lr": 5e-4, "seed": 2})
    try:
        for _ in range(3):
            last = source.train()
        target.train()
        saved = source.save()                       # what PBT does to the trial it copies
        target.restore(saved)
        w_src, opt_src = _policy_state(source)
        w_dst, opt_dst = _policy_state(target)
        assert w_src.keys() == w_dst.keys()
        for k in w_src:
            np.testing.assert_array_equal(w_src[k], w_dst[k])
        s_src, s_dst = opt_src.state_dict(), opt_dst.state_dict()
        assert s_src["state"].keys() == s_dst["state"].keys() and s_src["state"]
        for k, st in s_src["state"].items():
            for name, value in st.items():
                np.testing.assert_array_equal(np.asarray(value),
                                              np.asarray(s_dst["state"][k][name]))
        # counters are the source's: the clone continues from where it stood
        src_counters = dict(source.algo.metrics.counters)
        assert dict(target.algo.metrics.counters) == src_counters
        assert target.training_iteration == 3 == last["training_iteration"]
        # ... but trains with its own (mutated) learning rate, not the source's
        assert [g["lr"] for g in opt_dst.param_groups] == [5e-4]
        assert [g["lr"] for g in opt_src.param_groups] == [1e-3]
        nxt = target.train()
        assert nxt["training_iteration"] == 4
        assert nxt["timesteps_total"] == last["timesteps_total"] + 128
        assert nxt["info"]["learner"]["default_policy"]["cur_lr"] == 5e-4
        json.dumps(nxt)  # plain Python values only (NaN stays a float)
    finally:
        source.stop()
        target.stop()


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_a_checkpoint_round_trips_into_a_fresh_trainable_and_reset_config_rebuilds(
        ray_session):
    from flowrl.tune import trainable
    cls = trainable("pg")
    cfg = dict(env="CartPole-v1", num_workers=0, rollout_fragment_length=50,
               train_batch_size=50)
    a = cls(config=cfg)
    b = None
    try:
        a.train()
        r = a.train()
        saved = a.save()
        b = cls(config=cfg)
        b.restore(saved)
        assert dict(b.algo.metrics.counters) == dict(a.algo.metrics.counters)
        assert b.train()["timesteps_total"] == r["timesteps_total"] + 50
        old = b.algo
        assert b.reset({**cfg, "lr": 0.01}) is True
        assert b.algo is not old and b.algo.config.lr == 0.01
        assert b.train()["timesteps_total"] == 50   # a new trial starts from zero
        with pytest.raises(ConfigError, match="no algorithm/ inside"):
            b.load_checkpoint(os.path.dirname(saved.checkpoint.path))
    finally:
        a.stop()
        if b is not None:
            b.stop()


def _failing_callbacks():
    from flowrl.callbacks import DefaultCallbacks

    class FailsAtSecondResult(DefaultCallbacks):
        def on_train_result(self, *, algorithm, result, **kwargs):
            if result["training_iteration"] == 2:
                raise RuntimeError("score table full\nsecond line")
    return FailsAtSecondResult


@pytest.mark.ray
@pytest.mark.timeout(120)
def test_a_failing_step_raises_flowrls_one_line_reason(ray_session):
    from flowrl.errors import TrialError
    from flowrl.tune import trainable
    t = trainable("pg")(config=dict(env="CartPole-v1", num_workers=0,
                                    rollout_fragment_length=50, train_batch_size=50,
                                    callbacks=_failing_callbacks()))
    try:
        t.train()
        with pytest.raises(TrialError) as info:
            t.train()
        reason = str(info.value)
        assert "\n" not in reason and reason.startswith("OperatorError: ")
        assert "on_train_result" in reason and "score table full" in reason
        assert info.value.__cause__ is not None
    finally:
        t.stop()


# -- real Tune runs -------------------------------------------------------------------------
def _worker_placement_group(worker):
    import ray
    pg = ray.util.get_current_placement_group()
    return None if pg is None else pg.id.hex()


def _probe():
    """A PPO trainable that also reports the placement groups of its process and of
    its rollout workers."""
    import ray

    from flowrl.tune import trainable

    class Probe(trainable("ppo")):
        def step(self):
            result = super().step()
            pg = ray.util.get_current_placement_group()
            result["trial_pg"] = None if pg is None else pg.id.hex()
            result["worker_pgs"] = self.algo.workers.foreach_worker(_worker_placement_group)[1:]
            return result
    return Probe


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_two_trials_with_ray_workers_on_two_cpus_finish_with_workers_in_their_groups(
        ray_session, tmp_path):
    from ray import tune
    grid = tune.Tuner(
        _probe(), param_space={**SMALL, "backend": "ray", "num_workers": 1,
                               "seed": tune.grid_search([0, 1])},
        # the second trial reuses the first one's process and group (reset_config)
        tune_config=tune.TuneConfig(reuse_actors=True),
        run_config=run_config(tmp_path, "pg", stop={"training_iteration": 1})).fit()
    # each trial needs both CPUs: without its group reserved up front, two trial
    # processes would take one CPU each and their workers would wait forever
    assert len(grid) == 2 and not grid.errors
    for r in grid:
        assert r.metrics["training_iteration"] == 1
        assert r.metrics["num_healthy_workers"] == 1
        assert r.metrics["trial_pg"] is not None
        assert r.metrics["worker_pgs"] == [r.metrics["trial_pg"]]


@pytest.mark.ray
@pytest.mark.timeout(240)
def test_a_failing_trial_reports_flowrls_one_line_reason_and_the_others_go_on(
        ray_session, tmp_path):
    from ray import tune

    from flowrl.sweep import trial_error
    from flowrl.tune import trainable
    grid = tune.Tuner(
        trainable("ppo"), param_space={**SMALL, "lr": tune.grid_search([1e-3, -1.0])},
        run_config=run_config(tmp_path, "fail", stop={"training_iteration": 2})).fit()
    ok = [r for r in grid if r.error is None]
    failed = [r for r in grid if r.error is not None]
    assert len(ok) == len(failed) == 1
    assert ok[0].config["lr"] == 1e-3 and ok[0].metrics["training_iteration"] == 2
    assert "lr=-1" in os.path.basename(failed[0].path)
    reason = trial_error(failed[0].error)
    assert reason == "ConfigError: PPOConfig.lr=-1.0: must be a number > 0 and <= 10"


RESUME_SCRIPT = textwrap.dedent("""
    import os, signal, sys
    import ray
    from ray import tune
    from flowrl.tune import trainable

    ray.init(address=sys.argv[1], log_to_driver=False, configure_logging=False)

    class KillAfterThird(tune.Callback):
        # Tuner.restore brings the run's callbacks back too: only this process dies
        def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
            if (os.environ.get("FLOWRL_TEST_KILL") == "1"
                    and trial.last_result.get("training_iteration", 0) >= 3):
                os.kill(os.getpid(), signal.SIGKILL)   # no clean shutdown at all

    small = dict(env="CartPole-v1", num_workers=0, num_envs_per_worker=1,
                 rollout_fragment_length=64, train_batch_size=128, sgd_minibatch_size=64,
                 num_sgd_iter=1)
    tune.Tuner(trainable("ppo"), param_space=small,
               run_config=tune.RunConfig(
                   name="resume", storage_path=sys.argv[2], verbose=0,
                   stop={"training_iteration": 6}, callbacks=[KillAfterThird()],
                   checkpoint_config=tune.CheckpointConfig(checkpoint_frequency=1))).fit()
    print("not killed")
""")


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_restoring_a_killed_experiment_continues_each_trial_from_its_checkpoint(
        ray_session, tmp_path):
    import ray
    from ray import tune

    from flowrl.tune import trainable
    script = tmp_path / "sweep.py"
    script.write_text(RESUME_SCRIPT)
    paths = [ROOT, os.environ.get("PYTHONPATH", "")]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths),
           "TUNE_GLOBAL_CHECKPOINT_S": "0",  # experiment state written at every step
           "FLOWRL_TEST_KILL": "1"}
    proc = subprocess.run([sys.executable, str(script), ray.get_runtime_context().gcs_address,
                           str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=240)
    assert proc.returncode == -9, proc.stdout + proc.stderr[-3000:]
    path = str(tmp_path / "resume")
    assert tune.Tuner.can_restore(path)
    grid = tune.Tuner.restore(path, trainable("ppo"), resume_unfinished=True).fit()
    (result,) = list(grid)
    assert result.error is None and result.metrics["training_iteration"] == 6
    rows = progress(result.path)
    iterations = [r["training_iteration"] for r in rows]
    # the restored run starts at its checkpoint's iteration + 1 (Tune counts
    # iterations_since_restore from 1 again), never at 1, and so do the counters. The
    # rows of the killed run are there only if Tune's background upload of the trial's
    # files (driver_artifacts to storage_path) finished before the kill: under load
    # it may not have (a CI run lost iterations 1-2), so only the restored rows count
    starts = [k for k, r in enumerate(rows) if r["iterations_since_restore"] == 1]
    assert 1 <= len(starts) <= 2 and iterations.count(1) <= 1, iterations
    restored = iterations[starts[-1]:]
    assert restored[0] >= 2 and restored == list(range(restored[0], 7)), iterations
    for r in rows:
        assert r["timesteps_total"] == 128 * r["training_iteration"]


# -- sweep specs ------------------------------------------------------------------------
@pytest.mark.parametrize("data, match", [
    ({"algo": "ppo", "env": "CartPole-v1", "num_sample": 2},
     "unknown key 'num_sample'; did you mean 'num_samples'"),
    ({"algo": "ppo", "env": "CartPole-v1", "config": {"lr_rate": 0.1}},
     "unknown field 'lr_rate' in ppo config; did you mean 'lr'"),
    ({"algo": "ppo", "env": "CartPole-v1", "config": {"lr": {"uniform": [0.1, 0.01]}}},
     r"config.lr: \{uniform: \[low, high\]\} takes two numbers with low < high"),
    ({"algo": "ppo", "env": "CartPole-v1", "config": {"lr": {"loguniform": [0, 0.01]}}},
     r"config.lr: \{loguniform: \[low, high\]\} needs 0 < low"),
    ({"algo": "ppo", "env": "CartPole-v1", "config": {"lr": {"choice": []}}},
     r"config.lr: \{choice: ...\} takes a non-empty list"),
    ({"algo": "ppo", "env": "CartPole-v1", "config": {"num_sgd_iter": {"uniform": [1, 9]}}},
     r"config.num_sgd_iter: uniform value 1.0: PPOConfig.num_sgd_iter=1.0: must be an int"),
    ({"algo": "ppo", "env": "CartPole-v1",
      "config": {"sgd_minibatch_size": {"grid_search": [64, 4096]}}},
     "config.sgd_minibatch_size: grid_search value 4096"),
    ({"algo": "ppo", "env": "CartPole-v1", "stop": {"reward": 400}},
     "stop.reward: unknown stop criterion 'reward'"),
    ({"algo": "ppo", "env": "CartPole-v1", "scheduler": "hyperband"},
     r"scheduler.type='hyperband': choose one of \['asha', 'pbt'\]"),
    ({"algo": "ppo", "env": "CartPole-v1", "scheduler": {"type": "asha", "grace_perod": 3}},
     "scheduler \\(asha\\): unknown parameter 'grace_perod'; did you mean 'grace_period'"),
    ({"algo": "ppo", "env": "CartPole-v1",
      "scheduler": {"type": "asha", "max_t": 4, "grace_period": 5}},
     "grace_period=5 is above max_t=4"),
    ({"algo": "ppo", "env": "CartPole-v1", "scheduler": "pbt"},
     "scheduler \\(pbt\\): give hyperparam_mutations"),
    ({"algo": "ppo", "env": "CartPole-v1",
      "scheduler": {"type": "pbt", "hyperparam_mutations": {"learning_rate": [0.1]}}},
     "hyperparam_mutations: unknown config field 'learning_rate'"),
    ({"algo": "ppo", "env": "CartPole-v1", "mode": "maximize"}, "mode='maximize': must be max"),
    ({"algo": "ppo", "env": "CartPole-v1", "config": {"env": "CartPole-v1"}},
     "give the env once"),
    ({"algo": "ppo"}, "give the env"),
    ({"env": "CartPole-v1"}, "give the algorithm"),
])
def test_a_bad_sweep_spec_is_a_config_error_naming_the_problem(data, match):
    from flowrl.sweep import check_sweep
    with pytest.raises(ConfigError, match=match):
        check_sweep(data)


def test_a_sweep_spec_becomes_tunes_param_space_and_scheduler():
    from ray.tune.schedulers import ASHAScheduler, PopulationBasedTraining
    from ray.tune.search.sample import Categorical, Float

    from flowrl.sweep import check_sweep, make_scheduler, param_space
    spec = check_sweep({
        "algo": "PPO", "env": "CartPole-v1", "num_samples": 3,
        "config": {"lr": {"loguniform": ["1e-4", 1e-2]}, "num_sgd_iter": {"choice": [2, 4]},
                   "train_batch_size": {"grid_search": [256, 512]}, "num_workers": 0},
        "scheduler": {"type": "asha", "max_t": 20, "grace_period": 2}})
    space = param_space(spec)
    assert space["env"] == "CartPole-v1" and space["num_workers"] == 0
    assert isinstance(space["lr"], Float) and isinstance(space["num_sgd_iter"], Categorical)
    assert (space["lr"].lower, space["lr"].upper) == (1e-4, 1e-2)  # YAML's string "1e-4" read
    assert space["train_batch_size"] == {"grid_search": [256, 512]}
    assert isinstance(make_scheduler(spec), ASHAScheduler)
    pbt = check_sweep({"algo": "ppo", "env": "CartPole-v1", "scheduler": {
        "type": "pbt", "perturbation_interval": 2, "time_attr": "training_iteration",
        "hyperparam_mutations": {"lr": {"uniform": [1e-4, 1e-2]}, "num_sgd_iter": [1, 2]}}})
    assert isinstance(make_scheduler(pbt), PopulationBasedTraining)
    assert check_sweep({"algo": "ppo", "env": "CartPole-v1"})["scheduler"] is None


def test_flowrl_tune_refuses_a_bad_spec_before_any_trial_starts(tmp_path, capsys):
    from flowrl.cli import main
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"algo: ppo\nenv: CartPole-v1\nstorage_path: {tmp_path / 'runs'}\n"
                     "config:\n  lr: {choice: [0.001, 0]}\n")
    assert main(["tune", "--config", str(sweep)]) == 2
    err = capsys.readouterr().err
    assert f"--config '{sweep}': config.lr: choice value 0: PPOConfig.lr=0" in err
    assert not (tmp_path / "runs").exists()
    # --set fixes the file's problem; a name that is no sweep key is a config field
    assert main(["tune", "--config", str(sweep), "--set", "lr=0.01",
                 "--set", "lr_rate=0.1"]) == 2
    assert "unknown field 'lr_rate' in ppo config; did you mean 'lr'" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


@pytest.mark.ray
@pytest.mark.timeout(300)
def test_flowrl_tune_runs_a_pbt_sweep_and_prints_the_best_trial(ray_session, tmp_path,
                                                                 capsys):
    from flowrl.cli import main
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(textwrap.dedent(f"""
        algo: ppo
        env: CartPole-v1
        config:
          num_workers: 0
          num_envs_per_worker: 1
          rollout_fragment_length: 64
          train_batch_size: 128
          sgd_minibatch_size: 64
          num_sgd_iter: 1
          lr: {{choice: [0.0005, 0.002]}}
        stop: {{training_iteration: 4}}
        num_samples: 2
        scheduler:
          type: pbt
          time_attr: training_iteration
          perturbation_interval: 2
          quantile_fraction: 0.5
          hyperparam_mutations: {{lr: [0.0005, 0.001, 0.002]}}
        storage_path: {tmp_path / 'runs'}
        name: pbt
    """))
    assert main(["tune", "--config", str(sweep), "--quiet"]) == 0
    out = capsys.readouterr().out
    assert "trials: 2 (2 finished, 0 failed)" in out
    assert "best trial: PPO_CartPole-v1_" in out and "config: lr=" in out
    assert f"experiment: {tmp_path / 'runs' / 'pbt'}" in out
    trial_dirs = [d for d in (tmp_path / "runs" / "pbt").iterdir() if d.is_dir()]
    assert len(trial_dirs) == 2
    for d in trial_dirs:
        rows = progress(d)
        assert rows[-1]["training_iteration"] == 4
        assert all(r["timesteps_total"] == 128 * r["training_iteration"] for r in rows)
    # --resume continues that experiment (here: every trial already finished)
    assert main(["tune", "--config", str(sweep), "--quiet", "--resume"]) == 0
    out = capsys.readouterr().out
    assert "resumed trials: 2 (2 finished, 0 failed)" in out
    assert sorted(p.name for p in (tmp_path / "runs").iterdir()) == ["pbt"]


def test_the_example_sweep_is_8_ppo_cartpole_trials_with_asha():
    from flowrl.sweep import load_sweep
    spec = load_sweep(os.path.join(ROOT, "examples", "tune_sweep.yaml"))
    assert (spec["algo"], spec["env"], spec["num_samples"]) == ("ppo", "CartPole-v1", 8)
    assert spec["scheduler"]["type"] == "asha" and spec["stop"]["episode_reward_mean"] == 450
    quick = load_sweep(os.path.join(ROOT, "examples", "tune_sweep.yaml"),
                       ["num_samples=2", "stop.timesteps_total=4096", "search_seed=3"])
    assert quick["num_samples"] == 2 and quick["stop"]["timesteps_total"] == 4096
    assert quick["search_seed"] == 3 and quick["config"]["lr"] == {"loguniform": [3e-4, 3e-3]}
