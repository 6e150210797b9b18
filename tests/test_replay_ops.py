"""Replay operators and replay actors, in-process and on Ray (killed actors included)."""

from __future__ import annotations

import numpy as np
import pytest

import flowrl
from flowrl.batch import SampleBatch
from flowrl.errors import ConfigError, FlowError, OperatorError, WorkerError
from flowrl.metrics import STEPS_SAMPLED_COUNTER
from flowrl.ops import (LearningStarts, Replay, StoreToReplayBuffer, UpdateReplayPriorities,
                        UpdateTargetNetwork)
from flowrl.replay import PrioritizedReplayBuffer, ReplayActor, create_replay_actors


def _rollouts(n=1000, rows=10):
    def gen():
        for i in range(n):
            yield SampleBatch(obs=np.arange(i * rows, (i + 1) * rows, dtype=np.int64),
                              rewards=np.ones(rows, np.float32))
    return flowrl.from_iterable(gen, name="rollouts")


def _actor_plan(actors, learning_starts):
    store = StoreToReplayBuffer(actors=actors)
    stored = _rollouts().for_each(store, name="store").filter(
        LearningStarts(store, learning_starts), name="gate")
    replayed = Replay(actors=actors, num_async=2).zip_with_source_actor()

    def send_back(item):  # priorities = 1 + obs, as a learner's TD errors would be
        actor, batch = item
        return actor, batch, {"default_policy": 1.0 + batch["obs"].astype(float)}

    update = replayed.for_each(send_back).for_each(UpdateReplayPriorities(actors=actors, eps=0.0))
    return store, flowrl.Concurrently([stored, update], mode="round_robin", output_indexes=[1])


def test_store_replay_and_priorities_flow_back_in_process():
    actors = create_replay_actors(2, capacity=100, learning_starts=20, train_batch_size=8,
                                  seed=0)
    store, out = _actor_plan(actors, 20)
    with flowrl.Plan(out).compile(seed=1) as run:
        items = run.take(12)
        assert run.metrics.counters["num_priority_updates"] == 12 * 8
    assert store.rows_stored[0] >= 20 and store.rows_stored[1] >= 20
    for actor, batch, td in items:
        # each batch came from the actor that holds those rows: rows alternate by batch
        assert {int(x) // 10 % 2 for x in batch["obs"]} == {actors.index(actor)}
    total = sum(a.stats()["num_priority_updates"] for a in actors)
    assert total == 12 * 8
    # the priorities landed on the sampled rows of the right actor: p = 1 + obs
    for a in actors:
        sampled = {int(x) for actor, batch, _ in items if actor is a for x in batch["obs"]}
        obs = a.buffer.get_state()["columns"]["obs"]
        slots = np.flatnonzero(np.isin(obs, sorted(sampled)))
        assert len(slots) == len(sampled) > 0
        np.testing.assert_allclose(a.buffer._sum.get(slots), (1.0 + obs[slots]) ** 0.6)


def test_replay_before_learning_starts_is_an_error_not_a_hang():
    actor = ReplayActor(50, learning_starts=10, train_batch_size=4)
    actor.add_batch(SampleBatch(obs=[1, 2]))
    with pytest.raises(FlowError, match=r"2 rows stored \(< learning_starts=10\).*LearningStarts"):
        actor.replay()


def test_op_arguments_are_checked():
    buf = PrioritizedReplayBuffer(10)
    with pytest.raises(ConfigError, match="exactly one of local_buffer"):
        StoreToReplayBuffer()
    with pytest.raises(ConfigError, match="exactly one of local_buffer"):
        Replay(local_buffer=buf, actors=[ReplayActor(10, learning_starts=1)])
    with pytest.raises(ConfigError, match="expected a ReplayBuffer"):
        Replay(local_buffer=[1, 2])
    with pytest.raises(ConfigError, match="larger than the buffer capacity 10"):
        LearningStarts(StoreToReplayBuffer(local_buffer=buf), 11)
    with pytest.raises(ConfigError, match="give workers= too"):
        UpdateReplayPriorities(local_buffer=buf)
    with pytest.raises(ConfigError, match=r"learning_starts=20\): must be an int in \[0, capacity=10\]"):
        ReplayActor(10, learning_starts=20)


def test_update_target_network_fires_when_the_counter_grew_by_more_than_freq():
    calls = []

    class Policy:
        def update_target(self):
            calls.append(1)

    class Worker:
        policies_to_train = ["default_policy"]

        def get_policy(self, pid):
            return Policy()

    class Workers:
        def local_worker(self):
            return Worker()

    def count(x):
        flowrl.get_metrics().counters[STEPS_SAMPLED_COUNTER] += 40
        return x

    stream = flowrl.from_iterable(lambda: range(10)).for_each(count).for_each(
        UpdateTargetNetwork(Workers(), 100))
    with flowrl.Plan(stream).compile() as run:
        run.take(10)
        # counter 40, 80, ..., 400: updates once it exceeds 100 since the last (at 120, 240, 360)
        assert run.metrics.counters["num_target_updates"] == 3 == len(calls)
        assert run.metrics.counters["last_target_update_ts"] == 360


def _node_id(_self):
    import ray
    return ray.get_runtime_context().get_node_id()


@pytest.mark.ray
def test_ray_replay_actors_store_replay_and_get_priorities(ray_session):
    ray = ray_session
    actors = create_replay_actors(2, capacity=100, backend="ray", learning_starts=20,
                                  train_batch_size=8, seed=0)
    try:
        here = ray.get_runtime_context().get_node_id()
        store, out = _actor_plan(actors, 20)
        with flowrl.Plan(out).compile() as run:
            items = run.take(10)
            assert {id(a) for a, _, _ in items} <= {id(a) for a in actors}
        store.calls.flush()
        stats = ray.get([a.stats.remote() for a in actors])
        assert sum(s["num_priority_updates"] for s in stats) == 80
        assert all(s["num_entries"] >= 20 for s in stats)
        nodes = ray.get([a.__ray_call__.remote(_node_id) for a in actors])
        assert set(nodes) == {here}
    finally:
        for a in actors:
            ray.kill(a)


@pytest.mark.ray
def test_a_killed_replay_actor_is_a_worker_error_naming_it(ray_session):
    ray = ray_session
    actors = create_replay_actors(2, capacity=100, backend="ray", learning_starts=20,
                                  train_batch_size=8, seed=0)
    try:
        # 1) a run replaying from it fails with a WorkerError naming it: from the
        #    replay shard (the runtime names the shard), or from the priorities sent
        #    back (raised inside an operator, so wrapped in an OperatorError naming
        #    that operator, with the WorkerError as its cause), whichever sees it first
        store, out = _actor_plan(actors, 20)
        with flowrl.Plan(out).compile() as run:
            run.take(3)
            ray.kill(actors[1])
            with pytest.raises(FlowError) as info:
                run.take(200)
        err = info.value
        if isinstance(err, OperatorError):
            err = err.__cause__
        assert isinstance(err, WorkerError)
        assert "replay[1]" in str(err) or "replay actor 1 of 2" in str(err)
        # 2) storing into it: a WorkerError naming it (the runtime wraps what an
        #    operator raises in an OperatorError naming the operator, cause chained)
        store = StoreToReplayBuffer(actors=actors)
        stream = _rollouts(100).for_each(store, name="store")
        with flowrl.Plan(stream).compile() as run:
            with pytest.raises(OperatorError, match="'store'.*replay actor 1 of 2") as info:
                run.take(100)
        assert isinstance(info.value.__cause__, WorkerError)
        assert "replay actor 1 of 2 (a Ray actor) died" in str(info.value.__cause__)
    finally:
        for a in actors:
            ray.kill(a)
