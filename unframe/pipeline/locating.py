"""The locator hook: what a failed parity stage hands the divergence locator (``unframe.locate``)
and where the locator writes its repro and plot.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from unframe.validate.compare import StageParity
from unframe.validate.runner import Runner

if TYPE_CHECKING:
    from unframe.pipeline.flow import Flow
    from unframe.pipeline.stages import Stage


def locate_failure(stage: Stage, flow: Flow, failed: StageParity, candidate: Runner | None = None) -> Any:
    """Run the divergence locator for a failed stage, within its time cap. Never raises: a locator
    that can't run says why in the Divergence (None when the stage offers nothing to look into)."""
    from unframe.locate import Divergence, locate
    from unframe.locate.locator import stage_tolerance

    try:
        plan = stage.locate_plan(flow, stage_tolerance(failed), candidate)
    except Exception as exc:  # a tap that can't be built here: the parity failure still stands
        return Divergence(stage.kind, status="unavailable",
                          reason=f"could not look inside the stage: {type(exc).__name__}: {exc}")
    if plan is None:
        return Divergence(stage.kind, status="unavailable",
                          reason=f"nothing can look inside the {stage.kind} stage here")
    return locate(plan, flow.feeds, stage=stage.kind, out_dir=debug_dir(flow, stage.kind),
                  seconds=flow.settings.locate_seconds)


def source_namer(flow: Flow) -> Callable[[Any], str]:
    """node -> where in the user's model it comes from (``unframe.locate.taps.source_namer``)."""
    from unframe.locate.taps import source_namer as namer

    return namer(flow.frontend, flow.native)


# backend options that name the model's own inputs or outputs (not a cut's)
INPUT_BOUND_OPTIONS = frozenset({"sample_shapes", "shapes", "dims", "enumerated", "image_input",
                                 "class_labels", "scale", "bias", "color_layout"})


def debug_dir(flow: Flow, stage_kind: str) -> Path:
    """The locator's folder: the one asked for, else beside the output (``m.onnx.debug/``), else a
    new temporary folder (a Python call without an output)."""
    if flow.settings.debug_dir is not None:
        folder = Path(flow.settings.debug_dir) / stage_kind
    elif flow.output is not None:
        folder = flow.output.parent / f"{flow.output.name}.debug" / stage_kind
    else:
        folder = Path(tempfile.mkdtemp(prefix="unframe-debug-")) / stage_kind
    folder.mkdir(parents=True, exist_ok=True)
    return folder
