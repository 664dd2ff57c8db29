"""String outputs with any UTF-8 are compared exactly, whichever side gives bytes (TensorFlow's
tf.string) and which gives str (onnxruntime). Decoding them as ASCII failed every route with a
non-ASCII string output (exit 9)."""

from __future__ import annotations

import numpy as np
import pytest

from unframe.validate.compare import as_text, compare_arrays

WORDS = ["héllo", "日本", "wörld", "語 ✓", "plain"]


def test_bytes_and_str_with_any_utf8_compare_exactly() -> None:
    text = np.array(WORDS, dtype=object)
    utf8 = np.array([w.encode() for w in WORDS], dtype=object)  # what TensorFlow returns
    assert compare_arrays("s", utf8, text, 0, 0).passed
    assert compare_arrays("s", np.array([w.encode() for w in WORDS]), np.array(WORDS), 0, 0).passed  # S vs U
    wrong = text.copy()
    wrong[1] = "日木"  # one character off
    res = compare_arrays("s", utf8, wrong, 0, 0)
    assert not res.passed and res.mismatched == 1


def test_bytes_that_are_not_utf8_compare_byte_for_byte() -> None:
    raw = np.array([b"\xff\xfe", b"ok"], dtype=object)
    assert compare_arrays("s", raw, raw.copy(), 0, 0).passed
    assert not compare_arrays("s", raw, np.array([b"\xff\xfd", b"ok"], dtype=object), 0, 0).passed
    assert as_text(raw)[1] == "ok"


def test_tensorflow_string_concat_with_non_ascii_strings_converts() -> None:
    """tf.concat of two string tensors, exported by tf2onnx: TensorFlow answers bytes, onnxruntime
    str; both hold non-ASCII UTF-8."""
    tf = pytest.importorskip("tensorflow")
    import unframe

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string), tf.TensorSpec([None], tf.string)])
    def join(a, b):
        return tf.concat([a, b], axis=0)

    a = np.array([w.encode() for w in WORDS[:2]])
    b = np.array([w.encode() for w in WORDS[2:4]])
    result = unframe.convert(join, to="onnx", sample_inputs=(a, b))
    stage = result.report.stages[0]
    assert stage and stage.stage == "export" and stage.outputs[0].total >= 4
    assert stage.outputs[0].mismatched == 0 and not stage.weak
