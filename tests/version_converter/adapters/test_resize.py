"""Golden node cases through the resize adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import pytest
from adapter_cases import check_path

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_upsample_nearest", [8, 7, 9, 10, 11, 10, 9], ("scales",)),
    ("test_resize_upsample_scales_cubic_asymmetric", [18, 13, 12, 11, 13, 19], ("scales",)),
    ("test_resize_downsample_scales_linear", [12, 13], ("scales",)),
    ("test_resize_upsample_scales_nearest_axes_3_2", [17, 13, 19], ("scales",)),
    ("test_resize_upsample_sizes_nearest_axes_2_3", [17, 13], ("sizes",)),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"
