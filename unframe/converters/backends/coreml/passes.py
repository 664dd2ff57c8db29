"""coremltools' pass pipeline as the CoreML backend runs it.

One pass is replaced: ``common::add_fp16_cast`` (what ``compute_precision=FLOAT16`` runs) becomes
``unframe::add_fp16_cast``, the same pass with a memory-lean overflow check. coremltools decides
whether an op may compute in fp16 by looking at its constant inputs: the largest finite
magnitude (below 1e38; larger ones are infinities on purpose, as in attention masks) must fit fp16.
Its check builds ``np.abs(value)``, a boolean mask, the int64 indices of ``np.where`` and the
gathered values at once: about 4.3x the tensor's bytes, 4.3 GB for the 1 GB vocabulary embedding
of a Llama-3.2-1B (measured: the pass alone took a 1.2 GB model from 3.4 to 10.8 GB of peak RSS).
The replacement reaches the same answer in slices of :data:`CHUNK` elements.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from typing import Any

import numpy as np

PASS = "unframe::add_fp16_cast"
CHUNK = 1 << 22  # elements per slice of the overflow check (16 MiB of float32)
FP16_MAX = 65504.0
INFINITE = 1e38  # coremltools' threshold: above it a value stands for infinity


def magnitudes(value: np.ndarray) -> Iterator[np.ndarray]:
    """``|value|`` in slices of :data:`CHUNK` elements (temporaries of 16 MiB, not of the tensor)."""
    flat = np.asarray(value).reshape(-1)
    for start in range(0, flat.size, CHUNK):
        yield np.abs(flat[start:start + CHUNK])


def fits_fp16(value: np.ndarray) -> bool:
    """True when every magnitude below :data:`INFINITE` is at most fp16's largest (NaN ignored,
    as coremltools' comparison ignores it)."""
    for part in magnitudes(value):
        finite = part[part < INFINITE]
        if finite.size and float(finite.max()) > FP16_MAX:
            return False
    return True


def _register() -> None:
    from coremltools.converters.mil.mil.passes.defs.quantization import add_fp16_cast
    from coremltools.converters.mil.mil.passes.pass_registry import PASS_REGISTRY, register_pass

    if PASS in PASS_REGISTRY:
        return

    class lean_add_fp16_cast(add_fp16_cast):  # noqa: N801 - coremltools names passes in lower case
        """coremltools' ``add_fp16_cast`` with :func:`fits_fp16` as its overflow check."""

        @staticmethod
        def fp16_overflow(op: Any) -> bool:
            for inputs in op.inputs.values():
                for var in inputs if isinstance(inputs, (list, tuple)) else [inputs]:
                    if (var.op is not None and var.op.op_type == "const"
                            and var.is_tensor_or_scalar_of(dtype="fp32")
                            and not fits_fp16(var.op.val.val)):
                        return True
            return False

    register_pass(namespace="unframe", name="add_fp16_cast")(lean_add_fp16_cast)


def pipeline(fp16: bool, op_selector: Callable[[Any], bool] | None = None) -> Any:
    """The default pipeline; for fp16 compute with the lean cast pass (``op_selector``: the ops
    that may compute in fp16, all by default)."""
    import coremltools as ct

    result = ct.PassPipeline.DEFAULT
    if not fp16:
        return result
    _register()
    result.passes = [PASS if name == "common::add_fp16_cast" else name for name in result.passes]
    result.set_options(PASS, {"op_selector": op_selector or (lambda op: True)})
    return result
