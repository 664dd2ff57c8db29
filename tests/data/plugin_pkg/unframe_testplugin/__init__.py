"""A tiny third-party frontend: a linear layer stored as an .npz (W, b) file."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from unframe.converters.base import ExportResult, Frontend
from unframe.validate.runner import Runner


class LinearNpzFrontend(Frontend):
    name = "linear-npz"
    description = "y = x @ W + b from an .npz with arrays W and b"
    suffixes = (".npz",)

    def load(self, source, opts):
        with np.load(Path(source)) as data:
            return {"W": data["W"], "b": data["b"]}

    def to_onnx(self, native, spec, opts):
        w, b = native["W"], native["b"]
        graph = helper.make_graph(
            [helper.make_node("Gemm", ["x", "W", "b"], ["y"])], "linear",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", w.shape[0]])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", w.shape[1]])],
            [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "b")])
        proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opts.opset or 13)])
        proto.ir_version = 8
        feeds = [{"x": np.random.default_rng(i).standard_normal((i + 2, w.shape[0])).astype(np.float32)}
                 for i in range(2)]
        return ExportResult(model=ir.serde.deserialize_model(proto), tool="unframe-testplugin",
                            opset=opts.opset or 13, feeds=feeds)

    def runner(self, native, export):
        return _NumpyLinear(native)


class _NumpyLinear(Runner):
    name = "numpy linear"

    def __init__(self, native):
        self.native = native

    def run(self, feeds):
        return {"y": feeds["x"] @ self.native["W"] + self.native["b"]}


__all__ = ["LinearNpzFrontend", "onnx"]
