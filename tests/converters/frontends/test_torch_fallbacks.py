"""Export fallbacks and input names: a list-of-tensors input is named after its parameter
(images, images_1), never a bare index; a data-dependent model falls back to the TorchScript
exporter; hints suggest only what was not tried; torchvision's SSDLite (through the import shim
in model_zoo/build) converts to ONNX, and on to CoreML (its NonMaxSuppression included) and to a
TensorRT engine.
TensorRT: a parser refusal is a blocker of `check`, and stays off the terminal."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import onnx
import pytest
from onnx import TensorProto, helper

import unframe
from unframe.errors import ConversionError, UnsupportedError

torch = pytest.importorskip("torch", reason="needs torch (the 'torch' extra)")
ROOT = Path(__file__).resolve().parents[3]


class PickFirstPositive(torch.nn.Module):
    """Takes a list of images; the branch depends on the data (dynamo refuses it)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = torch.nn.Conv2d(3, 4, 3)

    def forward(self, images: list[Any]) -> Any:
        total = self.conv(images[0]) + self.conv(images[1])
        if total.sum() > 0:
            return total * 2
        return total - 1


def _images() -> list[Any]:
    gen = torch.Generator().manual_seed(0)
    return [torch.rand(1, 3, 8, 8, generator=gen) + 0.5, torch.rand(1, 3, 8, 8, generator=gen)]


def test_a_list_input_is_named_after_its_parameter_and_falls_back() -> None:
    torch.manual_seed(0)
    result = unframe.convert(PickFirstPositive().eval(), to="onnx", sample_inputs=(_images(),))
    assert [v.name for v in result.model.graph.inputs] == ["images", "images_1"]
    assert result.export.route == "torchscript"
    assert any("retried with the TorchScript exporter" in n for n in result.notes), result.notes
    assert result.report, str(result.report)


class SingularValues(torch.nn.Module):
    """Runs eagerly; neither exporter has an ONNX translation of linalg.svd."""

    def forward(self, x: Any) -> Any:
        return torch.linalg.svd(x).S


def test_a_forced_exporter_hint_names_only_the_other_one() -> None:
    x = torch.randn(2, 3, 3, generator=torch.Generator().manual_seed(0))
    with pytest.raises(ConversionError) as err:
        unframe.convert(SingularValues(), to="onnx", sample_inputs=x, exporter="torchscript")
    assert "--exporter dynamo" in err.value.hint and "--exporter torchscript" not in err.value.hint
    # both tried, and neither translates the op: the model has what no exporter takes (exit 4,
    # the op named as a blocker), not a failure of the conversion
    with pytest.raises(UnsupportedError) as refused:
        unframe.convert(SingularValues(), to="onnx", sample_inputs=x)
    assert refused.value.exit_code == 4 and refused.value.blockers, refused.value.message
    assert "--exporter" not in refused.value.hint, refused.value.hint  # both were tried
    assert "dynamo export" in refused.value.message and "torchscript export" in refused.value.message


# -- torchvision detection -----------------------------------------------------------------------

def _torchvision() -> Any:
    path = ROOT / "model_zoo" / "build" / "torchvision_shim.py"
    spec = importlib.util.spec_from_file_location("torchvision_shim", path)
    module = sys.modules.get("torchvision_shim")
    if module is None:
        assert spec is not None and spec.loader is not None
        module = importlib.util.module_from_spec(spec)
        sys.modules["torchvision_shim"] = module
        spec.loader.exec_module(module)
    try:
        return module.import_torchvision()
    except ImportError as exc:
        pytest.skip(f"needs torchvision (pip install --no-deps torchvision==0.28.0): {exc}")


def _ssdlite() -> Any:
    tv = _torchvision()
    from torchvision.models.detection import ssdlite320_mobilenet_v3_large

    torch.manual_seed(0)
    # few detections: random weights give many near-equal scores, whose order is arbitrary
    model = ssdlite320_mobilenet_v3_large(weights=None, weights_backbone=None, num_classes=3,
                                          detections_per_img=8, topk_candidates=16).eval()
    gen = torch.Generator().manual_seed(1)
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)
        for p in model.head.classification_head.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.3)
    assert tv.__version__
    return model


def test_nms_reference_matches_the_definition() -> None:
    _torchvision()
    shim = sys.modules["torchvision_shim"]
    boxes = torch.tensor([[0, 0, 10, 10], [1, 1, 11, 11], [20, 20, 30, 30], [0, 0, 10, 9]],
                         dtype=torch.float32)
    scores = torch.tensor([0.9, 0.8, 0.7, 0.95])
    kept = shim.nms_reference(boxes, scores, 0.5)
    # box 3 wins; 0 overlaps it by IoU 0.9 and goes; 1 overlaps 3 by 0.61 and goes; 2 stays
    assert kept.tolist() == [3, 2]
    assert shim.nms_reference(boxes, scores, 0.95).tolist() == [3, 0, 1, 2]


def test_roi_align_runs_as_an_op_the_tracer_records() -> None:
    """Without torchvision's C++ ops, ``roi_align`` ran a ``torch.compile``d function that
    TorchScript's tracer refuses (Faster R-CNN could not export here); the shim defines the op
    with torchvision's pure-torch kernel: on a ramp f(y, x) = x, each bin's single centre sample
    is the ramp at that centre, and a trace records ``torchvision::roi_align``, which torch.onnx
    exports as RoiAlign."""
    tv = _torchvision()
    ramp = torch.arange(16, dtype=torch.float32).repeat(1, 1, 16, 1)  # [1, 1, 16, 16], value = x
    boxes = torch.tensor([[0, 2.0, 3.0, 10.0, 11.0]])  # batch index, x1, y1, x2, y2
    out = tv.ops.roi_align(ramp, boxes, output_size=(2, 4), spatial_scale=1.0, sampling_ratio=1, aligned=True)
    centres = 2.0 + (torch.arange(4) + 0.5) * (10.0 - 2.0) / 4 - 0.5
    assert torch.allclose(out[0, 0], centres.expand(2, 4)), out

    class Pool(torch.nn.Module):
        def forward(self, x: Any, b: Any) -> Any:
            return tv.ops.roi_align(x, b, output_size=(2, 2), spatial_scale=1.0, sampling_ratio=2, aligned=True)

    traced = torch.jit.trace(Pool(), (ramp, boxes))
    assert "torchvision::roi_align" in str(traced.graph)


@pytest.fixture(scope="module")
def ssdlite_onnx(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path, Any]:
    """SSDLite (as torchvision builds it, seeded) and its ONNX export: (model, path, image)."""
    tmp_path = tmp_path_factory.mktemp("ssdlite")
    model = _ssdlite()
    image = [torch.rand(3, 320, 320, generator=torch.Generator().manual_seed(2))]
    with torch.no_grad():
        detections = model(image)[0]
    assert len(detections["scores"]) == 8 and len(set(detections["scores"].tolist())) == 8
    path = tmp_path / "ssdlite.onnx"
    # dynamo refuses the data-dependent postprocessing after tracing the whole network: a
    # torchvision detector goes to the TorchScript exporter first, no failed attempt
    result = unframe.convert(model, to="onnx", sample_inputs=(image,), output=path)
    assert result.export.route == "torchscript"
    assert not any("retried" in n for n in result.notes), result.notes
    assert any("torchvision detector SSD: the TorchScript exporter tried first" in n for n in result.notes)
    assert [v.name for v in result.model.graph.inputs] == ["images"]
    assert [v.name for v in result.model.graph.outputs] == ["boxes", "scores", "labels"]
    assert result.report, str(result.report)
    return model, path, image


def test_ssdlite_converts_to_onnx_and_to_coreml(ssdlite_onnx: tuple[Any, Path, Any], tmp_path: Path) -> None:
    _, path, image = ssdlite_onnx
    checked = unframe.check(path, to="coreml")
    assert checked, [str(b) for b in checked.blockers]
    # the boxes reaching the NMS are counted at run time: CoreML's fixed-size NMS output is bounded
    assert any("NonMaxSuppression" in n and "only known at run time" in n for n in checked.notes), checked.notes
    # float32: in fp16 the scores of near-equal detections round together and their order (the
    # order of the outputs) is no longer onnxruntime's
    coreml = unframe.convert(path, to="coreml", output=tmp_path / "ssdlite.mlpackage", precision="fp32",
                             sample_inputs={"images": image[0].numpy()})
    assert coreml.report, str(coreml.report)
    assert (tmp_path / "ssdlite.mlpackage").exists()


def test_ssdlite_builds_a_tensorrt_engine(ssdlite_onnx: tuple[Any, Path, Any], tmp_path: Path) -> None:
    """torchvision's NMS sits in its empty-boxes If, and tensorrt-rtx has neither NonZero nor a
    NonMaxSuppression layer: `check` finds no blocker in the prepared graph and the builder makes
    the engine (its selection checked against onnxruntime's in test_trt_nms; running it needs a
    GPU)."""
    from unframe.converters.backends.tensorrt import trtmodule

    if trtmodule.load_or_none() is None:
        pytest.skip("needs tensorrt-rtx (the 'tensorrt' extra)")
    _, path, _ = ssdlite_onnx
    checked = unframe.check(path, to="tensorrt")
    assert checked, [str(b) for b in checked.blockers]
    engine = tmp_path / "ssdlite.engine"
    unframe.convert(path, to="tensorrt", output=engine, builder_optimization_level=0)
    assert engine.stat().st_size > 100_000  # the weights are in it


# -- TensorRT: a parser refusal is a blocker -------------------------------------------------------

def test_a_tensorrt_parser_refusal_is_a_blocker_not_agreement(tmp_path: Path,
                                                              capfd: pytest.CaptureFixture[str]) -> None:
    from unframe.converters.backends.tensorrt import trtmodule

    if trtmodule.load_or_none() is None:
        pytest.skip("needs tensorrt-rtx (the 'tensorrt' extra)")
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2]),
         helper.make_tensor_value_info("names", TensorProto.STRING, [2])],  # unused: no node to blame
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    path = tmp_path / "strings.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)]), path)
    checked = unframe.check(path, to="tensorrt")
    assert not checked
    assert any("STRING" in b.reason for b in checked.blockers), [str(b) for b in checked.blockers]
    with pytest.raises(UnsupportedError) as err:
        unframe.convert(path, to="tensorrt", output=tmp_path / "strings.engine")
    assert err.value.exit_code == 4
    assert "Unsupported ONNX data type" not in capfd.readouterr().err


class GroupedQueryAttention(torch.nn.Module):
    """The TorchScript exporter has no translation of grouped-query attention; dynamo has."""

    def forward(self, q: Any, k: Any) -> Any:
        return torch.nn.functional.scaled_dot_product_attention(q, k, k, enable_gqa=True)


def test_a_family_tried_with_torchscript_first_falls_back_to_dynamo(monkeypatch: pytest.MonkeyPatch) -> None:
    """A family routed to the TorchScript exporter first (torchvision detectors) still converts
    when only dynamo takes the model, and the note names the exporter that was retried."""
    from unframe.converters.frontends import torch as torch_frontend

    monkeypatch.setitem(torch_frontend.DATA_DEPENDENT_FAMILIES, __name__, "test family")
    gen = torch.Generator().manual_seed(0)
    q, k = torch.randn(1, 4, 5, 8, generator=gen), torch.randn(1, 2, 5, 8, generator=gen)
    result = unframe.convert(GroupedQueryAttention(), to="onnx", sample_inputs=(q, k))
    assert result.export.route == "dynamo"
    assert any("test family GroupedQueryAttention: the TorchScript exporter tried first" in n
               for n in result.notes), result.notes
    retried = [n for n in result.notes if "retried with" in n]
    assert retried and "retried with the dynamo exporter" in retried[0], result.notes
    assert "records the branch" not in retried[0]
    assert result.report, str(result.report)
