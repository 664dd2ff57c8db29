"""Route planning: which frontend, exporter, opset path and backend a conversion takes.

``plan()`` needs no framework import and reads no weights, so ``--explain`` is instant and can
run before anything is converted.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from unframe.converters.base import Backend, Frontend
from unframe.converters.registry import BACKENDS, FRONTENDS
from unframe.distributions import dist_version as _installed
from unframe.errors import InputError, UsageError

ALIASES = {
    "pytorch": "torch", "tensorflow": "tf", "keras": "tf", "tflite": "tf", "savedmodel": "tf",
    "scikit-learn": "sklearn", "skl": "sklearn", "mlpackage": "coreml", "mlmodel": "coreml",
    "trt": "tensorrt", "tensorrt_rtx": "tensorrt", "engine": "tensorrt",
}


@dataclass
class Stage:
    name: str  # load | export | opset | backend | parity
    tool: str
    detail: str = ""
    versions: dict[str, str] = field(default_factory=dict)


@dataclass
class Route:
    frontend: str
    backend: str
    source_opset: int | None  # None: decided by the exporter
    export_opset: int | None
    target_opset: int | None
    stages: list[Stage] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def opset_path(self) -> list[int]:
        path = [o for o in (self.source_opset or self.export_opset, self.target_opset) if o]
        return [p for i, p in enumerate(path) if i == 0 or p != path[i - 1]]

    def names(self) -> list[str]:
        return [f"{s.name}: {s.tool}" for s in self.stages]

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["opset_path"] = self.opset_path
        return d

    def describe(self) -> str:
        lines = [f"route {self.frontend} -> {self.backend}"]
        for i, s in enumerate(self.stages, 1):
            ver = ", ".join(f"{k} {v}" for k, v in s.versions.items())
            lines.append(f"  {i}. {s.name:<8} {s.tool}" + (f" [{ver}]" if ver else "")
                         + (f" - {s.detail}" if s.detail else ""))
        lines += [f"  note: {n}" for n in self.notes]
        return "\n".join(lines)


def canonical_name(name: str) -> str:
    key = name.strip().lower()
    return ALIASES.get(key, key)


def get_backend(to: str) -> Backend:
    name = canonical_name(to)
    if name not in BACKENDS:
        raise UsageError(f"unknown target {to!r}", f"choose one of: {', '.join(map(str, BACKENDS.keys()))}")
    return BACKENDS.get(name)


def get_frontend(name: str) -> Frontend:
    key = canonical_name(name)
    if key not in FRONTENDS:
        raise UsageError(f"unknown source framework {name!r}",
                         f"choose one of: {', '.join(map(str, FRONTENDS.keys()))}")
    return FRONTENDS.get(key)


def is_reference(source: Any) -> bool:
    """``module.path:factory``: a Python callable that builds the model (torch, with --trust)."""
    if not isinstance(source, str) or ":" not in source or os.path.exists(source):
        return False
    mod, _, attr = source.partition(":")
    return bool(mod) and bool(attr) and all(p.isidentifier() for p in mod.split(".")) and attr.isidentifier()


def detect_frontend(source: Any, from_: str | None) -> Frontend:
    """The frontend for a path or object, from ``from_`` or by looking at it (no imports)."""
    if isinstance(source, Path) and source.is_file():
        from unframe.converters.backends.tensorrt.sidecar import reject_engine_input

        reject_engine_input(source)  # a build product, not a model: say so whatever --from says
    if from_:
        fe = get_frontend(from_)
        if isinstance(source, Path):
            _check_claim(source, fe)
        return fe
    if is_reference(source):
        return get_frontend("torch")
    if isinstance(source, Path):
        if not source.exists():
            raise InputError(f"{source}: no such file or folder", "check the path")
        for _, fe in FRONTENDS.items():
            if fe.accepts_path(source):
                return fe
        if source.is_dir():
            if any(source.suffix.lower() in fe.suffixes for _, fe in FRONTENDS.items()):
                raise InputError(f"{source}: is a directory, expected a {source.suffix} file",
                                 "pass the model file itself")
            raise InputError(f"{source}: is a directory but not a SavedModel (no saved_model.pb)",
                             "pass a model file, or --from to say what it is")
        raise InputError(f"{source}: unknown model format {source.suffix or '(no suffix)'!r}",
                         f"pass --from ({', '.join(map(str, FRONTENDS.keys()))}) or use a known suffix")
    for _, fe in FRONTENDS.items():
        if fe.accepts_object(source):
            return fe
    raise UsageError(f"can't tell which framework a {type(source).__module__}.{type(source).__name__} "
                     "comes from", "pass from_=... (torch, tf, sklearn, onnx)")


def _check_claim(path: Path, fe: Frontend) -> None:
    """--from names one framework but the file is clearly another's: say so."""
    if not path.exists() or fe.accepts_path(path):
        return
    for _, other in FRONTENDS.items():
        if other is not fe and other.accepts_path(path):
            raise InputError(f"{path}: looks like a {other.name} model, not {fe.name}",
                             f"drop --from or pass --from {other.name}")


def dist_version(name: str) -> str:
    """A distribution's version for reports; 'not installed' when absent."""
    return _installed(name) or "not installed"


def plan(fe: Frontend, be: Backend, *, source: Any, opset: int | None, source_opset: int | None,
         validate: bool = True) -> Route:
    """The stages a conversion will take."""
    if be.canonical_opset is not None:
        target_opset = be.canonical_opset
        if opset is not None and opset != be.canonical_opset:
            raise UsageError(f"--opset {opset} applies to ONNX output; the {be.name} backend works "
                             f"at opset {be.canonical_opset}", "drop --opset")
    else:
        target_opset = opset
    is_onnx = fe.name == "onnx"
    export_opset = None if is_onnx else (fe.closest_opset(target_opset) if target_opset else fe.default_opset())
    route = Route(frontend=fe.name, backend=be.name, source_opset=source_opset if is_onnx else None,
                  export_opset=export_opset, target_opset=target_opset)
    unframe_v = {"unframe": dist_version("unframe")}
    what = str(source) if isinstance(source, (str, Path)) else type(source).__name__
    route.stages.append(Stage("load", f"{fe.name} frontend", what, fe.versions() if not is_onnx else
                              {"onnx": dist_version("onnx"), "onnx-ir": dist_version("onnx-ir")}))
    if not is_onnx:
        route.stages.append(Stage("export", f"{fe.name} exporter", f"to ONNX opset {export_opset}",
                                  fe.versions()))
        if validate:
            route.stages.append(Stage("parity", f"{fe.name} vs onnxruntime", "exported graph vs source",
                                      {"onnxruntime": dist_version("onnxruntime")}))
    start = source_opset if is_onnx else export_opset
    if target_opset and start != target_opset:
        detail = f"opset {start or '?'} -> {target_opset}" + ("" if is_onnx else " (if the exporter "
                                                               "can't produce it directly)")
        route.stages.append(Stage("opset", "unframe version converter", detail, unframe_v))
        if validate:
            route.stages.append(Stage("parity", "onnxruntime vs onnxruntime", "converted vs original",
                                      {"onnxruntime": dist_version("onnxruntime")}))
    route.stages.append(Stage("backend", f"{be.name} backend", f"write {', '.join(be.suffixes)}",
                              be.versions()))
    if validate and be.name != "onnx":
        route.stages.append(Stage("parity", f"onnxruntime vs {be.name} runner", "artifact vs ONNX",
                                  be.versions()))
    return route
