"""What both direct routes share: the precision option, the I/O record, the artifact, quiet."""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import warnings
from collections.abc import Iterator, Sequence
from typing import Any

import numpy as np

from unframe.converters.base import Artifact, Target
from unframe.errors import UsageError

PRECISIONS = ("fp32", "fp16")
LOG = logging.getLogger("unframe.litert")
# Python loggers the converters write INFO/WARNING lines to (the deprecated-path warning of
# from_concrete_functions, ai-edge-quantizer's, torch.export's)
NOISY_LOGGERS = ("absl", "tensorflow", "litert_torch", "ai_edge_quantizer", "torchao", "jax",
                 "torch.export", "torch._dynamo", "torch.fx.experimental.symbolic_shapes")


def precision(target: Target) -> str:
    value = str(target.get("precision", "fp32")).lower()
    if value not in PRECISIONS:
        raise UsageError(f"LiteRT precision {value!r} is not one of {', '.join(PRECISIONS)}",
                         "use --precision fp32 (the default) or fp16 (16-bit weights)")
    return value


def quantize_key(target: Target) -> Any:
    """A conversion cache's key of ``target.options["quantize"]``: the scheme and the run's one
    list of calibration sets, by identity (their arrays are too large to compare)."""
    request = target.get("quantize")
    if request is None:
        return None
    return (request.scheme.name, id(request.calibration), len(request.calibration))


def quantized(artifact: Artifact, content: bytes, target: Target) -> Artifact:
    """The size the accuracy stage reports (float-equivalent bytes vs the file's) in the
    quantized artifact's records (``make_artifact`` wrote the scheme into the file)."""
    from unframe.converters.backends.litert.quantize import sizes

    artifact.metadata["quantized_size"] = sizes(content)
    return artifact


def io_record(tensors_in: Sequence[str], names_in: Sequence[str], dtypes_in: Sequence[str],
              shapes_in: Sequence[Sequence[int | None]], tensors_out: Sequence[str],
              names_out: Sequence[str], dtypes_out: Sequence[str]) -> dict[str, Any]:
    """The source's names and dtypes for the .tflite's input and output tensors (by the
    tensor names the interpreter reports), in the source's order."""
    return {
        "inputs": [{"name": n, "tensor": t, "dtype": d, "shape": [None if s is None else int(s) for s in shape]}
                   for t, n, d, shape in zip(tensors_in, names_in, dtypes_in, shapes_in, strict=True)],
        "outputs": [{"name": n, "tensor": t, "dtype": d}
                    for t, n, d in zip(tensors_out, names_out, dtypes_out, strict=True)],
    }


def tensor_names(content: bytes) -> tuple[list[str], list[str]]:
    """The model's input and output tensor names in the subgraph's order (no interpreter: the
    flatbuffer's main subgraph, which is what the converter wrote from the traced function)."""
    from unframe.converters.backends.litert import flatbuf

    info = flatbuf.describe(content, "the converted model")
    return [t["tensor"] for t in info["inputs"]], [t["tensor"] for t in info["outputs"]]


def make_artifact(content: bytes, record: dict[str, Any], target: Target, converter: str,
                  notes: list[str]) -> Artifact:
    """The artifact in memory, with unframe's records stamped in (``stamp`` adds provenance)."""
    from unframe.converters.backends.litert import flatbuf

    request = target.get("quantize")
    meta = {flatbuf.IO_KEY: json.dumps(record, sort_keys=True),
            "unframe.precision": (f"{request.scheme.name} (quantized)" if request is not None else
                                  precision(target) + (" (16-bit weights, float32 compute)"
                                                       if precision(target) == "fp16" else "")),
            "unframe.converter": converter}
    if request is not None:
        meta["unframe.quantize"] = request.scheme.name
    stamped = flatbuf.stamp(content, meta, record)
    # built_here (no prefix: never written into the file) lets the runner run it in this process
    return Artifact(kind="tflite", model=stamped, metadata=dict(meta, built_here=True), notes=notes)


def np_name(dtype: Any) -> str:
    return np.dtype(dtype).name


@contextlib.contextmanager
def quiet() -> Iterator[None]:
    """The converters print to stdout (litert-torch's progress, ai-edge-quantizer's size table,
    Keras' "Saved artifact at") and log through Python and native stderr: all of it goes to the
    debug log (logger ``unframe.litert``); ``--debug`` lets it through."""
    from unframe import quiet as native

    os.environ.setdefault("LITERT_TORCH_SHOW_PROGRESS", "n")
    if native.debug_enabled():
        yield
        return
    loggers = [logging.getLogger(n) for n in NOISY_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    printed = io.StringIO()
    try:
        with warnings.catch_warnings(), contextlib.redirect_stdout(printed), native.quiet_native_logs():
            warnings.simplefilter("ignore")
            yield
    finally:
        for lg, level in zip(loggers, levels, strict=True):
            lg.setLevel(level)
        if printed.getvalue().strip():
            LOG.debug("the converter printed:\n%s", printed.getvalue())


def first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return (text.splitlines()[0] if text else type(exc).__name__)[:300]


def text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)
