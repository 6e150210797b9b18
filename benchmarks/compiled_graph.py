"""What Ray Compiled Graphs would save a synchronous gather, against ordinary actor calls.

flowrl's Ray gathers make one ordinary actor call per item, as every hand-written
loop in ``ray_overhead.py`` does, and the Ray calls themselves are most of what
an item costs. Ray's Compiled Graphs (``ray.dag``: ``experimental_compile()``)
replace the per-call task submission with channels set up once. flowrl does not
use them; this script measures what they would buy, as the baseline for that
work. Each harness run is one fresh process that measures every system on the
same actors, interleaved (per round, each system once, the order rotated), and
flowrl's and the compiled graphs' ratios to ``actor-calls`` are taken within a
round. Each actor call returns a fresh (200, 4) float32 batch, as in
``ray_overhead.py``.

Systems, each reading rounds of one item per actor:

- ``actor-calls``: ``ray.get([a.sample.remote() for a in actors])`` (``hand-wait``
  sync in ``ray_overhead.py``);
- ``flowrl``: ``from_actors(actors).gather_sync()`` on ``backend="ray"``;
- ``compiled``: one compiled graph of every actor's ``sample``, ``ray.get`` of
  each ``execute()`` before the next;
- ``compiled-2``: the same with two rounds in flight;
- ``actor-calls+graph``: ``actor-calls`` while a compiled graph is set up on the
  same actors (and idle): what ordinary calls, such as a rollout worker's weight
  updates, would cost beside one. Each compiled graph exists only while its own
  system is measured, so the others never share the CPUs with it.

Layouts: ``0cpu`` (4 actors, ``num_cpus=0``) and ``1cpu`` (2 actors, ``num_cpus=1``),
``ray.init(num_cpus=2)``.

A compiled graph's processes escape the harness's per-run CPU accounting, so its
runs read as overlapped at the default thresholds; ``run_all.sh`` runs this script
with ``--overlap-peak 2.0 --overlap-mean 0.2``, as for RLlib.

    python benchmarks/compiled_graph.py                    # 5 runs
    python benchmarks/compiled_graph.py --quick --no-idle-wait
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SYSTEMS = ["actor-calls", "flowrl", "compiled", "compiled-2", "actor-calls+graph"]
BASE = SYSTEMS[0]
LAYOUTS = {"0cpu": (4, 0), "1cpu": (2, 1)}  # name -> (actors, num_cpus per actor)
WARMUP_ROUNDS = 20
PAIRED = "paired"


def _actor_class():
    import ray_overhead

    class GraphActor(ray_overhead._actor_class()):
        def sample_for(self, _round):  # a graph node takes the graph's input
            return self.sample()

    return GraphActor


def _rounds(system: str, actors, cdag):
    """An iterator of rounds (lists of one item per actor) for ``system``."""
    import ray
    if system == "actor-calls":
        while True:
            yield ray.get([a.sample.remote() for a in actors])
    elif system == "compiled":
        while True:
            yield ray.get(cdag.execute(0))
    else:  # compiled-2: the next round is submitted before this one is read
        pending = [cdag.execute(0)]
        try:
            while True:
                pending.append(cdag.execute(0))
                yield ray.get(pending.pop(0))
        finally:
            for refs in pending:  # the round still in flight, read before the next system
                ray.get(refs)


def measure(system: str, actors, cdag, items: int) -> float:
    """Items/s of reading ``items`` items (whole rounds) after a warm-up."""
    rounds = -(-items // len(actors))
    if system == "flowrl":
        import flowrl
        plan = flowrl.Plan(flowrl.from_actors(actors).gather_sync())
        with plan.compile(backend="ray") as run:
            for _ in range(WARMUP_ROUNDS * len(actors)):
                next(run)
            t = time.perf_counter()
            for _ in range(rounds * len(actors)):
                next(run)
            return rounds * len(actors) / (time.perf_counter() - t)
    it = _rounds(system, actors, cdag)
    try:
        for _ in range(WARMUP_ROUNDS):
            next(it)
        t = time.perf_counter()
        for _ in range(rounds):
            next(it)
        return rounds * len(actors) / (time.perf_counter() - t)
    finally:
        it.close()


def child(args) -> None:
    import warnings
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    import ray
    from ray.dag import InputNode, MultiOutputNode
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    cls = _actor_class()
    result = {}
    for layout, (n_actors, cpus) in LAYOUTS.items():
        actors = [ray.remote(num_cpus=cpus)(cls).remote() for _ in range(n_actors)]
        ray.get([a.ping.remote() for a in actors])
        rates = {s: [] for s in SYSTEMS}
        compile_s = []
        for rep in range(args.reps):
            order = SYSTEMS[rep % len(SYSTEMS):] + SYSTEMS[:rep % len(SYSTEMS)]
            for system in order:
                if system in ("actor-calls", "flowrl"):
                    rates[system].append(measure(system, actors, None, args.items))
                    continue
                # Compiled only while measured: a compiled graph keeps a loop running
                # on each actor, which the other systems must not share the CPUs with.
                with InputNode() as inp:  # a graph compiles once: a new one each time
                    dag = MultiOutputNode([a.sample_for.bind(inp) for a in actors])
                t = time.perf_counter()
                cdag = dag.experimental_compile()
                compile_s.append(time.perf_counter() - t)
                try:
                    plain = system.split("+")[0]  # actor-calls+graph: ordinary calls
                    rates[system].append(measure(plain, actors, cdag, args.items))
                finally:
                    cdag.teardown()
                ray.get([a.ping.remote() for a in actors])  # the actors outlive it
        result[f"compile_s:{layout}"] = statistics.median(compile_s)
        for system in SYSTEMS:
            result[f"{system}:{layout}"] = statistics.median(rates[system])
            if system != BASE:
                result[f"{system}/{BASE}:{layout}"] = statistics.median(
                    a / b for a, b in zip(rates[system], rates[BASE]))
        for a in actors:
            ray.kill(a)
    ray.shutdown()
    harness.write_result(result)


def report(runs: list[dict]) -> None:
    others = SYSTEMS[1:]
    figs = [f"{s}:{lay}" for lay in LAYOUTS for s in SYSTEMS]
    figs += [f"{s}/{BASE}:{lay}" for lay in LAYOUTS for s in others]
    figs += [f"compile_s:{lay}" for lay in LAYOUTS]
    (group,) = harness.summarize(runs, figs) or [None]
    if group is None:
        print("no valid run")
        return
    rows = [[lay, *(harness.fmt_figure(group.figures.get(f"{s}:{lay}"), "{:,.0f}")
                    for s in SYSTEMS),
             *(harness.fmt_figure(group.figures.get(f"{s}/{BASE}:{lay}"), "{:.2f}x")
               for s in others),
             harness.fmt_figure(group.figures.get(f"compile_s:{lay}"), "{:.2f}")]
            for lay in LAYOUTS]
    harness.print_table(
        ["layout", *(f"{s} items/s" for s in SYSTEMS), *(f"{s}/{BASE}" for s in others),
         "compile s"], rows,
        title=f"sync rounds of one item per actor; ratios taken within a round, median "
              f"[min-max] over {group.n} runs; 0cpu: 4 actors num_cpus=0, 1cpu: 2 actors "
              "num_cpus=1; ray.init(num_cpus=2)")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--items", type=int, default=4000)
    p.add_argument("--reps", type=int, default=3,
                   help="measurements per system and process")
    harness.add_arguments(p)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, items=200, reps=1)
    if args.child:
        child(args)
        return
    runs, _ = harness.run(args, "compiled_graph", __file__, [PAIRED],
                          harness.forward(args, "items", "reps"),
                          meta={"items": args.items, "reps": args.reps, "layouts": LAYOUTS,
                                "systems": SYSTEMS})
    report(runs)


if __name__ == "__main__":
    main()
