"""Registry coverage: every registered translator is exercised by a node case in the test
sample or by a dedicated test in this folder."""

from __future__ import annotations

from node_cases import all_node_cases
from test_coreml_node_cases import SAMPLE

from unframe.converters.backends.coreml.ops import TRANSLATORS, supported_ops

# ops whose dedicated tests live in this folder (test_coreml_ops.py / test_coreml_e2e.py)
DEDICATED = {"Loop", "GlobalLpPool", "Expand", "Gelu", "Scan",  # Scan: test_coreml_ml.py
             "NonMaxSuppression",  # test_coreml_nms.py
             # random draws: shape, dtype and range only (test_coreml_vendor_ops.py)
             "RandomUniformLike", "RandomUniform", "RandomNormalLike", "RandomNormal", "Bernoulli"}


def test_at_least_130_default_domain_ops() -> None:
    assert len(supported_ops()) >= 130


def test_every_translator_has_a_test() -> None:
    cases = all_node_cases()
    covered = set(DEDICATED)
    for name in SAMPLE:
        if name in cases:
            covered |= {n.op_type for n in cases[name].model.graph.node}
    missing = sorted(set(supported_ops()) - covered)
    assert not missing, f"translators without a test: {missing}"


def test_translators_know_their_op() -> None:
    for op, spec in TRANSLATORS.items():
        assert spec.op_type == op and callable(spec.fn)
