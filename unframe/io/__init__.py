"""ONNX in and out, safely.

* ``load_model`` parses without reading external data (tensors stay lazy), refuses external-data
  locations that escape the model's folder (absolute, ``..``, or through a link), and checks the
  graph (cycles, inputs nothing produces, unknown domains, opsets newer than onnx knows).
* ``save_model`` writes to a temporary folder beside the destination and renames into place;
  an existing output is replaced only with ``force``; tensors over 2 GB go to external data.
* ``stamp_onnx`` / ``read_provenance``: the provenance recorded in every ONNX artifact.

The package's files follow those concerns, and every public name is re-exported here
(``from unframe import io; io.load_model(...)``):

- ``load.py``: loading, and ``check_model``, which runs the checks below;
- ``checks_data.py``: text fields, external-data references and tensor sizes;
- ``checks_graph.py`` and ``checks_nodes.py``: the graph, and each node against its schema;
- ``external.py``: weights in flight (their size, external data, files for other programs,
  weight-less protos);
- ``save.py``: atomic writes (staging folder, rename into place);
- ``provenance.py``: ``unframe.*`` metadata and the source's sha256.
"""

from __future__ import annotations

from typing import Any

from unframe.io import external
from unframe.io.checks_data import (
    check_external_data,
    check_tensors,
    check_text,
    external_files,
    iter_sparse,
    iter_tensors,
)
from unframe.io.checks_graph import KNOWN_DOMAINS, TYPE_ATTRIBUTES, check_graph
from unframe.io.external import (
    Detached,
    adopt_external_weights,
    all_initializers,
    borrowed,
    detached_proto,
    has_external_tensors,
    in_user_folder,
    is_small_initializer,
    light_proto,
    needs_external_data,
    private_dir,
    snapshot_weights,
    stands_in,
    tensor_bytes,
    tool_file,
)
from unframe.io.load import (
    check_external_files_unchanged,
    check_model,
    check_readable_file,
    deserialize,
    external_files_state,
    first_line,
    load_model,
    load_proto,
)
from unframe.io.provenance import PROVENANCE_PREFIX, read_provenance, sha256_of, stamp_onnx
from unframe.io.save import (
    check_output_path,
    place,
    save_model,
    shared_external_files,
    staging_dir,
    write_onnx,
)

# Sizes the functions of ``external.py`` read when they run: read here from there, so that what a
# test sets on ``unframe.io.external`` is what every reader sees.
_TUNABLE = frozenset({"EXTERNAL_DATA_THRESHOLD", "TOOL_INLINE_BYTES", "EXTERNAL_TENSOR_MIN_BYTES",
                      "STAND_IN_BYTES", "SMALL_INITIALIZER_BYTES"})


def __getattr__(name: str) -> Any:
    if name in _TUNABLE:
        return getattr(external, name)
    raise AttributeError(f"module 'unframe.io' has no attribute {name!r}")


__all__ = [
    "EXTERNAL_DATA_THRESHOLD", "EXTERNAL_TENSOR_MIN_BYTES", "KNOWN_DOMAINS", "PROVENANCE_PREFIX",
    "SMALL_INITIALIZER_BYTES", "STAND_IN_BYTES", "TOOL_INLINE_BYTES", "TYPE_ATTRIBUTES", "Detached",
    "adopt_external_weights", "all_initializers", "borrowed", "check_external_data",
    "check_external_files_unchanged", "check_graph", "check_model", "check_output_path",
    "check_readable_file", "check_tensors", "check_text", "deserialize", "detached_proto", "external",
    "external_files", "external_files_state", "first_line", "has_external_tensors", "in_user_folder", "is_small_initializer",
    "iter_sparse", "iter_tensors", "light_proto", "load_model", "load_proto", "needs_external_data",
    "place", "private_dir", "read_provenance", "save_model", "sha256_of", "shared_external_files",
    "snapshot_weights", "staging_dir", "stamp_onnx", "stands_in", "tensor_bytes", "tool_file", "write_onnx",
]
