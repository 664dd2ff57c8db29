"""TensorRT's parser and builder run in the conversion's child process (unframe.sandbox): one
child for the pre-flight parser, the parse and the build, none of them in this process."""

from __future__ import annotations

import os
import signal
import threading

import pytest
from trt_models import cnn_model, trt_or_skip

import unframe
from unframe import sandbox
from unframe.converters.backends.tensorrt.build import SANDBOX
from unframe.errors import InputError


@pytest.fixture(autouse=True)
def _trt() -> None:
    trt_or_skip()
    # a child started outside any session (a direct parser_verdict call in an earlier test of
    # this worker) lives until the process exits: start these tests without one
    sandbox.close_all()


def test_check_and_convert_share_one_child(tmp_path):
    import onnx_ir as ir

    src = tmp_path / "cnn.onnx"
    ir.save(cnn_model(batch=1), src)
    with sandbox.session():
        unframe.convert(str(src), to="tensorrt", output=tmp_path / "cnn.engine", builder_optimization_level=0)
        box = sandbox.shared(SANDBOX)
        # the pre-flight parser verdict, the parse and the build (plus TensorRT's import, untimed)
        assert (box.starts, box.calls) == (1, 4)
        child = box.proc.pid
        assert child != os.getpid()
    assert not box.alive()  # the conversion's child ends with it
    assert (tmp_path / "cnn.engine").stat().st_size > 10_000


def test_a_parser_crash_is_a_typed_error(tmp_path):
    """The child is killed with SIGSEGV while TensorRT's parser works (as a parser crash would):
    the conversion ends with exit code 3 naming the signal, and this process goes on."""
    import onnx_ir as ir

    from unframe.converters.backends.tensorrt import build

    src = tmp_path / "cnn.onnx"
    ir.save(cnn_model(batch=1), src)
    with sandbox.session():
        box = sandbox.shared(SANDBOX)
        box.call(build.import_tensorrt)  # a running child, TensorRT imported
        timer = threading.Timer(0.05, lambda: os.kill(box.proc.pid, signal.SIGSEGV))
        timer.start()
        with pytest.raises(InputError, match=r"crashed \(SIGSEGV\)") as info:
            box.call(_parse_slowly, src, what="TensorRT's ONNX parser")
        timer.join()
    assert info.value.exit_code == 3


def _parse_slowly(path):  # pragma: no cover - runs in the child
    import time

    from unframe.converters.backends.tensorrt import build

    build.parse_in_child(path)
    time.sleep(30)
