"""How the CoreML backend holds weights: a weight MatMuls read transposed is never copied (a
decoder's tied embedding is stored once), and the fp16 overflow check that decides which ops
compute in fp16 answers as coremltools' own does, in slices instead of tensor-sized temporaries."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

ct = pytest.importorskip("coremltools", reason="needs coremltools (the 'coreml' extra)")

import unframe  # noqa: E402
from unframe.converters.backends.coreml import passes  # noqa: E402

VOCAB, HIDDEN = 512, 64


def _tied(tmp_path: Path, extra_use: bool) -> Path:
    """ids -> Gather(E) -> tanh -> MatMul(., Transpose(E)): an embedding and its tied lm_head.
    ``extra_use``: the transposed weight also feeds an Add (then it must be materialized)."""
    rng = np.random.default_rng(0)
    table = rng.standard_normal((VOCAB, HIDDEN)).astype(np.float32)
    nodes = [helper.make_node("Gather", ["E", "ids"], ["h"]),
             helper.make_node("Tanh", ["h"], ["t"]),
             helper.make_node("Transpose", ["E"], ["Et"], perm=[1, 0]),
             helper.make_node("MatMul", ["t", "Et"], ["logits"])]
    outputs = [helper.make_tensor_value_info("logits", TensorProto.FLOAT, [1, "n", VOCAB])]
    if extra_use:
        nodes.append(helper.make_node("ReduceSum", ["Et"], ["total"], keepdims=0))
        outputs.append(helper.make_tensor_value_info("total", TensorProto.FLOAT, []))
    graph = helper.make_graph(nodes, "tied", [helper.make_tensor_value_info("ids", TensorProto.INT64, [1, "n"])],
                              outputs, [numpy_helper.from_array(table, "E")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    model.ir_version = 10
    path = tmp_path / "tied.onnx"
    onnx.save(model, path)
    return path


def _weight_bin(package: Path) -> int:
    return sum(p.stat().st_size for p in package.rglob("weight.bin"))


@pytest.mark.parametrize("precision", ["fp16", "fp32"])
def test_tied_embedding_is_stored_once(tmp_path: Path, precision: str) -> None:
    source = _tied(tmp_path, extra_use=False)
    out = tmp_path / "tied.mlpackage"
    result = unframe.convert(source, to="coreml", precision=precision, output=out)
    stage = next(s for s in result.report.stages if s.candidate.startswith("MIL evaluator"))
    assert stage.status == "passed", str(result.report)
    assert max(o.max_abs for o in stage.outputs) > 0  # the comparison saw real values
    itemsize = 2 if precision == "fp16" else 4
    table = VOCAB * HIDDEN * itemsize
    assert table <= _weight_bin(out) < 1.5 * table  # once, not twice
    ops = _op_types(out)
    assert "transpose" not in ops and ops.count("matmul") == 1


def test_a_transposed_weight_with_other_uses_is_materialized(tmp_path: Path) -> None:
    source = _tied(tmp_path, extra_use=True)
    out = tmp_path / "tied.mlpackage"
    result = unframe.convert(source, to="coreml", precision="fp32", output=out)
    assert all(s.status == "passed" for s in result.report.stages), str(result.report)


def _op_types(package: Path) -> list[str]:
    spec = ct.models.MLModel(str(package), skip_model_load=True).get_spec()
    func = spec.mlProgram.functions["main"]
    block = func.block_specializations[next(iter(func.block_specializations))]
    return [op.type for op in block.operations]


def _coremltools_overflow(value: np.ndarray) -> bool:
    """coremltools' own expression (FP16ComputePrecision.fp16_overflow), on one array."""
    abs_value = np.abs(np.expand_dims(value, 0))
    return bool(np.max(abs_value[np.where(abs_value < 1e38)], initial=0.0) > 65504)


@pytest.mark.parametrize("case", ["small", "big", "inf", "nan", "huge_but_infinite", "edge", "empty"])
def test_fp16_overflow_check_matches_coremltools(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(passes, "CHUNK", 7)  # slices that cut through the array
    rng = np.random.default_rng(3)
    value = rng.standard_normal(50).astype(np.float32) * 100
    if case == "big":
        value[37] = 70000.0
    elif case == "inf":
        value[3] = np.inf
    elif case == "nan":
        value[20] = np.nan
        value[44] = -80000.0
    elif case == "huge_but_infinite":
        value[9] = -3e38  # stands for -inf (an attention mask's fill): ignored by both
    elif case == "edge":
        value[49] = 65504.0
    elif case == "empty":
        value = value[:0]
    assert passes.fits_fp16(value) == (not _coremltools_overflow(value))
    assert passes.fits_fp16(value) == (case not in ("big", "nan"))


def test_the_pipeline_runs_the_lean_pass_in_place_of_coremltools_own() -> None:
    pipeline = passes.pipeline(fp16=True)
    names = list(pipeline.passes)
    assert passes.PASS in names and "common::add_fp16_cast" not in names
    default = list(ct.PassPipeline.DEFAULT.passes)  # in its place, every other pass as it was
    assert names == [passes.PASS if n == "common::add_fp16_cast" else n for n in default]
    # fp32: coremltools' default pipeline, from which ct.convert itself drops its cast pass
    assert "common::add_fp16_cast" in list(passes.pipeline(fp16=False).passes)


def test_check_translates_without_reading_large_weights(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """`check --to coreml` runs the translation with float weights past STAND_IN_BYTES as
    stand-ins of their shape and type (nothing of the 64 MiB weight is read: 4.7 GB at Llama-1B);
    the conversion after it translates with the real weights, and both agree on the blockers."""
    import onnx_ir as ir
    from spine_utils import one_big_external_tensor

    src = one_big_external_tensor(tmp_path)
    reads: list[str] = []
    real_numpy, real_tobytes = ir.ExternalTensor.numpy, ir.ExternalTensor.tobytes
    monkeypatch.setattr(ir.ExternalTensor, "numpy", lambda self: reads.append(self.name) or real_numpy(self))
    monkeypatch.setattr(ir.ExternalTensor, "tobytes", lambda self: reads.append(self.name) or real_tobytes(self))
    checked = unframe.check(src, to="coreml")
    assert checked and reads == []
    assert any("1 float weight(s) past 16 MiB not read" in n for n in checked.notes)
    result = unframe.convert(src, to="coreml", output=tmp_path / "big.mlpackage")
    assert "W" in reads  # the conversion reads it
    stage = result.report.stages[-1]
    assert stage and stage.scale > 0.1  # the package computes the model (tanh of order-1 values)


def test_a_conversion_translates_a_model_with_large_weights_once(tmp_path: Path,
                                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Converting runs the pre-flight with the real weights and reuses its translation: a dry
    one (stand-ins past STAND_IN_BYTES) would be thrown away and the graph translated again
    (SSD300: 1.9 s of a 4.8 s backend stage)."""
    from spine_utils import one_big_external_tensor

    from unframe.converters.backends.coreml import translate

    src = one_big_external_tensor(tmp_path)
    calls: list[bool] = []
    real = translate.translate
    monkeypatch.setattr(translate, "translate",
                        lambda *a, **k: calls.append(bool(k.get("dry"))) or real(*a, **k))
    result = unframe.convert(src, to="coreml", output=tmp_path / "big.mlpackage")
    assert calls == [False], calls  # once, for real
    assert result.report.stages[-1].scale > 0.1
    calls.clear()
    assert unframe.check(src, to="coreml")
    assert calls == [True]  # `check` alone stays dry
