"""The divergence locator: where, between two stages, a conversion starts computing something else.

When a parity stage fails, the locator compares the two stages' *intermediate* values along the
ONNX graph the stages share, node by node in topological order, and names the first node whose
inputs still agree but whose outputs do not. It maps that node back to the source (torch module
path and line from the dynamo exporter's node metadata, Keras layer, pipeline step), plots the
error along the path, and writes a minimal repro (an ONNX file of <= 5 nodes around the culprit
and the .npz inputs that reproduce the mismatch on their own).

Pieces, each with one job:
- ``taps.py``: a ``Tap`` (``unframe.validate.intermediates``) gives intermediate values by ONNX
  value name for one stage's runtime (onnxruntime with every intermediate as an output; a runner
  that reads its own, such as the CoreML runner through the translation's value map). The
  locator sees runners, not backends: ``taps.py`` maps a runner, or a frontend's class, to its
  tap; ``torch_tap.py``, ``keras_tap.py`` and ``sklearn_tap.py`` are the source frameworks'.
- ``search.py``: ``find_divergence(graph, reference, candidate, feeds, ...) -> Divergence``.
- ``bisect.py``: for a runtime that changes when intermediates are marked (TensorRT), one value at
  a time at layer boundaries, in ceil(log2 N) builds.
- ``repro.py``: the <= 5-node ONNX and its .npz.
- ``plot.py``: the error-growth plot (PNG without extra dependencies, and a small HTML page).
- ``locator.py``: ``locate(plan, feeds, ...)``, which a failed pipeline stage calls with the
  ``LocatePlan`` it builds (``Stage.locate_plan``), and ``unframe debug`` / ``unframe compare`` use.
"""

from unframe.locate.locator import LocatePlan, locate
from unframe.locate.search import Divergence

__all__ = ["Divergence", "LocatePlan", "locate"]
