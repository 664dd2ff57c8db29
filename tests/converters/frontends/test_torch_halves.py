"""16-bit torch sources on every route (issue 34): a bfloat16 CNN (``model.to(torch.bfloat16)``,
how bf16 training runs are saved) and a float16 one.

- ONNX keeps the model's precision: ONNX Conv and MaxPool take bfloat16 only from opset 22, so
  with no --opset the graph is raised to 22 (a note says so); with --opset 18 those nodes compute
  in float32 between Casts and every other tensor stays bfloat16. Either artifact passes
  onnx.checker and runs on onnx's reference evaluator, checked here against eager in bfloat16.
- CoreML holds no bfloat16: the graph is exported in float32 while parity runs the model as it
  is (bfloat16, at bfloat16's tolerance).
- TensorRT takes bfloat16 (a CPU build here).
- ``--precision fp32`` gives a float32 artifact.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("onnxscript", reason="needs onnxscript (torch.onnx dynamo exporter)")

import torch_models as tm  # noqa: E402

import unframe  # noqa: E402

BF16 = onnx.TensorProto.BFLOAT16


def model_and_sample(dtype: Any) -> tuple[Any, Any]:
    return tm.make_cnn().to(dtype), tm.cnn_sample(2).to(dtype)


def eager_float(model: Any, x: Any) -> list[np.ndarray]:
    with torch.no_grad():
        return [t.float().numpy() for t in model(x)]


def run_file(path: Path, x: Any) -> list[np.ndarray]:
    """The artifact on onnx's reference evaluator (onnxruntime's CPU provider has no bfloat16
    Conv or BatchNormalization kernel; unframe's parity falls back the same way)."""
    import ml_dtypes
    from onnx.reference import ReferenceEvaluator

    feed = x.view(torch.int16).numpy().view(ml_dtypes.bfloat16) if x.dtype == torch.bfloat16 else x.numpy()
    return [np.asarray(o).astype(np.float32) for o in ReferenceEvaluator(str(path)).run(None, {"x": feed})]


def elem_type(proto: onnx.ModelProto, which: str = "input") -> int:
    values = proto.graph.input if which == "input" else proto.graph.output
    return values[0].type.tensor_type.elem_type


def check_bf16_numbers(model: Any, x: Any, path: Path) -> None:
    for want, got in zip(eager_float(model, x), run_file(path, x), strict=True):
        assert float(np.abs(want).max()) > 0.3
        scale = float(np.abs(want).max())
        np.testing.assert_allclose(got, want, atol=0.05 * scale, rtol=0.05)  # bfloat16's tolerance


def test_bf16_cnn_to_onnx_raises_the_opset_and_keeps_bf16(tmp_path: Path) -> None:
    model, x = model_and_sample(torch.bfloat16)
    out = tmp_path / "cnn.onnx"
    result = unframe.convert(model, to="onnx", sample_inputs=x, output=out)
    proto = onnx.load(out)
    onnx.checker.check_model(proto, full_check=True)
    assert max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) == 22
    assert elem_type(proto) == BF16 and elem_type(proto, "output") == BF16
    assert {n.op_type for n in proto.graph.node} >= {"Conv", "MaxPool"}
    assert "Cast" not in {n.op_type for n in proto.graph.node if n.op_type == "Conv"}
    assert any("opset raised from 18 to 22: ONNX Conv, MaxPool take bfloat16" in n for n in result.notes)
    assert result.provenance.get("opset_path", "").endswith('"22"]'), result.provenance
    check_bf16_numbers(model, x, out)


def test_bf16_cnn_at_a_fixed_opset_computes_the_refused_nodes_in_float32(tmp_path: Path) -> None:
    model, x = model_and_sample(torch.bfloat16)
    out = tmp_path / "cnn18.onnx"
    result = unframe.convert(model, to="onnx", sample_inputs=x, output=out, opset=18)
    proto = onnx.load(out)
    onnx.checker.check_model(proto, full_check=True)
    assert max(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx")) == 18
    assert elem_type(proto) == BF16
    casts = [n for n in proto.graph.node if n.op_type == "Cast"]
    assert len(casts) >= 6  # in and out of two Convs and a MaxPool
    assert any("compute in float32 between Casts" in n and "--opset 22 keeps bfloat16" in n
               for n in result.notes), result.notes
    check_bf16_numbers(model, x, out)


def test_bf16_cnn_to_coreml_gets_float32_and_parity_in_bf16(tmp_path: Path) -> None:
    pytest.importorskip("coremltools", reason="needs coremltools")
    model, x = model_and_sample(torch.bfloat16)
    result = unframe.convert(model, to="coreml", sample_inputs=x, output=tmp_path / "cnn.mlpackage")
    assert (tmp_path / "cnn.mlpackage").is_dir()
    assert any("exported in fp32 (CoreML holds float16 and float32" in n for n in result.notes)
    export = next(s for s in result.report.stages if s.stage == "export")
    assert export.status == "passed" and export.cases == 2
    assert {o.ref_dtype for o in export.outputs} == {"bfloat16"}
    assert all(o.atol >= 0.05 for o in export.outputs)  # bfloat16's tolerance, not float32's
    assert all(v.dtype.name == "FLOAT" for v in result.export.model.graph.inputs)
    assert next(p for p in model.parameters()).dtype == torch.bfloat16  # the model is left as it was


def test_bf16_cnn_to_tensorrt_builds(tmp_path: Path) -> None:
    pytest.importorskip("tensorrt_rtx", reason="needs tensorrt-rtx (builds on the CPU)")
    model, x = model_and_sample(torch.bfloat16)
    out = tmp_path / "cnn.engine"
    result = unframe.convert(model, to="tensorrt", sample_inputs=x, output=out)
    assert out.is_file() and out.stat().st_size > 0
    assert result.export.model.graph.inputs[0].dtype.name == "BFLOAT16"


def test_bf16_cnn_with_precision_fp32_gives_a_float32_artifact(tmp_path: Path) -> None:
    model, x = model_and_sample(torch.bfloat16)
    out = tmp_path / "fp32.onnx"
    unframe.convert(model, to="onnx", sample_inputs=x, output=out, precision="fp32")
    proto = onnx.load(out)
    assert elem_type(proto) == onnx.TensorProto.FLOAT
    assert {t.data_type for t in proto.graph.initializer if t.data_type in (1, 10, 16)} == {1}


@pytest.mark.parametrize("target", ["onnx", "coreml"])
def test_fp16_cnn(tmp_path: Path, target: str) -> None:
    if target == "coreml":
        pytest.importorskip("coremltools", reason="needs coremltools")
    model, x = model_and_sample(torch.float16)
    suffix = ".onnx" if target == "onnx" else ".mlpackage"
    result = unframe.convert(model, to=target, sample_inputs=x, output=tmp_path / f"cnn{suffix}")
    assert result.export.model.graph.inputs[0].dtype.name == "FLOAT16"
    export = next(s for s in result.report.stages if s.stage == "export")
    assert export.status == "passed" and {o.ref_dtype for o in export.outputs} == {"float16"}
