"""--quantize on the CoreML route with coremltools.optimize, on a CNN trained on scikit-learn's
digits: w8 and w4 keep the package's test accuracy (run by unframe's MIL evaluator, through the
backend's runner) within a point of the float model and pass the accuracy guard; the program
holds the dequantizing constexprs; w4 raises a default target to iOS18 and refuses a lower one
the user gave; excluded ONNX nodes keep float weights; int8 holds its activations as MIL
quantize/dequantize pairs (iOS17), calibrated by onnxruntime, and a broken calibration fails it."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import unframe
from unframe.errors import UnsupportedError

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("sklearn", reason="needs scikit-learn (its digits dataset)")
pytest.importorskip("coremltools", reason="needs coremltools")


QUANTIZED = ("constexpr_blockwise_shift_scale", "constexpr_affine_dequantize")


def package_accuracy(path: Path, trained) -> float:
    """Test accuracy of the written package, run by the backend's runner (the MIL evaluator)."""
    from unframe.converters.backends.coreml.runner import open_package

    runner = open_package(path)
    scores = next(iter(runner.run({"input": trained.test}).values()))
    return float((np.asarray(scores).argmax(1) == trained.test_labels).mean())


def weight_sources(path: Path) -> list[tuple[str, str]]:
    """Each conv / linear op of the package's program and the op its weight comes from."""
    from unframe.converters.backends.coreml.mil_eval import MILRunner

    program = MILRunner(path, vouched=True).program
    return [(op.op_type, op.weight.op.op_type) for op in program.functions["main"].operations
            if op.op_type in ("conv", "linear")]


@pytest.mark.parametrize("scheme", ["w8", "w4"])
def test_each_scheme_keeps_accuracy_and_passes_the_guard(tmp_path, trained, calibration, scheme, capfd) -> None:
    out = tmp_path / f"digits_{scheme}.mlpackage"
    result = unframe.convert(trained.model, to="coreml", sample_inputs=torch.tensor(trained.train[:8]),
                             quantize=scheme, calibration=calibration, output=out)
    check = result.report.stages[-1]
    assert check.stage == "accuracy" and check.status == "passed", check.summary()
    assert check.top1 is not None and check.top1 >= 0.98 and check.cases >= 1
    float_bytes, stored = check.size
    assert stored == sum(p.stat().st_size for p in (out / "Data").rglob("*.bin"))
    assert stored <= (0.2 if scheme == "w4" else 0.3) * float_bytes, check.size
    accuracy = package_accuracy(out, trained)
    assert accuracy >= trained.float_accuracy - 0.01, (scheme, accuracy, trained.float_accuracy)
    assert check.rounds == 1 and not check.kept_float
    # the MIL evaluator's time says nothing about Core ML: no latency, and why
    assert check.latency is None and "Apple" in check.latency_note and "not measured" in check.summary()
    sources = [s for _, s in weight_sources(out)]
    # the first conv (144 weights) is under the size worth a scale; w4 can't cut the second
    # conv's 16 input channels into blocks of 32. iOS16's int8 constexpr differs from iOS18's.
    assert sum(s in QUANTIZED for s in sources) == (3 if scheme == "w8" else 2), (sources, result.notes)
    assert sources[0] == "const"
    assert any("coremltools" in n and scheme in n for n in result.notes), result.notes
    if scheme == "w4":
        assert any("iOS18" in n for n in result.notes)
    printed = capfd.readouterr()
    assert "linear_quantize_weights" not in printed.out + printed.err  # its progress bars stay off


def test_w4_refuses_a_target_below_ios18(tmp_path, trained) -> None:
    out = tmp_path / "w4.mlpackage"
    with pytest.raises(UnsupportedError) as err:
        unframe.convert(trained.model, to="coreml", sample_inputs=torch.tensor(trained.train[:8]),
                        quantize="w4", target="iOS17", output=out)
    assert err.value.exit_code == 4 and "--target iOS18" in err.value.hint
    assert not out.exists()


def test_excluded_nodes_keep_float_weights(tmp_path, trained) -> None:
    """The backend given a request keeping the second Conv (an ONNX node name) in float: its
    weight stays a float const; the Linear layers are quantized."""
    import onnx_ir as ir

    from unframe.converters.backends.coreml.backend import CoreMLBackend
    from unframe.converters.base import Target
    from unframe.passes.quantize import SCHEMES, QuantRequest

    src = tmp_path / "digits.onnx"
    unframe.convert(trained.model, to="onnx", sample_inputs=torch.tensor(trained.train[:8]), output=src)
    model = ir.load(str(src))
    second = [n for n in model.graph if n.op_type == "Conv"][1].name
    assert second
    written = {}
    for exclude in ((), (second,)):
        request = QuantRequest(SCHEMES["w8"], exclude=exclude)
        artifact = CoreMLBackend().convert(model, Target("coreml", None, {"quantize": request}),
                                           tmp_path / f"w{len(exclude)}")
        written[exclude] = weight_sources(artifact.path)
    assert written[()][1][1] in QUANTIZED  # quantized without the request
    assert written[(second,)][1] == ("conv", "const"), written  # kept float with it
    assert all(s in QUANTIZED for op, s in written[(second,)] if op == "linear"), written


def program_ops(path: Path) -> dict[str, int]:
    """Op counts of the written package's main function (its protobuf, as Core ML reads it)."""
    import coremltools as ct

    spec = ct.utils.load_spec(str(path))
    main = spec.mlProgram.functions["main"]
    block = main.block_specializations[main.opset]
    counts: dict[str, int] = {}
    for op in block.operations:
        counts[op.type] = counts.get(op.type, 0) + 1
    return counts


def test_int8_quantizes_activations_and_weights(tmp_path, trained, calibration) -> None:
    out = tmp_path / "digits_int8.mlpackage"
    result = unframe.convert(trained.model, to="coreml", sample_inputs=torch.tensor(trained.train[:8]),
                             quantize="int8", calibration=calibration, output=out)
    check = result.report.stages[-1]
    assert check.stage == "accuracy" and check.status == "passed", check.summary()
    assert check.top1 is not None and check.top1 >= 0.98
    ops = program_ops(out)
    # each layer's input activation quantized to int8 and back, as Core ML's int8 compute reads it;
    # the float-math form of QuantizeLinear (floor, mod, select) is not used
    assert ops.get("quantize", 0) >= 4 and ops.get("dequantize", 0) >= 4, ops
    assert "floor" not in ops and ops.get("constexpr_affine_dequantize", 0) == 3, ops
    import coremltools as ct

    assert ct.utils.load_spec(str(out)).specificationVersion >= 8  # iOS17
    assert any("iOS17" in n for n in result.notes), result.notes
    accuracy = package_accuracy(out, trained)
    assert accuracy >= trained.float_accuracy - 0.01, (accuracy, trained.float_accuracy)
    assert check.size[1] <= 0.3 * check.size[0]


def test_int8_refuses_a_target_below_ios17(tmp_path, trained) -> None:
    out = tmp_path / "q.mlpackage"
    with pytest.raises(UnsupportedError) as err:
        unframe.convert(trained.model, to="coreml", sample_inputs=torch.tensor(trained.train[:8]),
                        quantize="int8", target="iOS16", output=out)
    assert err.value.exit_code == 4 and "--target iOS17" in err.value.hint
    assert not out.exists()


def test_int8_broken_calibration_fails_the_guard(tmp_path, trained) -> None:
    """Ranges calibrated on inputs a thousand times too large: the package's int8 activations
    leave the real inputs a handful of levels; the guard (run by the MIL evaluator) fails."""
    from quant_models import broken_calibration_error

    out = tmp_path / "broken.mlpackage"
    broken_calibration_error(trained, "coreml", out)
    assert not out.exists()
