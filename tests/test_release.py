"""A Run dropped without stop() releases its loop, threads, stages and actors when collected."""

from __future__ import annotations

import gc
import threading
import time

import pytest

import flowrl
from flowrl import Concurrently, Plan


class Numbers(flowrl.ShardHost):
    def shard_items(self):
        return iter(range(1000))


def _flowrl_threads():
    return [t for t in threading.enumerate() if t.name.startswith(("flowrl-io", "flowrl-nested"))]


def _wait_for(condition, timeout=60.0):
    deadline = time.monotonic() + timeout
    while not condition() and time.monotonic() < deadline:
        time.sleep(0.05)
    return condition()


def test_a_dropped_local_run_releases_its_loop_and_stages():
    host = Numbers()
    run = Plan(flowrl.from_actors([host]).gather_sync()).compile()
    assert run.take(3) == [0, 1, 2]
    loop = run.loop
    assert len(host.flowrl_installed_keys()) == 1
    del run
    gc.collect()
    assert loop.is_closed()
    assert host.flowrl_installed_keys() == []


def test_a_dropped_run_with_pending_async_inputs_releases_them():
    async def never():
        import asyncio
        await asyncio.Event().wait()  # pending forever: its task must be cancelled
        yield 0

    run = Plan(Concurrently([flowrl.from_iterable(never), flowrl.from_iterable(lambda: [1, 2])],
                            mode="async")).compile()
    assert run.take(2) == [1, 2]
    ctx = run.ctx
    assert ctx.background  # the async input's pull is a pending task
    del run
    gc.collect()
    assert not ctx.background and ctx.loop.is_closed()


@pytest.mark.ray
def test_a_dropped_ray_run_kills_its_actors_and_ends_its_threads(ray_session):
    ray = ray_session
    from ray.exceptions import RayActorError

    before = set(_flowrl_threads())
    a = flowrl.from_range(1000, 2).gather_async()
    b = flowrl.from_range(1000, 1).gather_sync()
    run = Plan(Concurrently([a, b], mode="async")).compile(backend="ray")
    assert len(run.take(20)) == 20
    actors = [h for hosts in run._driver.hosts.values() for h, mine in hosts if mine]
    assert len(actors) == 3
    assert set(_flowrl_threads()) - before  # blocking Ray waits ran on the run's I/O threads
    loop = run.loop
    del run
    gc.collect()
    assert loop.is_closed()
    for actor in actors:
        with pytest.raises(RayActorError):
            ray.get(actor.flowrl_ping.remote(), timeout=60)
    assert _wait_for(lambda: set(_flowrl_threads()) <= before)
