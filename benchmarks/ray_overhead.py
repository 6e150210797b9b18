"""What flowrl's Ray gathers cost against the best hand-written Ray loop and ray.util.iter.

Identical trivial actors each return a fresh 200x4 float32 numpy batch per call.
Each system runs in its own process (``benchmarks/harness.py``: fresh process per
system and seed, interleaved, idle CPU) with ``ray.init(num_cpus=2)`` and reads
the actors in two modes:

- ``async``: keep ``--num-async`` calls in flight per actor, take results as they
  come (flowrl ``gather_async``);
- ``sync``: rounds of one call per actor, a barrier per round (flowrl ``gather_sync``).

Systems:

- ``flowrl``: ``from_actors(actors).gather_async(num_async=2)`` / ``.gather_sync()``
  on ``backend="ray"``;
- ``hand-wait``: async: one batched ``ray.wait`` over every pending ref per step
  (non-blocking first, then blocking for one), every ready ref fetched with one
  ``ray.get``; sync: ``ray.get([a.sample.remote() for a in actors])``;
- ``hand-one``: the textbook loop: a blocking ``ray.wait(pending, num_returns=1)``
  per item, then ``ray.get`` of that one (sync: the round's refs waited for one
  at a time the same way);
- ``hand-rr``: round-robin ``ray.get`` of each actor's oldest call in turn
  (async: resubmit to that actor at once; sync: submit the round, then get one
  by one);
- ``hand-nret``: ``ray.wait(pending, num_returns=len(actors))`` then one
  ``ray.get`` (sync: ``num_returns`` = the whole round);
- ``hand-asyncio``: not a contender but a reference: ``hand-wait``'s loop with each
  fetch (a round; a pass, which resubmits what it served before it returns, as
  flowrl's passes do) a coroutine run to completion on an asyncio event loop, as an
  engine that runs every plan on one loop enters it once per fetch. Its ratio to
  ``hand-wait`` is what that entry alone costs, and flowrl's ratio to it what flowrl's
  machinery costs beyond it;
- ``ray.util.iter``: ``from_actors(actors).gather_async(num_async=2)`` /
  ``.gather_sync()`` (what RLlib 1.x used).

Each mode runs on three actor layouts: ``0cpu`` (4 actors with ``num_cpus=0``, more
actors than cores), ``1cpu`` (2 actors with ``num_cpus=1``, one per core) and
``skew`` (like ``1cpu``, but the second actor sleeps 2 ms per item: actors that
differ in speed, as rollout workers on different envs or machines do).

The hand-written loops do not all keep ``gather_async``'s contract
(docs/design.md#from-parallel-to-local: keep ``num_async`` requests in flight per
shard, yield items as they complete):
``hand-rr`` blocks on one actor while the others' results wait, and
``hand-nret`` leaves finished requests unreplaced until as many results as
actors are ready. Both save driver wake-ups when actors run in lockstep; the
``skew`` layout shows what that costs when they do not. ``hand-wait`` and
``hand-one`` keep the contract, as flowrl does. Each item carries the time its
actor made it, so every measurement also records the items' median *latency*:
from the actor making an item to the loop handing it out (one machine, one
clock). A loop that batches wake-ups buys its throughput with this latency.
Each measurement also reads the CPU time it cost, per item: in the driver process
(every thread, Ray's own included) and in the whole Ray session (the driver plus
every process it started: GCS, raylet, the actors' workers). On 2 cores the
actors, the driver and Ray's processes share the CPUs, so a loop's items/s is
bounded by its session CPU per item; flowrl's ratio of it to each hand loop says
what flowrl's machinery costs the machine, with less scheduling noise than a rate.
Within a process every measurement pulls ``--items`` items after a warm-up and
is repeated ``--reps`` times (interleaved across modes); between measurements
every in-flight call is drained (each actor answers a ping, which it runs after
every call submitted before it). Reported: items/s, median over the harness's
runs of each run's median; flowrl's ratio to the best hand-written loop of each
mode and layout, and to ray.util.iter.

``--paired`` adds a second, more precise reading of the same question. Each
harness run is then one fresh process (system ``paired``) that measures *every*
system on the same actors, interleaved: per round, each mode and system once,
the system order rotated each round, over as many rounds as there are systems
(``--reps`` defaults to that, with 2,000 items per measurement), so each system
is measured once in every position of the order. (With 3 rounds of 6 systems,
as before, some systems never ran first and ray.util.iter always ran just before
flowrl or last: whatever a position costs or gives, such as following the other
mode's measurements, went to some systems only.) flowrl's ratio to each other system is
taken within a round (measurements seconds apart, same actors, same process), so
the process-to-process spread (Ray worker placement, machine state: often 15-20%
between fresh processes) cancels out; the table gives the median of those
paired ratios per run, and its median and range over runs. A second table gives
each system's item latency, the median over runs of each run's median; a third,
flowrl's CPU per item and its within-round ratio to each hand loop's.

    python benchmarks/ray_overhead.py                      # 5 runs per system
    python benchmarks/ray_overhead.py --paired             # 5 runs, every system in each
    python benchmarks/ray_overhead.py --quick --no-idle-wait
"""

from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

SYSTEMS = ["flowrl", "hand-wait", "hand-one", "hand-rr", "hand-nret", "hand-asyncio",
           "ray.util.iter"]
#: The hand-written loops flowrl is held to; hand-asyncio is a reference beside them.
HAND = ["hand-wait", "hand-one", "hand-rr", "hand-nret"]
MODES = ["async", "sync"]
SKEW_DELAY_S = 0.002  # the slow actor of the "skew" layout
#: name -> (actors, num_cpus per actor, seconds each actor sleeps per item)
LAYOUTS = {"0cpu": (4, 0, (0.0,) * 4), "1cpu": (2, 1, (0.0,) * 2),
           "skew": (2, 1, (0.0, SKEW_DELAY_S))}
WARMUP = 50
LAYOUT_NOTE = ("0cpu: 4 actors num_cpus=0, 1cpu: 2 actors num_cpus=1, skew: 1cpu with one "
               f"actor sleeping {SKEW_DELAY_S * 1e3:g} ms per item; ray.init(num_cpus=2)")
PAIRED = "paired"  # one process measures every system (--paired)
#: Items per measurement under --paired, whose default --reps is len(SYSTEMS): 2,000
#: items per round and system, in a balanced order (see the docstring).
PAIRED_ITEMS = 2000


def _actor_class():
    import time

    import numpy as np
    from ray.util.iter import ParallelIteratorWorker

    import flowrl

    class BenchActor(flowrl.ShardHost, ParallelIteratorWorker):
        """One item = one fresh (200, 4) float32 batch; readable by every driver."""

        def __init__(self, delay_s: float = 0.0):
            ParallelIteratorWorker.__init__(self, self._forever, repeat=False)
            self.delay_s = delay_s

        def sample(self):
            if self.delay_s:
                time.sleep(self.delay_s)
            item = np.ones((200, 4), dtype=np.float32)
            item.view(np.float64)[0, 0] = time.time()  # when it was made (see latency)
            return item

        def ping(self):
            return True

        def _forever(self):
            while True:
                yield self.sample()

        def shard_items(self):
            return self._forever()

    return BenchActor


def cpu_meter():
    """A reader of ``(driver CPU-s, session CPU-s)``: this process (every thread, from
    ``time.process_time``) and this process plus every process it started (Ray's GCS,
    raylet and workers, the actors among them; ``/proc``, clock-tick resolution)."""
    tree = harness.TreeCpu([os.getpid()])
    return lambda: (time.process_time(), tree.read())


def timed(it, n: int, cpu=None) -> tuple[float, float, float, float]:
    """Pull ``n`` items from iterator ``it`` after a warm-up: items/s, the items' median
    latency in ms (each item's stamp: when its actor made it), and CPU microseconds
    per item in this process and in the whole Ray session (from ``cpu``, a
    :func:`cpu_meter`; NaN without one)."""
    import numpy as np
    for _ in range(WARMUP):
        next(it)
    made = np.empty(n)
    got = np.empty(n)
    before = cpu() if cpu is not None else None
    t = time.perf_counter()
    for i in range(n):
        item = next(it)
        got[i] = time.time()
        made[i] = item.view(np.float64)[0, 0]
    rate = n / (time.perf_counter() - t)
    driver_us = session_us = math.nan
    if before is not None:
        after = cpu()
        driver_us, session_us = ((a - b) * 1e6 / n for a, b in zip(after, before))
    return rate, float(np.median(got - made)) * 1e3, driver_us, session_us


# -- hand-written loops (each keeps its pending refs in `pending` for draining) ---------
def hand_wait_async(actors, k, pending):
    import ray
    for _ in range(k):
        for a in actors:
            pending[a.sample.remote()] = a
    while True:
        refs = list(pending)
        ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
        if not ready:
            ready, _ = ray.wait(refs, num_returns=1)
        for ref, value in zip(ready, ray.get(ready)):
            a = pending.pop(ref)
            pending[a.sample.remote()] = a
            yield value


def hand_one_async(actors, k, pending):
    import ray
    for _ in range(k):
        for a in actors:
            pending[a.sample.remote()] = a
    while True:
        (ref,), _ = ray.wait(list(pending), num_returns=1)
        value = ray.get(ref)
        a = pending.pop(ref)
        pending[a.sample.remote()] = a
        yield value


def hand_rr_async(actors, k, pending):
    import collections

    import ray
    queues = [collections.deque() for _ in actors]
    for _ in range(k):
        for a, q in zip(actors, queues):
            ref = a.sample.remote()
            q.append(ref)
            pending[ref] = a
    while True:
        for a, q in zip(actors, queues):
            ref = q.popleft()
            value = ray.get(ref)
            del pending[ref]
            new = a.sample.remote()
            q.append(new)
            pending[new] = a
            yield value


def hand_nret_async(actors, k, pending):
    import ray
    for _ in range(k):
        for a in actors:
            pending[a.sample.remote()] = a
    while True:
        refs = list(pending)
        ready, _ = ray.wait(refs, num_returns=min(len(actors), len(refs)))
        for ref, value in zip(ready, ray.get(ready)):
            a = pending.pop(ref)
            pending[a.sample.remote()] = a
            yield value


def hand_sync(kind):
    def loop(actors, _k, pending):
        import ray
        while True:
            refs = [a.sample.remote() for a in actors]
            pending.update(zip(refs, actors))
            if kind == "wait":
                values = ray.get(refs)
            elif kind == "rr":
                values = [ray.get(r) for r in refs]
            elif kind == "one":
                got, rest = {}, refs
                while rest:
                    (ref,), rest = ray.wait(rest, num_returns=1)
                    got[ref] = ray.get(ref)
                values = [got[r] for r in refs]
            else:
                ready, _ = ray.wait(refs, num_returns=len(refs))
                values = ray.get(refs)
            for r in refs:
                del pending[r]
            yield from values
    return loop


def hand_asyncio(mode):
    """hand-wait's loop with each fetch (``sync``: a round; ``async``: a pass, which
    resubmits what it served before returning, as flowrl's passes do) a coroutine run
    to completion on an asyncio event loop, as an engine that runs every plan on one
    loop enters it once per fetch: what that entry costs, without an engine."""
    def loop(actors, k, pending):
        import asyncio

        import ray

        async def round_():
            refs = [a.sample.remote() for a in actors]
            pending.update(zip(refs, actors))
            values = ray.get(refs)
            for r in refs:
                del pending[r]
            return values

        async def pass_():
            refs = list(pending)
            ready, _ = ray.wait(refs, num_returns=len(refs), timeout=0)
            if not ready:
                ready, _ = ray.wait(refs, num_returns=1)
            values = ray.get(ready)
            for ref in ready:
                a = pending.pop(ref)
                pending[a.sample.remote()] = a
            return values

        if mode == "async":
            for _ in range(k):
                for a in actors:
                    pending[a.sample.remote()] = a
        fetch = pass_ if mode == "async" else round_
        ev = asyncio.new_event_loop()
        try:
            while True:
                yield from ev.run_until_complete(fetch())
        finally:
            ev.close()
    return loop


LOOPS = {("hand-wait", "async"): hand_wait_async, ("hand-one", "async"): hand_one_async,
         ("hand-rr", "async"): hand_rr_async, ("hand-nret", "async"): hand_nret_async,
         ("hand-wait", "sync"): hand_sync("wait"), ("hand-one", "sync"): hand_sync("one"),
         ("hand-rr", "sync"): hand_sync("rr"), ("hand-nret", "sync"): hand_sync("nret"),
         ("hand-asyncio", "async"): hand_asyncio("async"),
         ("hand-asyncio", "sync"): hand_asyncio("sync")}


def measure(system: str, mode: str, actors, n: int, k: int,
            cpu=None) -> tuple[float, float, float, float]:
    """One measurement (:func:`timed`'s figures), then drain every call still in flight
    on the actors."""
    import ray
    try:
        if system == "flowrl":
            import flowrl
            s = flowrl.from_actors(actors)
            out = s.gather_async(num_async=k) if mode == "async" else s.gather_sync()
            with flowrl.Plan(out).compile(backend="ray") as run:
                return timed(run, n, cpu)
        if system == "ray.util.iter":
            from ray.util.iter import from_actors
            par = from_actors(actors)
            it = par.gather_async(num_async=k) if mode == "async" else par.gather_sync()
            return timed(iter(it), n, cpu)
        pending: dict = {}
        gen = LOOPS[system, mode](actors, k, pending)
        try:
            return timed(gen, n, cpu)
        finally:
            gen.close()
            if pending:
                ray.get(list(pending))
    finally:
        ray.get([a.ping.remote() for a in actors])  # actor calls run in order: a drain


def ref_drop_us(actor, n: int = 1000) -> float:
    """Median driver time, microseconds, of dropping the last reference to a completed
    actor call's reply (what the gathers release once the shard's next request is
    sent; runtime/ray_backend.py "Requests")."""
    import ray
    times = []
    for _ in range(n):
        ref = actor.sample.remote()
        ray.get(ref)
        t = time.perf_counter()
        del ref
        times.append(time.perf_counter() - t)
    return statistics.median(times) * 1e6


def child(args) -> None:
    import warnings
    warnings.filterwarnings("ignore", category=DeprecationWarning)
    import ray
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    cls = _actor_class()
    systems = SYSTEMS if args.child == PAIRED else [args.child]
    result = {}
    for layout, (n_actors, cpus, delays) in LAYOUTS.items():
        actors = [ray.remote(num_cpus=cpus)(cls).remote(d) for d in delays]
        ray.get([a.ping.remote() for a in actors])
        cpu = cpu_meter()  # after the actors: their workers are in the tree it reads
        if args.child == PAIRED:
            result[f"ref_drop_us:{layout}"] = ref_drop_us(actors[0])
        figs: dict[tuple[str, str], list[tuple[float, float, float, float]]] = {
            (s, m): [] for s in systems for m in MODES}
        for rep in range(args.reps):
            order = systems[rep % len(systems):] + systems[:rep % len(systems)]
            for mode in MODES:
                for system in order:
                    figs[system, mode].append(
                        measure(system, mode, actors, args.items, args.num_async, cpu))
        for mode in MODES:
            cell = f"{mode}_{layout}"
            for system in systems:
                rate, latency, driver, session = (statistics.median(f) for f in
                                                  zip(*figs[system, mode]))
                prefix = "" if args.child != PAIRED else f"{system}:"
                result[f"{prefix}{cell}"] = rate
                result[f"latency_ms:{prefix}{cell}"] = latency
                result[f"driver_us:{prefix}{cell}"] = driver
                result[f"cpu_us:{prefix}{cell}"] = session
                if args.child != PAIRED or system == "flowrl":
                    continue
                # flowrl's ratio to this system within each round: items/s, and the
                # session's CPU per item (below 1: flowrl costs the machine less)
                pairs = list(zip(figs["flowrl", mode], figs[system, mode]))
                result[f"flowrl/{system}:{cell}"] = statistics.median(
                    f[0] / o[0] for f, o in pairs)
                result[f"cpu:flowrl/{system}:{cell}"] = statistics.median(
                    f[3] / o[3] for f, o in pairs)
            if args.child == PAIRED:
                # the event loop's price: the same loop entering it per fetch, or not
                result[f"hand-asyncio/hand-wait:{cell}"] = statistics.median(
                    a[0] / w[0] for a, w in zip(figs["hand-asyncio", mode],
                                                figs["hand-wait", mode]))
        for a in actors:
            ray.kill(a)
    ray.shutdown()
    harness.write_result(result)


def report_paired(runs: list[dict]) -> None:
    """The paired table: per cell, flowrl's within-round ratio to every other system."""
    keys = [f"{m}_{lay}" for lay in LAYOUTS for m in MODES]
    others = [s for s in SYSTEMS if s != "flowrl"]
    figs = [f"{s}:{k}" for k in keys for s in SYSTEMS]
    figs += [f"flowrl/{s}:{k}" for k in keys for s in others]
    figs += [f"latency_ms:{s}:{k}" for k in keys for s in SYSTEMS]
    figs += [f"{what}:flowrl:{k}" for k in keys for what in ("cpu_us", "driver_us")]
    figs += [f"cpu:flowrl/{h}:{k}" for k in keys for h in HAND]
    figs += [f"hand-asyncio/hand-wait:{k}" for k in keys]
    figs += [f"ref_drop_us:{lay}" for lay in LAYOUTS]
    (group,) = harness.summarize(runs, figs) or [None]
    if group is None:
        print("no valid paired run")
        return
    rows = []
    for key in keys:
        ratios = {s: group.figures.get(f"flowrl/{s}:{key}") for s in others}
        hands = {h: ratios[h] for h in HAND if ratios[h]}
        worst = min(hands, key=lambda h: hands[h][0], default=None)
        rows.append([key, harness.fmt_figure(group.figures.get(f"flowrl:{key}"), "{:,.0f}"),
                     *(harness.fmt_figure(ratios[s], "{:.2f}x") for s in others),
                     f"{worst} {hands[worst][0]:.2f}x" if worst else "-"])
    harness.print_table(
        ["mode_layout", "flowrl items/s", *(f"flowrl/{s}" for s in others),
         "vs best hand"], rows,
        title=f"paired: flowrl's ratio to each system measured in the same process and "
              f"round, median [min-max] over {group.n} runs; {LAYOUT_NOTE}")
    loop = [[key, harness.fmt_figure(group.figures.get(f"hand-asyncio/hand-wait:{key}"),
                                     "{:.2f}x"),
             harness.fmt_figure(group.figures.get(f"flowrl/hand-asyncio:{key}"), "{:.2f}x")]
            for key in keys]
    if any(c != "-" for row in loop for c in row[1:]):
        harness.print_table(
            ["mode_layout", "hand-asyncio/hand-wait", "flowrl/hand-asyncio"], loop,
            title="the event loop's share: hand-wait's loop entering an asyncio loop once "
                  "per fetch against the same loop without it, and flowrl against that, "
                  f"within a round, median [min-max] over {group.n} runs")
    lat = [[key, *(harness.fmt_figure(group.figures.get(f"latency_ms:{s}:{key}"), "{:.2f}")
                   for s in SYSTEMS)] for key in keys]
    if any(c != "-" for row in lat for c in row[1:]):
        harness.print_table(
            ["mode_layout", *SYSTEMS], lat,
            title="median item latency, ms (from the actor making an item to the loop "
                  f"handing it out), median [min-max] over {group.n} runs")
    cpu = [[key, *(harness.fmt_figure(group.figures.get(f"{what}:flowrl:{key}"), "{:,.0f}")
                   for what in ("cpu_us", "driver_us")),
             *(harness.fmt_figure(group.figures.get(f"cpu:flowrl/{h}:{key}"), "{:.2f}x")
               for h in HAND)] for key in keys]
    if any(c != "-" for row in cpu for c in row[1:]):
        harness.print_table(
            ["mode_layout", "flowrl session us/item", "flowrl driver us/item",
             *(f"cpu flowrl/{h}" for h in HAND)], cpu,
            title="CPU per item, microseconds: the whole Ray session (driver, actors, "
                  "GCS, raylet) and the driver alone; flowrl's session CPU per item over "
                  "each hand loop's, within a round (below 1.00x: flowrl costs less), "
                  f"median [min-max] over {group.n} runs")
    drops = [f"{lay} {harness.fmt_figure(group.figures.get(f'ref_drop_us:{lay}'), '{:.1f}')}"
             for lay in LAYOUTS if group.figures.get(f"ref_drop_us:{lay}")]
    if drops:
        print("\ndropping the last reference to a completed actor call's reply, driver "
              f"microseconds (median of 1,000; median [min-max] over {group.n} runs): "
              + ", ".join(drops))


def take_defaults(args: argparse.Namespace) -> None:
    """Give ``--items`` and ``--reps``, where unset, their defaults: 4,000 items and 3
    repetitions, or with ``--paired`` 2,000 items and one repetition per system, so
    that the rotated order measures each system once in every position.

    >>> a = argparse.Namespace(paired=True, child=None, items=None, reps=None)
    >>> take_defaults(a); (a.items, a.reps == len(SYSTEMS))
    (2000, True)
    >>> a = argparse.Namespace(paired=False, child="flowrl", items=None, reps=2)
    >>> take_defaults(a); (a.items, a.reps)
    (4000, 2)
    """
    paired = args.paired or args.child == PAIRED
    if args.items is None:
        args.items = PAIRED_ITEMS if paired else 4000
    if args.reps is None:
        args.reps = len(SYSTEMS) if paired else 3


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--systems", nargs="*", default=SYSTEMS, choices=SYSTEMS)
    p.add_argument("--paired", action="store_true",
                   help="each run measures every system in one process (see the docstring)")
    p.add_argument("--items", type=int, default=None,
                   help="items per measurement (default 4000; 2000 with --paired)")
    p.add_argument("--reps", type=int, default=None,
                   help="measurements per process and system (default 3; with --paired, "
                        "one per system, so that each system is measured once in every "
                        "position of the rotated order)")
    p.add_argument("--num-async", type=int, default=2)
    harness.add_arguments(p)
    args = p.parse_args(argv)
    harness.shorten_for_quick(args, items=300, reps=1)
    take_defaults(args)
    if args.child:
        child(args)
        return
    child_args = harness.forward(args, "items", "reps", "num_async")
    meta = {"items": args.items, "reps": args.reps, "num_async": args.num_async,
            "layouts": LAYOUTS}
    if args.paired:
        runs, _ = harness.run(args, "ray_overhead-paired", __file__, [PAIRED], child_args,
                              meta={**meta, "systems": SYSTEMS})
        report_paired(runs)
        return
    runs, _ = harness.run(args, "ray_overhead", __file__, args.systems, child_args, meta)
    report(runs)


def report(runs: list[dict]) -> None:
    """The unpaired table: each system's items/s (one process per system and run),
    flowrl's ratio to the best hand loop and to ray.util.iter."""
    keys = [f"{m}_{lay}" for lay in LAYOUTS for m in MODES]
    groups = {g.system: g for g in harness.summarize(runs, keys)}

    def figure(system, key):
        return groups[system].figures.get(key) if system in groups else None

    rows = []
    for key in keys:
        hands = {h: figure(h, key) for h in HAND}
        best_name = max((h for h in hands if hands[h]), key=lambda h: hands[h][0], default=None)
        best = hands.get(best_name) if best_name else None
        fl, it = figure("flowrl", key), figure("ray.util.iter", key)
        rows.append([key, *(harness.fmt_figure(figure(s, key), "{:,.0f}") for s in SYSTEMS),
                     best_name or "-", harness.fmt_ratio(harness.ratio(fl, best)),
                     harness.fmt_ratio(harness.ratio(fl, it))])
    n = {g.system: g.n for g in groups.values()}
    harness.print_table(
        ["mode_layout", *SYSTEMS, "best hand", "flowrl/best hand", "flowrl/iter"], rows,
        title=f"items/s, median [min-max] over runs {n}; {LAYOUT_NOTE}")


if __name__ == "__main__":
    main()
