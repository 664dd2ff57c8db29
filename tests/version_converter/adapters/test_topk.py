"""Golden node cases through the topk adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import onnx_ir as ir
import pytest
from adapter_cases import check_path
from nodecases import case

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
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}-{len(p[2])}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def test_runtime_k_refused_below_9() -> None:
    irm = ir.from_proto(case("test_top_k").model)
    with pytest.raises(UnsupportedError, match="TopK k at run time need opset 9"):
        convert_opset(irm, 7)
