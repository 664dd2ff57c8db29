"""Golden node cases through the split adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import pytest
from adapter_cases import check_path

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_split_variable_parts_1d_opset13", [12, 9, 13], ("split",)),
    ("test_split_1d_uneven_split_opset18", [17, 18], ()),
    ("test_split_equal_parts_1d_opset18", [17, 12, 18], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"
