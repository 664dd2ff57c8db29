"""Every input a fuzz campaign found (tests/fuzz/corpus/<harness>/<sha1>) replayed through the
harness that found it (bench/fuzz/harnesses.py, plain Python: no atheris needed).

Each file once made unframe fail untyped: an exception that was not an UnframeError, an
internal error, a crash or a hang. After its fix it must end in a typed refusal (or load): the
harness raises on anything else, which fails the test.
"""

from __future__ import annotations

import faulthandler
import hashlib
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).resolve().parent / "corpus"
sys.path.insert(0, str(ROOT / "bench" / "fuzz"))

import harnesses  # noqa: E402

CASES = sorted((p.parent.name, p) for p in CORPUS.glob("*/*") if p.is_file())


@pytest.fixture(scope="module", autouse=True)
def _harness_session():
    yield
    harnesses.end()  # the harnesses share one sandbox session and folder: leave neither behind


def test_corpus_names_a_harness_and_is_content_addressed():
    assert CASES, "the corpus is empty"
    for name, path in CASES:
        assert name in harnesses.HARNESSES, f"{path}: no harness {name!r}"
        assert path.name == hashlib.sha1(path.read_bytes()).hexdigest(), f"{path}: not named by its sha1"


@pytest.mark.parametrize(("name", "path"), CASES, ids=[f"{n}/{p.name[:10]}" for n, p in CASES])
def test_replay(name: str, path: Path):
    harness = harnesses.HARNESSES[name]
    missing = harness.available()
    if missing:
        pytest.skip(f"the {name} harness {missing}")
    # a hang in native code (onnx's shape inference looped forever on one input) must fail this
    # test, not stall the suite: the worker is stopped with a traceback after 120 s
    faulthandler.dump_traceback_later(120, exit=True)
    try:
        outcome = harnesses.one_input(harness, path.read_bytes())  # raises on an untyped failure
    finally:
        faulthandler.cancel_dump_traceback_later()
    assert outcome == "ok" or outcome in KINDS, outcome


KINDS = {"usage", "input", "resource-limit", "unsupported", "parity", "trust-required", "output-exists",
         "missing-extra", "conversion", "registry"}
