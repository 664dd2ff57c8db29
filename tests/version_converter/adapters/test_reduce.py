"""Golden node cases through the reduce adapters: each path is converted step by step, checked with the
full checker and strict shape inference, run, and compared with the case's expected outputs."""

from __future__ import annotations

import pytest
from adapter_cases import check_path

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_reduce_mean_keepdims_example", [17, 11, 21], ("axes",)),
    ("test_reduce_sum_keepdims_example", [12, 13], ("axes",)),
    ("test_reduce_sum_empty_axes_input_noop_example", [12], ("axes",)),
    ("test_reduce_max_keepdims_example", [13, 9, 18], ("axes",)),
    ("test_reduce_log_sum_exp_keepdims_example", [17, 18], ("axes",)),
    ("test_reduce_l1_keep_dims_example", [17, 18], ("axes",)),
    ("test_reduce_l2_keep_dims_example", [17, 18], ("axes",)),
    ("test_reduce_log_sum_asc_axes", [17, 18], ("axes",)),
    ("test_reduce_min_keepdims_example", [17, 18], ("axes",)),
    ("test_reduce_prod_keepdims_example", [17, 18], ("axes",)),
    ("test_reduce_sum_square_keepdims_example", [17, 18], ("axes",)),
    ("test_reduce_mean_default_axes_keepdims_example", [17, 18], ("axes",)),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[f"{p[0]}-{'-'.join(map(str, p[1]))}" for p in PAIRS])
def test_path(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    fired = check_path(name, targets, freeze)
    assert fired, "no adapter ran: the path does not exercise this family"
