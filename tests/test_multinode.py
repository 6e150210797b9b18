"""A real two-node Ray cluster losing its worker node in the middle of PPO training.

``ray.cluster_utils.Cluster`` starts a head and a worker node (separate raylets)
on this machine; the script runs in a subprocess with its own Ray session (the
suite's shared session cannot be a cluster) and connects through ``RAY_ADDRESS``.
The head has 2 CPUs, one held by a placeholder actor while PPO starts, so its two
1-CPU rollout workers land one per node. The worker node is then removed (its
raylet and workers killed); training goes on, the lost worker replaced on the head
(the placeholder is released to make room), and nothing hangs.
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
    import json, os, time
    import ray
    from ray.cluster_utils import Cluster
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy
    from flowrl.algorithms.ppo import PPO, PPOConfig

    cluster = Cluster(initialize_head=True, head_node_args={
        "num_cpus": 2, "include_dashboard": False,
        "_system_config": {"health_check_period_ms": 500,
                           "health_check_failure_threshold": 4}})
    worker_node = cluster.add_node(num_cpus=1)
    cluster.wait_for_nodes()
    os.environ["RAY_ADDRESS"] = cluster.address
    ray.init(address=cluster.address, log_to_driver=False)
    head = ray.get_runtime_context().get_node_id()

    @ray.remote(num_cpus=1)
    class Placeholder:
        def ping(self):
            return True

    hold = Placeholder.options(scheduling_strategy=NodeAffinitySchedulingStrategy(
        node_id=head, soft=False)).remote()
    ray.get(hold.ping.remote())

    def where(w):
        return ray.get(w.apply.remote(lambda _: ray.get_runtime_context().get_node_id()))

    algo = PPO(PPOConfig(env="CartPole-v1", num_workers=2, num_envs_per_worker=1,
                         rollout_fragment_length=32, train_batch_size=64,
                         sgd_minibatch_size=32, num_sgd_iter=1, backend="ray", seed=0,
                         sample_timeout_s=30))
    before = sorted(where(w) for w in algo.workers.remote_workers())
    first = algo.train()
    ray.kill(hold)                        # room on the head for a replacement
    cluster.remove_node(worker_node)      # the worker node's raylet and workers die
    t0 = time.monotonic()
    results = [algo.train() for _ in range(3)]
    after = sorted(where(w) for w in algo.workers.remote_workers())
    last = results[-1]
    print("RESULT " + json.dumps({
        "head": head, "worker_node": worker_node.node_id, "before": before, "after": after,
        "steps": [first["timesteps_total"], last["timesteps_total"]],
        "restarts": last["num_worker_restarts"], "healthy": last["num_healthy_workers"],
        "recovery_s": time.monotonic() - t0}))
    algo.stop()
    ray.shutdown()
    cluster.shutdown()
""")


def test_ppo_survives_losing_the_worker_node():
    env = {k: v for k, v in os.environ.items() if k != "RAY_ADDRESS"}
    proc = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True,
                          timeout=240, env=env)
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")]
    assert proc.returncode == 0 and lines, proc.stdout[-3000:] + proc.stderr[-3000:]
    r = json.loads(lines[-1][len("RESULT "):])
    assert r["before"] == sorted([r["head"], r["worker_node"]])   # one worker per node
    assert r["after"] == [r["head"], r["head"]]                   # replaced on the head
    assert r["restarts"] == 1 and r["healthy"] == 2
    assert r["steps"][1] > r["steps"][0]
