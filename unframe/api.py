"""Orchestration: plan a route, run its stages, check each stage's numbers, write the artifact.

Every stage is checked against the stage before it (``ParityReport``). By default a failed check
raises ``ParityError`` and nothing is written. The output is placed by rename from a staging
folder beside it, so an interrupted or failed run never leaves a partial file.
"""

from __future__ import annotations

import datetime as _dt
import json
import os
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import onnx_ir as ir

from unframe import io
from unframe.converters.base import (
    Artifact,
    Backend,
    ConvertOptions,
    ExportResult,
    Frontend,
    InputSpec,
    RunnerUnavailable,
    Target,
)
from unframe.errors import Blocker, InputError, ParityError, UnsupportedError, UsageError
from unframe.route import Route, detect_frontend, dist_version, get_backend, is_reference, plan
from unframe.validate.compare import ParityReport, StageParity, compare
from unframe.validate.inputs import load_npz
from unframe.validate.onnxruntime import onnx_runner
from unframe.validate.runner import Runner, TensorSpec


@dataclass
class ConversionResult:
    artifact: Artifact
    path: Path | None
    report: ParityReport
    route: Route
    export: ExportResult | None = None
    opset_conversion: Any = None
    provenance: dict[str, str] = field(default_factory=dict)
    timings: dict[str, float] = field(default_factory=dict)
    written: list[Path] = field(default_factory=list)

    @property
    def model(self) -> Any:
        return self.artifact.model

    def to_dict(self) -> dict[str, Any]:
        return {
            "path": str(self.path) if self.path else None,
            "written": [str(p) for p in self.written],
            "route": self.route.to_dict(),
            "parity": self.report.to_dict(),
            "exporter": self.export.tool if self.export else None,
            "notes": (self.export.notes if self.export else []) + self.artifact.notes,
            "opset_conversion": self.opset_conversion.to_dict() if hasattr(self.opset_conversion, "to_dict") else None,
            "provenance": self.provenance,
            "timings": self.timings,
        }


@dataclass
class CheckResult:
    route: Route
    blockers: list[Blocker]
    notes: list[str] = field(default_factory=list)  # e.g. where a live parser disagrees

    def __bool__(self) -> bool:
        return not self.blockers

    def to_dict(self) -> dict[str, Any]:
        return {"ok": not self.blockers, "route": self.route.to_dict(),
                "blockers": [b.to_dict() for b in self.blockers], "notes": self.notes}


# -------------------------------------------------------------------------- public API -------
def convert(source: Any, *, from_: str | None = None, to: str = "onnx", output: str | os.PathLike[str] | None = None,
            opset: int | None = None, sample_inputs: Any = None, inputs: Any = None,
            target: Any = None, validate: bool = True, atol: Any = None, rtol: Any = None,
            trust: bool = False, force: bool = False, static: bool = False,
            dynamic: list[tuple[str, int, str | None]] | None = None, explain: bool = False,
            ml_opset: int | None = None, **options: Any) -> ConversionResult:
    """Convert ``source`` (a file path or a framework object) to ``to`` ("onnx", "coreml",
    "tensorrt"). See README for every option; stage-specific ones (``exporter``, ``signature``,
    ``precision``, ``shapes``...) are passed as keyword arguments. ``ml_opset`` moves the
    ``ai.onnx.ml`` domain too (by default it stays at the source's version)."""
    timings: dict[str, float] = {}
    t0 = time.perf_counter()
    src = _as_source(source)
    be = get_backend(to)
    fe = detect_frontend(src, from_)
    out_path = Path(output) if output is not None else None
    if out_path is not None:
        _check_suffix(out_path, be)
        io.check_output_path(out_path, force=force, inputs=(src,) if isinstance(src, Path) else ())
    tgt = _make_target(be, opset, target, options, static)
    fe.ensure_available()
    be.ensure_available()
    route = plan(fe, be, source=src, opset=opset, source_opset=_peek_opset(src, fe), validate=validate)
    if explain:
        return ConversionResult(Artifact(kind=be.name), None, ParityReport(), route, timings=timings)
    opts = ConvertOptions(trust=trust, opset=route.target_opset, options=dict(options),
                          validate=validate)
    spec = InputSpec(tensors=_parse_inputs(inputs), samples=_samples(sample_inputs), static=static,
                     dynamic=list(dynamic or []))
    report = ParityReport()

    native = fe.load(src, opts)
    timings["load"] = _lap(t0)
    export, ref_runner = _export(fe, native, spec, opts, report, validate, atol, rtol)
    timings["export"] = _lap(t0) - timings["load"]
    model = export.model
    conversion, onnx_ref = _convert_opset(model, route, export, ref_runner, report, validate, atol, rtol,
                                          ml_opset)
    timings["opset"] = _lap(t0) - timings["load"] - timings["export"]
    if export.feeds:
        tgt.options.setdefault("sample_shapes", {k: tuple(v.shape) for k, v in export.feeds[0].items()})
    blockers = be.check(model, tgt)
    if blockers:
        raise UnsupportedError(f"the {be.name} backend can't take this model: {len(blockers)} blocker(s)",
                               "see the list; `unframe check` shows them without converting",
                               blockers=blockers)
    result = _backend_stage(be, tgt, model, export, onnx_ref, report, validate, atol, rtol, out_path,
                            force, route, src, fe, native, conversion)
    result.timings = {**timings, "total": _lap(t0)}
    return result


def check(source: Any, *, from_: str | None = None, to: str = "onnx", opset: int | None = None,
          target: Any = None, trust: bool = False, sample_inputs: Any = None, inputs: Any = None,
          static: bool = False, **options: Any) -> CheckResult:
    """Pre-flight: every reason the target can't take the model, at once, without writing."""
    src = _as_source(source)
    be = get_backend(to)
    fe = detect_frontend(src, from_)
    tgt = _make_target(be, opset, target, options, static)
    fe.ensure_available()
    route = plan(fe, be, source=src, opset=opset, source_opset=_peek_opset(src, fe), validate=False)
    opts = ConvertOptions(trust=trust, opset=route.target_opset, options=dict(options))
    native = fe.load(src, opts)
    spec = InputSpec(tensors=_parse_inputs(inputs), samples=_samples(sample_inputs), static=static)
    model = fe.to_onnx(native, spec, opts).model if fe.name != "onnx" else native
    blockers: list[Blocker] = []
    if route.target_opset and _opset(model) != route.target_opset:
        from unframe import version_converter

        blockers = version_converter.preflight(model, route.target_opset)
        if not blockers:
            model = _copy(model)
            version_converter.convert_opset(model, route.target_opset)
    notes: list[str] = []
    if not blockers:
        blockers, notes = be.check_with_notes(model, tgt)
    return CheckResult(route, blockers, notes)


def convert_opset(model: Any, opset: int, *, output: str | os.PathLike[str] | None = None,
                  validate: bool = True, force: bool = False, sample_inputs: Any = None,
                  atol: Any = None, rtol: Any = None, ml_opset: int | None = None) -> ConversionResult:
    """Move an ONNX model (path, ModelProto or onnx_ir.Model) to another opset, checked with
    onnxruntime against the original. ``ml_opset`` moves the ``ai.onnx.ml`` domain too."""
    return convert(model, from_="onnx", to="onnx", opset=opset, output=output, validate=validate,
                   force=force, sample_inputs=sample_inputs, atol=atol, rtol=rtol, ml_opset=ml_opset)


def load(path: str | os.PathLike[str], *, from_: str | None = None, trust: bool = False, **options: Any) -> Any:
    """Load a model file: ONNX as an ``onnx_ir.Model`` (external data lazy); other formats as
    their framework's object (``--trust`` rules apply)."""
    src = _as_source(path)
    fe = detect_frontend(src, from_)
    fe.ensure_available()
    return fe.load(src, ConvertOptions(trust=trust, options=dict(options)))


def save(model: Any, path: str | os.PathLike[str], *, force: bool = False,
         external_data: bool | None = None) -> list[Path]:
    """Atomically save an ONNX model (onnx_ir.Model or ModelProto)."""
    import onnx

    if isinstance(model, onnx.ModelProto):
        model = ir.serde.deserialize_model(model)
    if not isinstance(model, ir.Model):
        raise UsageError(f"save() takes an ONNX model, not {type(model).__name__}",
                         "use unframe.convert(..., output=PATH) for other formats")
    return io.save_model(model, path, force=force, external_data=external_data)


# ---------------------------------------------------------------------------- stages ---------
def _export(fe: Frontend, native: Any, spec: InputSpec, opts: ConvertOptions, report: ParityReport,
            validate: bool, atol: Any, rtol: Any) -> tuple[ExportResult, Runner | None]:
    export = fe.to_onnx(native, spec, opts)
    if not validate:
        return export, None
    if not export.feeds:
        from unframe.validate.inputs import generate_feeds

        export.feeds = generate_feeds(export.model)
    ort = onnx_runner(export.model)
    if fe.name != "onnx":
        ref = fe.runner(native, export)
        stage = compare(ref, ort, export.feeds, atol, rtol, stage="export",
                        exact=export.exact_outputs, defaults=export.tolerances)
        _record(report, stage)
    return export, ort


def _convert_opset(model: ir.Model, route: Route, export: ExportResult, before: Runner | None,
                   report: ParityReport, validate: bool, atol: Any, rtol: Any,
                   ml_opset: int | None = None) -> tuple[Any, Runner | None]:
    target = route.target_opset or _opset(model)
    ml_now = model.opset_imports.get("ai.onnx.ml")
    move_ml = ml_opset is not None and ml_now is not None and ml_now != ml_opset
    if not target or (_opset(model) == target and not move_ml):
        return None, before
    from unframe import version_converter

    # raises with every blocker
    conversion = version_converter.convert_opset(model, target, ml_target=ml_opset if move_ml else None)
    if not validate:
        return conversion, None
    after = onnx_runner(model)
    stage = compare(before, after, export.feeds, atol, rtol, stage="opset",
                    exact=export.exact_outputs, defaults=export.tolerances)
    _record(report, stage)
    return conversion, after


def _backend_stage(be: Backend, tgt: Target, model: ir.Model, export: ExportResult, onnx_ref: Runner | None,
                   report: ParityReport, validate: bool, atol: Any, rtol: Any, out_path: Path | None,
                   force: bool, route: Route, src: Any, fe: Frontend, native: Any,
                   conversion: Any) -> ConversionResult:
    parent = (out_path.parent if out_path is not None and str(out_path.parent) else Path("."))
    workdir = Path(tempfile.mkdtemp(prefix=".unframe-tmp-", dir=parent if out_path is not None else None))
    keep_workdir = False
    try:
        artifact = be.convert(model, tgt, workdir)
        if validate and be.name != "onnx":
            _record(report, _artifact_parity(be, tgt, artifact, export, onnx_ref, atol, rtol))
        prov = provenance(src, fe, be, route, export, conversion, report, native)
        be.stamp(artifact, prov)
        result = ConversionResult(artifact, out_path, report, route, export, conversion, prov)
        if out_path is not None:
            stage_dir = workdir / ".final"
            stage_dir.mkdir()
            written = be.write(artifact, stage_dir / out_path.name)
            result.written = io.place([stage_dir / p.name for p in written], parent, force=force,
                                      protect=(src,) if isinstance(src, Path) else ())
            artifact.path = out_path
        elif artifact.path is not None:
            keep_workdir = True  # the caller gets the artifact from here (no output asked)
        return result
    finally:
        if not keep_workdir:
            shutil.rmtree(workdir, ignore_errors=True)


def _artifact_parity(be: Backend, tgt: Target, artifact: Artifact, export: ExportResult,
                     onnx_ref: Runner | None, atol: Any, rtol: Any) -> StageParity:
    ref = onnx_ref if onnx_ref is not None else onnx_runner(export.model)
    try:
        runner = be.runner(artifact, tgt)
    except RunnerUnavailable as why:
        return StageParity.skipped("backend", ref.name, be.name, str(why))
    return compare(ref, runner, export.feeds, atol, rtol, stage="backend", exact=export.exact_outputs,
                   default_fn=lambda dt: be.tolerance(dt, tgt))


def _record(report: ParityReport, stage: StageParity) -> None:
    report.add(stage)
    if not stage:
        raise ParityError(f"parity failed at the {stage.stage} stage ({stage.reference} vs "
                          f"{stage.candidate}): {stage.reason}",
                          "nothing was written; loosen --atol/--rtol only if the difference is "
                          "expected, or report the model", report=report)


# ------------------------------------------------------------------------ provenance ---------
def provenance(src: Any, fe: Frontend, be: Backend, route: Route, export: ExportResult | None,
               conversion: Any, report: ParityReport, native: Any) -> dict[str, str]:
    tools = {"unframe": dist_version("unframe"), "onnx": dist_version("onnx"),
             "onnx-ir": dist_version("onnx-ir"), "onnxruntime": dist_version("onnxruntime")}
    tools.update(fe.versions())
    tools.update(be.versions())
    if export is not None:
        tools.update(export.tool_versions)
    if isinstance(src, Path):
        source, digest = str(src), io.sha256_of(src)
    else:
        source, digest = f"python object: {fe.describe(native)}", ""
    opset_path = (conversion.path if conversion is not None and hasattr(conversion, "path")
                  else [str(o) for o in route.opset_path])
    return {
        "version": dist_version("unframe"),
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": source,
        "source_sha256": digest,
        "route": json.dumps(route.names()),
        "exporter": export.tool if export else "",
        "export_route": export.route if export else "",
        "notes": json.dumps(export.notes if export else []),
        "tools": json.dumps(tools, sort_keys=True),
        "opset_path": json.dumps(opset_path),
        "parity": json.dumps(_parity_summary(report)),
    }


def _parity_summary(report: ParityReport) -> dict[str, Any]:
    return {"passed": bool(report), "stages": [
        {"stage": s.stage, "status": s.status, "reference": s.reference, "candidate": s.candidate,
         "max_abs": s.max_abs, "max_rel": s.max_rel, "cases": s.cases, "reason": s.reason}
        for s in report.stages]}


# ------------------------------------------------------------------------------ helpers ------
def _as_source(source: Any) -> Any:
    if isinstance(source, (str, os.PathLike)) and not is_reference(source):
        return Path(source)
    return source


def _check_suffix(path: Path, be: Backend) -> None:
    if be.suffixes and path.suffix.lower() not in be.suffixes:
        raise UsageError(f"output {path.name} has the wrong suffix for {be.name}",
                         f"use one of: {', '.join(be.suffixes)}")


def _make_target(be: Backend, opset: int | None, target: Any, options: dict[str, Any],
                 static: bool) -> Target:
    if isinstance(target, Target):
        tgt = Target(be.name, opset, {**target.options})
    elif isinstance(target, dict):
        tgt = Target(be.name, opset, dict(target))
    elif isinstance(target, str):
        tgt = Target(be.name, opset, {"target": target})
    elif target is None:
        tgt = Target(be.name, opset, {})
    else:
        raise UsageError(f"target must be a string, dict or Target, not {type(target).__name__}")
    for k, v in options.items():
        tgt.options.setdefault(k, v)
    tgt.options.setdefault("static", static)
    return tgt


def _peek_opset(src: Any, fe: Frontend) -> int | None:
    if fe.name != "onnx":
        return None
    if isinstance(src, Path):
        proto = io.load_proto(src)
        return next((o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")), None)
    if isinstance(src, ir.Model):
        return _opset(src)
    import onnx

    if isinstance(src, onnx.ModelProto):
        return next((o.version for o in src.opset_import if o.domain in ("", "ai.onnx")), None)
    return None


def _opset(model: ir.Model) -> int | None:
    return model.opset_imports.get("", model.opset_imports.get("ai.onnx"))


def _copy(model: ir.Model) -> ir.Model:
    return ir.serde.deserialize_model(ir.to_proto(model))


def _samples(sample_inputs: Any) -> Any:
    if isinstance(sample_inputs, (str, os.PathLike)):
        p = Path(sample_inputs)
        if not p.is_file():
            raise InputError(f"{p}: sample inputs file not found", "pass an .npz of arrays by input name")
        try:
            return load_npz(str(p))
        except Exception as exc:
            raise InputError(f"{p}: not a readable .npz file ({exc})", "save samples with numpy.savez") from exc
    return sample_inputs


def _parse_inputs(inputs: Any) -> list[TensorSpec] | None:
    """``name:shape:dtype`` strings (shape like 1x3x224x224 or batchx3x224x224; '?' dynamic)
    or TensorSpec objects."""
    if inputs is None:
        return None
    if isinstance(inputs, str):
        inputs = [s for s in inputs.split(",") if s.strip()]
    specs = []
    for item in inputs:
        if isinstance(item, TensorSpec):
            specs.append(item)
            continue
        parts = str(item).strip().split(":")
        if len(parts) not in (2, 3) or not parts[0]:
            raise UsageError(f"bad input spec {item!r}", "use name:shape:dtype, e.g. x:1x3x224x224:float32")
        shape: list[int | str | None] = []
        for d in parts[1].lower().replace(",", "x").split("x") if parts[1] else []:
            d = d.strip()
            shape.append(int(d) if d.isdigit() else (None if d in ("?", "-1", "") else d))
        specs.append(TensorSpec(parts[0], tuple(shape), parts[2] if len(parts) == 3 else "float32"))
    return specs


def _lap(t0: float) -> float:
    return time.perf_counter() - t0
