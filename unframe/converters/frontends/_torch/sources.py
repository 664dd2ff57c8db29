"""Turning a torch source (object, file, ``module:factory`` reference) into a native model.

The kind of a file is read from its content, never its suffix: a zip archive with
``archive_format`` / ``models/model.json`` is an ExportedProgram (.pt2), one with ``code/`` and
``constants.pkl`` is TorchScript, one with only ``data.pkl`` (or a bare pickle stream) is a
``torch.save`` pickle (a state dict or a whole model). Only the last runs code on load, so only
it needs trust.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import logging
import re
import zipfile
from collections.abc import Iterator
from enum import Enum
from pathlib import Path
from typing import Any

from unframe import timing
from unframe.errors import (
    InputError,
    MissingExtraError,
    TrustRequiredError,
    UnframeError,
    UsageError,
)

FACTORY_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_][\w.]*$")
# Pickle streams start with PROTO (0x80); legacy torch.save files are one.
PICKLE_MAGIC = b"\x80"


class SourceKind(str, Enum):
    EXPORTED_PROGRAM = "ExportedProgram (.pt2)"
    TORCHSCRIPT = "TorchScript archive"
    PICKLE = "torch.save pickle"


def is_factory_ref(source: Any) -> bool:
    """``package.module:callable`` given as a string (or a Path that names no file)."""
    text = str(source)
    if isinstance(source, Path) and source.exists():
        return False
    return isinstance(source, (str, Path)) and bool(FACTORY_REF.match(text))


def detect_kind(path: Path) -> SourceKind:
    """Read the archive layout; raise InputError when it is no torch file."""
    if not path.exists():
        raise InputError(f"{path}: no such file", "check the path")
    if path.is_dir():
        raise InputError(f"{path}: is a directory, expected a torch file", "pass the file itself")
    from unframe import archives

    if archives.is_zip(path):
        archives.check_zip(path, "torch archive")  # entries escaping it, duplicates, zip bombs
        with zipfile.ZipFile(path) as archive:
            return _kind_of_names(path, archive.namelist())
    with path.open("rb") as fh:
        head = fh.read(2)
    if head[:1] == PICKLE_MAGIC:
        return SourceKind.PICKLE
    raise InputError(f"{path}: not a torch archive (neither .pt2, TorchScript nor torch.save)",
                     "pass a file written by torch.export.save, torch.jit.save or torch.save")


def _kind_of_names(path: Path, names: list[str]) -> SourceKind:
    tails = {name.split("/", 1)[-1] for name in names}
    if "archive_format" in tails or any(t.startswith("models/") and t.endswith(".json")
                                        for t in tails) or "serialized_exported_program.json" in tails:
        return SourceKind.EXPORTED_PROGRAM
    if "constants.pkl" in tails and any(t.startswith("code/") for t in tails):
        return SourceKind.TORCHSCRIPT
    if "data.pkl" in tails:
        return SourceKind.PICKLE
    raise InputError(f"{path}: a zip archive but not a torch one (no model.json, code/ or data.pkl)",
                     "pass a file written by torch.export.save, torch.jit.save or torch.save")


def load_path(path: Path, *, trust: bool, model_factory: str | None) -> tuple[Any, list[str]]:
    """Load a torch file by content. Returns the native model and notes (e.g. a suffix that
    didn't match the content)."""
    kind = detect_kind(path)
    notes = _suffix_notes(path, kind)
    if kind is SourceKind.EXPORTED_PROGRAM:
        return load_exported_program(path), notes
    if kind is SourceKind.TORCHSCRIPT:
        return _load_torchscript(path), notes
    return load_pickle(path, trust=trust, model_factory=model_factory), notes


def _suffix_notes(path: Path, kind: SourceKind) -> list[str]:
    suffix = path.suffix.lower()
    expected = {SourceKind.EXPORTED_PROGRAM: {".pt2"}}.get(kind, {".pt", ".pth", ".bin", ".ckpt"})
    if suffix and suffix not in expected:
        return [f"{path.name} holds a {kind.value} despite its {suffix} suffix; loaded as one"]
    return []


def _load_torchscript(path: Path) -> Any:
    import torch

    try:
        return torch.jit.load(str(path), map_location="cpu")
    except Exception as exc:
        raise InputError(f"{path}: the TorchScript archive can't be loaded ({first_line(exc)})",
                         "the file may be truncated; re-save it with torch.jit.save") from exc


def load_exported_program(path: Path) -> Any:
    """torch.export.load, first importing the module of every custom pytree class the program
    names (e.g. transformers' ModelOutput subclasses) so the user doesn't have to."""
    import torch

    for module in missing_pytree_modules(path):
        _import_for_pytree(module, path)
    try:
        with _quiet_logger("torch.export"), timing.tool("torch.export.load"):
            return torch.export.load(str(path))
    except Exception as exc:
        raise InputError(f"{path}: the ExportedProgram can't be loaded ({first_line(exc)})",
                         "re-save it with torch.export.save from this torch version") from exc


# In the archive's model JSON the in/out specs are JSON strings: \"type\": \"pkg.mod.Class\"
_SPEC_TYPE = re.compile(r'\\?"type\\?":\s*\\?"([A-Za-z_][\w.]*)\\?"')


def missing_pytree_modules(path: Path) -> list[str]:
    """Modules defining pytree types named in the program's specs that torch doesn't know yet."""
    import torch.utils._pytree as pytree

    known = set(pytree.SERIALIZED_TYPE_TO_PYTHON_TYPE)
    modules: list[str] = []
    with zipfile.ZipFile(path) as archive:
        for name in archive.namelist():
            if not (name.endswith(".json") and "/models/" in f"/{name}"):
                continue
            text = _read_member(path, archive, name).decode("utf-8", errors="replace")
            for type_name in sorted(set(_SPEC_TYPE.findall(text))):
                module = type_name.rsplit(".", 1)[0]
                if type_name not in known and "." in type_name and module not in modules:
                    modules.append(module)
    return modules


def _read_member(path: Path, archive: zipfile.ZipFile, name: str) -> bytes:
    try:
        return archive.read(name)
    except Exception as exc:  # noqa: BLE001 - zipfile raises a dozen types on a corrupt member
        raise InputError(f"{path}: {name} in the archive is corrupt ({first_line(exc)})",
                         "the file may be truncated; re-save it") from None


@contextlib.contextmanager
def _quiet_logger(name: str) -> Iterator[None]:
    """torch.export.load logs a traceback before raising; the error we raise says it all."""
    logger = logging.getLogger(name)
    level = logger.level
    logger.setLevel(logging.CRITICAL)
    try:
        yield
    finally:
        logger.setLevel(level)


def _import_for_pytree(module: str, path: Path) -> None:
    top = module.split(".", 1)[0]
    if importlib.util.find_spec(top) is None:
        raise MissingPackageError(
            f"{path}: its inputs/outputs use classes from '{module}', which is not installed", top)
    try:
        importlib.import_module(module)
    except ImportError as exc:
        raise MissingPackageError(f"{path}: its inputs/outputs use classes from '{module}', which "
                                  f"can't be imported ({first_line(exc)})", top) from exc


class MissingPackageError(MissingExtraError):
    """A package (not an unframe extra) the model file needs: same exit code as a missing extra."""

    def __init__(self, message: str, package: str) -> None:
        UnframeError.__init__(self, message, f"run: pip install {package}",
                              details={"package": package})


def load_pickle(path: Path, *, trust: bool, model_factory: str | None) -> Any:
    """A torch.save file: a state dict (then the model comes from ``model_factory``) or a whole
    pickled model. Both run code (the factory or the pickle), so both need trust."""
    import torch

    state = _weights_only(path)
    if state is not None and not _is_state_dict(state):
        raise InputError(f"{path}: holds a {type(state).__name__}, not a model or state dict",
                         "save the model with torch.export.save or torch.jit.save")
    if not trust:
        if state is not None:
            raise TrustRequiredError(
                f"{path} is a state dict: building the model runs your code (--model module:factory)",
                "pass --model module:factory and --trust (trust=True) if you trust that code")
        raise TrustRequiredError(
            f"{path} is a full torch pickle: loading it runs arbitrary code from the file",
            "pass --trust (trust=True) only if you trust its origin, or re-save it with "
            "torch.export.save / torch.jit.save")
    if state is not None:
        return _build_from_state_dict(path, _unwrap_checkpoint(state), model_factory)
    try:
        obj = torch.load(str(path), map_location="cpu", weights_only=False)
    except Exception as exc:
        raise InputError(f"{path}: the pickle can't be loaded ({first_line(exc)})",
                         "the class it needs must be importable; check the file") from exc
    if isinstance(obj, torch.nn.Module):
        return obj
    if _is_state_dict(obj):
        return _build_from_state_dict(path, _unwrap_checkpoint(obj), model_factory)
    raise InputError(f"{path}: the pickle holds a {type(obj).__name__}, not a torch model",
                     "save the nn.Module itself or its state_dict")


def _weights_only(path: Path) -> Any | None:
    """The content when it loads without running code, else None."""
    import pickle

    import torch

    try:
        return torch.load(str(path), map_location="cpu", weights_only=True)
    except pickle.UnpicklingError:
        return None
    except RuntimeError as exc:
        if "weights_only" in str(exc) or "Unsupported global" in str(exc):
            return None
        raise InputError(f"{path}: not a readable torch file ({first_line(exc)})",
                         "the file may be truncated; re-save it") from exc
    except Exception as exc:  # noqa: BLE001 - the weights-only reader on a corrupt stream (no code ran)
        raise InputError(f"{path}: not a readable torch file ({type(exc).__name__}: {first_line(exc)})",
                         "the file may be truncated; re-save it") from exc


def _is_state_dict(obj: Any) -> bool:
    import torch

    if not isinstance(obj, dict):
        return False
    if any(isinstance(obj.get(k), dict) for k in ("state_dict", "model_state_dict")):
        return True
    return bool(obj) and all(isinstance(v, torch.Tensor) for v in obj.values())


def _unwrap_checkpoint(obj: dict[str, Any]) -> dict[str, Any]:
    for key in ("state_dict", "model_state_dict"):
        if isinstance(obj.get(key), dict):
            return obj[key]
    return obj


def _build_from_state_dict(path: Path, state: dict[str, Any], model_factory: str | None) -> Any:
    if not model_factory:
        raise UsageError(f"{path} is a state dict: the model class is needed to load it",
                         "pass --model module:factory (model_factory='module:callable')")
    model = call_factory(model_factory)
    try:
        model.load_state_dict(state, strict=True)
    except RuntimeError as exc:
        raise InputError(f"{path}: the state dict doesn't fit {model_factory}() "
                         f"({first_line(exc)})", "check that the factory builds the same architecture"
                         ) from exc
    return model


def call_factory(ref: str) -> Any:
    """Import ``module:callable`` and call it; it must return an nn.Module (or ExportedProgram)."""
    import torch

    module_name, _, attr = ref.partition(":")
    try:
        target: Any = importlib.import_module(module_name)
    except ImportError as exc:
        raise UsageError(f"model factory {ref!r}: module {module_name!r} can't be imported "
                         f"({first_line(exc)})", "check PYTHONPATH and the module name") from exc
    for part in attr.split("."):
        if not hasattr(target, part):
            raise UsageError(f"model factory {ref!r}: {module_name} has no {attr!r}",
                             "name a callable that returns the model")
        target = getattr(target, part)
    model = target() if callable(target) and not isinstance(target, torch.nn.Module) else target
    if not isinstance(model, (torch.nn.Module, torch.export.ExportedProgram)):
        raise UsageError(f"model factory {ref!r} returned a {type(model).__name__}, not an nn.Module",
                         "make it return the model")
    return model


def load_factory(ref: str, *, trust: bool) -> Any:
    if not trust:
        raise TrustRequiredError(f"model reference {ref!r} runs your Python code to build the model",
                                 "pass --trust (trust=True) if you trust that code")
    return call_factory(ref)


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    line = text.splitlines()[0] if text else type(exc).__name__
    return line[:300]
