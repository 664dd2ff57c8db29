"""The numpy reference evaluator for Core ML ML Programs (MIL).

coremltools writes .mlpackage files on Linux but runs them only on macOS; this evaluator is how
unframe checks a CoreML program's numbers everywhere. coremltools is imported lazily, inside the
functions that need it.

    from unframe.converters.backends.coreml.mil_eval import MILRunner, evaluate, kernel
"""

from __future__ import annotations

from unframe.converters.backends.coreml.mil_eval.coverage import coverage
from unframe.converters.backends.coreml.mil_eval.evaluator import KernelContext, KernelError, evaluate
from unframe.converters.backends.coreml.mil_eval.registry import KERNELS, kernel
from unframe.converters.backends.coreml.mil_eval.runner import MILRunner, load_program

__all__ = ["evaluate", "MILRunner", "load_program", "kernel", "KERNELS", "KernelContext",
           "KernelError", "coverage"]
