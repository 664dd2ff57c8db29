"""Run an OpenVINO IR here: ``Core().compile_model(model, "CPU")``, fed and read by name.

The CPU plugin computes in bfloat16 by default on a CPU with AVX512-BF16 (as this one), whatever
the IR holds; parity runs with ``INFERENCE_PRECISION_HINT f32``, so an fp32 IR computes in
float32 and an fp16-compressed one computes in float32 from its fp16 weights (what the artifact
holds, not what a device chooses at load). The runner's name says which precision ran.

Inputs are taken by their names (the ONNX graph's), cast to the IR's element types; outputs are
given back by name, cast to the dtypes recorded at conversion (the CPU plugin computes i64 as
i32 inside, and its boolean is u8 in some builds). Dynamic dims are the IR's partial shapes:
any feed within them runs, no resize needed.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from unframe.converters.backends.openvino.importer import DEVICE
from unframe.converters.backends.openvino.runtime import core, first_line, ov_tool, quiet_openvino
from unframe.distributions import dist_version
from unframe.errors import Blocker, InputError, UnsupportedError
from unframe.validate.runner import Runner, TensorSpec

PARITY_PRECISION = "f32"
# OpenVINO element type names -> numpy dtype names
NUMPY_OF = {"f32": "float32", "f16": "float16", "f64": "float64", "bf16": "float32", "i64": "int64",
            "i32": "int32", "i16": "int16", "i8": "int8", "u64": "uint64", "u32": "uint32",
            "u16": "uint16", "u8": "uint8", "boolean": "bool"}


def read_ir(path: Path) -> Any:
    """``core().read_model`` of an IR (.xml with its .bin beside it); a missing, truncated or
    corrupt one is a one-line InputError."""
    xml = Path(path)
    if not xml.is_file():
        raise InputError(f"{xml}: no such file", "check the path")
    if not xml.with_suffix(".bin").is_file():
        raise InputError(f"{xml}: its weights file {xml.with_suffix('.bin').name} is missing",
                         "keep the .bin beside the .xml")
    try:
        with quiet_openvino():
            return core().read_model(str(xml))
    except Exception as exc:
        raise InputError(f"{xml}: OpenVINO can't read this IR: {first_line(exc)}",
                         "it is truncated or corrupt; convert it again") from exc


class OpenVINORunner(Runner):
    """One compiled model of an IR on the CPU plugin."""

    def __init__(self, path: Path, outputs: Sequence[Mapping[str, Any]] | None = None,
                 precision: str = PARITY_PRECISION, threads: int | None = None) -> None:
        self.path = Path(path)
        self.precision = precision
        self.name = f"OpenVINO {dist_version('openvino') or '?'} CPU ({precision})"
        self._outputs = list(outputs) if outputs is not None else None
        self._threads = threads
        self._compiled: Any = None
        self._request: Any = None

    # -- loading -------------------------------------------------------------------------------
    def compiled(self) -> Any:
        if self._compiled is None:
            model = read_ir(self.path)
            config: dict[str, Any] = {"INFERENCE_PRECISION_HINT": self.precision}
            if self._threads:
                config["INFERENCE_NUM_THREADS"] = int(self._threads)
            try:
                with quiet_openvino(), ov_tool():
                    self._compiled = core().compile_model(model, DEVICE, config)
            except Exception as exc:
                raise UnsupportedError(
                    f"OpenVINO's {DEVICE} plugin could not compile {self.path.name}: {first_line(exc)}",
                    "the IR converted but this runtime can't build it",
                    blockers=[Blocker("*", f"compile_model on {DEVICE} failed: {first_line(exc)}")]) from exc
            self._request = self._compiled.create_infer_request()
        return self._compiled

    def input_specs(self) -> list[TensorSpec]:
        return [TensorSpec(p.get_any_name(), _dims(p.get_partial_shape()),
                           NUMPY_OF.get(p.get_element_type().get_type_name(), "float32"))
                for p in self.compiled().inputs]

    def output_names(self) -> list[str]:
        if self._outputs is not None:
            return [o["name"] for o in self._outputs]
        return [p.get_any_name() for p in self.compiled().outputs]

    # -- running -------------------------------------------------------------------------------
    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        compiled = self.compiled()
        inputs = {}
        for port in compiled.inputs:
            name = _fed_name(port, feeds)
            dtype = NUMPY_OF.get(port.get_element_type().get_type_name())
            value = np.asarray(feeds[name])
            inputs[port] = np.ascontiguousarray(value.astype(dtype, copy=False) if dtype else value)
        try:
            with quiet_openvino():
                result = self._request.infer(inputs)
        except Exception as exc:
            raise RuntimeError(f"OpenVINO inference failed: {first_line(exc)}") from exc
        return self._named(compiled, result)

    def _named(self, compiled: Any, result: Any) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        records = self._outputs or [{"name": p.get_any_name(), "dtype": None} for p in compiled.outputs]
        for i, record in enumerate(records):
            port = _output_port(compiled, record["name"], i)
            value = np.array(result[port], copy=True)  # the request reuses its buffers
            if record.get("dtype"):
                value = value.astype(record["dtype"], copy=False)
            out[record["name"]] = value
        return out

    def close(self) -> None:
        self._request = None
        self._compiled = None


def _fed_name(port: Any, feeds: Mapping[str, np.ndarray]) -> str:
    for name in port.get_names():
        if name in feeds:
            return str(name)
    raise KeyError(f"no feed for OpenVINO input {port.get_any_name()!r} (feeds: {', '.join(feeds)})")


def _output_port(compiled: Any, name: str, index: int) -> Any:
    for port in compiled.outputs:
        if name in port.get_names():
            return port
    return compiled.outputs[index]


def _dims(shape: Any) -> tuple[int | str | None, ...] | None:
    if shape.rank.is_dynamic:
        return None
    return tuple(d.get_length() if d.is_static else None for d in shape)


def compile_precision(compiled: Any) -> str:
    """The precision a compiled model computes in (``INFERENCE_PRECISION_HINT`` as it took it)."""
    return str(compiled.get_property("INFERENCE_PRECISION_HINT"))


__all__ = ["NUMPY_OF", "OpenVINORunner", "read_ir"]
