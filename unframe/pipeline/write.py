"""Writing: provenance stamped into the artifact (``StampStage``) and the artifact placed at its
output by rename from a staging folder beside it (``WriteStage``, ``io.place``).
"""

from __future__ import annotations

import datetime as _dt
import json
import shutil
import tempfile
from pathlib import Path
from typing import Any

from unframe import io
from unframe.converters.base import Backend
from unframe.distributions import dist_version
from unframe.pipeline.flow import Flow
from unframe.pipeline.stages import Stage
from unframe.validate.compare import ParityReport


class WriteStage(Stage):
    """Stamps provenance and places the artifact by rename from a staging folder beside it."""

    kind = "write"

    def __init__(self, backend: Backend, output: Path) -> None:
        super().__init__(f"{backend.name} backend", str(output))
        self.backend = backend
        self.output = output

    def run(self, flow: Flow) -> None:
        write_artifact(flow, self.backend, self.output, force=flow.settings.force)


class StampStage(Stage):
    """Records provenance in the artifact: ONNX metadata_props, CoreML user metadata, or the
    TensorRT sidecar. ``route_names`` is filled in by the planner once the branch is complete."""

    kind = "stamp"

    def __init__(self, backend: Backend) -> None:
        super().__init__("provenance", "source sha256, route, tool versions, opset path, parity")
        self.backend = backend
        self.route_names: list[str] = []

    def run(self, flow: Flow) -> None:
        self.backend.stamp(flow.artifact, provenance(flow, self.route_names, self.backend))


def write_artifact(flow: Flow, backend: Backend, output: Path, *, force: bool) -> list[Path]:
    parent = output.parent if str(output.parent) else Path(".")
    stage_dir = Path(tempfile.mkdtemp(prefix=".unframe-tmp-", dir=parent))
    try:
        written = backend.write(flow.artifact, stage_dir / output.name)
        protect = (flow.source,) if isinstance(flow.source, Path) else ()
        flow.written = io.place(written, parent, force=force, protect=protect)
    finally:
        shutil.rmtree(stage_dir, ignore_errors=True)
    flow.artifact.path = output
    backend.placed(flow.artifact, flow.written)
    return flow.written


# ------------------------------------------------------------------------ provenance ---------
def provenance(flow: Flow, route_names: list[str], backend: Backend) -> dict[str, str]:
    """One provenance record, the same for every artifact kind and for the zoo."""
    fe, export = flow.frontend, flow.export
    tools = {"unframe": dist_version("unframe"), "onnx": dist_version("onnx"),
             "onnx-ir": dist_version("onnx-ir"), "onnxruntime": dist_version("onnxruntime")}
    tools.update(fe.versions())
    tools.update(backend.versions())
    if export is not None:
        tools.update(export.tool_versions)
    if isinstance(flow.source, Path):
        source, digest = str(flow.source), io.sha256_of(flow.source)
    else:
        source, digest = f"python object: {fe.describe(flow.native)}", ""
    quantized = {"quantize": str(flow.settings.options["quantize"])} if flow.settings.options.get("quantize") else {}
    return {
        **quantized,
        "version": dist_version("unframe") or "?",
        "created": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
        "source": source,
        "source_sha256": digest,
        "route": json.dumps(route_names),
        "exporter": export.tool if export else "",
        "export_route": export.route if export else "",
        "notes": json.dumps(flow.notes),
        "tools": json.dumps({k: v or "not installed" for k, v in tools.items()}, sort_keys=True),
        # the opsets the graph actually had, ending with the one handed to the backend
        "opset_path": json.dumps([str(o) for o in _dedupe(flow.opset_path)]),
        "parity": json.dumps(parity_summary(flow.report)),
    }


def _dedupe(path: list[int]) -> list[int]:
    return [p for i, p in enumerate(path) if i == 0 or p != path[i - 1]]


def parity_summary(report: ParityReport) -> dict[str, Any]:
    return {"passed": bool(report), "stages": [
        {"stage": s.stage, "status": s.status, "reference": s.reference, "candidate": s.candidate,
         "max_abs": s.max_abs, "max_rel": s.max_rel, "scale": s.scale, "cases": s.cases,
         "reason": s.reason, **({"generation": s.generation.summary()} if s.generation else {}),
         **({"accuracy": s.details()} if hasattr(s, "details") else {})}
        for s in report.stages]}
