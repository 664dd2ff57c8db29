"""Einsum equations in the letters TensorRT's parser reads.

TensorRT's ONNX parser takes Einsum subscripts in lower case only ("Invalid character(s) in
Einsum equation: I,J", measured with tensorrt_rtx 1.7); torch writes the equation as the model's
source spells it, and torchvision's MaxViT spells ``"B G P H I D, B G P H J D -> B G P H I J"``.
Renaming the subscripts changes nothing but their names, so the equation is rewritten with
lower-case letters (and without spaces, which ONNX allows but some runtimes don't) whenever its
distinct letters fit in the 26 lower-case ones.
"""

from __future__ import annotations

import string

import onnx_ir as ir

from unframe.opset import DEFAULT_DOMAINS

ARROW = "->"
ELLIPSIS = "..."


def needs_rename(equation: str) -> bool:
    """True when the parser would refuse the equation's letters (an upper-case subscript)."""
    return any(c in string.ascii_uppercase for c in equation)


def normalize_equation(equation: str) -> str | None:
    """The same contraction with lower-case subscripts and no spaces, or None when it has more
    than 26 distinct letters (or is malformed). Lower-case letters keep their names; upper-case
    ones take the unused lower-case letters in order of appearance.

    An implicit-output equation (no ``->``) gets its output written out first: the letters used
    exactly once, in the order the ONNX reference (numpy) sorts them, after any ellipsis. Renaming
    would otherwise reorder that implicit output."""
    text = equation.replace(" ", "")
    if ARROW not in text:
        text = f"{text}{ARROW}{_implicit_output(text)}"
    letters = [c for c in text if c.isalpha()]
    if any(c not in string.ascii_letters for c in letters):
        return None
    distinct = list(dict.fromkeys(letters))
    if len(distinct) > 26:
        return None
    free = iter(c for c in string.ascii_lowercase if c not in distinct)
    names = {c: c if c.islower() else next(free) for c in distinct}
    return "".join(names.get(c, c) for c in text)


def _implicit_output(lhs: str) -> str:
    letters = [c for c in lhs.replace(ELLIPSIS, "") if c.isalpha()]
    once = sorted(c for c in set(letters) if letters.count(c) == 1)
    return (ELLIPSIS if ELLIPSIS in lhs else "") + "".join(once)


class LowerCaseEinsumPass(ir.passes.InPlacePass):
    """Einsum subscripts renamed to lower case, spaces dropped.

    Before::  y = Einsum(q, k, equation="B H I D, B H J D -> B H I J")
    After::   y = Einsum(q, k, equation="bhid,bhjd->bhij")

    An equation with more than 26 distinct letters stays as it is, for pre-flight to name.
    """

    def call(self, model: ir.Model) -> ir.passes.PassResult:
        count = 0
        for node in ir.traversal.RecursiveGraphIterator(model.graph):
            if node.op_type != "Einsum" or node.domain not in DEFAULT_DOMAINS:
                continue
            attr = node.attributes.get("equation")
            if attr is None:
                continue
            old = str(attr.value)
            if not needs_rename(old) and " " not in old:
                continue
            new = normalize_equation(old)
            if new is None or new == old:
                continue
            node.attributes["equation"] = ir.AttrString("equation", new)
            count += 1
        return ir.passes.PassResult(model, modified=bool(count))
