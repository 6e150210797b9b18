"""Recording experience (``output``) and reading it back as the plan's source (``input``)."""

from __future__ import annotations

import base64
import glob
import io
import json
import os
import pickle
import signal
import subprocess
import sys
import textwrap
import time

import gymnasium as gym
import lz4.frame
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from flowrl import FlowRLWarning
from flowrl.algorithms import PG, PGConfig, PPO, PPOConfig
from flowrl.batch import MultiAgentBatch, SampleBatch
from flowrl.errors import ConfigError
from flowrl.offline import rllib_json
from flowrl.offline.reader import DatasetReader
from flowrl.offline.writer import DatasetWriter
from flowrl.policies import PGPolicy, PPOPolicy
from flowrl.policies.maths import discounted_returns
from flowrl.workers import RolloutWorker, WorkerConfig, WorkerSet, make_multi_agent

HERE = os.path.dirname(os.path.abspath(__file__))
RLLIB1X = os.path.join(HERE, "data", "rllib1x")
FORMATS = ("parquet", "json")
RECORDED = ("obs", "new_obs", "actions", "rewards", "terminateds", "truncateds",
            "action_logp", "eps_id", "t", "agent_index")


def files_of(path: str) -> list[str]:
    return sorted(f for f in glob.glob(os.path.join(path, "*")) if not
                  os.path.basename(f).startswith("."))


def read_all(path: str, fmt: str) -> list:
    return list(DatasetReader([path], format=fmt).read_pass(0))


def record(tmp_path, fmt: str, samples: int = 3, **kwargs):
    """A worker's ``samples`` batches, recorded to tmp_path/fmt."""
    out = str(tmp_path / fmt)
    w = RolloutWorker("CartPole-v1", policy=PPOPolicy, rollout_fragment_length=40, seed=0,
                      output=out, output_config={"format": fmt, **kwargs})
    batches = [w.sample() for _ in range(samples)]
    w.stop()
    return out, batches


# -- output ---------------------------------------------------------------------------

@pytest.mark.parametrize("fmt", FORMATS)
def test_recorded_rows_read_back_unchanged(tmp_path, fmt):
    out, batches = record(tmp_path, fmt)
    back = SampleBatch.concat_samples(read_all(out, fmt))
    sampled = SampleBatch.concat_samples(batches)
    for col in RECORDED:
        assert back[col].dtype == sampled[col].dtype, col
        np.testing.assert_array_equal(back[col], sampled[col], err_msg=col)
    assert not any(os.path.basename(f).startswith(".") for f in os.listdir(out))


@pytest.mark.parametrize("policy, env, n_step", [("sac", "Pendulum-v1", 1),
                                                   ("dqn", "CartPole-v1", 3)])
def test_q_learning_recordings_keep_the_episode_columns(tmp_path, policy, env, n_step):
    """A replay algorithm's rows are n-step rows (rewards, new_obs and the ends moved
    n steps on), and its recording still carries every column a reader of episodes
    needs: each (eps_id, t) once, t counting up within an episode, action_logp."""
    from flowrl.policies import DQNPolicy, SACPolicy
    out = str(tmp_path / "q")
    cls = {"sac": SACPolicy, "dqn": DQNPolicy}[policy]
    w = RolloutWorker(env, policy=cls, rollout_fragment_length=250, seed=0, output=out,
                      policy_config={"n_step": n_step})
    w.sample()
    w.stop()
    back = SampleBatch.concat_samples(read_all(out, "parquet"))
    assert set(RECORDED) | {"n_step_discount"} <= set(back.keys())
    rows = list(zip(back["eps_id"].tolist(), back["t"].tolist()))
    assert len(set(rows)) == len(rows) == 250
    for eps in set(back["eps_id"].tolist()):
        t = back["t"][back["eps_id"] == eps]
        np.testing.assert_array_equal(t, np.arange(t[0], t[0] + len(t)))
    assert np.isfinite(back["action_logp"]).all() and (back["agent_index"] == 0).all()
    # the ends are the bootstrap row's: an episode's last n rows carry its end
    ended = 0
    for eps in set(back["eps_id"].tolist()):
        flags = (back["terminateds"] | back["truncateds"])[back["eps_id"] == eps]
        if flags.any():
            ended += 1
            np.testing.assert_array_equal(flags, np.arange(len(flags)) >= len(flags) - n_step)
    assert ended > 0                              # an episode ended in the 250 steps
    if policy == "sac":                           # Pendulum: truncated at its 200th step
        assert back["t"][back["truncateds"]].tolist() == [199]


@pytest.mark.parametrize("fmt", FORMATS)
def test_images_stay_uint8(tmp_path, fmt):
    images = np.random.default_rng(0).integers(0, 255, (6, 8, 8, 3), dtype=np.uint8)
    w = DatasetWriter(str(tmp_path), format=fmt)
    w.write(SampleBatch(obs=images, new_obs=images[::-1], actions=np.arange(6)))
    w.close()
    (back,) = read_all(str(tmp_path), fmt)
    assert back["obs"].dtype == np.uint8 and back["new_obs"].dtype == np.uint8
    np.testing.assert_array_equal(back["obs"], images)


@pytest.mark.parametrize("fmt", FORMATS)
def test_read_columns_are_writable(tmp_path, fmt):
    """A learner may write into its batch (and torch warns on read-only arrays): no
    column may view the file's immutable buffers (Arrow's, or a pickle's bytes)."""
    images = np.zeros((4, 8, 8, 3), np.uint8)
    w = DatasetWriter(str(tmp_path), format=fmt)
    w.write(SampleBatch(obs=images, actions=np.arange(4), rewards=np.ones(4, np.float32)))
    w.close()
    (back,) = read_all(str(tmp_path), fmt)
    assert {k: back[k].flags.writeable for k in back.keys()} == dict.fromkeys(back.keys(), True)


@pytest.mark.parametrize("fmt", FORMATS)
def test_multi_agent_batches_recorded_per_policy(tmp_path, fmt):
    out = str(tmp_path / fmt)
    w = RolloutWorker(make_multi_agent("CartPole-v1", 2), policies={"p0": PGPolicy,
                                                                     "p1": PGPolicy},
                      policy_mapping_fn=lambda agent, episode: f"p{agent}",
                      rollout_fragment_length=30, seed=0, output=out,
                      output_config={"format": fmt})
    sampled = w.sample()
    w.stop()
    back = read_all(out, fmt)
    assert all(isinstance(b, MultiAgentBatch) for b in back)
    for pid in ("p0", "p1"):
        rows = SampleBatch.concat_samples([b.policy_batches[pid] for b in back
                                           if pid in b.policy_batches])
        np.testing.assert_array_equal(rows["obs"], sampled.policy_batches[pid]["obs"])
        np.testing.assert_array_equal(rows["agent_index"],
                                      sampled.policy_batches[pid]["agent_index"])


@pytest.mark.parametrize("fmt", FORMATS)
def test_recurrent_state_columns_recorded(tmp_path, fmt):
    out = str(tmp_path)
    w = RolloutWorker("CartPole-v1", policy=PPOPolicy,
                      policy_config={"model": {"use_lstm": True, "lstm_cell_size": 8}},
                      rollout_fragment_length=20, seed=0, output=out,
                      output_config={"format": fmt})
    sampled = w.sample()
    w.stop()
    (back,) = read_all(out, fmt)
    states = [c for c in sampled.keys() if c.startswith("state_")]
    assert states and all(c in back for c in states)
    for c in states + ["prev_actions", "prev_rewards"]:
        np.testing.assert_array_equal(back[c], sampled[c])


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(1, 30), min_size=1, max_size=8),
       max_rows=st.integers(1, 40), fmt=st.sampled_from(FORMATS))
def test_files_hold_at_most_max_rows_and_lose_none(tmp_path_factory, sizes, max_rows, fmt):
    out = str(tmp_path_factory.mktemp("rows"))
    w = DatasetWriter(out, format=fmt, max_rows_per_file=max_rows)
    start = 0
    for n in sizes:
        w.write(SampleBatch(t=np.arange(start, start + n), obs=np.zeros((n, 2), np.float32)))
        start += n
    w.close()
    reader = DatasetReader([out], format=fmt)
    per_file = {}
    for path, key in reader.pieces:
        per_file[path] = per_file.get(path, 0) + reader.read_piece(path, key).count
    assert max(per_file.values()) <= max_rows
    rows = np.concatenate([b["t"] for b in reader.read_pass(0)])
    assert sorted(rows.tolist()) == list(range(start))


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    import numpy as np
    from flowrl.batch import SampleBatch
    from flowrl.offline.writer import DatasetWriter
    w = DatasetWriter(sys.argv[1], format=sys.argv[2], max_rows_per_file=10000)
    images = np.zeros((100, 32, 32), np.uint8)
    i = 0
    while True:
        w.write(SampleBatch(obs=images + (i % 200), t=np.arange(i * 100, (i + 1) * 100)))
        i += 1
        if i == 110:  # one whole file, and 1,000 rows into the next
            print("ready", flush=True)
        if i >= 110:  # then 100 rows per 10 ms at most: the next boundary is 0.9 s away
            time.sleep(0.01)
""")


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_killed_writer_leaves_only_whole_files(tmp_path, fmt):
    out = str(tmp_path / "out")
    proc = subprocess.Popen([sys.executable, "-c", KILLED_WRITER, out, fmt],
                            stdout=subprocess.PIPE, env={**os.environ})
    try:
        assert proc.stdout.readline().strip() == b"ready"
        time.sleep(0.3)  # it keeps writing: the kill lands mid-file, a file open
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    names = os.listdir(out)
    assert any(n.startswith(".") and n.endswith(".tmp") for n in names)   # the open file
    finished = files_of(out)
    assert finished
    reader = DatasetReader([out], format=fmt, on_error="raise")   # every file whole
    for path in finished:
        assert sum(reader.read_piece(p, k).count for p, k in reader.pieces if p == path) == 10000


# -- RLlib 1.x JSON -------------------------------------------------------------------

def test_reads_rllib_1x_json_as_rllib_wrote_it():
    batches = read_all(os.path.join(RLLIB1X, "cartpole.json"), "json")
    assert [b.count for b in batches] == [21, 3]
    first, second = batches
    assert first["obs"].dtype == np.float32 and first["obs"].shape == (21, 4)
    # RLlib's one done flag: a termination, and a time limit its infos name
    assert first["terminateds"].tolist() == [False] * 17 + [True] + [False] * 3
    assert not first["truncateds"].any()
    assert second["truncateds"].tolist() == [False, False, True]
    assert not second["terminateds"].any()
    (ma,) = read_all(os.path.join(RLLIB1X, "multiagent.json"), "json")
    assert ma.env_steps() == 4 and sorted(ma.policy_batches) == ["p0", "p1"]


def rllib_1x_read(line: str) -> dict:
    """RLlib 1.x's reading of one line, as its JSON reader did it (plain pickle)."""
    data = json.loads(line)
    kind = data.pop("type")

    def unpack(v):
        if isinstance(v, str):
            return pickle.loads(lz4.frame.decompress(base64.b64decode(v)))
        return np.array(v)
    if kind == "MultiAgentBatch":
        return {pid: {k: unpack(v) for k, v in cols.items()}
                for pid, cols in data["policy_batches"].items()}
    return {k: unpack(v) for k, v in data.items()}


def test_written_json_is_what_rllib_1x_reads():
    images = np.arange(2 * 4 * 4, dtype=np.uint8).reshape(2, 4, 4)
    line = rllib_json.encode(SampleBatch(obs=images, actions=[1, 0], rewards=[1.0, 2.0],
                                         terminateds=[False, False], truncateds=[False, True]))
    cols = rllib_1x_read(line)
    assert cols["obs"].dtype == np.uint8
    np.testing.assert_array_equal(cols["obs"], images)
    assert cols["dones"].tolist() == [False, True]
    # the packed arrays name only numpy.ndarray: numpy 1.x (RLlib 1.x's) loads them
    packed = lz4.frame.decompress(base64.b64decode(json.loads(line)["obs"]))
    found = []

    class Spy(pickle.Unpickler):
        def find_class(self, module, name):
            found.append((module, name))
            return super().find_class(module, name)
    Spy(io.BytesIO(packed)).load()
    assert found == [("numpy", "ndarray")]


def test_packed_columns_load_numpy_arrays_only():
    evil = base64.b64encode(lz4.frame.compress(pickle.dumps(os.getcwd))).decode()
    with pytest.raises(pickle.UnpicklingError, match="only numpy arrays"):
        rllib_json.unpack(evil)


# -- input ----------------------------------------------------------------------------

class NoSteps(gym.Env):
    """CartPole's spaces; stepping it fails (a reading worker must not step)."""

    observation_space = gym.spaces.Box(-np.inf, np.inf, (4,), np.float32)
    action_space = gym.spaces.Discrete(2)

    def __init__(self, config=None):
        pass

    def reset(self, *, seed=None, options=None):
        return np.zeros(4, np.float32), {}

    def step(self, action):
        raise AssertionError("a worker reading a dataset stepped its env")


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize("num_workers", [0, 2])
def test_training_reads_the_dataset_instead_of_stepping_envs(tmp_path, fmt, num_workers):
    out, _ = record(tmp_path, fmt, samples=4)
    algo = PG(PGConfig(env=NoSteps, input=out, input_config={"format": fmt},
                       num_workers=num_workers, rollout_fragment_length=40,
                       train_batch_size=80, seed=0))
    try:
        before = algo.get_policy().get_weights()
        result = algo.train()
        assert result["timesteps_total"] >= 80
        after = algo.get_policy().get_weights()
        assert any(not np.array_equal(before[k], after[k]) for k in before)
        dot = algo.plan.to_dot()
        assert f"reads dataset {out} ({fmt})" in dot
    finally:
        algo.stop()


def test_reads_rllib_1x_files_into_training():
    algo = PG(PGConfig(env="CartPole-v1", input=os.path.join(RLLIB1X, "cartpole.json"),
                       postprocess_inputs=True, rollout_fragment_length=10,
                       train_batch_size=20, seed=0))
    try:
        assert algo.train()["timesteps_total"] >= 20
    finally:
        algo.stop()


def test_postprocess_inputs_recomputes_returns(tmp_path):
    out, _ = record(tmp_path, "parquet", samples=2)
    w = RolloutWorker("CartPole-v1", policy=PGPolicy, policy_config={"gamma": 0.5},
                      rollout_fragment_length=40, input=out, postprocess_inputs=True)
    checked = 0
    for _ in range(2):   # one recorded fragment per sample(), each postprocessed
        for episode in w.sample().split_by_episode():
            if episode["t"][0] == 0 and episode["terminateds"][-1]:   # a whole episode
                expected = discounted_returns(episode["rewards"], episode["terminateds"],
                                              0.0, gamma=0.5)
                np.testing.assert_allclose(episode["value_targets"], expected, rtol=1e-6)
                checked += 1
    w.stop()
    assert checked >= 2


def test_parquet_gathers_small_batches_into_row_groups(tmp_path):
    # one-row batches (SAC's one-step fragments) do not become one row group each
    import pyarrow.parquet as pq
    from flowrl.offline.writer import ROWS_PER_GROUP
    w = DatasetWriter(str(tmp_path), format="parquet", max_rows_per_file=10 * ROWS_PER_GROUP)
    n = 2 * ROWS_PER_GROUP + ROWS_PER_GROUP // 2
    for i in range(n):
        w.write(SampleBatch(t=[i], obs=np.full((1, 3), i, np.float32)))
    w.close()
    (path,) = [str(p) for p in tmp_path.iterdir()]
    sizes = [pq.ParquetFile(path).metadata.row_group(k).num_rows for k in range(3)]
    assert sizes == [ROWS_PER_GROUP, ROWS_PER_GROUP, ROWS_PER_GROUP // 2]
    reader = DatasetReader([str(tmp_path)], format="parquet")
    assert np.concatenate([b["t"] for b in reader.read_pass(0)]).tolist() == list(range(n))


def test_shuffled_reading_is_seeded_and_a_permutation(tmp_path):
    w = DatasetWriter(str(tmp_path), format="json")
    for i in range(12):
        w.write(SampleBatch(t=[i]))
    w.close()

    def order(seed, pass_index=0, shuffle=True):
        reader = DatasetReader([str(tmp_path)], format="json", shuffle=shuffle, seed=seed)
        return [int(b["t"][0]) for b in reader.read_pass(pass_index)]
    assert order(None, shuffle=False) == list(range(12))
    assert order(3) == order(3) and sorted(order(3)) == list(range(12))
    assert order(3) != list(range(12)) and order(3, 1) != order(3, 0)


# Which shard a worker reads is decided the same way on both backends; Ray is checked
# with shuffling on, the case where the shards' rows are drawn in a seeded order.
@pytest.mark.parametrize("backend, shuffle", [
    ("local", False), ("local", True), pytest.param("ray", True, marks=pytest.mark.ray)])
def test_remote_workers_read_disjoint_shards(request, tmp_path, backend, shuffle):
    if backend == "ray":
        request.getfixturevalue("ray_session")
    out, batches = record(tmp_path, "parquet", samples=5, max_rows_per_file=60)
    config = WorkerConfig(rollout_fragment_length=40, seed=1, input=out,
                          input_config={"shuffle": shuffle})
    ws = WorkerSet("CartPole-v1", PGPolicy, config, num_workers=2, backend=backend)  # 2 CPUs
    try:
        shards = ws.foreach_remote_worker(one_pass_rows)
    finally:
        ws.stop()
    rows = [r for shard in shards for r in shard]
    expected = [tuple(r) for b in batches for r in zip(b["eps_id"].tolist(), b["t"].tolist())]
    assert sorted(rows) == sorted(expected) and len(set(rows)) == len(rows) and all(shards)


def one_pass_rows(worker) -> list[tuple[int, int]]:
    """The (eps_id, t) rows of one pass over a worker's share of its dataset."""
    (reader,) = worker.input_reader().readers
    return [r for b in reader.read_pass(0) for r in zip(b["eps_id"].tolist(), b["t"].tolist())]


# -- bad input ------------------------------------------------------------------------

def test_an_empty_path_fails_when_the_config_is_built(tmp_path):
    with pytest.raises(ConfigError, match=r"PGConfig.input=.*no dataset files there"):
        PGConfig(env="CartPole-v1", input=str(tmp_path))
    with pytest.raises(ConfigError, match="no parquet files there"):
        PGConfig(env="CartPole-v1", input=str(tmp_path), input_config={"format": "parquet"})


def test_a_missing_column_names_it_the_file_and_the_algorithm(tmp_path):
    w = DatasetWriter(str(tmp_path), format="parquet")
    w.write(SampleBatch(obs=np.zeros((3, 4), np.float32), actions=[0, 1, 0],
                        terminateds=[False] * 3))
    w.close()
    (path,) = files_of(str(tmp_path))
    with pytest.raises(ConfigError, match=rf"PG: dataset file {path} has no column 'rewards', "
                                          "which PG needs"):
        PG(PGConfig(env="CartPole-v1", input=str(tmp_path)))


def test_dataset_and_env_spaces_that_disagree_name_both(tmp_path):
    out, _ = record(tmp_path, "json", samples=1)
    with pytest.raises(ConfigError, match=r"has obs rows of shape \(4,\) \(float32\), but the "
                                          r"env's observation space is Box\(.*\(3,\)"):
        PG(PGConfig(env="Pendulum-v1", input=out))


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_corrupt_file_is_skipped_or_fails_per_on_error(tmp_path, fmt):
    out, batches = record(tmp_path, fmt, samples=2, max_rows_per_file=40)
    bad = files_of(out)[0]
    with open(bad, "r+b") as f:   # damage it: a Parquet footer or a JSON line
        f.seek(0 if fmt == "json" else os.path.getsize(bad) - 12)
        f.write(b"#corrupt#corrupt#")
    with pytest.warns(FlowRLWarning, match=rf"skipped {bad}"):
        reader = DatasetReader([out], format=fmt, on_error="skip")
        rows = sum(b.count for b in reader.read_pass(0))
    assert rows == 40
    with pytest.raises(ConfigError, match=rf"cannot read {bad}.*on_error"):
        list(DatasetReader([out], format=fmt, on_error="raise").read_pass(0))


@pytest.mark.parametrize("key, value, match", [
    ("output_config", {"format": "csv"}, r"output_config\['format'\]='csv'"),
    ("output_config", {"rows": 3}, "unknown key 'rows'"),
    ("output_config", {"max_rows_per_file": 0}, "must be an int >= 1"),
    ("input_config", {"on_error": "ignore"}, r"on_error'\]='ignore'"),
    ("input", {"sampler": 0.5}, "add up to 0.5"),
    ("input", 3, "give 'sampler', a path"),
])
def test_bad_offline_settings_name_the_field(key, value, match):
    with pytest.raises(ConfigError, match=match):
        PGConfig(env="CartPole-v1", **{key: value})


def test_evaluation_plays_envs_while_training_reads(tmp_path):
    out, _ = record(tmp_path, "json", samples=2)
    algo = PPO(PPOConfig(env="CartPole-v1", input=out, num_workers=0, seed=0,
                         rollout_fragment_length=40, train_batch_size=80,
                         sgd_minibatch_size=40, num_sgd_iter=1, evaluation_interval=1,
                         evaluation_duration=2))
    try:
        result = algo.train()
        assert result["evaluation"]["episodes_this_iter"] == 2
    finally:
        algo.stop()


def test_parquet_without_pyarrow_is_a_config_error_saying_what_to_install(tmp_path,
                                                                           monkeypatch):
    monkeypatch.setitem(sys.modules, "pyarrow", None)
    with pytest.raises(ConfigError, match=r"needs pyarrow.*flowrl\[offline\].*format='json'"):
        PGConfig(env="CartPole-v1", output=str(tmp_path))
    PGConfig(env="CartPole-v1", output=str(tmp_path), output_config={"format": "json"})


# -- mixed input, Minari, Ray ---------------------------------------------------------

def test_mixed_input_draws_each_sample_from_a_source_by_probability(tmp_path):
    w = DatasetWriter(str(tmp_path), format="json")
    for i in range(4):   # recorded rows are told apart by t >= 10_000
        w.write(SampleBatch(obs=np.zeros((20, 4), np.float32), actions=np.zeros(20, np.int64),
                            rewards=np.ones(20, np.float32), terminateds=np.zeros(20, bool),
                            t=np.arange(10_000 + 20 * i, 10_000 + 20 * (i + 1))))
    w.close()

    def recorded_share(p):
        worker = RolloutWorker("CartPole-v1", policy=PGPolicy, rollout_fragment_length=20,
                               seed=0, input={"sampler": 1 - p, str(tmp_path): p})
        picks = [bool(worker.sample()["t"][0] >= 10_000) for _ in range(40)]
        worker.stop()
        return sum(picks)
    assert recorded_share(0.0) == 0 and recorded_share(1.0) == 40
    assert 8 <= recorded_share(0.5) <= 32


def make_minari_dataset(path, monkeypatch) -> str:
    minari = pytest.importorskip("minari")
    from minari.data_collector import EpisodeBuffer
    monkeypatch.setenv("MINARI_DATASETS_PATH", str(path))
    env = gym.make("CartPole-v1")
    rng = np.random.default_rng(0)
    episodes = []
    for ep in range(3):
        obs, _ = env.reset(seed=ep)
        steps = {"observations": [obs], "actions": [], "rewards": [], "terminations": [],
                 "truncations": []}
        done = False
        while not done:
            action = int(rng.integers(2))
            obs, reward, term, trunc, _ = env.step(action)
            for key, value in (("observations", obs), ("actions", action), ("rewards", reward),
                               ("terminations", term), ("truncations", trunc)):
                steps[key].append(value)
            done = term or trunc
        episodes.append(EpisodeBuffer(id=ep, **steps))
    with pytest.warns(UserWarning):   # minari asks for an author, a description...
        dataset = minari.create_dataset_from_buffers("cartpole/random-v0", episodes, env=env,
                                                     data_format="arrow",
                                                     algorithm_name="random")
    return os.path.dirname(dataset.spec.data_path)   # the dataset's own directory


def test_reads_a_minari_dataset_from_a_local_path(tmp_path, monkeypatch):
    path = make_minari_dataset(tmp_path / "minari", monkeypatch)
    reader = DatasetReader([path], format="minari")
    episodes = list(reader.read_pass(0))
    assert [int(b["eps_id"][0]) for b in episodes] == [0, 1, 2]
    for b in episodes:
        assert b["obs"].shape[1:] == (4,) and b["terminateds"][-1]
        np.testing.assert_array_equal(b["obs"][1:], b["new_obs"][:-1])
    algo = PG(PGConfig(env="CartPole-v1", input=path, rollout_fragment_length=20,
                       train_batch_size=40, postprocess_inputs=True, seed=0))
    try:
        assert "(minari)" in algo.plan.to_dot() and algo.train()["timesteps_total"] >= 40
    finally:
        algo.stop()


@pytest.mark.ray
def test_ray_workers_record_and_train_from_data(ray_session, tmp_path):
    out = str(tmp_path / "ray")
    with PG(PGConfig(env="CartPole-v1", backend="ray", num_workers=2, seed=0,
                     rollout_fragment_length=50, train_batch_size=100, output=out,
                     output_config={"format": "json"})) as algo:
        algo.train()
    names = os.listdir(out)
    assert {n.split("_worker-")[1][0] for n in names} == {"1", "2"}
    assert not any(n.startswith(".") for n in names)   # stop() finished every file
    # read back in-process: Ray workers reading shards is test_remote_workers_read_disjoint_shards
    with PG(PGConfig(env=NoSteps, seed=0, input=out,
                     rollout_fragment_length=50, train_batch_size=100)) as algo:
        assert algo.train()["timesteps_total"] >= 100
        assert f"reads dataset {out} (json)" in algo.plan.to_dot()


@pytest.mark.parametrize("shuffle", [False, True])
def test_a_restored_worker_reads_on_from_where_the_saved_one_was(tmp_path, shuffle):
    # the reader's position is part of the worker's state: a worker restored from a
    # checkpoint reads the batches the saved one would have read next, across passes
    out, _ = record(tmp_path, "json", samples=5)

    def worker():
        return RolloutWorker("CartPole-v1", policy=PPOPolicy, rollout_fragment_length=40,
                             seed=0, input=out, input_config={"format": "json",
                                                              "shuffle": shuffle})
    saved, fresh = worker(), worker()
    for _ in range(7):   # into the second pass over the 5 recorded batches
        saved.sample()
    state = saved.get_state()
    assert state["dataset_input"]["positions"] == [[1, 2]]
    fresh.set_state(state)
    for _ in range(6):
        np.testing.assert_array_equal(fresh.sample()["obs"], saved.sample()["obs"])
    assert fresh.input_reader().rows_read == saved.input_reader().rows_read
    saved.stop()
    fresh.stop()
