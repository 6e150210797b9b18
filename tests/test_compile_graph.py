"""plan.graph is what the compiler reads: same stages as before, annotations to actors.

``EXPECTED`` is what the compiler that walked Node objects (before the graph became
its input) produced for each representative plan, frozen as structural summaries:
per gather its slots (source, shard, fused steps with their parameters), per
aggregate its groups, and the host sources in creation order. Compiling the same
plans' unannotated graphs must give exactly these. ``runs`` (each maximal run of
synchronous driver-side operators, the source it reads first) replaced that
compiler's fused map chains and sync segments: a run is one of those, extended
over every synchronous operator next to it.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

import dot_plan
import flowrl
from flowrl import Concurrently
from flowrl.errors import ConfigError, PlanError
from flowrl.graph.node import Node, describe_callable
from flowrl.graph.plan import Plan
from flowrl.runtime.compile import check_picklable, compile_plan

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# ----------------------------------------------------------------------------- plans
class Counter(flowrl.ShardHost):
    def shard_items(self):
        return iter(range(3))


def add_one(x):
    return x + 1


def is_even(x):
    return x % 2 == 0


def pair(x):
    return [x, x]


def ten():
    return range(10)


def tree_pipeline(group):
    return group.for_each(add_one).filter(is_even).batch(2).for_each(sum)


def plan_shapes():
    """Unions, shard selection, every shard-local op, sync segments, fusion, fan-in."""
    a = flowrl.from_items(list(range(12)), num_shards=3, name="items")
    b = flowrl.from_iterators([[1, 2], range(3)], name="iters")
    c = flowrl.from_actors([Counter(), Counter()], name="actors")
    mixed = (a.union(b).select_shards([0, 2, 3]).for_each(add_one).filter(is_even)
             .batch(2).flatten().combine(pair).local_shuffle(4, seed=3)
             .union(c.for_each(add_one, name="bumped")))
    synced = mixed.gather_sync(name="synced").for_each(add_one).for_each(add_one, name="twice")
    rounds = flowrl.from_range(6, 2, name="nums").batch_across_shards(name="rounds")
    zipped = (flowrl.from_range(4, 2, name="more").gather_async(num_async=2)
              .for_each(add_one).zip_with_source_actor().filter(bool, name="kept"))
    segment = (flowrl.from_iterable(ten, name="local_src").for_each(add_one)
               .filter(is_even).batch(2).flatten().shuffle(3, seed=1).combine(pair))
    left, right = segment.duplicate(2, name="split")
    return Plan(Concurrently([synced, rounds, zipped, left, right.for_each(add_one, name="r")],
                             mode="round_robin", name="rr"), name="shapes")


def plan_sub_aggregate():
    """The pipeline an aggregator runs: read from its entry gather, whose shards it is given."""
    tree = flowrl.from_range(8, 4, name="src").aggregate(
        2, tree_pipeline, name="tree")
    return Plan(tree.gather_async(name="top"), name="outer")


def algorithm_plan(algo_cls, config):
    algo = algo_cls(config)
    try:
        return algo.plan
    finally:
        algo.stop()


def plan_ppo():
    from flowrl.algorithms import PPO, PPOConfig
    return algorithm_plan(PPO, PPOConfig(env="CartPole-v1", num_workers=2, backend="local",
                                         train_batch_size=64, sgd_minibatch_size=32,
                                         rollout_fragment_length=32, seed=0))


def plan_impala(aggregators):
    from flowrl.algorithms import IMPALA, IMPALAConfig
    return algorithm_plan(IMPALA, IMPALAConfig(
        env="CartPole-v1", num_workers=2, backend="local", num_aggregation_workers=aggregators,
        train_batch_size=40, rollout_fragment_length=20, seed=0))


PLANS = {"golden": dot_plan.build, "shapes": plan_shapes, "sub_aggregate": plan_sub_aggregate,
         "ppo": plan_ppo, "impala": lambda: plan_impala(0),
         "impala_tree": lambda: plan_impala(1)}


# ----------------------------------------------------------------------------- summaries
def _param(v, ids):
    if isinstance(v, Node):
        return ids[v]
    if callable(v):
        return describe_callable(v)
    if isinstance(v, (list, tuple)):
        return [_param(x, ids) for x in v]
    if isinstance(v, (int, float, str, bool)) or v is None:
        return v
    return type(v).__name__


def _stage(st, ids):
    return [st.source_id, st.source_label, st.shard_index,
            [[s.op, s.node_id, s.label, {k: _param(v, ids) for k, v in sorted(s.params.items())}]
             for s in st.steps]]


def _slot(s, ids):
    return [s.source, s.index, _stage(s.stage, ids)]


def summarize(c, ids):
    return {
        "slots": [[g, [_slot(s, ids) for s in slots]] for g, slots in c.slots.items()],
        "groups": [[a, [[_slot(s, ids) for s in grp] for grp in groups]]
                   for a, groups in c.groups.items()],
        "runs": [[t, [run.source_id] + [s.node_id for s in run.steps]]
                 for t, run in c.runs.items()],
        "host_sources": list(c.host_sources),
    }


# Frozen output of the Node-walking compiler (commit ee894dc) for PLANS.
EXPECTED = {
    'golden':
        {'slots': [['rollouts.gather_async',
                    [['rollouts', 0,
                      ['rollouts', 'rollouts', 0,
                       [['for_each', 'postprocess', 'postprocess', {'fn': 'double'}]]]],
                     ['rollouts', 1,
                      ['rollouts', 'rollouts', 1,
                       [['for_each', 'postprocess', 'postprocess', {'fn': 'double'}]]]],
                     ['rollouts', 2,
                      ['rollouts', 'rollouts', 2,
                       [['for_each', 'postprocess', 'postprocess', {'fn': 'double'}]]]],
                     ['rollouts', 3,
                      ['rollouts', 'rollouts', 3,
                       [['for_each', 'postprocess', 'postprocess', {'fn': 'double'}]]]]]],
                   ['tree/input',
                    [['replay', 0, ['replay', 'replay', 0, []]],
                     ['replay', 1, ['replay', 'replay', 1, []]],
                     ['replay', 2, ['replay', 'replay', 2, []]],
                     ['replay', 3, ['replay', 'replay', 3, []]]]],
                   ['tree.gather',
                    [['tree', 0, ['tree', 'tree', 0, []]],
                     ['tree', 1, ['tree', 'tree', 1, []]]]]],
         'groups': [['tree',
                     [[['replay', 0, ['replay', 'replay', 0, []]],
                       ['replay', 2, ['replay', 'replay', 2, []]]],
                      [['replay', 1, ['replay', 'replay', 1, []]],
                       ['replay', 3, ['replay', 'replay', 3, []]]]]]],
         'runs': [['train', ['rollouts.gather_async', 'concat', 'train']],
                  ['nonzero', ['split', 'nonzero']],
                  ['tree/input.batch', ['tree/input', 'tree/input.batch']]],
         'host_sources': ['rollouts', 'replay', 'tree']},
    'shapes':
        {'slots': [['synced',
                    [['items', 0,
                      ['items', 'items', 0,
                       [['for_each', 'union.select_shards.for_each', 'add_one',
                         {'fn': 'add_one'}],
                        ['filter', 'union.select_shards.for_each.filter', 'is_even',
                         {'fn': 'is_even'}],
                        ['batch', 'union.select_shards.for_each.filter.batch', 'batch(2)',
                         {'n': 2}],
                        ['flatten', 'union.select_shards.for_each.filter.batch.flatten',
                         'flatten', {}],
                        ['combine', 'union.select_shards.for_each.filter.batch.flatten.combine',
                         'pair', {'fn': 'pair'}],
                        ['local_shuffle',
                         'union.select_shards.for_each.filter.batch.flatten.combine.local_shuffle',
                         'local_shuffle(4)', {'buffer_size': 4, 'seed': 3}]]]],
                     ['items', 2,
                      ['items', 'items', 2,
                       [['for_each', 'union.select_shards.for_each', 'add_one',
                         {'fn': 'add_one'}],
                        ['filter', 'union.select_shards.for_each.filter', 'is_even',
                         {'fn': 'is_even'}],
                        ['batch', 'union.select_shards.for_each.filter.batch', 'batch(2)',
                         {'n': 2}],
                        ['flatten', 'union.select_shards.for_each.filter.batch.flatten',
                         'flatten', {}],
                        ['combine', 'union.select_shards.for_each.filter.batch.flatten.combine',
                         'pair', {'fn': 'pair'}],
                        ['local_shuffle',
                         'union.select_shards.for_each.filter.batch.flatten.combine.local_shuffle',
                         'local_shuffle(4)', {'buffer_size': 4, 'seed': 3}]]]],
                     ['iters', 0,
                      ['iters', 'iters', 0,
                       [['for_each', 'union.select_shards.for_each', 'add_one',
                         {'fn': 'add_one'}],
                        ['filter', 'union.select_shards.for_each.filter', 'is_even',
                         {'fn': 'is_even'}],
                        ['batch', 'union.select_shards.for_each.filter.batch', 'batch(2)',
                         {'n': 2}],
                        ['flatten', 'union.select_shards.for_each.filter.batch.flatten',
                         'flatten', {}],
                        ['combine', 'union.select_shards.for_each.filter.batch.flatten.combine',
                         'pair', {'fn': 'pair'}],
                        ['local_shuffle',
                         'union.select_shards.for_each.filter.batch.flatten.combine.local_shuffle',
                         'local_shuffle(4)', {'buffer_size': 4, 'seed': 3}]]]],
                     ['actors', 0,
                      ['actors', 'actors', 0,
                       [['for_each', 'bumped', 'bumped', {'fn': 'add_one'}]]]],
                     ['actors', 1,
                      ['actors', 'actors', 1,
                       [['for_each', 'bumped', 'bumped', {'fn': 'add_one'}]]]]]],
                   ['rounds',
                    [['nums', 0, ['nums', 'nums', 0, []]], ['nums', 1, ['nums', 'nums', 1, []]]]],
                   ['more.gather_async',
                    [['more', 0, ['more', 'more', 0, []]],
                     ['more', 1, ['more', 'more', 1, []]]]]],
         'groups': [],
         'runs': [['twice', ['synced', 'synced.for_each', 'twice']],
                  ['kept',
                   ['more.gather_async',
                    'more.gather_async.for_each',
                    'more.gather_async.for_each.zip_with_source_actor',
                    'kept']],
                  ['local_src.for_each.filter.batch.flatten.shuffle.combine',
                   ['local_src',
                    'local_src.for_each',
                    'local_src.for_each.filter',
                    'local_src.for_each.filter.batch',
                    'local_src.for_each.filter.batch.flatten',
                    'local_src.for_each.filter.batch.flatten.shuffle',
                    'local_src.for_each.filter.batch.flatten.shuffle.combine']],
                  ['r', ['split', 'r']]],
         'host_sources': ['items', 'iters', 'actors', 'nums', 'more']},
    'sub_aggregate':
        {'slots': [],
         'groups': [],
         'runs': [['tree/input.for_each.filter.batch.for_each',
                   ['tree/input',
                    'tree/input.for_each',
                    'tree/input.for_each.filter',
                    'tree/input.for_each.filter.batch',
                    'tree/input.for_each.filter.batch.for_each']]],
         'host_sources': []},
    'ppo':
        {'slots': [['rollouts.batch_across_shards',
                    [['rollouts', 0, ['rollouts', 'rollouts', 0, []]],
                     ['rollouts', 1, ['rollouts', 'rollouts', 1, []]]]]],
         'groups': [],
         'runs': [['report.once_per_interval',
                   ['rollouts.batch_across_shards',
                    'rollouts.concat',
                    'rollouts.count_sampled',
                    'ppo/concat_batches',
                    'ppo/standardize',
                    'ppo/train',
                    'ppo/update_kl',
                    'report.once_per_timesteps',
                    'report.once_per_interval']]],
         'host_sources': ['rollouts']},
    'impala':
        {'slots': [['impala/rollouts.gather_async',
                    [['impala/rollouts', 0, ['impala/rollouts', 'impala/rollouts', 0, []]],
                     ['impala/rollouts', 1, ['impala/rollouts', 'impala/rollouts', 1, []]]]]],
         'groups': [],
         'runs': [['impala/start_learner',
                   ['impala/rollouts.gather_async',
                    'impala/rollouts.count_sampled',
                    'impala/zip_source',
                    'impala/concat_batches',
                    'impala/mixin_replay',
                    'impala/start_learner']],
                  ['impala/broadcast_weights',
                   ['impala/learner_thread.outqueue',
                    'impala/record_trained',
                    'impala/broadcast_weights']],
                  ['report.once_per_interval',
                   ['concurrently',
                    'report.once_per_timesteps',
                    'report.once_per_interval']],
                  ['impala/learner_diagnostics',
                   ['report.collect_metrics', 'impala/learner_diagnostics']]],
         'host_sources': ['impala/rollouts']},
    'impala_tree':
        {'slots': [['impala/aggregate/input',
                    [['impala/rollouts', 0, ['impala/rollouts', 'impala/rollouts', 0, []]],
                     ['impala/rollouts', 1, ['impala/rollouts', 'impala/rollouts', 1, []]]]],
                   ['impala/aggregate.gather_async',
                    [['impala/aggregate', 0, ['impala/aggregate', 'impala/aggregate', 0, []]]]]],
         'groups': [['impala/aggregate',
                     [[['impala/rollouts', 0, ['impala/rollouts', 'impala/rollouts', 0, []]],
                       ['impala/rollouts', 1, ['impala/rollouts', 'impala/rollouts', 1, []]]]]]],
         'runs': [['impala/aggregator/mixin_replay',
                   ['impala/aggregate/input',
                    'impala/aggregator/zip_source',
                    'impala/aggregator/concat_batches',
                    'impala/aggregator/mixin_replay']],
                  ['impala/start_learner',
                   ['impala/aggregate.gather_async',
                    'impala/count_sampled',
                    'impala/start_learner']],
                  ['impala/broadcast_weights',
                   ['impala/learner_thread.outqueue',
                    'impala/record_trained',
                    'impala/broadcast_weights']],
                  ['report.once_per_interval',
                   ['concurrently',
                    'report.once_per_timesteps',
                    'report.once_per_interval']],
                  ['impala/learner_diagnostics',
                   ['report.collect_metrics', 'impala/learner_diagnostics']]],
         'host_sources': ['impala/rollouts', 'impala/aggregate']},
}


@pytest.mark.parametrize("name", sorted(PLANS))
def test_unannotated_graph_compiles_to_the_stages_the_node_walker_gave(name):
    plan = PLANS[name]()
    compiled = compile_plan(plan)
    check_picklable(compiled)
    if name == "sub_aggregate":
        compiled = compiled.pipelines["tree"]
        assert compiled.entry == "tree/input"
    assert summarize(compiled, plan.ids) == EXPECTED[name]
    assert compiled.host_options == {}


def test_the_program_holds_ops_by_id_and_no_plan_node():
    plan = PLANS["shapes"]()
    compiled = compile_plan(plan)
    assert list(compiled.ops) == list(plan.graph)
    assert compiled.output == ("rr", 0)
    assert compiled.ops["rr"].inputs == (("twice", 0), ("rounds", 0), ("kept", 0),
                                         ("split", 0), ("r", 0))
    assert compiled.ops["r"].inputs == (("split", 1),)
    assert {op.placement for op in compiled.ops.values()} == {"shards", "driver"}
    pipeline = compile_plan(tree_plan()).pipelines["tree"]
    assert list(pipeline.ops) == ["tree/input", "tree/input.for_each",
                                  "tree/input.for_each.filter",
                                  "tree/input.for_each.filter.batch",
                                  "tree/input.for_each.filter.batch.for_each"]
    assert pipeline.ops["tree/input"].inputs == ()
    assert pipeline.output == ("tree/input.for_each.filter.batch.for_each", 0)


def test_the_compiler_walks_the_graph_so_an_edge_added_to_it_is_seen():
    plan = dot_plan.build()
    plan.graph.add_edge("mix", "rollouts", port=0, index=0, asynchronous=False)
    with pytest.raises(PlanError, match=r"plan.graph has a cycle \(.*mix.*\)"):
        compile_plan(plan)


# ----------------------------------------------------------------------------- annotations
def tree_plan():
    tree = flowrl.from_range(8, 4, name="src").aggregate(2, tree_pipeline, name="tree")
    return Plan(tree.for_each(add_one, name="after").gather_sync(name="top"))


def test_a_source_annotation_becomes_its_item_hosts_actor_options():
    plan = Plan(flowrl.from_range(4, 2, name="nums").for_each(add_one, name="stage")
                .gather_sync())
    plan.graph.nodes["nums"]["num_cpus"] = 0.5
    plan.graph.nodes["nums"]["resources"] = {"custom": 1}
    compiled = compile_plan(plan)
    assert compiled.host_options == {
        "nums": {"num_cpus": 0.5, "resources": {"custom": 1}}}


def test_a_shard_stage_annotation_reaches_every_host_it_is_fused_onto_taking_the_largest():
    a = flowrl.from_range(4, 2, name="a")
    b = flowrl.from_items([1, 2], 1, name="b")
    plan = Plan(a.union(b).for_each(add_one, name="stage").gather_async())
    plan.graph.nodes["a"]["num_cpus"] = 2
    plan.graph.nodes["a"]["resources"] = {"custom": 1, "other": 3}
    plan.graph.nodes["stage"]["num_cpus"] = 1
    plan.graph.nodes["stage"]["resources"] = {"custom": 2}
    compiled = compile_plan(plan)
    assert compiled.host_options == {
        "a": {"num_cpus": 2, "resources": {"custom": 2, "other": 3}},
        "b": {"num_cpus": 1, "resources": {"custom": 2}}}


def test_an_aggregate_annotation_and_a_stage_after_it_reach_the_aggregator_actors():
    plan = tree_plan()
    plan.graph.nodes["tree"]["resources"] = {"custom": 1}
    plan.graph.nodes["after"]["num_cpus"] = 0.25
    assert compile_plan(plan).host_options == {
        "tree": {"num_cpus": 0.25, "resources": {"custom": 1}}}


@pytest.mark.parametrize("attr,value,match", [
    ("num_cpus", -1, r"plan.graph.nodes\['nums'\]\['num_cpus'\] = -1: must be a number >= 0"),
    ("num_cpus", "2", r"\['nums'\]\['num_cpus'\] = '2': must be a number"),
    ("num_cpus", True, r"\['nums'\]\['num_cpus'\] = True: must be a number"),
    ("num_cpus", float("nan"), r"\['nums'\]\['num_cpus'\] = nan: must be a number"),
    ("resources", [("custom", 1)], r"\['nums'\]\['resources'\] = \[.*\]: must be a dict"),
    ("resources", {"custom": -1}, r"\['nums'\]\['resources'\]\['custom'\] = -1: must be a"),
    ("resources", {"custom": "1"}, r"\['nums'\]\['resources'\]\['custom'\] = '1'"),
    ("resources", {"CPU": 1}, r"\['nums'\]\['resources'\] asks for 'CPU'.*set "
                              r"plan.graph.nodes\['nums'\]\['num_cpus'\] instead"),
    ("resources", {1: 1}, r"\['nums'\]\['resources'\] has the key 1: resource names"),
])
def test_a_bad_annotation_is_a_config_error_naming_the_node_and_attribute(attr, value, match):
    plan = Plan(flowrl.from_range(4, 2, name="nums").gather_sync())
    plan.graph.nodes["nums"][attr] = value
    with pytest.raises(ConfigError, match=match):
        compile_plan(plan)


@pytest.mark.parametrize("node_id,match", [
    ("actors", r"'actors'\] \(from_actors\) has num_cpus, but its hosts are your own actors"),
    ("bumped", r"'bumped'\] \(for_each\) has num_cpus, but its stage runs on the hosts of "
               r"from_actors source 'actors'"),
    ("synced", r"'synced'\] \(gather_sync\) has num_cpus, but the runtime creates no actor "
               r"for it: it runs on the driver"),
    ("twice", r"'twice'\] \(for_each\) has num_cpus, but .* runs on the driver"),
    ("union", r"'union'\] \(union\) has num_cpus, but .* it only routes shards"),
])
def test_an_annotation_where_the_runtime_creates_no_actor_is_a_config_error(node_id, match):
    plan = plan_shapes()
    plan.graph.nodes[node_id]["num_cpus"] = 1
    with pytest.raises(ConfigError, match=match):
        compile_plan(plan)


def test_an_annotation_inside_an_aggregator_pipeline_points_at_the_aggregate_node():
    plan = tree_plan()
    plan.graph.nodes["tree/input.for_each"]["resources"] = {"custom": 1}
    with pytest.raises(ConfigError, match=r"'tree/input.for_each'\] \(for_each\) has resources"
                                          r", but .*inside the aggregator actors; annotate "
                                          r"the aggregate node instead"):
        compile_plan(plan)


def test_the_local_backend_checks_annotations_and_runs_the_plan_unchanged():
    def build():
        return tree_plan()

    with build().compile("local") as run:
        expected = run.take(100)
    plan = build()
    plan.graph.nodes["src"]["num_cpus"] = 1
    plan.graph.nodes["tree"]["resources"] = {"custom": 1}
    with plan.compile("local") as run:
        assert run.take(100) == expected
    plan.graph.nodes["top"]["num_cpus"] = 1
    with pytest.raises(ConfigError, match=r"'top'\] \(gather_sync\) has num_cpus"):
        plan.compile("local")


# The Ray session here needs a custom resource, which the shared test session lacks,
# so it runs in a process of its own (address="local": a new instance, shut down
# at the end).
RAY_SCRIPT = textwrap.dedent("""
    import json, sys
    import ray
    import flowrl
    from flowrl.errors import ConfigError

    def assigned(x):
        return ray.get_runtime_context().get_assigned_resources()

    def pipeline(group):
        return group.for_each(assigned)

    def first(plan):
        with plan.compile("ray") as run:
            return run.take(1)[0]

    ray.init(address="local", num_cpus=2, resources={"custom": 4}, include_dashboard=False,
             log_to_driver=False, configure_logging=False)
    out = {}
    try:
        def items():
            return flowrl.Plan(flowrl.from_range(4, 2, name="nums")
                               .for_each(assigned, name="stage").gather_sync())
        out["plain"] = first(items())
        plan = items()
        plan.graph.nodes["nums"]["num_cpus"] = 0.5
        plan.graph.nodes["nums"]["resources"] = {"custom": 1}
        with plan.compile("ray") as run:
            out["source"] = run.take(4)
        plan = items()
        plan.graph.nodes["stage"]["num_cpus"] = 1
        out["stage"] = first(plan)
        plan = flowrl.Plan(flowrl.from_range(4, 2, name="src")
                           .aggregate(1, pipeline, name="tree").gather_sync())
        plan.graph.nodes["tree"]["num_cpus"] = 0.25
        plan.graph.nodes["tree"]["resources"] = {"custom": 2}
        out["aggregate"] = first(plan)
        plan = items()
        plan.graph.nodes["nums"]["resources"] = {"missing": 1}
        try:
            first(plan)
        except ConfigError as e:
            out["missing"] = str(e)
    finally:
        ray.shutdown()
    print("RESULT " + json.dumps(out))
""")


@pytest.mark.ray
def test_annotations_reach_the_options_of_the_actors_ray_creates():
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([ROOT, os.path.join(ROOT, "tests")]))
    env.pop("RAY_ADDRESS", None)
    proc = subprocess.run([sys.executable, "-c", RAY_SCRIPT], env=env, capture_output=True,
                          text=True, timeout=500)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stderr[-3000:]
    import json
    out = json.loads(lines[-1][len("RESULT "):])
    assert out["plain"] == {}
    assert out["source"] == [{"CPU": 0.5, "custom": 1.0}] * 4
    assert out["stage"] == {"CPU": 1.0}
    assert out["aggregate"] == {"CPU": 0.25, "custom": 2.0}
    assert "host nums[0] asks for num_cpus/resources {'resources': {'missing': 1}}" in \
        out["missing"] and "no alive Ray node has that much" in out["missing"]


# ----------------------------------------------------------------------------- workers
def networkx_loaded(x):
    return "networkx" in sys.modules


@pytest.mark.ray
def test_shard_hosts_and_rollout_workers_never_import_networkx(ray_session):
    from flowrl.ops import rollout_shards
    from flowrl.policies import PGPolicy
    from flowrl.workers import WorkerConfig, WorkerSet

    plan = Plan(flowrl.from_range(4, 2).for_each(networkx_loaded).gather_sync())
    assert "networkx" in sys.modules  # the driver built plan.graph
    with plan.compile("ray") as run:
        assert run.take(4) == [False] * 4
    ws = WorkerSet("CartPole-v1", PGPolicy, WorkerConfig(rollout_fragment_length=10, seed=0),
                   num_workers=1, backend="ray")
    try:
        plan = Plan(rollout_shards(ws).for_each(networkx_loaded).gather_sync())
        with plan.compile("ray") as run:
            assert run.take(2) == [False, False]
    finally:
        ws.stop()

