"""Resource limits (unframe/limits.py): each refusal happens before the allocation or run it
guards, is a typed error with exit code 3 and one line, and writes nothing."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from spine_utils import mlp_model, snapshot

import unframe
from unframe import limits
from unframe.cli.main import cli
from unframe.errors import InputError, ResourceLimitError, UnsupportedError


def _convert(tmp_path: Path, model: onnx.ModelProto, *args: str) -> tuple[object, dict[str, bytes]]:
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    out = tmp_path / "out"
    out.mkdir(exist_ok=True)
    before = snapshot(tmp_path)
    result = CliRunner().invoke(cli, ["convert", str(src), "-o", str(out / "o.onnx"), "--opset", "18", *args])
    return result, before


def _refused(result: object, tmp_path: Path, before: dict[str, bytes], words: str, code: int = 3) -> None:
    err = result.stderr.strip()
    assert result.exit_code == code, result.output
    assert err.startswith("error: ") and len(err.splitlines()) == 1 and words in err, err
    assert "Traceback" not in result.output
    assert snapshot(tmp_path) == before


# --------------------------------------------------------------------------- tensor data -------
def _corrupt(kind: str) -> onnx.ModelProto:
    model = mlp_model()
    w = next(t for t in model.graph.initializer if t.name == "W")
    if kind == "short_raw":
        w.raw_data = w.raw_data[:20]
    elif kind == "long_raw":
        w.raw_data = w.raw_data + b"\0" * 8
    elif kind == "typed_count":
        w.ClearField("raw_data")
        w.float_data.extend([1.0] * 5)
    elif kind == "stray_field":
        w.int64_data.extend([1, 2])
    elif kind == "unknown_dtype":
        w.data_type = 99
    elif kind == "negative_dim":
        w.dims[0] = -4
    return model


@pytest.mark.parametrize(("kind", "words"), [
    ("short_raw", "declares shape [4, 3] (48 bytes) but holds 20 bytes"),
    ("long_raw", "but holds 56 bytes"),
    ("typed_count", "holds 5 values in float_data"),
    ("stray_field", "holds data in int64_data"),
    ("unknown_dtype", "unknown tensor data type 99"),
    ("negative_dim", "negative dimension"),
])
def test_tensor_data_must_match_its_dims(tmp_path: Path, kind: str, words: str):
    """Was ``unexpected ValueError: cannot reshape array of size 5 into shape (4,3)``."""
    result, before = _convert(tmp_path, _corrupt(kind))
    _refused(result, tmp_path, before, words)


def test_external_range_must_match_the_tensor(tmp_path: Path):
    """An external range of the wrong length is refused before it is read."""
    model = mlp_model()
    w = next(t for t in model.graph.initializer if t.name == "W")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    for k, v in (("location", "w.bin"), ("offset", "0"), ("length", "40")):
        e = w.external_data.add()
        e.key, e.value = k, v
    (tmp_path / "w.bin").write_bytes(bytes(64))
    result, before = _convert(tmp_path, model)
    _refused(result, tmp_path, before, "(48 bytes) but holds 40 bytes in w.bin")


# ------------------------------------------------------------------------- parity inputs -------
def test_astronomical_input_dims_are_refused_before_allocation(tmp_path: Path):
    """Was ``unexpected MemoryError: Unable to allocate 7.11 PiB``; --no-validate still converts."""
    result, before = _convert(tmp_path, mlp_model(batch=10**12))
    _refused(result, tmp_path, before, "largest: input 'x' [1000000000000, 4]")
    assert "--max-memory" in result.stderr
    ok, _ = _convert(tmp_path, mlp_model(batch=10**12), "--no-validate", "--force")
    assert ok.exit_code == 0, ok.output


def test_max_memory_bounds_parity_inputs(tmp_path: Path):
    """The same model passes under the default budget and is refused under a tiny one."""
    model = mlp_model(batch=1000)
    ok, _ = _convert(tmp_path, model)
    assert ok.exit_code == 0, ok.output
    result, before = _convert(tmp_path, model, "--max-memory", "1KiB", "--force")
    _refused(result, tmp_path, before, "more than the 1.0 KiB allowed")


@pytest.mark.parametrize("to, words", [("coreml", "converting to CoreML"), ("tensorrt", "TensorRT's builder")])
def test_a_backend_that_would_not_fit_is_refused_before_it_starts(tmp_path: Path, to: str, words: str):
    """The CoreML converter and TensorRT's builder need a measured multiple of the weights
    (bench/llm.py): past --max-memory (else the memory available) the conversion stops before
    starting, with one line and nothing written, instead of meeting the OOM killer."""
    pytest.importorskip({"coreml": "coremltools", "tensorrt": "tensorrt_rtx"}[to],
                        reason=f"needs the '{to}' extra")
    model = mlp_model(batch=4)
    weights = sum(t.raw_data.__len__() or 4 * int(np.prod(t.dims)) for t in model.graph.initializer)
    src = tmp_path / "m.onnx"
    onnx.save(model, src)
    suffix = {"coreml": "m.mlpackage", "tensorrt": "m.engine"}[to]
    before = snapshot(tmp_path)
    # the budget: above what parity of the model and its inputs needs, below the backend's estimate
    result = CliRunner().invoke(cli, ["convert", str(src), "--to", to, "-o", str(tmp_path / suffix),
                                      "--no-validate", "--max-memory", str(weights + 16)])
    _refused(result, tmp_path, before, words)
    ok = CliRunner().invoke(cli, ["convert", str(src), "--to", to, "-o", str(tmp_path / suffix),
                                  "--no-validate", "--max-memory", str(weights * 8)])
    assert ok.exit_code == 0, ok.output


def test_max_memory_option_is_validated(tmp_path: Path):
    result, _ = _convert(tmp_path, mlp_model(), "--max-memory", "lots")
    assert result.exit_code == 2 and "bad size 'lots'" in result.stderr


def test_a_shape_no_array_can_have_is_refused_even_when_empty():
    """[2^63 - 1, 0, 5] holds no element, but numpy refuses the shape (found by the tensorrt
    campaign: a ValueError from numpy while drawing parity inputs)."""
    with pytest.raises(InputError, match="dimensions no array can have"):
        limits.check_array((2**63 - 1, 0, 5), np.float32, "a")
    limits.check_array((2**40, 0, 5), np.float32, "a")  # numpy takes this one: so do we
    assert np.zeros((2**40, 0, 5), np.float32).size == 0


def test_check_alloc_counts_exact_bytes():
    with limits.memory_budget(1000):
        limits.check_array((10, 25), np.float32, "a")  # exactly 1000 bytes: allowed
        with pytest.raises(ResourceLimitError, match=r"a \(shape 10x26\) would take 1.0 KiB"):
            limits.check_array((10, 26), np.float32, "a")


# ---------------------------------------------------------------------------- structure --------
def _nested_if(depth: int) -> onnx.ModelProto:
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])
    leaf = helper.make_graph([helper.make_node("Identity", ["x"], ["y"])], "leaf", [], [out])
    branch = leaf
    for i in range(depth):  # nested through then_branch only: depth grows, size stays linear
        node = helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=leaf, name=f"if{i}")
        branch = helper.make_graph([node], f"g{i}", [], [out])
    graph = helper.make_graph(branch.node, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])], [out],
                              [numpy_helper.from_array(np.array(True), "c")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_subgraph_nesting_is_bounded(monkeypatch: pytest.MonkeyPatch):
    """protobuf's own decoder stops at ~32 levels of If; the limit holds for protos built in
    Python too. A lower limit here keeps the models small."""
    monkeypatch.setattr(limits, "MAX_SUBGRAPH_DEPTH", 4)
    assert unframe.convert(_nested_if(3), to="onnx", opset=18).report.stages[0].status == "passed"
    with pytest.raises(ResourceLimitError, match="nested more than 4 deep"):
        unframe.convert(_nested_if(6), to="onnx")


def _function_model(calls: list[tuple[str, str]]) -> onnx.ModelProto:
    """x -> f0 -> y, where each function (name, callee) calls the next or Relu."""
    functions = [helper.make_function("local", name, ["a"], ["b"],
                                      [helper.make_node(callee, ["a"], ["b"], domain="" if callee == "Relu" else "local")],
                                      [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])
                 for name, callee in calls]
    graph = helper.make_graph([helper.make_node(calls[0][0], ["x"], ["y"], domain="local")], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])])
    return helper.make_model(graph, functions=functions,
                             opset_imports=[helper.make_opsetid("", 17), helper.make_opsetid("local", 1)])


def test_recursive_functions_are_refused():
    with pytest.raises(InputError, match="function local::f1 calls itself"):
        unframe.convert(_function_model([("f0", "f1"), ("f1", "f2"), ("f2", "f1")]), to="onnx")


def test_function_call_depth_is_bounded():
    depth = limits.MAX_FUNCTION_DEPTH + 3
    chain = [(f"f{i}", f"f{i + 1}") for i in range(depth)] + [(f"f{depth}", "Relu")]
    with pytest.raises(ResourceLimitError, match="call each other more than"):
        unframe.convert(_function_model(chain), to="onnx")
    result = unframe.convert(_function_model([("f0", "Relu")]), to="onnx", opset=18)
    assert result.report.stages[0].status == "passed"  # a function call converts, checked


def _spin_loop(trips: int, op: str = "Identity") -> onnx.ModelProto:
    """y = Relu(x), beside a Loop of ``trips`` constant iterations (condition passed through) that
    carries a vector through ``op``."""
    body = helper.make_graph(
        [helper.make_node("Identity", ["c_in"], ["c_out"]), helper.make_node(op, ["v_in"], ["v_out"])], "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("c_in", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_in", TensorProto.FLOAT, [64])],
        [helper.make_tensor_value_info("c_out", TensorProto.BOOL, []),
         helper.make_tensor_value_info("v_out", TensorProto.FLOAT, [64])])
    nodes = [helper.make_node("Loop", ["M", "", "v0"], ["v_final"], body=body, name="spin"),
             helper.make_node("Relu", ["x"], ["y"])]
    inits = [numpy_helper.from_array(np.array(trips, np.int64), "M"),
             numpy_helper.from_array(np.linspace(-1, 1, 64, dtype=np.float32), "v0")]
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [4]),
                               helper.make_tensor_value_info("v_final", TensorProto.FLOAT, [64])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_endless_constant_loop_is_refused_before_parity(tmp_path: Path):
    result, before = _convert(tmp_path, _spin_loop(1 << 40))
    _refused(result, tmp_path, before, "Loop 'spin' runs 1099511627776 iterations")
    ok, _ = _convert(tmp_path, _spin_loop(1 << 40), "--no-validate", "--force")
    assert ok.exit_code == 0, ok.output


def test_parity_time_limit(tmp_path: Path):
    """A run onnxruntime is still busy with when the limit expires is cancelled and reported."""
    result, before = _convert(tmp_path, _spin_loop(5_000_000, "Sin"), "--parity-timeout", "0.5")
    _refused(result, tmp_path, before, "ran longer than 0.5 s")
    assert "--parity-timeout" in result.stderr


def test_time_limit_interrupts_python_and_leaves_nothing_behind():
    with pytest.raises(limits.TimeLimitExceeded, match="busy ran longer than 0.2 s"):
        with limits.time_limit(0.2, "busy"):
            while True:
                pass
    with limits.time_limit(0.05, "quick"):
        pass
    time.sleep(0.15)  # a limit that ended unexpired raises nothing later


def test_time_limit_works_in_any_thread():
    caught: list[BaseException] = []

    def worker() -> None:
        try:
            with limits.time_limit(0.1, "in a thread"):
                while True:
                    pass
        except limits.TimeLimitExceeded as exc:
            caught.append(exc)

    t = threading.Thread(target=worker)
    t.start()
    t.join(10)
    assert caught and "in a thread ran longer than 0.1 s" in str(caught[0])


# ----------------------------------------------------------------------------- schemas ---------
def _schema_break(kind: str) -> onnx.ModelProto:
    model = mlp_model()
    softmax = next(n for n in model.graph.node if n.op_type == "Softmax")
    if kind == "attr_type":
        softmax.attribute[0].CopyFrom(helper.make_attribute("axis", "minus one"))
    elif kind == "unknown_attr":
        softmax.attribute.append(helper.make_attribute("bogus", 1))
    elif kind == "no_such_op":
        softmax.op_type = "Softmaxx"
    elif kind == "too_many_inputs":
        softmax.input.append("x")
    elif kind == "two_writers":
        model.graph.node[2].output[0] = "h1"
    elif kind == "not_utf8":
        data = model.SerializeToString().replace(b"softmax", b"soft\xffax")
        model = onnx.ModelProto.FromString(data)
    elif kind == "opset_range":
        model.opset_import[0].version = 1 << 40
    elif kind == "device":  # onnx-ir read it as no configuration, then failed to write the model
        softmax.device_configurations.add(configuration_id="gpu0")
    elif kind == "einsum":  # onnx's shape inference looped forever on this equation
        softmax.attribute[0].CopyFrom(helper.make_attribute("equation", "%s%n"))
        softmax.op_type = "Einsum"
    return model


@pytest.mark.parametrize(("kind", "words"), [
    ("attr_type", "attribute 'axis' of type STRING, expected INT"),
    ("unknown_attr", "attribute 'bogus' its schema doesn't define"),
    ("no_such_op", "doesn't exist in ai.onnx opset 13"),
    ("too_many_inputs", "has 2 inputs; opset 13 takes 1"),
    ("two_writers", "writes 'h1', which is already defined"),
    ("not_utf8", "which is not UTF-8 text"),
    ("opset_range", "which no version of ONNX has"),
    ("einsum", "has equation '%s%n', which is not Einsum notation"),
    ("device", "placed on device configuration 'gpu0', which the model doesn't define"),
])
def test_nodes_must_match_their_schema(tmp_path: Path, kind: str, words: str):
    result, before = _convert(tmp_path, _schema_break(kind))
    _refused(result, tmp_path, before, words)


def test_sparse_initializers(tmp_path: Path):
    model = mlp_model()
    del model.graph.initializer[0]
    values = numpy_helper.from_array(np.array([1.0, 2.0], np.float32), "W")
    model.graph.sparse_initializer.append(
        helper.make_sparse_tensor(values, numpy_helper.from_array(np.array([0, 5], np.int64), "i"), [4, 3]))
    with pytest.raises(UnsupportedError, match="sparse initializers"):
        unframe.convert(model, to="onnx")
    model.graph.sparse_initializer[0].indices.CopyFrom(numpy_helper.from_array(np.array([0, 12], np.int64), "i"))
    with pytest.raises(InputError, match="index outside its shape"):
        unframe.convert(model, to="onnx")


def test_an_unsorted_chain_is_not_a_cycle(tmp_path: Path):
    """The cycle check is linear (Kahn): a long chain given in reverse order loads."""
    nodes = [helper.make_node("Relu", [f"v{i}"], [f"v{i + 1}"]) for i in range(2000)][::-1]
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("v0", TensorProto.FLOAT, [2])],
                              [helper.make_tensor_value_info("v2000", TensorProto.FLOAT, [2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    onnx.save(model, tmp_path / "chain.onnx")
    assert len(unframe.load(tmp_path / "chain.onnx").graph) == 2000
    model.graph.node[0].input[0] = "v2000"  # the last node now reads its own output
    onnx.save(model, tmp_path / "cycle.onnx")
    with pytest.raises(InputError, match="cycle"):
        unframe.load(tmp_path / "cycle.onnx")


def test_a_function_call_may_not_omit_an_input_its_body_needs(tmp_path: Path):
    """Found by the opset campaign: f(a, b, "") whose body is Max(i0, i1, i2) crashed onnxruntime
    (a segfault of the whole process) once inlined. Omitting an input the body leaves alone is fine."""
    def model(body_inputs: list[str]) -> onnx.ModelProto:
        f = helper.make_function("local", "f", ["i0", "i1", "i2"], ["o0"],
                                 [helper.make_node("Max", body_inputs, ["o0"])],
                                 [helper.make_opsetid("", 13)])
        graph = helper.make_graph([helper.make_node("f", ["x", "x", ""], ["y"], domain="local")], "g",
                                  [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3])])
        return helper.make_model(graph, functions=[f], ir_version=9,
                                 opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("local", 1)])

    result, before = _convert(tmp_path, model(["i0", "i1", "i2"]))
    _refused(result, tmp_path, before, "calls function 'f' without its input 'i2', which the function's Max needs")
    ok, _ = _convert(tmp_path, model(["i0", "i1"]))
    assert ok.exit_code == 0, ok.output


@pytest.mark.parametrize(("heads", "words"), [
    ({"q_num_heads": 3, "kv_num_heads": 2**32}, "kv_num_heads=4294967296, which no model has"),
    ({"q_num_heads": 3, "kv_num_heads": 2}, "q_num_heads=3, not a multiple of kv_num_heads=2"),
])
def test_attention_head_counts_are_checked_at_load(tmp_path: Path, heads: dict[str, int], words: str):
    """Found by the opset campaign: an Attention whose kv_num_heads is 2^32 killed the process in
    onnxruntime with SIGFPE (a 32-bit division by zero)."""
    graph = helper.make_graph(
        [helper.make_node("Attention", ["q", "k", "v"], ["y"], **heads)], "g",
        [helper.make_tensor_value_info(n, TensorProto.FLOAT, [2, 4, 24]) for n in ("q", "k", "v")],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    result, before = _convert(tmp_path, model)
    _refused(result, tmp_path, before, words)
