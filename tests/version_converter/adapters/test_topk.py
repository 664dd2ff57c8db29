"""Golden node cases through the topk adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from adapter_cases import check_path
from nodecases import case
from onnx.reference import ReferenceEvaluator

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_top_k", [9, 7, 10], ("k",)),
    # largest=0: TopK of Neg(x), values negated back
    ("test_top_k_smallest", [10, 7], ("k",)),
    # run-time k: the full sort along the static axis, first k kept by Compress
    ("test_top_k", [9], ()),
    ("test_top_k_negative_axis", [9], ()),
    ("test_top_k_smallest", [9], ()),
    # below opset 9: the first k gathered through a Loop-made arange
    ("test_top_k", [7], ()),
    ("test_top_k_negative_axis", [7], ()),
    ("test_top_k_smallest", [7], ()),
    ("test_top_k", [8], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}-{len(p[2])}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def test_runtime_k_on_an_axis_of_unknown_length_refused() -> None:
    model = case("test_top_k").model
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_param = "n"
    irm = ir.from_proto(model)
    with pytest.raises(UnsupportedError, match="a run-time k needs a static length on the TopK axis"):
        convert_opset(irm, 7)


def test_runtime_k_at_7_in_both_runtimes() -> None:
    """k = 0, 1 and the whole axis: both runtimes give the original's values and indices."""
    model = case("test_top_k").model
    irm = ir.from_proto(model)
    convert_opset(irm, 7)
    converted = ir.to_proto(irm)
    onnx.checker.check_model(converted, full_check=True)
    session = ort.InferenceSession(converted.SerializeToString(), providers=["CPUExecutionProvider"])
    original = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in model.graph.input]
    x = np.random.default_rng(0).standard_normal([3, 4]).astype(np.float32)
    for k in (0, 1, 4):
        feeds = dict(zip(names, (x, np.asarray([k], dtype=np.int64)), strict=True))
        want = original.run(None, feeds)
        for got in (session.run(None, feeds), ReferenceEvaluator(converted).run(None, feeds)):
            assert all(g.shape == w.shape and np.array_equal(g, w) for g, w in zip(got, want, strict=True)), k
