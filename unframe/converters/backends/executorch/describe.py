"""What ``unframe inspect`` shows of a ``.pte``: its header and hash (read here, nothing handed to
ExecuTorch), and what the sidecar records (versions, precision, I/O with their bounds, what
XNNPACK took, provenance). A program without a sidecar has its methods' I/O read by ExecuTorch
in a sandboxed child (a bad file can abort the runtime), when ExecuTorch is installed."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from typing import Any

from unframe.converters.backends.executorch import pte

# torch's dtype names -> ONNX's, so that every kind's I/O reads the same in ``inspect``
_ONNX_DTYPES = {"float32": "float", "float64": "double"}
_SIDECAR_COPY = ("format", "executorch_version", "torch_version", "precision", "method", "delegation")


def describe_pte(path: Path) -> dict[str, Any]:
    """``inspect``'s common keys (``provenance`` here is the sidecar's raw record: the caller
    decodes it) plus the header, the hashes and the sidecar's fields."""
    header = pte.read_header(path)  # InputError on a file that is not a whole program
    side = pte.sidecar_path(path)
    meta = pte.read_sidecar(path)
    digest = pte.sha256_of(path)
    info: dict[str, Any] = {
        "path": str(path), "kind": "pte", "file_bytes": header.file_bytes, "header": header.to_dict(),
        "program_sha256": digest, "sidecar": str(side),
        "sidecar_status": "ok" if meta is not None else ("unreadable" if side.exists() else "missing"),
        "inputs": [], "outputs": [], "provenance": {}, "sha256_match": None,
    }
    if meta is None:
        info.update(_probed_io(path))
        return info
    expected = meta.get("program_sha256")
    info["sha256_match"] = None if not expected else expected == digest
    info.update({k: meta.get(k) for k in _SIDECAR_COPY})
    bounds = meta.get("bounds") or {}
    info["inputs"] = [_value(t, bounds) for t in meta.get("inputs", [])]
    info["outputs"] = [_value(t, bounds) for t in meta.get("outputs", [])]
    info["provenance"] = meta.get("provenance") or {}
    return info


def _value(t: dict[str, Any], bounds: dict[str, Any]) -> dict[str, Any]:
    shape = [f"{d} {bounds[d][0]}..{bounds[d][1]}" if isinstance(d, str) and d in bounds else d
             for d in t["shape"]]
    return {"name": t["name"], "shape": shape, "dtype": _ONNX_DTYPES.get(t["dtype"], t["dtype"])}


def _probed_io(path: Path) -> dict[str, Any]:
    """I/O from the program itself (upper-bound sizes), read in a child; a note where it can't."""
    if importlib.util.find_spec("executorch") is None:
        return {"io_note": "no sidecar and ExecuTorch is not installed: inputs and outputs unknown"}
    from unframe.converters.backends.executorch.runner import probe_in_child, record_from_meta

    probed = probe_in_child(path)
    methods = probed.get("methods", {})
    info: dict[str, Any] = {"methods": sorted(methods)}
    try:
        record = record_from_meta(probed)
    except Exception as exc:  # noqa: BLE001 - shown as a note: the header and hash still stand
        info["io_note"] = str(exc)
        return info
    info["inputs"] = [_value(t, {}) for t in record["inputs"]]
    info["outputs"] = [_value(t, {}) for t in record["outputs"]]
    info["io_note"] = "no sidecar: sizes are the program's memory-planned upper bounds"
    return info
