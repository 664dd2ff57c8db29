"""OpenVINO's direct routes (no ONNX): ``convert_from_torch`` and ``convert_from_tf`` called as the
route planner will call them, each artifact run on OpenVINO's CPU plugin against the framework."""

from __future__ import annotations

import json
from types import SimpleNamespace
from typing import Any

import numpy as np
import pytest
from ov_models import openvino_or_skip

from unframe.converters.base import Target
from unframe.errors import UnsupportedError
from unframe.validate.runner import TensorSpec

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning", "ignore::FutureWarning")


@pytest.fixture(autouse=True)
def _openvino():
    openvino_or_skip()


def _runner(artifact: Any) -> Any:
    from unframe.converters.backends.openvino.runner import OpenVINORunner

    return OpenVINORunner(artifact.path, json.loads(artifact.metadata["unframe.io"])["outputs"])


def _target(precision: str = "fp32") -> Target:
    return Target("openvino", None, {"precision": precision})


def _example(args: tuple[Any, ...], names: list[str], dynamic: dict[str, dict[int, str]]) -> Any:
    """What the torch frontend hands over (its ModelInputs, read by attribute)."""
    return SimpleNamespace(args=args, kwargs={}, names=names, dynamic=dynamic, example=None)


def _cnn() -> Any:
    import torch

    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x: Any) -> Any:
            return self.fc(torch.relu(self.conv(x)).mean((2, 3))) * 3

    return Net().eval()


def _max_err(a: np.ndarray, b: np.ndarray) -> float:
    return float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())


# ------------------------------------------------------------------------------------ torch --
def test_torch_cnn_with_a_dynamic_batch(tmp_path):
    import torch

    from unframe.converters.backends.openvino.direct import convert_from_torch

    model, x = _cnn(), torch.randn(1, 3, 16, 16)  # batch 1: the export must not fix it
    artifact = convert_from_torch(model, _example((x,), ["x"], {"x": {0: "batch"}}), _target(), tmp_path)
    runner = _runner(artifact)
    assert [(s.name, s.shape) for s in runner.input_specs()] == [("x", (None, 3, 16, 16))]
    assert runner.output_names() == ["output_0"]
    for batch in (1, 5):
        xb = torch.randn(batch, 3, 16, 16, generator=torch.Generator().manual_seed(batch))
        ref = model(xb).detach().numpy()
        out = runner.run({"x": xb.numpy()})["output_0"]
        assert out.shape == (batch, 4) and np.abs(ref).max() > 0.3
        assert _max_err(out, ref) < 1e-5 * np.abs(ref).max()


def test_torch_static_input_stays_static(tmp_path):
    import torch

    from unframe.converters.backends.openvino.direct import convert_from_torch

    artifact = convert_from_torch(_cnn(), _example((torch.randn(2, 3, 16, 16),), ["x"], {}), _target(), tmp_path)
    assert [s.shape for s in _runner(artifact).input_specs()] == [(2, 3, 16, 16)]


def test_torch_fp16_weights(tmp_path):
    """The default precision: fp16 weights (really rounded: not the fp32 numbers), outputs within
    1 % of their scale."""
    import torch

    from unframe.converters.backends.openvino.direct import convert_from_torch
    from unframe.converters.backends.openvino.weights import weight_precisions

    model, x = _cnn(), torch.randn(3, 3, 16, 16)
    artifact = convert_from_torch(model, _example((x,), ["x"], {}), Target("openvino", None, {}), tmp_path)
    assert artifact.metadata["unframe.precision"] == "fp16"
    assert "f32" not in weight_precisions(artifact.model) and weight_precisions(artifact.model)["f16"] > 0
    ref = model(x).detach().numpy()
    err = _max_err(_runner(artifact).run({"x": x.numpy()})["output_0"], ref)
    assert 0 < err < 1e-2 * np.abs(ref).max()


def test_hf_bert_from_its_config(tmp_path):
    import torch
    transformers = pytest.importorskip("transformers", reason="needs transformers (the 'dev' extra)")

    from unframe.converters.backends.openvino.direct import convert_from_torch

    torch.manual_seed(0)
    config = transformers.BertConfig(vocab_size=64, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                     intermediate_size=64, max_position_embeddings=32)
    model = transformers.BertModel(config).eval()
    with torch.no_grad():  # HF's 0.02-std init gives flat outputs: spread the weights
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.1)
    ids = torch.randint(0, 64, (2, 8), generator=torch.Generator().manual_seed(1))
    mask = torch.ones(2, 8, dtype=torch.int64)
    mask[1, 6:] = 0
    dims = {0: "batch", 1: "sequence"}
    example = SimpleNamespace(args=(), kwargs={"input_ids": ids, "attention_mask": mask},
                              names=["input_ids", "attention_mask"],
                              dynamic={"input_ids": dims, "attention_mask": dims}, example=None)
    artifact = convert_from_torch(model, example, _target(), tmp_path)
    runner = _runner(artifact)
    assert runner.output_names() == ["last_hidden_state", "pooler_output"]
    assert all(s.shape == (None, None) for s in runner.input_specs())
    ids2 = torch.randint(0, 64, (3, 5), generator=torch.Generator().manual_seed(2))  # other sizes
    mask2 = torch.ones(3, 5, dtype=torch.int64)
    with torch.no_grad():
        ref = model(input_ids=ids2, attention_mask=mask2)
    out = runner.run({"input_ids": ids2.numpy(), "attention_mask": mask2.numpy()})
    hidden = ref.last_hidden_state.numpy()
    assert np.abs(hidden).std() > 0.3
    assert _max_err(out["last_hidden_state"], hidden) < 1e-4 * np.abs(hidden).max()
    assert _max_err(out["pooler_output"], ref.pooler_output.numpy()) < 1e-4


def test_exported_program_is_taken_as_it_is(tmp_path):
    import torch

    from unframe.converters.backends.openvino.direct import convert_from_torch

    model, x = _cnn(), torch.randn(2, 3, 16, 16)
    ep = torch.export.export(model, (x,))
    artifact = convert_from_torch(ep, SimpleNamespace(names=["image"]), _target(), tmp_path)
    out = _runner(artifact).run({"image": x.numpy()})["output_0"]
    assert _max_err(out, model(x).detach().numpy()) < 1e-5


def test_torch_op_without_a_conversion_is_an_exit_4_refusal(tmp_path):
    import torch

    from unframe.converters.backends.openvino.direct import convert_from_torch

    class Bessel(torch.nn.Module):
        def forward(self, x: Any) -> Any:
            return torch.special.bessel_j0(x) + 1

    with pytest.raises(UnsupportedError) as err:
        convert_from_torch(Bessel(), _example((torch.randn(2, 4),), ["x"], {}), _target(), tmp_path)
    assert err.value.exit_code == 4
    assert [b.op for b in err.value.blockers] == ["aten.special_bessel_j0.default"]
    assert not list(tmp_path.glob("*.xml"))


# --------------------------------------------------------------------------------- tf/keras --
def _keras() -> Any:
    keras = pytest.importorskip("keras", reason="needs TensorFlow/Keras (the 'tf' extra)")
    keras.utils.set_random_seed(0)
    image = keras.Input((16, 16, 3), name="image")
    extra = keras.Input((5,), name="extra")
    h = keras.layers.Conv2D(8, 3, activation="relu")(image)
    h = keras.layers.GlobalAveragePooling2D()(h)
    h = keras.layers.Concatenate(name="features")([h, extra])
    logits = keras.layers.Dense(4, name="logits")(h)
    return keras.Model([image, extra], [logits, h])


def test_keras_two_inputs_two_outputs(tmp_path):
    from unframe.converters.backends.openvino.direct import convert_from_tf

    model = _keras()
    specs = [TensorSpec("image", (None, 16, 16, 3), "float32"), TensorSpec("extra", (None, 5), "float32")]
    # as the TF frontend's TfModel hands it over: its runner's output names, in the model's order
    native = SimpleNamespace(kind="keras", obj=model, path=None, outputs=["logits", "features"])
    artifact = convert_from_tf(native, specs, _target(), tmp_path)
    runner = _runner(artifact)
    assert runner.output_names() == ["logits", "features"]
    assert [(s.name, s.shape) for s in runner.input_specs()] == [("image", (None, 16, 16, 3)), ("extra", (None, 5))]
    rng = np.random.default_rng(3)
    image, extra = rng.standard_normal((3, 16, 16, 3), np.float32), rng.standard_normal((3, 5), np.float32)
    ref = [t.numpy() for t in model([image, extra])]
    out = runner.run({"image": image, "extra": extra})
    # OpenVINO lists the outputs in an order of its own: each must land under its own name
    assert out["logits"].shape == (3, 4) and out["features"].shape == (3, 13)
    assert _max_err(out["logits"], ref[0]) < 1e-5 * np.abs(ref[0]).max()
    assert _max_err(out["features"], ref[1]) < 1e-5 * np.abs(ref[1]).max()


def test_bare_keras_model_fp16(tmp_path):
    from unframe.converters.backends.openvino.direct import convert_from_tf

    model = _keras()
    specs = [TensorSpec("image", (2, 16, 16, 3), "float32"), TensorSpec("extra", (2, 5), "float32")]
    artifact = convert_from_tf(model, specs, Target("openvino", None, {}), tmp_path)
    runner = _runner(artifact)
    assert [s.shape for s in runner.input_specs()] == [(2, 16, 16, 3), (2, 5)]
    rng = np.random.default_rng(4)
    image, extra = rng.standard_normal((2, 16, 16, 3), np.float32), rng.standard_normal((2, 5), np.float32)
    ref = model([image, extra])[0].numpy()
    err = _max_err(runner.run({"image": image, "extra": extra})["logits"], ref)
    assert 0 < err < 1e-2 * np.abs(ref).max()
