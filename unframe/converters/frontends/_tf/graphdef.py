"""Frozen TF1 graphs: a ``GraphDef`` protobuf in a ``.pb`` file (the classic TF1 deployment file,
``freeze_graph`` / ``convert_variables_to_constants``).

* A ``.pb`` named ``saved_model.pb`` beside a SavedModel's files is that SavedModel; any other
  ``.pb`` must parse as a ``GraphDef``.
* Inputs: the graph's ``Placeholder`` nodes (``--inputs name:shape:dtype`` sets their shapes, by node
  name, with or without the ``:0`` port), and the ``PlaceholderWithDefault`` nodes the caller feeds
  (samples or ``--inputs`` naming them); one not fed keeps its default. Outputs: option ``outputs`` (tensor names as tf2onnx's
  ``--outputs y:0`` takes them, a list or a comma string), else every tensor no node consumes.
  ONNX names are the node names (``y`` for ``y:0``; ``y_1`` for ``y:1``).
* Running a frozen graph runs its ops: a graph with ops that read or write files or call into
  Python (``ReadFile``, ``WriteFile``, ``PyFunc``, checkpoint ``Save``/``Restore``...) needs
  ``--trust``. Parsing it runs nothing.
* Lookup tables (``HashTableV2``...): a frozen graph holds a table's contents only where it kept
  the table's initializer (frozen with ``init_all_tables`` among its outputs); the initializers
  run once when the graph is loaded, and the contents go to tf2onnx as its ``initialized_tables``.
  A table with no initializer in the file is refused, naming it (convert the SavedModel instead).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from unframe.errors import Blocker, InputError, TrustRequiredError, UnsupportedError, UsageError
from unframe.validate.runner import TensorSpec

# Ops that touch the file system or run Python when the graph runs (parity runs it).
UNSAFE_OPS = frozenset({
    "ReadFile", "WriteFile", "MatchingFiles", "PyFunc", "PyFuncStateless", "EagerPyFunc",
    "Save", "SaveV2", "SaveSlices", "Restore", "RestoreV2", "RestoreSlice", "MergeV2Checkpoints",
    "ImmutableConst", "TFRecordReader", "TFRecordReaderV2", "FixedLengthRecordReader",
    "FixedLengthRecordReaderV2", "TextLineReader", "TextLineReaderV2", "WholeFileReader",
    "WholeFileReaderV2", "LookupTableImport", "InitializeTableFromTextFile",
    "InitializeTableFromTextFileV2", "DebugIdentity", "DebugIdentityV2", "DebugIdentityV3",
    "PrintV2", "Print", "WriteSummary", "WriteScalarSummary", "CreateSummaryFileWriter",
})
TABLE_OPS = frozenset({"HashTable", "HashTableV2", "MutableHashTable", "MutableHashTableV2",
                       "MutableDenseHashTable", "MutableDenseHashTableV2"})
TABLE_INIT_OPS = frozenset({"InitializeTable", "InitializeTableV2", "InitializeTableFromTextFile",
                            "InitializeTableFromTextFileV2", "LookupTableImport",
                            "LookupTableImportV2"})
# Sinks that are no model output.
NOT_OUTPUTS = frozenset({"NoOp", "Assert", "Const", "Placeholder", "PlaceholderWithDefault",
                         *TABLE_INIT_OPS,
                         "VarHandleOp", "VariableV2", "Variable", "AssignVariableOp", "Assign",
                         "SaveV2", "RestoreV2", "MergeV2Checkpoints", "ControlTrigger"})


def is_saved_model_file(path: Path) -> bool:
    return path.name == "saved_model.pb" and path.parent.joinpath("variables").exists()


def parse(path: Path) -> Any:
    """The file's GraphDef (nothing in it runs)."""
    import tensorflow as tf
    from google.protobuf.message import DecodeError

    graph_def = tf.compat.v1.GraphDef()
    try:
        graph_def.ParseFromString(path.read_bytes())
    except (DecodeError, ValueError, RuntimeError) as exc:
        raise InputError(f"{path}: not a frozen TensorFlow GraphDef ({type(exc).__name__}: {exc})",
                         "pass a frozen graph .pb, a SavedModel directory, or a .keras/.h5/.tflite "
                         "file") from None
    if not graph_def.node:
        raise InputError(f"{path}: the GraphDef has no nodes", "re-freeze the graph")
    return graph_def


def check_trust(path: Path, graph_def: Any, trust: bool) -> None:
    ops = sorted({n.op for n in _all_nodes(graph_def)} & UNSAFE_OPS)
    if ops and not trust:
        raise TrustRequiredError(
            f"{path}: the graph has op(s) {', '.join(ops)} that read or write files or call into "
            "Python when it runs (parity runs it)",
            "pass --trust (trust=True) only if you trust where the file came from")


def _all_nodes(graph_def: Any) -> list[Any]:
    nodes = list(graph_def.node)
    for fn in graph_def.library.function:
        nodes.extend(fn.node_def)
    return nodes


def name_tables(graph_def: Any) -> Any:
    """The graph with every lookup table given a ``shared_name`` (its node name where it has
    none): tf2onnx finds a table's contents by that name, and an exported table is looked up by it.
    The same graph is run and exported, so the two agree."""
    unnamed = [n for n in graph_def.node if n.op in TABLE_OPS and not n.attr["shared_name"].s]
    if not unnamed:
        return graph_def
    named = type(graph_def)()
    named.CopyFrom(graph_def)
    for node in named.node:
        if node.op in TABLE_OPS and not node.attr["shared_name"].s:
            node.attr["shared_name"].s = f"unframe_table_{node.name}".encode()
    return named


def pin_defaults(graph_def: Any, fed: set[str]) -> Any:
    """The graph as the caller runs it: a ``PlaceholderWithDefault`` the caller feeds is a plain
    ``Placeholder`` (tf2onnx would fold a constant default into the graph and ignore the feed), one
    it doesn't feed is its default (tf2onnx refuses a computed default without its own
    ``use_default`` flag)::

        fed:       x = PlaceholderWithDefault(d)  ->  x = Placeholder()
        not fed:   x = PlaceholderWithDefault(d)  ->  x = Identity(d)
    """
    if not any(n.op == "PlaceholderWithDefault" for n in graph_def.node):
        return graph_def
    pinned = type(graph_def)()
    pinned.CopyFrom(graph_def)
    for node in pinned.node:
        if node.op != "PlaceholderWithDefault":
            continue
        if node.name in fed:
            del node.input[:]
            node.op = "Placeholder"
            continue
        dtype = node.attr["dtype"].type
        for key in list(node.attr):
            del node.attr[key]
        node.op = "Identity"
        node.attr["T"].type = dtype
    return pinned


def table_inits(graph_def: Any) -> list[str]:
    return [n.name for n in graph_def.node if n.op in TABLE_INIT_OPS]


def check_tables(path: Path, graph_def: Any) -> None:
    """A table whose initializer the freeze dropped can't be converted (nor run)."""
    tables = [n.name for n in graph_def.node if n.op in TABLE_OPS]
    if tables and not table_inits(graph_def):
        raise UnsupportedError(
            f"{path}: the frozen graph's lookup table(s) {', '.join(map(repr, tables))} have no "
            "contents in the file (the freeze dropped their initializer)",
            "convert the SavedModel the graph came from, or freeze it again with "
            "'init_all_tables' among the output nodes",
            blockers=[Blocker("table", "no initializer in the frozen graph", node=t,
                              hint="convert the SavedModel instead") for t in tables])


def placeholders(graph_def: Any, op: str = "Placeholder") -> list[TensorSpec]:
    """The graph's inputs: its ``Placeholder`` nodes (``op="PlaceholderWithDefault"``: the
    inputs that have a default, which become inputs only when the caller feeds them)."""
    import tensorflow as tf

    from unframe.converters.frontends._tf.common import numpy_name

    out = []
    for node in graph_def.node:
        if node.op != op:
            continue
        dtype = tf.dtypes.as_dtype(node.attr["dtype"].type)
        shape_attr = node.attr["shape"].shape if "shape" in node.attr else None
        shape = None
        if shape_attr is not None and not shape_attr.unknown_rank:
            shape = tuple(None if d.size < 0 else int(d.size) for d in shape_attr.dim)
        out.append(TensorSpec(node.name, shape, numpy_name(dtype)))
    return out


def tensor_name(name: str) -> str:
    """``y`` -> ``y:0``; ``y:1`` stays."""
    return name if ":" in name else f"{name}:0"


def onnx_name(tensor: str) -> str:
    """The ONNX name of a TF tensor: the node's name, ``_<port>`` appended past port 0."""
    node, _, port = tensor.partition(":")
    return node if port in ("", "0") else f"{node}_{port}"


def outputs(path: Path, graph_def: Any, given: Any) -> list[str]:
    """Output tensor names (``name:port``): the ``outputs`` option, else every unconsumed tensor."""
    names = {n.name: n for n in graph_def.node}
    if given:
        wanted = [s.strip() for s in given.split(",")] if isinstance(given, str) else list(given)
        missing = [w for w in wanted if w.split(":")[0] not in names]
        if missing:
            raise UsageError(f"{path}: no node named {', '.join(map(repr, missing))} in the graph",
                             "pass --outputs with tensor names of the graph, e.g. y:0")
        return [tensor_name(w) for w in wanted]
    consumed = {i.lstrip("^").split(":")[0] for n in graph_def.node for i in n.input}
    found = [f"{n.name}:0" for n in graph_def.node if n.name not in consumed and n.op not in NOT_OUTPUTS]
    if not found:
        raise UsageError(f"{path}: the graph has no unconsumed tensor to take as its output",
                         "name the outputs with outputs=['y:0']")
    return found


class GraphSession:
    """The frozen graph imported into its own ``tf.Graph``, run by a v1 ``Session``; the lookup
    tables it initializes are initialized once, here."""

    def __init__(self, graph_def: Any, path: Path | None = None) -> None:
        import tensorflow as tf

        self.graph = tf.Graph()
        with self.graph.as_default():
            tf.compat.v1.import_graph_def(graph_def, name="")
        self.session = tf.compat.v1.Session(graph=self.graph)
        inits = table_inits(graph_def)
        if inits:
            try:
                self.session.run([self.graph.get_operation_by_name(n) for n in inits])
            except tf.errors.OpError as exc:
                raise InputError(f"{path}: the graph's table initializer failed "
                                 f"({type(exc).__name__}: {exc.message.splitlines()[0]})",
                                 "check the files it reads (a vocabulary beside the model)") from None

    def tables(self, graph_def: Any) -> dict[bytes, tuple[Any, Any]]:
        """Each named table's (keys, values) as the session holds them, by ``shared_name``."""
        return table_contents(self.session, graph_def)

    def run(self, feeds: dict[str, Any], fetches: list[str]) -> list[Any]:
        """``feeds`` by node name, ``fetches`` as tensor names."""
        return list(self.session.run(fetches, {tensor_name(k): v for k, v in feeds.items()}))


def table_contents(session: Any, graph_def: Any) -> dict[bytes, tuple[Any, Any]]:
    """(keys, values) of each named resource table of ``graph_def`` (nodes of ``session``'s
    graph), by ``shared_name``: tf2onnx's ``initialized_tables``."""
    import tensorflow as tf

    out = {}
    graph = session.graph
    with graph.as_default():
        for node in graph_def.node:
            if node.op not in TABLE_OPS or not node.attr["shared_name"].s:
                continue
            handle = graph.get_tensor_by_name(f"{node.name}:0")
            if handle.dtype != tf.resource:  # a TF1 ref-typed table: tf2onnx maps none
                continue
            keys, values = tf.raw_ops.LookupTableExportV2(
                table_handle=handle, Tkeys=tf.as_dtype(node.attr["key_dtype"].type),
                Tvalues=tf.as_dtype(node.attr["value_dtype"].type))
            out[node.attr["shared_name"].s] = tuple(session.run([keys, values]))
    return out
