"""Golden node cases through the resize adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import onnx_ir as ir
import pytest
from adapter_cases import check_path
from nodecases import case

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_upsample_nearest", [8, 7, 9, 10, 11, 10, 9], ("scales",)),
    ("test_resize_upsample_scales_cubic_asymmetric", [18, 13, 12, 11, 13, 19], ("scales",)),
    ("test_resize_downsample_scales_linear", [12, 13], ("scales",)),
    ("test_resize_upsample_scales_nearest_axes_3_2", [17, 13, 19], ("scales",)),
    ("test_resize_upsample_sizes_nearest_axes_2_3", [17, 13], ("sizes",)),
    # axes with run-time scales/sizes/roi: spread to full rank with Gather(Concat(v, fill), index)
    ("test_resize_upsample_scales_nearest_axes_2_3", [17, 13], ()),
    ("test_resize_upsample_sizes_nearest_axes_3_2", [17, 11], ()),
    ("test_resize_tf_crop_and_resize_axes_3_2", [17, 12], ()),
    ("test_resize_tf_crop_and_resize_axes_2_3", [17], ("roi", "sizes")),
    # keep_aspect_ratio_policy with constant sizes whose kept scale gives whole sizes
    ("test_resize_upsample_sizes_nearest_not_larger", [17], ("sizes",)),
    ("test_resize_downsample_sizes_nearest_not_larger", [13], ("sizes",)),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"


@pytest.mark.parametrize(("name", "freeze", "reason"), [
    ("test_resize_downsample_sizes_nearest_not_smaller", ("sizes",), "fractional size on axis 2"),
    ("test_resize_upsample_sizes_nearest_not_larger", (), "needs constant sizes and a static input shape"),
    ("test_resize_downsample_scales_linear_antialias", ("scales",), "antialias"),
])
def test_refused_18_17(name: str, freeze: tuple[str, ...], reason: str) -> None:
    irm = ir.from_proto(case(name, freeze).model)
    with pytest.raises(UnsupportedError, match=reason):
        convert_opset(irm, 17)
