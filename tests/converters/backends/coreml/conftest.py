"""Fixtures for the CoreML backend tests: onnx's node cases at the canonical opset, and the
bench helpers that run one case end to end (translate, save, evaluate the package, compare)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

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


@pytest.fixture(scope="session")
def coreml() -> ModuleType:
    return pytest.importorskip("coremltools", reason="needs coremltools (the 'coreml' extra)")
