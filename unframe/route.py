"""Route planning: which frontend, exporter, opset path and backends a conversion takes.

``plan(request)`` returns a ``Route`` made of the stage objects of ``unframe.pipeline``: a
prefix every target shares (load, export and its parity check) and one branch per target
(opset, backend, their parity checks, provenance, write). It needs no framework import and
reads no weights, so ``--explain`` is instant; ``unframe.api`` runs exactly what it returns.
"""

from __future__ import annotations

import difflib
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unframe import pipeline as pl
from unframe.converters.base import Backend, Frontend, Target
from unframe.converters.registry import BACKENDS, FRONTENDS
from unframe.distributions import dist_version as _installed
from unframe.errors import InputError, UsageError

ALIASES = {
    "pytorch": "torch", "tensorflow": "tf", "keras": "tf", "tflite": "tf", "savedmodel": "tf",
    "scikit-learn": "sklearn", "skl": "sklearn", "mlpackage": "coreml", "mlmodel": "coreml",
    "trt": "tensorrt", "tensorrt_rtx": "tensorrt", "engine": "tensorrt",
}


# Words that name a source format with --from but a backend with --to (--from tflite reads a .tflite)
TARGET_ALIASES = {"tflite": "litert"}


def canonical_name(name: str) -> str:
    key = name.strip().lower()
    return ALIASES.get(key, key)


def canonical_target(name: str) -> str:
    key = name.strip().lower()
    return TARGET_ALIASES.get(key) or canonical_name(key)


def get_backend(to: str) -> Backend:
    name = canonical_target(to)
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
    if isinstance(source, Path):
        _probe(source)
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


def _probe(path: Path) -> None:
    """A path the system can't even look at (a name too long, no permission) is unreadable input."""
    try:
        path.stat()
    except FileNotFoundError:
        return  # said below, with the frontends' view of it
    except OSError as exc:
        raise InputError(f"{path}: can't be read ({exc.strerror or type(exc).__name__})",
                         "check the path") from None


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


# ----------------------------------------------------------------------------- the request --
@dataclass
class Request:
    """Everything a conversion call asked for, checked once by ``plan``."""

    source: Any
    targets: list[str]
    from_: str | None = None
    output: Path | None = None
    opset: int | None = None
    ml_opset: int | None = None
    target: Any = None  # a backend's target: "iOS17", a dict of options, or a Target
    settings: pl.Settings = field(default_factory=pl.Settings)
    write: bool = True  # False: plan the stages only up to the backend's check (unframe check)


class TargetNames(list):  # type: ignore[type-arg]
    """Backend names, and which of them only ``all`` asked for (``implied``): the planner drops
    those no route reaches from the source (ExecuTorch from a Keras model), with a note."""

    implied: frozenset[str] = frozenset()


def parse_targets(to: str | list[str] | tuple[str, ...]) -> TargetNames:
    """``"onnx,coreml"``, a list, or ``"all"`` (every backend usable here) as backend names;
    an unknown name is a usage error listing the valid ones."""
    names = [t for t in (to.split(",") if isinstance(to, str) else list(to)) if str(t).strip()]
    if not names:
        raise UsageError("no target given", f"use --to with one or more of: {_backend_list()}")
    out = TargetNames()
    named: set[str] = set()
    for raw in names:
        name = canonical_target(str(raw))
        if name == "all":
            chosen = [n for n, be in BACKENDS.items() if be.available()]
        elif name in BACKENDS:
            chosen = [name]
            named.add(name)
        else:
            raise UsageError(f"unknown target {str(raw).strip()!r}", f"choose from: {_backend_list()}, all")
        out.extend(n for n in chosen if n not in out)
    out.implied = frozenset(n for n in out if n not in named)
    return out


def _backend_list() -> str:
    return ", ".join(map(str, BACKENDS.keys()))


# ----------------------------------------------------------------------------- the route ----
@dataclass
class Branch:
    """One target's part of a route."""

    backend: Backend
    target: Target
    opset: int | None  # the ONNX opset handed to the backend (None: whatever the graph has)
    output: Path | None
    stages: list[pl.Stage] = field(default_factory=list)
    direct: bool = False  # the backend converts the source framework's model itself (no ONNX)

    @property
    def name(self) -> str:
        return self.backend.name


@dataclass
class Route:
    frontend: str
    source_opset: int | None  # ONNX input: the file's opset; None: decided by the exporter
    export_opset: int | None
    prefix: list[pl.Stage] = field(default_factory=list)
    branches: list[Branch] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    ml: Any = None  # MLPlan: may the graph hold ai.onnx.ml ops (for the lower stage)

    @property
    def load(self) -> pl.LoadStage:
        return next(s for s in self.prefix if isinstance(s, pl.LoadStage))

    # the single-target view (most calls have one target)
    @property
    def backend(self) -> str:
        return ",".join(b.name for b in self.branches)

    @property
    def target_opset(self) -> int | None:
        return self.branches[0].opset if len(self.branches) == 1 else None

    @property
    def stages(self) -> list[pl.Stage]:
        return self.prefix + [s for b in self.branches for s in b.stages]

    def branch_stages(self, branch: Branch) -> list[pl.Stage]:
        return self.prefix + branch.stages

    def opset_path_of(self, branch: Branch) -> list[int]:
        path = [o for o in (self.source_opset or self.export_opset, branch.opset) if o]
        return [p for i, p in enumerate(path) if i == 0 or p != path[i - 1]]

    @property
    def opset_path(self) -> list[int]:
        return self.opset_path_of(self.branches[0]) if self.branches else []

    def names(self, branch: Branch | None = None) -> list[str]:
        stages = self.branch_stages(branch) if branch is not None else self.stages
        return [s.label for s in stages]

    def to_dict(self) -> dict[str, Any]:
        return {"frontend": self.frontend, "backend": self.backend,
                "targets": [b.name for b in self.branches], "source_opset": self.source_opset,
                "export_opset": self.export_opset, "target_opset": self.target_opset,
                "opset_path": self.opset_path,
                "stages": [s.to_dict() for s in self.stages],
                "branches": {b.name: {"opset": b.opset, "opset_path": self.opset_path_of(b),
                                      "via": "direct" if b.direct else "onnx",
                                      "output": str(b.output) if b.output else None,
                                      "stages": [s.to_dict() for s in b.stages]}
                             for b in self.branches},
                "notes": self.notes}

    def describe(self) -> str:
        lines = [f"route {self.frontend} -> {', '.join(b.name for b in self.branches)}"]
        n = 0
        for s in self.prefix:
            n += 1
            lines.append(f"  {n}. {s.describe()}")
        single = len(self.branches) == 1
        for b in self.branches:
            if not single:
                via = " (direct, no ONNX)" if b.direct else (f" (opset {b.opset})" if b.opset else "")
                lines.append(f"  {b.name}{via}:")
            m = n
            for s in b.stages:
                m += 1
                lines.append(("  " if single else "    ") + f"{m}. {s.describe()}")
        lines += [f"  note: {note}" for note in self.notes]
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.describe()


# ----------------------------------------------------------------------------- planning -----
GENERIC_OPTIONS = ("sample_shapes", "ml_to_tensor", "tree_strategy", "max_memory",
                   "parity_timeout", "via", "quantize", "calibration", "accuracy")  # read by the pipeline itself
VIAS = ("onnx", "direct")


def plan(request: Request) -> Route:
    """The stages a conversion (or a check) will run, for every target of the request."""
    src = request.source
    fe = detect_frontend(src, request.from_)
    implied = getattr(request.targets, "implied", frozenset())
    unreachable = [t for t in request.targets if t in implied and not get_backend(t).reachable_from(fe.name)]
    backends = [get_backend(t) for t in request.targets if t not in unreachable]
    check_options(request.settings.options, fe, backends)
    _check_quantize(request.settings.options)
    direct = [_goes_direct(be, fe, request.settings.options.get("via")) for be in backends]
    single = len(backends) == 1
    if request.opset is not None and all(be.canonical_opset is not None for be in backends):
        for be in backends:  # no target takes --opset: each says which opset it works at
            be.check_opset_request(request.opset)
    targets = [_target(be, request) for be in backends]
    opsets = [be.pick_opset(t, request.opset) for be, t in zip(backends, targets, strict=True)]
    source_opset = peek_opset(src) if not fe.exports else None
    known = [o for o, d in zip(opsets, direct, strict=True) if o and not d]
    exports = fe.exports and not all(direct)  # a route of direct branches only never exports
    export_opset = None
    if exports:
        export_opset = fe.closest_opset(max(known)) if known else fe.default_opset()
    route = Route(fe.name, source_opset, export_opset)
    via_onnx = [be for be, d in zip(backends, direct, strict=True) if not d]
    route.ml = ml_plan(src, fe, via_onnx, request)
    validate = request.settings.validate
    route.prefix.append(pl.LoadStage(fe, src))
    if exports:
        export = pl.ExportStage(fe, export_opset, tuple(be.name for be in via_onnx))
        route.prefix.append(export)
        if validate:
            route.prefix.append(pl.ParityStage(export, f"{fe.name}", "onnxruntime",
                                               "exported graph vs source"))
    outputs = resolve_outputs(request, backends, fe)
    for be, tgt, opset, out, d in zip(backends, targets, opsets, outputs, direct, strict=True):
        branch = Branch(be, tgt, None if d else opset, out, direct=d)
        branch.stages = _direct_stages(route, branch, request, fe) if d else _branch_stages(route, branch, request, fe)
        route.branches.append(branch)
        if not d and fe.name in be.direct_from:
            route.notes.append(f"{be.name}: through ONNX; --via direct converts the {fe.name} model "
                               f"itself ({be.direct_tools.get(fe.name, 'its own frontend')})")
    if unreachable:
        route.notes.append(f"all: {', '.join(unreachable)} skipped: no route reaches "
                           f"{'it' if len(unreachable) == 1 else 'them'} from a {fe.name} model")
    if not single and request.opset is not None:
        route.notes.append(f"--opset {request.opset} applies to the onnx target; the others take "
                           "their own opset")
    return route


def _check_quantize(options: dict[str, Any]) -> None:
    """An unknown scheme or accuracy measure is a usage error before anything loads."""
    if options.get("quantize") is None:
        for name in ("calibration", "accuracy"):
            if options.get(name) is not None:
                raise UsageError(f"--{name} applies to a quantized conversion", "add --quantize SCHEME")
        return
    from unframe.passes.quantize import parse_accuracy, scheme_of

    scheme_of(options["quantize"])
    parse_accuracy(options.get("accuracy"))


def _goes_direct(be: Backend, fe: Frontend, via: Any) -> bool:
    """Whether ``be``'s branch converts the source model itself: asked with ``via="direct"``,
    and always where no ONNX route reaches the backend (LiteRT, ExecuTorch) but a direct one
    does. A backend no route reaches from ``fe`` keeps its ONNX branch, whose check refuses it
    with the reason (exit 4)."""
    if via is not None and str(via).lower() not in VIAS:
        raise UsageError(f"--via {via}: unknown route", f"use one of: {', '.join(VIAS)}")
    can = fe.name in be.direct_from
    if via is not None and str(via).lower() == "direct":
        if not can:
            froms = ", ".join(be.direct_from) or "no framework"
            raise UsageError(f"--via direct: the {be.name} backend has no direct route from {fe.name} "
                             f"models (it has from: {froms})", "drop --via direct")
        return True
    if via is not None and not be.onnx_route:
        raise UsageError(f"--via onnx: no ONNX route reaches {be.name} here",
                         f"drop --via onnx ({be.name} converts from: {', '.join(be.direct_from)})")
    return can and not be.onnx_route


def _direct_stages(route: Route, branch: Branch, request: Request, fe: Frontend) -> list[pl.Stage]:
    """load (the prefix) -> the backend from the native model -> parity against the source ->
    provenance -> write. `unframe check` runs the backend's direct check instead (api)."""
    if not request.write:
        return []
    be = branch.backend
    stage = pl.DirectStage(be, fe, branch.target, branch.output)
    stages: list[pl.Stage] = [stage]
    if request.settings.validate and request.settings.options.get("quantize"):
        stages.append(pl.AccuracyStage(stage, f"{fe.name} (float)", f"{be.name} runner"))
    elif request.settings.validate:
        stages.append(pl.ParityStage(stage, fe.name, f"{be.name} runner", "artifact vs source"))
    stamp = pl.StampStage(be)
    stages.append(stamp)
    if branch.output is not None:
        stages.append(pl.WriteStage(be, branch.output))
    stamp.route_names = [route.load.label] + [s.label for s in stages]
    return stages


def _branch_stages(route: Route, branch: Branch, request: Request, fe: Frontend) -> list[pl.Stage]:
    be, validate = branch.backend, request.settings.validate
    stages: list[pl.Stage] = []
    start = route.source_opset if not fe.exports else route.export_opset
    ml = request.ml_opset
    if branch.opset and (fe.exports or start != branch.opset or ml is not None):
        opset = pl.OpsetStage(start, branch.opset, ml, exporting=fe.exports)
        stages.append(opset)
        if validate:
            stages.append(pl.ParityStage(opset, "onnxruntime", "onnxruntime", "converted vs original"))
    elif ml is not None and not branch.opset:
        opset = pl.OpsetStage(start, start or 0, ml)
        stages.append(opset)
        if validate:
            stages.append(pl.ParityStage(opset, "onnxruntime", "onnxruntime", "converted vs original"))
    lower = _lower_stage(be, request, route.ml)
    if lower is not None:
        stages.append(lower)
        if validate:
            stages.append(pl.ParityStage(lower, "onnxruntime", "onnxruntime", "lowered vs ai.onnx.ml"))
    if not request.write:
        return stages
    backend = pl.BackendStage(be, branch.target, branch.output)
    stages.append(backend)
    if validate and request.settings.options.get("quantize"):
        stages.append(pl.AccuracyStage(backend, "onnxruntime (float graph)", f"{be.name} runner"))
    elif validate and be.changes_compute(branch.target):
        stages.append(pl.ParityStage(backend, "onnxruntime", f"{be.name} runner", "artifact vs ONNX"))
    stamp = pl.StampStage(be)
    stages.append(stamp)
    if branch.output is not None:
        stages.append(pl.WriteStage(be, branch.output))
    stamp.route_names = [s.label for s in route.prefix + stages]
    return stages


@dataclass
class MLPlan:
    """Whether the graph handed to the backends may hold ai.onnx.ml ops, and for an ONNX source
    the model, whose tree strategies each backend's lower stage previews (what --explain shows)."""

    possible: bool
    model: Any = None  # the ONNX source, to preview the strategies per backend

    def preview(self, gemm_max_depth: int) -> list[str] | None:
        if self.model is None:
            return None
        from unframe.passes import ml_to_tensor as mlt

        return mlt.preview(self.model, gemm_max_depth)


def ml_plan(src: Any, fe: Frontend, backends: list[Backend], request: Request) -> MLPlan:
    asked = bool(request.settings.options.get("ml_to_tensor"))
    if not asked and not any(be.tensor_only for be in backends):
        return MLPlan(False)
    if fe.exports:
        return MLPlan(fe.emits_ml_ops)
    model = _peek_model(src)
    if model is None:
        return MLPlan(True)
    from unframe.passes import ml_to_tensor as mlt

    return MLPlan(mlt.has_ml_ops(model), model)


def _peek_model(src: Any) -> Any:
    """The source, read for planning with the load stage's checks (the ML plan reads its trees):
    None when it is unreadable or broken, which the load stage then says."""
    import onnx
    import onnx_ir as ir

    from unframe import io

    try:
        if isinstance(src, Path):
            proto = io.load_proto(src)
            io.check_model(proto, str(src), src)
            return ir.serde.deserialize_model(proto)
        if isinstance(src, onnx.ModelProto):
            io.check_model(src, "the model")
            return ir.serde.deserialize_model(src)
    except Exception:  # unreadable or broken: the load stage says why
        return None
    return src if isinstance(src, ir.Model) else None


def _lower_stage(be: Backend, request: Request, ml: MLPlan) -> pl.LowerStage | None:
    """Automatic for runtimes without the ML domain, on request (``ml_to_tensor``) otherwise."""
    asked = request.settings.options.get("ml_to_tensor")
    if not ml.possible or not (be.tensor_only or asked):
        return None
    if asked and request.opset is not None and request.opset < 13 and not be.tensor_only:
        raise UsageError(f"ml_to_tensor writes opset-13 ops; --opset {request.opset} is older",
                         "pass --opset 13 or newer, or drop --ml-to-tensor")
    return pl.LowerStage(encode_strings=be.tensor_only, plan=ml.preview(be.tree_gemm_max_depth),
                         gemm_max_depth=be.tree_gemm_max_depth)


def _target(be: Backend, request: Request) -> Target:
    target = request.target
    if isinstance(target, Target):
        tgt = Target(be.name, request.opset, dict(target.options))
    elif isinstance(target, dict):
        tgt = Target(be.name, request.opset, dict(target))
    elif isinstance(target, str):
        tgt = Target(be.name, request.opset, {"target": target})
    elif target is None:
        tgt = Target(be.name, request.opset, {})
    else:
        raise UsageError(f"target must be a string, dict or Target, not {type(target).__name__}")
    for k, v in request.settings.options.items():
        if k in be.option_names:
            tgt.options.setdefault(k, v)
    tgt.options.setdefault("static", request.settings.spec.static)
    return tgt


def check_options(options: dict[str, Any], fe: Frontend, backends: list[Backend]) -> None:
    """An option no stage of the route reads is a usage error naming the closest valid one."""
    valid = set(GENERIC_OPTIONS) | set(fe.option_names)
    for be in backends:
        valid |= set(be.option_names)
    for name in options:
        if name in valid:
            continue
        everywhere = set(GENERIC_OPTIONS)
        for _, comp in [*FRONTENDS.items(), *BACKENDS.items()]:
            everywhere |= set(comp.option_names)
        close = difflib.get_close_matches(name, sorted(valid), n=1, cutoff=0.6)
        if close:
            hint = f"did you mean {close[0]!r}?"
        elif name in everywhere:
            hint = f"no stage of this route ({fe.name} -> {', '.join(b.name for b in backends)}) reads it"
        else:
            hint = f"valid options here: {', '.join(sorted(valid - set(GENERIC_OPTIONS))) or 'none'}"
        raise UsageError(f"unknown option {name!r}", hint)


BESIDE_SOURCE = Path("<beside the source>")  # the CLI's default output (Python keeps results in memory)


def resolve_outputs(request: Request, backends: list[Backend], fe: Frontend) -> list[Path | None]:
    """Where each target is written: ``-o`` as given for one target, ``-o DIR`` for several,
    beside the source with each target's suffix for ``BESIDE_SOURCE`` (the CLI without ``-o``),
    nowhere for None (a Python call without ``output``: the results stay in memory)."""
    out, src = request.output, request.source
    if not request.write or out is None:
        return [None] * len(backends)
    if out == BESIDE_SOURCE:
        out = None
    if len(backends) == 1:
        be = backends[0]
        if out is None:
            beside = default_output(src, be, request.opset)
            if beside is None:
                raise UsageError(f"no output path for {pl.source_text(src)}", "pass -o PATH")
            return [beside]
        check_suffix(out, be)
        return [out]
    if out is not None and out.exists() and not out.is_dir():
        raise UsageError(f"-o {out} is a file, but {len(backends)} targets were asked",
                         "pass a folder: -o OUTDIR/ (each target is written there with its suffix)")
    if out is None and not isinstance(src, Path):
        raise UsageError(f"no output path for {pl.source_text(src)}", "pass -o DIR")
    folder = out if out is not None else src.parent
    stem = src.stem if isinstance(src, Path) else "model"
    return [folder / f"{stem}{be.suffixes[0]}" for be in backends]


def default_output(src: Any, be: Backend, opset: int | None) -> Path | None:
    """``model.pt2`` -> ``model.onnx`` beside it; an ONNX source keeps its suffix and gains the
    opset (``model.opset21.onnx``) so that it never names the input."""
    if not isinstance(src, Path) or not be.suffixes:
        return None
    stem = src.name if src.is_dir() else src.stem
    candidate = src.parent / f"{stem}{be.suffixes[0]}"
    if candidate.resolve() == src.resolve():
        candidate = src.parent / f"{stem}.{f'opset{opset}' if opset else 'converted'}{be.suffixes[0]}"
    return candidate


def check_suffix(path: Path, be: Backend) -> None:
    if be.suffixes and path.suffix.lower() not in be.suffixes:
        raise UsageError(f"output {path.name} has the wrong suffix for {be.name}",
                         f"use one of: {', '.join(be.suffixes)}")


def peek_opset(src: Any) -> int | None:
    """The default-domain opset of an ONNX source, read without its weights."""
    from unframe import io
    from unframe.opset import main_opset

    if isinstance(src, Path):
        return main_opset(io.load_proto(src))
    try:
        return main_opset(src)
    except (TypeError, AttributeError):
        return None
