"""The opset path through the public API and CLI (the converter itself is tested in
tests/version_converter)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper
from spine_utils import mlp_model, one_big_external_tensor, snapshot

import unframe
from unframe.cli.main import cli
from unframe.errors import UnsupportedError


@pytest.mark.parametrize("target", [9, 11, 17, 21])
def test_convert_opset_up_and_down_matches_original(mlp_path: Path, tmp_path: Path, target: int):
    out = tmp_path / f"m{target}.onnx"
    result = unframe.convert_opset(mlp_path, target, output=out)
    assert result.report and [s.stage for s in result.report.stages] == ["opset"]
    loaded = onnx.load(out)
    assert {o.domain: o.version for o in loaded.opset_import}[""] == target
    onnx.checker.check_model(loaded, full_check=True)
    x = np.random.default_rng(7).standard_normal((6, 4)).astype(np.float32)
    want = ort.InferenceSession(str(mlp_path)).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert json.loads({p.key: p.value for p in loaded.metadata_props}["unframe.opset_path"])


def _bf16_model(folder: Path, adds: int = 1) -> Path:
    """A chain of bfloat16 Adds at opset 14 (named bf16_add, then add1, add2...): no opset before
    13 can hold them."""
    names = ["bf16_add"] + [f"add{i}" for i in range(1, adds)]
    nodes = [helper.make_node("Add", ["a" if i == 0 else f"c{i - 1}", "b"], [f"c{i}"], name=name)
             for i, name in enumerate(names)]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("a", TensorProto.BFLOAT16, [2]),
                                       helper.make_tensor_value_info("b", TensorProto.BFLOAT16, [2])],
                          [helper.make_tensor_value_info(f"c{adds - 1}", TensorProto.BFLOAT16, [2])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 14)])
    m.ir_version = 8
    p = folder / f"bf16_{adds}.onnx"
    onnx.save(m, p)
    return p


def test_impossible_downgrade_is_refused_with_blockers_and_writes_nothing(tmp_path: Path):
    src = _bf16_model(tmp_path)
    before = snapshot(tmp_path)
    with pytest.raises(UnsupportedError) as info:
        unframe.convert_opset(src, 9, output=tmp_path / "o.onnx")
    assert any(b.node == "bf16_add" and b.op == "Add" for b in info.value.blockers)
    res = CliRunner().invoke(cli, ["opset", str(src), "--to", "9", "-o", str(tmp_path / "o.onnx")])
    assert res.exit_code == 4
    assert "bf16_add" in res.stderr
    assert snapshot(tmp_path) == before


def test_convert_with_opset_flag(mlp_path: Path, tmp_path: Path):
    res = CliRunner().invoke(cli, ["convert", str(mlp_path), "--opset", "18", "-o", str(tmp_path / "o.onnx"), "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.stdout)
    assert data["route"]["opset_path"] == [13, 18]
    assert data["parity"]["stages"][0]["stage"] == "opset" and data["parity"]["passed"]


def test_check_lists_opset_blockers(tmp_path: Path):
    src = _bf16_model(tmp_path)
    res = CliRunner().invoke(cli, ["check", str(src), "--to", "onnx", "--opset", "9", "--json"])
    assert res.exit_code == 4
    assert json.loads(res.stdout)["blockers"][0]["node"] == "bf16_add"


def test_in_memory_model(tmp_path: Path):
    result = unframe.convert_opset(mlp_model(opset=11), 15)
    assert result.artifact.model.opset_imports[""] == 15


def test_many_blockers_are_summarized_on_the_terminal_and_all_listed_in_json(tmp_path: Path):
    n = 30
    src = _bf16_model(tmp_path, adds=n)
    res = CliRunner().invoke(cli, ["opset", str(src), "--to", "9", "-o", str(tmp_path / "o.onnx")])
    assert res.exit_code == 4
    listed = [line for line in res.stderr.splitlines() if line.startswith("  - ")]
    assert 0 < len(listed) < n
    assert f"and {n - len(listed)} more" in res.stderr
    res = CliRunner().invoke(cli, ["opset", str(src), "--to", "9", "-o", str(tmp_path / "o.onnx"), "--json"])
    assert res.exit_code == 4
    data = json.loads(res.stdout)
    assert sorted(b["node"] for b in data["blockers"]) == sorted(["bf16_add"] + [f"add{i}" for i in range(1, n)])


def _tree_model(folder: Path) -> Path:
    """One ai.onnx.ml TreeEnsembleRegressor (ml opset 1): x[0] <= 0.5 ? 1.0 : 2.0."""
    node = helper.make_node(
        "TreeEnsembleRegressor", ["x"], ["y"], domain="ai.onnx.ml", name="tree", n_targets=1,
        nodes_treeids=[0, 0, 0], nodes_nodeids=[0, 1, 2], nodes_featureids=[0, 0, 0],
        nodes_values=[0.5, 0.0, 0.0], nodes_modes=["BRANCH_LEQ", "LEAF", "LEAF"],
        nodes_truenodeids=[1, 0, 0], nodes_falsenodeids=[2, 0, 0],
        target_treeids=[0, 0], target_nodeids=[1, 2], target_ids=[0, 0], target_weights=[1.0, 2.0])
    g = helper.make_graph([node], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 1])])
    m = helper.make_model(g, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("ai.onnx.ml", 1)])
    m.ir_version = 8
    p = folder / "tree.onnx"
    onnx.save(m, p)
    return p


def test_ml_opset_moves_the_ml_domain(tmp_path: Path):
    src = _tree_model(tmp_path)
    out = tmp_path / "tree3.onnx"
    res = CliRunner().invoke(cli, ["opset", str(src), "--to", "17", "--ml-opset", "3", "-o", str(out)])
    assert res.exit_code == 0, res.output
    imports = {o.domain: o.version for o in onnx.load(out).opset_import}
    assert imports[""] == 17 and imports["ai.onnx.ml"] == 3
    x = np.array([[0.2, 0.0], [0.9, 1.0]], dtype=np.float32)
    got = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    want = ort.InferenceSession(str(src)).run(None, {"x": x})[0]
    np.testing.assert_array_equal(got, want)
    # default: the ml domain stays where it was
    kept = unframe.convert_opset(src, 17, output=tmp_path / "tree_kept.onnx")
    assert kept.path is not None
    assert {o.domain: o.version for o in onnx.load(kept.path).opset_import}["ai.onnx.ml"] == 1
    # ai.onnx.ml 5 removed TreeEnsembleRegressor: the CLI path rewrites it as TreeEnsemble
    out5 = tmp_path / "tree5.onnx"
    res = CliRunner().invoke(cli, ["opset", str(src), "--to", "21", "--ml-opset", "5", "-o", str(out5)])
    assert res.exit_code == 0, res.output
    assert [n.op_type for n in onnx.load(out5).graph.node] == ["TreeEnsemble"]
    np.testing.assert_array_equal(ort.InferenceSession(str(out5)).run(None, {"x": x})[0], want)


def _digest(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_single_external_tensor_of_64_mib_converts(tmp_path: Path):
    src = one_big_external_tensor(tmp_path)
    data = tmp_path / "big.onnx.data"
    before = (data.stat().st_mtime_ns, data.stat().st_size, _digest(data))
    out = tmp_path / "out" / "big17.onnx"
    out.parent.mkdir()
    result = unframe.convert_opset(src, 17, output=out)
    assert result.report and result.report.stages[0].scale > 0.1  # outputs of order 1
    assert (data.stat().st_mtime_ns, data.stat().st_size, _digest(data)) == before  # untouched
    saved = onnx.load(out, load_external_data=False)
    assert saved.opset_import[0].version == 17
    assert saved.graph.initializer[0].data_location == TensorProto.EXTERNAL
    x = np.random.default_rng(1).standard_normal((2, 4096)).astype(np.float32)
    ref = ort.InferenceSession(str(src)).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
    assert unframe.check(src, to="onnx")  # pre-flight agrees
    # written to another folder, the output carries its own copy of the weights
    assert sorted(p.name for p in out.parent.iterdir()) == ["big17.onnx", "big17.onnx.data"]
    assert not any("shared with the source" in n for n in result.notes)


def test_written_beside_its_source_the_output_shares_the_external_data(tmp_path: Path):
    """As onnx's own converter does: the weights are neither read nor copied, the data file is
    left as it was, and the output says it depends on it."""
    src = one_big_external_tensor(tmp_path)
    data = tmp_path / "big.onnx.data"
    before = (data.stat().st_mtime_ns, data.stat().st_size, _digest(data))
    out = tmp_path / "big17.onnx"
    result = unframe.convert_opset(src, 17, output=out)
    assert result.report and result.report.stages[0].scale > 0.1
    assert sorted(p.name for p in tmp_path.iterdir()) == ["big.onnx", "big.onnx.data", "big17.onnx"]
    assert (data.stat().st_mtime_ns, data.stat().st_size, _digest(data)) == before
    assert out.stat().st_size < 1 << 20  # the graph only
    assert any("big.onnx.data, shared with the source" in n for n in result.notes)
    saved = onnx.load(out, load_external_data=False)
    assert saved.opset_import[0].version == 17
    location = {e.key: e.value for e in saved.graph.initializer[0].external_data}["location"]
    assert location == "big.onnx.data"
    x = np.random.default_rng(2).standard_normal((2, 4096)).astype(np.float32)
    ref = ort.InferenceSession(str(src)).run(None, {"x": x})[0]
    got = ort.InferenceSession(str(out)).run(None, {"x": x})[0]
    np.testing.assert_allclose(got, ref, rtol=1e-5, atol=1e-6)
