"""Frontend and Backend protocols, and the value types that flow between stages.

A **frontend** takes a framework's model (object or file) into ONNX (an ``onnx_ir.Model``) and
provides a runner of the source framework for parity. A **backend** takes an ONNX model at its
canonical opset into an artifact (an ONNX file, a CoreML package, a TensorRT engine), lists every
blocker before doing any work, and provides a runner for the artifact when this machine can run it.

Frameworks are imported inside methods, never at module import: ``import unframe`` stays cheap.
Nothing here knows the divergence locator: a frontend states where a node comes from as data on
the node (``SKLEARN_STEP``, the exporters' own metadata), and ``unframe.locate.taps`` maps
frontends and runners to their taps.
"""

from __future__ import annotations

import importlib.util
from abc import ABC, abstractmethod
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

import numpy as np

from unframe.errors import Blocker, MissingExtraError
from unframe.validate.runner import Runner, TensorSpec
from unframe.validate.tolerances import Tolerance

if TYPE_CHECKING:
    import onnx_ir as ir

Feeds = dict[str, np.ndarray]

# Node origins as data: metadata the scikit-learn frontend writes on the nodes it exports, naming
# the estimator each comes from (the locator reads them back: ``unframe.locate.origin``)
SKLEARN_STEP = "unframe.sklearn.step"  # "pipeline step 'scale' (StandardScaler)"
SKLEARN_PATH = "unframe.sklearn.path"  # "scale", "preprocess/num/scale": the step's place


@dataclass
class InputSpec:
    """What the caller said about the model's inputs.

    - ``tensors``: explicit specs (``--inputs name:shape:dtype``); shape entries may be str/None
      for dynamic dims.
    - ``samples``: sample inputs as the user gave them (a framework tensor, tuple, dict, numpy
      array, DataFrame...). Frontends interpret them.
    - ``static``: freeze every dim to the sample shapes (no dynamic batch).
    - ``dynamic``: extra dynamic axes, ``(input_name, axis, dim_name_or_None)``.
    """

    tensors: list[TensorSpec] | None = None
    samples: Any = None
    static: bool = False
    dynamic: list[tuple[str, int, str | None]] = field(default_factory=list)


@dataclass
class ConvertOptions:
    """Options every stage may read. ``options`` holds the stage-specific ones by name
    (e.g. ``exporter``, ``signature``, ``zipmap``, ``precision``, ``shapes``); a stage ignores the
    names it does not know, and ``route.plan`` rejects names no stage of the route declares in
    its ``option_names``."""

    trust: bool = False
    opset: int | None = None
    options: dict[str, Any] = field(default_factory=dict)
    # False when the user turned parity checks off: a stage may skip its own checks too
    validate: bool = True
    # The backends the export feeds (all the targets of the call, in the export stage): a frontend
    # may fit what it exports to what they all hold (a bfloat16 model for CoreML)
    targets: tuple[str, ...] = ()

    def get(self, name: str, default: Any = None) -> Any:
        value = self.options.get(name)
        return default if value is None else value


@dataclass
class ExportResult:
    """What a frontend's ``to_onnx`` returns."""

    model: ir.Model
    tool: str  # e.g. "torch.onnx (dynamo)", "tf2onnx from_keras", "skl2onnx"
    route: str = ""  # which route produced the graph when a frontend has several
    opset: int | None = None
    tool_versions: dict[str, str] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)  # e.g. why a fallback route was used
    # Parity inputs in ONNX input names: one dict per check (e.g. two batch sizes).
    feeds: list[Feeds] = field(default_factory=list)
    # Per-output tolerance overrides the frontend knows are needed ({output: (atol, rtol)}).
    tolerances: dict[str, tuple[float, float]] = field(default_factory=dict)
    # Outputs that must match exactly (class labels).
    exact_outputs: list[str] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)
    # Seconds of to_onnx spent checking the graph's numbers against the source (validation a
    # frontend does itself, e.g. to choose between routes): timed as the export's parity.
    check_seconds: float = 0.0


@dataclass
class Target:
    """Where a route ends: a backend name, the ONNX opset (for ONNX output) and backend options."""

    name: str = "onnx"
    opset: int | None = None
    options: dict[str, Any] = field(default_factory=dict)

    def get(self, name: str, default: Any = None) -> Any:
        value = self.options.get(name)
        return default if value is None else value


# A target option the pipeline sets (never the user): run the artifact as it is deployed, with
# its runtime's default settings, not parity's graph-as-written ones (the float artifact timed
# against a quantized one; ``Backend.runner`` reads it where its runtime has such a difference).
AS_DEPLOYED = "as_deployed"


@dataclass
class Artifact:
    """A backend's product. Lives in a work dir (or in memory) until ``unframe.api`` places it."""

    kind: str  # "onnx" | "mlpackage" | "mlmodel" | "engine"
    model: Any = None  # ir.Model for ONNX, an MLModel for CoreML, engine bytes for TensorRT...
    path: Path | None = None  # where it is written now, if it is
    metadata: dict[str, Any] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


@dataclass
class Prepared:
    """What a frontend hands a direct route (a backend that converts the native model itself, no
    ONNX between them): what to convert, its inputs in the frontend's own form (torch: the
    ``ModelInputs`` of ``_torch/inputs.py``; TF: the resolved ``TensorSpec`` list, ``None`` for a
    dynamic dim), the names the source runner gives the outputs, parity's feeds (the samples,
    and the probe at another size where an axis was proven dynamic), notes, and the source's
    runner on those feeds (its own runs remembered)."""

    native: Any
    example: Any
    output_names: list[str]
    feeds: list[Feeds]
    notes: list[str] = field(default_factory=list)
    runner: Runner | None = None
    # The example with the dynamic axes unframe proved fixed at the samples' sizes (None: nothing
    # to fix): what a direct route converts when its converter refuses the dynamic one
    freeze: Callable[[], Any] | None = None
    # The source run in float64 (a runner, or None where the framework can't): what float32 alone
    # moves its outputs by, a float32 artifact's parity floor when it fails at the default
    precise: Callable[[], Runner | None] | None = None

    def fixed(self) -> Prepared | None:
        """The same preparation with the samples' static shapes (one feed), or None."""
        if self.freeze is None:
            return None
        return Prepared(self.native, self.freeze(), self.output_names, self.feeds[:1],
                        list(self.notes), self.runner, precise=self.precise)


class RunnerUnavailable(Exception):
    """A backend can't run its artifact on this machine (e.g. no GPU for a TensorRT engine).
    The parity stage is then recorded as skipped with this reason."""


class _Component(ABC):  # noqa: B024 (shared base of Frontend and Backend, never instantiated)
    name: str = ""
    extra: str = ""  # the pip extra that installs what it needs
    requires: tuple[str, ...] = ()  # importable module names
    packages: str = ""  # human list of what the extra installs
    description: str = ""
    # Stage-specific option names this component reads (for validation and docs).
    option_names: tuple[str, ...] = ()

    def missing(self) -> list[str]:
        return [m for m in self.requires if importlib.util.find_spec(m) is None]

    def available(self) -> bool:
        return not self.missing()

    def ensure_available(self, what: str | None = None) -> None:
        if self.missing():
            raise MissingExtraError(what or f"the {self.name} {self.kind_name}", self.extra,
                                    self.packages)

    @property
    def kind_name(self) -> str:
        return "component"

    def versions(self) -> dict[str, str]:
        """Versions of the distributions this component uses, without importing them."""
        from unframe.distributions import dist_version

        return {dist: v for dist in self.distributions() if (v := dist_version(dist))}

    def distributions(self) -> tuple[str, ...]:
        return ()


class Frontend(_Component):
    """A framework's way into ONNX. Subclass, set the class attributes, register with
    ``@register_frontend`` in ``unframe/converters/registry.py``'s FRONTENDS."""

    suffixes: tuple[str, ...] = ()  # file suffixes it loads (".pt2", ".keras", ...)
    # Fully qualified base-class names of objects it takes, checked against type(obj).__mro__
    # by name so that detection never imports the framework.
    object_types: tuple[str, ...] = ()
    # False for a source that is ONNX already: the route has no export stage.
    exports: bool = True
    # True when its exports may hold ai.onnx.ml ops (the route then plans a lowering for
    # runtimes without them); an ONNX source is looked at instead
    emits_ml_ops: bool = False

    @property
    def kind_name(self) -> str:
        return "frontend"

    def accepts_path(self, path: Path) -> bool:
        return path.is_file() and path.suffix.lower() in self.suffixes

    def accepts_object(self, obj: Any) -> bool:
        names = {f"{c.__module__}.{c.__qualname__}" for c in type(obj).__mro__}
        return any(t in names for t in self.object_types)

    def default_opset(self) -> int:
        """The opset the exporter produces when not asked for one."""
        return 18

    def closest_opset(self, wanted: int) -> int:
        """The supported export opset closest to ``wanted`` (the version converter does the rest)."""
        return wanted

    @abstractmethod
    def load(self, source: Any, opts: ConvertOptions) -> Any:
        """Load a file (or accept an object) into the native model. Refuse unsafe loads without
        ``opts.trust`` (TrustRequiredError)."""

    @abstractmethod
    def to_onnx(self, native: Any, spec: InputSpec, opts: ConvertOptions) -> ExportResult:
        """Export to ONNX at ``opts.opset`` (or the closest/default one)."""

    @abstractmethod
    def runner(self, native: Any, export: ExportResult | None) -> Runner:
        """A runner of the source framework taking feeds and returning outputs by ONNX names
        (``export`` is None for a frontend that doesn't export)."""

    def prepare(self, native: Any, spec: InputSpec, opts: ConvertOptions) -> Prepared:
        """The model's inputs, outputs, feeds and runner for a backend that converts from the
        native model (``Backend.direct_modules``), found as ``to_onnx`` finds them (samples
        bound, axes proven dynamic by running the source) but without exporting."""
        from unframe.errors import UnsupportedError

        raise UnsupportedError(f"the {self.name} frontend has no direct route to a backend",
                               "convert through ONNX")

    def precise_runner(self, native: Any, export: ExportResult) -> Runner | None:
        """The source model run in float64, same feeds and output names as ``runner``: what
        float32 alone costs the source, the export parity's floor when it fails at the default
        tolerance (``unframe.validate.rounding.source_float32_error``). None where the
        framework can't (the default)."""
        return None

    def describe(self, native: Any) -> str:
        return type(native).__name__

    def preserve(self, source: Any) -> AbstractContextManager[Any]:
        """A context manager that keeps a live model object exactly as it was: entered before
        ``load``, exited when the run ends, whatever the outcome (see ``unframe.preserve``).
        Inside, the model is in inference mode. Nothing to keep by default."""
        return nullcontext()


class Backend(_Component):
    """A runtime's way out of ONNX. Subclass, register with ``@register_backend``."""

    suffixes: tuple[str, ...] = ()  # output suffixes it writes
    canonical_opset: int | None = None  # models are converted to this opset first (None: keep)
    # True when the artifact is the ONNX graph itself (nothing new to run for parity, unless
    # ``changes_compute`` says the backend rewrote what it computes, e.g. fp16 compute)
    artifact_is_graph: bool = False
    # True when the runtime holds neither ai.onnx.ml ops nor strings: the route lowers them
    # (``unframe.passes.ml_to_tensor``) before the backend
    tensor_only: bool = False
    # Deepest tree ml_to_tensor compiles with GEMM on this runtime (then perfect traversal to
    # depth 10, traversal beyond): 0 on CPU runtimes, where perfect traversal was faster at every
    # depth measured; hummingbird's 3 on a GPU runtime
    tree_gemm_max_depth: int = 0
    # Direct routes: frontend name -> the module converting that frontend's native model itself
    # (no ONNX between), with ``convert_from_<frontend>(native, example, target, workdir,
    # output_names=...)`` and optionally ``check_from_<frontend>(native, example, target,
    # output_names=...)``; see ``Prepared`` for what they are given
    direct_modules: ClassVar[dict[str, str]] = {}
    direct_tools: ClassVar[dict[str, str]] = {}  # frontend name -> the tool it uses, for --explain
    # False for a runtime no ONNX graph reaches here: only its direct routes lead to it
    onnx_route: bool = True
    # The --quantize schemes its convert honours (target.options["quantize"], a
    # unframe.passes.quantize.QuantRequest), and whether it keeps the ONNX nodes the request's
    # ``exclude`` names in float (the sensitivity pass then has something to retry with)
    quantize_schemes: tuple[str, ...] = ()
    quantize_excludes: bool = False
    # Quantizers other than its own that its convert can use (``QuantRequest.quantizer``), each
    # with the schemes it makes, in the order the accuracy guard tries them when its own
    # quantizer's artifact fails (before any layer is kept in float); each name is the module
    # that must be importable
    other_quantizers: ClassVar[dict[str, tuple[str, ...]]] = {}
    # Why this machine's runs of the artifact say nothing about its speed ("" = they do): the
    # accuracy guard then reports no latency before and after quantization
    latency_note: str = ""
    # Whether its runner of a quantized artifact runs it apart from this process (a child, for
    # the accuracy guard): the latency timing then asks ``runner`` for one ``AS_DEPLOYED``
    times_apart: bool = False

    @property
    def kind_name(self) -> str:
        return "backend"

    @property
    def direct_from(self) -> tuple[str, ...]:
        return tuple(self.direct_modules)

    def reachable_from(self, frontend: str) -> bool:
        """Whether any route leads from ``frontend``'s models to this backend."""
        return self.onnx_route or frontend in self.direct_modules

    def _direct(self, frontend: str, verb: str) -> Any:
        import importlib

        module = importlib.import_module(self.direct_modules[frontend])
        return getattr(module, f"{verb}_from_{frontend}", None)

    def check_direct(self, frontend: str, prepared: Prepared, target: Target) -> list[Blocker]:
        """Every blocker of the direct route from ``frontend``: its ``check_from_*``, else a
        conversion in a scratch folder (so the two never disagree)."""
        import tempfile

        from unframe.errors import UnsupportedError

        check = self._direct(frontend, "check")
        if check is not None:
            return list(check(prepared.native, prepared.example, target,
                              output_names=prepared.output_names))
        with tempfile.TemporaryDirectory(prefix=".unframe-check-") as scratch:
            try:
                self.convert_direct(frontend, prepared, target, Path(scratch))
            except UnsupportedError as exc:
                return list(exc.blockers) or [Blocker("*", exc.message, hint=exc.hint)]
        return []

    def convert_direct(self, frontend: str, prepared: Prepared, target: Target, workdir: Path) -> Artifact:
        """The artifact built from the native model (``direct_modules[frontend]``)."""
        convert = self._direct(frontend, "convert")
        return convert(prepared.native, prepared.example, target, workdir,
                       output_names=prepared.output_names)

    def opset_window(self, target: Target) -> tuple[int, int] | None:
        """(lowest, highest) ONNX opset the target runtime's importer accepts; None: any."""
        return None

    def pick_opset(self, target: Target, requested: int | None) -> int | None:
        """The ONNX opset the model is brought to before ``convert``: the backend's canonical
        opset (its translators are written against one version of each op), which lies in the
        target's window. None keeps the model's own opset."""
        return self.canonical_opset if self.canonical_opset is not None else requested

    def check_opset_request(self, opset: int) -> None:
        """``--opset`` names the ONNX output's opset; a backend with its own opset refuses it."""
        from unframe.errors import UsageError

        if self.canonical_opset is not None and opset != self.canonical_opset:
            raise UsageError(f"--opset {opset} applies to ONNX output; the {self.name} backend works "
                             f"at opset {self.canonical_opset}", "drop --opset")

    @abstractmethod
    def check(self, model: ir.Model, target: Target) -> list[Blocker]:
        """Every reason the target can't take the model, all at once, without converting."""

    def check_with_notes(self, model: ir.Model, target: Target) -> tuple[list[Blocker], list[str]]:
        """``check`` plus lines for `unframe check` beyond the blockers (e.g. where a support
        table and a live parser disagree). No notes by default."""
        return self.check(model, target), []

    def preflight(self, model: ir.Model, target: Target) -> list[Blocker]:
        """The check a conversion runs right before ``convert``: ``check`` by default. A backend
        whose ``check`` cuts corners for speed (CoreML's translation with stand-ins for large
        weights) does the real work here instead, for ``convert`` to reuse."""
        return self.check(model, target)

    @abstractmethod
    def convert(self, model: ir.Model, target: Target, workdir: Path) -> Artifact:
        """Build the artifact. Backends that must check the written file (CoreML) write it
        under ``workdir``; others may keep it in memory."""

    def runner(self, artifact: Artifact, target: Target) -> Runner:
        """A runner of the artifact; raise RunnerUnavailable(reason) when this machine can't.
        A runner that can read the values inside the artifact implements
        ``unframe.validate.intermediates.ReadsIntermediates``: the divergence locator then looks
        inside it (the locator sees runners, not backends)."""
        raise RunnerUnavailable(f"the {self.name} backend has no runner")

    def probe(self, model: ir.Model, target: Target) -> Any:
        """For a runtime whose intermediates can only be seen by rebuilding it with extra outputs
        (its runner doesn't read them):
        ``(names, feeds) -> values`` building and running the artifact with ``names`` marked as
        outputs; None when this machine can't run it (the locator then bisects with it)."""
        return None

    def changes_compute(self, target: Target) -> bool:
        """For a backend whose artifact is the ONNX graph: whether ``target`` makes it compute
        differently (then its parity is checked like any artifact's)."""
        return not self.artifact_is_graph

    def compute_precision(self, target: Target) -> str:
        """The float type the artifact computes in for ``target``: "fp32", "fp16" or "bf16". A
        16-bit one gets its parity tolerance raised to what 16-bit rounding alone costs the
        graph (``unframe.validate.rounding``)."""
        return "fp32"

    def tolerance(self, dtype: np.dtype, target: Target) -> Tolerance | None:
        """Backend-specific default tolerance for a dtype, e.g. looser and relative to the
        output's scale for fp16 compute (``unframe.validate.tolerances.Tolerance``)."""
        return None

    def full_precision(self, target: Target) -> tuple[Target, str] | None:
        """Where the runtime's own default stores the artifact at reduced precision (OpenVINO's
        fp16 weights) and the user asked for no precision: the target that keeps full precision,
        and what it changes (for the note), to convert again with when parity fails at the
        default. None (the default): nothing to fall back to."""
        return None

    def decode_steps(self, target: Target) -> int:
        """Greedy tokens compared against ONNX for a decoder (``unframe.validate.generate``):
        fewer for a runner that is slow per step (the MIL evaluator)."""
        return 32

    def stamp(self, artifact: Artifact, provenance: dict[str, str]) -> None:
        """Record provenance in the artifact (metadata_props, user metadata, sidecar...)."""
        artifact.metadata.update(provenance)

    @abstractmethod
    def write(self, artifact: Artifact, path: Path) -> list[Path]:
        """Write the final artifact at ``path`` (plus any sidecars beside it); return every path
        written. ``unframe.api`` calls this with a path inside a fresh temporary folder next to
        the destination and then renames everything into place."""

    def placed(self, artifact: Artifact, written: list[Path]) -> None:
        """After ``write``'s files were renamed into place (``written``: their final paths): a
        backend whose artifact can read from them instead of memory does so here."""


__all__ = [
    "Artifact", "Backend", "ConvertOptions", "ExportResult", "Feeds", "Frontend", "InputSpec",
    "Prepared", "Runner", "RunnerUnavailable", "Target", "TensorSpec",
]
