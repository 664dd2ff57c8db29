"""KerasTap against onnxruntime with every intermediate as an output, on a real Keras functional
model exported by the TF frontend (tf2onnx): layers map to ONNX values (channels-first ones
included), their values agree, and a perturbed Dense bias is traced to its layer."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("tensorflow", reason="needs the tf extra (tensorflow)")
pytest.importorskip("tf2onnx", reason="needs the tf extra (tf2onnx)")

import onnx  # noqa: E402
import onnx_ir as ir  # noqa: E402
import onnxruntime as ort  # noqa: E402

from unframe.converters.base import ConvertOptions, InputSpec  # noqa: E402
from unframe.converters.registry import FRONTENDS  # noqa: E402
from unframe.locate.keras_tap import CHANNELS_FIRST, KerasTap  # noqa: E402

REL_TOL = 1e-4


def _perturb(model, seed: int) -> None:
    """Seeded kernels scaled up and non-zero biases, so activations are of order 1 and every bias
    is really in the graph (tf2onnx drops an Add of zeros)."""
    rng = np.random.default_rng(seed)
    for weight in model.weights:
        value = np.asarray(weight.numpy())
        if weight.path.endswith("bias"):
            value = rng.normal(0.0, 0.5, value.shape)
        else:
            value = value * 1.5 + rng.normal(0.0, 0.05, value.shape)
        weight.assign(value.astype("float32"))


def functional_model():
    import keras
    from keras import layers

    keras.utils.set_random_seed(0)
    image = keras.Input((12, 12, 3), name="image")
    x = layers.Conv2D(6, 3, padding="same", activation="relu", name="conv_a")(image)
    x = layers.MaxPooling2D(name="pool")(x)  # (6, 6, 6): its layout can only be read from the path
    x = layers.Conv2D(5, 3, padding="same", name="conv_b")(x)
    x = layers.ReLU(name="act")(x)
    x = layers.Flatten(name="flat")(x)
    x = layers.Dense(16, activation="tanh", name="dense_1")(x)
    logits = layers.Dense(4, name="logits")(x)
    model = keras.Model(image, logits, name="net")
    _perturb(model, 1)
    return model


def subclassed_model():
    import keras

    class TwoDense(keras.Model):
        def __init__(self) -> None:
            super().__init__(name="two_dense")
            self.hidden = keras.layers.Dense(8, activation="tanh")
            self.head = keras.layers.Dense(3)

        def call(self, x):
            return self.head(self.hidden(x))

    keras.utils.set_random_seed(2)
    model = TwoDense()
    model(np.zeros((1, 5), "float32"))
    _perturb(model, 3)
    return model


def _export(model, samples=None):
    fe = FRONTENDS.get("tf")
    native = fe.load(model, ConvertOptions())
    return fe.to_onnx(native, InputSpec(samples=samples), ConvertOptions())


@pytest.fixture(scope="module")
def exported():
    model = functional_model()
    return model, _export(model)


def ort_intermediates(model: ir.Model, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """onnxruntime on a copy of ``model`` with every node output added as a graph output."""
    proto = ir.serde.serialize_model(model)
    have = {o.name for o in proto.graph.output}
    for node in proto.graph.node:
        proto.graph.output.extend(onnx.ValueInfoProto(name=n) for n in node.output
                                  if n and n not in have)
        have.update(node.output)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [o.name for o in session.get_outputs()]
    return dict(zip(names, session.run(names, feeds), strict=True))


def _rel_err(got: np.ndarray, want: np.ndarray) -> float:
    scale = max(float(np.abs(want).max()), 1e-6)
    return float(np.abs(got.astype(np.float64) - want).max()) / scale


# ------------------------------------------------------------------------------------ tests --
def test_layers_map_to_onnx_values_that_agree(exported) -> None:
    model, export = exported
    tap = KerasTap(model, export)
    assert tap.limitations == []
    labels = set(tap.mapping.values())
    assert len(labels) >= 3
    assert {"layer 'conv_a' (Conv2D)", "layer 'pool' (MaxPooling2D)", "layer 'dense_1' (Dense)",
            "layer 'logits' (Dense)"} <= labels
    assert tap.mapping["logits"] == "layer 'logits' (Dense)"  # a model output keeps its name
    assert any(m.layout == CHANNELS_FIRST for m in tap.matches)  # tf2onnx's NCHW region

    for feeds in export.feeds:  # two batch sizes
        ours = tap.values(feeds)
        theirs = ort_intermediates(export.model, feeds)
        assert set(ours) == set(tap.mapping) and set(ours) <= set(theirs)
        assert 0.2 < float(np.abs(ours["logits"]).max()) < 50  # outputs of order 1
        assert float(ours["logits"].std()) > 0.05
        for name, value in ours.items():
            assert value.shape == theirs[name].shape, name
            assert float(np.abs(value).max()) > 1e-3, name  # no dead layer proves nothing
            assert _rel_err(value, theirs[name]) < REL_TOL, name


def test_perturbed_dense_bias_is_traced_to_its_layer(exported) -> None:
    model, export = exported
    tap = KerasTap(model, export)
    feeds = export.feeds[0]
    ours = tap.values(feeds)

    bias = model.get_layer("dense_1").bias.numpy()
    broken = ir.serde.deserialize_model(ir.serde.serialize_model(export.model))
    found = [v for v in broken.graph.initializers.values()
             if v.const_value is not None and v.const_value.shape == bias.shape
             and np.allclose(v.const_value.numpy(), bias)]
    assert len(found) == 1
    init = found[0]
    init.const_value = ir.tensor(bias + np.float32(0.5), name=init.name)
    theirs = ort_intermediates(broken, feeds)

    order = [v.name for node in broken.graph for v in node.outputs if v.name in ours]
    verdicts = [(n, _rel_err(ours[n], theirs[n]) < REL_TOL) for n in order]
    first_bad = next(n for n, ok in verdicts if not ok)
    assert all(ok for _, ok in verdicts[:order.index(first_bad)])
    assert order.index(first_bad) >= 3, verdicts  # conv, pool, conv_b... agreed before it
    assert tap.layer_of(first_bad) == "layer 'dense_1' (Dense)"

    # The node that reads the bias (inside the layer, not its mapped output) names it too.
    readers = [n for n in broken.graph if any(i is init for i in n.inputs)]
    assert readers and all(tap.layer_of(v.name) == "layer 'dense_1' (Dense)"
                           for n in readers for v in n.outputs)
    assert tap.layer_of("no/such/value:0") == ""


def test_names_restricts_what_is_returned(exported) -> None:
    model, export = exported
    tap = KerasTap(model, export)
    some = sorted(tap.mapping)[:2]
    got = tap.values(export.feeds[0], names=[*some, "missing:0"])
    assert sorted(got) == some


def test_subclassed_model_taps_outputs_only() -> None:
    model = subclassed_model()
    sample = np.random.default_rng(4).normal(size=(3, 5)).astype("float32")
    export = _export(model, {"x": sample})
    tap = KerasTap(model, export)
    assert tap.limitations and "subclassed" in tap.limitations[0]
    feeds = export.feeds[0]
    ours = tap.values(feeds)
    outputs = [v.name for v in export.model.graph.outputs]
    assert sorted(ours) == sorted(outputs)
    theirs = ort_intermediates(export.model, feeds)
    for name in outputs:
        assert float(np.abs(theirs[name]).max()) > 0.2
        assert _rel_err(ours[name], theirs[name]) < REL_TOL
