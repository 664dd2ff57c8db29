"""Runners for ONNX graphs: onnxruntime, with onnx's reference evaluator as the fallback for
graphs onnxruntime can't load (e.g. an opset newer than it supports)."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import onnx_ir as ir

from unframe.distributions import dist_version
from unframe.validate.runner import Runner, TensorSpec


def _version(dist: str) -> str:
    return dist_version(dist) or "?"


ModelLike = "ir.Model | onnx.ModelProto | str | os.PathLike[str]"


class _ModelFile:
    """Gives a path or serialized bytes for any model form, writing to a temp dir only when
    the model has external data or is too large to serialize in memory."""

    def __init__(self, model: Any) -> None:
        self._tmp: tempfile.TemporaryDirectory[str] | None = None
        self.path: str | None = None
        self.data: bytes | None = None
        if isinstance(model, (str, os.PathLike)):
            self.path = os.fspath(model)
        elif isinstance(model, onnx.ModelProto):
            self.data = model.SerializeToString()
        elif isinstance(model, ir.Model):
            if _has_external(model) or _nbytes(model) > 1_800_000_000:
                self._tmp = tempfile.TemporaryDirectory(prefix="unframe-run-")
                self.path = os.path.join(self._tmp.name, "model.onnx")
                ir.save(model, self.path, external_data="model.onnx.data")
            else:
                self.data = ir.to_proto(model).SerializeToString()
        else:
            raise TypeError(f"can't run a {type(model).__name__} as ONNX")

    def proto(self) -> onnx.ModelProto:
        if self.path:
            return onnx.load(self.path)
        return onnx.load_from_string(self.data)

    def cleanup(self) -> None:
        if self._tmp is not None:
            self._tmp.cleanup()
            self._tmp = None


def _has_external(model: ir.Model) -> bool:
    return any(isinstance(v.const_value, ir.ExternalTensor) for v in _all_initializers(model))


def _all_initializers(model: ir.Model) -> list[ir.Value]:
    out: list[ir.Value] = list(model.graph.initializers.values())
    for node in ir.traversal.RecursiveGraphIterator(model.graph):
        for attr in node.attributes.values():
            if attr.type == ir.AttributeType.GRAPH:
                out.extend(attr.value.initializers.values())
            elif attr.type == ir.AttributeType.GRAPHS:
                for g in attr.value:
                    out.extend(g.initializers.values())
    return out


def _nbytes(model: ir.Model) -> int:
    total = 0
    for v in _all_initializers(model):
        t = v.const_value
        if t is None:
            continue
        try:
            itemsize = max(t.dtype.itemsize, 1)
        except TypeError:  # STRING tensors have no fixed width; they are never large weights
            itemsize = 1
        total += int(np.prod(t.shape.numpy(), dtype=np.int64)) * itemsize
    return total


_DEFAULT_THREADS: list[int | None] = [None]


def set_default_threads(threads: int | None) -> None:
    """Threads per onnxruntime session made from now on in this process (None: onnxruntime's
    choice). Zoo workers run side by side, one thread each."""
    _DEFAULT_THREADS[0] = threads


class OnnxRuntimeRunner(Runner):
    """onnxruntime on the CPU, graph optimizations limited to basic ones so that what runs is
    the graph as written."""

    def __init__(self, model: Any, *, providers: list[str] | None = None,
                 optimization: str = "basic", threads: int | None = None) -> None:
        import onnxruntime as ort

        self.name = f"onnxruntime {_version('onnxruntime')}"
        src = _ModelFile(model)
        opts = ort.SessionOptions()
        from unframe.quiet import debug_enabled

        # 4 = fatal only: a refused model is reported through the exception (typed by the
        # pipeline); onnxruntime's own log line would only add a second, colored error line
        opts.log_severity_level = 3 if debug_enabled() else 4
        opts.graph_optimization_level = {
            "none": ort.GraphOptimizationLevel.ORT_DISABLE_ALL,
            "basic": ort.GraphOptimizationLevel.ORT_ENABLE_BASIC,
            "all": ort.GraphOptimizationLevel.ORT_ENABLE_ALL,
        }[optimization]
        threads = threads or _DEFAULT_THREADS[0]
        if threads:
            opts.intra_op_num_threads = threads
            opts.inter_op_num_threads = 1
            opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
        try:
            self.session = ort.InferenceSession(src.path or src.data, opts,
                                                providers=providers or ["CPUExecutionProvider"])
        finally:
            src.cleanup()
        self._inputs = self.session.get_inputs()
        self._outputs = [o.name for o in self.session.get_outputs()]

    def input_specs(self) -> list[TensorSpec]:
        return [TensorSpec(i.name, tuple(i.shape), _ort_type(i.type)) for i in self._inputs]

    def output_names(self) -> list[str]:
        return list(self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        import onnxruntime as ort

        from unframe import limits

        wanted = {i.name for i in self._inputs}
        options = ort.RunOptions()
        timer = limits.cancel_after(lambda: setattr(options, "terminate", True))
        try:
            values = self.session.run(None, {k: v for k, v in feeds.items() if k in wanted}, options)
        except Exception:
            limits.raise_if_expired()  # cancelled by the parity time limit: say that, not ORT's words
            raise
        finally:
            if timer is not None:
                timer.cancel()
        return {n: _plain(v) for n, v in zip(self._outputs, values, strict=True)}


class ReferenceRunner(Runner):
    """onnx.reference.ReferenceEvaluator: slow, but knows every opset of the installed onnx."""

    def __init__(self, model: Any, *, why: str = "") -> None:
        from onnx.reference import ReferenceEvaluator

        src = _ModelFile(model)
        try:
            proto = src.proto()
        finally:
            src.cleanup()
        self.name = f"onnx.reference {_version('onnx')}"
        self.why = why
        self._proto = proto
        self.evaluator = ReferenceEvaluator(proto)
        self._outputs = [o.name for o in proto.graph.output]
        inits = {i.name for i in proto.graph.initializer}
        self._inputs = [i.name for i in proto.graph.input if i.name not in inits]

    def output_names(self) -> list[str]:
        return list(self._outputs)

    def run(self, feeds: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
        with np.errstate(all="ignore"):  # a division by zero is a value to compare, not a warning to print
            values = self.evaluator.run(None, {k: v for k, v in feeds.items() if k in self._inputs})
        return {n: _plain(v) for n, v in zip(self._outputs, values, strict=True)}


def onnx_runner(model: Any) -> Runner:
    """onnxruntime when it can load the model, else the reference evaluator (saying why)."""
    try:
        return OnnxRuntimeRunner(model)
    except Exception as exc:  # onnxruntime refuses: unsupported opset/op/type
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        runner = ReferenceRunner(model, why=first)
        runner.name += " (onnxruntime refused the model)"
        return runner


def _plain(v: Any) -> np.ndarray:
    if isinstance(v, list):  # sequences / ZipMap outputs
        return np.asarray(v, dtype=object)
    return np.asarray(v)


_ORT_TYPES = {
    "tensor(float)": "float32", "tensor(double)": "float64", "tensor(float16)": "float16",
    "tensor(bfloat16)": "bfloat16", "tensor(int64)": "int64", "tensor(int32)": "int32",
    "tensor(int16)": "int16", "tensor(int8)": "int8", "tensor(uint8)": "uint8",
    "tensor(uint16)": "uint16", "tensor(uint32)": "uint32", "tensor(uint64)": "uint64",
    "tensor(bool)": "bool", "tensor(string)": "str",
}


def _ort_type(t: str) -> str:
    return _ORT_TYPES.get(t, t)


def model_path_or_none(model: Any) -> Path | None:
    return Path(model) if isinstance(model, (str, os.PathLike)) else None
