"""Pre-flight tier: always runs, needs no TensorRT. Models with supported and unsupported ops and
with each statically checkable restriction of the parser's table."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import onnx
import onnx_ir as ir
import pytest
from onnx import TensorProto, helper
from trt_models import F, cnn_model, const, make_model, vi

from unframe.converters.backends.tensorrt import preflight
from unframe.converters.backends.tensorrt.table import support_table

I64 = TensorProto.INT64


def reasons(model) -> list[str]:
    return [f"{b.node}|{b.op}|{b.reason}" for b in preflight.check(model)]


def one_node(node, inputs, outputs, inits=(), opset=21):
    return make_model([node], inputs, outputs, inits, opset)


def test_table_loads_every_row_from_the_packaged_csv():
    table = support_table()
    assert len(table) == 206
    assert table["Conv"].supported and "FP16" in table["Conv"].types
    assert table["Unique"].status == "no"
    assert "layout attribute must be 0" in table["LSTM"].restrictions


def test_supported_cnn_has_no_blockers():
    assert preflight.check(cnn_model()) == []


def test_every_unsupported_op_is_listed_at_once():
    nodes = [
        helper.make_node("Relu", ["x"], ["a"], name="relu"),
        helper.make_node("Unique", ["a"], ["u"], name="unique"),
        helper.make_node("Det", ["x"], ["d"], name="det"),
        helper.make_node("Foo", ["x"], ["z"], name="custom", domain="my.ops"),
    ]
    graph = helper.make_graph(nodes, "g", [vi("x", [3, 3])],
                              [vi("u", None), vi("d", None), vi("z", None)])
    import onnx_ir as ir

    model = ir.from_proto(helper.make_model(graph, opset_imports=[
        helper.make_opsetid("", 21), helper.make_opsetid("my.ops", 1)]))
    got = preflight.check(model)
    assert [(b.node, b.op) for b in got] == [("unique", "Unique"), ("det", "Det"), ("custom", "Foo")]
    assert "plugin" in got[2].reason and got[2].domain == "my.ops"


def test_nodes_inside_subgraphs_are_checked():
    then_branch = helper.make_graph([helper.make_node("Unique", ["x"], ["t"], name="inner_unique")],
                                    "then", [], [vi("t", None)])
    else_branch = helper.make_graph([helper.make_node("Relu", ["x"], ["e"], name="inner_relu")],
                                    "else", [], [vi("e", None)])
    node = helper.make_node("If", ["c"], ["y"], then_branch=then_branch, else_branch=else_branch,
                            name="if")
    model = make_model([node], [vi("c", [], TensorProto.BOOL), vi("x", [4])], [vi("y", None)])
    assert [b.node for b in preflight.check(model)] == ["inner_unique"]


def test_types_tensorrt_has_no_tensors_of():
    node = helper.make_node("Cast", ["x"], ["d"], to=TensorProto.UINT16, name="to_u16")
    model = one_node(node, [vi("x", [2])], [vi("d", [2], TensorProto.UINT16)])
    assert reasons(model) == ["to_u16|Cast|'d' is UINT16, a type TensorRT has no tensors of"]
    fp8 = helper.make_node("Cast", ["x"], ["d"], to=TensorProto.FLOAT8E5M2, name="to_e5m2")
    model = one_node(fp8, [vi("x", [2])], [vi("d", [2], TensorProto.FLOAT8E5M2)])
    assert ["FLOAT8E5M2" in r for r in reasons(model)] == [True]
    # The parser narrows float64 to float32, so DOUBLE is not a blocker.
    to_double = helper.make_node("Cast", ["x"], ["d"], to=TensorProto.DOUBLE, name="to_double")
    assert preflight.check(one_node(to_double, [vi("x", [2])],
                                    [vi("d", [2], TensorProto.DOUBLE)])) == []


def test_measured_parser_restrictions():
    lp = helper.make_node("LpPool", ["x"], ["y"], kernel_shape=[2, 2], p=3, name="lp")
    assert ["p=3" in r for r in reasons(one_node(lp, [vi("x", [1, 1, 4, 4])], [vi("y", None)]))] == [True]
    mod = helper.make_node("Mod", ["a", "b"], ["y"], fmod=0, name="mod")
    model = one_node(mod, [vi("a", [3], TensorProto.INT32), vi("b", [3], TensorProto.INT32)],
                     [vi("y", [3], TensorProto.INT32)])
    assert preflight.check(model) == []
    model = one_node(helper.make_node("Mod", ["a", "b"], ["y"], fmod=1, name="mod"),
                     [vi("a", [3]), vi("b", [3])], [vi("y", [3])])
    assert preflight.check(model) == []
    scatter = helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], reduction="mul", name="s")
    model = one_node(scatter, [vi("x", [4]), vi("i", [1], I64), vi("u", [1])], [vi("y", None)])
    assert ["reduction='mul'" in r for r in reasons(model)] == [True]
    window = helper.make_node("HannWindow", ["n"], ["w"], name="hann")
    model = one_node(window, [vi("n", [], TensorProto.INT32)], [vi("w", None)])
    assert preflight.check(model) == []  # the table's types are the output's
    rng = helper.make_node("Range", ["a", "b", "c"], ["y"], name="range")
    model = one_node(rng, [vi(n, [], TensorProto.FLOAT16) for n in "abc"],
                     [vi("y", None, TensorProto.FLOAT16)])
    assert ["FP16" in r for r in reasons(model)] == [True]


def test_op_main_type_outside_the_table_types():
    node = helper.make_node("MatMul", ["a", "b"], ["y"], name="int_matmul")
    model = one_node(node, [vi("a", [2, 2], TensorProto.INT32), vi("b", [2, 2], TensorProto.INT32)],
                     [vi("y", [2, 2], TensorProto.INT32)])
    assert ["INT32" in r for r in reasons(model)] == [True]
    # Index inputs are not the op's data type: int64 Gather indices of float data are fine.
    gather = helper.make_node("Gather", ["x", "i"], ["y"], name="gather")
    ok = one_node(gather, [vi("x", [4, 2]), vi("i", [3], I64)], [vi("y", [3, 2])])
    assert preflight.check(ok) == []


def test_reduce_axes_must_be_build_time_constants():
    computed = helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="sum")
    model = one_node(computed, [vi("x", [2, 3]), vi("axes", [1], I64)], [vi("y", None)])
    assert reasons(model) == ["sum|ReduceSum|input axes ('axes') must be a build-time constant "
                              "(an initializer)"]
    as_initializer = one_node(computed, [vi("x", [2, 3])], [vi("y", None)],
                              [const("axes", np.array([1], np.int64))])
    assert preflight.check(as_initializer) == []
    # Computed from the static shape of x: the parser folds it, so it is not a blocker.
    nodes = [helper.make_node("Shape", ["x"], ["s"]),
             helper.make_node("Size", ["s"], ["n"]),
             helper.make_node("Sub", ["n", "one"], ["last"]),
             helper.make_node("Unsqueeze", ["last", "zero"], ["axes"]),
             helper.make_node("ReduceSum", ["x", "axes"], ["y"], name="sum")]
    folded = make_model(nodes, [vi("x", [2, 3])], [vi("y", None)],
                        [const("one", np.array(1, np.int64)), const("zero", np.array([0], np.int64))])
    assert preflight.check(folded) == []


def test_topk_sorted_and_k_limit():
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], sorted=0, name="topk")
    model = one_node(node, [vi("x", [5000])], [vi("v", None), vi("i", None, I64)],
                     [const("k", np.array([4000], np.int64))])
    got = reasons(model)
    assert len(got) == 2
    assert "sorted must be 1" in got[0] and "K=4000" in got[1]
    ok = helper.make_node("TopK", ["x", "k"], ["v", "i"], name="topk")
    fine = one_node(ok, [vi("x", [50])], [vi("v", None), vi("i", None, I64)],
                    [const("k", np.array([5], np.int64))])
    assert preflight.check(fine) == []


def test_resize_modes():
    node = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="cubic",
                            coordinate_transformation_mode="tf_crop_and_resize", antialias=1,
                            name="resize")
    model = one_node(node, [vi("x", [1, 1, 4, 4])], [vi("y", None)],
                     [const("s", np.array([1, 1, 2, 2], np.float32))])
    got = reasons(model)
    assert len(got) == 3
    assert "mode='cubic'" in got[0] and "tf_crop_and_resize" in got[1] and "antialias" in got[2]
    fine = helper.make_node("Resize", ["x", "", "s"], ["y"], mode="linear", name="resize")
    assert preflight.check(one_node(fine, [vi("x", [1, 1, 4, 4])], [vi("y", None)],
                                    [const("s", np.array([1, 1, 2, 2], np.float32))])) == []


def lstm(**attrs):
    rng = np.random.default_rng(0)
    node = helper.make_node("LSTM", ["x", "W", "R"], ["Y"], hidden_size=2, name="lstm", **attrs)
    dirs = 2 if attrs.get("direction") == "bidirectional" else 1
    return one_node(node, [vi("x", [3, 1, 4])], [vi("Y", None)],
                    [const("W", rng.standard_normal((dirs, 8, 4)).astype(np.float32)),
                     const("R", rng.standard_normal((dirs, 8, 2)).astype(np.float32))])


def test_lstm_layout_input_forget_and_activations():
    assert preflight.check(lstm()) == []
    assert ["layout=1" in r for r in reasons(lstm(layout=1))] == [True]
    assert ["input_forget" in r for r in reasons(lstm(input_forget=1))] == [True]
    mixed = lstm(direction="bidirectional",
                 activations=["Sigmoid", "Tanh", "Tanh", "Sigmoid", "Relu", "Tanh"])
    assert ["different activations" in r for r in reasons(mixed)] == [True]


def test_pooling_and_conv_dimensionality():
    pool1d = helper.make_node("MaxPool", ["x"], ["y", "idx"], kernel_shape=[2], name="pool")
    got = reasons(one_node(pool1d, [vi("x", [1, 2, 8])], [vi("y", None), vi("idx", None, I64)]))
    assert len(got) == 2 and "1D pooling" in got[0] and "Indices" in got[1]
    dilated = helper.make_node("AveragePool", ["x"], ["y"], kernel_shape=[2, 2], dilations=[2, 2],
                               name="avg")
    assert ["dilation" in r for r in reasons(one_node(dilated, [vi("x", [1, 1, 8, 8])],
                                                      [vi("y", None)], opset=21))] == [True]
    conv4d = helper.make_node("Conv", ["x", "w"], ["y"], name="conv4d")
    model = one_node(conv4d, [vi("x", [1, 1, 3, 3, 3, 3])], [vi("y", None)],
                     [const("w", np.ones((1, 1, 2, 2, 2, 2), np.float32))])
    assert ["4D convolution" in r for r in reasons(model)] == [True]


def test_quantize_zero_points_must_be_constant_zero():
    dq = helper.make_node("DequantizeLinear", ["q", "s", "zp"], ["y"], name="dq")
    nonzero = one_node(dq, [vi("q", [4], TensorProto.INT8)], [vi("y", [4])],
                       [const("s", np.array(0.1, np.float32)), const("zp", np.array(3, np.int8))])
    assert ["non-zero" in r for r in reasons(nonzero)] == [True]
    computed = one_node(dq, [vi("q", [4], TensorProto.INT8), vi("zp", [], TensorProto.INT8)],
                        [vi("y", [4])], [const("s", np.array(0.1, np.float32))])
    assert ["computed" in r for r in reasons(computed)] == [True]
    zero = one_node(dq, [vi("q", [4], TensorProto.INT8)], [vi("y", [4])],
                    [const("s", np.array(0.1, np.float32)), const("zp", np.array(0, np.int8))])
    assert preflight.check(zero) == []


def test_other_static_restrictions():
    dropout = helper.make_node("Dropout", ["x", "r", "t"], ["y"], name="drop")
    model = one_node(dropout, [vi("x", [4])], [vi("y", None)],
                     [const("r", np.array(0.5, np.float32)), const("t", np.array(True))])
    assert ["training_mode is True" in r for r in reasons(model)] == [True]
    layer_norm = helper.make_node("LayerNormalization", ["x", "g"], ["y", "mean"], name="ln")
    model = one_node(layer_norm, [vi("x", [2, 4])], [vi("y", None), vi("mean", None)],
                     [const("g", np.ones(4, np.float32))])
    assert ["only the first output" in r for r in reasons(model)] == [True]
    scatter = helper.make_node("ScatterND", ["x", "i", "u"], ["y"], reduction="add", name="sc")
    model = one_node(scatter, [vi("x", [4]), vi("i", [1, 1], I64), vi("u", [1])], [vi("y", None)])
    assert ["reduction='add'" in r for r in reasons(model)] == [True]


def test_check_runs_without_any_tensorrt_module(tmp_path):
    """In a fresh interpreter where tensorrt and tensorrt_rtx can't be found or imported, check
    still lists the blockers, and convert names the extra."""
    script = textwrap.dedent("""
        import importlib.abc, importlib.util, sys
        BLOCKED = ("tensorrt", "tensorrt_rtx")
        class Block(importlib.abc.MetaPathFinder):
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in BLOCKED:
                    raise ModuleNotFoundError(name)
        sys.meta_path.insert(0, Block())
        _find = importlib.util.find_spec
        importlib.util.find_spec = lambda n, *a: None if n.split(".")[0] in BLOCKED else _find(n, *a)
        import onnx_ir as ir
        from onnx import helper, TensorProto
        from pathlib import Path
        from unframe.converters.base import Target
        from unframe.converters.registry import BACKENDS
        from unframe.errors import MissingExtraError
        g = helper.make_graph([helper.make_node("Unique", ["x"], ["y"], name="u"),
                               helper.make_node("Det", ["x"], ["z"], name="d")], "g",
            [helper.make_tensor_value_info("x", TensorProto.FLOAT, [3, 3])],
            [helper.make_tensor_value_info("y", TensorProto.FLOAT, None),
             helper.make_tensor_value_info("z", TensorProto.FLOAT, None)])
        model = ir.from_proto(helper.make_model(g))
        be = BACKENDS.get("tensorrt")
        print("available", be.available())
        print("blockers", [b.node for b in be.check(model, Target("tensorrt"))])
        try:
            be.convert(model, Target("tensorrt"), Path(sys.argv[1]))
        except MissingExtraError as e:
            print("missing", e.details["extra"], "|", str(e))
        print("imported", sorted(m for m in sys.modules if m.split(".")[0] in BLOCKED))
    """)
    out = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    lines = out.stdout.splitlines()
    assert lines[0] == "available False"
    assert lines[1] == "blockers ['u', 'd']"
    assert lines[2].startswith("missing tensorrt |") and "pip install 'unframe[tensorrt]'" in lines[2]
    assert lines[3] == "imported []"


def test_parser_disagreements_are_reported():
    """With a TensorRT module present, the parser's verdict is compared with the table's."""
    from trt_models import trt_or_skip

    trt_or_skip()
    from unframe.converters.backends.tensorrt.backend import check_report

    # The table forbids sorted=0; whether the parser agrees or not, the report says which.
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], sorted=0, name="topk")
    model = one_node(node, [vi("x", [8])], [vi("v", None), vi("i", None, I64)],
                     [const("k", np.array([2], np.int64))])
    report = check_report(model)
    assert report.parser in ("tensorrt", "tensorrt_rtx")
    verdict = preflight.parser_verdict(model)
    if verdict.supported:
        assert any("topk" in d and "parser accepts" in d for d in report.disagreements)
    else:
        assert report.disagreements == []
    # An op the table lists as unsupported: the parser refuses it too, so no disagreement.
    unique = one_node(helper.make_node("Unique", ["x"], ["y"], name="u"), [vi("x", [4])],
                      [vi("y", None)])
    report = check_report(unique)
    assert [b.node for b in report.blockers] == ["u"] and report.disagreements == []
    # A dtype both refuse, the parser for the whole model: agreement, not a disagreement.
    u32 = one_node(helper.make_node("Add", ["a", "b"], ["c"], name="add"),
                   [vi("a", [2], TensorProto.UINT32), vi("b", [2], TensorProto.UINT32)],
                   [vi("c", [2], TensorProto.UINT32)])
    report = check_report(u32)
    assert report.blockers and report.disagreements == []


def test_check_command_reports_the_parser_comparison(tmp_path):
    """`unframe check --to tensorrt` prints whether the live parser agrees with pre-flight."""
    from click.testing import CliRunner
    from trt_models import trt_or_skip

    from unframe.cli.main import cli

    trt_or_skip()
    node = helper.make_node("TopK", ["x", "k"], ["v", "i"], sorted=0, name="topk")
    model = one_node(node, [vi("x", [8])], [vi("v", None), vi("i", None, I64)],
                     [const("k", np.array([2], np.int64))])
    path = tmp_path / "topk.onnx"
    onnx.save(ir.to_proto(model), path)
    res = CliRunner().invoke(cli, ["check", str(path), "--to", "tensorrt", "--json"])
    data = json.loads(res.stdout)
    assert data["notes"] and "parser" in data["notes"][0]
    agree = preflight.parser_verdict(model).supported is False
    assert ("agree" in data["notes"][0] and "disagree" not in data["notes"][0]) == agree


@pytest.mark.parametrize("dtype", [F])
def test_preflight_does_not_modify_the_model(dtype):
    model = cnn_model()
    before = [(n.op_type, [v.name for v in n.inputs]) for n in model.graph]
    preflight.check(model)
    assert [(n.op_type, [v.name for v in n.inputs]) for n in model.graph] == before


def test_importing_the_backend_imports_no_tensorrt():
    script = ("import sys; from unframe.converters.registry import BACKENDS; "
              "be = BACKENDS.get('tensorrt'); be.available(); be.missing(); "
              "print(sorted(m for m in sys.modules if m.split('.')[0] in ('tensorrt', 'tensorrt_rtx')))")
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip() == "[]"


def test_plugin_ops_block_only_under_tensorrt_rtx():
    node = helper.make_node("RoiAlign", ["x", "rois", "idx"], ["y"], name="roi")
    model = one_node(node, [vi("x", [1, 1, 8, 8]), vi("rois", [2, 4]), vi("idx", [2], I64)],
                     [vi("y", None)])
    assert preflight.check(model, "tensorrt") == []
    assert ["plugin" in b.reason for b in preflight.check(model, "tensorrt_rtx")] == [True]


def test_support_rows_cover_the_table_for_docs():
    from unframe.converters.backends.tensorrt.backend import support_markdown, support_rows

    rows = {r["op"]: r for r in support_rows()}
    assert set(rows) == set(support_table())
    assert rows["Unique"]["status"] == "unsupported" and rows["Unique"]["preflight"] == "blocked"
    assert "restrictions" in rows["LSTM"]["preflight"]
    assert "constant inputs: axes" in rows["ReduceSum"]["preflight"]
    assert rows["Swish"]["status"] == "supported"  # not in the docs, but the parser takes it
    table = support_markdown()
    assert len([line for line in table if line.startswith("| ")]) == len(rows) + 1
