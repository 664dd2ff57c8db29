"""Conv and ConvTranspose, 1-D to 3-D, every auto_pad mode, groups and dilations."""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import broadcast_to_rank, mb

_AUTO_PAD = {"SAME_UPPER": "same", "SAME_LOWER": "same_lower", "VALID": "valid"}


def mil_padding(ctx: TranslateContext, spatial: int) -> dict[str, Any]:
    """ONNX auto_pad/pads -> MIL pad_type/pad ([b0, b1, e0, e1] -> [b0, e0, b1, e1])."""
    auto = ctx.attr("auto_pad", "NOTSET")
    if auto in _AUTO_PAD:
        return {"pad_type": _AUTO_PAD[auto]}
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * spatial))]
    return {"pad_type": "custom",
            "pad": np.array([p for i in range(spatial) for p in (pads[i], pads[i + spatial])], dtype=np.int32)}


@translator("Conv")
def conv(ctx: TranslateContext) -> Any:
    m, x, w = mb(), ctx.x(0), ctx.x(1)
    spatial = ctx.rank(0) - 2
    kwargs = dict(x=x, weight=w, strides=_ints(ctx, "strides", spatial),
                  dilations=_ints(ctx, "dilations", spatial), groups=int(ctx.attr("group", 1)),
                  **mil_padding(ctx, spatial))
    if ctx.has(2) and ctx.const(2) is not None:
        return m.conv(bias=ctx.const(2).astype(np.float32) if w.dtype != x.dtype else ctx.x(2), **kwargs)
    y = m.conv(**kwargs)
    if ctx.has(2):
        y = m.add(x=y, y=broadcast_to_rank(ctx.x(2), ctx.rank(0), 1))
    return y


def _ints(ctx: TranslateContext, name: str, spatial: int) -> list[int]:
    return [int(v) for v in ctx.attr(name, [1] * spatial)]


@translator("ConvTranspose")
def conv_transpose(ctx: TranslateContext) -> Any:
    """A 'valid' transposed convolution (no padding), then ONNX's output_padding and pads
    applied as zero-padding at the end and a crop:

        x -> conv_transpose(valid) [size s*(n-1) + (k-1)*d + 1] -> pad end by output_padding
          -> crop pads -> + bias
    """
    m, x, w = mb(), ctx.x(0), ctx.x(1)
    rank = ctx.rank(0)
    spatial = rank - 2
    strides, dilations = _ints(ctx, "strides", spatial), _ints(ctx, "dilations", spatial)
    kernel = [int(k) for k in (ctx.attr("kernel_shape") or w.shape[2:])]
    out_pad = [int(v) for v in ctx.attr("output_padding", [0] * spatial)]
    begin, end = _transpose_pads(ctx, x, spatial, strides, dilations, kernel, out_pad)
    y = m.conv_transpose(x=x, weight=w, strides=strides, dilations=dilations,
                         groups=int(ctx.attr("group", 1)), pad_type="valid")
    grow = [op - e for op, e in zip(out_pad, end, strict=False)]  # net change at the end of each axis
    y = _pad_or_crop(y, [0, 0] + [-b for b in begin], [0, 0] + grow)
    if ctx.has(2):
        y = m.add(x=y, y=broadcast_to_rank(ctx.x(2), rank, 1))
    return y


def _transpose_pads(ctx: TranslateContext, x: Any, spatial: int, strides: list[int],
                    dilations: list[int], kernel: list[int], out_pad: list[int]
                    ) -> tuple[list[int], list[int]]:
    auto = ctx.attr("auto_pad", "NOTSET")
    out_shape = ctx.attr("output_shape")
    if auto == "VALID" or (auto == "NOTSET" and out_shape is None):
        pads = [int(p) for p in ctx.attr("pads", [0] * (2 * spatial))] if auto == "NOTSET" else [0] * (2 * spatial)
        return pads[:spatial], pads[spatial:]
    sizes = x.shape[2:]
    if not all(isinstance(s, (int, np.integer)) for s in sizes):
        raise ctx.err("ConvTranspose with auto_pad SAME or output_shape needs static spatial sizes")
    if out_shape is None:
        out_shape = [int(s) * st for s, st in zip(sizes, strides, strict=False)]
    out_shape = [int(v) for v in out_shape][-spatial:]
    begin, end = [], []
    for i in range(spatial):
        total = strides[i] * (int(sizes[i]) - 1) + out_pad[i] + (kernel[i] - 1) * dilations[i] + 1 - out_shape[i]
        half = total // 2
        if auto == "SAME_UPPER":
            begin.append(half)
            end.append(total - half)
        else:
            begin.append(total - half)
            end.append(half)
    return begin, end


def _pad_or_crop(y: Any, before: list[int], after: list[int]) -> Any:
    """Positive amounts pad with zeros, negative ones crop."""
    m = mb()
    rank = len(before)
    crop_b, crop_a = [max(-b, 0) for b in before], [max(-a, 0) for a in after]
    if any(crop_b) or any(crop_a):
        y = m.slice_by_index(x=y, begin=np.array(crop_b, dtype=np.int32),
                             end=np.array([-a for a in crop_a], dtype=np.int32),
                             begin_mask=[b == 0 for b in crop_b], end_mask=[a == 0 for a in crop_a])
    pad_b, pad_a = [max(b, 0) for b in before], [max(a, 0) for a in after]
    if any(pad_b) or any(pad_a):
        flat = np.array([p for i in range(rank) for p in (pad_b[i], pad_a[i])], dtype=np.int32)
        y = m.pad(x=y, pad=flat, mode="constant", constant_val=0.0)
    return y


@translator("Col2Im")
def col2im(ctx: TranslateContext) -> Any:
    """Col2Im (torch's ``fold``) is a transposed convolution whose kernel only places: the
    columns [N, C * prod(block), L] viewed as [N, C * prod(block), L_1, .., L_n] (the block
    grid), then a grouped conv_transpose (one group per channel) with one-hot kernels, one per
    block position, so each column element lands at its pixel and overlaps add (exact)::

        W[c * K + j, 0, *block] = 1 at block position j (K = prod(block)), groups = C
        y = crop(conv_transpose(cols, W, strides, dilations), pads)
    """
    m, cols = mb(), ctx.x(0)
    image = [int(v) for v in ctx.need_const(1, "image_shape")]
    block = [int(v) for v in ctx.need_const(2, "block_shape")]
    spatial = len(block)
    strides, dilations = _ints(ctx, "strides", spatial), _ints(ctx, "dilations", spatial)
    pads = [int(p) for p in ctx.attr("pads", [0] * (2 * spatial))]
    per_pixel = int(np.prod(block))
    channels = cols.shape[1]
    if not isinstance(channels, (int, np.integer)) or int(channels) % per_pixel:
        raise ctx.err("Col2Im needs a static channel size, a multiple of prod(block_shape)")
    groups = int(channels) // per_pixel
    grid = [(n + pads[i] + pads[i + spatial] - ((k - 1) * d + 1)) // s + 1
            for i, (n, k, s, d) in enumerate(zip(image, block, strides, dilations, strict=True))]
    batch = cols.shape[0]
    lead = (np.array([int(batch), int(channels)], np.int32) if isinstance(batch, (int, np.integer))
            else m.concat(values=[m.slice_by_index(x=m.shape(x=cols), begin=np.array([0], np.int32),
                                                   end=np.array([1], np.int32)),
                                  np.array([int(channels)], np.int32)], axis=0))
    shape = np.concatenate([lead, np.array(grid, np.int32)]) if isinstance(lead, np.ndarray) else \
        m.concat(values=[lead, np.array(grid, np.int32)], axis=0)
    grid_view = m.reshape(x=cols, shape=shape)
    placing = np.tile(np.eye(per_pixel, dtype=np.float32).reshape(per_pixel, 1, *block), (groups, 1) + (1,) * spatial)
    dt = np.float16 if str(cols.dtype) == "fp16" else np.float32
    y = m.conv_transpose(x=grid_view, weight=placing.astype(dt), strides=strides, dilations=dilations,
                         groups=groups, pad_type="valid")
    # the blocks cover (L - 1) * s + (k - 1) * d + 1 pixels from the begin padding on; what is
    # left of the image past them (a stride that doesn't divide it) gets nothing: zeros
    covered = [(g - 1) * s + (k - 1) * d + 1 for g, s, k, d in zip(grid, strides, block, dilations, strict=True)]
    return _pad_or_crop(y, [0, 0] + [-p for p in pads[:spatial]],
                        [0, 0] + [n + p - c for n, p, c in zip(image, pads[:spatial], covered, strict=True)])
