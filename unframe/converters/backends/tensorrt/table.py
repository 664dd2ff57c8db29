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

# ONNX TensorProto element types -> the table's type names.
ONNX_TO_TABLE_TYPE: dict[int, str] = {
    1: "FP32", 10: "FP16", 16: "BF16", 6: "INT32", 7: "INT64", 2: "UINT8", 3: "INT8", 9: "BOOL",
    17: "FP8", 18: "FP8", 19: "FP8", 20: "FP8", 22: "INT4", 23: "FP4",
}
# Types TensorRT has no tensor type for at all (the parser rejects them wherever they appear).
NO_TRT_TYPE: dict[int, str] = {
    4: "UINT16", 5: "INT16", 8: "STRING", 11: "DOUBLE", 12: "UINT32", 13: "UINT64",
    14: "COMPLEX64", 15: "COMPLEX128", 21: "UINT4",
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
        table[row["op"]] = OpSupport(
            op=row["op"], status=row["supported"], types=types,
            restrictions=row["restrictions"].strip(), doc_version=row["doc_version"],
            live_supported=None if not live else live == "yes",
        )
    return table


def lookup(op: str) -> OpSupport | None:
    return support_table().get(op)
