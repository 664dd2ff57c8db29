"""End to end: real architectures exported to ONNX, converted to .mlpackage, and the saved
package checked against onnxruntime with the MIL evaluator (fp16 compute, the default)."""

from __future__ import annotations

import io
import warnings
from pathlib import Path

import numpy as np
import onnx
import pytest
from coreml_helpers import convert_and_compare, to_ir


def _torch_onnx(module: object, args: tuple, *, dynamo: bool = False, **kw: object) -> onnx.ModelProto:
    torch = pytest.importorskip("torch", reason="needs torch")
    buf = io.BytesIO()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if dynamo:
            prog = torch.onnx.export(module, args, dynamo=True, opset_version=18, **kw)
            return prog.model_proto
        torch.onnx.export(module, args, buf, dynamo=False, opset_version=17, **kw)
    return onnx.load_from_string(buf.getvalue())


@pytest.mark.usefixtures("coreml")
def test_torch_cnn_with_interpolate_and_hardswish(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="needs torch")
    nn, F = torch.nn, torch.nn.functional
    torch.manual_seed(0)

    class CNN(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv1 = nn.Conv2d(3, 8, 3, padding=1)
            self.bn = nn.BatchNorm2d(8)
            self.conv2 = nn.Conv2d(8, 8, 3, padding=2, dilation=2, groups=2)
            self.up = nn.ConvTranspose2d(8, 4, 3, stride=2, padding=1, output_padding=1)
            self.fc = nn.Linear(4, 5)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            x = F.hardswish(self.bn(self.conv1(x)))
            x = F.max_pool2d(x, 2)
            x = F.interpolate(self.conv2(x), scale_factor=2.0, mode="bilinear", align_corners=False)
            x = F.avg_pool2d(F.relu(x), 2)
            x = F.interpolate(self.up(x), size=(6, 6), mode="nearest")
            return self.fc(x.mean(dim=(2, 3)))

    model = CNN().eval()
    with torch.no_grad():
        model.bn.running_mean.uniform_(-0.5, 0.5)
        model.bn.running_var.uniform_(0.5, 1.5)
    x = torch.randn(2, 3, 16, 16)
    onnx_model = to_ir(_torch_onnx(model, (x,)))
    ops = {n.op_type for n in onnx_model.graph}
    assert {"Resize", "HardSwish", "ConvTranspose"} <= ops, ops
    rng = np.random.default_rng(0)
    feeds = [{onnx_model.graph.inputs[0].name: rng.standard_normal((2, 3, 16, 16)).astype(np.float32)}]
    artifact, parity = convert_and_compare(onnx_model, feeds, tmp_path)
    assert parity, parity.reason
    assert artifact.path is not None and (artifact.path / "Manifest.json").exists()


@pytest.mark.usefixtures("coreml")
@pytest.mark.parametrize("kind", ["LSTM", "GRU"])
def test_torch_recurrent_bidirectional(tmp_path: Path, kind: str) -> None:
    torch = pytest.importorskip("torch", reason="needs torch")
    torch.manual_seed(0)
    layer = getattr(torch.nn, kind)(6, 8, num_layers=1, batch_first=True, bidirectional=True).eval()

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.rnn = layer

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.rnn(x)[0]

    x = torch.randn(3, 5, 6)
    onnx_model = to_ir(_torch_onnx(Head().eval(), (x,), dynamo=False, input_names=["x"], output_names=["y"]))
    assert kind in {n.op_type for n in onnx_model.graph}
    rng = np.random.default_rng(1)
    feeds = [{"x": rng.standard_normal((3, 5, 6)).astype(np.float32)}]
    _, parity = convert_and_compare(onnx_model, feeds, tmp_path)
    assert parity, parity.reason


@pytest.mark.usefixtures("coreml")
def test_a_recurrent_model_with_a_free_sequence_length_is_refused_with_the_way_out(tmp_path: Path) -> None:
    """unframe exports the sequence dim as dynamic; CoreML's translation unrolls the recurrence,
    so it needs a fixed length: exit 4 naming --static, and with it the model converts."""
    torch = pytest.importorskip("torch", reason="needs torch")
    import unframe
    from unframe.errors import UnsupportedError

    torch.manual_seed(0)

    class Tagger(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.lstm = torch.nn.LSTM(6, 12, num_layers=2, batch_first=True)
            self.head = torch.nn.Linear(12, 3)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.head(self.lstm(x)[0]) * 4

    model, x = Tagger().eval(), torch.randn(2, 7, 6)
    with pytest.raises(UnsupportedError) as caught:
        unframe.convert(model, to="coreml", sample_inputs=x, output=tmp_path / "free.mlpackage")
    assert [b.op for b in caught.value.blockers] == ["LSTM"]
    assert "sequence length must be static" in caught.value.blockers[0].reason
    assert "--static (static=True)" in caught.value.blockers[0].reason
    assert not (tmp_path / "free.mlpackage").exists()
    result = unframe.convert(model, to="coreml", sample_inputs=x, static=True, output=tmp_path / "fixed.mlpackage")
    backend = result.report.stages[-1]
    assert backend.status == "passed" and 0.3 < backend.outputs[0].scale < 30


@pytest.mark.usefixtures("coreml")
def test_torch_transformer_encoder(tmp_path: Path) -> None:
    torch = pytest.importorskip("torch", reason="needs torch")
    torch.manual_seed(0)
    layer = torch.nn.TransformerEncoderLayer(d_model=16, nhead=2, dim_feedforward=32, batch_first=True,
                                             dropout=0.0)
    encoder = torch.nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False).eval()
    x = torch.randn(2, 7, 16)
    onnx_model = to_ir(_torch_onnx(encoder, (x,)))
    rng = np.random.default_rng(2)
    feeds = [{onnx_model.graph.inputs[0].name: rng.standard_normal((2, 7, 16)).astype(np.float32)}]
    _, parity = convert_and_compare(onnx_model, feeds, tmp_path, precision="fp32")
    assert parity, parity.reason


@pytest.mark.usefixtures("coreml")
def test_keras_application_with_dynamic_batch(tmp_path: Path) -> None:
    """MobileNetV2 (random weights) through tf2onnx with a dynamic batch: the package takes a
    range of batch sizes, checked at two of them."""
    import os

    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    tf = pytest.importorskip("tensorflow", reason="needs tensorflow")
    tf2onnx = pytest.importorskip("tf2onnx", reason="needs tf2onnx")
    keras = tf.keras
    keras.utils.set_random_seed(0)
    net = keras.applications.MobileNetV2(input_shape=(32, 32, 3), alpha=0.35, weights=None, classes=7)
    spec = (tf.TensorSpec((None, 32, 32, 3), tf.float32, name="image"),)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        proto, _ = tf2onnx.convert.from_keras(net, input_signature=spec, opset=18)
    model = to_ir(proto)
    name = model.graph.inputs[0].name
    assert not isinstance(model.graph.inputs[0].shape[0], int)  # the batch stays dynamic
    rng = np.random.default_rng(4)
    feeds = [{name: rng.standard_normal((n, 32, 32, 3)).astype(np.float32)} for n in (1, 3)]
    artifact, parity = convert_and_compare(model, feeds, tmp_path, dims=[(f"{name}:0", 1, 16)])
    assert parity, parity.reason
    assert parity.cases == 2


@pytest.mark.usefixtures("coreml")
def test_interpolate_to_a_size_with_a_dynamic_batch(tmp_path: Path) -> None:
    """torchvision's segmentation heads: interpolate(y, size=x.shape[-2:]) exports Resize with
    sizes Concat(Shape(y)[:2], [h, w]), run-time because the batch is symbolic; only H and W are
    resized, so the translation needs only those entries."""
    torch = pytest.importorskip("torch", reason="needs torch")
    F = torch.nn.functional

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 4, 3, stride=4, padding=1)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return F.interpolate(self.conv(x), size=x.shape[-2:], mode="bilinear", align_corners=False)

    torch.manual_seed(0)
    x = torch.rand(2, 3, 16, 16)
    batch = torch.export.Dim("batch", min=1, max=64)
    onnx_model = to_ir(_torch_onnx(Head().eval(), (x,), dynamo=True, dynamic_shapes={"x": {0: batch}}))
    [resize] = [n for n in onnx_model.graph if n.op_type == "Resize"]
    assert resize.inputs[3] is not None and resize.inputs[3].const_value is None  # sizes computed at run time
    rng = np.random.default_rng(2)
    feeds = [{onnx_model.graph.inputs[0].name: rng.uniform(0, 1, (2, 3, 16, 16)).astype(np.float32)}]
    _, parity = convert_and_compare(onnx_model, feeds, tmp_path)
    assert parity, parity.reason


@pytest.mark.usefixtures("coreml")
@pytest.mark.parametrize("window", ["head", "tail"])
def test_slice_bounds_known_only_at_run_time(tmp_path: Path, window: str) -> None:
    """A position table cut to the run-time sequence length (keras-hub's position embedding):
    ``table[:S]``, and ``table[-S:]`` (a negative run-time start, an open end), for two lengths."""
    from onnx import TensorProto, helper, numpy_helper

    rng = np.random.default_rng(5)
    table = rng.standard_normal((16, 8)).astype(np.float32)
    nodes = [helper.make_node("Shape", ["x"], ["shape"]),
             helper.make_node("Gather", ["shape", "one"], ["seq"], axis=0),
             helper.make_node("Unsqueeze", ["seq", "zero"], ["seq1"])]
    if window == "head":
        nodes.append(helper.make_node("Slice", ["table", "zero", "seq1", "zero"], ["pos"]))
    else:
        nodes += [helper.make_node("Neg", ["seq1"], ["minus"]),
                  helper.make_node("Slice", ["table", "minus", "open", "zero"], ["pos"])]
    nodes.append(helper.make_node("Add", ["x", "pos"], ["y"]))
    inits = [numpy_helper.from_array(table, "table"), numpy_helper.from_array(np.array(1, np.int64), "one"),
             numpy_helper.from_array(np.array([0], np.int64), "zero"),
             numpy_helper.from_array(np.array([np.iinfo(np.int64).max], np.int64), "open")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["B", "S", 8])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["B", "S", 8])], inits)
    model = to_ir(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)], ir_version=10))
    feeds = [{"x": rng.standard_normal((2, n, 8)).astype(np.float32)} for n in (3, 5)]
    _, parity = convert_and_compare(model, feeds, tmp_path)
    assert parity, parity.reason
    assert parity.cases == 2 and parity.scale > 1.0
