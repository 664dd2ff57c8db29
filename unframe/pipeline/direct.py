"""The direct backend stage: a backend converting the source framework's model itself, with no
ONNX between them (LiteRT from TF/Keras or torch, ExecuTorch and OpenVINO from torch...).

The frontend prepares the model once per conversion (``Frontend.prepare``: samples bound and
named, axes proven dynamic by running the source, the source's runner with its runs kept); the
backend's ``convert_direct`` builds the artifact; the parity stage after this one compares the
artifact's runner with the source's on the prepared feeds. A branch that runs this stage has no
ONNX graph: it starts from the source, not from what the export stage (if another target asked
for one) produced.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unframe.converters.base import Backend, Frontend, Prepared, Target
from unframe.errors import Blocker, UnsupportedError
from unframe.pipeline.backend import BackendStage, offer_runner
from unframe.pipeline.flow import Flow, in_parity_time
from unframe.validate.compare import ParityReport
from unframe.validate.runner import Runner

PREPARED = "prepared"  # Flow.shared key: the frontend's Prepared, made once for every direct branch


def prepared_for(flow: Flow) -> Prepared:
    """The frontend's preparation of ``flow.native``, made on first use and shared by the
    branches (one run of the source's probes whatever the number of direct targets)."""
    found = flow.shared.get(PREPARED)
    if found is None:
        found = flow.frontend.prepare(flow.native, flow.settings.spec, flow.settings.convert_options())
        flow.shared[PREPARED] = found
    return found


class DirectStage(BackendStage):
    kind = "backend"

    def __init__(self, backend: Backend, frontend: Frontend, target: Target, output: Path | None) -> None:
        super().__init__(backend, target, output)
        self.frontend = frontend
        self._noise: tuple[Any, Any, str] | None = None  # (feeds, RoundingError, runner) once measured
        self.detail = (f"build {', '.join(backend.suffixes)} from the {frontend.name} model itself "
                       f"({_route_module(backend, frontend)}; no ONNX)")

    def run(self, flow: Flow) -> None:
        prepared = prepared_for(flow)
        export = flow.export
        # this branch starts from the source: nothing of the ONNX export applies to it
        flow.notes = [n for n in flow.notes if export is None or n not in export.notes] + list(prepared.notes)
        flow.export, flow.model, flow.conversion, flow.opset_path = None, None, None, []
        flow.report = ParityReport([])
        if flow.validate:
            flow.reference = prepared.runner
            flow._feeds = list(prepared.feeds)
            flow.unstable = set()
        from unframe.pipeline.quantize import quant_request

        quant_request(flow, self.backend, self.target, prepared.feeds[0])
        self._convert(flow)

    def _convert(self, flow: Flow) -> None:
        be, tgt = self.backend, self.target
        near = self.output.parent if self.output is not None else None
        flow.artifact, used = convert_direct(be, self.frontend, prepared_for(flow), tgt, flow.work_dir(near))
        if used.feeds is not prepared_for(flow).feeds:  # built static: parity runs its one feed
            flow._feeds = list(used.feeds)
            flow.notes.append(used.notes[-1])
        if flow.validate:
            offer_runner(flow, be, tgt)

    def _build(self, flow: Flow, target: Target, folder: Path) -> Any:
        return convert_direct(self.backend, self.frontend, prepared_for(flow), target, folder)[0]

    def locate_plan(self, flow: Flow, tolerance: float, candidate: Runner | None = None) -> Any:
        return None  # no graph both sides share: the parity failure names the outputs

    def recover(self, flow: Flow, candidate: Runner | None) -> Runner | None:
        """A 16-bit artifact whose precision was the runtime's default, not the user's: the
        artifact at full precision (``recover_full_precision``; a 16-bit floor is measured on an
        ONNX graph, which this route has none of). A float32 artifact that failed at the default
        tolerance: measure what float32 alone moves the source's outputs by (the source in
        float64, where its frontend can), which raises the atol as the export's parity does
        (``validate.rounding.source_float32_error``): the runtime's kernels sum in other orders."""
        from unframe.validate.rounding import source_float32_error

        if self.backend.compute_precision(self.target) != "fp32":
            return self.recover_full_precision(flow)
        prepared = prepared_for(flow)
        if (self._noise is not None or candidate is None or flow.reference is None
                or prepared.precise is None):
            return None
        precise = prepared.precise()
        if precise is None:
            return None
        feeds = flow.feeds
        measured = in_parity_time(flow, "measuring the source's own float32 error",
                                  lambda: source_float32_error(flow.reference, precise, feeds))
        self._noise = (feeds, measured, precise.name)
        if measured is None or not any(measured.allowance(n) for n in measured.errors):
            return None
        return candidate

    def compare_options(self, flow: Flow) -> dict[str, Any]:
        from unframe.pipeline.stages import float32_floors

        return {**super().compare_options(flow), **float32_floors(self._noise, flow)}


def convert_direct(be: Backend, fe: Frontend, prepared: Prepared, target: Target, workdir: Path
                   ) -> tuple[Any, Prepared]:
    """The artifact and the preparation it was built from: where the converter refuses the
    dynamic axes unframe proved, it is built again at the samples' static shapes (a note on the
    returned preparation says why); a refusal of that too stands, with its own blockers (the
    simplest model's reasons)."""
    try:
        return be.convert_direct(fe.name, prepared, target, workdir), prepared
    except UnsupportedError as exc:
        fixed = prepared.fixed()
        if fixed is None or target.get("static"):
            raise
        artifact = be.convert_direct(fe.name, fixed, target, workdir)
        fixed.notes.append(f"{be.name}: the conversion with dynamic axes was refused ({_first(exc)}): "
                           "built with the samples' static shapes")
        return artifact, fixed


def check_direct(be: Backend, fe: Frontend, prepared: Prepared, target: Target) -> list[Blocker]:
    """``convert_direct``'s verdict without keeping the artifact: the blockers of the static
    build where the dynamic one is refused (the two never disagree)."""
    blockers = be.check_direct(fe.name, prepared, target)
    fixed = prepared.fixed() if blockers and not target.get("static") else None
    return be.check_direct(fe.name, fixed, target) if fixed is not None else blockers


def _first(exc: UnsupportedError) -> str:
    if exc.blockers:
        b = exc.blockers[0]
        return f"{b.op}: {b.reason}" if b.op and b.op != "*" else str(b.reason)
    return exc.message


def _route_module(backend: Backend, frontend: Frontend) -> str:
    return backend.direct_tools.get(frontend.name) or backend.direct_modules[frontend.name]
