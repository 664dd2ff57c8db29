"""MatMul, Gemm and Einsum."""

from __future__ import annotations

from typing import Any

import numpy as np

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


@translator("Einsum")
def einsum(ctx: TranslateContext) -> Any:
    """Any einsum: an index repeated within one operand first takes that operand's diagonal
    (:func:`_diagonal`); then each operand is transposed and expanded onto the full index
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
    operands = []
    for i, term in enumerate(terms):
        v = ctx.x(i)
        while len(set(term)) != len(term):
            v, term = _diagonal(ctx, v, term)
        operands.append(v)
        terms[i] = term
    if len(operands) == 2:
        contracted = _as_matmul(operands, terms, rhs)
        if contracted is not None:
            return contracted
    letters = list(dict.fromkeys(rhs + "".join(terms)))
    product = None
    for v, term in zip(operands, terms, strict=True):
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


def _as_matmul(operands: list[Any], terms: list[str], rhs: str) -> Any:
    """A two-operand einsum as one batched MatMul, whose rank stays that of its operands (the
    broadcast product of :func:`einsum` spans every index: rank 6 for MaxViT's attention
    "BGHID,BGHJD->BGHIJ", which Core ML can't hold)::

        A -> transpose [batch.., left.., summed..] -> [batch.., L, K]
        B -> transpose [batch.., summed.., right..] -> [batch.., K, R]
        matmul -> [batch.., L, R] -> [batch.., left.., right..] -> transpose to the output's order

    None where a merged group has a dynamic size (the broadcast product handles those)."""
    m = mb()
    (a, b), (ta, tb) = operands, terms
    a, ta = _sum_alone(a, ta, tb + rhs)
    b, tb = _sum_alone(b, tb, ta + rhs)
    batch = [c for c in rhs if c in ta and c in tb]
    left = [c for c in rhs if c in ta and c not in tb]
    right = [c for c in rhs if c in tb and c not in ta]
    summed = [c for c in ta if c in tb and c not in rhs]
    size = {c: d for t, v in ((ta, a), (tb, b)) for c, d in zip(t, v.shape, strict=True)}
    static = all(isinstance(size[c], (int, np.integer)) for c in left + right + summed)
    if not static:
        return None
    a = _grouped(_ordered(a, ta, batch + left + summed), len(batch), len(left))
    b = _grouped(_ordered(b, tb, batch + summed + right), len(batch), len(summed))
    out = m.matmul(x=a, y=b)
    out = _ungrouped(out, len(batch), [int(size[c]) for c in left], [int(size[c]) for c in right])
    order = batch + left + right
    perm = [order.index(c) for c in rhs]
    return out if perm == list(range(len(perm))) else m.transpose(x=out, perm=perm)


def _sum_alone(v: Any, term: str, elsewhere: str) -> tuple[Any, str]:
    """Indices only this operand has and the output lacks are summed first."""
    alone = [k for k, c in enumerate(term) if c not in elsewhere]
    if not alone:
        return v, term
    return mb().reduce_sum(x=v, axes=alone, keep_dims=False), "".join(c for c in term if c not in elsewhere)


def _ordered(v: Any, term: str, order: list[str]) -> Any:
    perm = [term.index(c) for c in order]
    return v if perm == list(range(len(perm))) else mb().transpose(x=v, perm=perm)


def _grouped(v: Any, lead: int, rows: int) -> Any:
    """[lead.., rows.., cols..] viewed as [lead.., prod(rows), prod(cols)] (its own lead dims:
    a batch dim of 1 broadcasts in the matmul). The row and column dims are static here."""
    m = mb()
    dims = list(v.shape)
    row_dims, col_dims = dims[lead:lead + rows], dims[lead + rows:]
    if len(row_dims) == 1 and len(col_dims) == 1:
        return v
    shape = [int(np.prod(row_dims, dtype=np.int64)), int(np.prod(col_dims, dtype=np.int64))]
    if all(isinstance(d, (int, np.integer)) for d in dims[:lead]):
        return m.reshape(x=v, shape=np.array([*(int(d) for d in dims[:lead]), *shape], np.int32))
    head = m.slice_by_index(x=m.shape(x=v), begin=np.array([0], np.int32), end=np.array([lead], np.int32))
    return m.reshape(x=v, shape=m.concat(values=[head, np.array(shape, np.int32)], axis=0))


def _ungrouped(v: Any, lead: int, rows: list[int], cols: list[int]) -> Any:
    """[lead.., L, R] back to [lead.., rows.., cols..]."""
    m = mb()
    if len(rows) == 1 and len(cols) == 1:
        return v
    if all(isinstance(d, (int, np.integer)) for d in v.shape[:lead]):
        return m.reshape(x=v, shape=np.array([*(int(d) for d in v.shape[:lead]), *rows, *cols], np.int32))
    head = m.slice_by_index(x=m.shape(x=v), begin=np.array([0], np.int32), end=np.array([lead], np.int32))
    return m.reshape(x=v, shape=m.concat(values=[head, np.array([*rows, *cols], np.int32)], axis=0))


def _diagonal(ctx: TranslateContext, v: Any, term: str) -> tuple[Any, str]:
    """The diagonal of the first index ``term`` repeats ("bii" -> "bi"): its two axes moved
    last, viewed as one axis of n * n elements, and gathered at 0, n + 1, 2 (n + 1)... (exact)::

        x[b, i, j] -> reshape [b, n * n] -> gather(indices = arange(n) * (n + 1)) -> [b, n]
    """
    m = mb()
    letter = next(c for c in term if term.count(c) > 1)
    first = term.index(letter)
    second = term.index(letter, first + 1)
    n = v.shape[first]
    if not isinstance(n, (int, np.integer)):
        raise ctx.err(f"Einsum's diagonal on index {letter!r} needs a static size")
    n = int(n)
    rest = [k for k in range(len(term)) if k not in (first, second)]
    if rest + [first, second] != list(range(len(term))):
        v = m.transpose(x=v, perm=rest + [first, second])
    lead = [v.shape[k] for k in range(len(rest))]
    if all(isinstance(d, (int, np.integer)) for d in lead):
        shape: Any = np.array([*(int(d) for d in lead), n * n], np.int32)
    else:
        head = m.slice_by_index(x=m.shape(x=v), begin=np.array([0], np.int32), end=np.array([len(rest)], np.int32))
        shape = m.concat(values=[head, np.array([n * n], np.int32)], axis=0)
    flat = m.reshape(x=v, shape=shape)
    picked = m.gather(x=flat, indices=(np.arange(n) * (n + 1)).astype(np.int32), axis=len(rest))
    return picked, "".join(term[k] for k in rest) + letter


def _expand_ellipsis(term: str, n: int) -> str:
    """Replace '...' by digit placeholders for its ``n`` dims, aligned from the right so that
    broadcast dims of different operands share a placeholder."""
    if "..." not in term:
        return term
    return term.replace("...", _ELL[10 - n:] if n else "")
