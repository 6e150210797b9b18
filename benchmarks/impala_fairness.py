"""IMPALA with a learner slower than its samplers: which workers feed it, and how stale.

The question (issue: ``gather_async`` starves shards under a slow consumer): with
the learner as the bottleneck, does every rollout worker still get its fragments
trained on, and how far behind the learner is the policy that sampled them? Run
it once against the code before a change and once after (``--label before`` /
``--label after``; ``PYTHONPATH`` picks the flowrl measured) and compare.

Systems: ``flowrl-w3`` (the workers' fragments gathered on the driver) and
``flowrl-agg1-w3`` (through one aggregator actor, ``num_aggregation_workers=1``,
which gathers from the workers with one request in flight each); ``--aggregators``
picks them (0 is the first).

Setup: flowrl IMPALA on the Ray backend, ``--workers`` (default 3) remote workers,
CartPole-v1 (``--sleep-ms`` > 0 adds a fixed sleep per env step, as in
``impala_throughput.py``), ``--envs`` (default 10) envs per worker stepped as one
vector, fragment 50 (so one sample is 500 env steps, one train batch), model
``--hidden`` (default 512 512), RLlib 1.x defaults otherwise
(``learner_queue_size`` 16, ``--in-flight`` 2 requests in flight per worker,
weights to the producing worker after every update). The learner is made the
bottleneck by the bigger network together with ``--sgd-iter`` (default 8) passes
over each train batch (IMPALA's ``num_sgd_iter``: one update per pass). The
network alone does not do it on CPU: per env step, a worker's sampling (one
batched forward per vector step, the env, the sampler) costs about as much CPU as
one learner pass (checked with a ``RolloutWorker``'s own ``sample`` and
``learn_on_batch`` at these settings), and with one env per worker sampling costs
more. Each run checks that the learner was the bottleneck: the table gives the
learner's busy fraction and the mean number of train batches waiting in its queue
after each result (full is ``learner_queue_size``); a learner that keeps its
queue near full has more data than it can train on (the ``bound by`` column says
which side limited the run).

Instrumentation lives in this script and uses only public API (it runs unchanged
on older flowrl, e.g. ``ee894dc``): a subclass of ``IMPALAPolicy`` counts the
learner's updates (its version: the number of ``learn_on_batch`` calls), puts the
version into the weights it hands out and records the version of the weights it
received; every batch a worker samples gets ``behaviour_version``,
``worker_index`` and ``fragment`` (a per-worker count) columns.

A run trains ``--warmup-updates`` learner updates (a backlog builds up), then counts
over the next ``--updates`` updates (a window in learner updates, so every run
weighs the same number of updates):

- per worker index: env steps the learner trained on (first trained in the
  window: a batch's rows count once however many passes), their share, max/min
  ("inf" when a worker got nothing in the window);
- policy lag per trained env step: learner version at the update minus the
  version of the weights that sampled the row (mean, p50, p95, max; in updates);
- env steps sampled per second (flowrl's counter) and trained per second;
- the learner's busy fraction, the mean queue depth after each result and from
  it the bottleneck: ``learner`` when the queue held at least half its size.

Every seed runs in a fresh process on an idle CPU (``benchmarks/harness.py``); raw
JSON goes to ``benchmarks/results/impala_fairness[-LABEL]-<UTC time>.json`` and the
printed report names the flowrl that was imported (path and git commit).

    python benchmarks/impala_fairness.py --label after         # 2 systems x 3 seeds
    PYTHONPATH=/path/to/old/checkout python benchmarks/impala_fairness.py --label before
    python benchmarks/impala_fairness.py --quick --no-idle-wait  # smoke, 1 seed
"""

from __future__ import annotations

import argparse
import importlib.util
import math
import os
import re
import subprocess
import sys
import time
from collections import Counter
from typing import Any, Mapping, Sequence

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402  (stdlib only)
from impala_throughput import sleepy_cartpole  # noqa: E402  (stdlib at import)
from training import start_ray  # noqa: E402

BENCHMARK = "impala_fairness"
#: Keys added to every sampled batch and to the weights the learner hands out.
VERSION_COL, WORKER_COL, FRAGMENT_COL = "behaviour_version", "worker_index", "fragment"
VERSION_KEY = "__probe_version__"
LABEL_RE = re.compile(r"^[A-Za-z0-9_.-]+$")


SYSTEM_RE = re.compile(r"^flowrl(?:-agg(\d+))?-w(\d+)$")


def system_for(workers: int, aggregators: int = 0) -> str:
    """``flowrl-wN`` (gathering on the driver) or ``flowrl-aggK-wN`` (K aggregators).

    >>> system_for(3), system_for(3, 1), SYSTEM_RE.match("flowrl-agg1-w3").groups()
    ('flowrl-w3', 'flowrl-agg1-w3', ('1', '3'))
    """
    return f"flowrl-w{workers}" if aggregators == 0 else f"flowrl-agg{aggregators}-w{workers}"


# -- instrumentation (built in the child: importing this module imports no flowrl) --------
def probe_policy_class():
    """``IMPALAPolicy`` plus the version bookkeeping described in the module docstring.

    On a worker, ``behaviour_version`` is the version of the last weights received,
    ``worker_index`` is set by :func:`tag_workers`, and every sampled batch gets
    those two columns and a ``fragment`` number (counted per worker). On the
    learner, ``version`` counts ``learn_on_batch`` calls and ``records`` holds one
    entry per call: ``(version before it, {worker index: rows of fragments not
    trained on before}, {lag: rows})``: with several passes over a batch its rows
    count once per worker, and their lag at every pass.
    """
    import numpy as np

    from flowrl.batch import SampleBatch
    from flowrl.policies import IMPALAPolicy

    class ProbeIMPALAPolicy(IMPALAPolicy):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.version = 0
            self.behaviour_version: int | None = None
            self.worker_index: int | None = None
            self.fragments = 0
            self.records: list[tuple[int, dict[int, int], dict[int, int]]] = []
            self.trained_fragments: set[tuple[int, int]] = set()

        def get_weights(self):
            return {**super().get_weights(), VERSION_KEY: np.asarray(self.version)}

        def set_weights(self, weights):
            if VERSION_KEY not in weights:
                raise RuntimeError(f"ProbeIMPALAPolicy.set_weights: weights without "
                                   f"{VERSION_KEY!r}; they did not come from a probe learner")
            rest = dict(weights)
            self.behaviour_version = int(rest.pop(VERSION_KEY))
            super().set_weights(rest)

        def postprocess_trajectories(self, batch, ends, last_values):
            out = super().postprocess_trajectories(batch, ends, last_values)
            if self.behaviour_version is None or self.worker_index is None:
                raise RuntimeError(
                    f"ProbeIMPALAPolicy sampled with behaviour_version="
                    f"{self.behaviour_version}, worker_index={self.worker_index}: a worker "
                    "got no weights or was not tagged (a restarted worker is not)")
            self.fragments += 1
            n = out.count
            return out.with_columns(**{
                VERSION_COL: np.full(n, self.behaviour_version, np.int64),
                WORKER_COL: np.full(n, self.worker_index, np.int64),
                FRAGMENT_COL: np.full(n, self.fragments, np.int64)})

        def learn_on_batch(self, batch, **kwargs):
            rows = batch if isinstance(batch, SampleBatch) else getattr(batch, "source", None)
            if rows is None or any(c not in rows for c in (VERSION_COL, WORKER_COL,
                                                            FRAGMENT_COL)):
                raise RuntimeError(
                    f"ProbeIMPALAPolicy.learn_on_batch: the train batch lacks the "
                    f"{VERSION_COL!r}/{WORKER_COL!r}/{FRAGMENT_COL!r} columns; the sampler "
                    "did not call postprocess_trajectories")
            lags = self.version - np.asarray(rows[VERSION_COL], np.int64)
            pairs, counts = np.unique(np.stack([np.asarray(rows[WORKER_COL], np.int64),
                                                np.asarray(rows[FRAGMENT_COL], np.int64)]),
                                      axis=1, return_counts=True)
            fresh: dict[int, int] = {}
            for (worker, fragment), n in zip(pairs.T.tolist(), counts.tolist()):
                if (worker, fragment) not in self.trained_fragments:
                    self.trained_fragments.add((worker, fragment))
                    fresh[worker] = fresh.get(worker, 0) + n
            self.records.append((self.version, fresh, _histogram(lags)))
            stats = super().learn_on_batch(batch, **kwargs)
            self.version += 1
            return stats

    return ProbeIMPALAPolicy


def _histogram(values) -> dict[int, int]:
    import numpy as np
    keys, counts = np.unique(values, return_counts=True)
    return dict(zip(keys.tolist(), counts.tolist()))


def tag_workers(workers) -> list:
    """Give every worker's policy its ``worker_index`` (the local worker's is 0)."""
    def tag(worker):
        worker.get_policy().worker_index = worker.worker_index
        return worker.worker_index
    return workers.foreach_worker(tag)


# -- pure figures (unit-tested in tests/test_bench_scripts.py) ------------------------------
def weighted_quantile(hist: Mapping[int, int], q: float) -> int:
    """The nearest-rank ``q`` quantile of the values that ``hist`` counts (value -> rows).

    >>> weighted_quantile({0: 5, 3: 4, 9: 1}, 0.5), weighted_quantile({0: 5, 3: 4, 9: 1}, 0.95)
    (0, 9)
    """
    total = sum(hist.values())
    rank = max(1, math.ceil(q * total))
    seen = 0
    for value in sorted(hist):
        seen += hist[value]
        if seen >= rank:
            return value
    raise ValueError("empty histogram")


def window_figures(records: Sequence[tuple[int, Mapping, Mapping]], first: int, end: int,
                   workers: int) -> dict[str, Any]:
    """Fairness and lag over the learner updates ``first <= version < end``.

    ``records`` are the probe learner's ``(version, {worker: rows}, {lag: rows})``;
    workers are indexed 1..``workers``. ``max_min_ratio`` is inf when a worker got
    no row in the window.

    >>> f = window_figures([(4, {1: 30, 2: 10}, {2: 40}), (5, {1: 40}, {0: 20, 8: 20})],
    ...                    4, 6, 2)
    >>> f["steps_w1"], f["share_w2"], f["max_min_ratio"], f["lag_p50"], f["lag_max"]
    (70, 0.125, 7.0, 2, 8)
    """
    per_worker: Counter = Counter()
    lags: Counter = Counter()
    updates = 0
    for version, by_worker, by_lag in records:
        if first <= version < end:
            updates += 1
            per_worker.update(by_worker)
            lags.update(by_lag)
    total = sum(per_worker.values())
    out: dict[str, Any] = {"updates": updates, "trained_steps": total}
    counts = [per_worker.get(i, 0) for i in range(1, workers + 1)]
    for i, n in enumerate(counts, 1):
        out[f"steps_w{i}"] = n
        out[f"share_w{i}"] = n / total if total else math.nan
    unknown = total - sum(counts)
    if unknown:
        out["steps_other_workers"] = unknown  # a worker index outside 1..workers
    out["max_min_ratio"] = (max(counts) / min(counts) if min(counts) > 0
                            else math.inf if total else math.nan)
    out["min_share"] = min(counts) / total if total else math.nan
    if lags:
        n = sum(lags.values())
        out.update(lag_mean=sum(v * c for v, c in lags.items()) / n,
                   lag_p50=weighted_quantile(lags, 0.5), lag_p95=weighted_quantile(lags, 0.95),
                   lag_max=max(lags))
    return out


# -- the child ---------------------------------------------------------------------------------
def flowrl_origin() -> dict[str, str]:
    """Where ``flowrl`` is imported from (without importing it) and that checkout's
    git commit, with ``+dirty`` when its ``flowrl/`` has uncommitted changes, and
    the last commit that changed ``flowrl/``."""
    spec = importlib.util.find_spec("flowrl")
    if spec is None or not spec.origin:
        return {"flowrl_path": "not found", "flowrl_commit": "unknown"}
    pkg = os.path.dirname(os.path.abspath(spec.origin))
    root = os.path.dirname(pkg)

    def git(*argv: str) -> str | None:
        try:
            proc = subprocess.run(["git", "-C", root, *argv], capture_output=True, text=True,
                                  timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if commit is None:
        return {"flowrl_path": pkg, "flowrl_commit": "not a git checkout"}
    dirty = git("status", "--porcelain", "--", "flowrl")
    last = git("log", "-1", "--format=%h", "--", "flowrl")
    return {"flowrl_path": pkg, "flowrl_commit": commit + ("+dirty" if dirty else "")
            + (f", flowrl/ last changed in {last}" if last else "")}


def child(args) -> None:
    m = SYSTEM_RE.match(args.child)
    if not m:
        raise SystemExit(f"unknown system {args.child!r}: expected flowrl-wN or flowrl-aggK-wN")
    aggregators, workers = int(m.group(1) or 0), int(m.group(2))
    out: dict[str, Any] = {"ray_init_s": start_ray(workers + aggregators + 2), **flowrl_origin()}
    from flowrl.algorithms import IMPALA, IMPALAConfig

    policy_class = probe_policy_class()

    class ProbeIMPALA(IMPALA):
        @staticmethod
        def get_policy_class(config):
            return policy_class

    env, env_config = (("CartPole-v1", {}) if args.sleep_ms <= 0
                       else (sleepy_cartpole, {"sleep_ms": args.sleep_ms}))
    config = IMPALAConfig(env=env, env_config=env_config,
                          num_workers=workers, num_envs_per_worker=args.envs,
                          rollout_fragment_length=args.fragment,
                          train_batch_size=args.train_batch, num_sgd_iter=args.sgd_iter,
                          learner_queue_size=args.queue_size, model=tuple(args.hidden),
                          max_sample_requests_in_flight_per_worker=args.in_flight,
                          num_aggregation_workers=aggregators, num_cpus_per_worker=0,
                          backend="ray", seed=args.seed)
    algo = ProbeIMPALA(config)
    try:
        out["worker_indices"] = tag_workers(algo.workers)[1:]
        learner_policy = algo.workers.local_worker().get_policy()
        learner, counters = algo.learner_thread, algo.metrics.counters
        while learner_policy.version < args.warmup_updates:
            algo.train()
        out["first_window_s"] = harness.since_start()
        v0, s0, busy0 = learner_policy.version, counters["num_steps_sampled"], learner.busy_s
        queue: list[int] = []
        t0 = time.perf_counter()
        while learner_policy.version < v0 + args.updates:
            algo.train()
            queue.append(learner.stats()["learner_queue_size"])
        wall = time.perf_counter() - t0
        v1, s1, busy1 = learner_policy.version, counters["num_steps_sampled"], learner.busy_s
        figures = window_figures(list(learner_policy.records), v0, v1, workers)
        out.update(figures, window_s=wall, window_first_version=v0,
                   steps_per_s=(s1 - s0) / wall,
                   trained_per_s=figures["trained_steps"] / wall,
                   learner_util=(busy1 - busy0) / wall,
                   queue_mean=sum(queue) / len(queue), queue_size=args.queue_size)
    finally:
        algo.stop()
    harness.write_result(out)


# -- report -----------------------------------------------------------------------------------
def fmt_cell(value: Any, fmt: str) -> str:
    """One figure of one run: ``-`` when absent, ``inf`` when infinite."""
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    if isinstance(value, float) and math.isinf(value):
        return "inf"
    return fmt.format(value)


def max_min_cell(result: Mapping[str, Any], workers: int) -> str:
    """Max/min of a run's per-worker steps; ``inf`` when a worker got none (the
    saved JSON holds null there, as for every non-finite figure).

    >>> max_min_cell({"steps_w1": 30, "steps_w2": 0}, 2), max_min_cell({"steps_w1": 30}, 2)
    ('inf', '-')
    """
    counts = [result.get(f"steps_w{i}") for i in range(1, workers + 1)]
    if any(c is None for c in counts) or not sum(counts):
        return "-"
    return "inf" if min(counts) == 0 else f"{max(counts) / min(counts):.2f}"


def bottleneck(result: Mapping[str, Any]) -> str:
    """``learner`` when the learner's queue held at least half its size on average
    (it had more data than it could train on), else ``samplers``.

    >>> [bottleneck({"queue_mean": q, "queue_size": 16}) for q in (9.5, 2.0)]
    ['learner', 'samplers']
    """
    mean, size = result.get("queue_mean"), result.get("queue_size")
    if mean is None or not size:
        return "-"
    return "learner" if mean >= size / 2 else "samplers"


def report(runs: list[dict], meta: Mapping[str, Any]) -> None:
    """Per-run and per-system tables of the fairness, lag and throughput figures."""
    workers = int(meta["workers"])
    origins = sorted({(r["result"].get("flowrl_path", "?"), r["result"].get("flowrl_commit", "?"))
                      for r in runs if r.get("valid") and r.get("result")})
    label = meta.get("label") or "(no label)"
    print(f"\nlabel {label}; flowrl imported from: "
          + ("; ".join(f"{p} (commit {c})" for p, c in origins) or "no valid run"))

    rows = []
    for r in sorted(runs, key=lambda r: (r.get("system", ""), r.get("seed", 0))):
        head = [r.get("system", "?"), str(r.get("seed", "?"))]
        res = r.get("result") or {}
        if not r.get("valid") or not res:
            rows.append(head + ["no result"] + ["-"] * (workers + 9))
            continue
        rows.append(head + ["ok"]
                    + [fmt_cell(res.get(f"steps_w{i}"), "{:,}") for i in range(1, workers + 1)]
                    + [max_min_cell(res, workers),
                       fmt_cell(res.get("lag_mean"), "{:.1f}"),
                       fmt_cell(res.get("lag_p50"), "{}"), fmt_cell(res.get("lag_p95"), "{}"),
                       fmt_cell(res.get("lag_max"), "{}"),
                       fmt_cell(res.get("steps_per_s"), "{:,.0f}"),
                       fmt_cell(res.get("learner_util"), "{:.2f}"),
                       fmt_cell(res.get("queue_mean"), "{:.1f}")
                       + f"/{res.get('queue_size', '?')}", bottleneck(res)])
    harness.print_table(
        ["system", "seed", "run"] + [f"steps w{i}" for i in range(1, workers + 1)]
        + ["max/min", "lag mean", "lag p50", "lag p95", "lag max", "env steps/s",
           "learner busy", "queue mean/size", "bound by"], rows,
        title=f"IMPALA, {workers} Ray workers (aggK: through K aggregators), learner slower "
              f"than samplers ({label}): per run over {meta.get('updates')} learner updates; "
              "steps = env steps trained on "
              "per worker index; lag = learner version - behaviour version, in learner "
              f"updates ({meta.get('sgd_iter', '?')} per train batch)")

    keys = ["max_min_ratio", "min_share", "lag_mean", "lag_p95", "lag_max", "steps_per_s",
            "trained_per_s", "learner_util", "queue_mean"]
    harness.print_groups(harness.summarize(runs, keys), [
        ("max/min", "max_min_ratio", "{:.2f}"), ("min share", "min_share", "{:.2f}"),
        ("lag mean", "lag_mean", "{:.1f}"), ("lag p95", "lag_p95", "{:.0f}"),
        ("lag max", "lag_max", "{:.0f}"), ("env steps/s", "steps_per_s", "{:,.0f}"),
        ("trained steps/s", "trained_per_s", "{:,.0f}"),
        ("learner busy", "learner_util", "{:.2f}"), ("queue mean", "queue_mean", "{:.1f}")],
        title=f"median [min-max] over seeds ({label}; max/min is inf in a run "
              "where a worker got nothing, and such runs leave it out; an "
              f"equal share is {1 / workers:.2f})")


def main(argv=None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--label", default=None,
                   help="goes into the result file name, e.g. before / after")
    p.add_argument("--workers", type=int, default=3)
    p.add_argument("--aggregators", type=int, nargs="+", default=[0, 1],
                   help="systems: 0 gathers on the driver, K > 0 through K aggregator actors")
    p.add_argument("--in-flight", type=int, default=2,
                   help="max_sample_requests_in_flight_per_worker")
    p.add_argument("--updates", type=int, default=200, help="measured window, learner updates")
    p.add_argument("--warmup-updates", type=int, default=48,
                   help="learner updates before the window")
    p.add_argument("--sgd-iter", type=int, default=8,
                   help="learner passes (updates) per train batch (IMPALA num_sgd_iter)")
    p.add_argument("--hidden", type=int, nargs="+", default=[512, 512])
    p.add_argument("--envs", type=int, default=10, help="envs per worker")
    p.add_argument("--queue-size", type=int, default=16, help="learner_queue_size")
    p.add_argument("--sleep-ms", type=float, default=0.0, help="sleep per env step")
    p.add_argument("--fragment", type=int, default=50)
    p.add_argument("--train-batch", type=int, default=500)
    harness.add_arguments(p, default_seeds=3)
    args = p.parse_args(argv)
    if args.label is not None and not LABEL_RE.match(args.label):
        p.error(f"--label {args.label!r}: use letters, digits, '_', '.' or '-' (it goes into "
                "a file name)")
    harness.shorten_for_quick(args, seeds=1, updates=24, warmup_updates=8)
    if args.child:
        child(args)
        return
    settings = {"workers": args.workers, "in_flight": args.in_flight, "updates": args.updates,
                "warmup_updates": args.warmup_updates, "sgd_iter": args.sgd_iter,
                "hidden": args.hidden, "envs": args.envs, "queue_size": args.queue_size,
                "sleep_ms": args.sleep_ms, "fragment": args.fragment,
                "train_batch": args.train_batch}
    meta = {"label": args.label, **settings, **flowrl_origin()}
    if not args.report:
        print(f"flowrl: {meta['flowrl_path']} (commit {meta['flowrl_commit']}); CartPole-v1"
              f"{f' + {args.sleep_ms:g} ms/step' if args.sleep_ms > 0 else ''}, "
              f"{args.workers} Ray workers x {args.envs} envs, {args.in_flight} requests in "
              f"flight each, fragment {args.fragment}, "
              f"train batch {args.train_batch}, model {args.hidden}, {args.sgd_iter} learner "
              f"passes per batch, queue {args.queue_size}; {args.updates} updates after "
              f"{args.warmup_updates}; {os.cpu_count()} cores", flush=True)
    name = BENCHMARK if args.label is None else f"{BENCHMARK}-{args.label}"
    systems = [system_for(args.workers, k) for k in args.aggregators]
    runs, meta = harness.run(args, name, __file__, systems, harness.forward(args, *settings),
                             {**meta, "aggregators": args.aggregators})
    report(runs, meta)


if __name__ == "__main__":
    main()
