"""Import coremltools without the frameworks only its own frontends need.

coremltools imports tensorflow, transformers, xgboost and scikit-learn at import time just to
detect them (about 30 s on a busy 2-core machine). unframe never uses coremltools' TF, sklearn or
xgboost frontends (TF goes through tf2onnx), so they are hidden while coremltools is first
imported and become importable again right after. torch is left alone: its frontend is used.
torchao (installed for ExecuTorch) is hidden too: coremltools only probes it for its torch
frontend's quantized ops, and its import logs two failed CUDA-kernel loads and a torch warning
to stderr on a CPU machine.
"""

from __future__ import annotations

import sys
from types import ModuleType

from unframe.errors import MissingExtraError

_NOT_NEEDED = ("tensorflow", "transformers", "xgboost", "sklearn", "torchao")


def import_coremltools() -> ModuleType:
    if "coremltools" in sys.modules:
        return sys.modules["coremltools"]
    import logging

    ct_logger = logging.getLogger("coremltools")
    if ct_logger.level == logging.NOTSET:
        # its import warns about untested framework versions and the missing macOS runtime
        # (this is Linux: packages are written and checked with the MIL evaluator, never run)
        ct_logger.setLevel(logging.ERROR)
    hidden = [name for name in _NOT_NEEDED if name not in sys.modules]
    for name in hidden:
        sys.modules[name] = None  # type: ignore[assignment]  # makes `import name` fail fast
    try:
        from unframe import timing

        with timing.tool("coremltools (import)"):
            import coremltools
    except ImportError as exc:
        raise MissingExtraError("the MIL evaluator", "coreml", "coremltools") from exc
    finally:
        for name in hidden:
            if sys.modules.get(name, 0) is None:
                del sys.modules[name]
    return coremltools


def mil_types() -> ModuleType:
    import_coremltools()
    from coremltools.converters.mil.mil import types

    return types
