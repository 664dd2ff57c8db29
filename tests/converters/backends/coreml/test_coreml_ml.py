"""What Core ML needs for scikit-learn graphs: ``Scan`` batched over its scanned axis (skl2onnx's
pairwise distances), and float32 kept for the nodes a pass marked ``KEEP_FP32`` in an fp16
program (tree thresholds that 16 bits would move)."""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import onnx_ir as ir
import pytest
from coreml_helpers import convert_and_compare, to_ir
from onnx import TensorProto as TP
from onnx import helper as oh
from onnx import numpy_helper as nh

pytest.importorskip("coremltools", reason="needs coremltools")

from unframe.converters.backends.coreml.ops import TRANSLATORS  # noqa: E402

sys.path.insert(0, str(Path(__file__).resolve().parents[3] / "passes" / "ml_to_tensor"))
from mlt_models import stump_model  # noqa: E402

RNG = np.random.default_rng(0)


def cdist_scan(state_changes: bool = False) -> object:
    """skl2onnx's cdist: Scan(state=X [N, F], scan=T [S, F]) -> squared distances [S, N]."""
    body = oh.make_graph(
        [oh.make_node("Add" if state_changes else "Identity", ["next_in", "one"] if state_changes
                      else ["next_in"], ["next_out"]),
         oh.make_node("Sub", ["next_in", "next"], ["diff"]),
         oh.make_node("ReduceSumSquare", ["diff", "axes"], ["d"], keepdims=0),
         oh.make_node("Identity", ["d"], ["scan_out"])],
        "body", [oh.make_tensor_value_info("next_in", TP.FLOAT, [None, 3]),
                 oh.make_tensor_value_info("next", TP.FLOAT, [3])],
        [oh.make_tensor_value_info("next_out", TP.FLOAT, [None, 3]),
         oh.make_tensor_value_info("scan_out", TP.FLOAT, [None])],
        [nh.from_array(np.array([1], np.int64), "axes"), nh.from_array(np.float32(1.0), "one")])
    train = RNG.normal(size=(7, 3)).astype(np.float32)
    graph = oh.make_graph(
        [oh.make_node("Scan", ["X", "T"], ["state", "dist"], body=body, num_scan_inputs=1),
         oh.make_node("Transpose", ["dist"], ["Y"], perm=[1, 0])],
        "g", [oh.make_tensor_value_info("X", TP.FLOAT, [None, 3])],
        [oh.make_tensor_value_info("Y", TP.FLOAT, [None, 7])], [nh.from_array(train, "T")])
    return oh.make_model(graph, ir_version=10, opset_imports=[oh.make_opsetid("", 18)])


def test_scan_cdist_is_batched(tmp_path: Path) -> None:
    x = RNG.normal(size=(5, 3)).astype(np.float32)
    _, parity = convert_and_compare(to_ir(cdist_scan()), [{"X": x}, {"X": x[:2]}], tmp_path,
                                    precision="fp32")
    assert parity, parity.summary()


def test_scan_with_changing_state_is_refused() -> None:
    model = to_ir(cdist_scan(state_changes=True))
    scan = next(n for n in model.graph if n.op_type == "Scan")
    reasons = TRANSLATORS.get("Scan").check(scan)
    assert any("state changes" in r for r in reasons)


def test_fp16_program_keeps_marked_nodes_in_fp32(tmp_path: Path) -> None:
    """Only the lowered tree is marked (the Mul is not): x = 1.0008 lies above the threshold,
    but in fp16 both are 1.000977, so an fp16 comparison would send it the other way."""
    from unframe.passes.ml_to_tensor import lower

    model = ir.serde.deserialize_model(stump_model())
    lower(model)
    marked = [n.op_type for n in model.graph if n.metadata_props.get("unframe.keep_fp32")]
    assert "Mul" not in marked and "LessOrEqual" in marked
    x = np.array([[1.0008], [0.5], [2.0], [1.0006]], np.float32)
    artifact, parity = convert_and_compare(model, [{"X": x}], tmp_path)  # fp16, the default
    assert parity, parity.summary()
    from unframe.converters.backends.coreml.backend import CoreMLBackend
    from unframe.converters.base import Target

    out = CoreMLBackend().runner(artifact, Target("coreml")).run({"X": x})["Y"].reshape(-1)
    np.testing.assert_array_equal(out, [2.0, -2.0, 2.0, -2.0])


def test_without_the_mark_fp16_moves_the_decision(tmp_path: Path) -> None:
    """The control: the same graph with the marks removed takes x = 1.0008 the other way."""
    from unframe.converters.backends.coreml.backend import CoreMLBackend
    from unframe.converters.base import Target
    from unframe.passes.ml_to_tensor import lower

    model = ir.serde.deserialize_model(stump_model())
    lower(model)
    for node in model.graph:
        node.metadata_props.clear()
    backend, target = CoreMLBackend(), Target("coreml")
    artifact = backend.convert(model, target, tmp_path)
    out = backend.runner(artifact, target).run({"X": np.array([[1.0008]], np.float32)})["Y"]
    assert out.reshape(-1)[0] == -2.0
