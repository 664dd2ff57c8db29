"""ONNX in: a .onnx file, an ``onnx.ModelProto`` or an ``onnx_ir.Model``.

Nothing to export; the model is loaded lazily (external data not read) and checked. Its runner
is onnxruntime on the model as loaded, so that later stages are compared with the original; for
the whole run onnxruntime works in a child process (a hostile graph can crash its native code).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import onnx
import onnx_ir as ir

from unframe import io
from unframe.converters.base import ConvertOptions, ExportResult, Frontend, InputSpec
from unframe.converters.registry import register_frontend
from unframe.distributions import dist_version
from unframe.opset import main_opset
from unframe.validate.inputs import DYNAMIC_FILLS, generate_feeds
from unframe.validate.onnxruntime import onnx_runner, untrusted_graphs
from unframe.validate.runner import Runner


@register_frontend
class OnnxFrontend(Frontend):
    name = "onnx"
    extra = ""
    description = "ONNX files (.onnx), onnx.ModelProto and onnx_ir.Model objects"
    suffixes = (".onnx",)
    object_types = ("onnx.onnx_ml_pb2.ModelProto", "onnx_ir._core.Model")
    exports = False  # the source is the graph: the route starts at the opset stage

    def distributions(self) -> tuple[str, ...]:
        return ("onnx", "onnx-ir", "onnxruntime")

    def accepts_object(self, obj: Any) -> bool:
        return isinstance(obj, (onnx.ModelProto, ir.Model))

    def load(self, source: Any, opts: ConvertOptions) -> Any:
        if isinstance(source, Path):
            return io.load_model(source)
        if isinstance(source, onnx.ModelProto):
            io.check_model(source, "the ONNX model")
            return io.deserialize(source, "the ONNX model")
        if isinstance(source, ir.Model):
            return source
        raise TypeError(f"not an ONNX model: {type(source).__name__}")

    def preserve(self, source: Any) -> Any:
        """For the whole run, onnxruntime works on this graph (and what is made of it) in a child
        process: a graph from outside can crash its native code (``untrusted_graphs``)."""
        return untrusted_graphs()

    def default_opset(self) -> int:
        return 0  # whatever the model has

    def to_onnx(self, native: ir.Model, spec: InputSpec, opts: ConvertOptions) -> ExportResult:
        feeds = _feeds(native, spec)
        return ExportResult(model=native, tool="none (ONNX input)", route="onnx",
                            opset=main_opset(native),
                            tool_versions={"onnx": dist_version("onnx")}, feeds=feeds)

    def runner(self, native: ir.Model, export: ExportResult | None) -> Runner:
        return onnx_runner(native)

    def describe(self, native: ir.Model) -> str:
        opset = main_opset(native)
        return f"ONNX model (opset {'?' if opset is None else opset}, {len(native.graph)} nodes)"


def _feeds(model: ir.Model, spec: InputSpec) -> list[dict[str, Any]]:
    from unframe.validate.inputs import as_feed_list

    if spec.samples is not None:
        return as_feed_list(spec.samples)
    # static: one feed of the declared shapes; else a second, of sizes unframe guessed, that
    # parity drops (with a note) if the graph itself can't run it (``inputs.DrawnFeeds``)
    return generate_feeds(model, fills=DYNAMIC_FILLS[:1] if spec.static else DYNAMIC_FILLS)
