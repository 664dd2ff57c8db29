"""Op-history facts read from onnx.defs."""

from __future__ import annotations

import onnx
import onnx.defs
import onnx_ir as ir
from onnx import TensorProto, helper

from unframe import opset


def test_newest_opset_is_onnx_newest() -> None:
    assert opset.newest_opset() == onnx.defs.onnx_opset_version()


def test_since_versions_match_every_schema() -> None:
    for name in ("Split", "Softmax", "Resize", "Gelu"):
        expected = sorted({s.since_version for s in onnx.defs.get_all_schemas_with_history()
                           if s.name == name and s.domain == ""})
        assert opset.since_versions(name) == expected


def test_schema_at_and_exists_at_follow_history() -> None:
    first = opset.since_versions("Gelu")[0]
    assert not opset.exists_at("Gelu", first - 1)
    assert opset.schema_at("Gelu", first).since_version == first
    split_versions = opset.since_versions("Split")
    for low, high in zip(split_versions, split_versions[1:], strict=False):
        assert opset.schema_at("Split", high - 1).since_version == low


def test_deprecated_ops_do_not_exist() -> None:
    deprecated = [s for s in onnx.defs.get_all_schemas_with_history() if s.deprecated and s.domain == ""]
    assert deprecated
    for s in deprecated:
        assert not opset.exists_at(s.name, s.since_version)


def test_changes_report_attribute_moves() -> None:
    change = next(c for c in opset.changes("Split") if c.to_version == 13)
    assert change.attributes_removed == ("split",) and change.inputs_changed


def test_ops_of_counts_subgraphs_and_model_opset() -> None:
    branch = helper.make_graph([helper.make_node("Relu", ["x"], ["r"])], "b", [],
                               [helper.make_tensor_value_info("r", TensorProto.FLOAT, [1])])
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["h"]),
         helper.make_node("If", ["c"], ["y"], then_branch=branch, else_branch=branch)], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1]),
         helper.make_tensor_value_info("c", TensorProto.BOOL, [])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    model = ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 15)]))
    counts = opset.ops_of(model)
    assert counts[("", "Relu")] == 3 and counts[("", "If")] == 1
    assert opset.model_opset(model) == 15 and opset.model_opset(model, "ai.onnx.ml") == 0


def _model_with_imports(*imports: tuple[str, int]) -> onnx.ModelProto:
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid(d, v) for d, v in imports])


def test_main_opset_of_protos_and_ir_models() -> None:
    for imports, expected in [((("", 17), ("ai.onnx.ml", 3)), 17), ((("ai.onnx", 13),), 13),
                              ((("ai.onnx.ml", 3),), None)]:
        proto = _model_with_imports(*imports)
        assert opset.main_opset(proto) == expected
        assert opset.main_opset(ir.from_proto(proto)) == expected
    no_default = _model_with_imports(("ai.onnx.ml", 3))
    assert opset.main_opset(no_default, default=opset.FALLBACK_OPSET) == opset.FALLBACK_OPSET
    assert opset.model_opset(ir.from_proto(no_default)) == 0


def test_default_domain_spellings() -> None:
    assert all(opset.is_default_domain(d) for d in ("", "ai.onnx", None))
    assert not opset.is_default_domain("ai.onnx.ml")
    assert opset.norm_domain("ai.onnx") == "" and opset.norm_domain("com.microsoft") == "com.microsoft"
    assert opset.imported_opset({"ai.onnx": 12}) == 12 and opset.imported_opset({"": 9}, "ai.onnx") == 9
