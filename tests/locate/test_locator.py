"""The divergence locator names exactly the node a fault was injected into, at every kind of stage:
a wrong version-converter adapter and a wrong CoreML translator registered through their
registries, a perturbed constant in one node of a copy (``unframe compare``), an fp16 overflow,
a faulty export (a frontend registered in the test) traced to the torch line, the sklearn step
and the Keras layer; a bisection within ceil(log2 N) + 3 builds. Real onnxruntime, coremltools and
MIL evaluator; the models are built here with seeded weights and outputs of order 1."""

from __future__ import annotations

import json
import math
import struct
import zlib
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper

import unframe
from unframe.cli.main import cli
from unframe.errors import ParityError
from unframe.locate import LocatePlan, locate
from unframe.locate.bisect import layer_boundaries
from unframe.locate.search import diff
from unframe.validate.intermediates import OnnxTap

F = TensorProto.FLOAT
RNG = np.random.default_rng(7)


def _w(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def _softmax_model(tmp: Path, opset: int = 13) -> Path:
    """x[2,5,4] -> MatMul -> Add -> Softmax(axis=1) -> Tanh -> MatMul -> y: the softmax is over a
    middle axis, where Softmax-13's and Softmax-12's semantics differ."""
    inits = [numpy_helper.from_array(_w(4, 4, scale=1.5), "w1"), numpy_helper.from_array(_w(4), "b1"),
             numpy_helper.from_array(_w(4, 3, scale=2.0), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w1"], ["h"], name="dense1"),
             helper.make_node("Add", ["h", "b1"], ["a"], name="bias1"),
             helper.make_node("Softmax", ["a"], ["s"], name="attention", axis=1),
             helper.make_node("Tanh", ["s"], ["t"], name="squash"),
             helper.make_node("MatMul", ["t", "w2"], ["y"], name="dense2")]
    graph = helper.make_graph(nodes, "softmax_mlp", [helper.make_tensor_value_info("x", F, [2, 5, 4])],
                              [helper.make_tensor_value_info("y", F, [2, 5, 3])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 8
    path = tmp / "softmax_mlp.onnx"
    onnx.save(model, path)
    return path


def _deep_mlp(layers: int, width: int = 8) -> onnx.ModelProto:
    """``layers`` x (MatMul -> Add -> Tanh): a deep model whose every layer matters."""
    nodes, inits, prev = [], [], "x"
    for i in range(layers):
        inits += [numpy_helper.from_array(_w(width, width, scale=1.2 / math.sqrt(width) * 1.5), f"w{i}"),
                  numpy_helper.from_array(_w(width, scale=0.3), f"b{i}")]
        nodes += [helper.make_node("MatMul", [prev, f"w{i}"], [f"m{i}"], name=f"matmul{i}"),
                  helper.make_node("Add", [f"m{i}", f"b{i}"], [f"a{i}"], name=f"add{i}"),
                  helper.make_node("Tanh", [f"a{i}"], [f"t{i}"], name=f"tanh{i}")]
        prev = f"t{i}"
    nodes.append(helper.make_node("Identity", [prev], ["y"], name="out"))
    graph = helper.make_graph(nodes, "deep", [helper.make_tensor_value_info("x", F, [4, width])],
                              [helper.make_tensor_value_info("y", F, [4, width])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


def _feeds(shape: tuple[int, ...]) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(3).standard_normal(shape).astype(np.float32)}


def _ort(path_or_proto, feeds) -> dict[str, np.ndarray]:
    src = path_or_proto.SerializeToString() if isinstance(path_or_proto, onnx.ModelProto) else str(path_or_proto)
    sess = ort.InferenceSession(src, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(names, feeds), strict=True))


def _order_one(outputs: dict[str, np.ndarray]) -> None:
    for name, value in outputs.items():
        assert 0.1 < float(np.abs(value).max()) < 100, (name, float(np.abs(value).max()))
        assert float(value.std()) > 0.01, name


@contextmanager
def _replaced(registry, key, obj) -> Iterator[None]:
    """Swap one registry entry for a test's, then put the original back."""
    registry.load()
    original = registry.get(key)
    registry.unregister(key)
    registry.register(key, obj, origin="test: a deliberately wrong entry")
    try:
        yield
    finally:
        registry.unregister(key)
        registry.register(key, original)


def _repro_reproduces(files: dict[str, str]) -> tuple[int, bool]:
    """(nodes in the repro, whether onnxruntime on it differs from the reference's outputs)."""
    model = onnx.load(files["repro"])
    feeds = dict(np.load(files["inputs"]))
    outs = dict(np.load(files["outputs"]))
    got = _ort(model, feeds)
    differs = any(not np.allclose(got[k.split("/", 1)[1]], v, rtol=1e-3, atol=1e-4)
                  for k, v in outs.items() if k.startswith("reference/"))
    return len(model.graph.node), differs


# ---------------------------------------------------------------------------- opset stage ----
def test_wrong_adapter_is_named_at_its_node(tmp_path: Path) -> None:
    from unframe.version_converter.registry import ADAPTERS, AdapterKey

    src = _softmax_model(tmp_path)
    _order_one(_ort(src, _feeds((2, 5, 4))))

    def axis_only(node: ir.Node, step) -> None:  # onnx's own converter's bug: rename, don't move
        step.set_attr("axis", step.attr("axis", -1))

    out = tmp_path / "m12.onnx"
    with _replaced(ADAPTERS, AdapterKey("", "Softmax", 13, 12), axis_only):
        with pytest.raises(ParityError) as info:
            unframe.convert_opset(src, 12, output=out)
    d = info.value.divergence
    assert d and d.stage == "opset"
    assert (d.node, d.op_type, d.value) == ("attention", "Softmax", "s")
    assert d.inputs and all(i["ok"] for i in d.inputs)  # its input "a" still agrees
    assert d.attributes == {"axis": 1}
    assert not out.exists()
    assert Path(d.files["repro"]).parent == tmp_path / "m12.onnx.debug" / "opset"
    # the cut alone, converted by the same (wrong) adapter, still disagrees
    assert d.reproduces is True
    assert len(onnx.load(d.files["repro"]).graph.node) <= 5
    # with the real adapter the same conversion passes: the fault was found, not the model
    assert unframe.convert_opset(src, 12, output=out).report


# -------------------------------------------------------------------------- backend stage ----
def test_wrong_coreml_translator_is_named(tmp_path: Path) -> None:
    pytest.importorskip("coremltools", reason="needs the coreml extra (coremltools)")
    from coremltools.converters.mil import Builder as mb

    from unframe.converters.backends.coreml.ops import TRANSLATORS, Translator

    src = _softmax_model(tmp_path)
    wrong = Translator("Tanh", lambda ctx: mb.sigmoid(x=ctx.inputs[0]))
    with _replaced(TRANSLATORS, "Tanh", wrong):
        with pytest.raises(ParityError) as info:
            unframe.convert(src, to="coreml", precision="fp32", output=tmp_path / "m.mlpackage")
    d = info.value.divergence
    assert d and d.stage == "backend"
    assert (d.node, d.op_type, d.value) == ("squash", "Tanh", "t")
    assert d.inputs and all(i["ok"] for i in d.inputs)
    assert "MIL evaluator" in d.candidate
    assert d.reproduces is True  # the one-node cut, converted with the wrong translator, disagrees
    assert not (tmp_path / "m.mlpackage").exists()


def test_fp16_overflow_is_located(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """h = x @ W reaches ~1e5 > fp16's 65504: CoreML's fp16 compute makes it inf, and every value
    after it; the locator names the MatMul, not the later nodes that inherit the inf. (By default
    the rounding planner keeps that MatMul in float32 and the model converts: the last assertions;
    with the planner allowed no node, the failure and the locator's answer are as before.)"""
    pytest.importorskip("coremltools", reason="needs the coreml extra (coremltools)")
    inits = [numpy_helper.from_array(np.full((8, 6), 2.0e4, np.float32) * np.sign(_w(8, 6)), "w"),
             numpy_helper.from_array(np.array(1e-4, np.float32), "k"),
             numpy_helper.from_array(_w(6, 4), "w2")]
    nodes = [helper.make_node("MatMul", ["x", "w"], ["h"], name="wide"),
             helper.make_node("Mul", ["h", "k"], ["hs"], name="rescale"),
             helper.make_node("Sin", ["hs"], ["s"], name="wave"),
             helper.make_node("MatMul", ["s", "w2"], ["y"], name="head")]
    graph = helper.make_graph(nodes, "overflow", [helper.make_tensor_value_info("x", F, [2, 8])],
                              [helper.make_tensor_value_info("y", F, [2, 4])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    src = tmp_path / "overflow.onnx"
    onnx.save(model, src)
    feeds = {"x": np.abs(_feeds((2, 8))["x"]) + 0.5}
    ref = _ort(src, feeds)
    _order_one(ref)
    np.savez(tmp_path / "x.npz", **feeds)
    from unframe.validate import rounding

    with monkeypatch.context() as patch:
        patch.setattr(rounding, "MAX_KEEP", 0)
        with pytest.raises(ParityError) as info:
            unframe.convert(src, to="coreml", sample_inputs=tmp_path / "x.npz",
                            output=tmp_path / "o.mlpackage")
    d = info.value.divergence
    assert d and d.stage == "backend"
    assert (d.node, d.op_type) == ("wide", "MatMul")
    assert math.isinf(d.error) and any("non-finite" in n for n in d.notes)
    # with fp32 compute it converts: the overflow, not the translation, was the fault
    assert unframe.convert(src, to="coreml", precision="fp32", sample_inputs=tmp_path / "x.npz").report
    # and by default the planner finds it: the MatMul stays in float32, the rest is fp16
    planned = unframe.convert(src, to="coreml", sample_inputs=tmp_path / "x.npz")
    note = next(n for n in planned.flow.notes if "kept in float32" in n)
    assert "(wide" in note and "overflowed" in note and planned.report


# --------------------------------------------------------------------- unframe compare ------
def test_compare_names_the_node_reading_a_perturbed_constant(tmp_path: Path) -> None:
    a = _softmax_model(tmp_path)
    proto = onnx.load(a)
    for init in proto.graph.initializer:
        if init.name == "w2":
            arr = numpy_helper.to_array(init).copy()
            arr[1, :] += 0.8
            init.CopyFrom(numpy_helper.from_array(arr, "w2"))
    b = tmp_path / "perturbed.onnx"
    onnx.save(proto, b)
    res = CliRunner().invoke(cli, ["compare", str(a), str(b), "--intermediates", "--json",
                                   "--debug-dir", str(tmp_path / "dbg")])
    assert res.exit_code == 5, res.output
    data = json.loads(res.stdout)
    assert data["ok"] is False
    d = data["divergence"]
    assert (d["node"], d["op_type"], d["value"]) == ("dense2", "MatMul", "y")
    assert [i["name"] for i in d["inputs"]] == ["t"] and d["inputs"][0]["ok"]
    nodes, differs = _repro_reproduces(d["files"])
    assert nodes == 1 and differs  # the one node with B's constant, fed A's values, still differs
    # the same two files compared with themselves agree
    same = CliRunner().invoke(cli, ["compare", str(a), str(a), "--intermediates"])
    assert same.exit_code == 0, same.output
    assert "outputs agree" in same.output


# ------------------------------------------------------------------------------ bisection ----
def test_bisection_finds_the_layer_within_the_build_budget(tmp_path: Path) -> None:
    reference = _deep_mlp(48)
    faulty = onnx.ModelProto()
    faulty.CopyFrom(reference)
    culprit_layer = 31
    for init in faulty.graph.initializer:
        if init.name == f"w{culprit_layer}":
            init.CopyFrom(numpy_helper.from_array(numpy_helper.to_array(init) * -1.0, init.name))
    feeds = _feeds((4, 8))
    _order_one(_ort(reference, feeds))
    graph = ir.serde.deserialize_model(reference)
    builds: list[list[str]] = []

    def probe(names: list[str], feed: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        builds.append(list(names))
        marked = onnx.ModelProto()
        marked.CopyFrom(faulty)
        have = {o.name for o in marked.graph.output}
        marked.graph.output.extend(onnx.ValueInfoProto(name=n) for n in names if n not in have)
        return _ort(marked, feed)

    plan = LocatePlan(graph, OnnxTap(graph), probe=probe, tolerance=1e-3)
    d = locate(plan, [feeds], stage="backend")
    boundaries = layer_boundaries(graph, ["y"])
    assert len(boundaries) >= culprit_layer  # one per layer (each MatMul+Add+Tanh is one layer)
    assert d and (d.node, d.op_type) == (f"matmul{culprit_layer}", "MatMul")
    assert len(builds) <= math.ceil(math.log2(len(boundaries))) + 3
    assert all(len(b) == 1 for b in builds[1:])  # one value marked per build after the outputs'
    assert any("bisected" in n for n in d.notes)


# --------------------------------------------------------------- export stage, the source ----
torch = pytest.importorskip("torch", reason="needs the torch extra (torch)")


class TwoLayer(torch.nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.fc1 = torch.nn.Linear(6, 12)
        self.fc2 = torch.nn.Linear(12, 12)
        self.head = torch.nn.Linear(12, 3)

    def forward(self, x):
        h = torch.relu(self.fc1(x))
        h = torch.tanh(self.fc2(h))  # the line the fault must be traced to
        return self.head(h)


def _faulty_frontend(base: type, name: str, initializer: str):
    """A frontend (registered in the test) that exports as ``base`` does, then perturbs one
    initializer: the graph now computes something else at exactly the node reading it."""

    class Faulty(base):
        def to_onnx(self, native, spec, opts):
            result = super().to_onnx(native, spec, opts)
            value = result.model.graph.initializers[initializer]
            array = value.const_value.numpy()
            value.const_value = ir.tensor(array + 0.5 * np.abs(array).mean() * np.sign(array),
                                          name=initializer)
            return result

    Faulty.name = name
    return Faulty()


@contextmanager
def _registered_frontend(frontend) -> Iterator[None]:
    from unframe.converters.registry import FRONTENDS

    FRONTENDS.register(frontend.name, frontend, origin="test: a faulty exporter")
    try:
        yield
    finally:
        FRONTENDS.unregister(frontend.name)


def test_export_fault_is_traced_to_the_torch_line(tmp_path: Path) -> None:
    pytest.importorskip("onnxscript", reason="needs the torch extra (onnxscript)")
    from unframe.converters.frontends.torch import TorchFrontend

    torch.manual_seed(0)
    model = TwoLayer().eval()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(2.0)
    x = torch.randn(4, 6)
    assert 0.1 < float(model(x).abs().max()) < 100
    with _registered_frontend(_faulty_frontend(TorchFrontend, "torch-faulty", "fc2.weight")):
        with pytest.raises(ParityError) as info:
            unframe.convert(model, from_="torch-faulty", to="onnx", sample_inputs=x,
                            debug_dir=tmp_path / "dbg")
    d = info.value.divergence
    assert d and d.stage == "export" and d.op_type in ("Gemm", "MatMul")
    line = next(i for i, text in enumerate(Path(__file__).read_text().splitlines(), 1)
                if "the line the fault must be traced to" in text)
    assert d.source.startswith("fc2 (Linear)") and f"test_locator.py:{line}" in d.source, d.source
    assert d.reproduces is True  # onnxruntime on the cut, fed torch's values, still disagrees
    assert (tmp_path / "dbg" / "export" / "error.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_sklearn_fault_is_traced_to_the_pipeline_step(tmp_path: Path) -> None:
    pytest.importorskip("sklearn", reason="needs the sklearn extra (scikit-learn)")
    from sklearn.decomposition import PCA
    from sklearn.linear_model import Ridge
    from sklearn.pipeline import Pipeline
    from sklearn.preprocessing import StandardScaler

    from unframe.converters.frontends.sklearn import SklearnFrontend

    rng = np.random.default_rng(0)
    X = rng.standard_normal((60, 6)).astype(np.float32)
    y = X @ rng.standard_normal(6) + 0.1 * rng.standard_normal(60)
    pipe = Pipeline([("scale", StandardScaler()), ("reduce", PCA(3)), ("fit", Ridge())]).fit(X, y)
    probe = unframe.convert(pipe, to="onnx", sample_inputs=X[:4], locate=False)
    pca_weight = next(n for n in probe.model.graph
                      if n.op_type == "MatMul").inputs[1].name  # the PCA projection
    with _registered_frontend(_faulty_frontend(SklearnFrontend, "sklearn-faulty", pca_weight)):
        with pytest.raises(ParityError) as info:
            unframe.convert(pipe, from_="sklearn-faulty", to="onnx", sample_inputs=X[:4],
                            debug_dir=tmp_path / "dbg")
    d = info.value.divergence
    # scikit-learn shows each step's output, not PCA's centering inside it: both nodes of the step
    # are named as one span, and the step itself is the source
    assert d and [s.split(" [")[1] for s in d.span] == ["Sub]", "MatMul]"]
    assert d.source == "pipeline step 'reduce' (PCA)"
    assert d.inputs and all(i["ok"] for i in d.inputs)  # the scaler's output still agrees


# ------------------------------------------------------------------------------ CLI ---------
def test_cli_prints_the_divergence_and_no_locate_skips_it(tmp_path: Path) -> None:
    from unframe.version_converter.registry import ADAPTERS, AdapterKey

    src = _softmax_model(tmp_path)

    def axis_only(node: ir.Node, step) -> None:
        step.set_attr("axis", step.attr("axis", -1))

    with _replaced(ADAPTERS, AdapterKey("", "Softmax", 13, 12), axis_only):
        res = CliRunner().invoke(cli, ["opset", str(src), "--to", "12", "-o", str(tmp_path / "o.onnx")])
        assert res.exit_code == 5
        assert "first diverging node: attention [Softmax]" in res.stderr
        assert "repro:" in res.stderr and (tmp_path / "o.onnx.debug" / "opset" / "repro.onnx").exists()
        quiet = CliRunner().invoke(cli, ["opset", str(src), "--to", "12", "-o", str(tmp_path / "q.onnx"),
                                         "--no-locate"])
        assert quiet.exit_code == 5 and "first diverging" not in quiet.stderr
        assert not (tmp_path / "q.onnx.debug").exists()
        as_json = CliRunner().invoke(cli, ["opset", str(src), "--to", "12", "-o", str(tmp_path / "j.onnx"),
                                           "--json", "--debug-dir", str(tmp_path / "jd")])
        error = json.loads(as_json.stdout)
        assert error["error"] == "parity" and error["divergence"]["node"] == "attention"
        before = sorted(p.name for p in tmp_path.iterdir())
        debugged = CliRunner().invoke(cli, ["debug", str(src), "--opset", "12",
                                            "--debug-dir", str(tmp_path / "dd")])
        assert debugged.exit_code == 5 and "attention [Softmax]" in debugged.stderr
        # debug writes its findings and no artifact
        assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*before, "dd"])
        assert (tmp_path / "dd" / "opset" / "error.html").exists()


def test_time_cap_leaves_the_parity_failure_standing(tmp_path: Path) -> None:
    from unframe.version_converter.registry import ADAPTERS, AdapterKey

    src = _softmax_model(tmp_path)

    def axis_only(node: ir.Node, step) -> None:
        step.set_attr("axis", step.attr("axis", -1))

    with _replaced(ADAPTERS, AdapterKey("", "Softmax", 13, 12), axis_only):
        with pytest.raises(ParityError) as info:
            unframe.convert_opset(src, 12, locate=1e-9)
    d = info.value.divergence
    assert not d and d.status == "timed out"
    assert "timed out" in d.headline()


# ----------------------------------------------------------------------- the pieces ---------
def test_value_diff_rules() -> None:
    a = np.array([1.0, -np.inf, 3.0], np.float32)
    assert diff("v", a, np.array([1.0, -65504.0, 3.0], np.float16), 1e-3).ok  # a mask's stand-in
    mask = np.array([0.0, np.finfo(np.float32).min], np.float32)
    assert diff("v", mask, mask.astype(np.float16), 1e-3).ok  # float32's min mask becomes -inf
    assert not diff("v", np.array([1e5, 2.0]), np.array([np.inf, 2.0]), 1e-3).ok  # an overflow
    assert not diff("v", a, np.array([1.0, 0.0, 3.0], np.float32), 1e-3).ok
    assert not diff("v", np.array([1.0, 2.0]), np.array([1.0, np.inf]), 1e-3).ok
    assert diff("v", np.array([1000.0, 1e-9]), np.array([1000.0, 5e-7]), 1e-3).ok  # scale-relative
    assert not diff("v", np.array([3, 4]), np.array([3, 5]), 1.0).ok  # integers: exact
    assert not diff("v", np.zeros((2, 3)), np.zeros((3, 3)), 1e-3).ok


def test_plot_marks_the_culprit(tmp_path: Path) -> None:
    from unframe.locate.plot import render_png
    from unframe.locate.search import ValueDiff

    path = [ValueDiff(f"v{i}", i < 3, 10.0 ** (-9 + 3 * i), 0.0, 1.0, i) for i in range(5)]
    png = render_png(path, "v3", 1e-3)
    width, height = struct.unpack(">II", png[16:24])
    raw = zlib.decompress(png[png.index(b"IDAT") + 4:png.index(b"IEND") - 8])
    rows = [raw[r * (width * 3 + 1) + 1:(r + 1) * (width * 3 + 1)] for r in range(height)]
    red = [(x, y) for y, row in enumerate(rows) for x in range(width)
           if row[3 * x:3 * x + 3] == bytes((214, 39, 40))]
    assert red, "the culprit is drawn in red"
    xs = sorted({x for x, _ in red})
    from unframe.locate.plot import _x

    assert abs(np.mean(xs[: len(xs) // 2 + 1]) - _x(3, 5)) < 8  # at the fourth point, not elsewhere


def test_keras_fault_is_traced_to_the_layer(tmp_path: Path) -> None:
    keras = pytest.importorskip("keras", reason="needs the tf extra (keras)")
    pytest.importorskip("tf2onnx", reason="needs the tf extra (tf2onnx)")
    from unframe.converters.frontends.tensorflow import TensorflowFrontend

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((6,)), keras.layers.Dense(12, activation="relu", name="embed"),
                              keras.layers.Dense(12, activation="tanh", name="hidden"),
                              keras.layers.Dense(3, name="logits")])
    x = np.random.default_rng(1).standard_normal((4, 6)).astype(np.float32)
    assert 0.1 < float(np.abs(model(x)).max()) < 100
    exported = unframe.convert(model, to="onnx", sample_inputs=x, locate=False)
    kernel = next(v.name for v in exported.model.graph.initializers.values()
                  if v.const_value is not None and tuple(v.const_value.shape) == (12, 12))
    with _registered_frontend(_faulty_frontend(TensorflowFrontend, "tf-faulty", kernel)):
        with pytest.raises(ParityError) as info:
            unframe.convert(model, from_="tf-faulty", to="onnx", sample_inputs=x,
                            debug_dir=tmp_path / "dbg")
    d = info.value.divergence
    assert d and d.stage == "export" and d.op_type == "MatMul"
    assert d.source == "layer 'hidden' (Dense)"
