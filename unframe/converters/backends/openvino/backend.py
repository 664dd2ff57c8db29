"""The OpenVINO backend: ONNX (opset 21) -> OpenVINO IR (``model.xml`` + ``model.bin``).

OpenVINO's own converter does the work (``openvino.convert_model`` on the ONNX file, then
``openvino.save_model``); unframe adds what it doesn't: every blocker before any work (its ONNX
frontend's refusal and the CPU plugin's ``query_model``, whose answers are remembered in-process
per op signature, ``importer.py``), input shapes as partial shapes from the options
(``shapes.py``), the artifact checked by running it here on the CPU plugin (``runner.py``), and
provenance in the IR's ``rt_info`` under ``unframe``.

Target options: ``precision`` ("fp16", the default as OpenVINO's own: weights stored as float16;
"fp32" keeps them float32), ``static`` with ``sample_shapes`` (every dynamic dim at the sample's
size), ``dims`` ([(dim name or input:axis, min, max)]: bounded dims).

Direct routes from torch and TF/Keras, without ONNX, are in ``direct.py``.
"""

from __future__ import annotations

import json
import weakref
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from unframe.converters.base import Artifact, Backend, RunnerUnavailable, Target
from unframe.converters.registry import register_backend
from unframe.errors import Blocker, UnsupportedError, UsageError
from unframe.validate.runner import Runner
from unframe.validate.tolerances import Tolerance

if TYPE_CHECKING:
    import onnx_ir as ir

    from unframe.converters.backends.openvino.importer import Imported

CANONICAL_OPSET = 21
PRECISIONS = ("fp16", "fp32")
DEFAULT_PRECISION = "fp16"  # OpenVINO's own default (save_model's compress_to_fp16=True)
# fp16 weights, float32 compute: each weight off by up to 2**-11 of itself; an output's error
# follows the values summed into it, so it is held to the output's scale (validate.tolerances)
FP16_WEIGHTS = (1e-2, 1e-2)
RT_INFO_ROOT = "unframe"
# A check and the convert after it import once (weak keys: a model that is gone takes it along).
_IMPORTS: weakref.WeakKeyDictionary[ir.Model, Imported] = weakref.WeakKeyDictionary()


@register_backend
class OpenVINOBackend(Backend):
    name = "openvino"
    extra = "openvino"
    requires = ("openvino",)
    packages = "openvino"
    description = "OpenVINO IR (.xml + .bin), checked by running it on OpenVINO's CPU plugin"
    suffixes = (".xml",)
    canonical_opset = CANONICAL_OPSET
    tensor_only = True  # no strings; ai.onnx.ml ops are lowered (checked) rather than left to it
    option_names = ("precision", "static", "dims", "sample_shapes")
    # NNCF (quantize.py): static int8, int8 and int4 weight compression; excluded ONNX nodes
    # become NNCF's ignored scope
    quantize_schemes = ("int8", "w8", "w4")
    quantize_excludes = True
    # onnxruntime's Q/DQ graph (passes/quantize/onnx_quant), which OpenVINO's ONNX frontend reads
    # as FakeQuantize ops and its CPU plugin runs in int8 (``_convert``)
    other_quantizers = {"onnxruntime": ("int8",)}
    direct_modules = {"torch": "unframe.converters.backends.openvino.direct",
                      "tf": "unframe.converters.backends.openvino.direct"}
    direct_tools = {"torch": "torch.export, OpenVINO's PyTorch frontend",
                    "tf": "OpenVINO's TensorFlow frontend"}

    def distributions(self) -> tuple[str, ...]:
        return ("openvino",)

    # -- check --------------------------------------------------------------------------------
    def check(self, model: ir.Model, target: Target) -> list[Blocker]:
        return self.check_with_notes(model, target)[0]

    def check_with_notes(self, model: ir.Model, target: Target) -> tuple[list[Blocker], list[str]]:
        """The import ``convert`` runs (OpenVINO's ONNX frontend, then the CPU plugin's
        ``query_model``), kept for the convert that follows, plus the options' blockers."""
        _precision(target)  # a precision OpenVINO has no weights for is a usage error, as in convert
        options = option_blockers(model, target)
        if self.missing():
            return options, ["openvino is not installed: only the options were checked"]
        imported = self._import(model)
        notes = [] if imported.blockers else ["OpenVINO's ONNX frontend converted every node and its "
                                              "CPU plugin takes every op (query_model, or its answer "
                                              "for the same ops earlier in this process)"]
        return imported.blockers + options, notes

    def _import(self, model: ir.Model) -> Imported:
        from unframe import io
        from unframe.converters.backends.openvino.importer import import_onnx
        from unframe.converters.backends.openvino.prepare import prepare
        from unframe.converters.backends.openvino.runtime import quiet_openvino

        cached = _IMPORTS.get(model)
        if cached is not None:
            return cached
        prepared, notes = prepare(model)
        # one capture of OpenVINO's logs for the whole import (each costs fd and logger changes)
        with quiet_openvino(), io.tool_file(prepared) as path:
            imported = import_onnx(prepared, path)
        imported.notes = notes
        _IMPORTS[model] = imported
        return imported

    # -- convert ------------------------------------------------------------------------------
    def convert(self, model: ir.Model, target: Target, workdir: Path) -> Artifact:
        from unframe.converters.backends.openvino.runtime import quiet_openvino

        self.ensure_available()
        precision = _precision(target)
        with quiet_openvino():
            return self._convert(model, target, Path(workdir), precision)

    def _convert(self, model: ir.Model, target: Target, workdir: Path, precision: str) -> Artifact:
        from unframe.converters.backends.openvino.shapes import apply_shapes, plan_shapes
        from unframe.converters.backends.openvino.weights import marked_fp32

        request = target.get("quantize")
        if request is not None and request.quantizer == "onnxruntime":
            return self._convert_qdq(model, target, workdir, request)
        imported = self._import(model)
        _IMPORTS.pop(model, None)  # the converted model is changed below: a retry imports again
        blockers = imported.blockers + option_blockers(model, target)
        if blockers:
            raise UnsupportedError(f"the model can't be converted to OpenVINO IR ({len(blockers)} "
                                   "blockers)", "run `unframe check --to openvino` for the list",
                                   blockers=blockers)
        converted = imported.model
        notes = imported.notes + apply_shapes(converted, plan_shapes(model, target.options))
        marked = marked_fp32(model) if precision == "fp16" else 0
        if marked:
            notes.append(f"weights kept in fp32: {marked} node(s) of the graph are marked to stay in "
                         "float32 (after an fp16 parity failure, or a graph pinned to float32)")
        outputs = [{"name": v.name, "dtype": _np_name(v.dtype)} for v in model.graph.outputs]
        return finish(converted, target, workdir, outputs, notes, fp16_weights=not marked,
                      ignored=_ignored(model, converted, target, notes))

    def _convert_qdq(self, model: ir.Model, target: Target, workdir: Path, request: Any) -> Artifact:
        """``--quantize int8`` by onnxruntime's quantizer in place of NNCF (tried when NNCF's IR
        fails the accuracy guard): the Q/DQ graph onnxruntime makes of the float graph (its
        excluded nodes left float), read by OpenVINO's ONNX frontend, which turns each Q/DQ pair
        into a FakeQuantize op and keeps the int8 weights as int8 constants; the CPU plugin runs
        them in int8."""
        from unframe.converters.backends.openvino.quantize import onnx_float_bytes
        from unframe.converters.backends.openvino.shapes import apply_shapes, plan_shapes
        from unframe.passes.quantize.onnx_quant import quantize_onnx

        qdq, said = quantize_onnx(model, request)
        imported = self._import(qdq)
        _IMPORTS.pop(qdq, None)
        blockers = imported.blockers + option_blockers(model, target)
        if blockers:
            raise UnsupportedError(f"onnxruntime's int8 graph can't be converted to OpenVINO IR ({len(blockers)} "
                                   "blockers)", "use OpenVINO's own quantizer (NNCF)", blockers=blockers)
        converted = imported.model
        notes = imported.notes + apply_shapes(converted, plan_shapes(model, target.options))
        notes += [f"quantized int8 by onnxruntime: {said[0]}" if said else "quantized int8 by onnxruntime",
                  "OpenVINO's ONNX frontend read the Q/DQ pairs as FakeQuantize ops (int8 weights kept int8)"]
        outputs = [{"name": v.name, "dtype": _np_name(v.dtype)} for v in model.graph.outputs]
        return finish(converted, target, workdir, outputs, notes, fp16_weights=False,
                      float_size=onnx_float_bytes(model))

    # -- run ----------------------------------------------------------------------------------
    def runner(self, artifact: Artifact, target: Target) -> Runner:
        from unframe.converters.backends.openvino.runner import OpenVINORunner

        if self.missing():
            raise RunnerUnavailable("openvino is not installed")
        if artifact.path is None:
            raise RunnerUnavailable("the OpenVINO IR was not written to disk")
        io_record = json.loads(artifact.metadata.get("unframe.io", "{}") or "{}")
        return OpenVINORunner(artifact.path, io_record.get("outputs"))

    def probe(self, model: ir.Model, target: Target) -> Any:
        """For the divergence locator: the IR built again with ``names`` marked as graph outputs,
        run on ``feeds`` (OpenVINO fuses across a value unless it is an output)."""
        if self.missing():
            return None

        def run(names: list[str], feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
            import tempfile

            from unframe.validate.intermediates import with_outputs

            marked = with_outputs(model, names)
            with tempfile.TemporaryDirectory(prefix="unframe-ov-probe-") as tmp:
                runner = self.runner(self.convert(marked, target, Path(tmp)), target)
                try:
                    return runner.run(feeds)
                finally:
                    runner.close()

        return run

    def full_precision(self, target: Target) -> tuple[Target, str] | None:
        """fp16 weights are OpenVINO's default, not the user's choice: when they move the outputs
        past parity (a detector keeping another box; near-tied scores), the IR keeps fp32 weights
        instead. An asked ``--precision fp16`` or a quantized IR stays as asked."""
        if target.options.get("precision") is not None or target.get("quantize") or _precision(target) != "fp16":
            return None
        return (Target(target.name, target.opset, {**target.options, "precision": "fp32"}),
                "OpenVINO's default fp16 weights moved the outputs past parity: the IR keeps fp32 "
                "weights (--precision fp16 keeps them fp16 and fails instead)")

    def compute_precision(self, target: Target) -> str:
        return "fp16" if _precision(target) == "fp16" else "fp32"

    def tolerance(self, dtype: np.dtype, target: Target) -> Tolerance | None:
        if _precision(target) == "fp16" and np.dtype(dtype).kind == "f":
            return Tolerance(*FP16_WEIGHTS, of_scale=True)
        return None

    # -- provenance and writing -----------------------------------------------------------------
    def stamp(self, artifact: Artifact, provenance: dict[str, str]) -> None:
        artifact.metadata.update({k: _text(v) for k, v in provenance.items()})
        set_rt_info(artifact.model, artifact.metadata)

    def write(self, artifact: Artifact, path: Path) -> list[Path]:
        from unframe.converters.backends.openvino.runtime import import_openvino, ov_tool, quiet_openvino

        path = Path(path)
        if path.suffix.lower() != ".xml":
            raise UsageError(f"OpenVINO output {path} must end in .xml (its weights go beside it "
                             "in .bin)", "use -o model.xml")
        ov = import_openvino()
        with quiet_openvino(), ov_tool():
            # the weights are as converted (fp16 already where compressed): saved as they are
            ov.save_model(artifact.model, str(path), compress_to_fp16=False)
        return [path, path.with_suffix(".bin")]

    def placed(self, artifact: Artifact, written: list[Path]) -> None:
        artifact.path = next((p for p in written if p.suffix == ".xml"), artifact.path)


def finish(converted: Any, target: Target, workdir: Path, outputs: list[dict[str, Any]],
           notes: list[str], fp16_weights: bool = True, ignored: list[str] | None = None,
           float_size: int | None = None) -> Artifact:
    """The artifact of a converted ``openvino.Model`` (any route): quantized by NNCF when the
    target asks (``ignored``: op names kept in float) unless it came quantized (``float_size``:
    the float weights' bytes then), saved under ``workdir`` at the target's precision (fp16
    weights unless ``fp16_weights`` is False, or the quantizer stored them) and read back, so
    parity runs the IR that is written."""
    from unframe.converters.backends.openvino.runner import read_ir
    from unframe.converters.backends.openvino.weights import save_ir, weight_precisions

    notes = list(notes)
    request = target.get("quantize")
    if request is not None and float_size is None:
        converted, float_size = _quantize(converted, request, ignored or [], notes)
    compress = _precision(target) == "fp16" and fp16_weights and request is None
    xml = workdir / "model.xml"
    save_ir(converted, xml, compress)
    saved = read_ir(xml)
    weights = weight_precisions(saved)
    meta = {"unframe.precision": "fp16" if compress else "fp32",
            "unframe.io": json.dumps({"outputs": outputs}, sort_keys=True),
            "unframe.weights": json.dumps(weights, sort_keys=True)}
    if compress:
        notes.append("weights stored as fp16 (OpenVINO's default compression; --precision fp32 keeps "
                     "fp32); parity ran them with INFERENCE_PRECISION_HINT f32")
    if float_size is not None:  # the weights as float32 vs the .bin written
        meta["unframe.quantize"] = request.scheme.name
        meta["quantized_size"] = (float_size, xml.with_suffix(".bin").stat().st_size)
    meta["unframe.backend_notes"] = json.dumps(notes)  # what this backend rewrote, kept in the IR
    artifact = Artifact(kind="openvino", model=saved, path=xml, metadata=meta, notes=notes)
    set_rt_info(saved, meta)
    return artifact


def _quantize(converted: Any, request: Any, ignored: list[str], notes: list[str]) -> tuple[Any, int]:
    """NNCF on ``converted`` (``quantize.py``); the float32 bytes of its weights measured first."""
    from unframe.converters.backends.openvino.quantize import float_bytes, quantize_ov

    before = float_bytes(converted)
    quantized, said = quantize_ov(converted, request, ignored)
    notes.extend(said)
    notes.append("saved without OpenVINO's fp16 compression: NNCF stored the weights (their scales "
                 "in its own precision), the float constants left stay fp32")
    return quantized, before


def _ignored(model: ir.Model, converted: Any, target: Target, notes: list[str]) -> list[str]:
    """The OpenVINO ops of the ONNX nodes the quantize request keeps in float, and of the
    post-processing (``passes.quantize.postprocess``) where activations are quantized."""
    from unframe.converters.backends.openvino.quantize import ov_names
    from unframe.passes.quantize import postprocess

    request = target.get("quantize")
    if request is None:
        return []
    post = postprocess.after_selection(model) if request.scheme.activations != "float" else []
    if not request.exclude and not post:
        return []
    names, missing = ov_names(model, converted, [*request.exclude, *post])
    missing = [n for n in missing if n in request.exclude]  # post-processing OpenVINO folded away is no loss
    if missing:
        notes.append(f"quantize: no OpenVINO op found for the ONNX node(s) {', '.join(missing)}: "
                     "they could not be kept in float")
    if post:
        notes.append(f"quantize: {postprocess.describe(post, model)}")
    return names


def set_rt_info(model: Any, metadata: dict[str, Any]) -> None:
    """``metadata`` into the model's rt_info under ``unframe`` (``unframe.x`` keys as ``x``)."""
    for key, value in metadata.items():
        leaf = key[len(RT_INFO_ROOT) + 1:] if key.startswith(RT_INFO_ROOT + ".") else key
        model.set_rt_info(_text(value), [RT_INFO_ROOT, leaf])


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _precision(target: Target) -> str:
    precision = str(target.get("precision", DEFAULT_PRECISION)).lower()
    if precision not in PRECISIONS:
        raise UsageError(f"OpenVINO IR weights are fp16 or fp32, not {precision!r}",
                         "use --precision fp16 (the default) or fp32")
    return precision


def option_blockers(model: ir.Model, target: Target) -> list[Blocker]:
    from unframe.converters.backends.openvino.shapes import dim_blockers

    return dim_blockers(model, target.options)


def _np_name(dtype: Any) -> str | None:
    if dtype is None:
        return None
    try:
        return np.dtype(dtype.numpy()).name
    except (TypeError, ValueError, AttributeError):
        return None


__all__ = ["CANONICAL_OPSET", "OpenVINOBackend", "finish", "set_rt_info"]
