"""Benchmark harness: every system and seed in a fresh process, on an otherwise idle CPU.

Policy:

- Isolation. Each (system, seed) run is its own subprocess: ``python SCRIPT
  --child SYSTEM --seed SEED ...``. Nothing is warm from an earlier run (imports,
  Ray, torch kernels), so start-up is measured as a user meets it. Runs are
  interleaved across systems (seed 0 of every system, then seed 1 ...) and the
  system order rotates by one per seed, so drifting machine state hits every
  system alike and no system always goes first.
- Idle CPU. Before each run the harness waits until the machine's busy CPU
  (``/proc/stat``, minus the harness's own) stays below ``--idle-threshold``
  cores for ``--idle-window`` seconds. While a run goes, it samples the machine's
  busy CPU and the CPU of the run's own processes (``/proc/<pid>/stat``: its
  process tree and session, Ray's raylet and workers included, and exited
  children through their parents' ``cutime``/``cstime``; see :class:`TreeCpu`);
  what is left is *foreign* load. A run
  whose mean foreign load exceeds ``--overlap-mean`` cores, or any
  ``--overlap-window`` second window of it ``--overlap-peak`` cores, overlapped
  foreign work: it is kept in the JSON as discarded and repeated (at most
  ``--max-attempts`` times). ``--no-idle-wait`` skips the wait and keeps
  overlapped runs (marked ``overlap``): for smoke runs on a loaded machine only;
  figures taken that way are not valid.
- Statistics. At least 5 seeds by default. Per system: median and range
  (min-max) of every figure, and ``reached n/N`` when the runs have a target. A
  median never mixes runs that reached the target with runs that did not: the
  two groups get separate rows, and figures tied to the target (time to it)
  exist only for runs that reached it.
- Output. A table on stdout and one JSON file per invocation under
  ``benchmarks/results/`` (``benchmarks/results/smoke/`` for ``--quick``, which
  git ignores) with every run's raw figures, load samples and settings,
  rewritten after each run so an interrupted invocation keeps what it measured.
  ``--report FILE`` re-prints a saved file's table without running anything.

Child protocol: the harness sets ``FLOWRL_BENCH_T0`` (wall-clock time just
before the process was launched) and ``FLOWRL_BENCH_OUT`` (a path); the child
calls :func:`since_start` for "time from process start" and :func:`write_result`
with a dict of figures (numbers, plus ``reached`` when it has a target). A child's
output goes to a log file whose path the harness prints as the run starts, so a
long run (Pong learning, for one) can be followed with ``tail -f`` while the CPU
stays otherwise idle; :func:`progress` writes a line there.

A script is a spec over this module: its systems, their settings and its table.
Its ``main`` adds the harness's options (:func:`add_arguments`), shortens a
``--quick`` run (:func:`shorten_for_quick`), answers ``--child`` by measuring one
system and calling :func:`write_result`, and otherwise calls :func:`run` with the
options its children get (:func:`forward`) and the settings to save as ``meta``,
then prints its table from :func:`summarize`, :func:`fmt_figure` and :func:`fmt_ratio`.

This module imports only the standard library, so a child pays nothing for it (Sample
Factory's own interpreter imports it too). Linux only (``/proc``).
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, Iterable, Sequence

RESULTS_DIR = Path(__file__).resolve().parent / "results"
CLK_TCK = os.sysconf("SC_CLK_TCK")
ENV_T0, ENV_OUT = "FLOWRL_BENCH_T0", "FLOWRL_BENCH_OUT"
#: Load samples kept per run in the JSON (thinned evenly; the verdict uses all of them).
MAX_SAMPLES_SAVED = 100


# -- child side -----------------------------------------------------------------------
def since_start() -> float:
    """Seconds since the harness launched this process (since import when run by hand)."""
    return time.time() - float(os.environ.get(ENV_T0, _IMPORTED_AT))


_IMPORTED_AT = time.time()


def progress(message: str) -> None:
    """One line of a run's progress, ``[12.5 min] message``, on the child's output
    (the log file the harness names when the run starts)."""
    print(f"[{since_start() / 60:.1f} min] {message}", flush=True)


def write_result(result: dict[str, Any]) -> None:
    """Hand the run's figures to the harness (printed as JSON when run by hand).

    Non-finite floats become ``null`` (a figure that does not exist, e.g. the time
    to a target that was not reached).
    """
    path = os.environ.get(ENV_OUT)
    clean = {k: (None if isinstance(v, float) and not math.isfinite(v) else v)
             for k, v in result.items()}
    text = json.dumps(clean, indent=1, default=float)
    if path:
        Path(path).write_text(text)
    else:
        print(text)


# -- pure logic (unit-tested in tests/test_bench_harness.py) -----------------------------
def interleaved_order(systems: Sequence[str], seeds: Sequence[int]) -> list[tuple[str, int]]:
    """Run order: for each seed every system once, the system order rotated per seed.

    >>> interleaved_order(["a", "b", "c"], [0, 1])
    [('a', 0), ('b', 0), ('c', 0), ('b', 1), ('c', 1), ('a', 1)]
    """
    out = []
    for i, seed in enumerate(seeds):
        k = i % len(systems) if systems else 0
        out += [(s, seed) for s in list(systems[k:]) + list(systems[:k])]
    return out


@dataclass
class Sample:
    """One reading: wall time, machine busy CPU-seconds and own CPU-seconds (cumulative)."""

    t: float
    busy: float
    own: float


def foreign_intervals(samples: Sequence[Sample]) -> list[tuple[float, float]]:
    """``(duration_s, foreign_cores)`` per interval between consecutive samples.

    Foreign cores = (machine busy CPU - own CPU) / wall time, floored at 0 (the
    two readings are not taken at the same instant).

    >>> foreign_intervals([Sample(0, 0, 0), Sample(1, 1.5, 1.0), Sample(2, 3.5, 3.0)])
    [(1, 0.5), (1, 0.0)]
    """
    out = []
    for a, b in zip(samples, samples[1:]):
        dt = b.t - a.t
        if dt <= 0:
            continue
        out.append((dt, max(0.0, ((b.busy - a.busy) - (b.own - a.own)) / dt)))
    return out


def mean_load(intervals: Sequence[tuple[float, float]]) -> float:
    """Time-weighted mean cores over ``intervals`` (0 for none)."""
    total = sum(dt for dt, _ in intervals)
    return sum(dt * c for dt, c in intervals) / total if total > 0 else 0.0


def peak_load(intervals: Sequence[tuple[float, float]], window_s: float) -> float:
    """Highest mean load over any run of consecutive intervals spanning >= ``window_s``
    (the whole run when it is shorter).

    >>> peak_load([(1, 0.0), (1, 2.0), (1, 0.0), (1, 0.0)], window_s=2)
    1.0
    """
    if not intervals:
        return 0.0
    total = sum(dt for dt, _ in intervals)
    if total <= window_s:
        return mean_load(intervals)
    best = 0.0
    for i in range(len(intervals)):
        span, work = 0.0, 0.0
        for dt, c in intervals[i:]:
            span += dt
            work += dt * c
            if span >= window_s:
                best = max(best, work / span)
                break
    return best


def overlap_reason(intervals: Sequence[tuple[float, float]], *, mean_cores: float,
                   peak_cores: float, window_s: float) -> str | None:
    """Why a run counts as overlapped by foreign load, or None if it ran clean.

    >>> overlap_reason([(1, 0.0)] * 10, mean_cores=0.1, peak_cores=0.5, window_s=2) is None
    True
    >>> overlap_reason([(1, 0.0)] * 8 + [(1, 1.0)] * 2, mean_cores=0.5, peak_cores=0.5, window_s=2)
    'foreign load peaked at 1.00 cores over 2 s (limit 0.5)'
    """
    mean = mean_load(intervals)
    if mean > mean_cores:
        return f"mean foreign load {mean:.2f} cores (limit {mean_cores})"
    peak = peak_load(intervals, window_s)
    if peak > peak_cores:
        return f"foreign load peaked at {peak:.2f} cores over {window_s:g} s (limit {peak_cores})"
    return None


def median_range(values: Iterable[float]) -> tuple[float, float, float] | None:
    """``(median, min, max)`` of the finite values, None when there are none.

    >>> median_range([3.0, 1.0, 2.0, float("nan")])
    (2.0, 1.0, 3.0)
    """
    vals = [float(v) for v in values if v is not None and math.isfinite(float(v))]
    if not vals:
        return None
    return statistics.median(vals), min(vals), max(vals)


@dataclass
class Group:
    """Runs of one system summarised together: all reached, none reached, or untargeted."""

    system: str
    label: str                      # "reached 4/5", "not reached 1/5" or "5 runs"
    reached: bool | None
    n: int
    figures: dict[str, tuple[float, float, float]] = field(default_factory=dict)


def summarize(runs: Sequence[dict], keys: Sequence[str],
              target_keys: Sequence[str] = ()) -> list[Group]:
    """Per system (in first-seen order), median and range of ``keys`` over valid runs.

    A run is ``{"system", "valid", "result": {...}}``. When results carry a
    ``reached`` flag the runs that reached the target and those that did not are
    summarised as separate groups, never together; ``target_keys`` (e.g. time to
    target) are left out of the not-reached group. Invalid runs are ignored.

    >>> runs = [{"system": "a", "valid": True, "result": {"reached": r, "sps": s, "t": t}}
    ...         for r, s, t in [(True, 10, 1.0), (False, 30, 9.0), (True, 20, 3.0)]]
    >>> [(g.label, g.figures) for g in summarize(runs, ["sps", "t"], target_keys=["t"])]
    [('reached 2/3', {'sps': (15.0, 10.0, 20.0), 't': (2.0, 1.0, 3.0)}), ('not reached 1/3', {'sps': (30.0, 30.0, 30.0)})]
    """
    systems: dict[str, list[dict]] = {}
    for run in runs:
        if run.get("valid"):
            systems.setdefault(run["system"], []).append(run["result"])
    out = []
    for system, results in systems.items():
        n = len(results)
        targeted = any("reached" in r for r in results)
        if not targeted:
            groups = [(f"{n} runs", None, results)]
        else:
            hit = [r for r in results if r.get("reached")]
            miss = [r for r in results if not r.get("reached")]
            groups = [(f"reached {len(hit)}/{n}", True, hit)]
            if miss:
                groups.append((f"not reached {len(miss)}/{n}", False, miss))
        for label, reached, rs in groups:
            g = Group(system, label, reached, len(rs))
            for k in keys:
                if reached is False and k in target_keys:
                    continue
                mr = median_range(r.get(k) for r in rs)
                if mr is not None:
                    g.figures[k] = mr
            out.append(g)
    return out


def fmt_figure(mr: tuple[float, float, float] | None, fmt: str = "{:,.1f}",
               unit: float = 1) -> str:
    """``"median [min-max]"``, or ``"-"``; in multiples of ``unit`` (60: seconds as minutes).

    >>> fmt_figure((2.0, 1.0, 3.0)), fmt_figure((120.0, 60.0, 180.0), "{:.0f}", unit=60)
    ('2.0 [1.0-3.0]', '2 [1-3]')
    """
    if mr is None:
        return "-"
    med, lo, hi = (x / unit for x in mr)
    return f"{fmt.format(med)} [{fmt.format(lo)}-{fmt.format(hi)}]"


def ratio(a: tuple[float, float, float] | None, b: tuple[float, float, float] | None) -> float:
    """Ratio of two medians (NaN when either is missing or b is 0)."""
    if a is None or b is None or b[0] == 0:
        return math.nan
    return a[0] / b[0]


def fmt_ratio(x: float, fmt: str = "{:.2f}x") -> str:
    """A ratio column's cell: ``"1.50x"``, or ``"-"`` when it does not exist (NaN).

    >>> fmt_ratio(1.5), fmt_ratio(ratio(None, (1.0, 1.0, 1.0)))
    ('1.50x', '-')
    """
    return "-" if math.isnan(x) else fmt.format(x)


def fmt_train_s(group: Group) -> str:
    """A group's training seconds, marked ``(budget)`` where its runs missed the target
    (so they trained for their whole budget)."""
    return fmt_figure(group.figures.get("train_s")) + (" (budget)" if group.reached is False
                                                       else "")


def interleaved_cpu_rates(reps: dict[str, Any], n: int) -> dict[str, list[float]]:
    """Rates of several systems measured in THIS process for A/B checks on a loaded
    machine: ``n`` rounds, each running every system's repetition once (``reps``:
    name -> callable doing one repetition and returning the units of work it did).
    A rate is units per second of this process's CPU time (``time.process_time``),
    which foreign load does not charge to whichever system it overlapped. Not a
    harness measurement: no isolation, no idle wait.

    >>> len(interleaved_cpu_rates({"a": lambda: 10, "b": lambda: 20}, 2)["b"])
    2
    """
    rates: dict[str, list[float]] = {k: [] for k in reps}
    for _ in range(n):
        for name, rep in reps.items():
            start = time.process_time()
            units = rep()
            rates[name].append(units / max(time.process_time() - start, 1e-9))
    return rates


def print_interleaved(rates: dict[str, list[float]], unit: str) -> dict[str, float]:
    """Print :func:`interleaved_cpu_rates`' medians and runs; returns the medians."""
    med = {k: statistics.median(v) for k, v in rates.items()}
    width = max(map(len, med), default=0)
    for k, v in med.items():
        print(f"{k:>{width}}: {v:>9,.0f} {unit}/s (CPU), runs "
              f"{', '.join(f'{r:,.0f}' for r in rates[k])}")
    return med


def print_table(headers: Sequence[str], rows: Sequence[Sequence[str]], title: str = "") -> None:
    """A plain aligned table (no dependency, copies cleanly into notes)."""
    widths = [max(len(str(h)), *(len(str(r[i])) for r in rows)) if rows else len(str(h))
              for i, h in enumerate(headers)]
    if title:
        print(f"\n{title}")
    line = " | ".join(str(h).ljust(w) for h, w in zip(headers, widths))
    print(line)
    print("-|-".join("-" * w for w in widths))
    for r in rows:
        print(" | ".join(str(c).ljust(w) for c, w in zip(r, widths)))


def print_groups(groups: Iterable[Group], columns: Sequence[tuple], title: str = "") -> None:
    """A table of :func:`summarize`'s groups, one row each: system, runs, then a cell
    per column. A column is ``(header, key, fmt)`` or ``(header, key, fmt, unit)``:
    the group's figure ``key`` as :func:`fmt_figure` writes it; or ``(header, cell)``
    where ``cell(group)`` gives the text (a ratio, a note).

    >>> print_groups([Group("a", "2 runs", None, 2, {"sps": (15.0, 10.0, 20.0)})],
    ...              [("env steps/s", "sps", "{:,.0f}"), ("note", lambda g: g.system * 2)])
    ... # doctest: +NORMALIZE_WHITESPACE
    system | runs   | env steps/s | note
    -------|--------|-------------|-----
    a      | 2 runs | 15 [10-20]  | aa
    """
    def cell(g: Group, column: tuple) -> str:
        if callable(column[1]):
            return column[1](g)
        return fmt_figure(g.figures.get(column[1]), *column[2:])

    rows = [[g.system, g.label, *(cell(g, c) for c in columns)] for g in groups]
    print_table(["system", "runs", *(c[0] for c in columns)], rows, title=title)


# -- /proc readings ----------------------------------------------------------------------
def machine_busy_s() -> float:
    """CPU-seconds the whole machine has been busy (all cores; idle and iowait excluded)."""
    with open("/proc/stat") as f:
        fields = [int(x) for x in f.readline().split()[1:]]
    idle = fields[3] + (fields[4] if len(fields) > 4 else 0)
    total = sum(fields[:8])  # guest time is already inside user
    return (total - idle) / CLK_TCK


def _proc_stat(pid: int) -> tuple[int, int, int, float, float] | None:
    """``(ppid, process group, session, own s, reaped children s)`` of ``pid`` (CPU
    seconds, user + system), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    rest = text[text.rfind(")") + 2:].split()
    return (int(rest[1]), int(rest[2]), int(rest[3]),
            (int(rest[11]) + int(rest[12])) / CLK_TCK, (int(rest[13]) + int(rest[14])) / CLK_TCK)


class TreeCpu:
    """Cumulative CPU-seconds of a run's processes: the trees under ``roots`` and every
    process in one of ``sessions`` (or process groups of those ids).

    Short-lived processes count too: a member's figure is its own user+system time
    plus that of its exited children it reaped (``cutime``/``cstime``), so a Ray
    worker that starts and exits between two samples is counted in the raylet that
    reaped it. A member that was seen and then vanished is assumed collected by its
    parent when the parent's reaped time grew by as much; what no member collected
    (an orphan reaped by init) is kept at its last reading. Session membership
    catches orphans that left the tree (reparented to init) but not the session.
    The total never decreases.
    """

    def __init__(self, roots: Sequence[int], sessions: Sequence[int] = ()):
        self.roots = set(roots)
        self.sessions = set(sessions)
        self.seen: dict[int, tuple[int, float]] = {}   # member -> (last ppid, last total)
        self.reaped: dict[int, float] = {}             # member -> last reaped-children time
        self.gone = 0.0                                # vanished, collected by no member
        self.total = 0.0

    @staticmethod
    def _scan() -> dict[int, tuple[int, int, int, float, float]]:
        out = {}
        for name in os.listdir("/proc"):
            if name.isdigit():
                st = _proc_stat(int(name))
                if st is not None:
                    out[int(name)] = st
        return out

    def _members(self, procs: dict[int, tuple[int, int, int, float, float]]) -> set[int]:
        tree = {p for p, st in procs.items()
                if p in self.roots or st[1] in self.sessions or st[2] in self.sessions}
        children: dict[int, list[int]] = {}
        for pid, st in procs.items():
            children.setdefault(st[0], []).append(pid)
        todo = list(tree)
        while todo:
            for c in children.get(todo.pop(), ()):
                if c not in tree:
                    tree.add(c)
                    todo.append(c)
        return tree

    def members(self) -> set[int]:
        """Current pids of the run (roots included)."""
        return self._members(self._scan())

    def read(self) -> float:
        """Total CPU-seconds so far."""
        procs = self._scan()
        tree = self._members(procs)
        # Members that vanished (or whose pid now names another process) were reaped.
        vanished: dict[int, float] = {}
        for pid in [p for p in self.seen if p not in tree]:
            ppid, last = self.seen.pop(pid)
            vanished[ppid] = vanished.get(ppid, 0.0) + last
            self.reaped.pop(pid, None)
        for ppid, last in vanished.items():
            grown = (procs[ppid][4] - self.reaped[ppid]
                     if ppid in tree and ppid in self.reaped else 0.0)
            self.gone += max(0.0, last - grown)
        now = self.gone
        for pid in tree:
            ppid, _, _, own, reaped = procs[pid]
            self.seen[pid] = (ppid, own + reaped)
            self.reaped[pid] = reaped
            now += own + reaped
        self.total = max(self.total, now)
        return self.total


# -- running ----------------------------------------------------------------------------
@dataclass
class Settings:
    """How the harness runs; see :func:`add_arguments` for each option."""

    seeds: list[int]
    idle_wait: bool = True
    idle_threshold: float = 0.1
    idle_window: float = 3.0
    idle_timeout: float = 3600.0
    overlap_mean: float = 0.1
    overlap_peak: float = 0.5
    overlap_window: float = 2.0
    max_attempts: int = 5
    run_timeout: float = 900.0
    sample_interval: float = 0.5
    results_dir: Path = RESULTS_DIR
    quick: bool = False
    report_from: Path | None = None


def _at_least_one(text: str) -> int:
    """An argparse ``type``: an int >= 1 (0 seeds or attempts would run nothing)."""
    try:
        n = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if n < 1:
        raise argparse.ArgumentTypeError(f"{n} would run nothing; give 1 or more")
    return n


def add_arguments(parser: argparse.ArgumentParser, default_seeds: int = 5) -> None:
    """Add the harness's options (and the hidden ``--child``/``--seed`` child options)."""
    g = parser.add_argument_group("harness")
    g.add_argument("--seeds", type=_at_least_one, default=None,
                   help=f"seeds per system (default {default_seeds}; 2 with --quick)")
    g.add_argument("--first-seed", type=int, default=0)
    g.add_argument("--quick", action="store_true",
                   help="smoke run: tiny settings, 2 seeds, results under results/smoke/")
    g.add_argument("--no-idle-wait", action="store_true",
                   help="do not wait for an idle CPU and keep runs that overlapped foreign "
                        "load (smoke runs on a busy machine; figures are then not valid)")
    g.add_argument("--idle-threshold", type=float, default=0.1,
                   help="cores of foreign load below which the machine counts as idle")
    g.add_argument("--idle-window", type=float, default=3.0,
                   help="seconds the machine must stay idle before a run starts")
    g.add_argument("--idle-timeout", type=float, default=3600.0,
                   help="give up (error) after waiting this long for an idle machine")
    g.add_argument("--overlap-mean", type=float, default=0.1,
                   help="discard a run whose mean foreign load exceeds this many cores")
    g.add_argument("--overlap-peak", type=float, default=0.5,
                   help="discard a run whose foreign load over any --overlap-window "
                        "seconds exceeds this many cores")
    g.add_argument("--overlap-window", type=float, default=2.0)
    g.add_argument("--max-attempts", type=_at_least_one, default=5,
                   help="attempts per (system, seed) before it is reported as never clean")
    g.add_argument("--run-timeout", type=float, default=900.0,
                   help="kill a run after this many seconds")
    g.add_argument("--results-dir", type=Path, default=None)
    g.add_argument("--report", type=Path, default=None, metavar="JSON",
                   help="run nothing: print the table of a saved results file (the "
                        "benchmark's other options should match the ones it was run with)")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--seed", type=int, default=0, help=argparse.SUPPRESS)
    parser.set_defaults(_default_seeds=default_seeds)


def settings_from(args: argparse.Namespace) -> Settings:
    """The :class:`Settings` the parsed options describe."""
    n = args.seeds if args.seeds is not None else (2 if args.quick else args._default_seeds)
    results = args.results_dir or (RESULTS_DIR / "smoke" if args.quick else RESULTS_DIR)
    return Settings(seeds=list(range(args.first_seed, args.first_seed + n)),
                    idle_wait=not args.no_idle_wait, idle_threshold=args.idle_threshold,
                    idle_window=args.idle_window, idle_timeout=args.idle_timeout,
                    overlap_mean=args.overlap_mean, overlap_peak=args.overlap_peak,
                    overlap_window=args.overlap_window, max_attempts=args.max_attempts,
                    run_timeout=args.run_timeout, results_dir=Path(results), quick=args.quick,
                    report_from=args.report)


def shorten_for_quick(args: argparse.Namespace, *, seeds: int | None = None,
                      **caps: float) -> None:
    """With ``--quick``: cap each named option at its value (an unset option takes the
    cap) and, when ``seeds`` is given, default ``--seeds`` to it. Without, nothing.

    >>> a = argparse.Namespace(quick=True, seeds=None, seconds=45.0, budget=None)
    >>> shorten_for_quick(a, seeds=1, seconds=4.0, budget=12.0)
    >>> (a.seconds, a.budget, a.seeds)
    (4.0, 12.0, 1)
    """
    if not args.quick:
        return
    for name, cap in caps.items():
        value = getattr(args, name)
        setattr(args, name, cap if value is None else min(value, cap))
    if seeds is not None and args.seeds is None:
        args.seeds = seeds


def forward(args: argparse.Namespace, *names: str) -> list[str]:
    """The command-line options that give a child run ``args``' values of ``names``:
    ``--max-steps 5000`` per value, a bare ``--quick`` for a set flag, one option
    with several words for a list; unset (None) options and cleared flags are left out.

    >>> forward(argparse.Namespace(max_steps=5000, quick=True, tag=None, envs=[4, 8]),
    ...         "max_steps", "quick", "tag", "envs")
    ['--max-steps', '5000', '--quick', '--envs', '4', '8']
    """
    out: list[str] = []
    for name in names:
        value, flag = getattr(args, name), "--" + name.replace("_", "-")
        if value is None or value is False:
            continue
        if value is True:
            out.append(flag)
        elif isinstance(value, (list, tuple)):
            out += [flag, *map(str, value)]
        else:
            out += [flag, str(value)]
    return out


def run(args: argparse.Namespace, name: str, script: str, systems: Sequence[str],
        child_args: Sequence[str] = (), meta: dict | None = None,
        settings: Settings | None = None, resumable: bool = False) -> tuple[list[dict], dict]:
    """:func:`run_all` with the settings ``args`` describe (or ``settings``); returns
    the run records and the invocation's ``meta``. With ``--report`` nothing runs and
    both come from the saved file, so a table shows the settings it was measured at.
    """
    s = settings if settings is not None else settings_from(args)
    runs, path = run_all(name, os.path.abspath(script), systems, s, child_args, meta,
                         resumable=resumable)
    if s.report_from is not None:
        meta = json.loads(Path(path).read_text())["meta"]
    return runs, meta if meta is not None else {}


def wait_for_idle(s: Settings, log=print) -> float:
    """Block until foreign load stays below ``s.idle_threshold`` for ``s.idle_window`` s.

    Returns the seconds waited; raises RuntimeError after ``s.idle_timeout``.
    """
    start = time.time()
    me = TreeCpu([os.getpid()])
    samples: list[Sample] = []
    told = 0.0
    while True:
        samples.append(Sample(time.time(), machine_busy_s(), me.read()))
        span = samples[-1].t - samples[0].t
        if span >= s.idle_window:
            load = mean_load(foreign_intervals(samples))
            if load < s.idle_threshold:
                return time.time() - start
            samples.pop(0)
            if time.time() - told > 30:
                log(f"  waiting for an idle CPU: foreign load {load:.2f} cores "
                    f"(threshold {s.idle_threshold})", flush=True)
                told = time.time()
        if time.time() - start > s.idle_timeout:
            raise RuntimeError(f"the machine was not idle for {s.idle_window} s within "
                               f"{s.idle_timeout} s (foreign load >= {s.idle_threshold} cores); "
                               "stop the other work, or raise --idle-threshold/--idle-timeout")
        time.sleep(s.sample_interval)


def _start_ticks(pid: int) -> int | None:
    """When ``pid`` started (clock ticks since boot), None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            text = f.read()
    except OSError:
        return None
    return int(text[text.rfind(")") + 2:].split()[19])


def _kill_tree(proc: subprocess.Popen, tree: TreeCpu, child_start: int | None) -> None:
    """Kill the child's process group and every process seen in its tree that is
    still alive (a Ray process left behind by a crashed run would otherwise load
    the machine for the runs after it). A pid is only killed if it started no
    earlier than the child, so a reused pid is left alone."""
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except OSError:
        pass
    for pid in set(tree.seen) | tree.members():
        if pid in (os.getpid(), proc.pid):
            continue
        started = _start_ticks(pid)
        if started is not None and child_start is not None and started >= child_start:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    proc.wait()


def run_child(script: str, system: str, seed: int, child_args: Sequence[str],
              s: Settings) -> dict[str, Any]:
    """One run in a fresh process; returns its record (result, load, timing, log tail)."""
    fd, out_path = tempfile.mkstemp(prefix="flowrl-bench-", suffix=".json")
    os.close(fd)
    log = tempfile.NamedTemporaryFile(mode="w+", prefix=f"flowrl-bench-{system}-seed{seed}-",
                                      suffix=".log", delete=False)
    print(f"{system} seed {seed}: running; its output: tail -f {log.name}", flush=True)
    argv = [sys.executable, script, "--child", system, "--seed", str(seed), *child_args]
    t0 = time.time()
    env = {**os.environ, ENV_T0: repr(t0), ENV_OUT: out_path}
    proc = subprocess.Popen(argv, env=env, stdout=log, stderr=subprocess.STDOUT,
                            start_new_session=True)
    child_start = _start_ticks(proc.pid)
    tree = TreeCpu([proc.pid, os.getpid()], sessions=[proc.pid])
    samples = [Sample(t0, machine_busy_s(), tree.read())]
    timed_out = False
    while proc.poll() is None:
        time.sleep(s.sample_interval)
        samples.append(Sample(time.time(), machine_busy_s(), tree.read()))
        if time.time() - t0 > s.run_timeout:
            timed_out = True
            break
    wall = time.time() - t0
    _kill_tree(proc, tree, child_start)  # leftovers only: a finished child has none
    log.seek(0)
    tail = log.read()[-3000:]
    log.close()
    Path(log.name).unlink(missing_ok=True)
    try:
        result = json.loads(Path(out_path).read_text() or "null")
    except (OSError, ValueError):
        result = None
    finally:
        Path(out_path).unlink(missing_ok=True)
    intervals = foreign_intervals(samples)
    ok = proc.returncode == 0 and isinstance(result, dict) and not timed_out
    reason = overlap_reason(intervals, mean_cores=s.overlap_mean, peak_cores=s.overlap_peak,
                            window_s=s.overlap_window)
    return {"system": system, "seed": seed, "argv": argv[1:], "ok": ok,
            "returncode": proc.returncode, "timed_out": timed_out, "wall_s": wall,
            "own_cpu_s": samples[-1].own - samples[0].own,
            "foreign_mean_cores": mean_load(intervals),
            "foreign_peak_cores": peak_load(intervals, s.overlap_window),
            "overlap": reason, "result": result,
            "load_samples": [[round(x.t - t0, 2), round(x.busy - samples[0].busy, 2),
                              round(x.own - samples[0].own, 2)]
                             for x in samples[::max(1, len(samples) // MAX_SAMPLES_SAVED)]],
            "log_tail": None if ok else tail}


def git_commit() -> str | None:
    """The checked-out commit of this repository, or None outside git."""
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                              cwd=Path(__file__).parent, timeout=10).stdout.strip() or None
    except (OSError, subprocess.SubprocessError):
        return None


def reserve_path(results_dir: Path, name: str, stamp: str) -> Path:
    """A new results file ``NAME-STAMP.json``, created empty so that no other run takes
    it: two runs of one script started in the same second get ``NAME-STAMP.json`` and
    ``NAME-STAMP-2.json`` (each writes over its own file only)."""
    path, n = results_dir / f"{name}-{stamp}.json", 1
    while True:
        try:
            with open(path, "x"):
                return path
        except FileExistsError:
            n += 1
            path = results_dir / f"{name}-{stamp}-{n}.json"


def run_all(name: str, script: str, systems: Sequence[str], s: Settings,
            child_args: Sequence[str] = (), meta: dict | None = None,
            resumable: bool = False) -> tuple[list[dict], Path]:
    """Run every (system, seed) interleaved; returns the run records and the JSON path.

    With ``s.report_from`` set, nothing runs: the saved file's records are returned.

    A run that fails (non-zero exit, no result) is recorded and not repeated; a
    run that overlapped foreign load is recorded as discarded and repeated up to
    ``s.max_attempts`` times unless ``s.idle_wait`` is off. A ``resumable`` run (one
    sitting of a run that saves its state when it ends) is never repeated: the repeat
    would resume from the state the discarded sitting saved and train the next
    sitting. Its record stays discarded, so its speed counts nowhere; its training
    stands, and the next clean sitting reports the whole curve.
    """
    if s.report_from is not None:
        doc = json.loads(Path(s.report_from).read_text())
        print(f"report of {s.report_from} ({doc['benchmark']}, started {doc['started_utc']}, "
              f"commit {doc.get('commit')}): nothing was run")
        return doc["runs"], Path(s.report_from)
    s.results_dir.mkdir(parents=True, exist_ok=True)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    path = reserve_path(s.results_dir, name, stamp)
    doc = {"benchmark": name, "started_utc": stamp, "argv": sys.argv, "commit": git_commit(),
           "host": {"cpus": os.cpu_count(), "platform": platform.platform(),
                    "python": platform.python_version()},
           "settings": {k: (str(v) if isinstance(v, Path) else v)
                        for k, v in asdict(s).items()},
           "systems": list(systems), "meta": meta or {}, "runs": []}
    path.write_text(json.dumps(doc, indent=1, default=float))  # no runs yet, but valid JSON
    order = interleaved_order(systems, s.seeds)
    if not s.idle_wait:
        print("NOTE: --no-idle-wait: overlapped runs are kept; these figures are not valid "
              "measurements", flush=True)
    for i, (system, seed) in enumerate(order, 1):
        for attempt in range(1, s.max_attempts + 1):
            waited = wait_for_idle(s) if s.idle_wait else 0.0
            rec = run_child(script, system, seed, child_args, s)
            rec.update(attempt=attempt, idle_wait_s=waited)
            clean = rec["overlap"] is None or not s.idle_wait
            rec["valid"] = rec["ok"] and clean
            doc["runs"].append(rec)
            path.write_text(json.dumps(doc, indent=1, default=float))
            status = ("ok" if rec["valid"] else "FAILED" if not rec["ok"]
                      else f"discarded ({rec['overlap']})")
            print(f"[{i}/{len(order)}] {system} seed {seed} attempt {attempt}: {status}, "
                  f"{rec['wall_s']:.1f} s, foreign load {rec['foreign_mean_cores']:.2f} cores",
                  flush=True)
            if not rec["ok"]:
                print("  " + (rec["log_tail"] or "").strip().replace("\n", "\n  ")[-1500:],
                      flush=True)
            if rec["ok"] is False or clean:
                break
            if resumable:
                print("  not repeated: this sitting saved its state, and a repeat would "
                      "train the next one; run the same command again for a clean sitting",
                      flush=True)
                break
    print(f"raw results: {path}")
    return doc["runs"], path
