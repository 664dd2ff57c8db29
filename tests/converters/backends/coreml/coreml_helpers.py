"""Convert an ONNX model with the CoreML backend and check the saved package against
onnxruntime, the way the pipeline does."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from unframe.converters.backends.coreml.backend import CoreMLBackend
from unframe.converters.base import Artifact, Target
from unframe.validate.compare import StageParity, compare
from unframe.validate.onnxruntime import OnnxRuntimeRunner


def to_ir(proto: onnx.ModelProto) -> ir.Model:
    """The model at the backend's canonical opset (through unframe's version converter)."""
    from unframe.version_converter import convert_opset

    model = ir.serde.deserialize_model(proto)
    if model.opset_imports.get("", 21) != 21:
        convert_opset(model, 21)
    return model


def convert_and_compare(model: ir.Model, feeds: Sequence[dict[str, np.ndarray]], workdir: Path,
                        **options: Any) -> tuple[Artifact, StageParity]:
    backend = CoreMLBackend()
    target = Target("coreml", options=options)
    blockers = backend.check(model, target)
    assert not blockers, [str(b) for b in blockers]
    artifact = backend.convert(model, target, workdir)
    runner = backend.runner(artifact, target)
    reference = OnnxRuntimeRunner(ir.to_proto(model))
    parity = compare(reference, runner, list(feeds), default_fn=lambda dt: backend.tolerance(dt, target))
    return artifact, parity
