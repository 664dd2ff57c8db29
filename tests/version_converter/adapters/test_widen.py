"""Downgrades that compute in an exactly wider type (unframe/version_converter/widen.py): narrow
ints and halves in Max/Min and comparisons, where the older schema only takes wider types.
Golden node cases, each converted, fully checked and run against its expected outputs."""

from __future__ import annotations

import onnx
import onnx_ir as ir
import pytest
from adapter_cases import check_path
from nodecases import case

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_max_int8", [11, 7], ()),
    ("test_min_uint16", [7], ()),
    ("test_equal_uint8", [7], ()),
    ("test_greater_int16", [7], ()),
    ("test_max_uint32", [9], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[p[0] for p in PAIRS])
def test_widened_cases_match_their_expected_outputs(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    check_path(name, targets, freeze)
    irm = ir.from_proto(case(name).model)
    convert_opset(irm, targets[-1])
    assert "Cast" in {n.op_type for n in ir.to_proto(irm).graph.node}, "no widening happened"


def test_int64_has_no_exact_wider_type() -> None:
    irm = ir.from_proto(case("test_max_int64").model)
    with pytest.raises(UnsupportedError, match="int64"):
        convert_opset(irm, 7)
    assert isinstance(ir.to_proto(irm), onnx.ModelProto)
