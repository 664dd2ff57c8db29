"""Parity's redrawn feeds for a degenerate reference keep 0-d inputs as 0-d arrays (found by
bench/peer_torch_opinfo.py: ``zeros_like`` and six more ops on a scalar sample failed parity,
exit 5, because onnxruntime refuses a numpy scalar as a feed: "Unable to handle object of type
<class 'numpy.float32'>")."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
import pytest

from unframe.validate.inputs import alternative_feeds


@pytest.mark.parametrize("value", [np.array(1.5, dtype=np.float32), np.array(3, dtype=np.int64),
                                   np.array(True)])
def test_redrawn_scalars_stay_arrays(value: np.ndarray) -> None:
    x = ir.Value(name="x", shape=ir.Shape([]), type=ir.TensorType(ir.DataType.FLOAT))
    graph = ir.Graph([x], [x], nodes=[], opset_imports={"": 18})
    model = ir.Model(graph, ir_version=10)
    for _label, feeds in alternative_feeds(model, [{"x": value}]):
        got = feeds[0]["x"]
        assert isinstance(got, np.ndarray) and got.shape == () and got.dtype == value.dtype
