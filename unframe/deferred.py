"""Modules imported only when first used, for the ``unframe`` command's start-up.

onnx-ir imports sympy at its own import (``onnx_ir._symbolic_shapes``, for symbolic dims'
expressions, which a conversion rarely builds): 0.5-0.8 s of every ``unframe`` command's start on
this machine, longer than converting a small model. ``defer(name)`` puts a stand-in in
``sys.modules``: ``import name`` binds it at no cost, and the first attribute read from it
(``sympy.Expr``, ``_symbolic_shapes.parse_symbolic_expression``, a submodule's import, torch
importing sympy) imports the real module, under a lock; from then on the stand-in holds the real
module's names. Only the command line defers (``cli.main``); a Python user's
process imports as it always does.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
import threading
import types
from typing import Any

_lock = threading.RLock()


class Deferred(types.ModuleType):
    """The stand-in for a module not imported yet (see the module's doc)."""

    def __init__(self, name: str, spec: Any) -> None:
        super().__init__(name)
        self.__spec__ = spec
        self.__loader__ = spec.loader
        self.__file__ = spec.origin

    def __getattr__(self, attr: str) -> Any:  # only names the stand-in does not hold yet
        return getattr(load(self), attr)


def defer(name: str) -> bool:
    """Put a stand-in for module ``name`` in ``sys.modules``; False (nothing done) when it is
    imported already or not installed. A submodule (``pkg.mod``) is found without importing its
    package, so the package's own ``from pkg import mod`` binds the stand-in."""
    with _lock:
        if name in sys.modules:
            return False
        spec = _find(name)
        if spec is None or spec.loader is None:
            return False
        sys.modules[name] = Deferred(name, spec)
        return True


def _find(name: str) -> Any:
    parent, _, child = name.rpartition(".")
    if not parent:
        return importlib.util.find_spec(name)
    if parent in sys.modules:
        return None  # imported already: its submodules are too, or its own import decides
    outer = _find(parent)
    if outer is None or not outer.submodule_search_locations:
        return None
    return importlib.machinery.PathFinder.find_spec(name, list(outer.submodule_search_locations))


def load(stand_in: Deferred) -> types.ModuleType:
    """The real module behind ``stand_in``, imported the first time; its names copied onto the
    stand-in, which the modules that imported it early still hold."""
    name = stand_in.__name__
    with _lock:
        current = sys.modules.get(name)
        if current is not None and not isinstance(current, Deferred):
            return current
        del sys.modules[name]
        try:
            real = importlib.import_module(name)
        except BaseException:
            sys.modules[name] = stand_in  # asked again next time, the same error
            raise
        stand_in.__dict__.update(real.__dict__)
        return real


__all__ = ["Deferred", "defer", "load"]
