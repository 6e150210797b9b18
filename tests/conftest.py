"""Shared fixtures: one Ray session per test session (``num_cpus=2``), one torch thread."""

from __future__ import annotations

import pytest


@pytest.fixture
def one_torch_thread():
    """One torch thread for the test, as algorithms and benchmark children run: small
    networks on a shared 2-core machine only lose time to a second one."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def ray_session():
    """Start Ray once for the whole test session and shut it down at the end.

    Tests that need Ray take this fixture (and carry the ``ray`` marker); a session
    that was already initialised by someone else is reused and left running.
    """
    import ray

    started = False
    if not ray.is_initialized():
        ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False,
                 configure_logging=False)
        started = True
    yield ray
    if started:
        ray.shutdown()


# Ray workers must import the test modules that define actor classes (for example
# ``conformance.Counter``); pytest puts tests/ on the driver's sys.path only. Workers
# inherit this environment when the test session starts Ray, so put tests/ on theirs.
def _tests_on_worker_path() -> None:
    import os

    here = os.path.dirname(os.path.abspath(__file__))
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    if here not in paths:
        os.environ["PYTHONPATH"] = os.pathsep.join([here, *paths])


_tests_on_worker_path()


# Every process the suite starts (xdist workers, Ray workers, CLI and example
# subprocesses) imports flowrl. Where PYTHONDONTWRITEBYTECODE is set (container
# images often set it; the development machine's does), none of them finds compiled
# bytecode, so each compiles the flowrl modules it imports again: about 360 Ray worker
# processes per run. Let the processes started from here on write and reuse
# ``__pycache__`` (ignored by git), as Python does by default.
def _bytecode_cached() -> None:
    import os
    import sys

    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
    sys.dont_write_bytecode = False


_bytecode_cached()


def _uses_ray(item) -> bool:
    """Whether a collected test needs the shared Ray session: it takes ``ray_session``,
    carries the ``ray`` marker, or is the Ray case of a ``backend`` parameter."""
    if "ray_session" in getattr(item, "fixturenames", ()) or item.get_closest_marker("ray"):
        return True
    callspec = getattr(item, "callspec", None)
    return callspec is not None and any(isinstance(v, str) and v == "ray"
                                        for v in callspec.params.values())


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist (``-n N --dist loadgroup``, the default run's options), each
    module's tests run together on one xdist worker, so its module fixtures are built
    once. Each xdist worker starts one Ray session, at its first test that uses Ray,
    and shares it with all its others. The Ray tests are half the suite's time, so
    they are spread over both workers: put on one, they made it the long pole
    (537 s against 246 s for the other worker; spread, the suite took 441 s on an
    idle 2-core machine).

    It runs first: xdist's own hook turns the ``xdist_group`` markers into the
    ``@group`` suffix of each test's id, by which it schedules, so markers added
    after it would be ignored (``test_suite_grouping.py`` checks the ids)."""
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        module = getattr(item, "module", None)
        name = module.__name__ if module is not None else item.nodeid.split("::")[0]
        item.add_marker(pytest.mark.xdist_group(name))


def _ray_running() -> bool:
    import sys
    ray = sys.modules.get("ray")
    return ray is not None and ray.is_initialized()


@pytest.hookimpl(wrapper=True)
def pytest_runtest_call(item):
    """A test that starts Ray without being found to use it (``_uses_ray``) starts a
    session of its own beside its xdist worker's shared one, or leaves one behind for
    whichever test comes next: fail it, naming the fix."""
    before = _ray_running()
    result = yield
    if not before and _ray_running() and not _uses_ray(item):
        pytest.fail(f"{item.nodeid} started Ray but does not take the ray_session fixture "
                    "or carry @pytest.mark.ray, so it does not share its xdist worker's Ray "
                    "session; add one of them", pytrace=False)
    return result


# A Ray test's actors, tasks and placement groups must give their CPUs back: the next
# test on the same xdist worker shares the session, and one that needs both of its
# CPUs would otherwise wait until its timeout, failing far from the cause. Ray frees
# them asynchronously (well under a second here; slower on a loaded machine), so
# wait for that, and fail the test that kept them if they never come back. CPUs a
# failed test kept are blamed on it alone: the tests after it are checked against
# what it left (else each would wait RELEASE_WAIT_S and fail for it).
RELEASE_WAIT_S = 60.0
_cpus_kept_before = 0.0  # CPUs earlier tests of this process kept, still taken at the last check


def _cpus_short() -> float:
    import ray
    return ray.cluster_resources().get("CPU", 0.0) - ray.available_resources().get("CPU", 0.0)


def cpus_kept() -> float:
    """CPUs of the shared Ray session that earlier tests kept and are still taken, as
    of the last check."""
    return _cpus_kept_before


def check_ray_cpus_returned(nodeid: str, wait_s: float = RELEASE_WAIT_S) -> None:
    """Wait up to ``wait_s`` for the shared Ray session's CPUs to be free again, all but
    those earlier failed tests kept; fail ``nodeid`` if it kept more."""
    import time
    global _cpus_kept_before
    kept = _cpus_kept_before
    deadline = time.monotonic() + wait_s
    while _cpus_short() > kept and time.monotonic() < deadline:
        time.sleep(0.05)
    short = _cpus_short()
    _cpus_kept_before = short  # what is taken now: the baseline of the next check
    if short > kept:
        pytest.fail(f"{nodeid} left {short - kept:g} of the shared Ray session's CPUs taken "
                    f"{wait_s:g} s after its teardown (an actor, task or placement group it "
                    "started still runs); stop what it started in a finally block or "
                    "fixture", pytrace=False)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    result = yield
    if _ray_running():
        check_ray_cpus_returned(item.nodeid)
    return result
