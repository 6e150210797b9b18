"""The driver's fast paths: a plan that is one synchronous segment (pulled with plain
``next``), self-counting fused stages, and metrics collection that awaits the workers."""

from __future__ import annotations

import asyncio
import random

import pytest

import flowrl
from flowrl import Plan
from flowrl.errors import OperatorError
from flowrl.runtime.compile import Step
from flowrl.runtime.stages import FusedStage, shuffle_buffer
from flowrl.workers import WorkerConfig, WorkerSet

from async_mocks import slow_cartpole


def mixed(s):
    return (s.for_each(lambda x: x + 1, name="inc").filter(lambda x: x % 3 != 0, name="keep")
            .batch(4, name="quads").flatten(name="flat").for_each(lambda x: 2 * x, name="dbl"))


def model(n):
    return [2 * (x + 1) for x in range(n) if (x + 1) % 3 != 0]


def test_sync_plan_matches_model_and_counts_every_node():
    with Plan(mixed(flowrl.from_iterable(lambda: range(50), name="src"))).compile() as run:
        assert run._sync is not None  # the whole plan is one segment
        out = list(run)
    assert out == model(50)
    stats = run.stats()
    assert stats["src"]["items_out"] == 50
    assert stats["keep"]["items_out"] == len(out)
    assert stats["quads"]["items_out"] == -(-len(out) // 4)
    assert stats["flat"]["items_out"] == stats["dbl"]["items_out"] == len(out)
    assert list(stats["src"]["fused_with"]) == ["src", "inc", "keep", "quads", "flat", "dbl"]


def test_sync_plan_opens_its_source_lazily_and_closes_it_on_stop():
    events = []

    def source():
        events.append("open")
        try:
            yield from range(100)
        finally:
            events.append("closed")

    run = Plan(flowrl.from_iterable(source).for_each(lambda x: x * 10)).compile()
    assert events == []  # nothing runs before the first pull
    assert run.take(3) == [0, 10, 20]
    run.stop()
    assert events == ["open", "closed"]
    assert next(run, "ended") == "ended"


def test_sync_plan_operators_see_metrics_and_errors_name_the_node():
    def count(x):
        flowrl.get_metrics().counters["seen"] += 1
        if x == 5:
            raise ValueError("five")
        return x

    run = Plan(flowrl.from_iterable(lambda: range(9)).batch(2).flatten()
               .for_each(count, name="counter")).compile()
    assert run.take(5) == [0, 1, 2, 3, 4]
    assert run.metrics.counters["seen"] == 5
    with pytest.raises(OperatorError, match=r"'counter'.*ValueError: five"):
        next(run)
    with pytest.raises(StopIteration):  # the failed run is stopped
        next(run)


def test_fused_stage_counts_hold_when_consumption_stops_midway():
    steps = [Step("filter", "even", "even", {"fn": lambda x: x % 2 == 0}),
             Step("batch", "b3", "batch(3)", {"n": 3}),
             Step("flatten", "flat", "flatten", {}),
             Step("local_shuffle", "mix", "local_shuffle(2)", {"buffer_size": 2, "seed": 0})]
    stage = FusedStage("src", "src", steps)
    it = stage(iter(range(20)))
    first = [next(it) for _ in range(4)]
    counts = stage.item_counts()
    assert counts["mix"] == 4 and counts["flat"] >= 5
    assert counts["even"] == (counts["src"] + 1) // 2 or counts["even"] == counts["src"] // 2
    rest = list(it)
    assert sorted(first + rest) == list(range(0, 20, 2))
    assert stage.item_counts() == {"src": 20, "even": 10, "b3": 4, "flat": 10, "mix": 10}


def test_shuffle_buffer_counts_what_it_emits():
    cell = [0]
    out = list(shuffle_buffer(iter(range(7)), 3, random.Random(1), cell))
    assert sorted(out) == list(range(7)) and cell == [7]


@pytest.mark.ray
def test_foreach_worker_async_lets_the_loop_run_while_workers_answer(ray_session):
    config = WorkerConfig(rollout_fragment_length=20, seed=0, env_config={"sleep_s": 0.01},
                          policy_config={"hidden_sizes": (8,)})
    from flowrl.policies import PGPolicy
    ws = WorkerSet(slow_cartpole, PGPolicy, config, num_workers=1, backend="ray")
    try:
        assert ws.foreach_worker(lambda w: w.worker_index) == [0, 1]
        worker = ws.remote_workers()[0]

        async def main():
            ticks = []

            async def ticker():
                while True:
                    await asyncio.sleep(0.005)
                    ticks.append(1)

            t = asyncio.get_running_loop().create_task(ticker())
            pending = worker.sample.remote()  # the call below queues behind this sample
            result = await ws.foreach_worker_async(lambda w: w.worker_index)
            seen = len(ticks)
            t.cancel()
            return result, seen, pending

        result, seen, pending = asyncio.run(main())
        assert result == [0, 1]
        assert seen >= 1  # the loop turned while the worker finished its sample
        assert ray_session.get(pending).count == 20
    finally:
        ws.stop()


@pytest.mark.ray
def test_collect_metrics_wait_s_defers_a_busy_workers_episodes_without_losing_any(ray_session):
    """CollectMetrics(wait_s=0): a report does not wait behind a worker's queued samples;
    that worker's episodes come with a later report, each exactly once."""
    from flowrl.metrics import MetricsContext, using_metrics
    from flowrl.ops import CollectMetrics
    from flowrl.policies import PGPolicy

    def ended(batch):
        return int((batch["terminateds"] | batch["truncateds"]).sum())

    config = WorkerConfig(rollout_fragment_length=60, seed=0, env_config={"sleep_s": 0.01},
                          policy_config={"hidden_sizes": (8,)})
    ws = WorkerSet(slow_cartpole, PGPolicy, config, num_workers=1, backend="ray")
    metrics = MetricsContext()
    collect = CollectMetrics(ws, wait_s=0.0)

    async def report():
        with using_metrics(metrics):
            return await collect.call_async(None)

    try:
        worker = ws.remote_workers()[0]
        episodes = ended(ray_session.get(worker.sample.remote()))  # waiting to be reported
        assert episodes > 0

        async def main():
            busy = worker.sample.remote()  # ~0.6 s of samples ahead of the stats request
            reports = [await report()]
            for _ in range(200):
                if reports[-1]["episodes_this_iter"]:
                    break
                await asyncio.sleep(0.05)  # a real wait: the reply is not ready at once
                reports.append(await report())
            return reports, busy

        reports, busy = asyncio.run(main())
        assert reports[0]["episodes_this_iter"] == 0  # not waited for
        # the request ran after the busy sample: its reply has both samples' episodes
        episodes += ended(ray_session.get(busy))
        assert len(reports) > 1 and reports[-1]["episodes_this_iter"] == episodes
        assert not collect._carry  # the reply was taken once
        reports.append(asyncio.run(report()))  # a new request: nothing ended since
        assert reports[-1]["episodes_this_iter"] == 0
        assert sum(r["episodes_this_iter"] for r in reports) == episodes  # none twice
        assert reports[-1]["episodes_total"] == episodes
        with pytest.raises(flowrl.errors.ConfigError, match="wait_s"):
            CollectMetrics(ws, wait_s=-1)
    finally:
        ws.stop()
