"""Facts about ONNX operators over time, read from the installed ``onnx.defs``.

Everything here is derived from the op schemas (``since_version`` of each schema, attributes, inputs,
type constraints) and cached, so callers can ask cheap questions such as "which schema does op X use
at opset N" or "does X exist at opset N" without touching a model's weights.
"""

from __future__ import annotations

import functools
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import onnx
    import onnx_ir as ir
    from onnx.defs import OpSchema

# The default ONNX domain has two spellings; this is the one place that lists them.
DEFAULT_DOMAINS = ("", "ai.onnx")
ML_DOMAIN = "ai.onnx.ml"
MIN_OPSET = 7
# The default-domain opset a pass assumes of a model that imports no default domain (every exporter
# writes one; a hand-built graph may not).
FALLBACK_OPSET = 18


def is_default_domain(domain: str | None) -> bool:
    """True for the default ONNX domain, however it is spelled ("", "ai.onnx")."""
    return (domain or "") in DEFAULT_DOMAINS


def attribute_value(node: ir.Node, name: str, default: Any = None) -> Any:
    """A node attribute as plain Python: strings decoded, tensors as numpy arrays, lists of ints
    or floats as lists; ``default`` when the node doesn't set it."""
    import onnx_ir as ir

    a = node.attributes.get(name)
    if a is None:
        return default
    value = a.value
    if a.type == ir.AttributeType.STRING:
        return value.decode() if isinstance(value, bytes) else value
    if a.type == ir.AttributeType.STRINGS:
        return [v.decode() if isinstance(v, bytes) else v for v in value]
    if a.type == ir.AttributeType.TENSOR:
        return value.numpy()
    if a.type in (ir.AttributeType.INTS, ir.AttributeType.FLOATS):
        return list(value)
    return value


def norm_domain(domain: str) -> str:
    """``domain`` with the default domain spelled ""."""
    return "" if domain in DEFAULT_DOMAINS else domain


@functools.cache
def newest_opset(domain: str = "") -> int:
    """The newest opset of ``domain`` the installed onnx knows (28 for onnx 1.23)."""
    import onnx.defs

    domain = norm_domain(domain)
    if domain == "":
        return int(onnx.defs.onnx_opset_version())
    return max(s.since_version for s in _all_schemas() if s.domain == domain)


@functools.cache
def _all_schemas() -> tuple[OpSchema, ...]:
    import onnx.defs

    return tuple(onnx.defs.get_all_schemas_with_history())


@functools.cache
def _history() -> dict[tuple[str, str], tuple[OpSchema, ...]]:
    out: dict[tuple[str, str], list[OpSchema]] = {}
    for s in _all_schemas():
        out.setdefault((norm_domain(s.domain), s.name), []).append(s)
    return {k: tuple(sorted(v, key=lambda s: s.since_version)) for k, v in out.items()}


def since_versions(op: str, domain: str = "") -> list[int]:
    """Every opset at which ``op``'s schema changed (the since_version of each schema), ascending."""
    return [s.since_version for s in _history().get((norm_domain(domain), op), ())]


def schema_at(op: str, opset: int, domain: str = "") -> OpSchema | None:
    """The schema of ``op`` in effect at ``opset``, or None if the op does not exist there.

    A schema marked deprecated (e.g. Upsample from 10, Scatter from 11) counts as absent.
    """
    best = None
    for s in _history().get((norm_domain(domain), op), ()):
        if s.since_version <= opset:
            best = s
    if best is None or best.deprecated:
        return None
    return best


def since_version_at(op: str, opset: int, domain: str = "") -> int | None:
    """since_version of the schema in effect at ``opset`` (None before the op was introduced)."""
    best = None
    for v in since_versions(op, domain):
        if v <= opset:
            best = v
    return best


def exists_at(op: str, opset: int, domain: str = "") -> bool:
    """True when ``op`` has a non-deprecated schema at ``opset``."""
    return schema_at(op, opset, domain) is not None


def introduced_at(op: str, domain: str = "") -> int | None:
    vs = since_versions(op, domain)
    return vs[0] if vs else None


def ops_at(opset: int, domain: str = "") -> set[str]:
    """Names of all ops available at ``opset``."""
    d = norm_domain(domain)
    return {name for (dom, name) in _history() if dom == d and exists_at(name, opset, d)}


def imported_opset(imports: Mapping[str, int], domain: str = "") -> int:
    """The opset an ``opset_imports`` mapping gives ``domain`` (0 when not imported)."""
    if norm_domain(domain) == "":
        for spelling in DEFAULT_DOMAINS:
            if spelling in imports:
                return int(imports[spelling])
        return 0
    return int(imports.get(domain, 0))


def model_opset(model: ir.Model, domain: str = "") -> int:
    """The opset the model imports for ``domain`` (0 when not imported)."""
    return imported_opset(model.opset_imports, domain)


def main_opset(model: ir.Model | onnx.ModelProto, default: int | None = None) -> int | None:
    """The default-domain (ai.onnx) opset of an ``onnx_ir`` model or function, or of an onnx
    ``ModelProto``/``FunctionProto``; ``default`` (None) when it imports no default domain.
    The one place that answers "which opset is this model at"."""
    imports = getattr(model, "opset_imports", None)
    if imports is None:  # a protobuf
        imports = {o.domain: o.version for o in model.opset_import}
    for spelling in DEFAULT_DOMAINS:
        if spelling in imports:
            return int(imports[spelling])
    return default


def ops_of(model: ir.Model) -> Counter[tuple[str, str]]:
    """Count of (domain, op_type) over the main graph, every subgraph and every local function."""
    from onnx_ir.traversal import RecursiveGraphIterator

    counts: Counter[tuple[str, str]] = Counter()
    graphs: list[Any] = [model.graph, *model.functions.values()]
    for g in graphs:
        for node in RecursiveGraphIterator(g):
            counts[(norm_domain(node.domain), node.op_type)] += 1
    return counts


@dataclass(frozen=True)
class SchemaChange:
    """What differs between two consecutive schemas of one op."""

    op: str
    domain: str
    from_version: int
    to_version: int
    attributes_added: tuple[str, ...]
    attributes_removed: tuple[str, ...]
    inputs_changed: bool
    outputs_changed: bool
    types_changed: bool

    @property
    def only_types(self) -> bool:
        return not (self.attributes_added or self.attributes_removed or self.inputs_changed
                    or self.outputs_changed) and self.types_changed


def _io_sig(params: Any) -> tuple[tuple[str, str, int], ...]:
    return tuple((p.name, p.type_str, int(p.option.value)) for p in params)


def _types_sig(schema: OpSchema) -> dict[str, frozenset[str]]:
    return {tc.type_param_str: frozenset(tc.allowed_type_strs) for tc in schema.type_constraints}


def changes(op: str, domain: str = "") -> list[SchemaChange]:
    """The schema changes of ``op``, one per consecutive pair of schemas."""
    hist = _history().get((norm_domain(domain), op), ())
    out = []
    for old, new in zip(hist, hist[1:], strict=False):
        a_old, a_new = set(old.attributes), set(new.attributes)
        out.append(SchemaChange(
            op, norm_domain(domain), old.since_version, new.since_version,
            tuple(sorted(a_new - a_old)), tuple(sorted(a_old - a_new)),
            _io_sig(old.inputs) != _io_sig(new.inputs) or old.min_input != new.min_input
            or old.max_input != new.max_input,
            _io_sig(old.outputs) != _io_sig(new.outputs) or old.min_output != new.min_output
            or old.max_output != new.max_output,
            _types_sig(old) != _types_sig(new)))
    return out


__all__ = [
    "newest_opset", "since_versions", "schema_at", "since_version_at", "exists_at", "introduced_at",
    "ops_at", "model_opset", "main_opset", "imported_opset", "ops_of", "changes", "SchemaChange",
    "MIN_OPSET", "ML_DOMAIN", "DEFAULT_DOMAINS", "FALLBACK_OPSET", "is_default_domain", "norm_domain",
]
