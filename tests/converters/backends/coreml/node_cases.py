"""onnx's node cases and the bench module that runs one end to end, for the CoreML tests (a
module of its own: ``from conftest import ...`` finds whichever conftest.py pytest loaded first)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

ROOT = Path(__file__).resolve().parents[4]


def bench_module() -> ModuleType:
    """bench/coreml_nodes.py, which holds the node-case runner shared with the benchmark."""
    name = "unframe_bench_coreml_nodes"
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, ROOT / "bench" / "coreml_nodes.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_CASES: dict[str, Any] | None = None


def all_node_cases() -> dict[str, Any]:
    global _CASES
    if _CASES is None:
        _CASES = {c.name: c for c in bench_module().node_cases()}
    return _CASES
