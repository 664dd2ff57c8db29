"""Kernels against coremltools' own constant folding (each op's ``value_inference``).

Every case builds one op on random constants with coremltools' builder; the builder folds it
(that is coremltools' reference value) and the evaluator computes it with our kernel.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from mil_eval_helpers import build, flat, mb, run

Case = tuple[str, int, Callable[[np.random.Generator], Any]]


def f32(rng: np.random.Generator, *shape: int, low: float = -2.0, high: float = 2.0) -> np.ndarray:
    return rng.uniform(low, high, size=shape).astype(np.float32)


def i32(rng: np.random.Generator, *shape: int, low: int = 0, high: int = 5) -> np.ndarray:
    return rng.integers(low, high, size=shape).astype(np.int32)


UNARY = ["abs", "ceil", "cos", "cosh", "exp", "exp2", "floor", "round", "sign", "sin", "sinh",
         "square", "tan", "tanh", "atan", "erf", "relu", "relu6", "sigmoid", "softplus", "softsign",
         ]
UNIT_DOMAIN = ["acos", "asin", "atanh"]
POSITIVE = ["sqrt", "rsqrt", "log", "inverse"]
BINARY = ["add", "sub", "mul", "maximum", "minimum", "real_div", "floor_div", "mod", "equal",
          "not_equal", "greater", "greater_equal", "less", "less_equal"]
REDUCE = ["reduce_sum", "reduce_mean", "reduce_max", "reduce_min", "reduce_prod", "reduce_l1_norm",
          "reduce_l2_norm", "reduce_sum_square", "reduce_log_sum_exp"]

CASES: list[Case] = []
CASES += [(op, 17, lambda r, op=op: getattr(mb, op)(x=f32(r, 2, 3, 4))) for op in UNARY]
CASES += [(op, 17, lambda r, op=op: getattr(mb, op)(x=f32(r, 3, 4, low=-0.9, high=0.9))) for op in UNIT_DOMAIN]
CASES += [(op, 17, lambda r, op=op: getattr(mb, op)(x=f32(r, 3, 4, low=0.1, high=3))) for op in POSITIVE]
CASES += [(op, 17, lambda r, op=op: getattr(mb, op)(x=f32(r, 2, 3, 4), y=f32(r, 3, 1, low=0.5))) for op in BINARY]
CASES += [(op, 17, lambda r, op=op: getattr(mb, op)(x=i32(r, 2, 3, low=-9, high=9), y=i32(r, 3, low=1)))
          for op in ("add", "mul", "floor_div", "mod", "real_div")]
CASES += [(op, 17, lambda r, op=op, k=k: getattr(mb, op)(x=f32(r, 2, 3, 4), axes=[1], keep_dims=k))
          for op in REDUCE for k in (False, True)]
CASES += [
    ("pow", 17, lambda r: mb.pow(x=f32(r, 3, 4, low=0.1, high=3), y=f32(r, 4))),
    ("reduce_log_sum", 17, lambda r: mb.reduce_log_sum(x=f32(r, 2, 3, low=0.1), axes=[0, 1])),
    ("reduce_sum", 17, lambda r: mb.reduce_sum(x=f32(r, 2, 3, 4))),
    ("reduce_argmax", 17, lambda r: mb.reduce_argmax(x=f32(r, 3, 5), axis=1)),
    ("reduce_argmin", 17, lambda r: mb.reduce_argmin(x=f32(r, 3, 5), axis=0, keep_dims=True)),
    ("logical_and", 17, lambda r: mb.logical_and(x=f32(r, 4) > 0, y=f32(r, 4) > 0)),
    ("logical_or", 17, lambda r: mb.logical_or(x=f32(r, 4) > 0, y=f32(r, 4) > 0)),
    ("logical_xor", 17, lambda r: mb.logical_xor(x=f32(r, 4) > 0, y=f32(r, 4) > 0)),
    ("logical_not", 17, lambda r: mb.logical_not(x=f32(r, 4) > 0)),
    ("clip", 17, lambda r: mb.clip(x=f32(r, 3, 4), alpha=np.float32(-0.5), beta=np.float32(0.7))),
    ("threshold", 17, lambda r: mb.threshold(x=f32(r, 3, 4), alpha=np.float32(0.3))),
    ("cast", 17, lambda r: mb.cast(x=f32(r, 3, 4, low=-5, high=5), dtype="int32")),
    ("cast", 17, lambda r: mb.cast(x=f32(r, 3, 4), dtype="fp16")),
    ("cast", 17, lambda r: mb.cast(x=i32(r, 3, 4), dtype="fp32")),
    ("elu", 17, lambda r: mb.elu(x=f32(r, 3, 4), alpha=np.float32(0.7))),
    ("leaky_relu", 17, lambda r: mb.leaky_relu(x=f32(r, 3, 4), alpha=np.float32(0.1))),
    ("thresholded_relu", 17, lambda r: mb.thresholded_relu(x=f32(r, 3, 4), alpha=np.float32(0.4))),
    ("clamped_relu", 17, lambda r: mb.clamped_relu(x=f32(r, 3, 4), alpha=np.float32(0.2), beta=np.float32(1.0))),
    ("linear_activation", 17, lambda r: mb.linear_activation(x=f32(r, 3, 4), alpha=np.float32(1.5), beta=np.float32(-0.2))),
    ("scaled_tanh", 17, lambda r: mb.scaled_tanh(x=f32(r, 3, 4), alpha=np.float32(1.2), beta=np.float32(0.8))),
    ("sigmoid_hard", 17, lambda r: mb.sigmoid_hard(x=f32(r, 3, 4), alpha=np.float32(0.3), beta=np.float32(0.4))),
    ("prelu", 17, lambda r: mb.prelu(x=f32(r, 1, 3, 4, 4), alpha=f32(r, 3, low=0, high=1))),
    ("softplus_parametric", 17, lambda r: mb.softplus_parametric(x=f32(r, 1, 3, 4, 4), alpha=f32(r, 3, low=0.5), beta=f32(r, 3, low=0.5))),
    ("gelu", 17, lambda r: mb.gelu(x=f32(r, 3, 4))),
    ("gelu", 17, lambda r: mb.gelu(x=f32(r, 3, 4), mode="TANH_APPROXIMATION")),
    ("gelu", 17, lambda r: mb.gelu(x=f32(r, 3, 4), mode="SIGMOID_APPROXIMATION")),
    ("softmax", 17, lambda r: mb.softmax(x=f32(r, 2, 3, 4), axis=1)),
    ("l2_norm", 17, lambda r: mb.l2_norm(x=f32(r, 2, 3, 4, 5))),
    ("layer_norm", 17, lambda r: mb.layer_norm(x=f32(r, 2, 3, 4), axes=[-1], gamma=f32(r, 4), beta=f32(r, 4))),
    ("layer_norm", 17, lambda r: mb.layer_norm(x=f32(r, 2, 3, 4), axes=[1, 2], epsilon=np.float32(1e-3))),
    ("matmul", 17, lambda r: mb.matmul(x=f32(r, 2, 3, 4), y=f32(r, 4, 5))),
    ("matmul", 17, lambda r: mb.matmul(x=f32(r, 2, 4, 3), y=f32(r, 2, 5, 4), transpose_x=True, transpose_y=True)),
    ("linear", 17, lambda r: mb.linear(x=f32(r, 2, 4), weight=f32(r, 3, 4), bias=f32(r, 3))),
    ("einsum", 17, lambda r: mb.einsum(values=(f32(r, 2, 3, 4, 5), f32(r, 2, 5, 4, 6)), equation="abcd,adce->abce")),
    ("reshape", 17, lambda r: mb.reshape(x=f32(r, 2, 3, 4), shape=[0, -1])),
    ("reshape", 15, lambda r: mb.reshape(x=f32(r, 2, 3, 4), shape=[4, 3, 2])),
    ("transpose", 17, lambda r: mb.transpose(x=f32(r, 2, 3, 4), perm=[2, 0, 1])),
    ("expand_dims", 17, lambda r: mb.expand_dims(x=f32(r, 2, 3), axes=[0, -1])),
    ("squeeze", 17, lambda r: mb.squeeze(x=f32(r, 1, 3, 1, 2), axes=[2])),
    ("squeeze", 17, lambda r: mb.squeeze(x=f32(r, 1, 3, 1, 2))),
    ("slice_by_index", 17, lambda r: mb.slice_by_index(x=f32(r, 5, 6, 7), begin=[1, 0, 6], end=[4, 6, 0],
                                                       stride=[2, 1, -2], end_mask=[False, True, False])),
    ("slice_by_index", 17, lambda r: mb.slice_by_index(x=f32(r, 5, 6), begin=[2, 1], end=[3, 5],
                                                       squeeze_mask=[True, False], begin_mask=[False, True])),
    ("slice_by_size", 17, lambda r: mb.slice_by_size(x=f32(r, 5, 6), begin=[1, 2], size=[3, -1])),
    ("reverse", 17, lambda r: mb.reverse(x=f32(r, 3, 4), axes=[1])),
    ("band_part", 17, lambda r: mb.band_part(x=f32(r, 2, 4, 5), lower=np.int32(1), upper=np.int32(2))),
    ("cumsum", 17, lambda r: mb.cumsum(x=f32(r, 3, 4), axis=1)),
    ("cumsum", 17, lambda r: mb.cumsum(x=f32(r, 3, 4), axis=0, reverse=True)),
    ("fill", 17, lambda r: mb.fill(shape=np.array([2, 3], np.int32), value=np.float32(1.5))),
    ("non_zero", 17, lambda r: mb.non_zero(x=i32(r, 3, 4, high=2))),
    ("pad", 17, lambda r: mb.pad(x=f32(r, 2, 3, 4), pad=np.array([1, 2, 0, 1], np.int32), mode="constant", constant_val=np.float32(0.5))),
    ("pad", 17, lambda r: mb.pad(x=f32(r, 2, 3, 4), pad=np.array([1, 2, 2, 1], np.int32), mode="reflect")),
    ("pad", 17, lambda r: mb.pad(x=f32(r, 2, 3, 4), pad=np.array([0, 0, 1, 2, 3, 0], np.int32), mode="replicate")),
    ("range_1d", 17, lambda r: mb.range_1d(start=np.int32(2), end=np.int32(11), step=np.int32(3))),
    ("range_1d", 17, lambda r: mb.range_1d(start=np.float32(0.5), end=np.float32(3.0), step=np.float32(0.25))),
    ("tile", 17, lambda r: mb.tile(x=f32(r, 2, 3), reps=[2, 3])),
    ("argsort", 17, lambda r: mb.argsort(x=f32(r, 3, 6), axis=1)),
    ("argsort", 17, lambda r: mb.argsort(x=f32(r, 3, 6), axis=0, ascending=True)),
    ("topk", 17, lambda r: mb.topk(x=f32(r, 3, 6), k=3, axis=1)),
    ("topk", 15, lambda r: mb.topk(x=f32(r, 3, 6), k=2, axis=0, ascending=True)),
    ("flatten2d", 17, lambda r: mb.flatten2d(x=f32(r, 2, 3, 4), axis=2)),
    ("concat", 17, lambda r: mb.concat(values=(f32(r, 2, 3), f32(r, 2, 1)), axis=1)),
    ("split", 17, lambda r: mb.split(x=f32(r, 6, 4), num_splits=3, axis=0)),
    ("split", 17, lambda r: mb.split(x=f32(r, 6, 4), split_sizes=[1, 3], axis=1)),
    ("stack", 17, lambda r: mb.stack(values=(f32(r, 2, 3), f32(r, 2, 3)), axis=1)),
    ("identity", 17, lambda r: mb.identity(x=f32(r, 2, 3))),
    ("select", 17, lambda r: mb.select(cond=f32(r, 3, 4) > 0, a=f32(r, 3, 4), b=f32(r, 4))),
    ("gather", 17, lambda r: mb.gather(x=f32(r, 4, 5), indices=np.array([[3, -1], [0, 2]], np.int32), axis=1)),
    ("gather", 16, lambda r: mb.gather(x=f32(r, 2, 4, 5), indices=i32(r, 2, 3, high=4), axis=1, batch_dims=1)),
    ("gather_along_axis", 17, lambda r: mb.gather_along_axis(x=f32(r, 4, 5), indices=i32(r, 2, 5, high=4), axis=0)),
    ("scatter_along_axis", 17, lambda r: mb.scatter_along_axis(data=f32(r, 4, 3), indices=np.array([[3, 1, 0]], np.int32), updates=f32(r, 1, 3), axis=0, mode="update")),
    ("shape", 17, lambda r: mb.shape(x=f32(r, 2, 3, 4))),
]


def _case_id(case: Case) -> str:
    return f"{case[0]}@iOS{case[1]}"


@pytest.mark.parametrize("index", range(len(CASES)), ids=[f"{i}-{_case_id(c)}" for i, c in enumerate(CASES)])
def test_kernel_matches_coremltools_folding(index: int) -> None:
    op_type, opset, body = CASES[index]
    rng = np.random.default_rng(index)
    prog = build(lambda: body(rng), opset=opset)
    expected = [var.val for var in prog.functions["main"].outputs]
    if any(value is None for value in expected):
        pytest.fail(f"coremltools did not fold {op_type}; the case belongs with the reference tests")
    got, seen = run(prog)
    assert op_type in seen
    for ours, theirs in zip(got, expected, strict=True):
        theirs = np.asarray(theirs)
        assert ours.shape == theirs.shape
        if ours.dtype.kind in "fc":
            np.testing.assert_allclose(ours, theirs.astype(ours.dtype), rtol=1e-5, atol=1e-6)
        else:
            np.testing.assert_array_equal(ours, theirs)


OPS_TESTED = {case[0] for case in CASES}
assert flat  # re-exported helper used by other modules
