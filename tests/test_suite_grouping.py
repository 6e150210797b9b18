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
