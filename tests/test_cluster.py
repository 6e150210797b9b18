"""Placement on a (simulated) two-node cluster.

``ray.cluster_utils.Cluster`` starts a head and a second node on this machine. The
plan runs in a subprocess with its own Ray session (the suite's shared session
cannot be a cluster) and connects through ``RAY_ADDRESS``, as a driver on a real
cluster would. Shard-local and aggregator functions report the node they ran on.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.ray

SCRIPT = textwrap.dedent("""
    import json, os
    import ray
    from ray.cluster_utils import Cluster
    import flowrl

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 1, "include_dashboard": False})
    cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    os.environ["RAY_ADDRESS"] = cluster.address   # flowrl connects to it by itself

    def node():
        return ray.get_runtime_context().get_node_id()

    s = (flowrl.from_range(16, num_shards=4)
         .for_each(lambda x: (node(), x))
         .aggregate(2, lambda g: g.for_each(lambda t: (node(), t[0], t[1]))))
    with flowrl.Plan(s.gather_sync()).compile(backend="ray") as run:
        out = run.take(100)
    driver = node()
    nodes = sorted(n["NodeID"] for n in ray.nodes() if n["Alive"])
    print("RESULT " + json.dumps({"driver": driver, "nodes": nodes,
                                  "shards": sorted({s for _, s, _ in out}),
                                  "aggregators": sorted({a for a, _, _ in out}),
                                  "items": sorted(x for _, _, x in out)}))
    ray.shutdown()
    cluster.shutdown()
""")


def test_shards_spread_over_nodes_and_aggregators_stay_on_the_driver_node():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=90, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    result = json.loads(lines[-1][len("RESULT "):])
    assert len(result["nodes"]) == 2
    assert result["items"] == list(range(16))
    assert result["shards"] == result["nodes"]            # item hosts on both nodes
    assert result["aggregators"] == [result["driver"]]    # aggregators beside the driver
