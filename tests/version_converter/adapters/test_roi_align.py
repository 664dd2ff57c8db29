"""RoiAlign 16->15: coordinate_transformation_mode at RoiAlign-10 (which is "output_half_pixel").

onnxruntime can't run these opset-22 cases and onnx.reference runs RoiAlign-10 as half_pixel (its one
implementation defaults to the opset-16 mode), so the converted models are run in onnxruntime, whose
RoiAlign-10 kernel has the opset-10 semantics, and compared with the cases' expected outputs."""

from __future__ import annotations

import adapter_cases  # noqa: F401  (puts nodecases on the path)
import onnx
import onnx_ir as ir
import pytest
from nodecases import case, convert, matches

from unframe.errors import UnsupportedError
from unframe.version_converter import convert_opset

PAIRS: list[tuple[str, list[int], tuple[str, ...]]] = [
    ("test_roialign_aligned_false", [15, 11], ()),
    ("test_roialign_mode_max", [13], ()),
    ("test_roialign_aligned_true", [15], ("rois",)),
]


@pytest.mark.parametrize(("name", "targets", "freeze"), PAIRS, ids=[p[0] for p in PAIRS])
def test_path_in_onnxruntime(name: str, targets: list[int], freeze: tuple[str, ...]) -> None:
    c = case(name, freeze)
    model, fired = c.model, set()
    for target in targets:
        model, result = convert(model, target)
        fired |= set(result.adapters_used)
        onnx.checker.check_model(model, full_check=True)
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        assert matches(model, c, "ort"), f"{name} at {target}: onnxruntime disagrees"
    assert "RoiAlign_16_15" in fired


def test_half_pixel_with_runtime_rois_is_refused() -> None:
    irm = ir.from_proto(case("test_roialign_aligned_true").model)
    with pytest.raises(UnsupportedError, match="half_pixel needs constant rois"):
        convert_opset(irm, 15)


def test_half_pixel_with_a_roi_under_one_pixel_is_refused() -> None:
    model = case("test_roialign_aligned_true", ("rois",)).model
    rois = next(t for t in model.graph.initializer if t.name == "rois")
    rois.CopyFrom(onnx.numpy_helper.from_array(
        onnx.numpy_helper.to_array(rois).copy().clip(0, 0.5), "rois"))
    with pytest.raises(UnsupportedError, match="under one scaled pixel"):
        convert_opset(ir.from_proto(model), 15)
