"""One test per validation rule and parameter check, each pinning its message."""

from __future__ import annotations

import pytest

import flowrl
from flowrl import Concurrently, ConfigError, PlanError, Plan
from flowrl.graph.node import Node
from flowrl.graph.plan import collect


def local(items=(1, 2, 3)):
    return flowrl.from_iterable(lambda: list(items))


# ------------------------------------------------------------------ graph rules (Plan build)

def test_plan_output_must_be_local():
    with pytest.raises(PlanError, match=r"output must be a LocalStream; gather a ParallelStream"):
        Plan(flowrl.from_range(4))


def test_local_stream_consumed_twice_without_duplicate():
    s = local().for_each(str, name="shared")
    with pytest.raises(PlanError, match=r"LocalStream 'shared' is consumed by 2 operators .*"
                                        r"use \.duplicate\(2\)"):
        Plan(Concurrently([s.for_each(len), s.for_each(repr)]))


def test_duplicate_copy_never_consumed():
    a, _b = local().duplicate(2, name="split")
    with pytest.raises(PlanError, match=r"copy 1 of 'split' \(duplicate\(2\)\) is never consumed"):
        Plan(a)


def test_cycle_is_rejected():
    node = Node(op="for_each", kind="transform", stream="local", name="loop")
    node.inputs = ((node, 0),)
    with pytest.raises(PlanError, match=r"cycle through 'loop'"):
        collect(node)


def test_zip_with_source_actor_needs_one_to_one_path_to_gather():
    s = flowrl.from_range(4).gather_sync().batch(2, name="batched").zip_with_source_actor()
    with pytest.raises(PlanError, match=r"zip_with_source_actor at .* 'batched' \(batch\) is in "
                                        r"between"):
        Plan(s)
    with pytest.raises(PlanError, match=r"must follow a gather"):
        Plan(local().zip_with_source_actor())


def test_aggregate_pipeline_must_read_its_group():
    s = flowrl.from_range(4).aggregate(1, lambda g: local(), name="agg")
    with pytest.raises(PlanError, match=r"aggregate 'agg': the pipeline must build on the stream"):
        Plan(s.gather_sync())


def test_aggregate_pipeline_may_not_read_other_sources():
    s = flowrl.from_range(4).aggregate(1, lambda g: Concurrently(
        [g, flowrl.from_iterable(lambda: [1], name="other")]),
                                       name="agg")
    with pytest.raises(PlanError, match=r"aggregate 'agg': the pipeline reads another source "
                                        r"'other'"):
        Plan(s.gather_sync())


def test_unequal_weights_over_copies_of_one_duplicate():
    x, y = local().duplicate(2, name="split")
    with pytest.raises(ConfigError, match=r"reads 2 copies of 'split' with weights \[2, 1\]"):
        Plan(Concurrently([x, y.for_each(str)], round_robin_weights=[2, 1]))


def test_weight_above_max_lag_over_copies_of_one_duplicate():
    x, y = local().duplicate(2, max_lag=2, name="split")
    with pytest.raises(ConfigError, match=r"taking 3 items per turn, more than its max_lag=2"):
        Plan(Concurrently([x, y], round_robin_weights=[3, 3]))


# ------------------------------------------------------------------ stream-kind misuse

def test_parallel_operator_on_local_stream():
    with pytest.raises(PlanError, match=r"gather_sync is a ParallelStream operator .* \(already on "
                                        r"the driver"):
        local().gather_sync()
    with pytest.raises(PlanError, match=r"local_shuffle is a ParallelStream operator .* use shuffle"):
        local().local_shuffle(4)


def test_local_operator_on_parallel_stream():
    with pytest.raises(PlanError, match=r"shuffle\(\) is a LocalStream operator .* use "
                                        r"local_shuffle first"):
        flowrl.from_range(4).shuffle(4)
    with pytest.raises(PlanError, match=r"duplicate\(\) is a LocalStream operator"):
        flowrl.from_range(4).duplicate(2)


def test_concurrently_rejects_parallel_inputs():
    with pytest.raises(PlanError, match=r"input 1 is ParallelStream.*gather a ParallelStream first"):
        Concurrently([local(), flowrl.from_range(4)])


def test_parallel_union_rejects_local_streams():
    with pytest.raises(PlanError, match=r"ParallelStream.union\(\) takes a ParallelStream"):
        flowrl.from_range(4).union(local())


def test_iterating_a_parallel_stream_says_to_gather_it_first():
    # A LocalStream iterates (issue 25: tests/test_rllib_compat.py); a ParallelStream's
    # items live on its shards.
    with pytest.raises(PlanError, match=r"ParallelStream.*gather it first"):
        list(flowrl.from_range(4))


# ------------------------------------------------------------------ parameters

@pytest.mark.parametrize("build, message", [
    (lambda: local().batch(0), r"batch\(n=0\): n must be an int >= 1"),
    (lambda: flowrl.from_range(4).gather_async(num_async=0),
     r"gather_async\(num_async=0\): num_async must be an int >= 1"),
    (lambda: local().duplicate(1), r"duplicate\(n=1\) .* n must be an int >= 2"),
    (lambda: local().shuffle(0), r"shuffle\(buffer_size=0\)"),
    (lambda: flowrl.from_range(4, num_shards=2).select_shards([2]),
     r"select_shards\(\[2\]\) .* ints in \[0, 2\)"),
    (lambda: flowrl.from_range(4, num_shards=2).aggregate(3, lambda s: s),
     r"aggregate\(num_aggregators=3\) .* between 1 and the number of shards \(2\)"),
    (lambda: flowrl.from_items([1], num_shards=0), r"from_items\(num_shards=0\)"),
    (lambda: flowrl.from_range(-1), r"from_range\(n=-1\): n must be an int >= 0"),
    (lambda: flowrl.from_iterators([]), r"from_iterators\(\[\]\): give at least one source"),
    (lambda: flowrl.from_iterators([42]), r"source 0 is int"),
    (lambda: flowrl.from_actors([object()]), r"host 0 \(object\) does not inherit flowrl.ShardHost"),
    (lambda: local().for_each(3), r"for_each\(\) expects a callable, got int 3"),
    (lambda: flowrl.from_range(4).aggregate(1, lambda s: 5),
     r"must return the LocalStream it builds"),
])
def test_bad_parameters(build, message):
    with pytest.raises(ConfigError, match=message):
        build()


def test_concurrently_parameter_checks():
    a, b, c = local(), local(), local()
    with pytest.raises(ConfigError, match=r"got 1 stream\(s\); it needs at least 2"):
        Concurrently([a])
    with pytest.raises(ConfigError, match=r"mode='fifo'\): unknown mode"):
        Concurrently([a, b], mode="fifo")
    with pytest.raises(ConfigError, match=r"round_robin_weights only apply to mode='round_robin'"):
        Concurrently([a, b], mode="async", round_robin_weights=[1, 1])
    with pytest.raises(ConfigError, match=r"Concurrently\(round_robin_weights=\[1, 2\]\) has 2 "
                                          r"weights for 3 streams; give one weight per stream"):
        Concurrently([a, b, c], round_robin_weights=[1, 2])
    with pytest.raises(ConfigError, match=r"all '\*' would never wait"):
        Concurrently([a, b], round_robin_weights=["*", "*"])
    with pytest.raises(ConfigError, match=r"weight -1 must be a number > 0 or '\*'"):
        Concurrently([a, b], round_robin_weights=[1, -1])
    with pytest.raises(ConfigError, match=r"output_indexes=\[2\]\): indexes must be in \[0, 2\)"):
        Concurrently([a, b], output_indexes=[2])


def test_compile_rejects_unknown_backend():
    with pytest.raises(ConfigError, match=r"compile\(backend='gpu'\): unknown backend"):
        Plan(local()).compile(backend="gpu")


def test_config_error_is_a_value_error():
    with pytest.raises(ValueError):
        local().batch(-3)
