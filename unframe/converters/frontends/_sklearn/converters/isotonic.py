"""IsotonicRegression, which skl2onnx has no converter for, registered with its own hook.

``predict`` is ``np.interp(x, X_thresholds_, y_thresholds_)`` after clipping (or NaN outside
the fitted range when ``out_of_bounds="nan"``). As a graph, with K thresholds t and values v::

    x [N,1] -> Cast(double) -> Clip(t0, tK-1) -> xc
    i   = ReduceSum(Cast(xc >= t[1:K-1]), axis=1)          segment index in [0, K-2]
    x0, x1, y0, y1 = Gather(t, i), Gather(t, i+1), Gather(v, i), Gather(v, i+1)
    y   = y0 + (y1 - y0) / (x1 - x0) * (xc - x0)            -> variable [N,1]
    (out_of_bounds="nan": Where(x < t0 or x > tK-1, NaN, y)) -> Cast(input type) -> variable
"""

from __future__ import annotations

from typing import Any

import numpy as np


class _Graph:
    """Small helper over a skl2onnx container: unique names, typed constants."""

    def __init__(self, scope: Any, container: Any, dtype: type) -> None:
        self.scope, self.container, self.dtype = scope, container, dtype

    def const(self, value: Any, dtype: Any = None) -> str:
        from onnx import numpy_helper

        arr = np.asarray(value, dtype=dtype or self.dtype)
        name = self.scope.get_unique_variable_name("iso_c")
        tensor = numpy_helper.from_array(arr, name)
        self.container.add_initializer(name, tensor.data_type, list(arr.shape),
                                       arr.ravel().tolist())
        return name

    def op(self, op_type: str, inputs: list[str], output: str | None = None, **attrs: Any) -> str:
        out = output or self.scope.get_unique_variable_name(f"iso_{op_type.lower()}")
        self.container.add_node(op_type, inputs, out,
                                name=self.scope.get_unique_operator_name(op_type), **attrs)
        return out


def _input(g: _Graph, operator: Any) -> str:
    from onnx import TensorProto

    x = operator.inputs[0].full_name
    to = TensorProto.DOUBLE if g.dtype == np.float64 else TensorProto.FLOAT
    x = g.op("Cast", [x], to=to)
    return g.op("Reshape", [x, g.const([-1, 1], np.int64)])


def _interpolate(g: _Graph, xc: str, t: np.ndarray, v: np.ndarray) -> str:
    from onnx import TensorProto

    inner = g.const(t[1:-1].reshape(1, -1))
    ge = g.op("Cast", [g.op("GreaterOrEqual", [xc, inner])], to=TensorProto.INT64)
    idx = g.op("ReduceSum", [ge, g.const([1], np.int64)], keepdims=1)
    idx1 = g.op("Add", [idx, g.const([[1]], np.int64)])
    tt, vv = g.const(t), g.const(v)
    x0, x1 = g.op("Gather", [tt, idx]), g.op("Gather", [tt, idx1])
    y0, y1 = g.op("Gather", [vv, idx]), g.op("Gather", [vv, idx1])
    # Duplicate thresholds give a zero-width segment; np.interp then returns its left value.
    width = g.op("Sub", [x1, x0])
    zero = g.const(0.0)
    is_flat = g.op("Equal", [width, zero])
    safe = g.op("Where", [is_flat, g.const(1.0), width])
    rise = g.op("Where", [is_flat, zero, g.op("Sub", [y1, y0])])
    slope = g.op("Div", [rise, safe])
    return g.op("Add", [y0, g.op("Mul", [slope, g.op("Sub", [xc, x0])])])


def convert_isotonic(scope: Any, operator: Any, container: Any) -> None:
    """Computed in float64 whatever the input type (the cast of a float32 input is exact), so
    that clipping and the NaN bounds use scikit-learn's float64 thresholds: with float32
    thresholds a sample rounding onto the last threshold flips between NaN and a value."""
    from onnx import TensorProto
    from skl2onnx.common.data_types import guess_numpy_type

    model = operator.raw_operator
    double_io = guess_numpy_type(operator.inputs[0].type) == np.float64
    g = _Graph(scope, container, np.float64)
    t = np.asarray(model.X_thresholds_, dtype=np.float64)
    v = np.asarray(model.y_thresholds_, dtype=np.float64)
    out = operator.outputs[0].full_name
    x = _input(g, operator)
    if len(t) == 1:
        y = g.op("Add", [g.op("Mul", [x, g.const(0.0)]), g.const(v[0])])
    else:
        xc = g.op("Clip", [x, g.const(t[0]), g.const(t[-1])])
        if len(t) == 2:
            t, v = np.concatenate([t, t[-1:]]), np.concatenate([v, v[-1:]])
        y = _interpolate(g, xc, t, v)
    if model.out_of_bounds == "nan":
        outside = g.op("Or", [g.op("Less", [x, g.const(t[0])]),
                              g.op("Greater", [x, g.const(t[-1])])])
        y = g.op("Where", [outside, g.const(np.nan), y])
    g.op("Cast", [y], out, to=TensorProto.DOUBLE if double_io else TensorProto.FLOAT)


def register() -> None:
    from skl2onnx import update_registered_converter
    from skl2onnx.common.shape_calculator import calculate_linear_regressor_output_shapes
    from sklearn.isotonic import IsotonicRegression

    update_registered_converter(IsotonicRegression, "UnframeIsotonicRegression",
                                calculate_linear_regressor_output_shapes, convert_isotonic)
