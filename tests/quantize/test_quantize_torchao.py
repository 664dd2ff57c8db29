"""Models quantized with torchao's ``quantize_`` (tensor subclasses, not PT2E's graph rewrite)
through the export, checked against the model's own quantized forward (issue 38).

- weight-only int8 (``Int8WeightOnlyConfig``: ``Int8Tensor`` weights): the live-model guard reads
  and restores the plain tensors inside the subclass (int8 data, scales);
- dynamic int8 activations and weights (``Int8DynamicActivationInt8WeightConfig``): its
  ``aten._int_mm`` becomes ONNX's ``MatMulInteger`` (``_torch/translations.py``, through
  torch.onnx's own ``custom_translation_table``).

Controls (the code before this change): the first ended in an untyped ``NotImplementedError``
(the guard compared the subclass's bits with ``view(dtype)``), the second in exit 9 ("No ONNX
function found for aten._int_mm")."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import onnxruntime as ort
import pytest

import unframe

torch = pytest.importorskip("torch", reason="needs torch")
quantization = pytest.importorskip("torchao.quantization", reason="needs torchao (unframe[executorch])")


def _quantized(config: str) -> tuple[object, object]:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 128), torch.nn.ReLU(), torch.nn.Linear(128, 10)).eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)  # outputs of order 1
    quantization.quantize_(model, getattr(quantization, config)())
    return model, torch.randn(4, 64, generator=torch.Generator().manual_seed(1))


def _inner(model) -> list[bytes]:
    return [t.numpy().tobytes() for layer in (model[0], model[2])
            for t in (getattr(layer.weight, name) for name in layer.weight.__tensor_flatten__()[0])]


@pytest.mark.parametrize("config", ["Int8WeightOnlyConfig", "Int8DynamicActivationInt8WeightConfig"])
def test_a_torchao_quantized_model_exports_against_its_own_quantized_forward(tmp_path, config) -> None:
    model, x = _quantized(config)
    kind = type(model[0].weight).__name__
    before = _inner(model)
    result = unframe.convert(model, to="onnx", sample_inputs=x, output=tmp_path / "m.onnx")
    export = result.report.stages[0]
    assert export.status == "passed" and export.reference.startswith("torch"), export.summary()
    assert type(model[0].weight).__name__ == kind and _inner(model) == before  # the model as it was
    other = torch.randn(16, 64, generator=torch.Generator().manual_seed(2))
    session = ort.InferenceSession(str(tmp_path / "m.onnx"), providers=["CPUExecutionProvider"])
    got = session.run(None, {session.get_inputs()[0].name: other.numpy()})[0]
    with torch.no_grad():
        want = model(other).numpy()
    assert float(np.abs(want).max()) > 0.3
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    if config.startswith("Int8Dynamic"):
        assert "MatMulInteger" in {n.op_type for n in ir.load(tmp_path / "m.onnx").graph}


def test_a_torchao_quantized_model_to_openvino(tmp_path) -> None:
    pytest.importorskip("openvino", reason="needs the openvino extra")
    model, x = _quantized("Int8DynamicActivationInt8WeightConfig")
    result = unframe.convert(model, to="openvino", sample_inputs=x, output=tmp_path / "m.xml")
    assert result.report, str(result.report)
    assert (tmp_path / "m.xml").exists()
