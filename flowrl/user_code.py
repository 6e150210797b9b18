"""Custom code named by strings: ``"pkg.mod:Name"`` references and modules to import.

A config written as text (YAML, ``--set``, a checkpoint's saved config) names
custom code by a *reference*, ``"pkg.mod:Name"``: ``model: {custom_model:
"my_models:TinyNet"}``, ``env: "my_envs:Corridor"``. The string is what travels:
into checkpoints (plain data, no pickle) and to Ray workers, and every process that
builds the object imports ``pkg.mod`` itself (:func:`load_reference`), so the module
must be importable there, as it is on the driver: installed, or its directory on
``PYTHONPATH``.

``AlgorithmConfig.imports`` (``flowrl train --import MODULE``) lists modules that
every process imports before it checks a config or builds an env or a model
(:func:`import_modules`): modules that register names, with ``gymnasium.register``
or :func:`flowrl.models.register_model`. Rollout workers import them too.

Ray workers started on this machine see the driver's ``PYTHONPATH``, the current
directory and the installed packages, but not directories the driver added to
``sys.path`` itself; :func:`module_roots` names those directories for the
modules a config uses, and remote workers get them on their ``PYTHONPATH``
(:meth:`flowrl.runtime.calls.Calls.create`).

Every failure is a ConfigError naming the reference, the module and the fix:

>>> load_reference("collections:OrderedDict", "env").__name__
'OrderedDict'
>>> load_reference("no_such_pkg.envs:Corridor", "env")
Traceback (most recent call last):
...
flowrl.errors.ConfigError: env='no_such_pkg.envs:Corridor': cannot import module 'no_such_pkg.envs' (No module named 'no_such_pkg'); make 'no_such_pkg' importable: install it or add the directory holding it to PYTHONPATH (the flowrl command also looks in the current directory)
>>> load_reference("collections:OrderDict", "env")
Traceback (most recent call last):
...
flowrl.errors.ConfigError: env='collections:OrderDict': module 'collections' has no attribute 'OrderDict'; did you mean 'OrderedDict'?
"""

from __future__ import annotations

import difflib
import importlib
import os
import re
import site
import sys
import sysconfig
from types import ModuleType
from typing import Any, Iterable

from flowrl.errors import ConfigError

_DOTTED = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")
IMPORTABLE_HINT = ("install it or add the directory holding it to PYTHONPATH (the flowrl "
                   "command also looks in the current directory)")


def is_module_name(text: Any) -> bool:
    """Whether ``text`` is a dotted module name (``pkg.mod``).

    >>> is_module_name("my_envs.grid"), is_module_name("my-envs"), is_module_name("a:b")
    (True, False, False)
    """
    return isinstance(text, str) and _DOTTED.match(text) is not None


def split_reference(text: Any) -> tuple[str, str] | None:
    """``(module, name)`` of a reference ``"module:name"`` whose module part is a
    dotted module name and whose name is not empty; None for anything else (a
    plain name, an env id without a module).

    >>> split_reference("my_envs:Corridor"), split_reference("CartPole-v1")
    (('my_envs', 'Corridor'), None)
    >>> split_reference("gymnasium.envs.classic_control:CartPole-v1")
    ('gymnasium.envs.classic_control', 'CartPole-v1')
    """
    if not isinstance(text, str):
        return None
    module, sep, name = text.partition(":")
    if not sep or not name or not is_module_name(module):
        return None
    return module, name


def import_module(module: str, where: str) -> ModuleType:
    """``importlib.import_module(module)``; a ConfigError starting with ``where``
    when the module is not there (how to make it importable), when a module it
    imports is missing (which one, to install) or when importing it raises."""
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as e:
        missing = e.name or ""
        if missing and (module == missing or module.startswith(missing + ".")):
            top = module.split(".")[0] if missing == module.split(".")[0] else missing
            raise ConfigError(f"{where}: cannot import module {module!r} (No module named "
                              f"{missing!r}); make {top!r} importable: {IMPORTABLE_HINT}"
                              ) from None
        raise ConfigError(f"{where}: importing module {module!r} failed: it imports "
                          f"{missing or 'a module'!r}, which is not installed; install it"
                          ) from e
    except Exception as e:  # whatever the module's own code raises
        first = str(e).splitlines()[0] if str(e) else ""
        raise ConfigError(f"{where}: importing module {module!r} raised "
                          f"{type(e).__name__}: {first}; fix the module") from e


def import_modules(modules: Iterable[str], where: str = "imports") -> None:
    """Import each of ``modules`` (dotted names) in order, as :func:`import_module`
    does; a name that is not a module name is a ConfigError naming ``where``.

    >>> import_modules(["json", "collections.abc"])
    >>> import_modules(["my-envs"], "--import")
    Traceback (most recent call last):
    ...
    flowrl.errors.ConfigError: --import 'my-envs': not a module name; give a dotted module name such as my_envs or pkg.envs
    """
    for module in modules:
        if not is_module_name(module):
            raise ConfigError(f"{where} {module!r}: not a module name; give a dotted module "
                              "name such as my_envs or pkg.envs")
        import_module(module, f"{where} {module!r}")


def load_reference(text: str, where: str) -> Any:
    """The object reference ``"pkg.mod:Name"`` names (``Name`` may be dotted:
    ``"pkg.mod:Outer.Inner"``), importing ``pkg.mod``; a ConfigError naming
    ``where``, the reference and the fix when the module cannot be imported or has
    no such attribute (see the module docstring)."""
    parts = split_reference(text)
    at = f"{where}={text!r}"
    if parts is None:
        raise ConfigError(f"{at}: give a reference 'module:Name', e.g. 'my_envs:Corridor'")
    module_name, name = parts
    obj: Any = import_module(module_name, at)
    for i, attr in enumerate(name.split(".")):
        if not hasattr(obj, attr):
            owner = module_name if i == 0 else f"{module_name}:{'.'.join(name.split('.')[:i])}"
            kind = "module" if i == 0 else "object"
            public = [n for n in dir(obj) if not n.startswith("_")]
            close = difflib.get_close_matches(attr, public, n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise ConfigError(f"{at}: {kind} {owner!r} has no attribute {attr!r}{hint}")
        obj = getattr(obj, attr)
    return obj


def _system_dirs() -> set[str]:
    """Directories every Python process of this interpreter has on ``sys.path``:
    the standard library and the site-packages."""
    dirs = {sysconfig.get_paths().get(k) for k in ("stdlib", "platstdlib", "purelib", "platlib")}
    dirs.update(site.getsitepackages() if hasattr(site, "getsitepackages") else [])
    dirs.add(site.getusersitepackages() if hasattr(site, "getusersitepackages") else None)
    return {os.path.realpath(d) for d in dirs if d}


def module_roots(modules: Iterable[str]) -> tuple[str, ...]:
    """The directories of this process's ``sys.path`` that the top-level packages
    of ``modules`` (dotted names, imported here) were found in, leaving out the
    standard library's and the site-packages (a fresh process has those). Modules
    not imported, built in, or in ``__main__`` (which Ray pickles by value) add
    nothing. In ``sys.path`` order, without repeats.

    >>> import tempfile, pathlib
    >>> d = tempfile.mkdtemp()
    >>> _ = pathlib.Path(d, "flowrl_doc_roots.py").write_text("X = 1\\n")
    >>> sys.path.insert(0, d)
    >>> _ = importlib.import_module("flowrl_doc_roots")
    >>> module_roots(["flowrl_doc_roots", "json", "__main__"]) == (os.path.realpath(d),)
    True
    >>> sys.path.remove(d)
    """
    system = _system_dirs()
    found = []
    for module in modules:
        top = sys.modules.get(str(module).split(".")[0])
        if top is None or top.__name__ == "__main__":
            continue
        paths = list(getattr(top, "__path__", None) or [])   # a package: its directories
        file = getattr(top, "__file__", None)
        if paths:
            roots = [os.path.dirname(os.path.realpath(p)) for p in paths]
        elif file:
            roots = [os.path.dirname(os.path.realpath(file))]
        else:
            continue
        for root in roots:
            if root not in system and root not in found:
                found.append(root)
    return tuple(found)


__all__ = ["split_reference", "is_module_name", "import_module", "import_modules",
           "load_reference", "module_roots", "IMPORTABLE_HINT"]
