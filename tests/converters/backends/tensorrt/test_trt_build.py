"""Parse-and-build tier: real TensorRT parser and builder (tensorrt-rtx builds on the CPU).
Without a GPU an engine can't be loaded, so the checks are on what the parser made of the graph
(the network's I/O, dynamic dims, layer types) as recorded in the sidecar, plus the errors."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper
from trt_models import cnn_model, const, make_model, torch_model, trt_or_skip, vi

from unframe.converters.backends.tensorrt import preflight, sidecar, trtmodule
from unframe.converters.backends.tensorrt.backend import TensorRTBackend
from unframe.converters.base import RunnerUnavailable, Target
from unframe.converters.registry import BACKENDS
from unframe.errors import ConversionError, InputError, UnsupportedError, UsageError

FAST = {"builder_optimization_level": 0}


@pytest.fixture(scope="module")
def backend() -> TensorRTBackend:
    trt_or_skip()
    return BACKENDS.get("tensorrt")


def target(**options) -> Target:
    return Target("tensorrt", options={**FAST, **options})


def convert_and_write(backend, model, tgt, tmp_path: Path) -> tuple[Path, dict]:
    assert backend.check(model, tgt) == []
    artifact = backend.convert(model, tgt, tmp_path / "work")
    backend.stamp(artifact, {"source_sha256": "abc123", "route": "onnx -> tensorrt"})
    engine, side = backend.write(artifact, tmp_path / "model.engine")
    assert side == tmp_path / "model.engine.json"
    return engine, json.loads(side.read_text())


def io_of(meta: dict, kind: str) -> list[tuple[str, str, list[int]]]:
    return [(t["name"], t["dtype"], t["shape"]) for t in meta["network"][kind]]


def test_cnn_dynamic_batch_from_sample_shapes(backend, tmp_path):
    trt = trtmodule.load_or_none()
    engine, meta = convert_and_write(backend, cnn_model(), target(sample_shapes={"x": (2, 3, 16, 16)}),
                                     tmp_path)
    assert engine.stat().st_size > 10_000
    assert meta["flavour"] == trt.__name__ and meta["tensorrt_version"] == trt.__version__
    assert meta["precision"] == "fp32" and meta["strongly_typed"] is True
    assert meta["provenance"] == {"source_sha256": "abc123", "route": "onnx -> tensorrt"}
    assert meta["profiles"] == [{"x": {"min": [1, 3, 16, 16], "opt": [2, 3, 16, 16],
                                       "max": [8, 3, 16, 16]}}]
    assert io_of(meta, "inputs") == [("x", "FLOAT", [-1, 3, 16, 16])]
    assert io_of(meta, "outputs") == [("y", "FLOAT", [-1, 5])]
    device = trtmodule.cuda_device()
    assert meta["gpu"] == (sidecar.AOT_ON_CPU if isinstance(device, str) else device.name)


def test_dynamic_batch_with_explicit_profile(backend, tmp_path):
    shapes = [("x", (1, 3, 16, 16), (4, 3, 16, 16), (16, 3, 16, 16))]
    _, meta = convert_and_write(backend, cnn_model(), target(shapes=shapes), tmp_path)
    assert meta["profiles"] == [{"x": {"min": [1, 3, 16, 16], "opt": [4, 3, 16, 16],
                                       "max": [16, 3, 16, 16]}}]


def test_missing_range_for_dynamic_batch_is_a_usage_error(backend, tmp_path):
    with pytest.raises(UsageError, match="input 'x' has dynamic dims"):
        backend.convert(cnn_model(), target(), tmp_path)


def test_lstm(backend, tmp_path):
    torch = pytest.importorskip("torch", reason="needs torch to export the LSTM")
    torch.manual_seed(0)
    model = torch_model(torch.nn.LSTM(4, 8), (torch.randn(5, 2, 4),), ["x"], ["y", "h", "c"])
    assert any(n.op_type == "LSTM" for n in model.graph)
    _, meta = convert_and_write(backend, model, target(), tmp_path)
    assert io_of(meta, "inputs") == [("x", "FLOAT", [5, 2, 4])]
    assert [(n, s) for n, _, s in io_of(meta, "outputs")] == \
        [("y", [5, 2, 8]), ("h", [1, 2, 8]), ("c", [1, 2, 8])]


def encoder_model():
    torch = pytest.importorskip("torch", reason="needs torch to export the encoder")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(16, 2, 32, dropout=0.0, batch_first=True)
    encoder = torch.nn.TransformerEncoder(layer, 1, enable_nested_tensor=False)
    return torch_model(encoder, (torch.randn(2, 5, 16),), ["x"], ["y"],
                       dynamic_axes={"x": {0: "batch"}, "y": {0: "batch"}})


def test_transformer_encoder_fp32_and_fp16(backend, tmp_path):
    model = encoder_model()
    _, fp32 = convert_and_write(backend, model, target(sample_shapes={"x": (2, 5, 16)}),
                                tmp_path / "fp32")
    _, fp16 = convert_and_write(backend, model, target(precision="fp16",
                                                       sample_shapes={"x": (2, 5, 16)}),
                                tmp_path / "fp16")
    # The fp16 graph keeps the model's float32 inputs and outputs...
    assert io_of(fp16, "inputs") == io_of(fp32, "inputs") == [("x", "FLOAT", [-1, 5, 16])]
    assert io_of(fp16, "outputs") == io_of(fp32, "outputs")
    # ...but the network computes in half precision, which the fp32 build does not.
    assert fp16["network"]["layer_output_types"].get("HALF", 0) > 10
    assert "HALF" not in fp32["network"]["layer_output_types"]
    # Sensitive ops stay in float: the fp16 network still has float layers inside.
    assert fp16["network"]["layer_output_types"].get("FLOAT", 0) > 2
    assert fp16["precision"] == "fp16"


def test_fp16_cnn_network_types(backend, tmp_path):
    _, meta = convert_and_write(backend, cnn_model(batch=2), target(precision="fp16"), tmp_path)
    assert io_of(meta, "inputs") == [("x", "FLOAT", [2, 3, 16, 16])]
    assert meta["network"]["layer_output_types"].get("HALF", 0) >= 5


def test_parse_error_names_node_op_and_parser_message(backend, tmp_path):
    model = make_model([helper.make_node("Relu", ["x"], ["r"], name="relu"),
                        helper.make_node("Unique", ["r"], ["y"], name="the_unique")],
                       [vi("x", [4])], [vi("y", None)])
    with pytest.raises(UnsupportedError, match="TensorRT's ONNX parser refused") as info:
        backend.convert(model, target(), tmp_path)  # convert without check: the parser decides
    assert [(b.node, b.op) for b in info.value.blockers] == [("the_unique", "Unique")]
    assert info.value.blockers[0].reason.startswith("parser: ")


def test_build_returning_nothing_says_why(backend, tmp_path):
    with pytest.raises(ConversionError, match=r"no engine \(likely cause: workspace\)") as info:
        backend.convert(cnn_model(batch=1), target(workspace=1), tmp_path)
    assert "--workspace" in info.value.hint
    assert info.value.details["builder_errors"]


def test_timing_cache_is_written_then_loaded(backend, tmp_path):
    cache = tmp_path / "cache" / "timing.bin"
    first = backend.convert(cnn_model(batch=1), target(timing_cache=str(cache)), tmp_path / "a")
    assert cache.is_file() and cache.stat().st_size > 0
    assert any("timing cache written" in n for n in first.notes)
    second = backend.convert(cnn_model(batch=1), target(timing_cache=str(cache)), tmp_path / "b")
    assert any("timing cache updated" in n for n in second.notes)


def test_compatibility_flags(backend, tmp_path):
    trt = trtmodule.load_or_none()
    _, meta = convert_and_write(backend, cnn_model(batch=1),
                                target(hardware_compatibility="ampere+"), tmp_path)
    assert meta["flags"]["hardware_compatibility"] == "ampere_plus"
    with pytest.raises(UsageError, match="unknown --hardware-compatibility"):
        backend.convert(cnn_model(batch=1), target(hardware_compatibility="volta"), tmp_path)
    if trt.__name__ == "tensorrt_rtx":
        with pytest.raises(UsageError, match="no version-compatible engines"):
            backend.convert(cnn_model(batch=1), target(version_compatible=True), tmp_path)
    else:
        _, meta = convert_and_write(backend, cnn_model(batch=1), target(version_compatible=True),
                                    tmp_path / "vc")
        assert meta["flags"]["version_compatible"] is True


def test_engine_as_input_is_rejected_and_compat_read_from_sidecar(backend, tmp_path):
    engine, meta = convert_and_write(backend, cnn_model(batch=1), target(), tmp_path)
    with pytest.raises(InputError, match="is a TensorRT engine"):
        sidecar.reject_engine_input(engine)
    onnx_file = tmp_path / "model.onnx"
    onnx_file.write_bytes(ir.to_proto(cnn_model(batch=1)).SerializeToString())
    sidecar.reject_engine_input(onnx_file)  # an ONNX is fine
    renamed = tmp_path / "mystery.bin"  # no suffix or sidecar: found by its magic bytes
    renamed.write_bytes(engine.read_bytes())
    with pytest.raises(InputError, match="is a TensorRT engine"):
        sidecar.reject_engine_input(renamed)
    problems = sidecar.check_engine_compat(engine)
    device = trtmodule.cuda_device()
    assert any(p.startswith("no CUDA device") for p in problems) == isinstance(device, str)
    assert not any("built with" in p for p in problems)
    meta["tensorrt_version"] = "0.0.1"
    (tmp_path / "model.engine.json").write_text(json.dumps(meta))
    assert any("built with" in p and "0.0.1" in p for p in sidecar.check_engine_compat(engine))
    (tmp_path / "model.engine.json").unlink()
    assert "no readable sidecar" in sidecar.check_engine_compat(engine)[0]


def test_runner_without_gpu_says_why(backend, tmp_path):
    device = trtmodule.cuda_device()
    if not isinstance(device, str):
        pytest.skip(f"this machine has a CUDA device ({device.name}): see test_trt_gpu.py")
    artifact = backend.convert(cnn_model(batch=1), target(), tmp_path)
    with pytest.raises(RunnerUnavailable, match="^no CUDA device: "):
        backend.runner(artifact, target())


def test_check_adds_precision_blocker(backend):
    blockers = backend.check(cnn_model(batch=1), target(precision="int8"))
    assert [b.reason for b in blockers] == ["precision 'int8' is not one of fp32, fp16, bf16"]


def test_resize_with_computed_scales_builds(backend, tmp_path):
    nodes = [helper.make_node("Mul", ["base", "factor"], ["scales"]),
             helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest")]
    model = make_model(nodes, [vi("x", [1, 1, 2, 2])], [vi("y", [1, 1, 4, 4])],
                       [const("base", np.ones(4, np.float32)),
                        const("factor", np.array([1, 1, 2, 2], np.float32))])
    _, meta = convert_and_write(backend, model, target(), tmp_path)
    assert io_of(meta, "outputs") == [("y", "FLOAT", [1, 1, 4, 4])]


def test_folding_makes_computed_reduce_axes_parseable(backend, tmp_path):
    """ReduceMean over axes = Range(1, rank(x)): the raw parser refuses the computed axes; after
    the preparation passes fold them into an initializer, the model builds."""
    from unframe.converters.backends.tensorrt import preflight

    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Size", ["s"], ["rank"]),
             helper.make_node("Range", ["one", "rank", "one"], ["axes"]),
             helper.make_node("ReduceMean", ["x", "axes"], ["y"], keepdims=0, name="mean")]
    model = make_model(nodes, [vi("x", [2, 3, 4])], [vi("y", [2])],
                       [const("one", np.array(1, np.int64))])
    raw = preflight.parser_verdict(model)
    assert not raw.supported and "build-time constant" in next(iter(raw.failed_nodes.values()))
    # check asks the parser about the prepared graph, as convert will parse it: no blocker.
    _, meta = convert_and_write(backend, model, target(), tmp_path)
    assert io_of(meta, "outputs") == [("y", "FLOAT", [2])]


def test_fp16_build_keeps_what_overflows_in_fp32_and_reports_it(backend, tmp_path):
    """Range analysis on calibration feeds inside the TensorRT conversion: the tensors past fp16's
    range are named in the notes and their layers build in float."""
    from test_trt_precision import _overflowing_model

    model = _overflowing_model()
    model.graph.inputs[0].shape = ir.Shape([2, 8])  # static: no profile needed
    artifact = backend.convert(model, target(precision="fp16"), tmp_path / "work")
    kept = next(n for n in artifact.notes if n.startswith("kept in fp32"))
    assert "big (max |x| 2e+05)" in kept and "h (max |x|" in kept, artifact.notes
    types = artifact.metadata["network"]["layer_output_types"]
    assert types.get("FLOAT", 0) >= 2 and types.get("HALF", 0) >= 1, types


def test_position_ids_from_an_integer_cumsum_build(backend, tmp_path):
    """RoBERTa's position ids (CumSum of an int64 mask): refused by the table as written, built
    once the preparation sums the count in float32."""
    from test_trt_prepare import position_ids_model

    model = position_ids_model(length=6)
    model.graph.inputs[0].shape = ir.Shape([2, 6])
    model.graph.outputs[0].shape = ir.Shape([2, 6])
    assert [b.op for b in preflight.check(model)] == ["CumSum"]
    _, meta = convert_and_write(backend, model, target(), tmp_path)
    assert io_of(meta, "outputs") == [("pos", "INT64", [2, 6])]
    assert meta["network"]["layer_output_types"].get("FLOAT", 0) >= 1  # the float CumSum


def test_keeping_scores_over_a_threshold_builds(backend, tmp_path):
    """``scores[scores > t]`` and NonZero over one axis (torchvision's detectors keep boxes so): the
    parser of the installed TensorRT takes the prepared graph and the builder makes an engine whose
    outputs have a data-dependent length. With tensorrt-rtx, whose parser has no NonZero, that is
    the compaction of the preparation (its indices are checked against NonZero's by onnxruntime in
    test_trt_prepare)."""
    from test_trt_prepare import keep_over_threshold_model

    model = keep_over_threshold_model()
    _, meta = convert_and_write(backend, model, target(sample_shapes={"s": (64,)}), tmp_path)
    assert io_of(meta, "inputs") == [("s", "FLOAT", [-1])]
    assert [(n, t, len(s)) for n, t, s in io_of(meta, "outputs")] == [
        ("kept", "FLOAT", 1), ("i", "INT64", 2), ("j", "INT64", 2), ("l", "INT64", 2)]
    assert all(shape[-1] == -1 for _, _, shape in io_of(meta, "outputs"))


def test_tensorrt_rtx_builder_has_no_non_max_suppression(tmp_path):
    """The fact behind preflight.NO_RUNNER_OPS and nms.py: tensorrt-rtx parses a one-node
    NonMaxSuppression graph, then its builder finds no implementation. Fails once a tensorrt-rtx
    release builds it (then take it off the list and stop rewriting it). The graph as written is
    refused (exit 4) with the builder's reason; prepared, it has no NonMaxSuppression left."""
    from unframe.converters.backends.tensorrt import build
    trt = trt_or_skip()
    if trt.__name__ != "tensorrt_rtx":
        pytest.skip("a fact about tensorrt-rtx; NVIDIA's TensorRT builds NonMaxSuppression")
    model = make_model([helper.make_node("NonMaxSuppression", ["b", "s", "m", "iou"], ["sel"])],
                       [vi("b", [1, 10, 4]), vi("s", [1, 1, 10])], [vi("sel", ["K", 3], TensorProto.INT64)],
                       [const("m", np.array([5], np.int64)), const("iou", np.array([0.5], np.float32))])
    logger = trtmodule.CollectingLogger(trt)
    builder = trt.Builder(logger)
    network = builder.create_network(trtmodule.strongly_typed_flags(trt))
    parser = trt.OnnxParser(network, logger)
    assert parser.parse(ir.to_proto(model).SerializeToString())
    assert builder.build_serialized_network(network, builder.create_builder_config()) is None
    assert any("no runners" in message for _, message in logger.messages)
    from unframe.converters.backends.tensorrt.backend import check_report

    dynamic = make_model([helper.make_node("NonMaxSuppression", ["b", "s", "m", "iou"], ["sel"])],
                         [vi("b", [1, "N", 4]), vi("s", [1, 1, "N"])], [vi("sel", ["K", 3], TensorProto.INT64)],
                         [const("m", np.array([5], np.int64)), const("iou", np.array([0.5], np.float32))])
    report = check_report(dynamic)  # the prepared graph: the greedy rewrite, which it takes
    assert report.blockers == [] and report.disagreements == []
    # With static shapes straight from the network inputs, the parser wants those inputs as
    # host shape tensors (the selection's length is computed from them): a parser refusal
    static = check_report(model)
    assert static.blockers and all("shape tensor" in b.reason for b in static.blockers), static.blockers
    assert all("symbolic dim" in b.hint for b in static.blockers)
    path = tmp_path / "nms.onnx"
    ir.save(model, path)
    with pytest.raises(UnsupportedError) as info:
        build.build(path, {}, build.BuildOptions())
    assert info.value.exit_code == 4
    assert any("no implementation of this layer" in b.reason for b in info.value.blockers)


def test_torchvisions_guarded_nms_builds_once_prepared(backend, tmp_path):
    """torchvision's batched NMS inside its empty-boxes If: no builder takes data-dependent shapes
    inside an If, and tensorrt-rtx's has no NonMaxSuppression. Prepared (guards.py, and nms.py
    for tensorrt-rtx; their selections are checked against onnxruntime in test_trt_nms), the
    engine builds, with a selection of data-dependent length."""
    from test_trt_nms import guarded_nms_model

    shapes = {"boxes": (30, 4), "scores": (30,), "labels": (30,)}
    _, meta = convert_and_write(backend, guarded_nms_model(), target(sample_shapes=shapes), tmp_path)
    assert io_of(meta, "outputs") == [("keep", "INT64", [-1])]


def test_builder_errors_that_mean_it_cannot_implement_the_network_are_refusals():
    """The builder's own messages, as tensorrt-rtx 1.7 logged them on torchvision's detectors: a
    layer it has no implementation of, and data-dependent shapes inside an If, are exit 4 with
    the message as the blocker; a profile problem stays a failed conversion."""
    from unframe.converters.backends.tensorrt import build

    trt = trt_or_skip()
    cases = {
        "[tacticSupply.cpp::getSupportedFormats::48] Error Code 2: Internal Error (Assertion "
        "!layerImpls.empty() failed. NonMaxSuppression_1894_820 has no runners that implement it)":
            (UnsupportedError, "no implementation of this layer"),
        "[codeGenerator.cpp::getEquivalentMyelinCoord::4039] Error Code 2: Internal Error (Assertion "
        "!scope.getOp() failed. Data-dependent shapes are only allowed in the top-level scope)":
            (UnsupportedError, "outside If and Loop bodies"),
        "IBuilder::buildSerializedNetwork: Error Code 4: API Usage Error (profile 0 has dimension "
        "3 out of range)": (ConversionError, "shape range"),
    }
    for message, (kind, words) in cases.items():
        logger = trtmodule.CollectingLogger(trt)
        logger.log(trt.ILogger.Severity.ERROR, message)
        error = build._build_failure(logger, None, {})
        assert type(error) is kind, message
        said = " ".join(b.reason for b in getattr(error, "blockers", [])) or str(error)
        assert words in said, said


def test_large_weights_reach_the_parser_in_external_data(backend, tmp_path, monkeypatch):
    """The parser and the builder read a model's large weights from a file beside the graph, for
    a check as for a build: a model of inline weights (a 1.5 GB decoder was one) is not
    serialized whole, and its prepared copy can't pass protobuf's 2 GiB. Thresholds lowered so a
    small CNN takes the same path; the parser agrees and the engine's network is the same."""
    import contextlib

    from unframe import io

    handed: list[list[str]] = []
    real = io.tool_file

    @contextlib.contextmanager
    def spy(model, **kwargs):
        with real(model, **kwargs) as path:
            handed.append(sorted(p.name for p in path.parent.iterdir()))
            yield path

    monkeypatch.setattr(io.external, "TOOL_INLINE_BYTES", 1000)
    monkeypatch.setattr(io, "tool_file", spy)
    tgt = target(sample_shapes={"x": (2, 3, 16, 16)})
    engine, meta = convert_and_write(backend, cnn_model(), tgt, tmp_path)
    assert len(handed) >= 2 and all({"model.onnx", "model.onnx.data"} <= set(names) for names in handed)
    assert io_of(meta, "outputs") == [("y", "FLOAT", [-1, 5])]
    assert engine.stat().st_size > 0


def test_a_64_mib_external_tensor_is_checked_and_built_from_a_users_file(backend, tmp_path):
    """One 64 MiB weight in a user's external data: pre-flight asks the parser with the weight
    standing in as zeros (nothing of it read), the engine is built from a private copy (never a
    link: onnx's loaders refuse a data file with several links), and the user's file is left as
    it was."""
    import hashlib

    from spine_utils import one_big_external_tensor

    import unframe

    src = one_big_external_tensor(tmp_path)
    data = tmp_path / "big.onnx.data"
    before = (data.stat().st_mtime_ns, data.stat().st_size, data.stat().st_nlink,
              hashlib.sha256(data.read_bytes()).hexdigest())
    reads: list[str] = []
    real_numpy, real_tobytes = ir.ExternalTensor.numpy, ir.ExternalTensor.tobytes
    with pytest.MonkeyPatch.context() as spy:  # pre-flight: the weight stands in, never read
        spy.setattr(ir.ExternalTensor, "numpy", lambda self: reads.append(self.name) or real_numpy(self))
        spy.setattr(ir.ExternalTensor, "tobytes", lambda self: reads.append(self.name) or real_tobytes(self))
        checked = unframe.check(src, to="tensorrt")
    assert checked and any("parser agree" in n for n in checked.notes)
    assert reads == []
    out = tmp_path / "out" / "big.engine"
    out.parent.mkdir()
    result = unframe.convert(src, to="tensorrt", output=out, builder_optimization_level=0)
    network = result.artifact.metadata["network"]
    assert [t["shape"] for t in network["inputs"]] == [[2, 4096]]
    assert out.stat().st_size > 64 * 1024 * 1024  # the weight is in the engine
    assert (data.stat().st_mtime_ns, data.stat().st_size, data.stat().st_nlink,
            hashlib.sha256(data.read_bytes()).hexdigest()) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data", "out"]
