"""The evaluator itself: dtype faithfulness, errors, lazy imports, kernel coverage."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import test_control_flow_and_compression
import test_folding
import test_reference
from coremltools.converters.mil.mil import types
from mil_eval_helpers import build, mb, run

from unframe.converters.backends.coreml.mil_eval import MILRunner, coverage, evaluate
from unframe.errors import InputError, UnsupportedError

# ops exercised by the end-to-end torch programs only (each is also asserted there or below)
END_TO_END_ONLY: set[str] = {
    "classify",  # tests/converters/backends/coreml/test_coreml_classifier.py (ct.convert appends it)
    "non_maximum_suppression",  # tests/converters/backends/coreml/test_coreml_nms.py
}


def _fp16_program() -> object:
    def body(v: object) -> object:
        h = mb.cast(x=v, dtype="fp16")
        h = mb.mul(x=mb.exp(x=h), y=np.float16(1.1))
        return mb.cast(x=mb.reduce_sum(x=h, axes=[-1]), dtype="fp32")

    return build(body, [((4, 64), types.fp32)])


def test_fp16_programs_compute_in_fp16() -> None:
    x = np.random.default_rng(0).uniform(-1, 1, (4, 64)).astype(np.float32)
    (got,), seen = run(_fp16_program(), {"x0": x})
    assert {"cast", "exp", "mul", "reduce_sum"} <= seen
    assert got.dtype == np.float32
    want16 = np.sum(np.exp(x.astype(np.float16)) * np.float16(1.1), axis=-1).astype(np.float32)
    want32 = np.sum(np.exp(x) * np.float32(1.1), axis=-1)
    np.testing.assert_allclose(got, want16, rtol=2e-3)  # numpy's own fp16 arithmetic
    assert np.max(np.abs(got - want32)) > 1e-3  # the fp16 drift is visible, not computed away


def test_an_op_without_kernel_is_named_not_skipped() -> None:
    prog = build(lambda v: mb.add(x=v, y=mb.random_bernoulli(shape=np.array([2, 3], np.int32))), [((2, 3), types.fp32)])
    with pytest.raises(UnsupportedError) as info:
        evaluate(prog, {"x0": np.zeros((2, 3), np.float32)})
    err = info.value
    assert "random_bernoulli" in str(err) and "\n" not in str(err)
    assert [b.op for b in err.blockers] == ["random_bernoulli"]
    assert err.blockers[0].node  # the op's name in the program


def test_missing_inputs_and_functions_are_input_errors(tmp_path: Path) -> None:
    prog = _fp16_program()
    with pytest.raises(InputError, match="x0"):
        evaluate(prog, {})
    with pytest.raises(InputError, match="no function"):
        evaluate(prog, {"x0": np.zeros((4, 64), np.float32)}, function="other")
    with pytest.raises(InputError, match="does not exist"):
        MILRunner(tmp_path / "absent.mlpackage")


def test_importing_the_evaluator_does_not_import_coremltools() -> None:
    code = ("import sys\n"
            "import unframe.converters.backends.coreml.mil_eval as m\n"
            "assert len(m.KERNELS) > 100\n"
            "assert 'coremltools' not in sys.modules, 'coremltools imported'\n")
    subprocess.run([sys.executable, "-c", code], check=True, timeout=120)


def test_every_kernel_has_a_test_and_coverage_meets_target() -> None:
    covered, known = coverage()
    assert len(known) >= 160  # coremltools' core MIL ops for iOS15..iOS18
    assert len(covered) >= 120
    tested = (test_folding.OPS_TESTED | test_reference.OPS_TESTED | test_control_flow_and_compression.OPS_TESTED
              | END_TO_END_ONLY | {"const"})
    untested = sorted(set(covered) - tested)
    assert not untested, f"kernels without a test: {untested}"
