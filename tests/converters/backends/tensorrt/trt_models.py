"""Models and skip conditions for the TensorRT backend tests: small graphs built with onnx.helper
and the skip conditions of the three tiers."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper, numpy_helper

from unframe.converters.backends.tensorrt import trtmodule

F = TensorProto.FLOAT


def trt_or_skip():
    trt = trtmodule.load_or_none()
    if trt is None:
        pytest.skip("needs tensorrt or tensorrt-rtx-cu12 (the 'tensorrt' extra)")
    return trt


def gpu_or_skip() -> trtmodule.CudaDevice:
    device = trtmodule.cuda_device()
    if isinstance(device, str):
        pytest.skip(f"needs a CUDA device ({device})")
    return device


def make_model(nodes: Sequence[onnx.NodeProto], inputs: Sequence[onnx.ValueInfoProto],
               outputs: Sequence[onnx.ValueInfoProto], initializers: Sequence[onnx.TensorProto] = (),
               opset: int = 21) -> ir.Model:
    graph = helper.make_graph(list(nodes), "g", list(inputs), list(outputs), list(initializers))
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)
    return ir.from_proto(proto)


def vi(name: str, shape: Sequence[int | str] | None, dtype: int = F) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def const(name: str, array: np.ndarray) -> onnx.TensorProto:
    return numpy_helper.from_array(np.asarray(array), name)


def cnn_model(batch: int | str = "N", seed: int = 0) -> ir.Model:
    """x[N,3,16,16] -> Conv -> BatchNorm -> Relu -> MaxPool -> Conv -> GlobalAveragePool ->
    Flatten -> Gemm -> Softmax -> y[N,5]."""
    rng = np.random.default_rng(seed)
    inits = [
        const("w1", rng.standard_normal((8, 3, 3, 3)).astype(np.float32) * 0.3),
        const("b1", rng.standard_normal(8).astype(np.float32) * 0.1),
        const("scale", rng.uniform(0.5, 1.5, 8).astype(np.float32)),
        const("bias", rng.standard_normal(8).astype(np.float32) * 0.1),
        const("mean", rng.standard_normal(8).astype(np.float32) * 0.1),
        const("var", rng.uniform(0.5, 1.5, 8).astype(np.float32)),
        const("w2", rng.standard_normal((6, 8, 3, 3)).astype(np.float32) * 0.2),
        const("wf", rng.standard_normal((5, 6)).astype(np.float32) * 0.5),
        const("bf", rng.standard_normal(5).astype(np.float32) * 0.1),
    ]
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("BatchNormalization", ["c1", "scale", "bias", "mean", "var"], ["bn"],
                         name="bn"),
        helper.make_node("Relu", ["bn"], ["r1"], name="relu1"),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2],
                         name="pool"),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("GlobalAveragePool", ["c2"], ["g"], name="gap"),
        helper.make_node("Flatten", ["g"], ["f"], name="flatten"),
        helper.make_node("Gemm", ["f", "wf", "bf"], ["logits"], transB=1, name="fc"),
        helper.make_node("Softmax", ["logits"], ["y"], axis=1, name="softmax"),
    ]
    return make_model(nodes, [vi("x", [batch, 3, 16, 16])], [vi("y", [batch, 5])], inits)


def torch_model(module, args: tuple, input_names: list[str], output_names: list[str],
                dynamic_axes: dict | None = None, opset: int = 17) -> ir.Model:
    """Export with torch.onnx's TorchScript exporter (fast, and a different graph style from the
    helper-built ones); skipped without torch."""
    torch = pytest.importorskip("torch", reason="needs torch to export the model")
    import io

    buffer = io.BytesIO()
    # Not under no_grad: that sends nn.TransformerEncoderLayer down its fused fast path, which
    # has no ONNX export.
    torch.onnx.export(module.eval(), args, buffer, dynamo=False, opset_version=opset,
                      input_names=input_names, output_names=output_names,
                      dynamic_axes=dynamic_axes)
    proto = onnx.load_from_string(buffer.getvalue())
    proto.ir_version = min(proto.ir_version, 10)
    return ir.from_proto(proto)


def ort_run(model: ir.Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from unframe.validate.onnxruntime import OnnxRuntimeRunner

    proto = ir.to_proto(model)
    proto.ir_version = min(proto.ir_version, 10)
    return OnnxRuntimeRunner(proto).run(feeds)
