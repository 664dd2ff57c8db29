"""The TensorRT ONNX parser's support table (onnx-tensorrt's operator docs, TRT 10.15), as data.

``support_table.csv`` ships inside the package and is read once, on first use, so that importing
the backend costs nothing. Columns: op, supported (yes/no/not_listed), supported_types
("FP32, FP16, ..."), restrictions (free text, checked by ``preflight``), doc_version,
supported_in_10_1_doc, onnx_default_domain_op, live_supports_operator (what tensorrt_rtx 1.7's
``supports_operator`` answered when the table was made).
"""

from __future__ import annotations

import csv
import functools
from dataclasses import dataclass
from importlib import resources

import onnx_ir as ir

# ONNX TensorProto element types -> the table's type names. TensorRT's FP8 is E4M3FN only.
# DOUBLE counts as FP32: the parser narrows float64 tensors to float32 (measured with
# bench/tensorrt_preflight.py: every float64 node case the table would refuse, the parser takes).
ONNX_TO_TABLE_TYPE: dict[int, str] = {
    1: "FP32", 10: "FP16", 16: "BF16", 6: "INT32", 7: "INT64", 2: "UINT8", 3: "INT8", 9: "BOOL",
    17: "FP8", 22: "INT4", 23: "FP4", 11: "FP32",
}
# Types TensorRT has no tensor type for at all (the parser rejects them wherever they appear):
# every ONNX type not mapped above.
NO_TRT_TYPE: dict[int, str] = {
    4: "UINT16", 5: "INT16", 8: "STRING", 12: "UINT32", 13: "UINT64", 14: "COMPLEX64",
    15: "COMPLEX128", 18: "FLOAT8E4M3FNUZ", 19: "FLOAT8E5M2", 20: "FLOAT8E5M2FNUZ", 21: "UINT4",
    24: "FLOAT8E8M0", 25: "UINT2", 26: "INT2", 27: "FLOAT6E2M3", 28: "FLOAT6E3M2",
}
# Corrections to the table's types, measured against the parser (bench/tensorrt_preflight.py).
TYPE_OVERRIDES: dict[str, frozenset[str]] = {
    "Range": frozenset({"FP32", "INT32", "INT64"}),  # "only supports int32, int64, and float"
}


@dataclass(frozen=True)
class OpSupport:
    op: str
    status: str  # "yes" | "no" | "not_listed"
    types: frozenset[str]
    restrictions: str
    doc_version: str
    live_supported: bool | None

    @property
    def supported(self) -> bool:
        return self.status == "yes"


@functools.cache
def support_table() -> dict[str, OpSupport]:
    """op name -> its row, for ops of the default ONNX domain (and the few TensorRT-only ones)."""
    text = resources.files(__package__).joinpath("support_table.csv").read_text(encoding="utf-8")
    table: dict[str, OpSupport] = {}
    for row in csv.DictReader(text.splitlines()):
        types = frozenset(t.strip() for t in row["supported_types"].split(",")
                          if t.strip().isupper() and " " not in t.strip())
        live = row.get("live_supports_operator", "")
        status = row["supported"]
        if status == "not_listed" and live == "yes":
            status = "yes"  # newer than the docs, but the parser's supports_operator takes it
        table[row["op"]] = OpSupport(
            op=row["op"], status=status, types=TYPE_OVERRIDES.get(row["op"], types),
            restrictions=row["restrictions"].strip(), doc_version=row["doc_version"],
            live_supported=None if not live else live == "yes",
        )
    return table


def lookup(op: str) -> OpSupport | None:
    return support_table().get(op)


TABLE_NAMES = {ir.DataType.FLOAT16: "FP16", ir.DataType.BFLOAT16: "BF16"}


def supports_low(node: ir.Node, low: ir.DataType, opset: int) -> bool:
    """TensorRT's table lists ``node``'s op for the 16-bit type ``low`` (the precision pass's
    ``supports`` for engines; TensorRT takes bf16 Conv and Gemm, which ONNX's schemas don't)."""
    row = lookup(node.op_type)
    return row is not None and row.supported and (not row.types or TABLE_NAMES[low] in row.types)
