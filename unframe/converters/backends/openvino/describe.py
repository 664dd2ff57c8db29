"""What ``unframe inspect`` shows of an OpenVINO IR, read without compiling or running it.

OpenVINO's IR reader is native code, and an IR given to ``inspect`` comes from anywhere: it is
read in a child process (``unframe.sandbox``), which hands back a plain description. The model's
``rt_info`` is returned flat (``unframe.version``, ``Runtime_version``...) for the caller to split
into unframe's provenance and the rest.
"""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

SANDBOX = "openvino"
READ_TIMEOUT = 300.0
# ops that hold no computation (counted apart)
NOT_COUNTED = frozenset({"Parameter", "Result", "Constant"})


def preload() -> None:
    """(In the child.) OpenVINO imported before the timed read."""
    from unframe.converters.backends.openvino.runtime import import_openvino

    import_openvino()


def describe_ir(path: Path) -> dict[str, Any]:
    """(In the child.) The description of the IR at ``path`` (.xml, its .bin beside it)."""
    from unframe.converters.backends.openvino.runner import NUMPY_OF, read_ir
    from unframe.converters.backends.openvino.weights import weight_precisions

    path = Path(path)
    model = read_ir(path)
    bin_path = path.with_suffix(".bin")
    ops = Counter(op.get_type_name() for op in model.get_ordered_ops()
                  if op.get_type_name() not in NOT_COUNTED)
    return {
        "path": str(path),
        "kind": "openvino",
        "file_bytes": path.stat().st_size + bin_path.stat().st_size,
        "ir_version": _ir_version(path),
        "name": model.get_name(),
        "inputs": [_port(p, NUMPY_OF) for p in model.inputs],
        "outputs": [_port(p, NUMPY_OF) for p in model.outputs],
        "nodes": sum(ops.values()),
        "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "weights": weight_precisions(model),
        "rt_info": flat_rt_info(model),
    }


def _port(port: Any, numpy_of: dict[str, str]) -> dict[str, Any]:
    shape = port.get_partial_shape()
    dims: list[Any] | None = None
    if not shape.rank.is_dynamic:
        dims = [d.get_length() if d.is_static else _bounds(d) for d in shape]
    et = port.get_element_type().get_type_name()
    return {"name": port.get_any_name(), "shape": dims, "dtype": _onnx_name(numpy_of.get(et, et))}


def _bounds(d: Any) -> str:
    lo, hi = d.get_min_length(), d.get_max_length()
    if hi < 0 and lo <= 0:
        return "?"
    return f"{lo}..{hi if hi >= 0 else ''}"


def _onnx_name(numpy_name: str) -> str:
    """numpy's dtype name as ONNX spells it (``inspect`` shows ONNX's names for every kind)."""
    return {"float32": "FLOAT", "float16": "FLOAT16", "float64": "DOUBLE", "bool": "BOOL"}.get(
        numpy_name, numpy_name.upper())


def flat_rt_info(model: Any) -> dict[str, str]:
    """The model's rt_info as ``a.b.c -> value`` text."""
    out: dict[str, str] = {}

    def walk(node: Any, prefix: str) -> None:
        for key in list(node.keys()):
            value = node[key]
            name = f"{prefix}{key}"
            if hasattr(value, "keys") and not isinstance(value, str):
                walk(value, name + ".")
            else:
                out[name] = value.astype(str) if hasattr(value, "astype") else str(value)

    walk(model.get_rt_info(), "")
    return out


def _ir_version(path: Path) -> str:
    """The ``version`` of the ``<net>`` element, from the start of the file (no XML parse of a
    foreign file here: the IR reader above has already parsed it)."""
    import re

    head = path.open("rb").read(4096).decode("utf-8", errors="replace")
    found = re.search(r"<net\b[^>]*\bversion=\"(\d+)\"", head)
    return found.group(1) if found else "?"


__all__ = ["SANDBOX", "describe_ir", "flat_rt_info", "preload"]
