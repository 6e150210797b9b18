"""Lines of code: each built-in algorithm's plan against RLlib's ``training_step``.

The RLlib Flow paper claims its dataflow plans take 2-9x fewer lines than the
imperative training loops they replace. This script counts, for each of flowrl's
algorithms, its ``execution_plan`` against the ``training_step`` of the same
algorithm in the installed RLlib (2.58 when this was written), with one rule for
both sides:

- **What is counted.** The entry function (flowrl: ``ALGO.execution_plan``;
  RLlib: ``ALGO.training_step``) plus every function it calls or passes on,
  transitively, that the algorithm defines itself: functions in
  ``flowrl/algorithms/<algo>.py`` files (not the shared ``base.py``, ``config.py``,
  ``validators.py``), and functions in
  RLlib's ``ray/rllib/algorithms/<algo>/`` packages (not ``algorithm.py``, the
  base class). ``self.f``/``cls.f`` resolve on the algorithm's class, ``super().f``
  on the next class of its MRO, bare names on the function's module. Library code
  both sides call (flowrl's operators, RLlib's ``EnvRunnerGroup``, ``LearnerGroup``,
  ``synchronous_parallel_sample``) is not counted.
- **How lines are counted.** Logical lines (Python's ``NEWLINE`` tokens: one per
  simple statement or compound-statement header, however many physical lines a
  call is wrapped over) of each function's body, its docstring left out; so
  comments, blank lines and line wrapping do not count. Physical lines (non-blank,
  non-comment, outside the docstring) are reported beside them.
- **Only the default path.** RLlib's functions branch on its API stack flags
  (``enable_rl_module_and_learner``, ``enable_env_runner_and_connector_v2``, True by
  default). The ``if`` line counts; the branch the defaults do not take does not,
  nor, when the taken branch returns, the rest of its block, nor the functions
  reached only from there (the old API stack's ``_training_step_old_api_stack``).

An algorithm RLlib no longer ships is reported as "not in RLlib <version>". The
table goes to stdout, and a JSON of every row (with the functions counted) to
``benchmarks/results/loc-<UTC time>.json``. It takes a few seconds (importing
RLlib is most of it); nothing is timed, so it needs no idle machine.

    python benchmarks/loc.py
    python benchmarks/loc.py --report benchmarks/results/loc-<time>.json
"""

from __future__ import annotations

import argparse
import ast
import importlib
import inspect
import io
import json
import os
import sys
import textwrap
import time
import tokenize
import types
from pathlib import Path
from typing import Any, Callable

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

# flowrl's algorithm key -> RLlib's module and class (None: RLlib no longer ships it)
RLLIB = {
    "pg": None, "a2c": None, "a3c": None,
    "ppo": ("ray.rllib.algorithms.ppo", "PPO"),
    "appo": ("ray.rllib.algorithms.appo", "APPO"),
    "impala": ("ray.rllib.algorithms.impala", "IMPALA"),
    "dqn": ("ray.rllib.algorithms.dqn", "DQN"),
    "apex": None, "ddppo": None,
}


# RLlib's API stack switches, with their defaults in RLlib 2.58
FLAGS = {"enable_rl_module_and_learner": True, "enable_env_runner_and_connector_v2": True}


def _flag_value(test: ast.expr) -> bool | None:
    """The value of ``test`` under the defaults, when it is a (negated) flag."""
    negate = isinstance(test, ast.UnaryOp) and isinstance(test.op, ast.Not)
    inner = test.operand if negate else test
    name = inner.attr if isinstance(inner, ast.Attribute) else getattr(inner, "id", None)
    if name not in FLAGS:
        return None
    return FLAGS[name] != negate


def untaken_lines(tree: ast.AST) -> set[int]:
    """Lines of the branches the default flags do not take (see the module docstring)."""
    lines: set[int] = set()

    def span(stmts) -> set[int]:
        return {n for s in stmts for n in range(s.lineno, s.end_lineno + 1)}

    for block_owner in ast.walk(tree):
        for field in ("body", "orelse", "finalbody"):
            block = getattr(block_owner, field, None)
            if not isinstance(block, list):
                continue
            for i, stmt in enumerate(block):
                if not isinstance(stmt, ast.If) or (value := _flag_value(stmt.test)) is None:
                    continue
                taken, untaken = (stmt.body, stmt.orelse) if value else (stmt.orelse, stmt.body)
                lines |= span(untaken)
                if taken and isinstance(taken[-1], (ast.Return, ast.Raise)):
                    lines |= span(block[i + 1:])
    return lines


def body_lines(fn: Callable) -> tuple[int, int]:
    """``(logical, physical)`` lines of ``fn``'s body without its docstring, on the
    default path (:func:`untaken_lines` left out).

    >>> def f(x):
    ...     '''Doc.'''
    ...     # a comment
    ...     y = g(x,
    ...           1)
    ...
    ...     return y
    >>> body_lines(f)
    (2, 3)
    """
    source = textwrap.dedent(inspect.getsource(fn))
    tree = ast.parse(source)
    node = tree.body[0]
    skip = untaken_lines(node)
    body = node.body
    if (body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant)
            and isinstance(body[0].value.value, str)):
        doc = (body[0].lineno, body[0].end_lineno)
        body = body[1:]
    else:
        doc = (0, -1)
    if not body:
        return 0, 0
    first, last = body[0].lineno, body[-1].end_lineno
    logical, physical = 0, set()
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        line = tok.start[0]
        if not first <= line <= last or doc[0] <= line <= doc[1] or line in skip:
            continue
        if tok.type == tokenize.NEWLINE:
            logical += 1
        elif tok.type not in (tokenize.COMMENT, tokenize.NL, tokenize.INDENT, tokenize.DEDENT,
                              tokenize.ENDMARKER):
            physical.update(range(tok.start[0], tok.end[0] + 1))
    return logical, len(physical)


def _function(obj: Any) -> types.FunctionType | None:
    obj = inspect.unwrap(obj.__func__ if isinstance(obj, (staticmethod, classmethod,
                                                          types.MethodType)) else obj)
    return obj if isinstance(obj, types.FunctionType) else None


def _attr_on(cls: type, name: str, after: type | None = None) -> types.FunctionType | None:
    """``name`` looked up on ``cls``'s MRO (after class ``after`` for ``super()``)."""
    mro = cls.__mro__
    if after is not None:
        mro = mro[mro.index(after) + 1:] if after in mro else ()
    for klass in mro:
        if name in vars(klass):
            return _function(vars(klass)[name])
    return None


def closure(entry: types.FunctionType, cls: type,
            own: Callable[[types.FunctionType], bool]) -> list[types.FunctionType]:
    """``entry`` and every function it reaches (calls or references) for which
    ``own(fn)`` holds, in the order first reached."""
    seen: list[types.FunctionType] = []
    todo = [entry]
    while todo:
        fn = todo.pop(0)
        if fn in seen:
            continue
        seen.append(fn)
        defining = next((k for k in cls.__mro__ if any(
            _function(v) is fn for v in vars(k).values())), None)
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn)))
        skip = untaken_lines(tree)
        for node in ast.walk(tree):
            if getattr(node, "lineno", None) in skip:
                continue
            target = None
            if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load):
                target = fn.__globals__.get(node.id)
                target = _function(target) if target is not None else None
            elif isinstance(node, ast.Attribute):
                base = node.value
                if isinstance(base, ast.Name) and base.id in ("self", "cls", cls.__name__):
                    target = _attr_on(cls, node.attr)
                elif (isinstance(base, ast.Call) and isinstance(base.func, ast.Name)
                      and base.func.id == "super"):
                    target = _attr_on(cls, node.attr, after=defining or cls)
            if target is not None and target not in seen and own(target):
                todo.append(target)
    return seen


def _in(directory: Path, exclude: tuple[str, ...]) -> Callable[[types.FunctionType], bool]:
    def own(fn: types.FunctionType) -> bool:
        path = Path(inspect.getsourcefile(fn) or "").resolve()
        return directory in path.parents and path.name not in exclude
    return own


def count(entry: types.FunctionType, cls: type,
          own: Callable[[types.FunctionType], bool]) -> dict[str, Any]:
    fns = closure(entry, cls, own)
    per = [(f"{fn.__module__}.{fn.__qualname__}", *body_lines(fn)) for fn in fns]
    return {"functions": [{"name": n, "logical": lo, "physical": ph} for n, lo, ph in per],
            "logical": sum(p[1] for p in per), "physical": sum(p[2] for p in per)}


def flowrl_row(algo: str) -> dict[str, Any]:
    import flowrl.algorithms as algorithms
    cls = algorithms.ALGORITHMS[algo]
    directory = Path(algorithms.__file__).resolve().parent
    entry = _attr_on(cls, "execution_plan")
    return count(entry, cls, _in(directory, ("base.py", "config.py", "validators.py", "__init__.py")))


def rllib_row(algo: str) -> dict[str, Any] | None:
    where = RLLIB[algo]
    if where is None:
        return None
    cls = getattr(importlib.import_module(where[0]), where[1])
    import ray.rllib.algorithms as algorithms
    directory = Path(algorithms.__file__).resolve().parent
    entry = _attr_on(cls, "training_step")
    return count(entry, cls, _in(directory, ("algorithm.py", "algorithm_config.py",
                                             "__init__.py")))


def measure() -> dict[str, Any]:
    import ray
    rows = []
    for algo in RLLIB:
        rows.append({"algo": algo, "flowrl": flowrl_row(algo), "rllib": rllib_row(algo)})
    return {"rllib_version": ray.__version__, "rows": rows}


def report(doc: dict[str, Any]) -> None:
    version = doc["rllib_version"]
    headers = ["algorithm", "flowrl plan", f"RLlib {version} training_step", "RLlib / flowrl"]
    table, ratios = [], []
    for row in doc["rows"]:
        ours = row["flowrl"]
        cell = f"{ours['logical']} ({ours['physical']})"
        if row["rllib"] is None:
            table.append([row["algo"], cell, f"not in RLlib {version}", ""])
            continue
        theirs = row["rllib"]
        ratio = theirs["logical"] / ours["logical"]
        ratios.append(ratio)
        table.append([row["algo"], cell, f"{theirs['logical']} ({theirs['physical']})",
                      f"{ratio:.1f}x"])
    harness.print_table(headers, table, title="logical lines (physical lines), body only, "
                        "with the algorithm's own helpers")
    if ratios:
        print(f"RLlib / flowrl over the {len(ratios)} algorithms in both: "
              f"{min(ratios):.1f}x-{max(ratios):.1f}x")
    for row in doc["rows"]:
        for side in ("flowrl", "rllib"):
            if row[side] is not None:
                names = ", ".join(f"{f['name'].rsplit('.', 2)[-2:][-1]} {f['logical']}"
                                  for f in row[side]["functions"])
                print(f"  {row['algo']:7s} {side:6s}: {names}")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    harness.add_arguments(parser, default_seeds=1)  # run_all.sh passes its options on
    args = parser.parse_args(argv)
    s = harness.settings_from(args)
    if s.report_from is not None:
        doc = json.loads(Path(s.report_from).read_text())
        print(f"report of {s.report_from} (commit {doc.get('commit')}): nothing was run")
        report(doc)
        return
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    doc = {"benchmark": "loc", "started_utc": stamp, "argv": sys.argv,
           "commit": harness.git_commit(), **measure()}
    report(doc)
    s.results_dir.mkdir(parents=True, exist_ok=True)
    path = s.results_dir / f"loc-{stamp}.json"
    path.write_text(json.dumps(doc, indent=1))
    print(f"raw results: {path}")


if __name__ == "__main__":
    main()
