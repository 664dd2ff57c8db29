"""A classifier package (``class_labels``): ct.convert appends MIL's ``classify`` op, so the
package outputs the predicted label and a {label: probability} dict instead of the ONNX
probabilities tensor. The parity stage compares that dict (in class order) with onnxruntime's
tensor, and the label is checked against the argmax of onnxruntime's probabilities."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from onnx import TensorProto, helper, numpy_helper

import unframe

pytestmark = pytest.mark.usefixtures("coreml")


def _softmax_classifier(path: Path, classes: int) -> Path:
    w = numpy_helper.from_array(np.random.default_rng(3).standard_normal((4, classes)).astype(np.float32), "W")
    graph = helper.make_graph(
        [helper.make_node("MatMul", ["x", "W"], ["logits"]), helper.make_node("Softmax", ["logits"], ["probs"], axis=-1)],
        "clf", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
        [helper.make_tensor_value_info("probs", TensorProto.FLOAT, [1, classes])], [w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, path)
    return path


@pytest.mark.parametrize("labels", [["zebra", "ant", "moth"], [30, 10, 20, 40]], ids=["str", "int"])
def test_classifier_package_checked_against_onnxruntime(tmp_path: Path, labels: list) -> None:
    from unframe.converters.backends.coreml.mil_eval import MILRunner

    src = _softmax_classifier(tmp_path / "clf.onnx", len(labels))
    label_file = tmp_path / "labels.txt"
    label_file.write_text("\n".join(map(str, labels)) + "\n")
    x = np.random.default_rng(0).standard_normal((1, 4)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    result = unframe.convert(src, to="coreml", output=tmp_path / "clf.mlpackage", class_labels=str(label_file),
                             sample_inputs=str(tmp_path / "x.npz"), precision="fp32")
    backend = result.report.stages[-1]
    assert backend.stage == "backend" and backend, backend.reason
    probs = ort.InferenceSession(str(src)).run(None, {"x": x})[0].reshape(-1)
    outs = MILRunner(result.path).run({"x": x})
    label = next(v for v in outs.values() if not isinstance(v, dict))
    table = next(v for v in outs.values() if isinstance(v, dict))
    assert [str(k) for k in table] == [str(lab) for lab in labels]  # class order, not sorted
    assert str(label) == str(labels[int(np.argmax(probs))])
    np.testing.assert_allclose(list(table.values()), probs, rtol=1e-5, atol=1e-6)
