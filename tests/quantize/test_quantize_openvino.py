"""--quantize on the OpenVINO routes with NNCF, on a CNN trained on scikit-learn's digits: each
scheme keeps the IR's test accuracy (run by OpenVINO's CPU plugin) within a point of the float
model and passes the accuracy guard; the IR holds what the scheme says (int8 FakeQuantize and
weights, u8 or i4 weights); excluded ONNX nodes stay float in the IR; the sensitivity pass keeps
the costly layers in float; a broken calibration fails the guard; the direct route quantizes too."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import unframe

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("sklearn", reason="needs scikit-learn (its digits dataset)")
pytest.importorskip("openvino", reason="needs openvino")
pytest.importorskip("nncf", reason="needs nncf (OpenVINO's quantizer)")

from quant_models import broken_calibration_error, one_loud_channel, row_sets  # noqa: E402

RESHAPING = ("Reshape", "Squeeze", "Unsqueeze", "Transpose")


def ir_accuracy(xml: Path, trained) -> float:
    """Test accuracy of the written IR on OpenVINO's CPU plugin (compiled as OpenVINO users do:
    no precision hint), fed in the batch the IR was built for."""
    import openvino as ov

    core = ov.Core()
    compiled = core.compile_model(core.read_model(str(xml)), "CPU")
    shape = compiled.inputs[0].get_partial_shape()
    batch = shape[0].get_length() if shape[0].is_static else len(trained.test)
    n = len(trained.test) // batch * batch
    scores = np.concatenate([compiled(trained.test[i:i + batch])[0] for i in range(0, n, batch)])
    return float((scores.argmax(1) == trained.test_labels[:n]).mean())


def constants(xml: Path) -> dict[str, int]:
    import openvino as ov

    held: dict[str, int] = {}
    for op in ov.Core().read_model(str(xml)).get_ordered_ops():
        if op.get_type_name() == "Constant":
            et = op.get_element_type().get_type_name()
            held[et] = held.get(et, 0) + op.get_byte_size()
    return held


def weight_types(xml: Path) -> dict[str, tuple[str, bool]]:
    """Each Convolution / MatMul of the IR: the element type of the constant its weight comes
    from (through NNCF's Convert/Subtract/Multiply/Reshape decompression) and whether its data
    input is a FakeQuantize's output (looked through ops that only move values)."""
    import openvino as ov

    out = {}
    for op in ov.Core().read_model(str(xml)).get_ordered_ops():
        if op.get_type_name() not in ("Convolution", "MatMul"):
            continue
        source = op.input_value(1).get_node()
        while source.get_type_name() != "Constant" and source.get_input_size():
            source = source.input_value(0).get_node()
        data = op.input_value(0).get_node()
        while data.get_type_name() in RESHAPING:
            data = data.input_value(0).get_node()
        out[op.get_friendly_name()] = (source.get_element_type().get_type_name(),
                                       data.get_type_name() == "FakeQuantize")
    return out


@pytest.mark.parametrize("scheme", ["int8", "w8", "w4"])
def test_each_scheme_keeps_accuracy_and_passes_the_guard(tmp_path, trained, calibration, scheme) -> None:
    out = tmp_path / f"digits_{scheme}.xml"
    result = unframe.convert(trained.model, to="openvino", sample_inputs=torch.tensor(trained.train[:8]),
                             quantize=scheme, calibration=calibration, output=out)
    check = result.report.stages[-1]
    assert check.stage == "accuracy" and check.status == "passed", check.summary()
    assert check.top1 is not None and check.top1 >= 0.98 and check.cases >= 1
    float_bytes, stored = check.size
    assert stored == out.with_suffix(".bin").stat().st_size
    assert stored <= (0.2 if scheme == "w4" else 0.3) * float_bytes, check.size
    accuracy = ir_accuracy(out, trained)
    assert accuracy >= trained.float_accuracy - 0.01, (scheme, accuracy, trained.float_accuracy)
    held = constants(out)
    weights = weight_types(out)
    if scheme == "int8":
        assert all(t == "i8" and fq for t, fq in weights.values()), weights
    elif scheme == "w8":
        assert all(t == "u8" and not fq for t, fq in weights.values()), weights
    else:  # the Linear layers in int4 groups; the convolutions' weights NNCF keeps in int8
        assert held.get("i4", 0) > 0.9 * sum(v for k, v in held.items() if k in ("i4", "u8")), held
        assert {t for t, _ in weights.values()} == {"i4", "u8"}, weights
    assert "f32" not in {t for t, _ in weights.values()}
    assert any("NNCF" in n and scheme in n for n in result.notes), result.notes
    # latency of the float IR against the quantized one, both compiled by OpenVINO here
    assert check.latency is not None and check.latency.runtime.startswith("OpenVINO"), check.latency_note
    assert check.latency.before_ms > 0 and check.latency.after_ms > 0
    assert "openvino quantizer" in check.layers_source and len(check.layers) == 4, check.layers


def test_excluded_nodes_stay_float_in_the_ir(tmp_path, trained, calibration) -> None:
    """The backend given a request that keeps the first Conv (an ONNX node name) in float: its
    weight stays an f32 constant and nothing quantizes its input; every other layer is int8.
    A node without a name is addressed as name_nodes calls it."""
    from unframe.converters.backends.openvino.backend import OpenVINOBackend
    from unframe.converters.base import Target
    from unframe.passes.quantize import SCHEMES, QuantRequest
    from unframe.passes.quantize.naming import name_nodes

    src = tmp_path / "digits.onnx"
    unframe.convert(trained.model, to="onnx", sample_inputs=torch.tensor(trained.train[:8]), output=src)
    import onnx_ir as ir

    model = ir.load(str(src))
    convs = [n for n in model.graph if n.op_type == "Conv"]
    convs[0].name = ""  # addressed by its place in the graph
    named = model.clone()
    name_nodes(named)
    first = [n for n in named.graph if n.op_type == "Conv"][0].name
    sets = [{"input": trained.train[i:i + 8]} for i in range(0, 160, 8)]
    backend = OpenVINOBackend()
    written = {}
    for exclude in ((), (first,)):
        request = QuantRequest(SCHEMES["int8"], sets, "20 sets", exclude=exclude)
        artifact = backend.convert(model, Target("openvino", None, {"quantize": request}), tmp_path / f"w{len(exclude)}")
        written[exclude] = weight_types(artifact.path)
    plain, kept = written[()], written[(first,)]
    order = list(kept)  # the IR's weighted ops in graph order: the first Conv first
    assert plain[order[0]] == ("i8", True)  # quantized without the request
    assert kept[order[0]] == ("f32", False), kept  # kept in float with it
    assert all(kept[name] == ("i8", True) for name in order[1:]), kept


def test_onnxruntimes_int8_graph_read_by_openvino_runs_in_int8(tmp_path, trained) -> None:
    """OpenVINO's second quantizer (tried when NNCF's IR fails the guard): onnxruntime's Q/DQ
    graph of the float model, read by OpenVINO's ONNX frontend: every Conv and MatMul of the IR
    reads int8 weights and a FakeQuantize'd input, the .bin is at most 0.3x the float weights, the
    CPU plugin keeps test accuracy within a point; a node kept in float stays float."""
    import onnx_ir as ir

    from unframe.converters.backends.openvino.backend import OpenVINOBackend
    from unframe.converters.base import Target
    from unframe.passes.quantize import SCHEMES, QuantRequest

    src = tmp_path / "digits.onnx"
    unframe.convert(trained.model, to="onnx", sample_inputs=torch.tensor(trained.train[:8]), output=src)
    model = ir.load(str(src))
    sets = row_sets(trained)
    backend = OpenVINOBackend()
    request = QuantRequest(SCHEMES["int8"], sets, "40 sets", quantizer="onnxruntime")
    artifact = backend.convert(model, Target("openvino", None, {"quantize": request}), tmp_path / "qdq")
    types = weight_types(artifact.path)
    assert types and all(t == "i8" and fq for t, fq in types.values()), types
    float_size, stored = artifact.metadata["quantized_size"]
    assert stored == artifact.path.with_suffix(".bin").stat().st_size and stored <= 0.3 * float_size
    assert ir_accuracy(artifact.path, trained) >= trained.float_accuracy - 0.01
    assert any("by onnxruntime" in n for n in artifact.notes) and not any("NNCF" in n for n in artifact.notes)
    first = next(n.name for n in model.graph if n.op_type == "Conv")
    kept = QuantRequest(SCHEMES["int8"], sets, "40 sets", exclude=(first,), quantizer="onnxruntime")
    artifact = backend.convert(model, Target("openvino", None, {"quantize": kept}), tmp_path / "kept")
    types = weight_types(artifact.path)
    assert list(types.values())[0] == ("f32", False) and list(types.values())[1] == ("i8", True), types


def test_sensitivity_pass_keeps_the_costly_layers_in_float(tmp_path) -> None:
    """One channel 500x larger (the next conv reads it scaled back: the same function): NNCF's
    per-tensor activation ranges can't hold it; the guard fails, the sensitivity pass keeps the
    layers it ranks costliest in float, and the IR passes."""
    model = one_loud_channel()
    sets = row_sets(model)
    out = tmp_path / "kept.xml"
    result = unframe.convert(model.model, to="openvino", sample_inputs=torch.tensor(model.train[:8]),
                             quantize="int8", calibration=sets, output=out)
    check = result.report.stages[-1]
    assert check.status == "passed" and check.kept_float and check.rounds > 1, check.summary()
    floats = [name for name, (t, _) in weight_types(out).items() if t == "f32"]
    assert floats and any(name.startswith(kept) for kept in check.kept_float for name in floats), floats
    assert ir_accuracy(out, model) >= model.float_accuracy - 0.01


def test_broken_calibration_fails_the_guard(tmp_path, trained) -> None:
    """Calibrated on inputs a thousand times too large: the real held-out inputs fall into a
    handful of levels; the guard fails, exit 5, nothing written."""
    out = tmp_path / "broken.xml"
    broken_calibration_error(trained, "openvino", out)
    assert not out.exists() and not out.with_suffix(".bin").exists()


def test_direct_route_quantizes(tmp_path, trained, calibration, capfd) -> None:
    """--via direct (torch.export, OpenVINO's PyTorch frontend): the same NNCF call on the
    converted model, the guard against torch itself; NNCF's progress bars and logs stay off
    the terminal."""
    out = tmp_path / "direct.xml"
    result = unframe.convert(trained.model, to="openvino", via="direct", quantize="int8",
                             sample_inputs=torch.tensor(trained.train[:8]), calibration=calibration, output=out)
    check = result.report.stages[-1]
    assert check.stage == "accuracy" and check.status == "passed", check.summary()
    assert all(t == "i8" for t, _ in weight_types(out).values())
    assert ir_accuracy(out, trained) >= trained.float_accuracy - 0.01
    printed = capfd.readouterr()
    assert "Statistics collection" not in printed.out + printed.err


def test_a_trained_detector_keeps_its_detections(tmp_path, detector) -> None:
    """NNCF's int8 of the tiny digits detector: judged as detections (matched by label and IoU),
    it finds the digits the float model finds, in OpenVINO's runtime."""
    import openvino as ov
    from quant_models import detector_int8, detector_recall

    d, float_recall = detector
    out = tmp_path / "detector_int8.xml"
    check = detector_int8(d, "openvino", out).report.stages[-1]
    assert check.status == "passed" and len(check.detections) == 1, check.summary()
    assert check.detections[0].agreement >= 0.9 and not check.detections[0].tied
    assert any(fq for _, fq in weight_types(out).values())  # activations quantized (FakeQuantize)
    compiled = ov.Core().compile_model(str(out), "CPU")
    recall = detector_recall(lambda c: [v for v in compiled(c).values()], d)
    assert recall >= float_recall - 0.05, (recall, float_recall)
    # the post-processing after its TopK (gathering the best cells, decoding their boxes) stays float
    model = ov.Core().read_model(str(out))
    seen, frontier = set(), [c.get_node() for op in model.get_ordered_ops() if op.get_type_name() == "TopK"
                              for o in op.outputs() for c in o.get_target_inputs()]
    while frontier:
        op = frontier.pop()
        if op.get_friendly_name() not in seen:
            seen.add(op.get_friendly_name())
            frontier += [c.get_node() for o in op.outputs() for c in o.get_target_inputs()]
    after = {op.get_type_name() for op in model.get_ordered_ops() if op.get_friendly_name() in seen}
    assert "Multiply" in after and "FakeQuantize" not in after, sorted(after)


def test_attention_is_quantized_by_nncfs_transformer_rules(tmp_path, trained) -> None:
    """A model with attention (a Softmax whose weights a MatMul applies, past torch's masking
    ops) is handed to NNCF as a transformer; a classifier whose Softmax is its answer is not."""
    import openvino as ov

    from unframe.converters.backends.openvino.quantize import is_transformer

    class Attention(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.qkv = torch.nn.Linear(16, 48)
            self.norm = torch.nn.LayerNorm(16)

        def forward(self, x):
            q, k, v = self.qkv(self.norm(x)).chunk(3, -1)
            return torch.nn.functional.scaled_dot_product_attention(q, k, v) + x  # OpenVINO fuses it

    class Written(Attention):  # attention spelled out: OpenVINO keeps its Softmax and MatMuls
        def forward(self, x):
            q, k, v = self.qkv(self.norm(x)).chunk(3, -1)
            return torch.softmax(q @ k.transpose(1, 2) / 4.0, -1) @ v + x

    classifier = torch.nn.Sequential(trained.model, torch.nn.Softmax(-1))
    seen = {}
    for name, model, sample in (("attention", Attention().eval(), torch.randn(2, 5, 16)),
                                ("written", Written().eval(), torch.randn(2, 5, 16)),
                                ("classifier", classifier, torch.tensor(trained.train[:8]))):
        out = tmp_path / f"{name}.xml"
        unframe.convert(model, to="openvino", sample_inputs=sample, output=out, validate=False, precision="fp32")
        seen[name] = is_transformer(ov.Core().read_model(str(out)))
    assert seen == {"attention": True, "written": True, "classifier": False}
