"""A small generated zoo: tiny ONNX models at old opsets made with onnx.helper (seeded), with a
corrupt file in the middle and a model that can't go down to the batch's target opset."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

TARGET = 17
F = TensorProto.FLOAT


def _save(path: Path, nodes: list[onnx.NodeProto], inputs: list[onnx.ValueInfoProto],
          outputs: list[onnx.ValueInfoProto], opset: int, inits: list[onnx.TensorProto] = ()) -> Path:
    graph = helper.make_graph(nodes, path.stem, inputs, outputs, list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], producer_name="zoo-tests")
    model.ir_version = 6 if opset <= 12 else 8
    onnx.checker.check_model(model)
    path.parent.mkdir(parents=True, exist_ok=True)
    onnx.save(model, path)
    return path


def _vi(name: str, shape: list[int | str]) -> onnx.ValueInfoProto:
    return helper.make_tensor_value_info(name, F, shape)


def relu_add_op9(path: Path) -> None:
    bias = numpy_helper.from_array(np.random.default_rng(1).standard_normal(4).astype(np.float32), "bias")
    _save(path, [helper.make_node("Relu", ["x"], ["r"]), helper.make_node("Add", ["r", "bias"], ["y"])],
          [_vi("x", ["N", 4])], [_vi("y", ["N", 4])], 9, [bias])
    x = np.random.default_rng(2).standard_normal((3, 4)).astype(np.float32)
    np.savez(path.with_name(f"{path.stem}.inputs.npz"), x=x)


def clip_op10(path: Path) -> None:
    _save(path, [helper.make_node("Clip", ["x"], ["y"], min=-0.5, max=0.75)], [_vi("x", ["N", 5])],
          [_vi("y", ["N", 5])], 10)


def softmax_op11(path: Path) -> None:
    # Softmax before opset 13 flattens to 2-D at axis: the upgrade must keep that meaning.
    _save(path, [helper.make_node("Softmax", ["x"], ["y"], axis=1)], [_vi("x", ["N", 3, 4])],
          [_vi("y", ["N", 3, 4])], 11)


def split_op11(path: Path) -> None:
    _save(path, [helper.make_node("Split", ["x"], ["a", "b"], axis=1, split=[1, 2])], [_vi("x", ["N", 3])],
          [_vi("a", ["N", 1]), _vi("b", ["N", 2])], 11)


def reduce_op12(path: Path) -> None:
    _save(path, [helper.make_node("ReduceSum", ["x"], ["y"], axes=[1], keepdims=0)], [_vi("x", ["N", 6])],
          [_vi("y", ["N"])], 12)


def bitwise_op18(path: Path) -> None:
    # BitwiseAnd exists from opset 18 and has no function body: a batch to opset 17 must refuse it.
    ints = [helper.make_tensor_value_info(n, TensorProto.INT32, ["N", 4]) for n in ("a", "b", "y")]
    _save(path, [helper.make_node("BitwiseAnd", ["a", "b"], ["y"])], ints[:2], ints[2:], 18)


def corrupt(path: Path) -> None:
    good = onnx.load(str(path.parent / "cnn" / "relu_op9.onnx")).SerializeToString()
    path.write_bytes(good[: len(good) // 2])  # truncated mid-file


LAYOUT = [  # (relative path, builder); discovery sorts them, so the corrupt file is in the middle
    ("cnn/relu_op9.onnx", relu_add_op9),
    ("cnn/clip_op10.onnx", clip_op10),
    ("corrupt.onnx", corrupt),
    ("new/bitwise_op18.onnx", bitwise_op18),
    ("nlp/softmax_op11.onnx", softmax_op11),
    ("nlp/split_op11.onnx", split_op11),
    ("reduce_op12.onnx", reduce_op12),
]
EXPECTED = {"cnn/clip_op10.onnx": "ok", "cnn/relu_op9.onnx": "ok", "corrupt.onnx": "failed",
            "new/bitwise_op18.onnx": "refused", "nlp/softmax_op11.onnx": "ok", "nlp/split_op11.onnx": "ok",
            "reduce_op12.onnx": "ok"}


def make_zoo(root: Path, layout: list = LAYOUT) -> Path:
    for rel, build in layout:
        build(root / rel)
    return root


@pytest.fixture()
def small_zoo(tmp_path: Path) -> Path:
    return make_zoo(tmp_path / "src")


def tree_digest(root: Path) -> dict[str, str]:
    """Every file under ``root`` with its hash: to prove a run never touched the source tree."""
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def slow_loop_op11(path: Path) -> None:
    """A Loop of a billion iterations: it hangs any runner, so only a timeout or a kill ends it.
    Its condition (not i < 0) is computed, so unframe's static check of endless constant Loops
    can't see that it never ends: only running it can."""
    body = helper.make_graph(
        [helper.make_node("Less", ["i", "zero"], ["negative"]), helper.make_node("Not", ["negative"], ["cond_out"]),
         helper.make_node("Add", ["acc_in", "one"], ["acc_out"])],
        "body",
        [helper.make_tensor_value_info("i", TensorProto.INT64, []),
         helper.make_tensor_value_info("cond_in", TensorProto.BOOL, []), _vi("acc_in", ["N", 2])],
        [helper.make_tensor_value_info("cond_out", TensorProto.BOOL, []), _vi("acc_out", ["N", 2])],
        [numpy_helper.from_array(np.ones(2, np.float32), "one"), numpy_helper.from_array(np.array(0, np.int64), "zero")])
    inits = [numpy_helper.from_array(np.array(1_000_000_000, np.int64), "trips"),
             numpy_helper.from_array(np.array(True), "cond")]
    _save(path, [helper.make_node("Loop", ["trips", "cond", "x"], ["y"], body=body)], [_vi("x", ["N", 2])],
          [_vi("y", ["N", 2])], 11, inits)


def written_models(out: Path) -> dict[str, bytes]:
    """Each written model's bytes, less the provenance's creation time (the runs differ in it)."""
    import onnx

    found = {}
    for p in sorted(out.rglob("*.onnx")):
        model = onnx.load(p)
        kept = [m for m in model.metadata_props if m.key != "unframe.created"]
        assert len(kept) == len(model.metadata_props) - 1, "provenance records when it was made"
        del model.metadata_props[:]
        model.metadata_props.extend(kept)
        found[p.relative_to(out).as_posix()] = model.SerializeToString()
    return found
