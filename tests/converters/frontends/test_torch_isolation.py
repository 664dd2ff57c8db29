"""A failed conversion leaves the process healthy (issue 34): the TorchScript tracer, which can
corrupt torch's heap when a trace fails, runs in a forked child (``_torch/isolate.py``). Three
conversions whose trace fails (a native crash, glibc aborting on a double free, a Python error in
the user's forward), each followed by a working conversion, all in one process.

The models misbehave only under the tracer (``torch.jit.is_tracing()``), standing in for the
native crashes the peers' op suites hit there. The process runs as a subprocess of the test, so
that a death (what happens without the child) fails the test instead of killing pytest."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("onnxscript", reason="needs onnxscript (torch.onnx dynamo exporter)")

HERE = Path(__file__).parent

SCRIPT = textwrap.dedent('''
    import ctypes
    import sys

    import torch
    from torch import nn

    sys.path.insert(0, {here!r})
    import torch_models as tm

    import unframe
    from unframe.errors import UnframeError


    class SegfaultInTrace(nn.Module):
        """dynamo refuses its data-dependent branch; the TorchScript tracer then crashes."""

        def forward(self, x):
            if torch.jit.is_tracing():
                ctypes.string_at(0)  # SIGSEGV, as a corrupted heap gives
            if x.sum() > 0:
                return x * 2
            return x - 1


    class DoubleFreeInTrace(nn.Module):
        def forward(self, x):
            if torch.jit.is_tracing():
                libc = ctypes.CDLL(None)
                libc.malloc.restype = ctypes.c_void_p
                libc.free.argtypes = [ctypes.c_void_p]
                block = libc.malloc(64)
                libc.free(block)
                libc.free(block)  # glibc: "double free detected", SIGABRT
            return x * 2


    class RaiseInTrace(nn.Module):
        def forward(self, x):
            if torch.jit.is_tracing():
                raise ValueError("this model refuses to be traced")
            return x + 1


    cases = [(SegfaultInTrace(), {{}}), (DoubleFreeInTrace(), {{"exporter": "torchscript"}}),
             (RaiseInTrace(), {{"exporter": "torchscript"}})]
    for model, options in cases:
        try:
            unframe.convert(model, sample_inputs=torch.randn(2, 4) + 3.0, **options)
            print("CONVERTED", flush=True)
        except UnframeError as exc:
            print("TYPED", type(exc).__name__, exc.exit_code, str(exc).splitlines()[0], flush=True)
        result = unframe.convert(tm.make_cnn(), sample_inputs=tm.cnn_sample(2))
        print("WORKED", result.export.route, bool(result.report), flush=True)
''')


def test_three_failed_traces_then_working_conversions_in_one_process(tmp_path: Path) -> None:
    script = tmp_path / "journey.py"
    script.write_text(SCRIPT.format(here=str(HERE)))
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600,
                          env=env, cwd=tmp_path)
    lines = done.stdout.splitlines()
    assert done.returncode == 0, (done.returncode, lines, done.stderr[-2000:])
    typed = [line for line in lines if line.startswith("TYPED")]
    worked = [line for line in lines if line.startswith("WORKED")]
    assert worked == ["WORKED dynamo True"] * 3, lines
    assert len(typed) == 3, lines
    # dynamo's own telling line first (the model's data-dependent branch: exit 4, no exporter
    # takes it), then the tracer's crash, which the child took
    assert typed[0].startswith("TYPED UnsupportedError 4"), typed
    assert "dynamo export of SegfaultInTrace: data-dependent control flow at journey.py" in typed[0], typed
    assert "crashed (SIGSEGV)" in typed[0], typed
    assert typed[1].startswith("TYPED ConversionError 9") and "crashed (SIGABRT)" in typed[1], typed
    # the user's frame and the exception it raised, in the first line
    assert "journey.py" in typed[2] and "in forward()" in typed[2], typed
    assert "ValueError: this model refuses to be traced" in typed[2], typed


def test_the_child_never_finalizes_what_the_parent_left_as_garbage(monkeypatch: pytest.MonkeyPatch) -> None:
    """An onnxruntime session of the parent's, left in a reference cycle, collected in the child:
    its destructor waits for thread-pool threads a forked child doesn't have, and the child hung
    (a test did, for 18 minutes). The child freezes what it inherits; here it collects garbage
    at once and must still answer."""
    import gc
    import time

    import onnxruntime as ort
    from onnx import TensorProto, helper

    from unframe.converters.frontends._torch import isolate

    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [64, 64])
    graph = helper.make_graph([helper.make_node("MatMul", ["x", "x"], ["y"])], "g", [x],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64, 64])])
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)], ir_version=10)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 2  # a thread pool: what the destructor waits for
    monkeypatch.setattr(isolate, "TIMEOUT", 60.0)
    gc.disable()  # the cycle stays garbage until the child collects it
    try:
        session = ort.InferenceSession(proto.SerializeToString(), options)
        import numpy as np

        session.run(None, {"x": np.ones((64, 64), np.float32)})
        time.sleep(1.0)  # its pool's threads stop spinning and wait on their condition variable
        cycle: list[object] = [session]
        cycle.append(cycle)
        del session, cycle
        assert isolate.run(lambda: gc.collect() >= 0, lambda exc: (str(exc), False), "a step") is True
    finally:
        gc.enable()
