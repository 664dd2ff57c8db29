"""The CoreML backend: ONNX (opset 21) -> ML Program (.mlpackage, or .mlmodel with weights inline).

Target options (``Target.options``): ``target`` (iOS16|iOS17|iOS18|macOS13.., default iOS16),
``precision`` (fp16, the default like coremltools, or fp32), ``static`` (freeze dynamic dims to
``sample_shapes``), ``dims`` ([(dimname or input:axis, min, max)]), ``enumerated``
({input: [shape, ...]}), ``image_input``/``scale``/``bias``/``color_layout``, ``class_labels``,
``stateful`` (a ``--kv-cache`` decoder's cache kept in iOS18 states, ``coreml.states``; the
target defaults to iOS18) and ``max_context`` (the states' length in tokens).

The runner (``runner.py``) evaluates the package written under ``workdir`` with the MIL reference
evaluator, so the parity stage checks the artifact that ships; it reads the program's intermediate
values for the divergence locator as well.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import weakref
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx_ir as ir

from unframe import timing
from unframe.converters.backends.coreml.runner import CoreMLRunner
from unframe.converters.base import Artifact, Backend, RunnerUnavailable, Target
from unframe.converters.registry import register_backend
from unframe.errors import Blocker, ConversionError, UnsupportedError, UsageError
from unframe.passes import keeps_fp32
from unframe.validate.runner import Runner
from unframe.validate.tolerances import Tolerance

if TYPE_CHECKING:
    from unframe.converters.backends.coreml.translate import Translation

CANONICAL_OPSET = 21
PRECISIONS = ("fp16", "fp32")
# Peak memory of a conversion per byte of weights, measured on Llama-1B (bench/llm.py: 1.82x for
# 4.7 GB of fp32 weights, the process included): what convert() checks before it starts.
MEMORY_PER_WEIGHT_BYTE = 1.9
# The ONNX opset a model is brought to, per MIL opset (deployment target). The translators in
# ops/ are written against one version of each ONNX op (opset 21); the deployment target decides
# which MIL ops they emit, not which ONNX opset they read. A translator set written for a newer
# opset would add a row here.
ONNX_OPSET_BY_IOS = {15: CANONICAL_OPSET, 16: CANONICAL_OPSET, 17: CANONICAL_OPSET, 18: CANONICAL_OPSET}
# The last translation of each model in flight: a check and the convert after it translate once.
# Weak keys: a model that is gone takes its translation with it.
_TRANSLATIONS: weakref.WeakKeyDictionary[ir.Model, tuple[str, Translation]] = weakref.WeakKeyDictionary()


@register_backend
class CoreMLBackend(Backend):
    name = "coreml"
    extra = "coreml"
    requires = ("coremltools",)
    packages = "coremltools"
    description = "Core ML ML Program (.mlpackage), checked with the MIL reference evaluator"
    suffixes = (".mlpackage", ".mlmodel")
    canonical_opset = CANONICAL_OPSET
    tensor_only = True  # no ai.onnx.ml ops, no strings: the route lowers them first
    option_names = ("target", "precision", "static", "dims", "enumerated", "image_input", "scale",
                    "bias", "color_layout", "class_labels", "sample_shapes", "stateful", "max_context")
    # coremltools.optimize's weight quantization (quantize.py); int8 activations as MIL
    # quantize/dequantize pairs (iOS17), their ranges calibrated by onnxruntime on the float graph
    # (coremltools' own activation calibration runs the model with Core ML: macOS only)
    quantize_schemes = ("int8", "w8", "w4")
    quantize_excludes = True
    latency_note = "Core ML runs on Apple devices only; the MIL evaluator's time here says nothing about it"

    def distributions(self) -> tuple[str, ...]:
        return ("coremltools",)

    def opset_window(self, target: Target) -> tuple[int, int]:
        opset = ONNX_OPSET_BY_IOS[max(_ios(target), min(ONNX_OPSET_BY_IOS))]
        return opset, opset

    def pick_opset(self, target: Target, requested: int | None) -> int:
        return self.opset_window(target)[1]

    # -- pre-flight: the translation, run dry -------------------------------------------------
    def check(self, model: ir.Model, target: Target) -> list[Blocker]:
        return self.check_with_notes(model, target)[0]

    def check_with_notes(self, model: ir.Model, target: Target) -> tuple[list[Blocker], list[str]]:
        """The same translation ``convert`` runs (legalization and the MIL program, nothing
        written, no parity), so check and convert can't disagree. Without coremltools only the
        static checks run, and a note says so."""
        from unframe.converters.backends.coreml.translate import check_model

        ios = _ios(target)
        options = _option_blockers(model, target)
        if self.missing():
            return check_model(model, ios) + options, [
                "coremltools is not installed: the translation was not tried (static checks only)"]
        translation = self._translation(model, target, dry=True)
        return translation.blockers + options, list(translation.notes)

    def preflight(self, model: ir.Model, target: Target) -> list[Blocker]:
        """Before a conversion: the translation for real (weights read), which ``convert`` then
        takes from the cache; a dry one would be thrown away and made again when the model has
        weights past ``io.STAND_IN_BYTES`` (1.9 s of SSD300's 4.8 s backend stage)."""
        if self.missing():
            return self.check(model, target)
        _check_memory(model)
        return self._translation(model, target).blockers + _option_blockers(model, target)

    def _translation(self, model: ir.Model, target: Target, *, dry: bool = False) -> Translation:
        """The model's translation for ``target``, built once for a check and the convert that
        follows it (``convert`` takes it out of the cache: coremltools' converter changes it).
        A check's is ``dry`` (large weights as stand-ins, never read); a convert after it
        translates again when stand-ins were used."""
        from unframe.converters.backends.coreml.translate import translate

        # the nodes marked to stay in float32 change the translation (a plan may add marks)
        key = _options_key(target) + f"|fp32:{sum(keeps_fp32(n) for n in model.graph)}"
        cached = _TRANSLATIONS.get(model)
        if cached is not None and cached[0] == key and (dry or not cached[1].stand_ins):
            return cached[1]
        translation = translate(model, _ios(target), target.options, dry=dry)
        _TRANSLATIONS[model] = (key, translation)
        return translation

    # -- conversion ----------------------------------------------------------------------------
    def convert(self, model: ir.Model, target: Target, workdir: Path) -> Artifact:
        self.ensure_available()
        _check_memory(model)
        raised = _quantize_target(target)
        request = target.get("quantize")
        source = model
        if request is not None and request.scheme.calibrated:  # int8: Q/DQ on the activations first
            from unframe.converters.backends.coreml.quantize import activation_qdq

            model, said = activation_qdq(model, request)
            raised.extend(said)
        translation = self._translation(model, target)
        blockers = translation.blockers + _option_blockers(source, target)
        if blockers:
            raise UnsupportedError(f"the model can't be converted to CoreML ({len(blockers)} blockers)",
                                   "run `unframe check --to coreml` for the list", blockers=blockers)
        translation = _TRANSLATIONS.pop(model)[1]
        mlmodel = _build(translation, target)
        name_map, plans = translation.names, translation.plans
        names = name_map.mapping
        notes = list(translation.notes) + raised
        sizes = None
        if request is not None:
            mlmodel, sizes = _quantize(mlmodel, model, translation, request, notes)
        kind = "mlpackage"
        path = Path(workdir) / "model.mlpackage"
        mlmodel.save(str(path))
        precision = _precision(target)
        pinned = precision == "fp16" and translation.all_fp32
        meta = {"unframe.names": json.dumps(names, sort_keys=True),
                "unframe.values": json.dumps(name_map.values, sort_keys=True),
                "unframe.target": _target_name(target),
                "unframe.precision": "fp32 (every node pinned to fp32)" if pinned else precision}
        if sizes is not None:  # float32 weights vs the package's weight file
            meta["unframe.quantize"] = target.get("quantize").scheme.name
            meta["quantized_size"] = (sizes, _weight_file_bytes(path))
        artifact = Artifact(kind=kind, model=mlmodel, path=path, metadata=meta, notes=notes)
        if pinned:
            artifact.notes.append("computed in fp32: every node of the graph is pinned to fp32 "
                                  "(a classical ML model's labels come from comparing scores)")
        artifact.metadata["unframe.io"] = json.dumps(_io_record(model, names, plans, mlmodel,
                                                                translation.states))
        _write_metadata(artifact)
        return artifact

    def runner(self, artifact: Artifact, target: Target) -> Runner:
        try:
            from unframe.converters.backends.coreml.mil_eval import MILRunner
        except ImportError as exc:  # the evaluator is part of unframe; only coremltools may be missing
            raise RunnerUnavailable(f"the MIL evaluator is unavailable: {exc}") from exc
        if artifact.path is None:
            raise RunnerUnavailable("the CoreML artifact was not written to disk")
        from unframe.validate.deferred import Deferred

        path = artifact.path
        # loaded when parity first runs it (the program's load is parity's time, not the build's);
        # the package was written by convert() just now, so it isn't probed in a child first
        return CoreMLRunner(Deferred(lambda: MILRunner(path, vouched=True), "the CoreML package"),
                            json.loads(artifact.metadata["unframe.io"]),
                            json.loads(artifact.metadata.get("unframe.values", "{}")))

    def decode_steps(self, target: Target) -> int:
        return 5  # a prefill and 4 decode steps: the MIL evaluator takes seconds per step

    def compute_precision(self, target: Target) -> str:
        return _precision(target)

    def tolerance(self, dtype: np.dtype, target: Target) -> Tolerance | None:
        if (_precision(target) == "fp16" or target.get("stateful")) and np.dtype(dtype).kind == "f":
            # fp16 compute (or an fp16 KV cache: Core ML states are fp16, whatever the compute): ~3 significant digits per op, accumulated; an element's error follows
            # the values summed into it, so rtol is of the output's scale (validate.tolerances)
            return Tolerance(2e-2, 2e-2, of_scale=True)
        return None

    def stamp(self, artifact: Artifact, provenance: dict[str, str]) -> None:
        artifact.metadata.update({k: _text(v) for k, v in provenance.items()})
        _write_metadata(artifact)

    def write(self, artifact: Artifact, path: Path) -> list[Path]:
        path = Path(path)
        suffix = path.suffix.lower()
        if suffix not in self.suffixes:
            raise UsageError(f"CoreML output {path} must end in .mlpackage or .mlmodel",
                             "use -o model.mlpackage")
        if suffix == ".mlmodel":
            raise UsageError(f"{path}: ML Programs keep their weights beside the program, so they "
                             "are written as .mlpackage", "use -o model.mlpackage")
        if artifact.path is not None and artifact.path.exists():
            shutil.copytree(artifact.path, path)
        else:
            artifact.model.save(str(path))
        return [path]


def _text(value: Any) -> str:
    return value if isinstance(value, str) else json.dumps(value, sort_keys=True, default=str)


def _target_name(target: Target) -> str:
    """The deployment target: as given, else iOS18 for a stateful package, else the default."""
    from unframe.converters.backends.coreml.translate import DEFAULT_TARGET

    return str(target.get("target") or ("iOS18" if target.get("stateful") else DEFAULT_TARGET))


def _ios(target: Target) -> int:
    from unframe.converters.backends.coreml.translate import ios_of

    return ios_of(_target_name(target))


def _precision(target: Target) -> str:
    precision = str(target.get("precision", "fp16")).lower()
    if precision not in PRECISIONS:
        raise UsageError(f"unknown CoreML precision {precision!r}", "use fp16 or fp32")
    return precision


def _option_blockers(model: ir.Model, target: Target) -> list[Blocker]:
    out = []
    names = {v.name for v in model.graph.inputs}
    image = target.get("image_input")
    if image and image not in names:
        out.append(Blocker("input", f"--image-input {image!r} is not an input of the model",
                           hint=f"inputs: {', '.join(sorted(names))}"))
    elif image:
        v = next(v for v in model.graph.inputs if v.name == image)
        if v.shape is None or len(v.shape) != 4 or v.shape[1] not in (1, 3):
            out.append(Blocker("input", f"--image-input {image!r} must be [N, 1|3, H, W]",
                               hint="images are NCHW with 1 or 3 channels"))
    labels = target.get("class_labels")
    if labels and len(model.graph.outputs) < 1:
        out.append(Blocker("output", "--class-labels needs a model with an output"))
    return out


class _NoCollect:
    """The ``gc`` module as coremltools' converter sees it, but for ``collect()``."""

    def __init__(self, real: Any) -> None:
        self._real = real

    def collect(self, *_args: Any) -> int:
        return 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self._real, name)


@contextlib.contextmanager
def without_full_collection() -> Iterator[None]:
    """``ct.convert`` ends with ``gc.collect()``: a full collection, whose cost grows with all the
    calling process holds (a training script's, a zoo run's, a fuzz campaign's: 88 % of the
    coreml campaign's time after 34,000 conversions, `bench/coreml_gc.py`), and which frees
    nothing the conversion needs freed (Python collects cycles on its own schedule). Scoped to
    the call: coremltools' module sees the gc module again after it."""
    from coremltools.converters import _converters_entry as entry

    real = getattr(entry, "gc", None)
    if real is None or not hasattr(real, "collect"):  # a coremltools that no longer collects so
        yield
        return
    entry.gc = _NoCollect(real)
    try:
        yield
    finally:
        entry.gc = real


def _quantize_target(target: Target) -> list[str]:
    """w4 needs iOS18 (int4), int8 iOS17 (MIL's quantize/dequantize of activations): a package
    whose target unframe chose is built for that generation (a note says so); a lower
    ``--target`` the user gave is refused, naming the one that holds it."""
    from unframe.converters.backends.coreml.quantize import SCHEME_IOS
    from unframe.converters.backends.coreml.translate import DEFAULT_TARGET

    request = target.get("quantize")
    needed, what = SCHEME_IOS.get(request.scheme.name, (0, "")) if request is not None else (0, "")
    if _ios(target) >= needed:
        return []
    name = request.scheme.name
    if target.get("target"):
        why = f"{what} (--quantize {name}) exist from iOS{needed}; --target {target.get('target')} has none"
        raise UnsupportedError(f"CoreML can't hold --quantize {name} at --target {target.get('target')}",
                               f"use --target iOS{needed}, or --quantize w8",
                               blockers=[Blocker("*", why, hint=f"use --target iOS{needed}")])
    target.options["target"] = f"iOS{needed}"
    return [f"deployment target iOS{needed}: {what} (--quantize {name}) exist from iOS{needed} "
            f"(the default is {DEFAULT_TARGET}; --quantize w8 holds on it)"]


def _quantize(mlmodel: Any, model: ir.Model, translation: Translation, request: Any,
              notes: list[str]) -> tuple[Any, int]:
    """coremltools.optimize on the built package (``quantize.py``); the float32 bytes of its weights."""
    from unframe.converters.backends.coreml.quantize import float32_bytes, mil_ops_of, quantize_mlmodel

    program = mlmodel._mil_program
    excluded, missing = mil_ops_of(program, translation.names.values, model, request.exclude)
    if missing:
        notes.append(f"quantize: no MIL op found for the ONNX node(s) {', '.join(missing)}: they "
                     "could not be kept in float")
    before = float32_bytes(program)
    # int8: the activations are already quantize/dequantize pairs; the weights are coremltools' w8
    quantized, said = quantize_mlmodel(mlmodel, "w8" if request.scheme.calibrated else request.scheme.name, excluded)
    notes.extend(said)
    return quantized, before


def _weight_file_bytes(package: Path) -> int:
    return sum(p.stat().st_size for p in (package / "Data").rglob("*.bin"))


def _build(translation: Translation, target: Target) -> Any:
    """coremltools' converter on the translated program: its passes and the ML Program."""
    import contextlib
    import io

    from unframe.converters.backends.coreml import passes
    from unframe.converters.backends.coreml.mil_eval._ct import import_coremltools
    from unframe.converters.backends.coreml.translate import ct_inputs, ct_target

    ct = import_coremltools()
    ios = _ios(target)
    fp32_ops = translation.fp32_ops
    fp16 = _precision(target) == "fp16" and not translation.all_fp32  # (the backend notes all-fp32)
    computed = set(translation.names.values.values()) - fp32_ops  # what 16-bit nodes compute
    selector = (lambda op: not _keeps_fp32(op, fp32_ops, computed)) if fp16 and fp32_ops else None
    precision = ct.precision.FLOAT16 if fp16 else ct.precision.FLOAT32
    kwargs: dict[str, Any] = {"pass_pipeline": passes.pipeline(fp16, selector)}
    labels = target.get("class_labels")
    if labels:
        kwargs["classifier_config"] = ct.ClassifierConfig(_labels(labels))
    try:
        # ct.convert draws a tqdm progress bar per pass pipeline on stderr: keep the CLI's output ours
        with contextlib.redirect_stderr(io.StringIO()), without_full_collection(), \
                timing.tool(f"coremltools {ct.__version__} convert"):
            return ct.convert(translation.program, convert_to="mlprogram",
                              minimum_deployment_target=ct_target(ios), compute_precision=precision,
                              inputs=ct_inputs(translation.plans, target.options) or None,
                              skip_model_load=True, **kwargs)
    except Exception as exc:
        raise ConversionError(f"coremltools could not convert the MIL program: {type(exc).__name__}: "
                              f"{str(exc).splitlines()[0] if str(exc) else ''}",
                              "report it with the model; `unframe check --to coreml` lists known limits") from exc


def _options_key(target: Target) -> str:
    return repr(sorted((str(k), repr(v)) for k, v in target.options.items()))


def _keeps_fp32(op: Any, fp32_outputs: set[str], computed: set[str] = frozenset()) -> bool:  # type: ignore[assignment]
    """An op written for a node that stays in float32 (by its outputs' names, which survive
    fusions), an op a fusion made for one (a weight's transpose) or the identity naming one.
    An op computing a 16-bit node's value (``computed``) stays 16-bit even where a float32 op
    reads it: that node's output is stored in 16 bits, as the rounding emulation assumes (a
    Conv before a GroupNorm, whose statistics run in float32)."""
    if any(v.name in fp32_outputs for v in op.outputs):
        return True
    if any(v.name in computed for v in op.outputs):
        return False
    if any(c.outputs and c.outputs[0].name in fp32_outputs for v in op.outputs for c in v.child_ops):
        return True
    source = getattr(op, "x", None) if op.op_type == "identity" else None
    return source is not None and source.name in fp32_outputs


def _labels(labels: Any) -> list[Any]:
    if isinstance(labels, (str, Path)) and Path(labels).is_file():
        return [line.strip() for line in Path(labels).read_text().splitlines() if line.strip()]
    if isinstance(labels, str):
        return [s.strip() for s in labels.split(",") if s.strip()]
    return list(labels)


def _io_record(model: ir.Model, names: dict[str, str], plans: list[Any], mlmodel: Any = None,
               states: list[Any] = ()) -> dict[str, Any]:
    """How ONNX inputs/outputs map onto the package's: names and the ONNX dtypes to restore.

    A classifier (``class_labels``) has Core ML's own outputs instead of the probabilities tensor:
    the predicted label and a ``{label: probability}`` dict, which stands for that tensor. A
    stateful package's cache (``states``) is recorded apart: its past inputs and present outputs
    are not the package's."""
    inputs = [{"onnx": p.onnx_name, "mil": p.mil_name, "dtype": _np_name(p.dtype),
               "shape": [d if isinstance(d, int) else None for d in p.shape]} for p in plans]
    written = {s.present for s in states}
    outputs = [{"onnx": o.name, "mil": names[o.name], "dtype": _np_name(o.dtype),
                "rank": None if o.shape is None else len(o.shape)} for o in model.graph.outputs
               if o.name not in written]
    if mlmodel is not None:
        description = mlmodel.get_spec().description
        probs = description.predictedProbabilitiesName
        present = {o.name for o in description.output}
        missing = [o for o in outputs if o["mil"] not in present]
        if probs and len(missing) == 1:
            missing[0]["mil"] = probs
    record: dict[str, Any] = {"inputs": inputs, "outputs": outputs}
    if states:
        dtypes = {v.name: _np_name(v.dtype) for v in [*model.graph.inputs, *model.graph.outputs]}
        record["states"] = [{"past": s.past, "present": s.present, "mil": s.mil_name,
                             "shape": list(s.shape), "dtype": dtypes.get(s.present, "float32")}
                            for s in states]
    return record


def _np_name(dt: ir.DataType | None) -> str:
    if dt is None:
        return "float32"
    return np.dtype(dt.numpy()).name


def _write_metadata(artifact: Artifact) -> None:
    """Put the artifact's metadata into the package's user metadata and re-save it."""
    mlmodel = artifact.model
    for key, value in artifact.metadata.items():
        mlmodel.user_defined_metadata[str(key)] = _text(value)
    if artifact.path is not None:
        if artifact.path.exists():
            shutil.rmtree(artifact.path)
        mlmodel.save(str(artifact.path))


def _check_memory(model: ir.Model) -> None:
    from unframe import io, limits

    limits.check_stage_memory(int(MEMORY_PER_WEIGHT_BYTE * io.tensor_bytes(model)),
                              "converting to CoreML (its weights, the MIL program and the fp16 copies)")
