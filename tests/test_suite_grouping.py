"""The suite's xdist grouping (``conftest.pytest_collection_modifyitems``) takes
effect: under ``--dist loadgroup`` xdist schedules by the ``@group`` suffix of each
test's id, which it adds from the ``xdist_group`` markers our hook sets, so the hook
must run before xdist's. Without the suffix a module's tests spread over both xdist
workers and its module fixtures are built on each."""

from __future__ import annotations

import pytest


def _grouping(config) -> bool:
    return config.pluginmanager.hasplugin("xdist") and bool(config.getvalue("loadgroup"))


@pytest.mark.parametrize("uses_ray", [False, pytest.param(True, marks=pytest.mark.ray)])
def test_each_test_is_grouped_by_its_module_whether_or_not_it_uses_ray(request, uses_ray):
    if not _grouping(request.config):
        pytest.skip("grouping applies under pytest-xdist's --dist loadgroup (the default run)")
    assert request.node.nodeid.endswith("@test_suite_grouping"), request.node.nodeid


@pytest.mark.ray
def test_a_ray_test_that_keeps_a_cpu_fails_naming_itself(ray_session):
    """conftest's teardown check: an actor holding one of the session's CPUs fails the
    test that started it (after the wait for Ray's asynchronous release), and only that
    test: the next check does not blame the same CPU again. Once the actor is killed
    and its CPU is back, the check passes and no CPU is counted kept."""
    import time

    from conftest import _cpus_short, check_ray_cpus_returned, cpus_kept

    holder = ray_session.remote(num_cpus=1)(_Holder).remote()
    try:
        ray_session.get(holder.ping.remote(), timeout=60)
        with pytest.raises(pytest.fail.Exception,
                           match=r"^here left 1 of the shared Ray session's CPUs taken 0.2 s "
                                 r"after its teardown"):
            check_ray_cpus_returned("here", wait_s=0.2)
        assert cpus_kept() == 1
        check_ray_cpus_returned("the next test", wait_s=0.2)  # not blamed for it
    finally:
        ray_session.kill(holder)
    deadline = time.monotonic() + 30
    while _cpus_short() > 0 and time.monotonic() < deadline:
        time.sleep(0.05)
    check_ray_cpus_returned("here", wait_s=0)
    assert cpus_kept() == 0


class _Holder:
    def ping(self) -> bool:
        return True
