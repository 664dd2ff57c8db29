"""Golden node cases through the softmax adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import pytest
from adapter_cases import check_path

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_softmax_axis_0", [12, 9, 13], ()),
    ("test_logsoftmax_axis_0", [12, 11], ()),
    ("test_hardmax_axis_0", [11, 13], ()),
    ("test_softmax_example", [9, 17], ()),
    ("test_logsoftmax_axis_0", [10, 17], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"
