"""The divergence locator: where, between two stages, a conversion starts computing something else.

When a parity stage fails, the locator compares the two stages' *intermediate* values along the
ONNX graph the reference stage ran, node by node in topological order, and names the first node
whose inputs still agree but whose outputs do not. It maps that node back to the source (torch
module path and line from the dynamo exporter's node metadata, Keras layer, pipeline step), plots
the error along the path, and writes a minimal repro (an ONNX file of <= 5 nodes around the culprit
and the .npz inputs that reproduce the mismatch on their own).

Pieces:
- ``taps.py``: a ``Tap`` gives intermediate values by ONNX value name for one stage's runtime
  (onnxruntime with every intermediate as an output; the MIL evaluator through the translation's
  name map; torch through the exported program's FX nodes).
- ``search.py``: ``find_divergence(graph, reference, candidate, feeds, ...) -> Divergence``.
- ``repro.py``: the <= 5-node ONNX and its .npz.
- ``plot.py``: the error-growth plot (PNG without extra dependencies, and a small HTML page).
"""
