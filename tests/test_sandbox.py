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
    # the message is one line naming the cause; the traceback is for --debug, through any chain
    assert "\n" not in str(info.value) and "Traceback" not in str(info.value)
    try:
        raise RuntimeError("the stage failed") from info.value
    except RuntimeError as outer:
        assert sandbox.child_tracebacks(outer) == [info.value.child_traceback]
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
    (child,) = _kill_the_parent_of(tmp_path, "box.call(sandbox_targets.double, 1)\n"
                                             "print(box.proc.pid, flush=True)\n"
                                             "box.call(sandbox_targets.sleep, 600)\n")
    assert not _running(child), "the child outlived its parent"


def _kill_the_parent_of(tmp_path, body: str) -> list[int]:
    """Run ``body`` in a parent process holding ``box`` (a Sandbox); SIGKILL the parent once it
    printed the pids to watch; the pids, once each is gone or 10 s have passed."""
    import os
    import signal
    import subprocess
    import sys
    import time

    if not sys.platform.startswith("linux"):
        pytest.skip("PR_SET_PDEATHSIG is Linux's")
    script = tmp_path / "parent.py"
    script.write_text("import sandbox_targets\nfrom unframe import sandbox\nbox = sandbox.Sandbox('stuck')\n" + body)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    parent = subprocess.Popen([sys.executable, str(script)], stdout=subprocess.PIPE, text=True, env=env)
    pids = [int(x) for x in parent.stdout.readline().split()]
    assert pids and all(_running(p) for p in pids)
    os.kill(parent.pid, signal.SIGKILL)
    parent.wait()
    for _ in range(100):
        if not any(_running(p) for p in pids):
            break
        time.sleep(0.1)
    return pids


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


# -- templates (zygote=True): a costly preload paid once per process --------------------------------

def zy(box: sandbox.Sandbox, fn, *args, **kwargs):
    return box.call(fn, *args, preload=targets.slow_preload, zygote=True, what="the test parser", **kwargs)


@pytest.fixture
def fresh_templates():
    sandbox.close_all()
    yield
    sandbox.close_all()


def test_zygote_children_after_the_first_are_forks_of_one_template(fresh_templates):
    box = sandbox.Sandbox("zygote")
    try:
        first, ran = zy(box, targets.preloads)
        assert ran == [first]  # the first child: plain, it ran the preload itself
        assert not sandbox._templates  # a one-shot conversion never starts a template
        seen = set()
        for _ in range(3):
            with pytest.raises(InputError, match=r"the test parser crashed \(SIGSEGV\)"):
                zy(box, targets.segfault)
            child, ran = zy(box, targets.preloads)
            template = sandbox._templates[sandbox._key(targets.slow_preload)]
            # the preload ran once, in the template, before the fork: not in this child
            assert ran == [template.proc.pid] != [child]
            assert box.proc.pid == child and child not in seen
            seen.add(child)
        assert box.starts == 4 and len(sandbox._templates) == 1
    finally:
        box.close()


def test_a_forked_child_is_stopped_reaped_and_replaced(fresh_templates):
    box = sandbox.Sandbox("zygote")
    try:
        zy(box, targets.pid)
        with pytest.raises(InputError):
            zy(box, targets.segfault)
        forked = zy(box, targets.pid)
        template = sandbox._templates[sandbox._key(targets.slow_preload)]
        with pytest.raises(InputError, match="did not finish within 0.5 s"):
            zy(box, targets.sleep, 30, timeout=0.5)
        assert not _running(forked)  # killed, and reaped by the template (no zombie)
        assert box.call(targets.double, 3, preload=targets.slow_preload, zygote=True) == 6
        assert box.proc.pid != forked and template.alive()
        tail = box._stderr_tail()
        assert isinstance(tail, str)
    finally:
        box.close()
    sandbox.close_all()
    assert not template.alive()  # closing ends the template


def test_a_template_whose_preload_fails_leaves_plain_children(fresh_templates):
    box = sandbox.Sandbox("zygote-broken")
    try:
        for _ in range(3):
            with pytest.raises(sandbox.SandboxedFailure, match="the library is broken"):
                box.call(targets.pid, preload=targets.failing_preload, zygote=True)
        assert not sandbox._templates
    finally:
        box.close()


def test_a_template_and_its_children_die_with_the_parent(tmp_path):
    child, template = _kill_the_parent_of(tmp_path, (
        "t = sandbox_targets\n"
        "call = lambda fn, *a: box.call(fn, *a, preload=t.slow_preload, zygote=True)\n"
        "call(t.pid)\n"
        "try:\n    call(t.segfault)\nexcept Exception:\n    pass\n"
        "call(t.pid)\n"
        "print(box.proc.pid, box._template.proc.pid, flush=True)\n"
        "call(t.sleep, 600)\n"))
    assert not _running(template), "the template outlived its parent"
    assert not _running(child), "the forked child outlived its parent"
