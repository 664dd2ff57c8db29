"""Ops coremltools' own converters take that unframe refused (issue 36), and two crashes (issue 34):
each a one-node (or one-block) graph converted to a saved package, run by the MIL evaluator and
compared with onnxruntime on the same graph. onnx's own node cases for these ops run in
test_coreml_node_cases.py; the graphs here reach what those cases don't (out-of-range grids,
reflection with align_corners, run-time resize sizes, dynamic scatter indices, rank-6 views)."""

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
from unframe.validate.onnxruntime import OnnxRuntimeRunner

pytestmark = pytest.mark.usefixtures("coreml")
RNG = np.random.default_rng(3636)
F, I64 = TensorProto.FLOAT, TensorProto.INT64


def _graph(nodes: list, inputs: list, outputs: list, inits: tuple = (), opset: int = 21) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "g", inputs, outputs, list(inits))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10 if opset > 13 else 7)


def _io(name: str, dtype: int, shape: list | None) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, dtype, shape)


def _run(proto: onnx.ModelProto, feeds: dict[str, np.ndarray], tmp_path: Path, precision: str = "fp32",
         **options: object) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], list[str]]:
    """(onnxruntime's outputs, the package's outputs, the backend's notes)."""
    model = to_ir(proto)
    backend = CoreMLBackend()
    target = Target("coreml", options={"precision": precision, **options})
    blockers = backend.check(model, target)
    assert not blockers, [str(b) for b in blockers]
    artifact = backend.convert(model, target, tmp_path)
    got = backend.runner(artifact, target).run(feeds)
    return OnnxRuntimeRunner(proto).run(feeds), got, list(artifact.notes)


def _close(want: dict[str, np.ndarray], got: dict[str, np.ndarray], tol: float = 1e-5) -> None:
    for name, a in want.items():
        b = np.asarray(got[name])
        assert b.shape == a.shape, (name, b.shape, a.shape)
        if a.dtype.kind in "iub":
            np.testing.assert_array_equal(b.astype(a.dtype), a, err_msg=name)
        else:
            scale = max(float(np.abs(a).max()), 1.0)
            np.testing.assert_allclose(b, a, rtol=0, atol=tol * scale, err_msg=name)


# -- GridSample -----------------------------------------------------------------------------------

@pytest.mark.parametrize("mode", ["linear", "nearest"])
@pytest.mark.parametrize("padding", ["zeros", "border", "reflection"])
@pytest.mark.parametrize("align", [0, 1])
def test_grid_sample_far_outside_the_image(mode: str, padding: str, align: int, tmp_path: Path):
    """Grid points up to 3x past the borders (reflection folds them several times)."""
    node = helper.make_node("GridSample", ["x", "grid"], ["y"], mode=mode, padding_mode=padding, align_corners=align)
    proto = _graph([node], [_io("x", F, [2, 3, 5, 7]), _io("grid", F, [2, 4, 6, 2])], [_io("y", F, None)])
    grid = RNG.uniform(-3.2, 3.2, (2, 4, 6, 2)).astype(np.float32)
    grid[0, 0, :3] = [[-1, -1], [1, 1], [0, 0]]  # corners and the centre
    want, got, _ = _run(proto, {"x": RNG.standard_normal((2, 3, 5, 7)).astype(np.float32), "grid": grid}, tmp_path)
    _close(want, got, 1e-5)


def test_grid_sample_bicubic_and_volumes_are_named_blockers():
    for attrs, shape in (({"mode": "cubic"}, [1, 1, 4, 4]), ({}, [1, 1, 2, 4, 4])):
        node = helper.make_node("GridSample", ["x", "grid"], ["y"], **attrs)
        proto = _graph([node], [_io("x", F, shape), _io("grid", F, [1, 2, 2, len(shape) - 2])], [_io("y", F, None)])
        blockers = CoreMLBackend().check(to_ir(proto), Target("coreml"))
        assert len(blockers) == 1 and blockers[0].op == "GridSample"


# -- Col2Im, Einsum, pooling, BatchNormalization in training mode --------------------------------

def test_col2im_with_strides_pads_and_dilations(tmp_path: Path):
    node = helper.make_node("Col2Im", ["cols", "image", "block"], ["y"], strides=[2, 1], pads=[1, 0, 2, 1],
                            dilations=[1, 2])
    image, block = np.array([9, 8], np.int64), np.array([3, 2], np.int64)
    rows = (9 + 1 + 2 - 3) // 2 + 1
    cols = (8 + 0 + 1 - 3) // 1 + 1
    proto = _graph([node], [_io("cols", F, [2, 4 * 6, rows * cols])], [_io("y", F, None)],
                   [numpy_helper.from_array(image, "image"), numpy_helper.from_array(block, "block")])
    want, got, _ = _run(proto, {"cols": RNG.standard_normal((2, 24, rows * cols)).astype(np.float32)}, tmp_path)
    _close(want, got)


@pytest.mark.parametrize("equation", ["bii->bi", "ii", "bij,bjj->bi", "...ii,...i->...i"])
def test_einsum_with_a_repeated_index(equation: str, tmp_path: Path):
    shapes = {"bii->bi": [(3, 4, 4)], "ii": [(5, 5)], "bij,bjj->bi": [(2, 3, 4), (2, 4, 4)],
              "...ii,...i->...i": [(2, 3, 4, 4), (2, 3, 4)]}[equation]
    names = [f"x{i}" for i in range(len(shapes))]
    proto = _graph([helper.make_node("Einsum", names, ["y"], equation=equation)],
                   [_io(n, F, list(s)) for n, s in zip(names, shapes, strict=True)], [_io("y", F, None)])
    want, got, _ = _run(proto, {n: RNG.standard_normal(s).astype(np.float32) for n, s in zip(names, shapes, strict=True)},
                        tmp_path)
    _close(want, got)


def test_maxvit_attention_einsums_stay_within_rank_5(tmp_path: Path):
    """MaxViT's attention on [B, G, H, P, D]: the broadcast product of the old translation was
    rank 6 (a blocker per Einsum); as a batched MatMul it stays rank 5."""
    nodes = [helper.make_node("Einsum", ["q", "k"], ["s"], equation="B G H I D, B G H J D -> B G H I J"),
             helper.make_node("Softmax", ["s"], ["p"], axis=-1),
             helper.make_node("Einsum", ["p", "v"], ["y"], equation="B G H I J, B G H J D -> B G H I D")]
    shape = [2, 3, 2, 5, 4]
    proto = _graph(nodes, [_io(n, F, shape) for n in "qkv"], [_io("y", F, None)])
    want, got, _ = _run(proto, {n: RNG.standard_normal(shape).astype(np.float32) for n in "qkv"}, tmp_path)
    _close(want, got)


@pytest.mark.parametrize("include_pad", [0, 1])
def test_3d_average_pool_with_ceil_mode(include_pad: int, tmp_path: Path):
    node = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[3, 2, 3], strides=[2, 2, 2],
                            pads=[1, 0, 1, 1, 1, 0], ceil_mode=1, count_include_pad=include_pad)
    proto = _graph([node], [_io("x", F, [1, 2, 6, 5, 7])], [_io("y", F, None)])
    want, got, _ = _run(proto, {"x": RNG.standard_normal((1, 2, 6, 5, 7)).astype(np.float32)}, tmp_path)
    _close(want, got)


@pytest.mark.parametrize("op", ["MaxPool", "AveragePool", "LpPool"])
def test_dilated_pooling(op: str, tmp_path: Path):
    node = helper.make_node(op, ["x"], ["y"], kernel_shape=[3, 2], strides=[1, 2], dilations=[2, 3], pads=[2, 1, 1, 1])
    proto = _graph([node], [_io("x", F, [2, 3, 9, 10])], [_io("y", F, None)])
    want, got, _ = _run(proto, {"x": RNG.standard_normal((2, 3, 9, 10)).astype(np.float32)}, tmp_path)
    _close(want, got)


def test_batch_normalization_in_training_mode(tmp_path: Path):
    """training_mode=1: the batch's own statistics, and the running ones the op returns."""
    c = 4
    inits = [numpy_helper.from_array(RNG.uniform(0.5, 2, c).astype(np.float32), n) for n in ("s", "b", "m", "v")]
    node = helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y", "rm", "rv"],
                            training_mode=1, momentum=0.8, epsilon=1e-3)
    proto = _graph([node], [_io("x", F, [3, c, 5, 6])], [_io(n, F, None) for n in ("y", "rm", "rv")], inits)
    want, got, _ = _run(proto, {"x": (RNG.standard_normal((3, c, 5, 6)) * 3 + 2).astype(np.float32)}, tmp_path)
    _close(want, got)


# -- Resize -----------------------------------------------------------------------------------------

def test_tf_nearest_downsample_by_ten_picks_onnxruntimes_pixels(tmp_path: Path):
    """tf2onnx's ResizeNearestNeighbor (align_corners and half_pixel_centers false): asymmetric,
    floor, scale float32(0.1). Output 1 samples 1 / 0.1f == 10.0f in float32 (onnxruntime, TF),
    9.99999985 in float64, which floors to pixel 9: 2320 of 2400 elements were off."""
    node = helper.make_node("Resize", ["x", "", "scales"], ["y"], mode="nearest",
                            coordinate_transformation_mode="asymmetric", nearest_mode="floor")
    proto = _graph([node], [_io("x", F, [1, 2, 300, 20])], [_io("y", F, None)],
                   [numpy_helper.from_array(np.array([1, 1, 30 / 300, 40 / 20], np.float32), "scales")])
    x = np.arange(1, 1 + 2 * 300 * 20, dtype=np.float32).reshape(1, 2, 300, 20) / 10
    want, got, _ = _run(proto, {"x": x}, tmp_path)
    np.testing.assert_array_equal(got["y"], want["y"])


def test_tf_half_pixel_for_nn_from_opset_11(tmp_path: Path):
    """Removed at opset 13; the version converter writes it as half_pixel with the rounding that
    picks the same pixels, and CoreML takes it from there."""
    node = helper.make_node("Resize", ["x", "roi", "scales", "sizes"], ["y"], mode="nearest",
                            coordinate_transformation_mode="tf_half_pixel_for_nn", nearest_mode="floor")
    proto = _graph([node], [_io("x", F, [1, 3, 7, 5])], [_io("y", F, None)],
                   [numpy_helper.from_array(np.zeros(0, np.float32), "roi"),
                    numpy_helper.from_array(np.zeros(0, np.float32), "scales"),
                    numpy_helper.from_array(np.array([1, 3, 17, 3], np.int64), "sizes")], opset=11)
    want, got, _ = _run(proto, {"x": RNG.standard_normal((1, 3, 7, 5)).astype(np.float32)}, tmp_path)
    np.testing.assert_array_equal(got["y"], want["y"])


@pytest.mark.parametrize("runtime_sizes", [False, True], ids=["constant-sizes", "runtime-sizes"])
def test_tf_half_pixel_for_nn_as_tf2onnx_writes_it_at_opset_18(runtime_sizes: bool, tmp_path: Path):
    """tf2onnx writes the mode removed at 13 into opset-18 graphs (half_pixel_centers=True), and
    onnxruntime runs them: CoreML takes it as it is, with constant sizes and run-time ones."""
    attrs = {"mode": "nearest", "coordinate_transformation_mode": "tf_half_pixel_for_nn", "nearest_mode": "floor"}
    if runtime_sizes:
        nodes = [helper.make_node("Shape", ["x"], ["s"], end=2), helper.make_node("Concat", ["s", "hw"], ["sizes"], axis=0),
                 helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)]
        inputs, inits = [_io("x", F, [1, 2, "H", "W"]), _io("hw", I64, [2])], []
        feeds = {"x": RNG.standard_normal((1, 2, 10, 8)).astype(np.float32), "hw": np.array([20, 13], np.int64)}
    else:
        nodes = [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)]
        inputs, inits = [_io("x", F, [1, 2, 10, 8])], [numpy_helper.from_array(np.array([1, 2, 20, 13], np.int64), "sizes")]
        feeds = {"x": RNG.standard_normal((1, 2, 10, 8)).astype(np.float32)}
    proto = _graph(nodes, inputs, [_io("y", F, None)], inits, opset=18)
    want, got, _ = _run(proto, feeds, tmp_path)
    np.testing.assert_array_equal(got["y"], want["y"])


def test_tf_nearest_resizes_through_the_tf_frontend(tmp_path: Path):
    """The TF ops themselves, through tf2onnx and the pipeline: ResizeNearestNeighbor 300 -> 30
    (was 2320 of 2400 elements off at the CoreML stage) and with half_pixel_centers."""
    tf = pytest.importorskip("tensorflow", reason="needs tensorflow")
    import unframe

    x = np.arange(1, 1 + 300 * 20 * 2 / 10, 0.1, dtype=np.float32).reshape(1, 300, 20, 2)[:, :, :, :2]
    for k, (size, half) in enumerate((([30, 40], False), ([450, 13], True))):
        fn = tf.function(lambda v, size=size, half=half: tf.compat.v1.image.resize_nearest_neighbor(
            v, tf.constant(size), half_pixel_centers=half))
        result = unframe.convert(fn, to="coreml", sample_inputs=(x,), output=str(tmp_path / f"m{k}.mlpackage"))
        stage = next(s for s in result.report.stages if s.stage == "backend")
        assert stage.status == "passed" and stage.outputs[0].max_abs <= 1e-3 * stage.outputs[0].scale, stage.summary()


@pytest.mark.parametrize(("mode", "coord", "rounding"), [
    ("nearest", "asymmetric", "floor"), ("nearest", "half_pixel", "round_prefer_floor"),
    ("nearest", "align_corners", "round_prefer_ceil"), ("linear", "half_pixel", None),
    ("linear", "align_corners", None), ("linear", "pytorch_half_pixel", None)])
def test_resize_to_sizes_computed_at_run_time(mode: str, coord: str, rounding: str | None, tmp_path: Path):
    """Sizes from a graph input (tf2onnx's resize to a tensor's size) and a dynamic H x W: each
    resized axis samples the input at coordinates the program computes."""
    attrs = {"mode": mode, "coordinate_transformation_mode": coord, **({"nearest_mode": rounding} if rounding else {})}
    nodes = [helper.make_node("Shape", ["x"], ["s"], end=2), helper.make_node("Concat", ["s", "hw"], ["sizes"], axis=0),
             helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], **attrs)]
    proto = _graph(nodes, [_io("x", F, ["N", 3, "H", "W"]), _io("hw", I64, [2])], [_io("y", F, None)])
    model_feeds = [{"x": RNG.standard_normal((2, 3, 40, 6)).astype(np.float32), "hw": np.array([13, 17], np.int64)},
                   {"x": RNG.standard_normal((1, 3, 5, 9)).astype(np.float32), "hw": np.array([12, 4], np.int64)}]
    for k, feeds in enumerate(model_feeds):
        want, got, _ = _run(proto, feeds, tmp_path / str(k))
        _close(want, got, 1e-5)


# -- Fourier transforms -----------------------------------------------------------------------------

@pytest.mark.parametrize(("inverse", "onesided", "length", "complex_in"), [
    (0, 0, None, True), (0, 1, 12, False), (1, 0, 8, True), (1, 1, None, True), (0, 0, 16, False)])
def test_dft(inverse: int, onesided: int, length: int | None, complex_in: bool, tmp_path: Path):
    """Forward and inverse, one-sided, with the signal cut or zero-padded to dft_length."""
    shape = [2, 10, 3, 2 if complex_in else 1]
    inputs = ["x", "n" if length else "", "axis"]
    inits = [numpy_helper.from_array(np.array(1, np.int64), "axis")]
    if length:
        inits.append(numpy_helper.from_array(np.array(length, np.int64), "n"))
    node = helper.make_node("DFT", inputs, ["y"], inverse=inverse, onesided=onesided)
    proto = _graph([node], [_io("x", F, shape)], [_io("y", F, None)], inits)
    want, got, _ = _run(proto, {"x": RNG.standard_normal(shape).astype(np.float32)}, tmp_path)
    _close(want, got, 1e-5)


def test_stft_with_a_window(tmp_path: Path):
    node = helper.make_node("STFT", ["x", "step", "w", "n"], ["y"], onesided=1)
    window = np.hanning(16).astype(np.float32)
    proto = _graph([node], [_io("x", F, [2, 100, 1])], [_io("y", F, None)],
                   [numpy_helper.from_array(np.array(6, np.int64), "step"), numpy_helper.from_array(window, "w"),
                    numpy_helper.from_array(np.array(16, np.int64), "n")])
    want, got, _ = _run(proto, {"x": RNG.standard_normal((2, 100, 1)).astype(np.float32)}, tmp_path)
    _close(want, got, 1e-5)


# -- bitwise integer ops ----------------------------------------------------------------------------

@pytest.mark.parametrize("op", ["BitwiseAnd", "BitwiseOr", "BitwiseXor"])
@pytest.mark.parametrize(("dtype", "np_type"), [(TensorProto.INT32, np.int32), (TensorProto.UINT8, np.uint8),
                                                (TensorProto.INT8, np.int8), (TensorProto.INT64, np.int64)])
def test_bitwise_binary_ops(op: str, dtype: int, np_type: type, tmp_path: Path):
    info = np.iinfo(np_type) if np_type != np.int64 else np.iinfo(np.int32)
    a = RNG.integers(info.min, info.max, (3, 5), endpoint=True).astype(np_type)
    b = RNG.integers(info.min, info.max, (5,), endpoint=True).astype(np_type)  # broadcast
    a[0, :3] = [info.min, info.max, -1 if info.min < 0 else 0]
    proto = _graph([helper.make_node(op, ["a", "b"], ["y"])], [_io("a", dtype, [3, 5]), _io("b", dtype, [5])],
                   [_io("y", dtype, None)])
    want, got, _ = _run(proto, {"a": a, "b": b}, tmp_path)
    _close(want, got)


@pytest.mark.parametrize(("dtype", "np_type"), [(TensorProto.INT16, np.int16), (TensorProto.UINT8, np.uint8)])
def test_bitwise_not(dtype: int, np_type: type, tmp_path: Path):
    info = np.iinfo(np_type)
    a = RNG.integers(info.min, info.max, (4, 6), endpoint=True).astype(np_type)
    a[0, :2] = [info.min, info.max]
    proto = _graph([helper.make_node("BitwiseNot", ["a"], ["y"])], [_io("a", dtype, [4, 6])], [_io("y", dtype, None)])
    want, got, _ = _run(proto, {"a": a}, tmp_path)
    _close(want, got)


@pytest.mark.parametrize("direction", ["LEFT", "RIGHT"])
@pytest.mark.parametrize(("dtype", "np_type", "bits"), [(TensorProto.UINT8, np.uint8, 8), (TensorProto.UINT32, np.uint32, 31)])
def test_bit_shift(direction: str, dtype: int, np_type: type, bits: int, tmp_path: Path):
    """Shift amounts from 0 past the width (everything shifted out: 0). uint32 travels as int32
    (MIL has no unsigned 32-bit type): its values, and a left shift's results, stay below 2**31."""
    high = 2 ** 8 - 1 if bits == 8 else (2 ** 21 if direction == "LEFT" else 2 ** 31 - 1)
    x = RNG.integers(0, high, (4, 10), endpoint=True).astype(np_type)
    s = np.tile(np.arange(10), (4, 1)).astype(np_type)
    if bits == 8:
        s[:, 9] = 8
    proto = _graph([helper.make_node("BitShift", ["x", "s"], ["y"], direction=direction)],
                   [_io("x", dtype, [4, 10]), _io("s", dtype, [4, 10])], [_io("y", dtype, None)])
    want, got, _ = _run(proto, {"x": x, "s": s}, tmp_path)
    np.testing.assert_array_equal(np.asarray(got["y"]).astype(np.int64), want["y"].astype(np.int64))
    assert len(np.unique(want["y"])) > 10  # not a constant stand-in


# -- random ops -----------------------------------------------------------------------------------

def test_random_uniform_like_gives_shape_dtype_and_range(tmp_path: Path):
    """A random op's numbers can't be compared with onnxruntime's (other generators): what is
    checked is what is deterministic about them, the shape, the dtype and the range [low, high);
    and that they vary (not a constant stand-in)."""
    node = helper.make_node("RandomUniformLike", ["x"], ["r"], low=-2.0, high=3.0)
    proto = _graph([node, helper.make_node("Add", ["r", "x"], ["y"])], [_io("x", F, [4, 50])],
                   [_io("y", F, None), _io("r", F, None)])
    x = np.zeros((4, 50), np.float32)
    want, got, _ = _run(proto, {"x": x}, tmp_path)
    r = np.asarray(got["r"])
    assert r.shape == want["r"].shape and r.dtype == want["r"].dtype
    assert r.min() >= -2.0 and r.max() < 3.0 and r.std() > 0.5
    np.testing.assert_array_equal(np.asarray(got["y"]), r)  # the draw flows on like any value


@pytest.mark.parametrize("op", ["RandomUniform", "RandomNormal", "RandomNormalLike"])
def test_other_random_draws_give_shape_dtype_and_spread(op: str, tmp_path: Path):
    """The same check for the other draws: shape and dtype, a mean and spread near the asked
    ones over 4,000 values (no comparison with onnxruntime's numbers is possible)."""
    uniform = op == "RandomUniform"
    attrs = {"low": 1.0, "high": 2.0} if uniform else {"mean": 3.0, "scale": 0.5}
    if op.endswith("Like"):
        node, inputs = helper.make_node(op, ["x"], ["r"], **attrs), [_io("x", F, [40, 100])]
    else:
        node, inputs = helper.make_node(op, [], ["r"], shape=[40, 100], **attrs), [_io("x", F, [1])]
    proto = _graph([node, helper.make_node("Identity", ["x"], ["echo"])], inputs, [_io("r", F, None), _io("echo", F, None)])
    feed = np.zeros((40, 100) if op.endswith("Like") else (1,), np.float32)
    want, got, _ = _run(proto, {"x": feed}, tmp_path)
    r = np.asarray(got["r"])
    assert r.shape == want["r"].shape == (40, 100) and r.dtype == want["r"].dtype == np.float32
    if uniform:
        assert r.min() >= 1.0 and r.max() < 2.0 and abs(r.mean() - 1.5) < 0.05
    else:
        assert abs(r.mean() - 3.0) < 0.05 and abs(r.std() - 0.5) < 0.05


def test_bernoulli_draws_ones_at_each_elements_probability(tmp_path: Path):
    p = np.tile(np.array([0.0, 0.25, 0.9, 1.0], np.float32), (2000, 1))
    proto = _graph([helper.make_node("Bernoulli", ["p"], ["y"])], [_io("p", F, [2000, 4])], [_io("y", F, None)])
    want, got, _ = _run(proto, {"p": p}, tmp_path)
    y = np.asarray(got["y"])
    assert y.shape == want["y"].shape and y.dtype == want["y"].dtype and set(np.unique(y)) <= {0.0, 1.0}
    np.testing.assert_allclose(y.mean(axis=0), [0.0, 0.25, 0.9, 1.0], atol=0.03)


# -- issue 34: the crashes ------------------------------------------------------------------------

def test_scatter_elements_with_dynamic_dims(tmp_path: Path):
    """data [N, 5] and indices [M, 2] of other dynamic lengths: MIL's scatter_along_axis asks
    for equal dims off the axis (an AssertionError in its type inference, reported as a bare
    'AssertionError:' blocker); written as a scatter of flat offsets instead."""
    node = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=1, reduction="add")
    proto = _graph([node], [_io("x", F, ["N", 5]), _io("i", I64, ["M", 2]), _io("u", F, ["M", 2])], [_io("y", F, None)])
    feeds = {"x": RNG.standard_normal((4, 5)).astype(np.float32), "i": np.array([[0, 4], [1, -1], [2, 2]], np.int64),
             "u": RNG.standard_normal((3, 2)).astype(np.float32)}
    want, got, _ = _run(proto, feeds, tmp_path)
    _close(want, got)


@pytest.mark.parametrize("shapes", [(["N", 5], ["M", 2]), ([4, 5], [3, 2])], ids=["dynamic", "static"])
def test_gather_elements_with_indices_smaller_off_the_axis(shapes: tuple, tmp_path: Path):
    """torch.gather's index may be smaller than its input off the gathered axis; MIL's
    gather_along_axis asserts equal sizes (a bare AssertionError blocker for the static case)."""
    node = helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1)
    proto = _graph([node], [_io("x", F, shapes[0]), _io("i", I64, shapes[1])], [_io("y", F, None)])
    feeds = {"x": RNG.standard_normal((4, 5)).astype(np.float32), "i": np.array([[0, 4], [1, -1], [2, 3]], np.int64)}
    want, got, _ = _run(proto, feeds, tmp_path)
    _close(want, got)


def test_a_constant_output_converts_at_fp16(tmp_path: Path):
    """A graph with no nodes (the output is an initializer): the 16-bit emulation read nodes[0]
    (an untyped IndexError); it has nothing to round and says so (None)."""
    from unframe.validate.rounding import plan_keep_fp32, rounding_error

    proto = _graph([], [_io("x", F, [2])], [_io("w", F, [3])],
                   [numpy_helper.from_array(np.array([1.5, -2.0, 3.25], np.float32), "w")])
    model = ir.serde.deserialize_model(proto)
    feeds = [{"x": np.ones(2, np.float32)}]
    assert rounding_error(model, feeds, "fp16") is None
    assert plan_keep_fp32(model, feeds, "fp16", lambda _n, s: 0.1 * s) is None
    want, got, _ = _run(proto, feeds[0], tmp_path, precision="fp16")
    _close(want, got)
