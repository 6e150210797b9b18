"""Reading what people type into configs: numbers written as text
(:func:`read_numbers`) and misspelt names (:func:`closest`, :func:`suggest`).

Config fields, experiment specs, sweeps and the command line all read through
these, so a value or a name means the same wherever it is written.
"""

from __future__ import annotations

import difflib
import math
from typing import Any, Sequence


def closest(name: str, choices: Sequence[str]) -> str | None:
    """The valid name ``name`` most likely misspells: a close difflib match, else one
    sharing its first ``_``-separated word (``lr_rate`` -> ``lr``), else None.

    >>> closest("lr_rate", ["lr", "gamma", "lambda_"]), closest("gamme", ["gamma"])
    ('lr', 'gamma')
    """
    choices = list(choices)
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.6)
    if close:
        return close[0]
    head = name.lower().split("_")[0]
    same_head = [c for c in choices if head and c.lower().split("_")[0] == head]
    if same_head:
        return max(same_head, key=lambda c: difflib.SequenceMatcher(None, name, c).ratio())
    close = difflib.get_close_matches(name, choices, n=1, cutoff=0.4)
    return close[0] if close else None


def suggest(name: str, choices: Sequence[str]) -> str:
    """The hint for a misspelt ``name``: ``did you mean 'x'?`` (:func:`closest`),
    else the valid choices.

    >>> suggest("gamme", ["gamma", "lr"]), suggest("zzz", ["lr"])
    ("did you mean 'gamma'?", "choose from ['lr']")
    """
    close = closest(name, choices)
    return f"did you mean {close!r}?" if close else f"choose from {sorted(choices)}"


def read_numbers(value: Any) -> Any:
    """``value`` with every string that spells a finite number read as that number (an
    int when it is integral), also inside lists, tuples and dict values; anything else
    is returned as it is.

    PyYAML reads ``1e-3`` and ``1e6`` as strings (YAML 1.1 wants a dot and a signed
    exponent: ``1.0e-3``), and so do ``--set lr=1e-3`` and Python callers passing
    text, so config fields (:class:`~flowrl.algorithms.AlgorithmConfig`) and stop
    criteria read a string through this when it is not acceptable as it is.

    >>> read_numbers("1e-3"), read_numbers("1e6"), read_numbers("1.5"), read_numbers("lr")
    (0.001, 1000000, 1.5, 'lr')
    >>> read_numbers([[0, "2.5e-4"], ["1e7", 0.0]]), read_numbers({"eps": "1e5"})
    ([[0, 0.00025], [10000000, 0.0]], {'eps': 100000})
    >>> read_numbers("nan"), read_numbers(True)
    ('nan', True)
    """
    if isinstance(value, str):
        try:
            return int(value)
        except ValueError:
            pass
        try:
            number = float(value)
        except ValueError:
            return value
        if not math.isfinite(number):
            return value
        return int(number) if number.is_integer() else number
    if type(value) in (list, tuple):
        return type(value)(read_numbers(v) for v in value)
    if type(value) is dict:
        return {k: read_numbers(v) for k, v in value.items()}
    return value


__all__ = ["closest", "suggest", "read_numbers"]
