"""MatMul, Gemm and Einsum."""

from __future__ import annotations

from typing import Any

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import mb, scalar


class TransposedWeight:
    """A constant whose last two axes a Transpose swaps, used by MatMuls only: each reads it with
    ``transpose_y`` instead of a transposed copy being folded (a decoder's tied embedding is the
    lm_head's weight transposed: 1 GB at Llama-3.2-1B, then stored twice in weight.bin)."""

    op = None  # not a MIL var: nothing names it

    def __init__(self, source: Any) -> None:
        self.source = source


def transposed_for_matmuls(ctx: TranslateContext, perm: list[int]) -> TransposedWeight | None:
    """(For a Transpose node.) The deferred transpose when its input is a constant, ``perm`` swaps
    the last two axes only, and every use of its output is a MatMul's second input in this graph."""
    rank = len(perm)
    if rank < 2 or perm != [*range(rank - 2), rank - 1, rank - 2] or ctx.const(0) is None:
        return None
    out = ctx.node.outputs[0]
    graph = ctx.node.graph
    if graph is None or out in graph.outputs:
        return None
    uses = list(out.uses())
    if not uses or any(u.node.op_type != "MatMul" or u.idx != 1 or u.node.graph is not graph for u in uses):
        return None
    return TransposedWeight(ctx.x(0))


@translator("MatMul")
def matmul(ctx: TranslateContext) -> Any:
    """1-D operands are promoted to matrices and the added axis removed afterwards (numpy rules)."""
    m, a = mb(), ctx.x(0)
    weight = ctx.inputs[1] if len(ctx.inputs) > 1 else None
    if isinstance(weight, TransposedWeight):
        if ctx.rank(0) == 1:
            return m.squeeze(x=m.matmul(x=m.expand_dims(x=a, axes=[0]), y=weight.source, transpose_y=True),
                             axes=[-2])
        return m.matmul(x=a, y=weight.source, transpose_y=True)
    b = ctx.x(1)
    squeeze = []
    if ctx.rank(0) == 1:
        a = m.expand_dims(x=a, axes=[0])
        squeeze.append(-2)
    if ctx.rank(1) == 1:
        b = m.expand_dims(x=b, axes=[-1])
        squeeze.append(-1)
    y = m.matmul(x=a, y=b)
    return m.squeeze(x=y, axes=squeeze) if squeeze else y


@translator("Gemm")
def gemm(ctx: TranslateContext) -> Any:
    """alpha * A' @ B' + beta * C."""
    m = mb()
    a, b = ctx.x(0), ctx.x(1)
    y = m.matmul(x=a, y=b, transpose_x=bool(ctx.attr("transA", 0)),
                 transpose_y=bool(ctx.attr("transB", 0)))
    alpha, beta = float(ctx.attr("alpha", 1.0)), float(ctx.attr("beta", 1.0))
    if alpha != 1.0:
        y = m.mul(x=y, y=scalar(alpha, y))
    if ctx.has(2):
        c = ctx.x(2)
        if beta != 1.0:
            c = m.mul(x=c, y=scalar(beta, c))
        y = m.add(x=y, y=c)
    return y


def _einsum_check(node: Any) -> list[str]:
    eq = node.attributes.get("equation")
    text = eq.value if eq is not None else ""
    text = text.decode() if isinstance(text, bytes) else text
    lhs = text.replace(" ", "").split("->")[0]
    if any(len(set(term.replace("...", ""))) != len(term.replace("...", "")) for term in lhs.split(",")):
        return [f"Einsum equation {text!r} repeats an index within one operand (a diagonal)"]
    return []


@translator("Einsum", check=_einsum_check)
def einsum(ctx: TranslateContext) -> Any:
    """Any einsum without diagonals: each operand is transposed and expanded onto the full index
    space, the operands are multiplied (broadcasting), and the summed indices are reduced.

        "bij,bjk->bik":  A[b,i,j,1] * B[b,1,j,k] -> reduce_sum(j) -> [b,i,k]
    """
    m = mb()
    eq = ctx.attr("equation").replace(" ", "")
    lhs, arrow, rhs = eq.partition("->")
    raw_terms = lhs.split(",")
    ell_dims = [ctx.rank(i) - len(t.replace("...", "")) for i, t in enumerate(raw_terms)]
    terms = [_expand_ellipsis(t, n) for t, n in zip(raw_terms, ell_dims, strict=False)]
    n_ell = max([n for t, n in zip(raw_terms, ell_dims, strict=False) if "..." in t], default=0)
    if arrow:
        rhs = _expand_ellipsis(rhs, n_ell)
    else:
        counts: dict[str, int] = {}
        for t in terms:
            for c in t:
                counts[c] = counts.get(c, 0) + 1
        rhs = _ELL[10 - n_ell:] if n_ell else ""
        rhs += "".join(sorted(c for c, n in counts.items() if n == 1 and c.isalpha()))
    letters = list(dict.fromkeys(rhs + "".join(terms)))
    product = None
    for i, term in enumerate(terms):
        v = ctx.x(i)
        order = [term.index(c) for c in letters if c in term]
        if order != list(range(len(term))):
            v = m.transpose(x=v, perm=order)
        missing = [k for k, c in enumerate(letters) if c not in term]
        if missing:
            v = m.expand_dims(x=v, axes=missing)
        product = v if product is None else m.mul(x=product, y=v)
    summed = [k for k, c in enumerate(letters) if c not in rhs]
    if summed:
        product = m.reduce_sum(x=product, axes=summed, keep_dims=False)
    kept = [c for c in letters if c in rhs]
    perm = [kept.index(c) for c in rhs]
    if perm != list(range(len(perm))):
        product = m.transpose(x=product, perm=perm)
    return product


_ELL = "0123456789"


def _expand_ellipsis(term: str, n: int) -> str:
    """Replace '...' by digit placeholders for its ``n`` dims, aligned from the right so that
    broadcast dims of different operands share a placeholder."""
    if "..." not in term:
        return term
    return term.replace("...", _ELL[10 - n:] if n else "")
