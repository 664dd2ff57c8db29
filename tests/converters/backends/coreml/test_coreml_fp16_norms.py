"""Normalization statistics in float32 in 16-bit CoreML programs, and a 16-bit emulation that
rounds what the backend rounds (issue 36).

A variance squares ``x - mean``: in fp16 it overflows once |x - mean| passes 256. torchvision's
FCOS (GroupNorm heads, activations near 400) came out of an fp16 package with 61 of 80 outputs off
by up to 72, and the rounding emulation, which ran the norm as one float32 kernel, predicted
nothing. Each test runs the saved fp16 package with the MIL evaluator against onnxruntime on the
float32 graph."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from coreml_helpers import to_ir
from onnx import TensorProto, helper, numpy_helper

from unframe.converters.backends.coreml.backend import CoreMLBackend
from unframe.converters.base import Target
from unframe.passes import KEEP_FP32
from unframe.validate.onnxruntime import OnnxRuntimeRunner
from unframe.validate.rounding import WIDEN, plan_keep_fp32, rounding_error

pytestmark = pytest.mark.usefixtures("coreml")


def _rng(seed: int = 36) -> np.random.Generator:
    return np.random.default_rng(seed)  # one per test: its draws don't depend on which tests ran


def _model(nodes: list, inputs: list, outputs: list, inits: list, opset: int = 21) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "norm", inputs, outputs, inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


def _fcos_head(gain: float = 1.0) -> onnx.ModelProto:
    """Conv 3x3 (16 -> 32 channels) + GroupNorm(8) + Relu, as FCOS's heads; the Conv's outputs
    sit near 400 with a spread past 256 around their group means (``gain`` scales them)."""
    rng = _rng(7)
    w = (rng.standard_normal((32, 16, 3, 3)) * 6.0 * gain).astype(np.float32)
    b = (rng.uniform(300, 500, 32) * gain).astype(np.float32)
    scale = rng.uniform(0.5, 1.5, 32).astype(np.float32)
    bias = rng.uniform(-0.5, 0.5, 32).astype(np.float32)
    nodes = [helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("GroupNormalization", ["c", "scale", "bias"], ["g"], num_groups=8),
             helper.make_node("Relu", ["g"], ["y"])]
    return _model(nodes, [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 16, 10, 8])],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 32, 10, 8])],
                  [numpy_helper.from_array(a, n) for a, n in ((w, "w"), (b, "b"), (scale, "scale"), (bias, "bias"))])


def _fp16_run(model: ir.Model, feeds: dict[str, np.ndarray], tmp_path: Path) -> dict[str, np.ndarray]:
    """The saved package, converted at fp16 (the default), run by the MIL evaluator."""
    backend, target = CoreMLBackend(), Target("coreml", options={"precision": "fp16"})
    assert not backend.check(model, target)
    artifact = backend.convert(model, target, tmp_path)
    return backend.runner(artifact, target).run(feeds)


def _worst(want: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> tuple[float, float]:
    """(largest |got - want|, the output's scale) over the outputs; inf where got isn't finite."""
    err = scale = 0.0
    for name, a in want.items():
        b = np.asarray(got[name], np.float64)
        err = max(err, float(np.abs(b - a).max()) if np.all(np.isfinite(b)) else float("inf"))
        scale = max(scale, float(np.abs(a).max()))
    return err, scale


def test_a_groupnorm_head_near_400_matches_at_fp16(tmp_path: Path):
    proto = _fcos_head()
    feeds = {"x": _rng(1).standard_normal((1, 16, 10, 8)).astype(np.float32)}
    conv = OnnxRuntimeRunner(_model([proto.graph.node[0]], list(proto.graph.input),
                                    [helper.make_tensor_value_info("c", TensorProto.FLOAT, None)],
                                    list(proto.graph.initializer))).run(feeds)["c"]
    groups = conv.reshape(8, -1)
    assert np.abs(groups - groups.mean(axis=1, keepdims=True)).max() > 256  # (x - mean)^2 past fp16
    want = OnnxRuntimeRunner(proto).run(feeds)
    err, scale = _worst(want, _fp16_run(to_ir(proto), feeds, tmp_path))
    assert 1.0 < scale < 10.0
    assert err < 0.01 * scale, f"fp16 GroupNorm off by {err:.3g} at scale {scale:.3g}"


def _one_node(op: str, shape: tuple[int, ...], **attrs: object) -> onnx.ModelProto:
    rng = _rng(2)
    inputs = ["x"]
    inits = []
    channels = shape[1]
    if op in ("LayerNormalization",):
        inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, shape[-1]).astype(np.float32), "s"),
                 numpy_helper.from_array(rng.uniform(-1, 1, shape[-1]).astype(np.float32), "b")]
    elif op in ("InstanceNormalization", "GroupNormalization"):
        inits = [numpy_helper.from_array(rng.uniform(0.5, 1.5, channels).astype(np.float32), "s"),
                 numpy_helper.from_array(rng.uniform(-1, 1, channels).astype(np.float32), "b")]
    inputs += [i.name for i in inits]
    if op in ("ReduceL2", "ReduceLogSum"):
        inits.append(numpy_helper.from_array(np.array([-1], np.int64), "axes"))
        inputs.append("axes")
    node = helper.make_node(op, inputs, ["y"], **attrs)
    return _model([node], [helper.make_tensor_value_info("x", TensorProto.FLOAT, list(shape))],
                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)], inits)


# (op, shape, attributes, the input: values whose squares or sums leave fp16's range)
CASES = [
    ("LayerNormalization", (2, 6, 32), {}, lambda s, r: r.standard_normal(s) * 2 + np.where(np.arange(s[-1]) == 3, 3000, 0)),
    ("InstanceNormalization", (1, 4, 6, 6), {}, lambda s, r: r.standard_normal(s) * 300 + 400),
    ("GroupNormalization", (1, 4, 6, 6), {"num_groups": 2}, lambda s, r: r.standard_normal(s) * 300 + 400),
    ("MeanVarianceNormalization", (1, 3, 5, 5), {}, lambda s, r: r.standard_normal(s) * 300 + 400),
    ("LpNormalization", (2, 3, 16), {"axis": -1}, lambda s, r: r.standard_normal(s) * 400),
    ("LRN", (1, 8, 4, 4), {"size": 3}, lambda s, r: r.standard_normal(s) * 400),
    ("ReduceL2", (2, 3, 16), {}, lambda s, r: r.standard_normal(s) * 400),
    ("ReduceLogSum", (2, 3, 1000), {}, lambda s, r: r.uniform(60, 100, s)),
]


@pytest.mark.parametrize(("op", "shape", "attrs", "draw"), CASES, ids=[c[0] for c in CASES])
def test_statistics_past_fp16s_range_are_computed_in_float32(op, shape, attrs, draw, tmp_path: Path):
    proto = _one_node(op, shape, **attrs)
    feeds = {"x": draw(shape, _rng(3)).astype(np.float32)}
    want = OnnxRuntimeRunner(proto).run(feeds)
    err, scale = _worst(want, _fp16_run(to_ir(proto), feeds, tmp_path))
    assert scale > 0.5
    assert err < 0.01 * scale, f"{op} at fp16: off by {err:.3g} at scale {scale:.3g}"


def test_the_emulation_predicts_the_packages_fp16_error(tmp_path: Path):
    """What the parity floor rests on: the package's error is within ``WIDEN`` times what the
    emulation says 16-bit rounding costs the graph (the emulation rounds what the backend
    rounds). Before the change the package's GroupNorm overflowed while the emulation, which
    ran it as one float32 kernel, said the graph was fine."""
    proto = _fcos_head()
    rng = _rng(4)
    feeds = [{"x": rng.standard_normal((1, 16, 10, 8)).astype(np.float32)} for _ in range(2)]
    model = to_ir(proto)
    emulated = rounding_error(model, feeds, "fp16")
    assert emulated is not None and not emulated.nonfinite
    worst = 0.0
    for k, feed in enumerate(feeds):
        err, _ = _worst(OnnxRuntimeRunner(proto).run(feed), _fp16_run(to_ir(proto), feed, tmp_path / str(k)))
        worst = max(worst, err)
    assert 0 < emulated.errors["y"] and worst <= WIDEN * emulated.errors["y"], (worst, emulated.errors["y"])


def test_a_node_that_overflows_fp16_is_found_and_kept_in_float32(tmp_path: Path):
    """A Conv whose outputs pass 65504 feeds a GroupNorm that brings them back to order one: in
    fp16 the Conv overflows and the output is NaN. The emulation finds it (the GroupNorm, computed
    in float32 by the backend, reads what the Conv stores), the planner keeps the Conv in float32,
    and the package then matches."""
    proto = _fcos_head(gain=250.0)  # the Conv bias itself is past 65504 too
    feeds = [{"x": _rng(5).standard_normal((1, 16, 10, 8)).astype(np.float32)}]
    want = OnnxRuntimeRunner(proto).run(feeds[0])
    model = to_ir(proto)
    plain, _ = _worst(want, _fp16_run(model, feeds[0], tmp_path / "plain"))
    assert plain == float("inf")
    measured = rounding_error(model, feeds, "fp16")
    assert measured is not None and measured.nonfinite == ["y"]
    plan = plan_keep_fp32(model, feeds, "fp16", lambda _name, scale: 0.01 * scale)
    nodes = list(model.graph)
    assert plan is not None and plan.enough and [nodes[p].op_type for p in plan.positions] == ["Conv"]
    for position in plan.positions:
        nodes[position].metadata_props[KEEP_FP32] = "1"
    err, scale = _worst(want, _fp16_run(model, feeds[0], tmp_path / "kept"))
    assert err < 0.01 * scale
