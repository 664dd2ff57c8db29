"""cond / while_loop / tensor lists, weight-compression constexprs and (de)quantize, against
values computed independently in the test."""

from __future__ import annotations

from typing import Any

import numpy as np
from coremltools.converters.mil.mil import types
from mil_eval_helpers import build, mb, run

OPS_TESTED = {"cond", "while_loop", "select", "make_list", "list_write", "list_read", "list_gather",
              "list_scatter", "list_length", "constexpr_affine_dequantize", "constexpr_cast",
              "constexpr_blockwise_shift_scale", "constexpr_lut_to_dense", "constexpr_sparse_to_dense",
              "constexpr_lut_to_sparse", "constexpr_sparse_blockwise_shift_scale", "quantize", "dequantize",
              "crop", "read_state"}


def _control_flow_program() -> Any:
    def body(v: Any) -> Any:
        def keep_going(i: Any, acc: Any) -> Any:
            return mb.less(x=i, y=np.int32(5))

        def step(i: Any, acc: Any) -> Any:
            return mb.add(x=i, y=np.int32(1)), mb.add(x=mb.mul(x=acc, y=np.float32(1.5)), y=v)

        _, acc = mb.while_loop(_cond=keep_going, _body=step, loop_vars=(np.int32(0), mb.mul(x=v, y=np.float32(0.0))))
        pred = mb.greater(x=mb.reduce_sum(x=v), y=np.float32(0.0))
        branch = mb.cond(pred=pred, _true_fn=lambda: mb.add(x=v, y=np.float32(1.0)),
                         _false_fn=lambda: mb.mul(x=v, y=np.float32(2.0)))
        ls = mb.make_list(init_length=3, elem_shape=[2], dtype="fp32", dynamic_length=False)
        ls = mb.list_write(ls=ls, index=np.int32(1), value=v)
        ls = mb.list_scatter(ls=ls, indices=np.array([2, 0], np.int32),
                             value=mb.stack(values=(mb.mul(x=v, y=np.float32(3.0)), v), axis=0))
        return (acc, branch, mb.list_read(ls=ls, index=np.int32(2)),
                mb.list_gather(ls=ls, indices=np.array([0, 1], np.int32)), mb.list_length(ls=ls))

    return build(body, [((2,), types.fp32)])


def test_control_flow_and_lists() -> None:
    prog = _control_flow_program()
    for x in (np.array([1.0, -0.5], np.float32), np.array([-1.0, 0.25], np.float32)):
        (acc, branch, read, gathered, length), seen = run(prog, {"x0": x})
        assert {"while_loop", "cond", "make_list", "list_write", "list_scatter", "list_read",
                "list_gather", "list_length"} <= seen
        want_acc = np.zeros_like(x)
        for _ in range(5):
            want_acc = want_acc * np.float32(1.5) + x
        np.testing.assert_allclose(acc, want_acc, rtol=1e-6)
        np.testing.assert_array_equal(branch, x + 1 if x.sum() > 0 else x * 2)
        np.testing.assert_array_equal(read, x * 3)
        np.testing.assert_array_equal(gathered, np.stack([x, x]))
        assert int(length) == 3


def test_select_broadcasts() -> None:
    cond = np.array([[True], [False]])
    prog = build(lambda a, b: mb.select(cond=cond, a=a, b=b), [((2, 3), types.fp32), ((3,), types.fp32)])
    a, b = np.arange(6, dtype=np.float32).reshape(2, 3), -np.arange(3, dtype=np.float32)
    (got,), seen = run(prog, {"x0": a, "x1": b})
    assert "select" in seen
    np.testing.assert_array_equal(got, np.where(cond, a, b))


def _blocks(value: np.ndarray, rows: int, cols: int) -> np.ndarray:
    return np.repeat(np.repeat(value, rows, 0), cols, 1)


def test_ios18_compression_ops() -> None:
    rng = np.random.default_rng(0)
    q = rng.integers(-8, 8, (4, 6)).astype(np.int8)
    scale = rng.uniform(0.1, 1, (2, 3)).astype(np.float32)
    offset = rng.integers(-2, 2, (2, 3)).astype(np.int8)
    idx = rng.integers(0, 4, (4, 6)).astype(types.np_uint2_dtype)
    lut = rng.standard_normal((1, 1, 4, 1)).astype(np.float32)
    mask = rng.random((4, 6)) > 0.5
    nonzero = rng.standard_normal(int(mask.sum())).astype(np.float32)
    nz_idx = rng.integers(0, 4, int(mask.sum())).astype(types.np_uint2_dtype)
    nz_q = rng.integers(-8, 8, int(mask.sum())).astype(np.int8)
    bit_mask = mask.astype(types.np_uint1_dtype)

    def body(v: Any) -> Any:
        shifted = mb.constexpr_blockwise_shift_scale(data=q, scale=scale, offset=offset)
        palettized = mb.constexpr_lut_to_dense(indices=idx, lut=lut)
        sparse = mb.constexpr_sparse_to_dense(nonzero_data=nonzero, mask=bit_mask)
        sparse_mask, sparse_lut = mb.constexpr_lut_to_sparse(indices_mask=bit_mask, indices_nonzero_data=nz_idx, lut=lut)
        q_mask, q_data = mb.constexpr_sparse_blockwise_shift_scale(
            data_mask=bit_mask, nonzero_data=nz_q, scale=np.ones((1, 1), np.float32) * 0.5, offset=np.ones((1, 1), np.int8))
        return [mb.add(x=v, y=w) for w in (
            shifted, palettized, sparse, mb.constexpr_sparse_to_dense(nonzero_data=sparse_lut, mask=sparse_mask),
            mb.constexpr_sparse_to_dense(nonzero_data=q_data, mask=q_mask))]

    prog = build(body, [((4, 6), types.fp32)], opset=18)
    outs, seen = run(prog, {"x0": np.zeros((4, 6), np.float32)})
    assert {"constexpr_blockwise_shift_scale", "constexpr_lut_to_dense", "constexpr_sparse_to_dense",
            "constexpr_lut_to_sparse", "constexpr_sparse_blockwise_shift_scale"} <= seen
    np.testing.assert_allclose(outs[0], (q - _blocks(offset, 2, 2)).astype(np.float32) * _blocks(scale, 2, 2))
    np.testing.assert_array_equal(outs[1], lut[0, 0, :, 0][idx.astype(np.int64)])
    for got, values in ((outs[2], nonzero), (outs[3], lut[0, 0, :, 0][nz_idx.astype(np.int64)]),
                        (outs[4], (nz_q.astype(np.float32) - 1) * 0.5)):
        want = np.zeros((4, 6), np.float32)
        want[mask] = values
        np.testing.assert_allclose(got, want, rtol=1e-6)


def test_ios16_constexprs() -> None:
    rng = np.random.default_rng(1)
    q = rng.integers(0, 255, (3, 4)).astype(np.uint8)
    zero_point = rng.integers(100, 150, 3).astype(np.uint8)
    scale = rng.uniform(0.01, 0.1, 3).astype(np.float32)
    half = rng.standard_normal((3, 4)).astype(np.float16)

    def body(v: Any) -> Any:
        deq = mb.constexpr_affine_dequantize(quantized_data=q, zero_point=zero_point, scale=scale, axis=0)
        return mb.add(x=v, y=deq), mb.add(x=v, y=mb.constexpr_cast(source_val=half, output_dtype="fp32"))

    (deq, cast), seen = run(build(body, [((3, 4), types.fp32)], opset=16), {"x0": np.zeros((3, 4), np.float32)})
    assert {"constexpr_affine_dequantize", "constexpr_cast"} <= seen
    want = (q.astype(np.float32) - zero_point[:, None].astype(np.float32)) * scale[:, None]
    np.testing.assert_allclose(deq, want, rtol=1e-6)
    np.testing.assert_array_equal(cast, half.astype(np.float32))


def test_quantize_dequantize_and_crop() -> None:
    x = np.random.default_rng(2).uniform(-3, 3, (2, 5)).astype(np.float32)
    scale, zp = np.array([0.02, 0.05], np.float32), np.array([3, -4], np.int8)

    def body(v: Any) -> Any:
        q = mb.quantize(input=v, scale=scale, zero_point=zp, axis=0, output_dtype="int8")
        return q, mb.dequantize(input=q, scale=scale, zero_point=zp, axis=0), mb.crop(
            x=mb.reshape(x=v, shape=[1, 1, 2, 5]), crop_height=[1, 0], crop_width=[1, 2])

    (q, dq, cropped), seen = run(build(body, [((2, 5), types.fp32)], opset=17), {"x0": x})
    assert {"quantize", "dequantize", "crop"} <= seen
    want_q = np.clip(np.round(x / scale[:, None]) + zp[:, None], -128, 127).astype(np.int8)
    np.testing.assert_array_equal(q, want_q)
    np.testing.assert_allclose(dq, (want_q.astype(np.float32) - zp[:, None]) * scale[:, None], rtol=1e-6)
    np.testing.assert_array_equal(cropped, x.reshape(1, 1, 2, 5)[:, :, 1:, 1:3])


def test_states_carry_from_call_to_call() -> None:
    """read_state / coreml_update_state (iOS18): an accumulator state; the caller's ``states``
    dict carries it to the next call, as Core ML's MLState does."""
    import coremltools as ct
    from coremltools.converters.mil.mil import Function, Placeholder, Program
    from coremltools.converters.mil.mil.program import StateTensorPlaceholder

    from unframe.converters.backends.coreml.mil_eval.evaluator import evaluate

    inputs = {"x": Placeholder([3], dtype=types.fp32), "acc": StateTensorPlaceholder([3], dtype=types.fp16)}
    with Function(inputs, opset_version=ct.target.iOS18) as func:
        before = mb.read_state(input=func.inputs["acc"])
        total = mb.add(x=before, y=mb.cast(x=func.inputs["x"], dtype="fp16"))
        mb.coreml_update_state(state=func.inputs["acc"], value=total)
        func.set_outputs([mb.cast(x=mb.mul(x=before, y=np.float16(2)), dtype="fp32", name="y")])
    program = Program()
    program.add_function("main", func)
    x = np.array([1.5, -2.0, 0.25], np.float32)
    states: dict[str, np.ndarray] = {}
    first = evaluate(program, {"x": x}, states=states)["y"]
    np.testing.assert_array_equal(first, np.zeros(3))  # a fresh state is zeros
    np.testing.assert_array_equal(states["acc"], x.astype(np.float16))
    second = evaluate(program, {"x": x}, states=states)["y"]
    np.testing.assert_array_equal(second, 2 * x)  # read before this call's update
    np.testing.assert_array_equal(states["acc"], (2 * x).astype(np.float16))
    assert states["acc"].dtype == np.float16
    again = evaluate(program, {"x": x})["y"]  # no states kept: starts from zeros again
    np.testing.assert_array_equal(again, np.zeros(3))
