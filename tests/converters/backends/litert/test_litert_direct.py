"""The LiteRT backend's direct routes, run for real: torch -> litert-torch and TF/Keras ->
TensorFlow's TFLite converter, each artifact run on ai-edge-litert's interpreter (XNNPACK) and
checked against the framework on other inputs than the ones it was converted with."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from litert_models import (
    hf_llama,
    keras_two_io,
    scale_ok,
    tf_inputs,
    torch_batch_view,
    torch_cnn,
    torch_inputs,
    torch_two_heads,
)

from unframe.converters.base import Target
from unframe.errors import UnsupportedError

pytest.importorskip("ai_edge_litert", reason="needs ai-edge-litert (the 'litert' extra)")

FP32 = Target("litert", None, {})
FP16 = Target("litert", None, {"precision": "fp16"})


def _backend():
    from unframe.route import get_backend

    return get_backend("litert")


def _run(artifact, target, feeds):
    runner = _backend().runner(artifact, target)
    try:
        return runner.run(feeds)
    finally:
        runner.close()


# ------------------------------------------------------------------------------------ torch --
torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("litert_torch", reason="needs litert-torch (make install)")


def test_torch_cnn_dynamic_batch(tmp_path: Path) -> None:
    from unframe.converters.backends.litert.from_torch import convert_from_torch

    model = torch_cnn()
    inputs = torch_inputs(model, (torch.randn(2, 3, 16, 16),))
    artifact = convert_from_torch(model, inputs, FP32, tmp_path)
    assert not any("dropped" in n for n in artifact.notes), artifact.notes
    runner = _backend().runner(artifact, FP32)
    assert runner.input_specs()[0].shape == (None, 3, 16, 16)  # the batch stayed dynamic
    for batch in (1, 5):  # neither is the batch it was converted at
        x = torch.randn(batch, 3, 16, 16, generator=torch.Generator().manual_seed(batch))
        ref = model(x).detach().numpy()
        out = runner.run({"x": x.numpy()})["output_0"]
        assert scale_ok([ref])
        assert out.shape == ref.shape
        np.testing.assert_allclose(out, ref, atol=1e-5, rtol=1e-4)


def test_torch_fp16_weights(tmp_path: Path) -> None:
    """16-bit weights: the flatbuffer holds float16 tensors, and the outputs are as near as
    the backend's 16-bit tolerance (of the output's scale) allows, but not float32-exact."""
    from unframe.converters.backends.litert import flatbuf
    from unframe.converters.backends.litert.from_torch import convert_from_torch

    model = torch_cnn()
    inputs = torch_inputs(model, (torch.randn(2, 3, 16, 16),))
    artifact = convert_from_torch(model, inputs, FP16, tmp_path)
    assert "DEQUANTIZE" in flatbuf.describe(artifact.model, "fp16")["ops"]
    x = torch.randn(3, 3, 16, 16, generator=torch.Generator().manual_seed(7))
    ref = model(x).detach().numpy()
    out = _run(artifact, FP16, {"x": x.numpy()})["output_0"]
    error = float(np.abs(out - ref).max())
    tol = _backend().tolerance(np.dtype("float32"), FP16)
    assert tol is not None and tol.of_scale
    assert 0 < error <= tol.atol + tol.rtol * float(np.abs(ref).max())
    assert _backend().compute_precision(FP16) == "fp16"


def test_torch_pytree_io_and_int64(tmp_path: Path) -> None:
    """Named outputs of a dict, an int64 input litert-torch narrows to int32: the runner feeds and
    returns the source's dtypes. (Static: litert-torch can't lower ``ids * 2`` on a dynamic batch,
    see the test below.)"""
    from unframe.converters.backends.litert.from_torch import convert_from_torch

    model = torch_two_heads()
    ids = torch.arange(6).reshape(2, 3) + 2**20
    inputs = torch_inputs(model, (torch.randn(2, 5), ids), static=True)
    artifact = convert_from_torch(model, inputs, FP32, tmp_path)
    x = torch.randn(2, 5, generator=torch.Generator().manual_seed(3))
    out = _run(artifact, FP32, {"x": x.numpy(), "ids": (ids + 5).numpy()})
    ref = model(x, ids + 5)
    assert set(out) == {"score", "ids2"}
    assert out["ids2"].dtype == np.int64
    np.testing.assert_array_equal(out["ids2"], ref["ids2"].numpy())
    np.testing.assert_allclose(out["score"], ref["score"].detach().numpy(), atol=1e-5)


def test_dynamic_refusal_is_built_static_by_the_route_and_checked_on_the_samples(tmp_path: Path) -> None:
    """litert-torch refuses the dynamic batch: the route builds the frontend's static copy and
    checks it on the samples; the direct function raises the refusal (exit 4, the op named;
    check agrees). It used to build static inside the backend, unseen by the route, whose parity
    then fed the probe's batch to a .tflite whose reshape holds the traced batch: exit 5 (as
    Hugging Face BERT and GPT-2 of the architecture set)."""
    import unframe
    from unframe.converters.backends.litert import flatbuf
    from unframe.converters.backends.litert.from_torch import check_from_torch, convert_from_torch

    model = torch_batch_view()
    x, ids = torch.randn(2, 6, generator=torch.Generator().manual_seed(4)), torch.arange(6).reshape(2, 3)
    assert scale_ok([model(x, ids)[0].detach().numpy()])  # outputs of order 1: parity can fail
    out = tmp_path / "m.tflite"
    result = unframe.convert(model, to="litert", sample_inputs=(x, ids), output=out, locate=False)
    assert any("built with the samples' static shapes" in n for n in result.notes)
    stage = result.report.stages[-1]
    assert stage.status == "passed" and stage.cases == 1, stage.reason
    shapes = [t["shape"] for t in flatbuf.describe(out.read_bytes(), "out")["inputs"]]
    assert shapes == [[2, 6], [2, 3]]

    inputs = torch_inputs(model, (x, ids))
    assert inputs.dynamic  # the batch, guessed: eager torch takes any
    with pytest.raises(UnsupportedError) as info:
        convert_from_torch(model, inputs, FP32, tmp_path)
    assert info.value.exit_code == 4 and info.value.blockers
    assert [b.to_dict() for b in check_from_torch(model, inputs, FP32)] == [b.to_dict() for b in info.value.blockers]


def test_hf_llama_from_config(tmp_path: Path) -> None:
    pytest.importorskip("transformers", reason="needs transformers")
    from unframe.converters.backends.litert.from_torch import convert_from_torch

    model = hf_llama()
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 8, dtype=torch.long)
    # static: litert-torch 0.10 can't lower the dynamic batch (the route builds it static, see above)
    inputs = torch_inputs(model, (), {"input_ids": ids, "attention_mask": mask}, static=True)
    artifact = convert_from_torch(model, inputs, FP32, tmp_path)
    other = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    out = _run(artifact, FP32, {"input_ids": other.numpy(), "attention_mask": mask.numpy()})
    ref = model(input_ids=other, attention_mask=mask).logits.detach().numpy()
    assert scale_ok([ref])
    np.testing.assert_allclose(out["logits"], ref, atol=1e-4, rtol=1e-3)
    assert (out["logits"].argmax(-1) == ref.argmax(-1)).all()


def test_check_agrees_with_convert_and_refuses_with_blockers(tmp_path: Path) -> None:
    """A model litert-torch can't take: check lists the blockers convert raises (exit 4)."""
    from unframe.converters.backends.litert.from_torch import check_from_torch, convert_from_torch

    class Sorts(torch.nn.Module):
        def forward(self, x):  # a data-dependent output shape: no static TFLite graph holds it
            return torch.nonzero(x > 0)

    model = Sorts().eval()
    inputs = torch_inputs(model, (torch.randn(4, 3),), static=True)
    blockers = check_from_torch(model, inputs, FP32)
    assert blockers
    with pytest.raises(UnsupportedError) as info:
        convert_from_torch(model, inputs, FP32, tmp_path)
    assert info.value.exit_code == 4
    assert [b.to_dict() for b in info.value.blockers] == [b.to_dict() for b in blockers]


# --------------------------------------------------------------------------------- TF/Keras --
def test_keras_two_inputs_two_outputs_dynamic_batch(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow", reason="needs tensorflow")
    from unframe.converters.backends.litert.from_tf import convert_from_tf

    model = keras_two_io()
    native, specs = tf_inputs(model)
    artifact = convert_from_tf(native, specs, FP32, tmp_path)
    rng = np.random.default_rng(0)
    for batch in (1, 4):
        image = rng.standard_normal((batch, 12, 12, 3)).astype(np.float32)
        extra = rng.standard_normal((batch, 5)).astype(np.float32)
        out = _run(artifact, FP32, {"image": image, "extra": extra})
        ref = [r.numpy() for r in model([image, extra])]
        assert scale_ok(ref)
        assert list(out) == ["logits", "total"]
        np.testing.assert_allclose(out["logits"], ref[0], atol=1e-5, rtol=1e-4)
        np.testing.assert_allclose(out["total"], ref[1], atol=1e-5, rtol=1e-4)


def test_keras_fp16_weights(tmp_path: Path) -> None:
    pytest.importorskip("tensorflow", reason="needs tensorflow")
    from unframe.converters.backends.litert.from_tf import convert_from_tf

    model = keras_two_io()
    native, specs = tf_inputs(model)
    artifact = convert_from_tf(native, specs, FP16, tmp_path)
    image = np.random.default_rng(1).standard_normal((2, 12, 12, 3)).astype(np.float32)
    extra = np.zeros((2, 5), np.float32)
    out = _run(artifact, FP16, {"image": image, "extra": extra})["logits"]
    ref = model([image, extra])[0].numpy()
    error = float(np.abs(out - ref).max())
    assert 0 < error <= 1e-2 * float(np.abs(ref).max())


def test_tf_function_with_signature(tmp_path: Path) -> None:
    tf = pytest.importorskip("tensorflow", reason="needs tensorflow")
    from unframe.converters.backends.litert.from_tf import convert_from_tf

    w = tf.constant(np.random.default_rng(2).normal(0, 1, (6, 3)).astype(np.float32))

    @tf.function(input_signature=[tf.TensorSpec([None, 6], tf.float32, name="features")])
    def fn(features):
        return tf.nn.softmax(tf.matmul(features, w)) * 4.0

    native, specs = tf_inputs(fn)
    artifact = convert_from_tf(native, specs, FP32, tmp_path)
    x = np.random.default_rng(3).standard_normal((7, 6)).astype(np.float32)
    out = _run(artifact, FP32, {"features": x})
    np.testing.assert_allclose(out["output_0"], fn(x).numpy(), atol=1e-5)


def test_tf_refusal_names_the_op(tmp_path: Path) -> None:
    """MatrixInverse is no LiteRT builtin: an exit-4 refusal naming it; check agrees."""
    tf = pytest.importorskip("tensorflow", reason="needs tensorflow")
    from unframe.converters.backends.litert.from_tf import check_from_tf, convert_from_tf

    @tf.function(input_signature=[tf.TensorSpec([3, 3], tf.float32, name="m")])
    def inverse(m):
        return tf.linalg.inv(m)

    native, specs = tf_inputs(inverse)
    blockers = check_from_tf(native, specs, FP32)
    assert any("MatrixInverse" in b.op for b in blockers), blockers
    with pytest.raises(UnsupportedError) as info:
        convert_from_tf(native, specs, FP32, tmp_path)
    assert info.value.exit_code == 4 and any("MatrixInverse" in b.op for b in info.value.blockers)
