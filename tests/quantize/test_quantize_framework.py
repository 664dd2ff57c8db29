"""Models quantized in their framework (issue 38): a CNN trained on scikit-learn's digits,
quantized by PT2E with XNNPACK's quantizer (calibrated on training images), carried through the
export as ONNX QuantizeLinear/DequantizeLinear and onto the targets, each checked against the
framework's own quantized forward (the source runner), not against the float model."""

from __future__ import annotations

import numpy as np
import onnx
import pytest

import unframe
from unframe.api import PartialFailure

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("sklearn", reason="needs scikit-learn (its digits dataset)")
pytest.importorskip("executorch", reason="XNNPACK's PT2E quantizer ships with executorch (unframe[executorch])")

from quant_models import digits_cnn  # noqa: E402


def pt2e_quantized() -> tuple[object, object, object]:
    from executorch.backends.xnnpack.quantizer.xnnpack_quantizer import (
        XNNPACKQuantizer,
        get_symmetric_quantization_config,
    )
    from torchao.quantization.pt2e.quantize_pt2e import convert_pt2e, prepare_pt2e

    trained = digits_cnn()
    x = torch.tensor(trained.train[:8])
    quantizer = XNNPACKQuantizer().set_global(get_symmetric_quantization_config(is_per_channel=True))
    prepared = prepare_pt2e(torch.export.export(trained.model, (x,)).module(), quantizer)
    for i in range(0, 320, 8):
        prepared(torch.tensor(trained.train[i:i + 8]))
    return convert_pt2e(prepared), x, trained


def test_pt2e_model_through_every_route_it_reaches(tmp_path) -> None:
    model, x, trained = pt2e_quantized()
    try:
        result = unframe.convert(model, to="all", sample_inputs=x, output=tmp_path / "out")
        results, errors = result.results, {}
    except PartialFailure as failure:
        results, errors = failure.result.results, failure.result.errors
    assert all(e.exit_code == 4 for e in errors.values()), {k: str(e) for k, e in errors.items()}
    assert "onnx" in results
    for name in ("openvino", "executorch", "coreml"):
        if name in results:  # installed here: reached and checked
            stage = results[name].report.stages[-1]
            assert stage.status == "passed" and stage.top1 == 1.0, (name, stage.summary())
    onnx_result = results["onnx"]
    assert onnx_result.report.stages[0].reference.startswith("torch")  # the quantized forward itself
    written = tmp_path / "out" / "model.onnx"
    ops = {n.op_type for n in onnx.load(written).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    # the ONNX file keeps the quantized model's accuracy (its batch is the samples' 8)
    n = len(trained.test) // 8 * 8
    import onnxruntime as ort

    session = ort.InferenceSession(str(written))
    name = session.get_inputs()[0].name
    predicted = np.concatenate([session.run(None, {name: trained.test[i:i + 8]})[0].argmax(1) for i in range(0, n, 8)])
    assert float((predicted == trained.test_labels[:n]).mean()) >= trained.float_accuracy - 0.01

