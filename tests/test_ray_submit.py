"""``direct_call`` submits exactly the task ``method.remote()`` submits, or is it."""

from __future__ import annotations

import time

import pytest
import ray

import flowrl
from flowrl.runtime import ray_submit
from flowrl.runtime.ray_submit import direct_call

pytestmark = pytest.mark.ray


class Host(flowrl.ShardHost):
    def shard_items(self):
        return iter(range(3))

    def value(self):
        return 7

    def add(self, x):
        return x + 1

    @ray.method(retry_exceptions=True)
    def value_retried(self):
        return 7

    @ray.method(enable_task_events=False)
    def value_unrecorded(self):
        return 7


class Recording:
    """A core worker that records ``submit_actor_task``'s arguments, then submits."""

    def __init__(self, real):
        self.real, self.calls = real, []

    def submit_actor_task(self, *args):
        self.calls.append(args)
        return self.real.submit_actor_task(*args)

    def __getattr__(self, name):
        return getattr(self.real, name)


def submitted(ray, fn):
    """The arguments ``fn()`` passed to the core worker, and what its ref holds."""
    worker = ray._private.worker.global_worker
    recording = Recording(worker.core_worker)
    worker.core_worker = recording
    try:
        ref = fn()
    finally:
        worker.core_worker = recording.real
    (args,) = recording.calls
    return args, ray.get(ref, timeout=60)


def test_the_installed_ray_takes_the_shortcut(ray_session):
    # The pinned Ray is the one the shortcut follows; a Ray that changes
    # submit_actor_task's parameters must fail here, not silently lose the shortcut.
    assert ray_submit.submit_matches(), (
        "ray._raylet.CoreWorker.submit_actor_task no longer takes "
        f"{ray_submit.SUBMIT_PARAMS}; check ray_submit.direct_call against this Ray")


@pytest.mark.parametrize("options, name", [
    ({"num_cpus": 0}, "value"),
    ({"num_cpus": 0, "max_task_retries": 3}, "value"),
    ({"num_cpus": 0, "max_task_retries": 2}, "value_retried"),
    ({"num_cpus": 0}, "value_unrecorded"),
], ids=["defaults", "retries", "retry-exceptions", "no-task-events"])
def test_direct_call_submits_what_remote_submits(ray_session, options, name):
    ray = ray_session
    host = ray.remote(Host).options(**options).remote()
    try:
        method = getattr(host, name)
        call = direct_call(method)
        assert call != method.remote  # the shortcut, not the fallback
        public, public_value = submitted(ray, method.remote)
        direct, direct_value = submitted(ray, call)
        assert direct == public
        assert direct_value == public_value == 7
    finally:
        ray.kill(host)


def test_direct_call_falls_back_where_it_could_differ(ray_session, monkeypatch):
    ray = ray_session
    host = ray.remote(num_cpus=0)(Host).remote()

    def falls_back(method):
        return direct_call(method) == method.remote

    try:
        # A method with arguments; per-call options that remote() resolves.
        assert falls_back(host.add)
        assert falls_back(host.value.options(num_returns=2))
        assert falls_back(host.value.options(name="named"))
        # Tracing on, or a Ray whose submit_actor_task takes other parameters.
        monkeypatch.setattr(ray_submit, "_tracing_enabled", lambda: True)
        assert falls_back(host.value)
        monkeypatch.undo()
        monkeypatch.setattr(ray_submit, "submit_matches", lambda: False)
        assert falls_back(host.value)
        monkeypatch.undo()
        assert not falls_back(host.value)
        assert ray.get(direct_call(host.flowrl_ping)(), timeout=60) is True
    finally:
        ray.kill(host)


def test_a_direct_call_to_a_dead_actor_fails_as_remote_does(ray_session):
    ray = ray_session
    host = ray.remote(num_cpus=0)(Host).remote()
    call = direct_call(host.value)
    assert ray.get(call(), timeout=60) == 7
    ray.kill(host, no_restart=True)
    # ray.kill is asynchronous: calls may still be answered for a moment, then every
    # one fails with RayActorError (any other error, or a hang, fails the test).
    deadline = time.monotonic() + 60  # only catches a kill that never takes effect
    while True:
        try:
            assert ray.get(call(), timeout=60) == 7
        except ray.exceptions.RayActorError:
            break
        assert time.monotonic() < deadline, f"{host} still answers 60 s after ray.kill"
        time.sleep(0.05)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(call(), timeout=60)
    with pytest.raises(ray.exceptions.RayActorError):
        ray.get(host.value.remote(), timeout=60)
