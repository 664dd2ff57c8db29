"""onnx's backend node test cases as golden data for the version converter tests.

``collect_testcases()`` takes ~12 s, so the cases are pickled once per onnx version in the temp dir.
``check_path(name, targets)`` converts a case through each target in turn (unframe), checks each
result with the full checker and strict shape inference, runs it (onnxruntime, or onnx.reference
when only that runtime runs the original correctly) and compares with the case's expected outputs.
"""

from __future__ import annotations

import os
import pickle
import tempfile
import warnings
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from unframe.version_converter import OpsetConversion, convert_opset


@dataclass
class NodeCase:
    name: str
    model: onnx.ModelProto
    data_sets: list[tuple[list[Any], list[Any]]]
    rtol: float
    atol: float


@cache
def _all() -> dict[str, tuple[bytes, Any, float, float]]:
    cache_file = Path(tempfile.gettempdir()) / f"unframe-node-cases-{onnx.__version__}.pkl"
    if cache_file.exists():
        try:
            return pickle.loads(cache_file.read_bytes())
        except Exception:  # a truncated cache from an interrupted run: rebuild it
            pass
    from onnx.backend.test.case.node import collect_testcases

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    data = {c.name: (c.model.SerializeToString(), c.data_sets, c.rtol, c.atol) for c in cases}
    tmp = cache_file.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_bytes(pickle.dumps(data, protocol=5))
    os.replace(tmp, cache_file)
    return data


def case(name: str, freeze: tuple[str, ...] = ()) -> NodeCase:
    """The case; graph inputs named in ``freeze`` become initializers holding the first data set's
    value (so an axes/pads/scales input is a constant, as in exported models)."""
    raw, data_sets, rtol, atol = _all()[name]
    model = onnx.ModelProto.FromString(raw)
    if freeze:
        from onnx import numpy_helper

        names = [i.name for i in model.graph.input]
        keep = [k for k, n in enumerate(names) if n not in freeze]
        first_inputs = data_sets[0][0]
        for k, n in enumerate(names):
            if n in freeze:
                model.graph.initializer.append(numpy_helper.from_array(np.asarray(first_inputs[k]), n))
        kept_inputs = [model.graph.input[k] for k in keep]
        del model.graph.input[:]
        model.graph.input.extend(kept_inputs)
        data_sets = [([ins[k] for k in keep], outs) for ins, outs in data_sets[:1]]
    return NodeCase(name, model, data_sets, rtol, atol)


def all_case_names() -> list[str]:
    return sorted(_all())


def _equal(expected: Any, got: Any, rtol: float, atol: float) -> bool:
    if isinstance(expected, list):
        return isinstance(got, list) and len(got) == len(expected) and all(
            _equal(e, g, rtol, atol) for e, g in zip(expected, got, strict=False))
    e, g = np.asarray(expected), np.asarray(got)
    if e.shape != g.shape:
        return False
    if e.dtype.kind in "fc":
        return bool(np.allclose(g, e, rtol=rtol, atol=atol, equal_nan=True))
    return e.tolist() == g.tolist()


def run(model: onnx.ModelProto, runtime: str, inputs: list[Any]) -> list[Any]:
    feeds = {i.name: v for i, v in zip(model.graph.input, inputs, strict=False)}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        if runtime == "ort":
            import onnxruntime as ort

            so = ort.SessionOptions()
            so.log_severity_level = 4
            so.intra_op_num_threads = 1
            return ort.InferenceSession(model.SerializeToString(), so,
                                        providers=["CPUExecutionProvider"]).run(None, feeds)
        from onnx.reference import ReferenceEvaluator

        return list(ReferenceEvaluator(model).run(None, feeds))


def matches(model: onnx.ModelProto, c: NodeCase, runtime: str) -> bool:
    for inputs, outputs in c.data_sets:
        got = run(model, runtime, inputs)
        if not all(_equal(e, g, c.rtol * 10, max(c.atol * 10, 1e-6)) for e, g in zip(outputs, got, strict=False)):
            return False
    return True


def runtime_for(c: NodeCase) -> str:
    """The runtime that reproduces the case's expected outputs from the original model."""
    for runtime in ("ort", "ref"):
        try:
            if matches(c.model, c, runtime):
                return runtime
        except Exception:
            continue
    raise AssertionError(f"{c.name}: neither onnxruntime nor onnx.reference runs the original")


def convert(model: onnx.ModelProto, target: int) -> tuple[onnx.ModelProto, OpsetConversion]:
    irm = ir.from_proto(model)
    result = convert_opset(irm, target)
    return ir.to_proto(irm), result


def check_path(name: str, targets: list[int], freeze: tuple[str, ...] = ()) -> set[str]:
    """Convert case ``name`` through ``targets`` in turn; every step must be valid and give the
    expected outputs. Returns the adapters that fired."""
    c = case(name, freeze)
    runtime = runtime_for(c)
    fired: set[str] = set()
    model = c.model
    for target in targets:
        model, result = convert(model, target)
        fired |= set(result.adapters_used)
        assert {o.domain: o.version for o in model.opset_import}[""] == target
        onnx.checker.check_model(model, full_check=True)
        onnx.shape_inference.infer_shapes(model, check_type=True, strict_mode=True)
        try:
            ok = matches(model, c, runtime)
        except Exception as exc:
            other = "ref" if runtime == "ort" else "ort"
            # the runtime may not implement the op at the older opset; the other one must
            ok = matches(model, c, other)
            del exc
        assert ok, f"{name} at opset {target}: outputs differ from the expected ones"
    return fired
