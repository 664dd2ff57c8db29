"""unframe.sandbox: code that can crash runs in a child process; what comes back is the result,
the typed error with every field, or a typed error naming the signal, the timeout or the
memory limit. The parent always survives."""

from __future__ import annotations

import pytest
import sandbox_targets as targets

from unframe import sandbox
from unframe.errors import ConversionError, InputError, ResourceLimitError, UnsupportedError


@pytest.fixture
def box():
    b = sandbox.Sandbox("test")
    yield b
    b.close()


def test_result_and_reuse(box: sandbox.Sandbox):
    assert box.call(targets.double, 21) == 42
    first = box.call(targets.pid)
    assert box.call(targets.pid) == first != __import__("os").getpid()
    assert box.starts == 1 and box.calls == 3


def test_a_crash_is_a_typed_error_naming_the_signal_and_the_child_is_replaced(box: sandbox.Sandbox):
    before = box.call(targets.pid)
    with pytest.raises(InputError, match=r"the test parser crashed \(SIGSEGV\)") as info:
        box.call(targets.segfault, what="the test parser")
    assert info.value.exit_code == 3
    with pytest.raises(ConversionError, match="SIGSEGV"):
        box.call(targets.segfault, crash_error=ConversionError)
    assert box.call(targets.pid) != before and box.starts == 3


def test_typed_errors_come_back_whole(box: sandbox.Sandbox):
    with pytest.raises(UnsupportedError) as info:
        box.call(targets.typed)
    err = info.value
    assert (err.message, err.hint, err.exit_code) == ("the parser refused it", "see the blockers", 4)
    assert [(b.op, b.reason, b.node) for b in err.blockers] == [("Foo", "no such op", "n1")]


def test_an_unexpected_exception_carries_the_child_traceback(box: sandbox.Sandbox):
    with pytest.raises(sandbox.SandboxedFailure, match="KeyError: 'missing'") as info:
        box.call(targets.bug)
    assert "sandbox_targets.py" in info.value.child_traceback
    with pytest.raises(sandbox.SandboxedFailure, match="PicklingError|AttributeError"):
        box.call(targets.unpicklable)
    assert box.call(targets.double, 1) == 2  # the child survived both


def test_timeout_stops_the_child(box: sandbox.Sandbox):
    with pytest.raises(InputError, match="the sleeper did not finish within 0.5 s"):
        box.call(targets.sleep, 30, what="the sleeper", timeout=0.5)
    assert box.call(targets.double, 2) == 4


def test_memory_limit():
    b = sandbox.Sandbox("limited", memory_limit=1 << 30)
    try:
        with pytest.raises(ResourceLimitError, match="ran out of memory in its child process"):
            b.call(targets.allocate, 4 << 30)
        assert b.call(targets.allocate, 1 << 20) == 1 << 20
    finally:
        b.close()


def test_a_session_shares_one_child_and_closes_it():
    with sandbox.session():
        first = sandbox.call("test-session", targets.pid)
        with sandbox.session():  # nested (a conversion inside a batch): the same child
            assert sandbox.call("test-session", targets.pid) == first
        box = sandbox.shared("test-session")
        assert box.alive()
    assert not box.alive() and "test-session" not in sandbox._children


def test_a_child_stuck_in_native_code_dies_with_its_parent(tmp_path):
    """A parent killed outright (no atexit) takes its stuck child with it (PR_SET_PDEATHSIG)."""
    import os
    import signal
    import subprocess
    import sys
    import time

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    script = tmp_path / "parent.py"
    script.write_text(
        "import sys, sandbox_targets\n"
        "from unframe import sandbox\n"
        "box = sandbox.Sandbox('stuck')\n"
        "box.call(sandbox_targets.double, 1)\n"
        "print(box.proc.pid, flush=True)\n"
        "box.call(sandbox_targets.sleep, 600)\n")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    child = int(parent.stdout.readline())
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    for _ in range(100):
        if not _running(child):
            break
        time.sleep(0.1)
    assert not _running(child), "the child outlived its parent"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(")")[-1].split()[0] != "Z"  # a zombie has exited
    except FileNotFoundError:
        return False


def test_a_call_interrupted_in_the_parent_leaves_no_reply_for_the_next(box: sandbox.Sandbox):
    """A time limit (or Ctrl-C) raised in the parent while the child works: the child's late
    answer must never be read as the next call's (the child is replaced)."""
    from unframe import limits

    box.call(targets.pid)
    with pytest.raises(limits.TimeLimitExceeded):
        with limits.time_limit(0.3, "the test"):
            box.call(targets.sleep, 1.0)
    assert box.call(targets.double, 4) == 8
    assert box.call(targets.double, 5) == 10
    assert box.starts == 2
