"""onnxruntime on graphs from outside runs in a child process (``untrusted_graphs``): a graph that
crashes onnxruntime's native code is a typed error naming the signal, and unframe lives on."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import unframe
from unframe.errors import InputError
from unframe.validate.onnxruntime import OnnxRuntimeRunner, untrusted_graphs


def _vi(name: str, shape: list[int]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, TensorProto.FLOAT, shape)


def _crashing_attention() -> onnx.ModelProto:
    """3-D Attention with kv_num_heads = 0: onnxruntime divides by it while loading (SIGFPE;
    found by the opset campaign with a fuzzed past_key, reduced by hand)."""
    graph = helper.make_graph(
        [helper.make_node("Attention", ["Q", "K", "V"], ["Y"], q_num_heads=3, kv_num_heads=0)], "g",
        [_vi("Q", [2, 4, 24]), _vi("K", [2, 6, 24]), _vi("V", [2, 6, 24])], [_vi("Y", [2, 4, 24])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)


def _relu() -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [_vi("x", [3])], [_vi("y", [3])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)


@pytest.fixture(scope="module")
def crashes_onnxruntime(tmp_path_factory) -> onnx.ModelProto:
    """The graph, once onnxruntime itself is seen to die on it in a throwaway process."""
    model = _crashing_attention()
    path = tmp_path_factory.mktemp("crash") / "attention.onnx"
    onnx.save(model, path)
    code = f"import onnxruntime as o; o.InferenceSession({str(path)!r})"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    if done.returncode >= 0:
        pytest.skip(f"this onnxruntime no longer crashes on kv_num_heads=0 (exit {done.returncode})")
    return model


def test_a_crash_in_onnxruntime_is_a_typed_error_and_the_next_graph_runs(crashes_onnxruntime):
    with untrusted_graphs():
        with pytest.raises(InputError, match=r"onnxruntime loading the graph crashed \(SIGFPE\)") as info:
            OnnxRuntimeRunner(crashes_onnxruntime)
        assert info.value.exit_code == 3
        runner = OnnxRuntimeRunner(_relu())  # a fresh child takes the next graph
        assert runner.remote is not None
        x = np.array([-1.5, 0.0, 2.5], dtype=np.float32)
        np.testing.assert_array_equal(runner.run({"x": x})["y"], np.maximum(x, 0))


def test_outside_the_block_sessions_stay_in_process():
    assert OnnxRuntimeRunner(_relu()).remote is None


def test_an_onnx_conversion_runs_onnxruntime_apart(tmp_path, crashes_onnxruntime):
    """Through the pipeline: the ONNX frontend holds the block for the run (unframe's load checks
    refuse this graph first now, so the runner is asked directly under the frontend's guard)."""
    from unframe.converters.frontends.onnx import OnnxFrontend

    with OnnxFrontend().preserve(tmp_path / "m.onnx"):
        with pytest.raises(InputError, match="SIGFPE"):
            OnnxRuntimeRunner(crashes_onnxruntime)
    path = tmp_path / "attention.onnx"
    onnx.save(crashes_onnxruntime, path)
    with pytest.raises(InputError, match="kv_num_heads=0"):  # and the load check names the cause
        unframe.convert_opset(str(path), 23, output=str(tmp_path / "out.onnx"))
    assert not (tmp_path / "out.onnx").exists()


def test_the_reference_evaluator_on_an_outside_graph_runs_apart_within_the_memory_budget():
    """onnxruntime refuses a Tile whose repeats don't match the input's rank; onnx's reference
    evaluator (the fallback) would tile it into 6.4 GB in this process (the opset campaign's
    5 GB peak). Apart, its address space is the memory budget plus the interpreter's own."""
    import resource

    from unframe import limits
    from unframe.errors import ResourceLimitError
    from unframe.validate.onnxruntime import onnx_runner

    graph = helper.make_graph(
        [helper.make_node("Tile", ["x", "r"], ["y"])], "g", [_vi("x", [4])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, None)],
        [onnx.numpy_helper.from_array(np.array([20000, 20000], np.int64), "r")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    with untrusted_graphs(), limits.memory_budget(64 << 20):
        runner = onnx_runner(model)
        assert runner.name.startswith("onnx.reference") and runner.remote is not None
        with pytest.raises(ResourceLimitError, match="ran out of memory in its child process"):
            runner.run({"x": np.ones(4, np.float32)})
        small = onnx_runner(_relu())  # the next graph still runs (onnxruntime takes this one)
        np.testing.assert_array_equal(small.run({"x": np.array([-1, 2, -3], np.float32)})["y"], [0, 2, 0])
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before < 512 * 1024  # KiB: not here


def test_a_runner_kept_past_the_untrusted_block_still_runs():
    """The zoo compares a converted graph with the framework's saved outputs after the conversion
    returned: the child had dropped its sessions by then (KeyError on the session's key, every
    model of a built zoo failed). A runner held past the block reopens its graph."""
    x = np.array([-1.0, 0.5, 2.0], np.float32)
    with untrusted_graphs():
        runner = OnnxRuntimeRunner(_relu())
        assert runner.remote is not None
        first = runner.run({"x": x})["y"]
    again = runner.run({"x": x})["y"]
    np.testing.assert_array_equal(again, np.maximum(x, 0))
    np.testing.assert_array_equal(first, again)
