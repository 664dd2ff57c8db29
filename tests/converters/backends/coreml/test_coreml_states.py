"""``--stateful``: a ``--kv-cache`` decoder's cache kept in Core ML states (iOS18).

The package is real (coremltools writes it, its spec is read back) and is run by the MIL
evaluator with the states carried from call to call; tokens are compared with onnxruntime
running the stateless graph. The state is shown to be what the program reads: a carried cache
whose states are wiped changes the logits."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

pytest.importorskip("torch", reason="needs torch (the 'torch' extra)")
pytest.importorskip("transformers", reason="needs transformers (the 'dev' extra)")
pytest.importorskip("onnxscript", reason="needs onnxscript (torch.onnx dynamo exporter)")
ct = pytest.importorskip("coremltools", reason="needs coremltools (the 'coreml' extra)")

import llm_models as lm  # noqa: E402
from click.testing import CliRunner  # noqa: E402

import unframe  # noqa: E402
from unframe.cli.main import cli  # noqa: E402
from unframe.converters.backends.coreml.mil_eval import MILRunner  # noqa: E402
from unframe.converters.backends.coreml.runner import CoreMLRunner  # noqa: E402
from unframe.errors import InputError  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402

LAYERS, HEADS, DIM, CONTEXT = 2, 2, 8, 48


def _runner(path: Path) -> CoreMLRunner:
    meta = ct.models.MLModel(str(path), skip_model_load=True).user_defined_metadata
    return CoreMLRunner(MILRunner(path, vouched=True), json.loads(meta["unframe.io"]))


def _feeds(tokens: list[int], seen: int, cache: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    new = len(tokens)
    return {"input_ids": np.array([tokens], np.int64),
            "attention_mask": np.ones((1, seen + new), np.int64),
            "position_ids": np.arange(seen, seen + new, dtype=np.int64)[None], **cache}


def _empty() -> dict[str, np.ndarray]:
    return {f"past_key_values.{i}.{k}": np.zeros((1, HEADS, 0, DIM), np.float32)
            for i in range(LAYERS) for k in ("key", "value")}


def _carried(out: dict[str, Any]) -> dict[str, np.ndarray]:
    return {f"past_key_values.{i}.{k}": out[f"present.{i}.{k}"] for i in range(LAYERS) for k in ("key", "value")}


@pytest.fixture(scope="module")
def llama_stateful(tmp_path_factory: pytest.TempPathFactory) -> tuple[Any, Path]:
    _, _, onnx_path = lm.exported("llama", kv_cache=True)
    out = tmp_path_factory.mktemp("states") / "llama.mlpackage"
    result = unframe.convert(onnx_path, to="coreml", stateful=True, max_context=CONTEXT, output=out)
    return result, out


def test_package_keeps_the_cache_in_ios18_states(llama_stateful: tuple[Any, Path]) -> None:
    result, path = llama_stateful
    spec = ct.models.MLModel(str(path), skip_model_load=True).get_spec()
    assert [i.name for i in spec.description.input] == ["input_ids", "attention_mask", "position_ids"]
    assert [o.name for o in spec.description.output] == ["logits"]
    states = {s.name: s.type.stateType.arrayType for s in spec.description.state}
    assert sorted(states) == sorted(f"past_key_values_{i}_{k}" for i in range(LAYERS) for k in ("key", "value"))
    for array in states.values():
        assert list(array.shape) == [1, HEADS, CONTEXT, DIM]
        assert array.dataType == ct.proto.FeatureTypes_pb2.ArrayFeatureType.FLOAT16
    assert spec.specificationVersion >= 9  # iOS18's Core ML 8, chosen because of --stateful
    ids = spec.description.input[0].type.multiArrayType
    assert ids.shapeRange.sizeRanges[0].upperBound == 1  # batch pinned: states hold one sequence
    assert ids.shapeRange.sizeRanges[1].upperBound == CONTEXT
    stage = next(s for s in result.report.stages if s.candidate.startswith("MIL evaluator"))
    assert stage.status == "passed", str(result.report)
    gen = stage.generation
    assert gen is not None and gen.cached and gen.identical == gen.steps == 5, gen.summary()
    assert gen.min_margin > 0 and 0 < gen.prefill_max_abs <= gen.prefill_tolerance, gen.summary()
    assert any("Core ML state(s) of 48 tokens" in n for n in result.notes), result.notes


def test_states_carry_the_cache_between_calls(llama_stateful: tuple[Any, Path]) -> None:
    _, path = llama_stateful
    _, _, onnx_path = lm.exported("llama", kv_cache=True)
    prompt = [int(t) for t in lm.prompt()["input_ids"][0]]
    ort = OnnxRuntimeRunner(onnx_path)
    runner = _runner(path)
    first = runner.run(_feeds(prompt, 0, _empty()))
    ref_first = ort.run(_feeds(prompt, 0, _empty()))
    # the present tensors read back out of the states are the cache onnxruntime returns
    for name in _carried(first).values():
        assert name.shape[2] == len(prompt)
    err = max(float(np.abs(first[k] - ref_first[k]).max()) for k in ref_first if k.startswith("present."))
    scale = max(float(np.abs(ref_first[k]).max()) for k in ref_first if k.startswith("present."))
    assert 0 < err < 0.02 * scale, (err, scale)
    token = int(np.argmax(first["logits"][0, -1]))
    step = _feeds([token], len(prompt), _carried(first))  # the runner's own arrays: kept in the states
    carried = runner.run(step)["logits"]
    expected = ort.run(_feeds([token], len(prompt), _carried(ref_first)))["logits"]
    assert np.abs(carried - expected).max() < 0.02 * np.abs(expected).max()
    assert {"read_state", "coreml_update_state"} <= runner.inner.ops_evaluated
    # the program reads the states, not the feed: wiped states change the next step's logits
    runner.run(_feeds(prompt, 0, _empty()))
    again = _carried(runner.run(_feeds(prompt, 0, _empty())))
    for name in runner.inner.states:
        runner.inner.states[name][:] = 0
    wiped = runner.run(_feeds([token], len(prompt), again))["logits"]
    assert np.abs(wiped - expected).max() > 0.1 * np.abs(expected).max()
    # a cache that is not the one the states hold is written into them first
    fresh = runner.run(_feeds([token], len(prompt), {k: v.copy() for k, v in again.items()}))["logits"]
    np.testing.assert_array_equal(fresh, carried)


def test_more_tokens_than_the_states_hold_is_refused(llama_stateful: tuple[Any, Path]) -> None:
    _, path = llama_stateful
    runner = _runner(path)
    cache = {k: np.zeros((1, HEADS, CONTEXT - 2, DIM), np.float32) for k in _empty()}
    with pytest.raises(InputError, match="exceed the package's state of 48 tokens"):
        runner.run(_feeds([1, 2, 3], CONTEXT - 2, cache))


@pytest.mark.parametrize("arch,precision", [("qwen2", "fp32"), ("qwen2", "fp16")])
def test_stateful_tokens_match_onnxruntime(arch: str, precision: str, tmp_path: Path) -> None:
    _, _, onnx_path = lm.exported(arch, kv_cache=True)
    result = unframe.convert(onnx_path, to="coreml", stateful=True, max_context=CONTEXT,
                             precision=precision, output=tmp_path / "m.mlpackage")
    stage = next(s for s in result.report.stages if s.candidate.startswith("MIL evaluator"))
    assert stage.status == "passed", str(result.report)
    gen = stage.generation
    assert gen is not None and gen.identical == gen.steps == 5 and gen.min_margin > 0, gen.summary()
    assert len(set(gen.reference_tokens)) > 1, gen.reference_tokens


def test_cli_stateful_and_its_refusals(tmp_path: Path) -> None:
    _, _, kv_path = lm.exported("llama", kv_cache=True)
    _, _, plain_path = lm.exported("llama", kv_cache=False)
    out = tmp_path / "s.mlpackage"
    res = CliRunner().invoke(cli, ["convert", str(kv_path), "--to", "coreml", "--stateful",
                                   "--max-context", "32", "-o", str(out), "--json"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["parity"]["passed"]
    spec = ct.models.MLModel(str(out), skip_model_load=True).get_spec()
    assert {tuple(s.type.stateType.arrayType.shape) for s in spec.description.state} == {(1, HEADS, 32, DIM)}
    # no cache to keep: exit 4 naming why, check says the same, nothing written
    for command in ("convert", "check"):
        args = [command, str(plain_path), "--to", "coreml", "--stateful"]
        if command == "convert":
            args += ["-o", str(tmp_path / "plain.mlpackage")]
        res = CliRunner().invoke(cli, args)
        assert res.exit_code == 4, res.output
        assert "no past_key_values" in res.output and "--kv-cache" in res.output
        assert "Traceback" not in res.output
    assert not (tmp_path / "plain.mlpackage").exists()
    # states need iOS18: an older target given explicitly is a blocker, not silently raised
    res = CliRunner().invoke(cli, ["convert", str(kv_path), "--to", "coreml", "--stateful",
                                   "--target", "iOS17", "-o", str(tmp_path / "old.mlpackage")])
    assert res.exit_code == 4 and "iOS18" in res.output, res.output
    assert not (tmp_path / "old.mlpackage").exists()
