"""CQL: the conservative penalty against a hand computation, the Lagrangian weight,
behaviour cloning first, training from a recorded Pendulum dataset without stepping
an env, checkpoints, CLI, bad input, and learning from SAC's first Pendulum steps."""

from __future__ import annotations

import json
import math
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from flowrl.algorithms import CQL, SAC, CQLConfig
from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError
from flowrl.offline.writer import DatasetWriter
from flowrl.policies.cql import CQLPolicy, cql_penalty

pytestmark = pytest.mark.usefixtures("one_torch_thread")

SMALL = dict(Q_model=[16], policy_model=[16], train_batch_size=32, num_actions=2, seed=0)
PENDULUM_SPACES = (gym.spaces.Box(-8.0, 8.0, (3,), np.float32),
                   gym.spaces.Box(-2.0, 2.0, (1,), np.float32))


class NoStepsPendulum(gym.Env):
    """Pendulum's spaces; stepping it fails (CQL must never step its env)."""

    observation_space = gym.spaces.Box(np.array([-1, -1, -8], np.float32),
                                       np.array([1, 1, 8], np.float32))
    action_space = gym.spaces.Box(-2.0, 2.0, (1,), np.float32)

    def __init__(self, config=None):
        pass

    def reset(self, *, seed=None, options=None):
        return np.zeros(3, np.float32), {}

    def step(self, action):
        raise AssertionError("CQL stepped its env")


def scripted_pendulum(obs: np.ndarray, rng: np.random.Generator, noise: float) -> np.ndarray:
    """A swing-up controller: pump energy until near the top, then a PD law on the
    angle (about -130 a Pendulum episode, where random play scores about -1200)."""
    c, s, w = obs
    if c > 0.6:
        u = -(12.0 * math.atan2(s, c) + 2.5 * w)
    else:
        energy = 0.5 * w * w + 15.0 * (c - 1.0)
        u = (2.0 if w >= 0 else -2.0) if energy < 0 else -0.5 * w
    return np.clip([u + noise * rng.normal()], -2.0, 2.0).astype(np.float32)


def record_scripted(path: str, episodes: int, *, noise: float = 1.0, drop=()) -> str:
    """``episodes`` Pendulum episodes of :func:`scripted_pendulum` written as a
    dataset at ``path`` (one file row group per episode), without ``drop`` columns."""
    env = gym.make("Pendulum-v1")
    rng = np.random.default_rng(0)
    writer = DatasetWriter(path, format="parquet")
    for ep in range(episodes):
        obs, _ = env.reset(seed=ep)
        cols = {k: [] for k in ("obs", "actions", "rewards", "new_obs", "terminateds",
                                "truncateds", "t")}
        done, t = False, 0
        while not done:
            a = scripted_pendulum(obs, rng, noise)
            nxt, r, term, trunc, _ = env.step(a)
            for k, v in zip(cols, (obs, a, r, nxt, term, trunc, t)):
                cols[k].append(v)
            obs, t, done = nxt, t + 1, term or trunc
        batch = {k: np.asarray(v) for k, v in cols.items() if k not in drop}
        batch["eps_id"] = np.full(t, ep, np.int64)
        writer.write(SampleBatch(batch))
    writer.close()
    return path


def replay_batch(n: int = 8, *, seed: int = 0) -> SampleBatch:
    rng = np.random.default_rng(seed)
    return SampleBatch(obs=rng.normal(size=(n, 3)).astype(np.float32),
                       actions=rng.uniform(-2, 2, (n, 1)).astype(np.float32),
                       rewards=rng.normal(size=n).astype(np.float32),
                       new_obs=rng.normal(size=(n, 3)).astype(np.float32),
                       terminateds=np.zeros(n, bool),
                       n_step_discount=np.full(n, 0.99, np.float32))


# -- the loss ----------------------------------------------------------------------------

def test_penalty_matches_a_hand_computation():
    q_data = torch.tensor([1.0, -2.0])
    q_sampled = torch.tensor([[0.0, 1.0, 2.0], [-1.0, 0.5, 3.0]])
    log_density = torch.tensor([[0.5, -1.0, 0.0], [0.0, 0.0, 2.0]])
    T, beta = 2.0, 5.0
    rows = [T * math.log(sum(math.exp((q - d) / T) for q, d in zip(qs, ds)))
            for qs, ds in zip(q_sampled.tolist(), log_density.tolist())]
    expected = beta * (sum(rows) / 2 - (1.0 - 2.0) / 2)
    got = cql_penalty(q_data, q_sampled, log_density, temperature=T, min_q_weight=beta)
    assert float(got) == pytest.approx(expected, rel=1e-6)


def test_policy_penalty_uses_uniform_current_and_next_actions_with_their_densities():
    """The policy's P_1 equals the formula rebuilt by hand from the same draws."""
    p = CQLPolicy(*PENDULUM_SPACES, Q_model=[8], policy_model=[8], num_actions=3, seed=0,
                  min_q_weight=2.0, temperature=0.5, twin_q=False)
    batch = replay_batch(4)
    t = p._tensors(batch)
    q_data = p._critic_values(t)
    state = p.generator.get_state()
    (got,) = p.penalties(t, q_data)
    p.generator.set_state(state)   # the same draws, in the same order
    n, B = 3, 4
    uniform = torch.rand(B * n, 1, generator=p.generator) * 2 - 1
    from flowrl.policies.distributions import SquashedGaussian
    with torch.no_grad():
        cur, logp_cur = SquashedGaussian(p.model.policy(
            t["obs"].repeat_interleave(n, 0))).rsample_logp(p.generator)
        nxt, logp_nxt = SquashedGaussian(p.model.policy(
            t["next_obs"].repeat_interleave(n, 0))).rsample_logp(p.generator)
        q = p.model.critics.q[0]
        obs_n = t["obs"].repeat_interleave(n, 0)
        terms = torch.cat([(q(obs_n, uniform) - math.log(0.5)).reshape(B, n),
                           (q(obs_n, nxt) - logp_nxt).reshape(B, n),
                           (q(obs_n, cur) - logp_cur).reshape(B, n)], dim=1)
        expected = 2.0 * (0.5 * torch.logsumexp(terms / 0.5, 1).mean()
                          - q(t["obs"], t["actions"]).mean())
    assert got.item() == pytest.approx(expected.item(), rel=1e-5)


def test_discrete_penalty_is_the_exact_logsumexp_over_actions():
    p = CQLPolicy(gym.spaces.Box(-1, 1, (2,)), gym.spaces.Discrete(3), Q_model=[8],
                  policy_model=[8], seed=0, twin_q=False, min_q_weight=1.0)
    batch = SampleBatch(obs=np.eye(2, dtype=np.float32), actions=np.array([0, 2]),
                        rewards=np.zeros(2, np.float32), new_obs=np.eye(2, dtype=np.float32),
                        terminateds=np.zeros(2, bool), n_step_discount=np.ones(2, np.float32))
    t = p._tensors(batch)
    with torch.no_grad():
        q_all = p.model.critics(t["obs"])[0]
        (got,) = p.penalties(t, p._critic_values(t))
    expected = (torch.logsumexp(q_all, 1).mean() - q_all[[0, 1], [0, 2]].mean())
    assert float(got) == pytest.approx(float(expected), rel=1e-6)
    assert "cql_loss" in p.learn_on_batch(batch)


def test_penalty_lowers_q_off_the_data_relative_to_on_it():
    """Against the same updates without the penalty (min_q_weight=0), Q of the
    data's actions ends higher than Q of other actions of the same states."""
    batch = replay_batch(64)

    def gap(min_q_weight):
        p = CQLPolicy(*PENDULUM_SPACES, Q_model=[32], policy_model=[16], seed=0,
                      twin_q=False, critic_learning_rate=1e-2, min_q_weight=min_q_weight)
        for _ in range(60):
            p.learn_on_batch(batch)
        t = p._tensors(batch)
        with torch.no_grad():
            return float((p.model.critics(t["obs"], t["actions"])[0]
                          - p.model.critics(t["obs"], -t["actions"])[0]).mean())

    assert gap(5.0) > gap(0.0) + 0.1


@pytest.mark.parametrize("thresh, grows", [(-100.0, True), (100.0, False)])
def test_lagrangian_alpha_prime_follows_the_gap(thresh, grows):
    """α' grows while the penalty exceeds lagrangian_thresh and shrinks below it."""
    p = CQLPolicy(*PENDULUM_SPACES, Q_model=[8], policy_model=[8], seed=0, lagrangian=True,
                  lagrangian_thresh=thresh)
    assert p.alpha_prime == 1.0
    for _ in range(5):
        stats = p.learn_on_batch(replay_batch())
    assert (p.alpha_prime > 1.0) is grows and p.alpha_prime != 1.0
    assert stats["alpha_prime_value"] == pytest.approx(p.alpha_prime, rel=1e-2)
    assert "alpha_prime_loss" in stats


def test_bc_iters_train_the_actor_by_cloning_the_data_then_by_q():
    p = CQLPolicy(*PENDULUM_SPACES, Q_model=[8], policy_model=[8], seed=0, bc_iters=2)
    batch = replay_batch()
    t = p._tensors(batch)
    out = p.model.policy(t["obs"])
    from flowrl.policies.distributions import SquashedGaussian
    data_logp = SquashedGaussian(out).logp(t["actions"])
    torch.testing.assert_close(p.actor_objective(t, out, None), data_logp)
    flags = [p.learn_on_batch(batch)["bc_actor_loss"] for _ in range(3)]
    assert flags == [1.0, 1.0, 0.0] and p.updates == 3
    a_pi = torch.zeros(len(batch), 1)
    q = p.model.critics(t["obs"], a_pi)
    torch.testing.assert_close(p.actor_objective(t, out, a_pi), torch.min(*q))


def test_bc_phase_moves_the_policy_towards_the_data_actions():
    p = CQLPolicy(*PENDULUM_SPACES, Q_model=[8], policy_model=[16], seed=0, bc_iters=200,
                  actor_learning_rate=1e-2)
    batch = replay_batch(32)
    batch["actions"] = np.full((32, 1), 1.0, np.float32)   # unit action 0.5
    for _ in range(150):
        p.learn_on_batch(batch)
    actions, _ = p.compute_actions(batch["obs"], explore=False)
    assert np.abs(actions - 1.0).mean() < 0.3


def test_state_round_trips_the_update_count_and_alpha_prime():
    p = CQLPolicy(*PENDULUM_SPACES, Q_model=[8], policy_model=[8], seed=0, lagrangian=True)
    for _ in range(3):
        p.learn_on_batch(replay_batch())
    q = CQLPolicy(*PENDULUM_SPACES, Q_model=[8], policy_model=[8], seed=1, lagrangian=True)
    q.set_state(p.get_state())
    assert q.updates == 3 and q.alpha_prime == pytest.approx(p.alpha_prime)
    assert set(q.optimizers) == {"actor", "critic", "entropy", "alpha_prime"}


def test_unsupported_action_space_names_cql():
    with pytest.raises(ConfigError, match=r"CQL: the env's action space MultiDiscrete"):
        CQLPolicy(gym.spaces.Box(-1, 1, (2,)), gym.spaces.MultiDiscrete([2, 2]))


# -- the algorithm -----------------------------------------------------------------------

@pytest.fixture(scope="module")
def scripted_dataset(tmp_path_factory):
    return record_scripted(str(tmp_path_factory.mktemp("pendulum")), 20)


def test_trains_from_a_recorded_sac_dataset_without_stepping_an_env(tmp_path):
    data = str(tmp_path / "sac")
    with SAC(env="Pendulum-v1", output=data, learning_starts=400, timesteps_per_iteration=400,
             Q_model=[16], policy_model=[16], seed=0) as sac:
        sac.train()
    with CQL(env=NoStepsPendulum, input=data, timesteps_per_iteration=64, **SMALL) as algo:
        before = algo.get_policy().get_weights()
        r1 = algo.train()
        r2 = algo.train()
        after = algo.get_policy().get_weights()
        assert len(algo.local_replay_buffer) == 400   # loaded once, all of it
        dot = algo.plan.to_dot()
    assert r1["timesteps_total"] == r2["timesteps_total"] == 0
    assert r2["info"]["num_steps_trained"] == 128
    assert any(not np.array_equal(before[k], after[k]) for k in before)
    for node in ("cql/read_dataset", "cql/load", "cql/replay", "cql/train", "cql/update_target"):
        assert node in dot
    assert f"reads dataset {data} (parquet), once" in dot


def test_raw_trajectories_become_n_step_rows(tmp_path, scripted_dataset):
    with CQL(env=NoStepsPendulum, input=scripted_dataset, timesteps_per_iteration=32,
             n_step=3, **SMALL) as algo:
        algo.train()
        rows = algo.local_replay_buffer.sample(4000)
    assert len(algo.local_replay_buffer) == 20 * 200
    # every episode ends truncated: the last rows bootstrap with γ^k, k < 3
    np.testing.assert_allclose(np.unique(rows["n_step_discount"]),
                               [0.99 ** 3, 0.99 ** 2, 0.99], rtol=1e-6)


def test_checkpoint_restores_the_policy_and_reloads_the_dataset(tmp_path, scripted_dataset):
    cfg = CQLConfig(env="Pendulum-v1", input=scripted_dataset, timesteps_per_iteration=64,
                    bc_iters=3, **SMALL)
    with CQL(cfg) as algo:
        algo.train()
        algo.save(str(tmp_path / "ckpt"))
        weights = algo.get_policy().get_weights()
    with CQL.from_checkpoint(str(tmp_path / "ckpt")) as restored:
        assert restored.get_policy().updates == 2
        for k, v in restored.get_policy().get_weights().items():
            np.testing.assert_array_equal(v, weights[k])
        r = restored.train()
        assert len(restored.local_replay_buffer) == 4000
        assert r["training_iteration"] == 2
        assert r["info"]["learner"]["default_policy"]["bc_actor_loss"] == 0.0


def test_evaluation_steps_an_env(scripted_dataset):
    with CQL(env="Pendulum-v1", input=scripted_dataset, timesteps_per_iteration=32,
             evaluation_interval=1, evaluation_duration=1, **SMALL) as algo:
        r = algo.train()
    assert r["timesteps_total"] == 0
    assert r["evaluation"]["episodes_this_iter"] == 1
    assert r["evaluation"]["episode_len_mean"] == 200


def test_bad_input_is_a_config_error(tmp_path, scripted_dataset):
    no_next = record_scripted(str(tmp_path / "no_next"), 1, drop=("new_obs",))
    with pytest.raises(ConfigError, match=r"CQL: dataset file .*no_next.* has no column "
                                          r"'new_obs', which CQL needs"):
        CQL(env="Pendulum-v1", input=no_next, **SMALL)
    with pytest.raises(ConfigError, match="CQLConfig.input='sampler': CQL trains from a "
                                          "dataset only"):
        CQLConfig(env="Pendulum-v1")
    with pytest.raises(ConfigError, match=r"CQLConfig.num_actions=0"):
        CQLConfig(env="Pendulum-v1", input=scripted_dataset, num_actions=0)
    with pytest.raises(ConfigError, match=r"CQLConfig.temperature=0"):
        CQLConfig(env="Pendulum-v1", input=scripted_dataset, temperature=0)
    with pytest.raises(ConfigError, match=r"has obs rows of shape \(3,\).*observation space"):
        CQL(env="CartPole-v1", input=scripted_dataset, **SMALL)
    with CQL(env="Pendulum-v1", input=scripted_dataset, buffer_size=1000,
             learning_starts=0, **SMALL) as algo:
        with pytest.raises(Exception, match=r"CQLConfig.buffer_size=1000: the dataset has "
                                            r"4000 rows"):
            algo.train()


def test_cli_trains_cql(tmp_path, scripted_dataset):
    from flowrl.cli import main
    run = tmp_path / "runs"
    assert main(["train", "cql", "--env", "Pendulum-v1", "--set", f"input={scripted_dataset}",
                 "--set", "train_batch_size=32", "--set", "timesteps_per_iteration=32",
                 "--set", "Q_model=[16]", "--set", "policy_model=[16]",
                 "--stop-iters", "1", "--run-dir", str(run), "--quiet",
                 "--no-tensorboard"]) == 0
    (run_dir,) = list(run.iterdir())
    last = json.loads((run_dir / "result.jsonl").read_text().splitlines()[-1])
    assert last["training_iteration"] == 1 and last["timesteps_total"] == 0


SAC_REPLAY = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                          "tuned_examples", "data", "pendulum-sac-replay")


@pytest.mark.slow
@pytest.mark.timeout(900)
def test_learns_from_sacs_first_steps_on_pendulum():
    """From the first 10k steps SAC took on Pendulum (its training episodes averaged
    -480 by then), 8000 CQL updates give a greedy policy that beats random play
    (about -1200) clearly and the recorded behaviour; the env was never stepped."""
    cfg = CQLConfig(env=NoStepsPendulum, input=SAC_REPLAY, train_batch_size=256,
                    timesteps_per_iteration=256 * 1000, bc_iters=200, num_actions=4,
                    Q_model=[64, 64], policy_model=[64, 64],
                    optimization={"actor_learning_rate": 1e-3, "critic_learning_rate": 1e-3,
                                  "entropy_learning_rate": 1e-3}, seed=0)
    with CQL(cfg) as algo:
        for _ in range(8):
            r = algo.train()
        assert r["timesteps_total"] == 0 and r["info"]["num_steps_trained"] == 256 * 8000
        policy = algo.get_policy()
        env, returns = gym.make("Pendulum-v1"), []
        for episode in range(10):
            obs, _ = env.reset(seed=100 + episode)
            total, done = 0.0, False
            while not done:
                action, _ = policy.compute_actions(obs[None], explore=False)
                obs, reward, term, trunc, _ = env.step(action[0])
                total, done = total + reward, term or trunc
            returns.append(total)
    assert np.mean(returns) > -480
