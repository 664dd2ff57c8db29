"""Golden node cases through the optional adapters: each path is converted step by step, checked with
the full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import pytest
from adapter_cases import check_path

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_optional_has_element_empty_no_input_tensor_input", [17], ()),   # no input: Constant(False)
    ("test_optional_has_element_empty_no_input_optional_input", [15], ()),
    ("test_optional_has_element_tensor_input", [17], ()),                  # a tensor: Constant(True)
    ("test_optional_get_element_tensor", [15], ()),                        # a tensor: Identity
    ("test_optional_get_element_sequence", [17], ()),
    ("test_optional_has_element_optional_input", [15], ()),                # an optional: kept
    ("test_optional_get_element_optional_tensor", [15], ()),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"
