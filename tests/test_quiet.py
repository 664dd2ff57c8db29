"""``unframe.quiet``: native log lines written to fd 2 (as C++ code writes them) and the
frameworks' Python loggers are kept off stderr, unless kept for ``--debug``."""

from __future__ import annotations

import logging
import os
import subprocess
import sys

import pytest

from unframe import quiet


def _native(text: str) -> None:
    """Write the way C++ logging does: straight to file descriptor 2, past sys.stderr."""
    os.write(2, text.encode())


def test_fd2_is_captured_and_dropped(capfd) -> None:
    with quiet.quiet_native_logs(keep=False):
        _native("I0000 cpu_feature_guard.cc:227] native noise\n")
    _native("after\n")
    err = capfd.readouterr().err
    assert "native noise" not in err
    assert "after" in err  # fd 2 is back where it was


def test_keep_lets_lines_through(capfd) -> None:
    with quiet.quiet_native_logs(keep=True):
        _native("shown with debug\n")
    assert "shown with debug" in capfd.readouterr().err


def test_debug_flag_is_the_default(capfd) -> None:
    quiet.set_debug(True)
    try:
        assert quiet.debug_enabled()
        with quiet.quiet_native_logs():
            _native("debug line\n")
    finally:
        quiet.set_debug(False)
    assert not quiet.debug_enabled()
    with quiet.quiet_native_logs():
        _native("quiet line\n")
    err = capfd.readouterr().err
    assert "debug line" in err and "quiet line" not in err


def test_loggers_quieted_then_restored() -> None:
    tf_logger = logging.getLogger("tf2onnx")
    tf_logger.setLevel(logging.INFO)
    try:
        with quiet.quiet_native_logs(keep=False):
            for name in ("absl", "tensorflow", "tf2onnx"):
                assert not logging.getLogger(name).isEnabledFor(logging.WARNING), name
        assert tf_logger.level == logging.INFO
    finally:
        tf_logger.setLevel(logging.NOTSET)


def test_exception_carries_the_last_lines(capfd) -> None:
    with pytest.raises(ValueError) as err, quiet.quiet_native_logs(keep=False):
        for i in range(30):
            _native(f"line {i}\n")
        raise ValueError("boom")
    notes = getattr(err.value, "__notes__", [])
    assert len(notes) == 1
    assert "line 29" in notes[0] and "line 10" in notes[0] and "line 9\n" not in notes[0]
    assert str(err.value) == "boom"  # the one-line message is untouched
    assert "line 29" not in capfd.readouterr().err


def test_no_note_when_nothing_was_logged() -> None:
    with pytest.raises(KeyError) as err, quiet.quiet_native_logs(keep=False):
        raise KeyError("k")
    assert not getattr(err.value, "__notes__", [])


def test_nested_uses_share_one_capture(capfd) -> None:
    with quiet.quiet_native_logs(keep=False):
        with quiet.quiet_native_logs(keep=False):
            _native("inner\n")
        _native("outer, after the inner exit\n")
    _native("restored\n")
    err = capfd.readouterr().err
    assert "inner" not in err and "outer" not in err and "restored" in err


CLOSED_FD2 = """
import logging, os
os.close(2)
from unframe import quiet
with quiet.quiet_native_logs(keep=False):
    assert not logging.getLogger("tensorflow").isEnabledFor(logging.WARNING)
    ran = True
try:
    with quiet.quiet_native_logs(keep=False):
        raise ValueError("inner")
except ValueError as exc:
    assert not getattr(exc, "__notes__", [])
print("ok" if ran else "no")
"""


def test_no_redirect_when_fd2_is_closed() -> None:
    """fd 2 closed (or not a real descriptor): only the loggers are quieted, nothing fails."""
    run = subprocess.run([sys.executable, "-c", CLOSED_FD2], capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0 and run.stdout.strip() == "ok", run.stdout + run.stderr


def test_sets_tf_log_level_unless_the_user_did(monkeypatch) -> None:
    monkeypatch.delenv("TF_CPP_MIN_LOG_LEVEL", raising=False)
    quiet.quiet_tensorflow_env()
    assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "3"
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")
    with quiet.quiet_native_logs(keep=False):
        assert os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"
