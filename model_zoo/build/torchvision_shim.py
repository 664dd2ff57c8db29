"""Make torchvision importable next to the CPU build of torch that unframe pins.

The only torchvision 0.28 wheel on the registry is built against a CUDA torch: its ``_C``
extension does not load with torch 2.13.0+cpu, and ``import torchvision`` then fails with
``operator torchvision::nms does not exist`` (torchvision registers a fake kernel for ``nms`` and
``qnms`` whether or not its extension loaded). Classification and segmentation models never call
those C++ ops, and detection models call only ``nms`` and ``roi_align`` (which torchvision computes
in pure torch without its extension, through ``torch.compile``: TorchScript's tracer refuses that).

``import_torchvision()`` (or ``install_import_hook()``, for any later import) therefore defines the two schemas the import needs,
``torchvision::nms`` and ``torchvision::qnms``, with a pure-torch CPU kernel (greedy suppression
in score order, a box suppressed when its IoU with a kept box exceeds the threshold, as the C++
kernel does), lets ``torchvision.ops.nms`` call it, and then imports torchvision; and
``torchvision::roi_align`` with torchvision's own pure-torch kernel, which ``import_torchvision``
makes ``ops.roi_align`` call as it calls the C++ op (Faster R-CNN then exports as users' does). When the wheel's
own extension loads (a torchvision built for this torch), nothing is patched.

Install torchvision without its dependencies so pip leaves the torch pin alone:
``pip install --no-deps torchvision==0.28.0`` (pinned in constraints.txt and the dev extra).
Lives here, in the model builders, because it is a workaround for this machine's wheels, not a
part of unframe.
"""

from __future__ import annotations

import importlib.abc
import importlib.util
import sys
from pathlib import Path
from types import ModuleType
from typing import Any

NMS_SCHEMA = "(Tensor dets, Tensor scores, float iou_threshold) -> Tensor"
_LIBRARY: list[Any] = []  # keeps the torch.library registration alive
_PREPARED: list[bool] = []


def import_torchvision() -> ModuleType:
    """torchvision, importable with the CPU torch pin (see the module docstring)."""
    prepare()
    import torchvision
    import torchvision.ops.boxes

    if _LIBRARY:
        # torchvision.ops.nms refuses to run without its extension; the schema defined is there
        torchvision.ops.boxes._assert_has_ops = _ops_defined
        # roi_align calls the op defined here, as with its extension, not its torch.compile'd
        # pure-torch fallback, which TorchScript's tracer refuses (Faster R-CNN's export)
        roi_align = sys.modules["torchvision.ops.roi_align"]
        roi_align._has_ops = _ops_present
        roi_align._assert_has_ops = _ops_defined
    return torchvision


def prepare() -> None:
    """Define what ``import torchvision`` needs, once, unless its own extension loads."""
    if _PREPARED:
        return
    _PREPARED.append(True)
    if not _extension_loads():
        _define_nms()


class _BeforeTorchvision(importlib.abc.MetaPathFinder):
    """Runs :func:`prepare` when something first imports torchvision, then lets the normal
    finders load it (transformers imports torchvision whenever it and pillow are installed)."""

    def find_spec(self, name: str, path: Any = None, target: Any = None) -> None:
        if name == "torchvision":
            sys.meta_path.remove(self)
            prepare()
        return None


def install_import_hook() -> None:
    """Make every later ``import torchvision`` in this process work (the test suite installs it
    from tests/conftest.py). Costs nothing until torchvision is imported."""
    if "torchvision" in sys.modules or any(isinstance(f, _BeforeTorchvision) for f in sys.meta_path):
        return
    if importlib.util.find_spec("torchvision") is not None:
        sys.meta_path.insert(0, _BeforeTorchvision())


def _ops_present() -> bool:
    """Stands in for torchvision's ``_has_ops`` in its roi_align module: the op is defined."""
    return True


def _ops_defined() -> None:
    """Stands in for torchvision's ``_assert_has_ops`` (a plain function: batched_nms is
    scripted while tracing, and TorchScript compiles what it calls from source)."""


def _extension_loads() -> bool:
    """Whether torchvision's own C++ ops load with this torch (then no shim is needed)."""
    import torch

    spec = importlib.util.find_spec("torchvision")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("torchvision is not installed: pip install --no-deps torchvision==0.28.0")
    folder = Path(next(iter(spec.submodule_search_locations)))
    library = next(iter(sorted(folder.glob("_C*.so")) + sorted(folder.glob("_C*.pyd"))), None)
    if library is None:
        return False
    try:
        torch.ops.load_library(str(library))
    except (OSError, RuntimeError):
        return False
    return True


def _define_nms() -> None:
    import torch

    library = torch.library.Library("torchvision", "FRAGMENT")
    for name in ("nms", "qnms"):
        library.define(name + NMS_SCHEMA)
        library.impl(name, nms_reference, "CPU")
    library.define("roi_align" + ROI_ALIGN_SCHEMA)
    library.impl("roi_align", roi_align_reference, "CPU")
    _LIBRARY.append(library)


ROI_ALIGN_SCHEMA = ("(Tensor input, Tensor rois, float spatial_scale, SymInt pooled_height, "
                    "SymInt pooled_width, int sampling_ratio, bool aligned) -> Tensor")


def roi_align_reference(input: Any, rois: Any, spatial_scale: float, pooled_height: int,
                        pooled_width: int, sampling_ratio: int, aligned: bool) -> Any:
    """torchvision's own pure-torch RoIAlign (``ops.roi_align._roi_align``, unwrapped from the
    ``torch.compile`` it applies lazily), the kernel of the ``torchvision::roi_align`` op."""
    module = sys.modules["torchvision.ops.roi_align"]
    kernel = getattr(module._roi_align, "__wrapped__", module._roi_align)
    return kernel(input, rois, spatial_scale, pooled_height, pooled_width, sampling_ratio, aligned)


def nms_reference(dets: Any, scores: Any, iou_threshold: float) -> Any:
    """Indices of the boxes kept, in decreasing score order: a box is dropped when its IoU with
    a higher-scoring kept box is above ``iou_threshold``. Boxes are (x1, y1, x2, y2)."""
    import torch

    if dets.numel() == 0:
        return torch.empty(0, dtype=torch.long, device=dets.device)
    order = torch.argsort(scores, descending=True, stable=True)
    boxes = dets[order]  # in the boxes' own dtype, as the C++ kernel computes
    area = (boxes[:, 2] - boxes[:, 0]) * (boxes[:, 3] - boxes[:, 1])
    top_left = torch.maximum(boxes[:, None, :2], boxes[None, :, :2])
    bottom_right = torch.minimum(boxes[:, None, 2:], boxes[None, :, 2:])
    inter = (bottom_right - top_left).clamp(min=0).prod(dim=2)
    iou = inter / (area[:, None] + area[None, :] - inter)
    suppressed = torch.zeros(len(order), dtype=torch.bool)
    keep = []
    for i in range(len(order)):
        if suppressed[i]:
            continue
        keep.append(i)
        suppressed |= iou[i] > iou_threshold
    return order[torch.tensor(keep, dtype=torch.long)]
