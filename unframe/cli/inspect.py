"""``unframe inspect``: what is in an ONNX file, without reading its external data."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from unframe.errors import InputError


def describe(path_text: str) -> dict[str, Any]:
    import onnx_ir as ir

    from unframe import io

    path = Path(path_text)
    if path.suffix.lower() != ".onnx" and path.is_file():
        raise InputError(f"{path}: inspect reads ONNX files", "convert it first: unframe convert ... --to onnx")
    proto = io.load_proto(path)
    model = io.load_model(path)
    ops: Counter[str] = Counter()
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        ops[f"{node.domain}::{node.op_type}" if node.domain else node.op_type] += 1
    init_bytes = io.tensor_bytes(model)
    return {
        "path": str(path),
        "file_bytes": path.stat().st_size,
        "ir_version": proto.ir_version,
        "producer": f"{proto.producer_name} {proto.producer_version}".strip(),
        "opset_imports": {(o.domain or "ai.onnx"): o.version for o in proto.opset_import},
        "nodes": sum(ops.values()),
        "ops": dict(sorted(ops.items(), key=lambda kv: (-kv[1], kv[0]))),
        "inputs": [_value(v) for v in model.graph.inputs if v.name not in model.graph.initializers],
        "outputs": [_value(v) for v in model.graph.outputs],
        "initializers": len(model.graph.initializers),
        "initializer_bytes": init_bytes,
        "external_data_files": sorted(io.external_files(proto)),
        "functions": [f"{f.domain}::{f.name}" for f in proto.functions],
        "metadata": {p.key: p.value for p in proto.metadata_props if not p.key.startswith(io.PROVENANCE_PREFIX)},
        "provenance": io.read_provenance({p.key: p.value for p in proto.metadata_props}),
    }


def _value(v: Any) -> dict[str, Any]:
    shape = None if v.shape is None else [d if isinstance(d, int) else (str(d) if d is not None else "?")
                                          for d in v.shape]
    dtype = v.dtype.name.lower() if v.dtype is not None else "?"
    return {"name": v.name, "shape": shape, "dtype": dtype}


def render(info: dict[str, Any], console: Any) -> None:
    from rich.table import Table

    console.print(f"[bold]{info['path']}[/] ({_bytes(info['file_bytes'])})")
    console.print(f"IR version {info['ir_version']}, producer {info['producer'] or '?'}, opsets "
                  + ", ".join(f"{d} {v}" for d, v in info["opset_imports"].items()), markup=False)
    for title, rows in (("inputs", info["inputs"]), ("outputs", info["outputs"])):
        t = Table(title=title)
        for c in ("name", "shape", "dtype"):
            t.add_column(c)
        for r in rows:
            t.add_row(r["name"], "?" if r["shape"] is None else "x".join(map(str, r["shape"])) or "scalar", r["dtype"])
        console.print(t)
    t = Table(title=f"ops ({info['nodes']} nodes)")
    t.add_column("op")
    t.add_column("count", justify="right")
    for op, n in info["ops"].items():
        t.add_row(op, str(n))
    console.print(t)
    console.print(f"initializers: {info['initializers']} ({_bytes(info['initializer_bytes'])})", markup=False)
    if info["external_data_files"]:
        console.print("external data: " + ", ".join(info["external_data_files"]), markup=False)
    if info["functions"]:
        console.print("functions: " + ", ".join(info["functions"]), markup=False)
    for k, v in info["metadata"].items():
        console.print(f"metadata {k}: {v}", markup=False)
    if info["provenance"]:
        t = Table(title="provenance (unframe)")
        t.add_column("key")
        t.add_column("value", overflow="fold")
        for k, v in info["provenance"].items():
            t.add_row(k, v if isinstance(v, str) else _short(v))
        console.print(t)


def _short(v: Any) -> str:
    import json

    return json.dumps(v, default=str)


def _bytes(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)
