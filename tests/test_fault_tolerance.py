"""Fault tolerance of plan hosts: real Ray actors killed (``ray.kill``) or stuck mid-run.

A generic ``from_actors(hosts, restart=...)`` plan goes on after a host dies, in
sync and async gathers and inside aggregators; a stuck host is ended and replaced;
without ``restart`` the WorkerError stays; ``max_restarts`` is enforced. Rollout
workers and algorithms: ``test_worker_fault_tolerance.py``.

Ray's processes import this module to build its hosts (``Counter`` is defined here),
and every host and replacement is a new process: keep its imports light (no torch).
"""

from __future__ import annotations

import logging
import time

import pytest
from ray_helpers import kill
import ray

import flowrl
from flowrl import ConfigError, Plan, WorkerError

pytestmark = pytest.mark.ray


class Counter(flowrl.ShardHost):
    """Yields ``(tag, i)`` for i = 0, 1, ...; with ``hang_at`` sleeps there (stuck)."""

    def __init__(self, tag, hang_at=None):
        self.tag = tag
        self.hang_at = hang_at

    def shard_items(self):
        i = 0
        while True:
            if i == self.hang_at:
                time.sleep(3600)
            yield (self.tag, i)
            i += 1

    def pid(self):
        import os
        return os.getpid()


RemoteCounter = ray.remote(num_cpus=0)(Counter)


def replacement(index):
    return RemoteCounter.remote(f"new{index}")




def _kill_after(run, n, victim):
    out = run.take(n)
    kill(victim)
    return out


def _until_replaced(run, tag, survivor, batched=False, n=3):
    """Items after a kill until replacement ``tag`` gave ``n`` and ``survivor`` one; an
    async gather serves the survivors while the replacement starts, so how many
    come first is not fixed (the deadline only catches a hang)."""
    out, seen, deadline = [], {tag: 0, survivor: 0}, time.monotonic() + 120
    while time.monotonic() < deadline:
        out.append(next(run))
        for t, _ in (out[-1] if batched else [out[-1]]):
            if t in seen:
                seen[t] += 1
        if seen[tag] >= n and seen[survivor]:
            return out
    raise AssertionError(f"replacement {tag} did not answer within 120 s")


@pytest.mark.parametrize("gather", ["gather_sync", "gather_async", "batch_across_shards"])
def test_killed_host_is_replaced_and_the_plan_goes_on(ray_session, gather, caplog):
    hosts = [RemoteCounter.remote(f"old{i}") for i in range(2)]
    src = flowrl.from_actors(hosts, name="src", restart=replacement)
    stream = getattr(src, gather)(**({"num_async": 2} if gather == "gather_async" else {}))
    try:
        with caplog.at_level(logging.WARNING, logger="flowrl.runtime"), \
                Plan(stream).compile(backend="ray", remote_timeout_s=60) as run:
            _kill_after(run, 10, hosts[1])
            after = _until_replaced(run, "new1", "old0", gather == "batch_across_shards")
            counters = dict(run.metrics.counters)
    finally:
        for h in hosts:
            ray.kill(h)
    flat = [x for item in after for x in (item if gather == "batch_across_shards" else [item])]
    tags = {t for t, _ in flat}
    assert "new1" in tags and "old0" in tags          # replacement answers, survivor goes on
    assert [i for t, i in flat if t == "new1"][:3] == [0, 1, 2]   # a fresh stream
    assert counters["num_worker_restarts"] == 1
    assert counters["num_lost_requests"] >= 1
    msgs = [r.getMessage() for r in caplog.records if "src[1]" in r.getMessage()]
    assert len(msgs) == 1 and "replaced" in msgs[0] and "died" in msgs[0]


class SlowStart(Counter):
    """A replacement whose constructor takes a while (a new process importing torch)."""

    def __init__(self, tag, start_s):
        time.sleep(start_s)
        super().__init__(tag)


def test_async_gather_serves_survivors_while_a_replacement_starts(ray_session):
    hosts = [RemoteCounter.remote(f"old{i}") for i in range(2)]
    made = []

    def restart(i):
        made.append(ray.remote(num_cpus=0)(SlowStart).remote(f"new{i}", 0.5))
        return made[-1]

    src = flowrl.from_actors(hosts, name="src", restart=restart)
    try:
        with Plan(src.gather_async(num_async=2)).compile(backend="ray",
                                                         remote_timeout_s=60) as run:
            _kill_after(run, 10, hosts[1])
            after = _until_replaced(run, "new1", "old0", n=1)
    finally:
        for h in hosts + made:
            ray.kill(h)
    before_new = [t for t, _ in after[:[t for t, _ in after].index("new1")]]
    # a blocking install would allow only the survivor's few in-flight items meanwhile
    assert before_new.count("old0") > 20


def test_without_restart_a_killed_host_is_still_a_worker_error(ray_session):
    hosts = [RemoteCounter.remote(f"h{i}") for i in range(2)]
    try:
        with Plan(flowrl.from_actors(hosts, name="src").gather_async()).compile(
                backend="ray", remote_timeout_s=60) as run:
            run.take(4)
            ray.kill(hosts[0], no_restart=True)
            with pytest.raises(WorkerError, match=r"shard host src\[0\] \(a Ray actor\) died"):
                run.take(200)
    finally:
        for h in hosts:
            ray.kill(h)


def test_restart_none_drops_the_shard(ray_session):
    hosts = [RemoteCounter.remote(f"h{i}") for i in range(2)]
    src = flowrl.from_actors(hosts, name="src", restart=lambda i: None)
    try:
        with Plan(src.gather_sync()).compile(backend="ray", remote_timeout_s=60) as run:
            run.take(4)
            ray.kill(hosts[1], no_restart=True)
            after = run.take(20)
            counters = dict(run.metrics.counters)
    finally:
        for h in hosts:
            ray.kill(h)
    assert {t for t, _ in after[-10:]} == {"h0"}
    assert counters["num_dropped_workers"] == 1 and counters.get("num_worker_restarts", 0) == 0


def test_max_restarts_is_enforced(ray_session):
    hosts = [RemoteCounter.remote("h0")]
    made = []

    def restart(i):
        made.append(RemoteCounter.remote(f"r{len(made)}"))
        return made[-1]

    src = flowrl.from_actors(hosts, name="src", restart=restart, max_restarts=1)
    try:
        with Plan(src.gather_sync()).compile(backend="ray", remote_timeout_s=60) as run:
            run.take(2)
            kill(hosts[0])
            assert run.take(3)[0] == ("r0", 0)
            kill(made[0])
            with pytest.raises(WorkerError,
                               match=r"src\[0\] was lost .* max_restarts=1 is used up"):
                run.take(10)
    finally:
        for h in hosts + made:
            ray.kill(h)


def test_from_actors_checks_restart_arguments():
    host = Counter("x")
    with pytest.raises(ConfigError, match=r"from_actors\(restart=3\): give a function"):
        flowrl.from_actors([host], restart=3)
    with pytest.raises(ConfigError, match=r"from_actors\(max_restarts=-1\): must be an int"):
        flowrl.from_actors([host], restart=replacement, max_restarts=-1)


def test_stuck_host_is_ended_and_replaced(ray_session):
    hosts = [RemoteCounter.remote("ok"), RemoteCounter.remote("stuck", hang_at=3)]
    # both running first: remote_timeout_s also bounds the install, and an actor still
    # starting on a loaded machine would be taken for a stuck one
    _, stuck_pid = ray.get([h.pid.remote() for h in hosts])
    src = flowrl.from_actors(hosts, name="src", restart=replacement)
    try:
        with Plan(src.gather_async()).compile(backend="ray", remote_timeout_s=1.5) as run:
            out, deadline = [], time.monotonic() + 60   # only catches a hang
            while ("new1", 0) not in out and time.monotonic() < deadline:
                out += run.take(50)
            counters = dict(run.metrics.counters)
    finally:
        for h in hosts:
            ray.kill(h)
    assert ("new1", 0) in out
    assert counters["num_worker_restarts"] == 1
    # the stuck actor's process was ended, not leaked
    import psutil
    deadline = time.monotonic() + 30   # only catches a leak
    while psutil.pid_exists(stuck_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not psutil.pid_exists(stuck_pid)


def test_killed_member_of_an_aggregator_is_replaced(ray_session):
    hosts = [RemoteCounter.remote(f"old{i}") for i in range(2)]
    src = flowrl.from_actors(hosts, name="src", restart=replacement)
    stream = src.aggregate(1, lambda g: g.for_each(lambda t: t)).gather_sync()
    try:
        with Plan(stream).compile(backend="ray", remote_timeout_s=60) as run:
            _kill_after(run, 6, hosts[0])
            after = _until_replaced(run, "new0", "old1")
    finally:
        for h in hosts:
            ray.kill(h)
    tags = {t for t, _ in after}
    assert "new0" in tags and "old1" in tags
