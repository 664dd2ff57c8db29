"""--quantize int8 on TensorRT: an explicitly quantized network, built from the ONNX graph with
symmetric int8 Q/DQ (onnxruntime's calibration; weights per channel, zero points 0), on a CNN
trained on scikit-learn's digits. The Q/DQ graph is what pre-flight checks and TensorRT-RTX's
parser takes (they agree); the engine builds on the CPU with int8 layers; onnxruntime's run of
that Q/DQ graph keeps the test accuracy within a point of the float model's. Without a GPU the
engine can't run: the accuracy stage says so (or, where the pipeline runs the Q/DQ graph in its
place, passes as a prediction)."""

from __future__ import annotations

import json

import numpy as np
import onnx_ir as ir
import pytest

import unframe
from unframe.converters.base import Target

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("sklearn", reason="needs scikit-learn (its digits dataset)")

from quant_models import Trained  # noqa: E402

FAST = {"builder_optimization_level": 0}


@pytest.fixture(scope="module")
def float_graph(tmp_path_factory, trained) -> ir.Model:
    path = tmp_path_factory.mktemp("onnx") / "digits.onnx"
    # at TensorRT's canonical opset, as the pipeline hands it to the backend
    unframe.convert(trained.model, to="onnx", opset=21, sample_inputs=torch.tensor(trained.train[:8]), output=path)
    return ir.load(path)


def request_for(trained: Trained):
    from unframe.passes.quantize import SCHEMES, QuantRequest

    sets = [{"input": trained.train[i:i + 8]} for i in range(0, 256, 8)]
    return QuantRequest(SCHEMES["int8"], sets, f"{len(sets)} sets")


def test_qdq_graph_is_symmetric_per_channel_and_keeps_accuracy(trained, float_graph) -> None:
    import onnxruntime as ort

    from unframe.converters.backends.tensorrt.quantize import quantized_graph

    qdq, notes = quantized_graph(float_graph, request_for(trained))
    dq = [n for n in qdq.graph if n.op_type == "DequantizeLinear"]
    q = [n for n in qdq.graph if n.op_type == "QuantizeLinear"]
    assert q and dq
    for node in q + dq:  # TensorRT: int8, zero points 0
        zero = node.inputs[2].const_value.numpy() if len(node.inputs) > 2 and node.inputs[2] is not None else 0
        assert not np.any(zero), node.name
    weights = [n for n in dq if n.inputs[0].const_value is not None]
    assert len(weights) == 4  # two convs, two gemms: their weights, no int32 bias left
    assert all(n.inputs[0].const_value.dtype == ir.DataType.INT8 for n in weights)
    assert all(n.inputs[1].const_value.numpy().size > 1 for n in weights)  # per output channel
    assert any("folded" in n for n in notes)
    session = ort.InferenceSession(ir.to_proto(qdq).SerializeToString(), providers=["CPUExecutionProvider"])
    scores = session.run(None, {"input": trained.test})[0]
    accuracy = float((scores.argmax(1) == trained.test_labels).mean())
    # symmetric int8 activations (zero points 0, as TensorRT requires) cost more than the ONNX
    # route's uint8 ones: this raw graph, before the accuracy guard's sensitivity pass, has been
    # seen within 0.5 point of the float model on one machine's training and 1.8 on another's
    # (the trained weights differ with the CPU's kernels); what it must keep is the float model's
    # answers on nearly every test image
    with torch.no_grad():
        float_scores = trained.model(torch.tensor(trained.test)).numpy()
    agreement = float((scores.argmax(1) == float_scores.argmax(1)).mean())
    assert agreement >= 0.95, agreement
    assert accuracy >= trained.float_accuracy - 0.025, (accuracy, trained.float_accuracy)
    assert not any(n.op_type == "QuantizeLinear" for n in float_graph.graph)  # left as it was


def test_preparation_keeps_the_int8_weights(trained, float_graph) -> None:
    """TensorRT's preparation folds constant subgraphs; a DequantizeLinear of an int8 weight is
    what TensorRT builds its int8 kernel from: it stays (folded, the layer would run in float)."""
    from unframe.converters.backends.tensorrt.prepare import prepare
    from unframe.converters.backends.tensorrt.quantize import quantized_graph

    prepared = prepare(quantized_graph(float_graph, request_for(trained))[0].clone())
    weights = [n for n in prepared.graph if n.op_type == "DequantizeLinear" and n.inputs[0].const_value is not None]
    assert len(weights) == 4 and all(n.inputs[0].const_value.dtype == ir.DataType.INT8 for n in weights)
    consumers = {u.node.op_type for n in weights for u in n.outputs[0].uses()}
    assert consumers == {"Conv", "Gemm"}


def test_preflight_and_parser_take_the_qdq_graph(trained, float_graph) -> None:
    from unframe.converters.backends.tensorrt import trtmodule
    from unframe.converters.backends.tensorrt.backend import TensorRTBackend, check_report
    from unframe.converters.backends.tensorrt.quantize import quantized_graph

    request = request_for(trained)
    backend = TensorRTBackend()
    blockers, notes = backend.check_with_notes(float_graph, Target("tensorrt", options={"quantize": request}))
    assert blockers == [], blockers
    if trtmodule.load_or_none() is not None:
        assert any("agree" in n and "disagree" not in n for n in notes), notes
        report = check_report(quantized_graph(float_graph, request)[0])
        assert report.parser and not report.disagreements and not report.blockers


def test_int8_engine_builds_on_cpu(tmp_path, trained) -> None:
    from unframe.converters.backends.tensorrt import trtmodule

    if trtmodule.load_or_none() is None:
        pytest.skip("needs tensorrt-rtx (or tensorrt) to build the engine")
    calibration = tmp_path / "calib.npz"
    np.savez(calibration, input=trained.train[:320])
    out = tmp_path / "digits_int8.engine"
    result = unframe.convert(trained.model, to="tensorrt", sample_inputs=torch.tensor(trained.train[:8]),
                             quantize="int8", calibration=calibration, output=out, **FAST)
    side = json.loads(out.with_name(out.name + ".json").read_text())
    assert side["quantize"] == "int8" and "qdq_model" not in side
    # int8 tensors in the network: each activation's QuantizeLinear and the 4 int8 weights
    assert side["network"]["layer_output_types"].get("INT8", 0) >= 9 + 4, side["network"]
    float_bytes, quantized_bytes = side["quantized_size"]
    assert quantized_bytes <= 0.3 * float_bytes
    check = result.report.stages[-1]
    assert check.stage == "accuracy" and check.status == "passed", check.summary()
    assert check.top1 is not None and check.top1 >= 0.98
    if isinstance(trtmodule.cuda_device(), str):  # no GPU: onnxruntime on the Q/DQ graph stood in
        assert check.predicted and "PREDICTED" in check.summary()
        assert any("prediction" in n for n in result.notes)
        assert check.latency is None and "can't run here" in check.latency_note
    assert check.layers_source == "the quantized graph" and len(check.layers) == 4, check.layers


def test_int8_engine_guard_fails_on_a_broken_calibration(tmp_path, trained) -> None:
    """The prediction can fail: calibrated on inputs 1000x too large, the Q/DQ graph (what the
    engine computes) loses the model, exit 5 and no engine written."""
    from unframe.converters.backends.tensorrt import trtmodule
    from unframe.errors import ParityError

    if trtmodule.load_or_none() is None:
        pytest.skip("needs tensorrt-rtx (or tensorrt) to build the engine")
    sets = [{"input": trained.train[i:i + 8] * 1000.0} for i in range(0, 240, 8)]
    held = [{"input": trained.test[i:i + 8]} for i in range(0, 64, 8)]
    out = tmp_path / "broken.engine"
    with pytest.raises(ParityError):
        unframe.convert(trained.model, to="tensorrt", sample_inputs=torch.tensor(trained.train[:8]),
                        quantize="int8", calibration=sets + held, output=out, **FAST)
    assert not out.exists()
