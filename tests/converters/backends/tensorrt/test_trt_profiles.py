"""Optimization profiles from --shapes, sample shapes and static; errors for missing ranges."""

from __future__ import annotations

import pytest
from trt_models import cnn_model, make_model, vi

from unframe.converters.backends.tensorrt.profiles import ProfileShape, make_profile, parse_shape
from unframe.errors import UsageError


def test_static_model_needs_no_profile():
    assert make_profile(cnn_model(batch=2)) == {}


def test_dynamic_input_without_range_is_a_usage_error_naming_it():
    with pytest.raises(UsageError, match=r"input 'x' has dynamic dims \(N, 3, 16, 16\)") as info:
        make_profile(cnn_model())
    assert "--shapes x:" in info.value.hint


def test_explicit_shapes_in_both_spellings():
    profile = make_profile(cnn_model(), [("x", (1, 3, 16, 16), (4, 3, 16, 16), (8, 3, 16, 16))])
    assert profile == {"x": ProfileShape((1, 3, 16, 16), (4, 3, 16, 16), (8, 3, 16, 16))}
    assert make_profile(cnn_model(), ["x:1x3x16x16:4x3x16x16:8x3x16x16"]) == profile


def test_defaults_from_sample_shapes_cover_other_batch_sizes():
    profile = make_profile(cnn_model(), sample_shapes={"x": (2, 3, 16, 16)})
    assert profile["x"] == ProfileShape((1, 3, 16, 16), (2, 3, 16, 16), (8, 3, 16, 16))
    assert profile["x"].contains((5, 3, 16, 16)) and not profile["x"].contains((9, 3, 16, 16))
    static = make_profile(cnn_model(), sample_shapes={"x": (2, 3, 16, 16)}, static=True)
    assert static["x"] == ProfileShape((2, 3, 16, 16), (2, 3, 16, 16), (2, 3, 16, 16))


@pytest.mark.parametrize("shapes, message", [
    ([("x", (1, 3, 16, 16), (4, 3, 16, 16), (2, 3, 16, 16))], "min <= opt <= max"),
    ([("x", (1, 3, 16), (1, 3, 16), (1, 3, 16))], "has 3 dims, the input has 4"),
    ([("x", (1, 4, 16, 16), (1, 4, 16, 16), (1, 4, 16, 16))], "dim 1 is fixed at 3"),
    ([("nope", (1,), (1,), (1,))], "no input of"),
    (["x:1x3x16x16:4x3x16x16"], "bad --shapes entry"),
])
def test_bad_shapes_are_usage_errors(shapes, message):
    with pytest.raises(UsageError, match=message):
        make_profile(cnn_model(), shapes)


def test_parse_shape():
    assert parse_shape("1x3x224x224", "x") == (1, 3, 224, 224)
    with pytest.raises(UsageError, match="bad shape"):
        parse_shape("1xAx2", "x")


def test_unknown_rank_input_needs_a_range():
    model = make_model([], [vi("x", None)], [vi("x", None)])
    with pytest.raises(UsageError, match="unknown rank"):
        make_profile(model)
