"""Golden node cases through the Scan 8<->9 adapters (the batch axis made explicit): each path is
converted step by step, checked with the full checker and strict shape inference, run, and compared
with the case's expected outputs."""

from __future__ import annotations

import pytest
from adapter_cases import check_path

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_scan_sum", [9, 8, 21], ()),
    ("test_scan9_sum", [8, 9], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert {"Scan_8_9", "Scan_9_8"} & fired
