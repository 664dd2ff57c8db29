"""Golden node cases through the misc adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import pytest
from adapter_cases import check_path

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_shape_start_1", [14, 15], ()),
    ("test_reshape_reordered_all_dims", [13, 14, 25], ()),
    ("test_gridsample_bicubic", [19, 20], ()),
    ("test_dft_axis", [19, 20], ("axis",)),
    ("test_gemm_default_no_bias", [10], ()),
    ("test_argmax_default_axis_random_select_last_index", [11], ()),
    ("test_argmin_default_axis_random_select_last_index", [11], ()),
    ("test_constant", [11], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"
