"""Custom Keras objects (option ``custom_objects``, CLI ``--custom-objects module.py``).

A ``.keras``/``.h5`` file saved from a model with custom layers, a subclassed model, or custom
losses/activations names those classes but does not hold their code: Keras needs them at load
time. The option takes

- a path to a Python file: it is imported (which runs it, so it needs ``--trust``) and its
  Keras classes are collected: the names in ``__all__`` when it has one, else every Keras
  layer/model/loss/metric/... class it defines or imports (Keras' own excepted) and the public
  functions it defines (custom activations and losses);
- a module object, collected the same way (already imported, so no trust is needed);
- a dict ``{name: class or function}``, used as it is.

A class decorated with ``keras.saving.register_keras_serializable`` registers itself when the
module is imported; it is collected too, harmlessly.
"""

from __future__ import annotations

import importlib.util
import inspect
import itertools
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType
from typing import Any

from unframe.errors import InputError, TrustRequiredError, UsageError

_counter = itertools.count()


def resolve(value: Any, trust: bool) -> tuple[dict[str, Any], str] | None:
    """The custom objects to pass to Keras, and where they came from (for messages)."""
    if value is None:
        return None
    if isinstance(value, Mapping):
        bad = [k for k, v in value.items() if not isinstance(k, str) or not callable(v)]
        if bad:
            raise UsageError(f"custom_objects: {', '.join(map(repr, bad))} is not a name mapped "
                             "to a class or function", "pass {'Name': TheClass, ...}")
        return dict(value), "the given custom_objects"
    if isinstance(value, ModuleType):
        return collect(value, getattr(value, "__file__", None) or value.__name__), value.__name__
    if isinstance(value, (str, os.PathLike)):
        path = Path(value)
        return collect(import_file(path, trust), str(path)), str(path)
    raise UsageError(f"custom_objects: can't take a {type(value).__name__}",
                     "pass a .py file path, a module, or a dict of name -> class")


def import_file(path: Path, trust: bool) -> ModuleType:
    """Import a module from its path, under a unique name (two files both called layers.py
    don't collide, and a second load runs the file again)."""
    _check_readable(path)
    if not trust:
        raise TrustRequiredError(
            f"{path}: --custom-objects imports this Python file, which runs its code",
            "pass --trust (trust=True) only if you trust that file")
    name = f"unframe_custom_objects_{path.stem.replace('-', '_')}_{next(_counter)}"
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise InputError(f"{path}: can't be imported as a Python module",
                         "pass a .py file that defines the custom classes")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses, pickling and typing look classes up there
    # the module may import its siblings (``from layers import Scale``)
    folder = str(path.resolve().parent)
    added = folder not in sys.path
    if added:
        sys.path.insert(0, folder)
    try:
        spec.loader.exec_module(module)
    except (Exception, SystemExit) as exc:
        sys.modules.pop(name, None)
        raise InputError(f"{path}: importing it failed: {type(exc).__name__}: {_first_line(exc)}",
                         f"fix the module so that `python {path}` runs cleanly") from exc
    finally:
        if added and folder in sys.path:
            sys.path.remove(folder)
    return module


def _check_readable(path: Path) -> None:
    if not path.exists():
        raise InputError(f"{path}: no such custom objects module", "check the --custom-objects path")
    if not path.is_file():
        raise InputError(f"{path}: not a file", "pass the .py file that defines the custom classes")
    if path.suffix.lower() != ".py":
        raise InputError(f"{path}: not a Python module (.py)",
                         "pass the .py file that defines the custom classes")
    try:
        with path.open("rb") as f:
            f.read(1)
    except OSError as exc:
        raise InputError(f"{path}: can't read it ({exc.strerror or exc})",
                         "check the file's permissions") from exc


def collect(module: ModuleType, where: str) -> dict[str, Any]:
    """``__all__`` when the module has one, else its Keras classes and its own functions."""
    names = getattr(module, "__all__", None)
    if names is not None:
        missing = [n for n in names if not hasattr(module, n)]
        if missing:
            raise InputError(f"{where}: __all__ names {', '.join(map(repr, missing))}, which the "
                             "module does not define", "fix its __all__")
        found = {n: getattr(module, n) for n in names if callable(getattr(module, n))}
    else:
        found = {n: obj for n, obj in vars(module).items()
                 if not n.startswith("_") and (_keras_class(obj) or _own_function(obj, module))}
    if not found:
        raise InputError(f"{where}: defines no custom Keras class (layer, model, loss, metric...)",
                         "define the model's custom classes there, or list them in __all__")
    # Keras looks a class up by the name it was saved under, which is the class's own name.
    return {**found, **{obj.__name__: obj for obj in found.values() if inspect.isclass(obj)}}


def _keras_bases() -> tuple[type, ...]:
    import keras

    return (keras.layers.Layer, keras.losses.Loss, keras.metrics.Metric,
            keras.optimizers.Optimizer, keras.optimizers.schedules.LearningRateSchedule,
            keras.initializers.Initializer, keras.regularizers.Regularizer,
            keras.constraints.Constraint)


def _keras_class(obj: Any) -> bool:
    if not inspect.isclass(obj) or not issubclass(obj, _keras_bases()):
        return False
    package = (obj.__module__ or "").split(".", 1)[0]
    return package not in ("keras", "tensorflow", "tf_keras")


def _own_function(obj: Any, module: ModuleType) -> bool:
    return inspect.isfunction(obj) and obj.__module__ == module.__name__


def _first_line(exc: BaseException) -> str:
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    return lines[0][:300] if lines else "(no message)"
