"""RNN/GRU/LSTM 14->13: batch-first layout=1 rewritten as the sequence-first layout with Transposes."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from adapter_cases import check_path
from onnx import TensorProto
from onnx import helper as oh

from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_simple_rnn_batchwise", [13, 7], ()),
    ("test_gru_batchwise", [13, 9], ()),
    ("test_lstm_batchwise", [13], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[p[0] for p in PAIRS])
def test_golden_cases(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def _model(op: str, outputs: list[str]) -> tuple[onnx.ModelProto, dict[str, np.ndarray]]:
    """A bidirectional batch-first cell with initial states (batch 3, seq 4); full sequence lengths,
    as onnx.reference ignores them."""
    rng = np.random.default_rng(0)
    gates = {"RNN": 1, "GRU": 3, "LSTM": 4}[op]
    batch, seq, size, hidden, dirs = 3, 4, 2, 5, 2
    feeds = {"X": rng.standard_normal((batch, seq, size)).astype(np.float32),
             "initial_h": rng.standard_normal((batch, dirs, hidden)).astype(np.float32),
             "seq_lens": np.full([batch], seq, dtype=np.int32)}
    names = ["X", "W", "R", "B", "seq_lens", "initial_h"]
    inits = [oh.make_tensor(n, TensorProto.FLOAT, a.shape, a.reshape(-1).tolist()) for n, a in (
        ("W", rng.standard_normal((dirs, gates * hidden, size))),
        ("R", rng.standard_normal((dirs, gates * hidden, hidden))),
        ("B", rng.standard_normal((dirs, 2 * gates * hidden))))]
    if op == "LSTM":
        feeds["initial_c"] = rng.standard_normal((batch, dirs, hidden)).astype(np.float32)
        names.append("initial_c")
    node = oh.make_node(op, names, outputs, hidden_size=hidden, layout=1, direction="bidirectional")
    graph = oh.make_graph(
        [node], "g",
        [oh.make_tensor_value_info(n, TensorProto.INT32 if n == "seq_lens" else TensorProto.FLOAT, v.shape)
         for n, v in feeds.items()],
        [oh.make_tensor_value_info(o, TensorProto.FLOAT, None) for o in outputs if o], inits)
    model = oh.make_model(graph, opset_imports=[oh.make_opsetid("", 14)])
    model.ir_version = 8
    return onnx.shape_inference.infer_shapes(model, strict_mode=True), feeds


@pytest.mark.parametrize(("op", "outputs"), [
    ("RNN", ["Y", "Y_h"]), ("GRU", ["", "Y_h"]), ("LSTM", ["Y", "Y_h", "Y_c"]), ("LSTM", ["Y", "", "Y_c"])])
def test_bidirectional_with_states_matches_the_reference(op: str, outputs: list[str]) -> None:
    """onnxruntime refuses layout=1 for RNN: the original runs in onnx.reference, the rewrite in both."""
    import onnxruntime as ort
    from onnx.reference import ReferenceEvaluator

    model, feeds = _model(op, outputs)
    expected = ReferenceEvaluator(model).run(None, feeds)
    irm = ir.from_proto(model)
    convert_opset(irm, 13)
    out_model = ir.to_proto(irm)
    onnx.checker.check_model(out_model, full_check=True)
    onnx.shape_inference.infer_shapes(out_model, check_type=True, strict_mode=True)
    assert all(a.name != "layout" for n in out_model.graph.node for a in n.attribute)
    for got in (ort.InferenceSession(out_model.SerializeToString()).run(None, feeds),
                ReferenceEvaluator(out_model).run(None, feeds)):
        for e, g in zip(expected, got, strict=True):
            np.testing.assert_allclose(g, e, atol=1e-5)
