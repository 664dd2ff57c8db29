"""The fast subset of the public-architecture zoo (model_zoo/build/arch_models.py), one or two
models per family: each is built from its public config or factory with seeded, perturbed weights
(its outputs asserted of order 1 by the builder), then converted by one call to ONNX (checked
against the framework), CoreML (checked by the MIL evaluator) and, for torch, TensorRT (a CPU
build with tensorrt-rtx). ``check`` must agree with ``convert`` on each target: a target check
passes is converted, and a target convert refuses was refused by check with the same blockers.
bench/architectures.py runs the whole set (docs/benchmarks/architectures.md)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from typing import Any

import pytest

import unframe
from unframe.api import PartialFailure

BUILD = Path(__file__).resolve().parents[2] / "model_zoo" / "build"

# (architecture, family): the cheapest of each family that still has its family's distinctive ops.
# The HF text encoders and encoder-decoders are covered by test_hf_text_models.py (BERT,
# DistilBERT, Llama, Qwen2, T5); segmentation and detection models take minutes each and are left
# to bench/architectures.py.
FAST = [
    ("hf_gemma", "hf-decoder"),
    ("hf_wav2vec2", "hf-audio"),
    ("hf_vit", "hf-vision"),
    ("tv_squeezenet1_1", "torchvision-classification"),
    ("timm_resnet18", "timm-classification"),
    ("keras_mobilenet", "keras-applications"),
    ("keras_subclassed_encoder", "keras-subclassed"),
    ("kerashub_vit", "keras-hub"),
]
NEEDS = {"torch": ("torch", "transformers", "timm", "torchvision"), "keras": ("tensorflow", "keras", "tf2onnx")}


def _arch_models() -> Any:
    if str(BUILD) not in sys.path:
        sys.path.insert(0, str(BUILD))
    import arch_models

    return arch_models


def _require(name: str) -> Any:
    pytest.importorskip("coremltools", reason="needs coremltools (the 'coreml' extra)")
    archs = _arch_models()
    arch = archs.ARCHS[name]
    for module in NEEDS[arch.framework] + (("keras_hub",) if arch.family == "keras-hub" else ()):
        if importlib.util.find_spec(module) is None:
            pytest.skip(f"needs {module} (pip install --no-deps keras-hub==0.32.0 for keras_hub)")
    return archs


def _has_tensorrt() -> bool:
    from unframe.converters.backends.tensorrt import trtmodule

    return trtmodule.load_or_none() is not None


def _blocker_ops(error: Any) -> set[str]:
    return {b.op for b in getattr(error, "blockers", None) or []}


@pytest.mark.slow
@pytest.mark.parametrize("name, family", FAST, ids=[n for n, _ in FAST])
def test_architecture_converts_and_check_agrees(name: str, family: str, tmp_path: Path) -> None:
    archs = _require(name)
    arch = archs.ARCHS[name]
    assert arch.family == family
    model, samples = archs.build_checked(name)  # raises unless the outputs are of order 1
    backends = ["coreml"] + (["tensorrt"] if arch.framework == "torch" and _has_tensorrt() else [])
    checked = unframe.check(model, to=backends, sample_inputs=samples, **arch.options)
    try:
        converted = unframe.convert(model, to=["onnx", *backends], sample_inputs=samples,
                                    output=tmp_path / "out", **arch.options)
        errors: dict[str, Any] = {}
    except PartialFailure as exc:
        converted, errors = exc.result, exc.result.errors
    onnx_stage = converted.results["onnx"].report.stages[-1]
    assert onnx_stage.status == "passed", str(converted.results["onnx"].report)
    for target in backends:
        verdict = checked.results[target]
        if target in errors:  # refused: an exit-4 refusal check saw coming, naming the same ops
            assert errors[target].exit_code == 4, errors[target]
            assert not verdict and _blocker_ops(errors[target]) <= {b.op for b in verdict.blockers}
            continue
        assert verdict, [str(b) for b in verdict.blockers]
        stage = converted.results[target].report.stages[-1]
        if target == "coreml":
            assert stage.status == "passed" and "MIL evaluator" in stage.candidate, str(converted.results[target].report)
    assert "coreml" not in errors, f"CoreML refused {name}: {errors.get('coreml')}"
