"""Fixtures for the CoreML backend tests: onnx's node cases at the canonical opset, and the
bench helpers that run one case end to end (translate, save, evaluate the package, compare)."""

from __future__ import annotations

from types import ModuleType

import pytest
from node_cases import all_node_cases, bench_module  # noqa: E402, F401 (re-exported)


@pytest.fixture(scope="session")
def coreml() -> ModuleType:
    return pytest.importorskip("coremltools", reason="needs coremltools (the 'coreml' extra)")
