"""Package attributes that import their module on first use (PEP 562).

``flowrl.policies`` and ``flowrl.models`` name classes whose modules import torch;
binding them lazily keeps ``import flowrl.policies.sgd`` (an operator's import) and
reading a ``ModelConfig`` free of torch.
"""

from __future__ import annotations

import importlib
from typing import Any, Callable


def lazy_attributes(package: str, where: dict[str, str], namespace: dict[str, Any],
                    public: list[str]) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """``(__getattr__, __dir__)`` for ``package``: name ``n`` resolves to
    ``package.<where[n]>.n`` on first access and is then bound in ``namespace``
    (the package's ``globals()``); ``public`` is its ``__all__``.

    >>> ns = {}
    >>> get, names = lazy_attributes("collections", {"OrderedDict": "__init__"}, ns, ["OrderedDict"])
    >>> get("OrderedDict").__name__, "OrderedDict" in ns, names()
    ('OrderedDict', True, ['OrderedDict'])
    """
    def __getattr__(name: str) -> Any:
        module = where.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(f"{package}.{module}"), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(public))

    return __getattr__, __dir__


__all__ = ["lazy_attributes"]
