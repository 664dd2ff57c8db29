"""OpenVINO imported the way unframe uses it: without its telemetry, and quietly.

``import openvino`` imports its converter (``openvino.tools.ovc``), which sends a usage event to
Google Analytics on import and about eight more per ``convert_model`` (``openvino_telemetry``:
each one forks a process that posts and is joined for up to 3 s, and writes ``~/intel/``). It is
opt-out, and opting out writes a consent file for the whole user account or needs ``CI=true`` in
the environment: neither is unframe's to change. Instead:

* the first import of ``openvino`` happens while ``openvino_telemetry`` is unimportable, so ovc's
  modules bind their own no-op stub (their ``except ImportError`` branch); the entry is removed
  right after, so the user's own ``import openvino_telemetry`` still works;
* where the user imported ``openvino`` first (their telemetry, their choice), each of unframe's
  calls (``quiet_openvino``) swaps the stub in for its duration and puts theirs back after.

Nothing here is imported by ``import unframe``.
"""

from __future__ import annotations

import contextlib
import sys
import threading
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from unframe.quiet import quiet_native_logs

# ovc's modules that bind ``tm`` (openvino_telemetry, or the stub) at import
TELEMETRY_USERS = ("openvino.tools.ovc.telemetry_utils", "openvino.tools.ovc.convert_impl",
                   "openvino.tools.ovc.utils", "openvino.tools.ovc.main")
TELEMETRY_STUB = "openvino.tools.ovc.telemetry_stub"
_lock = threading.RLock()


def import_openvino() -> ModuleType:
    """``openvino``, imported (the first time) with its telemetry unimportable."""
    module = sys.modules.get("openvino")
    if module is not None and hasattr(module, "Core"):
        return module
    with _lock:
        # the user's own openvino_telemetry module (if imported) is put back after
        saved = sys.modules.get("openvino_telemetry")
        sys.modules["openvino_telemetry"] = None  # type: ignore[assignment]  # ImportError on import
        try:
            from unframe import timing

            with quiet_native_logs(), timing.tool("openvino (import)"):
                import openvino
        finally:
            if saved is not None:
                sys.modules["openvino_telemetry"] = saved
            elif sys.modules.get("openvino_telemetry", 0) is None:
                del sys.modules["openvino_telemetry"]
    return openvino


@contextlib.contextmanager
def without_telemetry() -> Iterator[None]:
    """ovc's telemetry calls made no-ops for the block, whoever imported openvino first."""
    import_openvino()
    import importlib

    stub = importlib.import_module(TELEMETRY_STUB)
    with _lock:
        swapped: dict[ModuleType, Any] = {}
        for name in TELEMETRY_USERS:
            module = sys.modules.get(name)
            if module is not None and getattr(module, "tm", stub) is not stub:
                swapped[module] = module.tm
                module.tm = stub
        try:
            yield
        finally:
            for module, tm in swapped.items():
                module.tm = tm


@contextlib.contextmanager
def quiet_openvino() -> Iterator[None]:
    """An OpenVINO call: no telemetry, its C++ log lines and Python prints captured (shown with
    --debug), its Python warnings (deprecations of the frameworks it traces) dropped."""
    import io
    import warnings

    from unframe.quiet import debug_enabled

    printed = contextlib.nullcontext() if debug_enabled() else contextlib.redirect_stdout(io.StringIO())
    with without_telemetry(), quiet_native_logs(), printed, warnings.catch_warnings():
        if not debug_enabled():
            warnings.simplefilter("ignore")
        yield


def ov_tool() -> Any:
    """OpenVINO's own time (``unframe.timing``): a tool block named after the installed release."""
    from unframe import timing
    from unframe.distributions import dist_version

    return timing.tool(f"openvino {dist_version('openvino') or ''}".strip())


def core() -> Any:
    """One ``openvino.Core`` per process (it holds the loaded plugins)."""
    global _core
    if _core is None:
        with _lock:
            if _core is None:
                _core = import_openvino().Core()
    return _core


_core: Any = None


def first_line(exc: BaseException) -> str:
    """The meaningful line of an OpenVINO error: its messages start with a 'Check ... failed at
    src/...cpp:N:' line and repeat 'Exception from src/...' frames before the reason."""
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    useful = [ln for ln in lines if not _is_frame(ln)]
    text = (useful or lines or [type(exc).__name__])[0]
    return " ".join(text.split())[:400]


def _is_frame(line: str) -> bool:
    return (line.startswith(("Exception from src/", "Check '", "Exception from ")) or line.endswith(":")
            and "src/" in line) or line in ("Summary:",)


__all__ = ["core", "first_line", "import_openvino", "quiet_openvino", "without_telemetry"]
