"""PyTorch in: nn.Module / ExportedProgram objects, .pt2, TorchScript and (with trust) pickles.

Export goes through ``torch.onnx.export(..., dynamo=True)``; when that fails the reason is
recorded in the notes and the TorchScript exporter is tried (``exporter`` forces one), in a
forked child (``_torch/isolate.py``: a failed trace can corrupt torch's heap). Inputs come from
the samples, ``--inputs`` specs or the ExportedProgram's own example inputs. The batch axis is
dynamic only where proven (``_torch/dynamic.py``): the model runs at another batch size and the
export takes it; otherwise every axis stays as the samples have it, and the notes say why.
Parity runs torch eager on the same feeds (the frontend's own runs on the samples and the probe
are its reference), at two batch sizes when the batch is dynamic.
"""

from __future__ import annotations

import contextlib
import time
import weakref
from dataclasses import replace
from pathlib import Path
from typing import Any

import onnx_ir as ir

from unframe import io, timing
from unframe.converters.base import ConvertOptions, ExportResult, Frontend, InputSpec, Prepared
from unframe.converters.frontends._torch import dynamic as dyn
from unframe.converters.frontends._torch import export as exp
from unframe.converters.frontends._torch import inputs as inp
from unframe.converters.frontends._torch import kvcache
from unframe.converters.frontends._torch import precision as prec
from unframe.converters.frontends._torch.preserve import float32_shortcut_was_on
from unframe.converters.frontends._torch.runner import (
    TorchRunner,
    callable_of,
    device_of,
    flat_outputs,
    run_model,
)
from unframe.converters.frontends._torch.sources import is_factory_ref, load_factory, load_path
from unframe.converters.frontends._torch.unwrap import (
    default_samples,
    prepare_hf,
    quantization_modules,
    unwrap,
)
from unframe.converters.registry import register_frontend
from unframe.errors import ConversionError, UnsupportedError, UsageError
from unframe.opset import main_opset
from unframe.validate.runner import Runner

EXPORTERS = ("dynamo", "torchscript")
# Notes about how a source was loaded (e.g. routed by content), keyed by the native model.
_LOAD_NOTES: weakref.WeakKeyDictionary[Any, list[str]] = weakref.WeakKeyDictionary()
# What a loaded source is called in notes ("the .pt2"), keyed by the native model.
_SOURCE_NAMES: weakref.WeakKeyDictionary[Any, str] = weakref.WeakKeyDictionary()
# Live modules that were training when handed in (the guard puts them in eval mode first).
_WAS_TRAINING: weakref.WeakKeyDictionary[Any, bool] = weakref.WeakKeyDictionary()


@register_frontend
class TorchFrontend(Frontend):
    name = "torch"
    extra = "torch"
    requires = ("torch", "onnxscript")
    packages = "torch, onnxscript"
    description = ("PyTorch: nn.Module and ExportedProgram objects, .pt2 (torch.export), "
                   "TorchScript .pt/.pth, state dicts and pickles with --trust, module:factory")
    suffixes = (".pt2", ".pt", ".pth")
    object_types = ("torch.nn.modules.module.Module",
                    "torch.export.exported_program.ExportedProgram")
    option_names = ("exporter", "model_factory", "dynamic", "output_names", "precision", "kv_cache")

    def distributions(self) -> tuple[str, ...]:
        return ("torch", "onnxscript", "onnx-ir")

    def accepts_path(self, path: Path) -> bool:
        return super().accepts_path(path) or is_factory_ref(path)

    def default_opset(self) -> int:
        return exp.DYNAMO_OPSETS[0]

    def closest_opset(self, wanted: int) -> int:
        return exp.clamp(wanted, exp.DYNAMO_OPSETS)

    # ------------------------------------------------------------------------------- load --
    def load(self, source: Any, opts: ConvertOptions) -> Any:
        import torch

        if isinstance(source, (str, Path)) and is_factory_ref(source):
            native, notes = load_factory(str(source), trust=opts.trust), [f"built by {source}()"]
        elif isinstance(source, (str, Path)):
            native, notes = load_path(Path(source), trust=opts.trust,
                                      model_factory=opts.get("model_factory"))
            _SOURCE_NAMES[native] = f"the {Path(source).suffix or 'file'}"
        elif isinstance(source, torch.nn.Module):
            native, notes = unwrap(source, type(source).__name__)
            if _WAS_TRAINING.pop(source, False):
                notes.append(f"{type(source).__name__} was in training mode: exported in eval "
                             "mode, and restored to training mode after")
        elif isinstance(source, torch.export.ExportedProgram):
            native, notes = source, []
        else:
            raise UsageError(f"the torch frontend can't take a {type(source).__name__}",
                             "pass an nn.Module, an ExportedProgram or a torch file")
        _LOAD_NOTES[native] = notes
        return native

    def preserve(self, source: Any) -> Any:
        """A live module (wrappers included) is snapshotted and restored after the run; inside
        it is in eval mode. A file source gets the process state (RNGs) kept."""
        import torch

        from unframe.converters.frontends._torch.preserve import preserved

        if isinstance(source, torch.nn.Module) and any(m.training for m in source.modules()):
            _WAS_TRAINING[source] = True
        return preserved(source, f"the live {type(source).__name__}")

    # ---------------------------------------------------------------------------- export --
    def to_onnx(self, native: Any, spec: InputSpec, opts: ConvertOptions) -> ExportResult:
        what = self.describe(native)
        notes = list(_LOAD_NOTES.get(native, []))
        cast = prec.apply(native, opts.get("precision"), what)  # in place: the guard restores it
        module = native  # what is exported and run for parity: the model, or its KV-cache wrapper
        if opts.get("kv_cache"):
            kv = kvcache.prepare(native, self._samples(native, spec), spec.static, what)
            module, inputs, given_outputs = kv.module, kv.inputs, kv.output_names
            notes += kv.notes
        else:
            notes += prepare_hf(native, spec.samples)
            inputs = self._inputs(native, _with_option_dynamic(spec, opts), what)
            given_outputs = opts.get("output_names")
        if cast is not None:
            notes.append(cast.note)
            prec.cast_inputs(inputs, cast)
        device = device_of(callable_of(module))
        inp.to_device(inputs, device)  # a CUDA model is exported there
        inp.own_copies(inputs)  # a forward that writes its input writes unframe's copy, not the caller's
        if device is not None and float32_shortcut_was_on(device.type):
            notes.append(f"float32 math on {device.type.upper()} was allowed TF32/bf16 shortcuts: unframe ran "
                         "the model in full float32, as the graph computes, and left the setting as it was")
        fn = callable_of(module)
        started = time.perf_counter()
        with timing.checking() if opts.validate else contextlib.nullcontext():
            fed, eager, probe = _sample_runs(native, fn, inputs, what, notes)
        eager_seconds = time.perf_counter() - started
        outputs = inp.output_names(eager, given_outputs)
        if _is_exported_program(native) and (spec.dynamic or spec.static):
            notes.append("an ExportedProgram's shapes were fixed by torch.export; "
                         "--static/--dynamic don't change them")
        widen = prec.widen_for(module, opts.get("precision"), opts.targets, what)
        saved = prec.float32_inputs(inputs) if widen else None
        with prec.in_float32(module) if widen else contextlib.nullcontext():
            model, route, workdir, inputs, probe = self._export(module, inputs, probe, outputs, opts,
                                                               notes, what, device)
            if widen:
                prec.own_float32_weights(model)
        if widen:  # the graph takes float32; the model (parity's reference) its own bfloat16
            prec.restore_inputs(inputs, saved)
            notes.append(widen)
            fed = _as_float32(fed)
            if probe is not None:
                probe.feed = _as_float32(probe.feed)
        self._adopt_graph_names(model, inputs, outputs, what)
        if module is not native:
            kvcache.name_dims(model)
        if probe is not None:
            notes.append(dyn.dynamic_note(inputs, probe))
        elif _is_exported_program(native) and _exported_shapes_static(native):
            notes.append(_static_batch_note(native))
        if not io.has_external_tensors(model) and io.tensor_bytes(model) > io.EXTERNAL_DATA_THRESHOLD:
            # The graph reads the live parameters until the run ends: an output is written from
            # them once and then read back from its file, a result kept in memory gets its own
            # copy (``io.snapshot_weights``): never a private copy on the way (4.7 GB at Llama-1B).
            notes.append(f"weights past {io.EXTERNAL_DATA_THRESHOLD / 2**30:g} GiB: kept in external data")
        extra: dict[str, Any] = {"inputs": inputs, "output_names": outputs, "module": module}
        feeds = [_renamed(fed, inputs)] + ([_renamed(probe.feed, inputs)] if probe is not None else [])
        if opts.validate:  # the eager runs are parity's reference on those feeds: not run twice
            ran = [inp.numpy_of(t).copy() for t in flat_outputs(eager)]
            extra["eager"] = [(feeds[0], ran)] + ([(feeds[1], probe.outputs)] if probe else [])
        del eager
        if workdir is not None and io.has_external_tensors(model):
            extra["workdir"] = workdir  # the lazy tensors live there; keep it while the result does
        elif workdir is not None:
            workdir.cleanup()
        return ExportResult(model=model, tool=f"torch.onnx ({route})", route=route,
                            opset=main_opset(model), tool_versions=self.versions(),
                            notes=notes, feeds=feeds, extra=extra,
                            check_seconds=eager_seconds if "eager" in extra else 0.0)

    def prepare(self, native: Any, spec: InputSpec, opts: ConvertOptions) -> Prepared:
        """The model as a direct route takes it: the samples bound and named, the batch axis
        proven by a probe run, the eager outputs on both feeds remembered by the runner. The
        module converts as it is (``--kv-cache`` and ``--precision bf16`` shape the ONNX export)."""
        what = self.describe(native)
        notes = list(_LOAD_NOTES.get(native, [])) + prepare_hf(native, spec.samples)
        if opts.get("kv_cache"):  # the other targets of the call may still want it
            notes.append("--kv-cache shapes the ONNX export: a direct route converts the module as "
                         "it is, without the cache as inputs and outputs")
        inputs = self._inputs(native, _with_option_dynamic(spec, opts), what)
        inp.own_copies(inputs)
        fn = callable_of(native)
        fed, eager, probe = _sample_runs(native, fn, inputs, what, notes)
        outputs = inp.output_names(eager, opts.get("output_names"))
        if probe is not None:
            notes.append(dyn.dynamic_note(inputs, probe))
        elif _is_exported_program(native) and _exported_shapes_static(native):
            notes.append(_static_batch_note(native))
        runner = TorchRunner(native, inputs, outputs, what)
        runner.remember(fed, [inp.numpy_of(t).copy() for t in flat_outputs(eager)])
        feeds = [fed]
        if probe is not None:
            runner.remember(probe.feed, probe.outputs)
            feeds.append(probe.feed)
        from unframe.converters.frontends._torch.runner import float64_runner

        return Prepared(native, inputs, outputs, feeds, notes, runner,
                        freeze=inputs.static_copy if inputs.guessed and probe is not None else None,
                        precise=lambda: float64_runner(native, inputs, outputs, what))

    def _samples(self, native: Any, spec: InputSpec) -> Any:
        return spec.samples if spec.samples is not None else (
            None if spec.tensors else default_samples(native))

    def _inputs(self, native: Any, spec: InputSpec, what: str) -> inp.ModelInputs:
        import torch

        fn = callable_of(native)
        samples = self._samples(native, spec)
        if samples is not None:
            args, kwargs = inp.from_samples(fn, samples, what)
        elif spec.tensors:
            args, kwargs = inp.from_tensor_specs(fn, spec.tensors, what)
        elif isinstance(native, torch.export.ExportedProgram) and \
                (found := inp.from_exported_program(native)) is not None:
            args, kwargs = found
        else:
            raise UsageError(f"{what}: torch models need example inputs to export",
                             "pass sample_inputs=... (--sample-inputs FILE.npz) or "
                             "--inputs name:shape:dtype")
        return inp.finalize(fn, args, kwargs, spec, what)

    def _export(self, native: Any, inputs: inp.ModelInputs, probe: dyn.Probe | None, outputs: list[str],
                opts: ConvertOptions, notes: list[str], what: str, device: Any
                ) -> tuple[ir.Model, str, Any, inp.ModelInputs, dyn.Probe | None]:
        """The first exporter that takes the model: with the proven batch axis, else (it refused
        the axis, or its graph fixes it) the same exporter again with the samples' shapes,
        before the next exporter. Returns the graph, the route, its folder, the inputs it was
        exported with and the probe when its batch is in the graph (None: one batch size)."""
        forced = opts.get("exporter")
        if forced is not None and forced not in EXPORTERS:
            raise UsageError(f"--exporter {forced}: unknown exporter", "use dynamo or torchscript")
        wanted = opts.opset or self.default_opset()
        failures: list[str] = []
        data_dependent = False
        tried = (forced,) if forced else _routes(native, notes)
        for route in tried:
            bounds = exp.DYNAMO_OPSETS if route == "dynamo" else exp.TORCHSCRIPT_OPSETS
            opset = exp.clamp(wanted, bounds)
            attempt = inputs
            while True:
                workdir = exp.new_workdir() if route == "torchscript" else None
                try:
                    model = self._run_exporter(route, native, attempt, outputs, opset, workdir, what, device)
                except Exception as exc:
                    if workdir is not None:
                        workdir.cleanup()
                    line = exp.explain(exc, f"{route} export of {what}")
                    if attempt.guessed and not exp.is_data_dependent(exc):
                        notes.append(dyn.static_note(attempt, f"the {route} exporter refused it ({line})"))
                        attempt = attempt.static_copy()
                        continue  # the same exporter with the samples' shapes
                    data_dependent = data_dependent or exp.is_data_dependent(exc)
                    failures.append(line)
                    break
                why = dyn.taken(model, attempt, probe) if probe is not None and attempt.guessed else ""
                if why:
                    if workdir is not None:
                        workdir.cleanup()
                    notes.append(dyn.static_note(attempt, why))
                    attempt = attempt.static_copy()
                    continue
                self._exported_notes(route, opset, wanted, bounds, failures, data_dependent, notes)
                kept = probe if probe is not None and attempt is inputs else None
                return model, route, workdir, attempt, kept
        quantized = quantization_modules(native)
        if quantized:
            raise UnsupportedError(
                f"{what} has quantized or fake-quantized modules ({', '.join(quantized)}) that "
                f"neither torch.onnx exporter takes: {failures[0]}",
                "convert a QAT model first (torch.ao.quantization.convert, or torchao's "
                "convert_pt2e) and pass the result, or export the float model")
        raise exp.conversion_error(failures, data_dependent, tried,
                                   exported_program=_is_exported_program(native))

    @staticmethod
    def _exported_notes(route: str, opset: int, wanted: int, bounds: tuple[int, int], failures: list[str],
                        data_dependent: bool, notes: list[str]) -> None:
        if failures:
            retried = "TorchScript" if route == "torchscript" else "dynamo"
            notes.append(f"{failures[0]}; retried with the {retried} exporter"
                         + (" (it records the branch the samples take)"
                            if data_dependent and route == "torchscript" else ""))
        if opset != wanted:
            notes.append(f"the {route} exporter supports opsets {bounds[0]}-{bounds[1]}: "
                         f"exported at {opset}, the version converter takes it to {wanted}")

    def _run_exporter(self, route: str, native: Any, inputs: inp.ModelInputs, outputs: list[str],
                      opset: int, workdir: Any, what: str, device: Any) -> ir.Model:
        import torch

        if route == "dynamo":
            return exp.export_dynamo(native, inputs, outputs, opset,
                                     optimize=prec.optimizer_safe(native))
        if isinstance(native, torch.export.ExportedProgram):
            if _exported_shapes_static(native):  # the program's guards hold it to its shapes
                inputs = replace(inputs, dynamic={}, batch=None)
            return exp.export_torchscript(exp.unlifted(native, inputs), inputs, outputs, opset,
                                          Path(workdir.name), what, device)
        return exp.export_torchscript(native, inputs, outputs, opset, Path(workdir.name), what, device)

    def _adopt_graph_names(self, model: ir.Model, inputs: inp.ModelInputs, outputs: list[str],
                           what: str) -> None:
        """Feeds and the runner use the names the graph really has (an ExportedProgram keeps
        its own placeholder names)."""
        graph_inputs = [v for v in model.graph.inputs if v.name not in model.graph.initializers]
        if len(graph_inputs) != len(inputs.names):
            raise ConversionError(
                f"{what}: the exported graph has {len(graph_inputs)} inputs for "
                f"{len(inputs.names)} input tensors (an input is unused or was folded)",
                "remove unused inputs, or pass only the inputs the model uses")
        renamed = {old: v.name for old, v in zip(inputs.names, graph_inputs, strict=True)}
        inputs.dynamic = {renamed[n]: axes for n, axes in inputs.dynamic.items()}
        inputs.names = [v.name for v in graph_inputs]
        if len(model.graph.outputs) != len(outputs):
            raise ConversionError(f"{what}: the exported graph has {len(model.graph.outputs)} "
                                  f"outputs for {len(outputs)} output tensors",
                                  "return only tensors (no None or Python numbers)")
        outputs[:] = [v.name for v in model.graph.outputs]

    def runner(self, native: Any, export: ExportResult) -> Runner:
        runner = TorchRunner(export.extra.get("module", native), export.extra["inputs"],
                             export.extra["output_names"], self.describe(native))
        for fed, outputs in export.extra.pop("eager", []):
            runner.remember(fed, outputs)
        return runner

    def precise_runner(self, native: Any, export: ExportResult) -> Runner | None:
        from unframe.converters.frontends._torch.runner import float64_runner

        return float64_runner(export.extra.get("module", native), export.extra["inputs"],
                              export.extra["output_names"], self.describe(native))

    def describe(self, native: Any) -> str:
        import torch

        if isinstance(native, torch.export.ExportedProgram):
            return "ExportedProgram"
        if isinstance(native, torch.jit.ScriptModule):
            return f"TorchScript {native.original_name}"
        return type(native).__name__


def _sample_runs(native: Any, fn: Any, inputs: inp.ModelInputs, what: str, notes: list[str]
                 ) -> tuple[dict[str, Any], Any, dyn.Probe | None]:
    """The samples as parity will feed them (copied before any run), the eager outputs on them,
    and the probe that proved the batch axis (None: one batch size; its notes go to ``notes``)."""
    fed = inp.feeds(inputs)
    pristine = inp.tensor_copies(inputs)
    eager = run_model(fn, *inputs.rebuild(pristine), what)  # a forward may write its inputs:
    # the probe and the exporters get the samples as they were, not what the forward left
    probe = None
    if not (_is_exported_program(native) and _exported_shapes_static(native)):
        probe, probe_notes = dyn.prove(fn, inputs, what)  # the batch axis: only where proven
        notes += probe_notes
        dyn.use_as_example(inputs, probe)
    else:  # torch.export fixed every shape: no guessed axis stays dynamic
        dyn.drop(inputs, sorted(inputs.guessed))
    return fed, eager, probe


def _is_exported_program(native: Any) -> bool:
    import torch

    return isinstance(native, torch.export.ExportedProgram)


def _static_batch_note(native: Any) -> str:
    """Why the exported batch axis is static: an ExportedProgram's shapes are the ones torch.export
    fixed (unframe can't make them dynamic); otherwise the model itself fixes the batch."""
    if _is_exported_program(native):
        name = _SOURCE_NAMES.get(native, "the ExportedProgram")
        fixed = "shapes are static (torch.export fixed them)" if _exported_shapes_static(native) \
            else "batch axis is static (torch.export fixed it)"
        return f"{name}'s {fixed}; parity runs one batch size"
    return "the batch axis came out static (the model fixes it); parity runs one batch size"


def _exported_shapes_static(ep: Any) -> bool:
    """True when every user input of the ExportedProgram has only concrete dims (no symbols)."""
    user_inputs = set(ep.graph_signature.user_inputs)
    for node in ep.graph.nodes:
        if node.op != "placeholder" or node.name not in user_inputs:
            continue
        shape = getattr(node.meta.get("val"), "shape", ())
        if not all(isinstance(d, int) for d in shape):
            return False
    return True


def _routes(native: Any, notes: list[str]) -> tuple[str, ...]:
    import torch

    if isinstance(native, torch.jit.ScriptModule):
        # torch.onnx's dynamo exporter refuses ScriptModules outright.
        notes.append("TorchScript source: exported with the TorchScript exporter (the dynamo "
                     "exporter doesn't take ScriptModules)")
        return ("torchscript",)
    detector = _data_dependent_family(native)
    if detector:
        notes.append(f"{detector}: the TorchScript exporter tried first (torch.export refuses its "
                     "data-dependent post-processing, after tracing the whole network: 3 s at SSD300)")
        return ("torchscript", "dynamo")
    return EXPORTERS


# Model families whose forward torch.export can't take (shapes that depend on the data: a
# detector's score threshold and NMS), by the module their classes come from. The TorchScript
# exporter records the branch the samples take; dynamo stays the fallback.
DATA_DEPENDENT_FAMILIES = {"torchvision.models.detection": "torchvision detector"}


def _data_dependent_family(native: Any) -> str:
    for cls in type(native).__mro__:
        for module, family in DATA_DEPENDENT_FAMILIES.items():
            if cls.__module__.startswith(module):
                return f"{family} {type(native).__name__}"
    return ""


def _with_option_dynamic(spec: InputSpec, opts: ConvertOptions) -> InputSpec:
    """The ``dynamic`` stage option and InputSpec.dynamic are the same thing; take both."""
    extra = [tuple(d) for d in opts.get("dynamic", []) if tuple(d) not in spec.dynamic]
    if not extra:
        return spec
    return replace(spec, dynamic=[*spec.dynamic, *extra])


def _as_float32(feed: dict[str, Any]) -> dict[str, Any]:
    return {n: (a.astype("float32") if str(a.dtype) == "bfloat16" else a) for n, a in feed.items()}


def _renamed(feed: dict[str, Any], inputs: inp.ModelInputs) -> dict[str, Any]:
    """A feed drawn before the export, by the graph's input names (same order)."""
    return dict(zip(inputs.names, feed.values(), strict=True))
