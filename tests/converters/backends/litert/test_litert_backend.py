"""The LiteRT backend's registry entry, its ONNX-route refusal, the tflite alias, provenance in the
flatbuffer's metadata, inspect, and what a damaged or foreign .tflite does (one-line errors, the
test process never crashes)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper

import unframe
from unframe.converters.base import Artifact, Target
from unframe.errors import InputError, UnsupportedError

FP32 = Target("litert", None, {})


def _relu_onnx(path: Path) -> Path:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])])
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)]), path)
    return path


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "unframe.cli.main", *args], capture_output=True, text=True,
                          timeout=300)


# ------------------------------------------------------------------------ registry, aliases --
def test_registered_under_litert_and_tflite() -> None:
    from unframe.route import get_backend, get_frontend, parse_targets

    assert get_backend("litert").name == "litert"
    assert get_backend("TFLite").name == "litert"
    assert parse_targets("onnx,tflite") == ["onnx", "litert"]
    assert get_frontend("tflite").name == "tf"  # --from tflite still reads a .tflite source
    assert get_backend("litert").suffixes == (".tflite",)


def test_onnx_route_is_an_exit_4_refusal_naming_the_direct_routes(tmp_path: Path) -> None:
    source = _relu_onnx(tmp_path / "relu.onnx")
    result = unframe.check(str(source), to="tflite")
    assert not result
    assert any("TF/Keras or torch source" in b.hint for b in result.blockers)
    with pytest.raises(UnsupportedError) as info:
        unframe.convert(str(source), to="litert", output=str(tmp_path / "out.tflite"))
    assert info.value.exit_code == 4
    assert not (tmp_path / "out.tflite").exists()
    cli = _cli("check", str(source), "--to", "tflite")
    assert cli.returncode == 4, cli.stderr
    assert "TF/Keras or torch source" in cli.stdout + cli.stderr
    assert "Traceback" not in cli.stderr


def test_lazy_import() -> None:
    """The backend's module imports no framework nor the runtime."""
    code = ("import sys, unframe.converters.backends.litert.backend as b; "
            "print([m for m in ('tensorflow', 'torch', 'ai_edge_litert', 'litert_torch') if m in sys.modules])")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr


# --------------------------------------------------------------------- a real .tflite -------
@pytest.fixture(scope="module")
def keras_artifact(tmp_path_factory: pytest.TempPathFactory) -> tuple[Artifact, object]:
    pytest.importorskip("ai_edge_litert", reason="needs ai-edge-litert (the 'litert' extra)")
    tf = pytest.importorskip("tensorflow", reason="needs tensorflow")
    from litert_models import tf_inputs

    from unframe.converters.backends.litert.from_tf import convert_from_tf

    w = tf.constant(np.random.default_rng(0).normal(0, 1, (4, 3)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 4], tf.float32, name="x")])
    def fn(x):
        return tf.tanh(tf.matmul(x, w)) * 2.0

    native, specs = tf_inputs(fn)
    return convert_from_tf(native, specs, FP32, tmp_path_factory.mktemp("lite")), fn


def _written(artifact: Artifact, path: Path, provenance: dict[str, str]) -> Path:
    from unframe.route import get_backend

    backend = get_backend("litert")
    backend.stamp(artifact, provenance)
    backend.write(artifact, path)
    return path


def test_provenance_in_metadata_and_inspect(keras_artifact, tmp_path: Path) -> None:
    from unframe.cli.inspect import describe

    artifact, fn = keras_artifact
    x = np.random.default_rng(1).standard_normal((3, 4)).astype(np.float32)
    before = _run(artifact, {"x": x})
    path = _written(artifact, tmp_path / "m.tflite", {"source": "fn", "route": json.dumps(["load", "litert"]),
                                                      "parity": json.dumps({"passed": True, "stages": []})})
    info = describe(str(path))
    assert info["kind"] == "tflite"
    assert info["provenance"]["source"] == "fn"
    assert info["provenance"]["route"] == ["load", "litert"]
    assert info["parity"] == {"passed": True, "stages": []}
    assert [i["name"] for i in info["inputs"]] == ["x"] and [o["name"] for o in info["outputs"]] == ["output_0"]
    assert info["inputs"][0]["shape"] == ["?", 4]
    # stamping rewrote the flatbuffer: the model computes exactly the same
    after = _run(artifact, {"x": x})
    np.testing.assert_array_equal(before["output_0"], after["output_0"])
    np.testing.assert_allclose(after["output_0"], fn(x).numpy(), atol=1e-6)
    cli = _cli("inspect", str(path))
    assert cli.returncode == 0, cli.stderr
    assert "signature 'serving_default': (x) -> (output_0)" in cli.stdout


def test_buffers_stay_16_byte_aligned(keras_artifact) -> None:
    """The repack keeps TFLite's alignment of weight data (the generated Pack aligns to 1)."""
    from unframe.converters.backends.litert import flatbuf

    artifact, _ = keras_artifact
    fb = flatbuf.schema()
    model = fb.Model.GetRootAs(bytearray(artifact.model), 0)
    offsets = []
    for i in range(model.BuffersLength()):
        buffer = model.Buffers(i)
        if buffer.DataLength() > 0:
            offsets.append(buffer._tab.Vector(buffer._tab.Offset(4)))  # where the bytes start
    assert offsets and all(o % 16 == 0 for o in offsets), offsets


def test_foreign_file_runs_in_a_child(keras_artifact, tmp_path: Path) -> None:
    from unframe.converters.backends.litert.runner import LiteRTRunner

    artifact, fn = keras_artifact
    path = _written(artifact, tmp_path / "foreign.tflite", {})
    runner = LiteRTRunner(None, path=path)  # no record: names from the file's signature
    assert "child process" in runner.name
    x = np.random.default_rng(2).standard_normal((5, 4)).astype(np.float32)
    assert [s.name for s in runner.input_specs()] == ["x"]
    np.testing.assert_allclose(runner.run({"x": x})["output_0"], fn(x).numpy(), atol=1e-6)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "flipped"])
def test_damaged_files_are_one_line_errors(keras_artifact, tmp_path: Path, damage: str) -> None:
    from unframe.cli.inspect import describe
    from unframe.converters.backends.litert.runner import LiteRTRunner

    artifact, _ = keras_artifact
    good = bytes(artifact.model)
    data = {"garbage": b"\x01\x02\x03\x04TFL3" + bytes(range(256)) * 4,
            "truncated": good[: len(good) // 3],
            "flipped": good[:8] + bytes(b ^ 0xFF for b in good[8:64]) + good[64:]}[damage]
    path = tmp_path / f"{damage}.tflite"
    path.write_bytes(data)
    with pytest.raises(InputError) as info:
        describe(str(path))
    assert "\n" not in str(info.value)
    runner = LiteRTRunner(None, path=path)
    with pytest.raises(InputError) as ran:
        runner.input_specs()
        runner.run({"x": np.zeros((1, 4), np.float32)})
    assert "\n" not in str(ran.value)
    cli = _cli("inspect", str(path))
    assert cli.returncode == 3 and "Traceback" not in cli.stderr and len(cli.stderr.strip().splitlines()) == 1


def _run(artifact: Artifact, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    from unframe.route import get_backend

    runner = get_backend("litert").runner(artifact, FP32)
    try:
        return runner.run(feeds)
    finally:
        runner.close()
