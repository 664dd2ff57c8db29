"""Bad input to the TF frontend: each is refused with its typed error and a one-line message
naming the file, input, signature or op."""

from __future__ import annotations

import zipfile
from pathlib import Path

import numpy as np
import pytest

tf = pytest.importorskip("tensorflow", reason="needs the tf extra (tensorflow)")
pytest.importorskip("tf2onnx", reason="needs the tf extra (tf2onnx)")

import tf_models  # noqa: E402

from unframe.converters.base import ConvertOptions, InputSpec  # noqa: E402
from unframe.converters.registry import FRONTENDS  # noqa: E402
from unframe.errors import InputError, TrustRequiredError, UnsupportedError, UsageError  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402
from unframe.validate.runner import TensorSpec  # noqa: E402


@pytest.fixture(scope="module")
def fe():
    return FRONTENDS.get("tf")


@pytest.fixture(scope="module")
def lambda_files(tmp_path_factory) -> dict[str, Path]:
    folder = tmp_path_factory.mktemp("tf_lambda")
    model = tf_models.with_lambda(0)
    paths = {"keras": folder / "lam.keras", "h5": folder / "lam.h5"}
    for path in paths.values():
        model.save(path)
    return paths


def _one_line(exc: BaseException) -> str:
    text = str(exc)
    assert "\n" not in text
    return text


@pytest.mark.parametrize("kind", ["keras", "h5"])
def test_lambda_needs_trust(fe, lambda_files, kind: str) -> None:
    path = lambda_files[kind]
    with pytest.raises(TrustRequiredError) as err:
        fe.load(path, ConvertOptions())
    msg = _one_line(err.value)
    assert str(path) in msg and "'affine'" in msg and "--trust" in msg


def test_lambda_with_trust_converts(fe, lambda_files) -> None:
    opts = ConvertOptions(trust=True)
    native = fe.load(lambda_files["keras"], opts)
    export = fe.to_onnx(native, InputSpec(), opts)
    feed = export.feeds[0]
    got = OnnxRuntimeRunner(export.model).run(feed)["y"]
    want = native.obj(feed["x"]).numpy()  # the Lambda (x*2+1) then Dense, run by Keras
    np.testing.assert_allclose(got, want, atol=1e-5, rtol=1e-5)


def test_corrupt_keras_file(fe, tmp_path: Path) -> None:
    path = tmp_path / "broken.keras"
    path.write_bytes(b"PK\x03\x04 not really a zip" * 20)
    with pytest.raises(InputError) as err:
        fe.load(path, ConvertOptions())
    assert str(path) in _one_line(err.value)


def test_truncated_keras_file(fe, tmp_path: Path) -> None:
    good = tmp_path / "good.keras"
    tf_models.two_inputs_two_outputs(0).save(good)
    assert zipfile.is_zipfile(good)
    cut = tmp_path / "cut.keras"
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    with pytest.raises(InputError) as err:
        fe.load(cut, ConvertOptions())
    assert str(cut) in _one_line(err.value)


def test_empty_file_and_plain_directory(fe, tmp_path: Path) -> None:
    empty = tmp_path / "empty.h5"
    empty.touch()
    with pytest.raises(InputError, match="empty"):
        fe.load(empty, ConvertOptions())
    with pytest.raises(InputError, match="not a SavedModel"):
        fe.load(tmp_path, ConvertOptions())
    assert not fe.accepts_path(tmp_path)


@pytest.fixture(scope="module")
def scoring_saved_model(tmp_path_factory) -> Path:
    module = tf.Module()
    module.score = tf.function(lambda x: {"y": x * 2.0},
                               input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
    module.shift = tf.function(lambda x: {"y": x + 1.0},
                               input_signature=[tf.TensorSpec([None, 2], tf.float32, name="x")])
    path = tmp_path_factory.mktemp("tf_sm") / "no_default"
    tf.saved_model.save(module, str(path), signatures={"score": module.score,
                                                       "shift": module.shift})
    return path


def test_saved_model_without_default_signature(fe, scoring_saved_model: Path) -> None:
    with pytest.raises(InputError) as err:
        fe.load(scoring_saved_model, ConvertOptions())
    msg = _one_line(err.value)
    assert "'serving_default'" in msg and "score, shift" in msg and "--signature" in msg


def test_saved_model_unknown_signature(fe, scoring_saved_model: Path) -> None:
    with pytest.raises(UsageError) as err:
        fe.load(scoring_saved_model, ConvertOptions(options={"signature": "predict"}))
    msg = _one_line(err.value)
    assert "'predict'" in msg and "score, shift" in msg


def test_tflite_op_without_onnx_mapping_is_named(fe, tmp_path: Path) -> None:
    """TFLite turns exact GELU into its GELU builtin, which tf2onnx 1.17 can't map."""
    path = tmp_path / "gelu.tflite"
    path.write_bytes(tf.lite.TFLiteConverter.from_keras_model(tf_models.gelu_mlp(0)).convert())
    opts = ConvertOptions()
    native = fe.load(path, opts)
    with pytest.raises(UnsupportedError) as err:
        fe.to_onnx(native, InputSpec(), opts)
    assert "TFL_GELU" in _one_line(err.value)
    assert [b.op for b in err.value.blockers] == ["TFL_GELU"]


def test_unsupported_input_dtype(fe) -> None:
    fn = tf.function(lambda z: tf.math.real(z),
                     input_signature=[tf.TensorSpec([None, 4], tf.complex64, name="z")])
    opts = ConvertOptions()
    native = fe.load(fn, opts)
    with pytest.raises(UnsupportedError) as err:
        fe.to_onnx(native, InputSpec(), opts)
    assert "'z' (complex64)" in _one_line(err.value)
    assert err.value.blockers[0].node == "z"


def test_function_without_signature_or_samples(fe) -> None:
    fn = tf.function(lambda x: x + 1.0)
    native = fe.load(fn, ConvertOptions())
    with pytest.raises(UsageError, match="input_signature"):
        fe.to_onnx(native, InputSpec(), ConvertOptions())


def test_bad_inputs_override(fe) -> None:
    model = tf_models.two_inputs_two_outputs(0)
    native = fe.load(model, ConvertOptions())
    with pytest.raises(UsageError, match="'middle'"):
        fe.to_onnx(native, InputSpec(tensors=[TensorSpec("middle", (None, 4), "float32"),
                                              TensorSpec("left", (None, 4), "float32")]),
                   ConvertOptions())
    with pytest.raises(UsageError, match="doesn't fit"):
        fe.to_onnx(native, InputSpec(tensors=[TensorSpec("left", (None, 9), "float32")]),
                   ConvertOptions())


def test_nchw_inputs_needs_an_image_input(fe) -> None:
    native = fe.load(tf_models.two_inputs_two_outputs(0), ConvertOptions())
    with pytest.raises(UsageError, match="nchw_inputs"):
        fe.to_onnx(native, InputSpec(), ConvertOptions(options={"nchw_inputs": True}))


def test_not_a_tf_object(fe) -> None:
    with pytest.raises(UsageError):
        fe.load(object(), ConvertOptions())


# Two legacy .h5 files a fuzz campaign made (tests/fuzz/corpus/keras, the harness's tag byte
# first): one whose every lookup by name loops forever inside HDF5, one whose damaged string
# heap makes a read allocate 4 GB for 11 s before failing. Both used to pass the probe (it
# stopped quietly at the first clean error) and then ran in this process, inside Keras.
DAMAGED_H5 = ["ab158ebe9eeb7c0645e8674cf40c3c092c018a41", "b515d0603f081b6465e8c690daee35b5bfdd0736"]


@pytest.mark.parametrize("finding", DAMAGED_H5)
def test_a_damaged_hdf5_file_is_refused_by_the_probe_in_its_child(finding: str, tmp_path: Path) -> None:
    from unframe.converters.frontends._tf import probes

    corpus = Path(__file__).resolve().parents[2] / "fuzz" / "corpus" / "keras"
    path = tmp_path / "model.h5"
    path.write_bytes((corpus / finding).read_bytes()[1:])
    with pytest.raises(InputError, match="HDF5") as err:
        probes.check_keras_file(path)
    assert path.name in str(err.value)
