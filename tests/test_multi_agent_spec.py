"""Multi-agent runs from a YAML spec: the ``flowrl/MultiAgentCartPole-v1`` id and the
``{agent_id: policy_id}`` table as ``multiagent.policy_mapping_fn``."""

from __future__ import annotations

import json
import textwrap

import pytest

from flowrl.algorithms import PPO, PPOConfig
from flowrl.cli import main
from flowrl.errors import ConfigError
from flowrl.policies import PGPolicy
from flowrl.workers import MultiAgentEnv, RolloutWorker, make_multi_agent

MA_CARTPOLE = "flowrl/MultiAgentCartPole-v1"


@pytest.mark.timeout(60)
def test_table_maps_each_agent_to_its_policy_and_a_missing_agent_is_named():
    w = RolloutWorker(make_multi_agent("CartPole-v1", 2), policies={"a": PGPolicy, "b": PGPolicy},
                      policy_mapping_fn={0: "a", 1: "b"}, rollout_fragment_length=10)
    batch = w.sample()
    assert set(batch.policy_batches) == {"a", "b"}
    for pid, agent in (("a", 0), ("b", 1)):   # each policy holds its own agent's rows only
        assert set(batch.policy_batches[pid]["agent_index"].tolist()) == {agent}
    with pytest.raises(ConfigError, match=r"maps no policy to agent 1; add 1: <policy id>"):
        RolloutWorker(make_multi_agent("CartPole-v1", 2), policies={"a": PGPolicy},
                      policy_mapping_fn={0: "a"}, rollout_fragment_length=10)


@pytest.mark.timeout(60)
def test_bad_table_or_env_config_is_a_config_error_naming_the_field():
    with pytest.raises(ConfigError, match=r"PPOConfig.multiagent\['policy_mapping_fn'\]\[1\]="
                                          r"'p2': no such policy in multiagent.policies"):
        PPOConfig(env=MA_CARTPOLE, multiagent={"policies": {"p0": None, "p1": None},
                                               "policy_mapping_fn": {0: "p0", 1: "p2"}})
    with pytest.raises(ConfigError, match=r"PPOConfig.multiagent=.*policy_mapping_fn: a "
                                          r"callable or an \{agent_id: policy_id\} dict"):
        PPOConfig(env=MA_CARTPOLE, multiagent={"policies": {"p0": None},
                                               "policy_mapping_fn": {0: 7}})
    with pytest.raises(ConfigError, match=r"PPOConfig.env_config: 'flowrl/MultiAgentCartPole-v1' "
                                          r"takes no argument 'agents'; it takes \['num_agents'\]"):
        PPOConfig(env=MA_CARTPOLE, env_config={"agents": 3})
    with pytest.raises(ConfigError, match=r"PPOConfig.env='flowrl/MultiAgentCartPol-v1': unknown "
                                          r"gymnasium environment; did you mean one of "
                                          r"\['flowrl/MultiAgentCartPole-v1'"):
        PPOConfig(env="flowrl/MultiAgentCartPol-v1")
    with pytest.raises(ConfigError, match=r"num_agents'\]=0 .*must be an int >= 1"):
        PPO(PPOConfig(env=MA_CARTPOLE, env_config={"num_agents": 0}, num_workers=0))


@pytest.mark.timeout(120)
def test_a_yaml_spec_trains_one_policy_per_agent(tmp_path):
    spec = tmp_path / "ma.yaml"
    spec.write_text(textwrap.dedent(f"""
        algo: ppo
        env: {MA_CARTPOLE}
        stop: {{training_iteration: 2}}
        config:
          env_config: {{num_agents: 3}}
          multiagent:
            policies: {{p0: null, p1: null}}
            policy_mapping_fn: {{0: p0, 1: p1, 2: p1}}
          backend: local
          num_workers: 1
          num_envs_per_worker: 2
          rollout_fragment_length: 32
          train_batch_size: 128
          sgd_minibatch_size: 64
          num_sgd_iter: 1
          seed: 0
        """))
    assert main(["train", "--config", str(spec), "--run-dir", str(tmp_path / "runs"), "--quiet",
                 "--no-tensorboard"]) == 0
    (run_dir,) = list((tmp_path / "runs").iterdir())
    results = [json.loads(line) for line in (run_dir / "result.jsonl").read_text().splitlines()]
    assert [r["training_iteration"] for r in results] == [1, 2]
    learner = results[-1]["info"]["learner"]
    assert set(learner) == {"p0", "p1"}
    assert set(results[-1]["policy_reward_mean"]) == {"p0", "p1"}


@pytest.mark.timeout(60)
def test_the_id_builds_independent_copies_on_a_worker():
    w = RolloutWorker(MA_CARTPOLE, policies={"p": PGPolicy}, env_config={"num_agents": 3},
                      rollout_fragment_length=10)
    assert isinstance(w.env, MultiAgentEnv) and w.env.possible_agents == [0, 1, 2]
    rows = w.sample().policy_batches["p"]
    assert set(rows["agent_index"].tolist()) == {0, 1, 2} and rows.count <= 30  # 10 env steps
