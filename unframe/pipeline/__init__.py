"""The pipeline: the stage objects a route is made of, and the one loop that runs them.

``route.plan()`` returns a ``Route``: a prefix of stages every target shares (load, export) and
one branch of stages per target (opset, backend, write), with a ``ParityStage`` after each stage
that changes what is computed. ``run_route()`` runs them in order over one ``Flow``, the state in
flight. A work stage offers a runner of what it produced; the parity stage after it compares that
runner with the previous one, the way Polygraphy's comparator compares each runner with the next.
``--explain`` prints the same list, so what is explained is what runs.

Adding a capability (a locator, a callback, a new kind of check) means a new stage or a method on
one, not a new parameter threaded through ``unframe.api``.

Before::   api.convert: load; export; compare; convert opset; compare; check; convert; compare...
After::    for stage in route.prefix + branch.stages: stage.run(flow)

The files follow the stage kinds:

- ``flow.py``: the request (``Settings``), the state in flight (``Flow``) and the loop
  (``run_stages``, ``Observer``);
- ``stages.py``: the ``Stage`` base and the work stages before the backend (load, export, opset,
  lower); ``backend.py``: the backend stage and its 16-bit recovery; ``direct.py``: the backend
  stage of a direct route (a backend converting the source framework's model itself);
- ``parity.py``: the parity stage; ``quantize.py``: a quantized branch's request and its
  accuracy stage (the guard in place of tolerance parity);
- ``write.py``: provenance and writing (stamp, write);
- ``locating.py``: the locator hook a failed parity stage calls.
"""

from __future__ import annotations

from unframe.pipeline.backend import BackendStage
from unframe.pipeline.direct import DirectStage, check_direct, convert_direct, prepared_for
from unframe.pipeline.flow import (
    Flow,
    Observer,
    Settings,
    Unavailable,
    in_parity_time,
    limited,
    run_stages,
    running,
    source_text,
)
from unframe.pipeline.locating import INPUT_BOUND_OPTIONS, debug_dir, locate_failure, source_namer
from unframe.pipeline.parity import ParityStage
from unframe.pipeline.quantize import AccuracyStage
from unframe.pipeline.stages import ExportStage, LoadStage, LowerStage, OpsetStage, Stage
from unframe.pipeline.write import StampStage, WriteStage, parity_summary, provenance, write_artifact
from unframe.validate.deferred import Deferred, onnx_runner_of  # here before validate/deferred.py

__all__ = [
    "INPUT_BOUND_OPTIONS", "AccuracyStage", "BackendStage", "Deferred", "DirectStage", "ExportStage", "Flow", "LoadStage", "LowerStage",
    "Observer", "OpsetStage", "ParityStage", "Settings", "Stage", "StampStage", "Unavailable", "WriteStage",
    "check_direct", "convert_direct", "debug_dir", "in_parity_time", "limited", "locate_failure", "onnx_runner_of", "parity_summary",
    "prepared_for", "provenance", "run_stages", "running", "source_namer", "source_text", "write_artifact",
]
