"""The Ray backend's own contract: errors, actor lifetimes, placement, pickling."""

from __future__ import annotations

import os
import threading
import time

import pytest

import flowrl
from flowrl import ConfigError, OperatorError, PlanError, Plan, WorkerError
from flowrl.runtime import ray_backend

pytestmark = pytest.mark.ray


class Numbers(flowrl.ShardHost):
    """A user shard host: ``base, base + 1, ...`` (``n`` items, or forever)."""

    def __init__(self, base=0, n=None):
        self.base, self.n = base, n

    def shard_items(self):
        i = 0
        while self.n is None or i < self.n:
            yield self.base + i
            i += 1


@pytest.fixture(scope="module")
def numbers(ray_session):
    """Two user actors (a ShardHost subclass) shared by the tests of this module."""
    remote = ray_session.remote(num_cpus=0)(Numbers)
    hosts = [remote.remote(0), remote.remote(100)]
    ray_session.get([h.flowrl_ping.remote() for h in hosts])
    yield hosts
    for h in hosts:
        ray_session.kill(h)


def alive_actor_ids() -> set[str]:
    """Ids of ALIVE actors, from the GCS actor table.

    ``ray.util.state.list_actors`` asks the dashboard's state API, which the shared
    test session does not start (``include_dashboard=False``, and ``ray[default]``
    is not a dependency); the GCS table is the same data without it.
    """
    from ray._private import state

    return {a["ActorID"] for a in state.actors().values() if a["State"] == "ALIVE"}


def test_shard_exception_is_an_operator_error_with_the_remote_traceback(ray_session):
    def explode(x):
        if x == 3:
            raise ValueError(f"bad item {x}")
        return x

    s = flowrl.from_range(6, num_shards=2).for_each(explode, name="explode").gather_sync()
    with pytest.raises(OperatorError, match=r"'explode'.*ValueError: bad item 3") as info:
        Plan(s).compile(backend="ray").take(10)
    err = info.value
    assert (err.node_id, err.label) == ("explode", "explode")
    assert "in explode" in err.remote_traceback and "bad item 3" in err.remote_traceback
    assert isinstance(err.__cause__, ray_session.exceptions.RayTaskError)
    assert type(err) is OperatorError  # not Ray's dual-class wrapper


def test_killed_actor_is_a_worker_error_naming_the_shard(ray_session):
    run = Plan(flowrl.from_range(4, num_shards=2, repeat=True).gather_async()).compile(
        backend="ray")
    assert len(run.take(4)) == 4
    victim = run._driver.shards[next(iter(run._driver.shards))][1].host
    ray_session.kill(victim)
    with pytest.raises(WorkerError, match=r"from_range\[1\]"):
        run.take(10_000)
    assert run.take(1) == []


def test_unpicklable_shard_function_fails_at_compile_naming_the_node(ray_session):
    lock = threading.Lock()
    s = flowrl.from_range(4).for_each(lambda x: (lock, x)[1], name="holds_lock").gather_sync()
    with pytest.raises(PlanError, match=r"'holds_lock'.*pickle"):
        Plan(s).compile(backend="ray")
    # driver-side functions are never shipped, so they may hold anything
    s = flowrl.from_range(4).gather_sync().for_each(lambda x: (lock, x)[1])
    assert sorted(Plan(s).compile(backend="ray").take(10)) == [0, 1, 2, 3]


def test_stop_kills_exactly_the_actors_the_run_created(ray_session, numbers):
    before = alive_actor_ids()
    items = flowrl.from_range(20, num_shards=3, repeat=True)
    s = flowrl.Concurrently([items.gather_async(num_async=2),
                             flowrl.from_actors(numbers).gather_sync(),
                             flowrl.from_range(9, 3).aggregate(2, lambda g: g.batch(2))
                             .gather_sync()], mode="async")
    run = Plan(s).compile(backend="ray")
    try:
        assert len(run.take(30)) == 30
        # item hosts of both sources, two aggregators; on a loaded machine an actor may
        # still be starting after 30 items (the other inputs delivered them), so wait
        deadline = time.monotonic() + 60
        while len(created := alive_actor_ids() - before) < 8 and time.monotonic() < deadline:
            time.sleep(0.1)
        assert len(created) == 3 + 3 + 2
    finally:
        run.stop()  # bounded waits only: a hang fails on the test timeout
    assert not created & alive_actor_ids()
    # the adopted user actors survive, with this run's stages uninstalled
    keys = ray_session.get([h.flowrl_installed_keys.remote() for h in numbers])
    assert keys == [[], []]


def test_adopted_actors_survive_and_serve_the_next_run(ray_session, numbers):
    for _ in range(2):
        with Plan(flowrl.from_actors(numbers).gather_sync()).compile(backend="ray") as run:
            assert run.take(4) == [0, 100, 1, 101]
    assert ray_session.get([h.flowrl_ping.remote() for h in numbers]) == [True, True]


class CountedNumbers(Numbers):
    """Numbers that count which pull method the driver calls."""

    def __init__(self, base=0):
        super().__init__(base)
        self.calls = {"flowrl_next": 0, "flowrl_pull": 0}

    def flowrl_next(self):
        self.calls["flowrl_next"] += 1
        return super().flowrl_next()

    def flowrl_pull(self, key, max_items=1):
        self.calls["flowrl_pull"] += 1
        return super().flowrl_pull(key, max_items)

    def counts(self):
        return dict(self.calls)


def test_a_hosts_first_run_pulls_without_arguments_and_later_runs_name_their_key(ray_session):
    # The first run on a host is its default: one-item pulls are flowrl_next() calls,
    # which carry no arguments. A run installed beside it pulls by key; once the first
    # run is gone, the next run installed is the default again.
    host = ray_session.remote(num_cpus=0)(CountedNumbers).remote(0)
    try:
        counts = lambda: ray_session.get(host.counts.remote())  # noqa: E731
        a = Plan(flowrl.from_actors([host]).gather_async()).compile(backend="ray")
        b = Plan(flowrl.from_actors([host]).for_each(lambda x: -x).gather_async()).compile(
            backend="ray")
        try:
            assert a.take(3) == [0, 1, 2]
            assert b.take(3) == [0, -1, -2]
            first = counts()
            assert first["flowrl_next"] >= 3 and first["flowrl_pull"] >= 3
            a.stop()
            assert b.take(2) == [-3, -4]  # still by key: a guest stays a guest
            assert counts()["flowrl_next"] == first["flowrl_next"]
            with Plan(flowrl.from_actors([host]).gather_sync()).compile(backend="ray") as c:
                assert c.take(2) == [0, 1]
            assert counts()["flowrl_next"] >= first["flowrl_next"] + 2
        finally:
            a.stop()
            b.stop()
    finally:
        ray_session.kill(host)


def test_one_host_serves_two_runs_at_once(ray_session, numbers):
    a = Plan(flowrl.from_actors(numbers).gather_async(num_async=2)).compile(backend="ray")
    b = Plan(flowrl.from_actors(numbers).for_each(lambda x: -x).gather_sync()).compile(
        backend="ray")
    try:
        seen = a.take(4)
        assert b.take(4) == [0, -100, -1, -101]
        keys = ray_session.get(numbers[0].flowrl_installed_keys.remote())
        assert len(keys) == 2 and all(k.startswith((a.key, b.key)) for k in keys)
        b.stop()
        assert ray_session.get(numbers[0].flowrl_installed_keys.remote()) == [
            k for k in keys if k.startswith(a.key)]
        seen += a.take(6)
        # each shard continues where it was, untouched by the other run
        for base in (0, 100):
            mine = [x for x in seen if base <= x < base + 100]
            assert mine == list(range(base, base + len(mine)))
    finally:
        a.stop()
        b.stop()


def test_zip_with_source_actor_yields_the_real_handles(ray_session, numbers):
    s = flowrl.from_actors(numbers).gather_async().zip_with_source_actor()
    with Plan(s).compile(backend="ray") as run:
        out = run.take(6)
    for actor, x in out:
        assert isinstance(actor, ray_session.actor.ActorHandle)
        assert actor == numbers[0 if x < 100 else 1]
    # the handle is usable: ask the actor itself
    actor = out[0][0]
    assert ray_session.get(actor.flowrl_ping.remote()) is True


def test_aggregators_run_on_the_driver_node(ray_session):
    s = flowrl.from_range(12, num_shards=4).aggregate(
        2, lambda g: g.for_each(lambda x: (os.getpid(), x)))
    with Plan(s.gather_sync()).compile(backend="ray") as run:
        aggregators = [sh.host for sh in next(iter(run._driver.shards.values()))]
        nodes = ray_session.get([a.__ray_call__.remote(
            lambda self: __import__("ray").get_runtime_context().get_node_id())
            for a in aggregators])
        out = run.take(100)
    assert sorted(x for _, x in out) == list(range(12))
    assert len({pid for pid, _ in out}) == 2  # two aggregator processes
    assert os.getpid() not in {pid for pid, _ in out}
    assert set(nodes) == {ray_session.get_runtime_context().get_node_id()}


def test_auto_backend_picks_ray_for_actor_handles(ray_session, numbers):
    with Plan(flowrl.from_actors(numbers).gather_sync()).compile() as run:
        assert run.backend == "ray"
        assert run.take(2) == [0, 100]


def test_backend_uses_the_running_ray_session(ray_session):
    from flowrl.runtime.ray_backend import RayBackend

    context = ray_session.get_runtime_context()
    RayBackend()
    assert ray_session.get_runtime_context().get_job_id() == context.get_job_id()


# ------------------------------------------------------------------ bounded waits

class Stalls(flowrl.ShardHost):
    """Yields ``n`` items, then hangs in a long sleep (an env stuck in step)."""

    def __init__(self, n):
        self.n = n

    def shard_items(self):
        yield from range(self.n)
        time.sleep(3600)
        yield -1


def test_a_stuck_remote_is_a_named_worker_error(ray_session, monkeypatch):
    """Round barriers (gather_sync) and async gathers, where the healthy shard keeps
    answering. The failed run stops at once: it neither waits for the stuck host's
    uninstall nor asks it for counts, so with stop-time waits of 10 minutes the test
    still ends well inside its timeout."""
    monkeypatch.setattr(ray_backend, "STOP_WAIT_S", 600.0)
    ray = ray_session
    cls = ray.remote(num_cpus=0)(Stalls)
    stuck_sync, stuck_async, healthy = cls.remote(2), cls.remote(2), cls.remote(10 ** 9)
    # all running first: the bound also covers the start-up of an actor that installs late
    ray.get([a.flowrl_ping.remote() for a in (stuck_sync, stuck_async, healthy)])
    try:
        for gather, stuck in (("gather_sync", stuck_sync), ("gather_async", stuck_async)):
            stream = getattr(flowrl.from_actors([stuck, healthy], name="envs"), gather)()
            with Plan(stream).compile(backend="ray", remote_timeout_s=1.5) as run, \
                    pytest.raises(WorkerError, match=r"shard host envs\[0\] has not answered a "
                                                     r"request for 1\.5 s \(remote_timeout_s=1\.5\)"):
                run.take(10 ** 9)
    finally:
        for a in (stuck_sync, stuck_async, healthy):
            ray.kill(a)


def test_remote_timeout_is_checked():
    with pytest.raises(ConfigError, match=r"compile\(remote_timeout_s=0\): must be a number"):
        Plan(flowrl.from_range(2).gather_sync()).compile(remote_timeout_s=0)


class Jittery(flowrl.ShardHost):
    """``base, base + 1, ...``, each after a random sleep of up to 3 ms (replies that
    are sometimes ready when the driver asks and sometimes not)."""

    def __init__(self, base, seed):
        self.base, self.seed = base, seed

    def shard_items(self):
        import random
        rng = random.Random(self.seed)
        i = 0
        while True:
            time.sleep(rng.random() * 0.003)
            yield self.base + i
            i += 1


def test_an_async_gather_blocks_at_most_once_per_item(ray_session, monkeypatch):
    """Replies sometimes ready and sometimes not: each wait is a non-blocking sweep, or
    one bounded blocking wait for one shard, and a blocking wait happens only when
    a sweep just found nothing ready (never one-at-a-time polling). Items stay in
    shard order."""
    from flowrl.runtime import ray_backend

    remote = ray_session.remote(num_cpus=0)(Jittery)
    hosts = [remote.remote(0, 1), remote.remote(1000, 2)]
    ray_session.get([h.flowrl_ping.remote() for h in hosts])
    waits = []
    real_wait = ray_backend.ray.wait

    def counting_wait(refs, num_returns=1, timeout=None, **kw):
        waits.append((len(refs), num_returns, timeout))
        return real_wait(refs, num_returns=num_returns, timeout=timeout, **kw)

    try:
        with Plan(flowrl.from_actors(hosts).gather_async(num_async=2)).compile(
                backend="ray", remote_timeout_s=60) as run:
            run.take(5)  # started
            monkeypatch.setattr(ray_backend.ray, "wait", counting_wait)
            items = run.take(200)
            monkeypatch.undo()
    finally:
        for h in hosts:
            ray_session.kill(h)
    for base in (0, 1000):
        mine = [x for x in items if base <= x < base + 1000]
        assert mine == sorted(mine) and len(mine) > 20
    sweeps = [w for w in waits if w[2] == 0]
    blocking = [w for w in waits if w[2] != 0]
    assert all(n == size for size, n, _ in sweeps)
    assert all(n == 1 and 0 < timeout <= 60 for _, n, timeout in blocking)
    assert 0 < len(blocking) <= 200
    # a sweep comes before every blocking wait (which happens only when it found no
    # shard ready), and the next wait is a sweep again (the next pass's)
    for i, w in enumerate(waits):
        if w[2] != 0:
            assert i > 0 and waits[i - 1][2] == 0, i
            assert i == len(waits) - 1 or waits[i + 1][2] == 0, i


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_replys_reference_is_dropped_once_its_shard_was_sent_the_next_request(
        ray_session, monkeypatch, mode):
    """Dropping a reply's Ray reference costs the driver tens of microseconds, so a
    gather keeps it until the request that follows on that shard is sent (a
    round: the next round; a pass: the resubmission) and drops it then, while the
    hosts work: never right after the reply came, never kept for good. Jittery
    hosts make replies sometimes ready, sometimes not."""
    from flowrl.runtime.ray_backend import RayBackend, RayRequest

    remote = ray_session.remote(num_cpus=0)(Jittery)
    hosts = [remote.remote(0, 1), remote.remote(1000, 2)]
    ray_session.get([h.flowrl_ping.remote() for h in hosts])
    sent: list = []      # every request, in the order it was sent
    dropped: list = []   # (request, requests sent before it was released)
    real_submit, real_release = RayBackend.submit, RayRequest.release

    def submit(self, shard, n):
        req = real_submit(self, shard, n)
        sent.append(req)
        return req

    def release(self):
        assert self.done and self.ref is not None, (
            "a reply's reference dropped before its release")
        dropped.append((self, len(sent)))
        real_release(self)

    monkeypatch.setattr(RayBackend, "submit", submit)
    monkeypatch.setattr(RayRequest, "release", release)
    gather = flowrl.from_actors(hosts)
    out = gather.gather_sync() if mode == "sync" else gather.gather_async(num_async=2)
    try:
        with Plan(out).compile(backend="ray") as run:
            assert len(run.take(60)) == 60
    finally:
        for h in hosts:
            ray_session.kill(h)
    assert len(dropped) >= 50
    for req, sent_before in dropped:
        later = sent[sent.index(req) + 1:sent_before]
        assert any(r.shard is req.shard for r in later), (
            "released before its shard's next request")
        assert req.ref is None
    # and nothing is held longer: every reply but the last few was released
    replied = [r for r in sent if r.done]
    assert len(replied) - len(dropped) <= 2 * len(hosts)


def test_an_async_gather_serves_every_shard_under_a_slow_consumer(ray_session):
    """The issue's recipe: three shards, num_async=1, a consumer slower than them.

    Every shard has answered before the next item is taken (each host's pending
    pull runs before the ping sent after it), so all three are ready together at
    every step: least recently served first makes it a rotation."""
    from conformance import assert_fair

    stream = flowrl.from_range(10 ** 9, num_shards=3).gather_async(num_async=1)
    out = []
    with Plan(stream).compile(backend="ray") as run:
        hosts = [s.host for s in next(iter(run._driver.shards.values()))]
        for _ in range(30):
            out += run.take(1)
            ray_session.get([h.flowrl_ping.remote() for h in hosts], timeout=60)
            time.sleep(0.01)
    third = 10 ** 9 // 3
    assert_fair([min(x // third, 2) for x in out], 3)


def test_collecting_stuck_results_shares_one_deadline(ray_session, monkeypatch):
    """Three results that never come: failing them all waits remote_timeout_s in
    total, not once per result."""
    from flowrl.runtime import ray_backend
    from flowrl.runtime.backend import Shard
    from flowrl.runtime.ray_backend import RayBackend, RayRequest

    clock = [1000.0]
    timeouts = []

    def never_ready(refs, timeout=None):  # a get that waits out its timeout
        timeouts.append(timeout)
        clock[0] += timeout
        raise ray_session.exceptions.GetTimeoutError("not ready")

    backend = RayBackend(remote_timeout_s=2.0)
    monkeypatch.setattr(ray_backend, "_monotonic", lambda: clock[0])
    requests = [RayRequest(Shard(None, "k", f"envs[{i}]", None), 1, object())
                for i in range(3)]
    monkeypatch.setattr(ray_backend.ray, "get", never_ready)
    backend._collect(requests)
    monkeypatch.undo()
    assert clock[0] - 1000.0 <= 2.0 and timeouts[0] == 2.0
    for i, r in enumerate(requests):
        with pytest.raises(WorkerError, match=rf"shard host envs\[{i}\] has not answered "
                                              r"a request for 2 s \(remote_timeout_s=2\)"):
            r.result()
