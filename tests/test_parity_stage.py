"""The parity stage's order of recoveries: a comparison that only failed once parity redrew
inputs that exercise the model (the first ones gave a degenerate reference) is handed to the
stage's ``recover`` like a first failure is (issue 37: torchvision SSD300 on OpenVINO passed on
its constant first feeds, failed on the redrawn ones, and its fp32-weights retry never ran).

Real onnxruntime sessions on real graphs: the reference ``y = Relu(x - 2)`` is 0 everywhere on
zeros (degenerate) and on values in [0, 1]; on values of std 10 it is exercised. The candidate
rounds its output (an artifact at a precision that loses it); the stage's recover offers the
exact graph. Control: a stage with nothing to recover fails, and before the change so did this
one (the redraw's failure was recorded as it was)."""

from __future__ import annotations

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper, numpy_helper

from unframe.pipeline.flow import Flow, Settings
from unframe.pipeline.parity import ParityStage
from unframe.pipeline.stages import Stage
from unframe.validate.onnxruntime import OnnxRuntimeRunner


def _graph(rounded: bool) -> ir.Model:
    nodes = [helper.make_node("Sub", ["x", "two"], ["d"]), helper.make_node("Relu", ["d"], ["r" if rounded else "y"])]
    if rounded:
        nodes.append(helper.make_node("Round", ["r"], ["y"]))
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [64])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [64])],
                              [numpy_helper.from_array(np.array(2.0, np.float32), "two")])
    return ir.serde.deserialize_model(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


class Rounding(Stage):
    kind = "backend"

    def __init__(self, exact: bool) -> None:
        super().__init__("a rounding backend")
        self.exact, self.asked = exact, 0

    def recover(self, flow: Flow, candidate):  # noqa: ANN001
        self.asked += 1
        if self.exact and self.asked == 1:
            return OnnxRuntimeRunner(_graph(rounded=False))
        return None


def _flow() -> Flow:
    model = _graph(rounded=False)
    return Flow(Settings(locate=False), "test", None, model=model, reference=OnnxRuntimeRunner(model),
                candidate=OnnxRuntimeRunner(_graph(rounded=True)),
                _feeds=[{"x": np.zeros(64, np.float32)}])


def test_a_failure_found_on_redrawn_inputs_is_recovered() -> None:
    flow, stage = _flow(), Rounding(exact=True)
    ParityStage(stage, "onnxruntime", "onnxruntime", "test").run(flow)
    result = flow.report.stages[-1]
    assert result.status == "passed", result.reason
    assert stage.asked == 1 and flow.redrawn and any("std 10" in n for n in flow.notes), flow.notes
    assert float(np.std(flow.feeds[0]["x"])) > 5  # compared again on the inputs that exercise it


def test_without_a_recovery_the_redrawn_failure_stands() -> None:
    import pytest

    from unframe.errors import ParityError

    flow, stage = _flow(), Rounding(exact=False)
    with pytest.raises(ParityError):
        ParityStage(stage, "onnxruntime", "onnxruntime", "test").run(flow)
    assert stage.asked >= 1
