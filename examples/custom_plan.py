"""Build, render and run a custom plan: no RL, just the dataflow engine.

Two sources of numbers are transformed where they live (on their shards), gathered
as they complete, interleaved with a third stream on the driver and batched. The
script prints the plan as DOT, renders it to SVG when Graphviz's ``dot`` is
installed (else writes the ``.dot`` text), runs it, and prints per-node stats.

    python examples/custom_plan.py [--out DIR] [--backend local|ray]
"""

from __future__ import annotations

import argparse
import os
import tempfile

import flowrl
from flowrl.errors import FlowError


def build_plan(n: int) -> flowrl.Plan:
    # A ParallelStream with 2 shards; for_each/filter run on each shard (fused into
    # one stage per shard host, so they cost no extra hop).
    squares = (flowrl.from_range(n, num_shards=2, name="numbers")
               .for_each(lambda x: x * x, name="square")
               .filter(lambda x: x % 2 == 0, name="even"))
    # gather_async: from parallel to one local stream on the driver, items as
    # they complete (per-shard order is kept, cross-shard order is not defined).
    gathered = squares.gather_async(num_async=2)
    # A second, driver-side source, interleaved with the first in strict turns.
    labels = flowrl.from_iterable(lambda: (f"tick-{i}" for i in range(n)), name="ticks")
    mixed = flowrl.Concurrently([gathered, labels], mode="round_robin")
    # Group every 4 items into one list; Plan validates the graph as it is built.
    return flowrl.Plan(mixed.batch(4, name="groups"), name="custom")


def main(argv=None) -> dict:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--out", default=tempfile.mkdtemp(prefix="flowrl-plan-"))
    p.add_argument("--backend", default="local", choices=["local", "ray"])
    args = p.parse_args(argv)
    n = 20 if os.environ.get("CI") == "true" else 200
    plan = build_plan(n)
    dot = plan.to_dot()                            # byte-stable DOT text
    print(dot)
    try:                                           # SVG through Graphviz, when installed
        path = os.path.join(args.out, "custom_plan.svg")
        plan.render(path)
    except FlowError as e:                         # no `dot` binary: keep the text
        path = os.path.join(args.out, "custom_plan.dot")
        with open(path, "w") as f:
            f.write(dot)
        print(f"(no SVG: {e})")
    print(f"plan written to {path}")
    with plan.compile(backend=args.backend, seed=0) as run:
        groups = list(run)                         # the plan ends when both sources end
        stats = run.stats()
    print(f"{len(groups)} groups, first: {groups[0]}")
    for node in ("square", "groups"):
        print(f"{node}: {stats[node]['items_in']} in, {stats[node]['items_out']} out")
    return {"groups": groups, "stats": stats, "path": path}


if __name__ == "__main__":
    main()
