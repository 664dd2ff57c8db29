"""Golden node cases through the split adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import onnx_ir as ir
import pytest
from adapter_cases import check_path
from nodecases import case

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_split_variable_parts_1d_opset13", [12, 9, 13], ("split",)),
    ("test_split_1d_uneven_split_opset18", [17, 18], ()),
    ("test_split_equal_parts_1d_opset18", [17, 12, 18], ()),
    # run-time split sizes: one Slice per output (Compress at opset 9)
    ("test_split_variable_parts_1d_opset13", [11], ()),
    ("test_split_variable_parts_2d_opset18", [10], ()),
    ("test_split_variable_parts_2d_opset13", [9], ()),
    ("test_split_variable_parts_default_axis_opset18", [9], ()),
    ("test_split_zero_size_splits_opset13", [9], ()),  # the split axis has no static length
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}-{len(p[2])}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


def test_runtime_split_sizes_refused_below_9() -> None:
    irm = ir.from_proto(case("test_split_variable_parts_2d_opset13").model)
    with pytest.raises(UnsupportedError, match="Split sizes at run time need opset 9"):
        convert_opset(irm, 7)


def test_folded_split_gives_its_outputs_a_shape() -> None:
    """Inference can't shape the outputs of a Split whose sizes come from Shape; the downgrade sets
    them so a second Split with a negative axis on an output knows its rank."""
    irm = ir.from_proto(case("test_rotary_embedding_expanded").model)
    try:
        convert_opset(irm, 9)
    except UnsupportedError as exc:  # other ops of the expansion may still block (Concat's rank)
        assert "[Split]" not in str(exc)
