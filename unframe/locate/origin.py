"""Where an ONNX node comes from in the user's model, from what its exporter wrote on it.

- torch's dynamo exporter: ``pkg.torch.onnx.*`` node metadata (module path, class, stack trace):
  ``"conv2 (Conv2d) at model.py:30"`` (``torch_tap.source_location``).
- unframe's scikit-learn frontend: ``unframe.sklearn.step`` on the node producing each
  estimator's outputs: ``"pipeline step 'scale' (StandardScaler)"``; a node inside an estimator's
  conversion takes the label of the first stamped node its outputs flow into.

The metadata travels with the graph, so an ONNX file given as the source is named as well.
Keras graphs carry their layers in name scopes instead (``keras_tap.layer_of_node``).
"""

from __future__ import annotations

from typing import Any

from unframe.converters.base import SKLEARN_PATH, SKLEARN_STEP

__all__ = ["SKLEARN_PATH", "SKLEARN_STEP", "node_origin", "sklearn_step"]


def node_origin(node: Any) -> str:
    """The node's origin in the source model, or "" when its metadata says nothing."""
    from unframe.locate.torch_tap import source_location

    return source_location(node) or sklearn_step(node)


def sklearn_step(node: Any) -> str:
    """The estimator stamped on the node, or on the first stamped node its outputs flow into."""
    seen: set[int] = set()
    frontier = [node]
    while frontier:
        current = frontier.pop(0)
        if id(current) in seen:
            continue
        seen.add(id(current))
        label = current.metadata_props.get(SKLEARN_STEP)
        if label:
            return label
        for value in current.outputs:
            frontier.extend(user for user, _ in value.uses())
    return ""
