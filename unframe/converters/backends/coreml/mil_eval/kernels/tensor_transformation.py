"""Shape and layout ops (iOS15/16/17/18 tensor_transformation.py)."""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import kernel


def _resolve_shape(x_shape: tuple[int, ...], shape: Any) -> list[int]:
    """MIL reshape targets: 0 copies the right-aligned input dim (1 if none), -1 is inferred."""
    target = [int(v) for v in np.atleast_1d(shape)]
    offset = len(x_shape) - len(target)
    for i, v in enumerate(target):
        if v == 0:
            j = i + offset
            target[i] = x_shape[j] if 0 <= j < len(x_shape) else 1
    return target


@kernel("reshape")
def reshape(ctx: Any, x: np.ndarray, shape: Any) -> np.ndarray:
    return np.reshape(x, _resolve_shape(np.shape(x), shape))


@kernel("reshape_like")
def reshape_like(ctx: Any, x: np.ndarray, ref_tensors: list[np.ndarray], begins: list[Any],
                 ends: list[Any], end_masks: list[Any]) -> np.ndarray:
    shape: list[int] = []
    for ref, begin, end, end_mask in zip(ref_tensors, begins, ends, end_masks, strict=False):
        dims = np.shape(ref)
        shape.extend(dims[int(begin):] if bool(end_mask) else dims[int(begin):int(end)])
    return np.reshape(x, shape)


@kernel("transpose")
def transpose(ctx: Any, x: np.ndarray, perm: Any) -> np.ndarray:
    return np.transpose(x, [int(p) for p in np.atleast_1d(perm)])


@kernel("expand_dims")
def expand_dims(ctx: Any, x: np.ndarray, axes: Any) -> np.ndarray:
    x = np.asarray(x)
    axes_ = [int(a) for a in np.atleast_1d(axes)]
    out_rank = x.ndim + len(axes_)
    return np.expand_dims(x, tuple(sorted(a % out_rank for a in axes_)))


@kernel("squeeze")
def squeeze(ctx: Any, x: np.ndarray, axes: Any = None) -> np.ndarray:
    x = np.asarray(x)
    if axes is None:
        return np.squeeze(x)
    return np.squeeze(x, axis=tuple(int(a) % x.ndim for a in np.atleast_1d(axes)))


def _index_slices(shape: tuple[int, ...], begin: Any, end: Any, stride: Any, begin_mask: Any,
                  end_mask: Any, squeeze_mask: Any) -> tuple[tuple[Any, ...], list[int]]:
    rank = len(shape)
    begin_ = [int(v) for v in np.atleast_1d(begin)]
    end_ = [int(v) for v in np.atleast_1d(end)]
    stride_ = [1] * rank if stride is None else [int(v) for v in np.atleast_1d(stride)]
    bmask = [False] * rank if begin_mask is None else [bool(v) for v in np.atleast_1d(begin_mask)]
    emask = [False] * rank if end_mask is None else [bool(v) for v in np.atleast_1d(end_mask)]
    smask = [False] * rank if squeeze_mask is None else [bool(v) for v in np.atleast_1d(squeeze_mask)]
    slices: list[Any] = []
    squeezed: list[int] = []
    for i in range(rank):
        if smask[i]:
            slices.append(slice(begin_[i], None if begin_[i] == -1 else begin_[i] + 1))
            squeezed.append(i)
            continue
        slices.append(slice(None if bmask[i] else begin_[i], None if emask[i] else end_[i], stride_[i]))
    return tuple(slices), squeezed


@kernel("slice_by_index")
def slice_by_index(ctx: Any, x: np.ndarray, begin: Any, end: Any, stride: Any = None,
                   begin_mask: Any = None, end_mask: Any = None, squeeze_mask: Any = None) -> np.ndarray:
    x = np.asarray(x)
    slices, squeezed = _index_slices(x.shape, begin, end, stride, begin_mask, end_mask, squeeze_mask)
    out = x[slices]
    return np.squeeze(out, axis=tuple(squeezed)) if squeezed else out


@kernel("slice_by_size")
def slice_by_size(ctx: Any, x: np.ndarray, begin: Any, size: Any) -> np.ndarray:
    x = np.asarray(x)
    slices = []
    for dim, b, s in zip(x.shape, np.atleast_1d(begin), np.atleast_1d(size), strict=False):
        start = int(b) % dim if dim else 0
        slices.append(slice(start, dim if int(s) == -1 else start + int(s)))
    return x[tuple(slices)]


@kernel("slice_update")
def slice_update(ctx: Any, x: np.ndarray, update: np.ndarray, begin: Any, end: Any, stride: Any = None,
                 begin_mask: Any = None, end_mask: Any = None, squeeze_mask: Any = None) -> np.ndarray:
    out = np.array(x, copy=True)
    slices, _ = _index_slices(out.shape, begin, end, stride, begin_mask, end_mask, squeeze_mask)
    out[slices] = np.reshape(update, out[slices].shape)
    return out


@kernel("reverse")
def reverse(ctx: Any, x: np.ndarray, axes: Any = None) -> np.ndarray:
    x = np.asarray(x)
    axes_ = tuple(range(x.ndim)) if axes is None else tuple(int(a) for a in np.atleast_1d(axes))
    return np.flip(x, axis=axes_)


@kernel("reverse_sequence")
def reverse_sequence(ctx: Any, x: np.ndarray, lengths: np.ndarray, seq_axis: Any = 0,
                     batch_axis: Any = 0) -> np.ndarray:
    out = np.array(x, copy=True)
    seq, batch = int(seq_axis) % out.ndim, int(batch_axis) % out.ndim
    moved = np.moveaxis(out, (batch, seq), (0, 1))
    for b, length in enumerate(np.atleast_1d(lengths)):
        n = int(length)
        moved[b, :n] = moved[b, :n][::-1].copy()
    return out


@kernel("depth_to_space")
def depth_to_space(ctx: Any, x: np.ndarray, block_size: Any) -> np.ndarray:
    """DCR order: channel index = (by * b + bx) * C_out + c."""
    b = int(block_size)
    n, c, h, w = x.shape
    y = x.reshape(n, b, b, c // (b * b), h, w).transpose(0, 3, 4, 1, 5, 2)
    return y.reshape(n, c // (b * b), h * b, w * b)


@kernel("space_to_depth")
def space_to_depth(ctx: Any, x: np.ndarray, block_size: Any) -> np.ndarray:
    b = int(block_size)
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 3, 5, 1, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


@kernel("pixel_shuffle")
def pixel_shuffle(ctx: Any, x: np.ndarray, upscale_factor: Any) -> np.ndarray:
    """CRD order (torch.nn.PixelShuffle): channel index = c * b*b + by * b + bx."""
    b = int(upscale_factor)
    n, c, h, w = x.shape
    y = x.reshape(n, c // (b * b), b, b, h, w).transpose(0, 1, 4, 2, 5, 3)
    return y.reshape(n, c // (b * b), h * b, w * b)


@kernel("pixel_unshuffle")
def pixel_unshuffle(ctx: Any, x: np.ndarray, downscale_factor: Any) -> np.ndarray:
    b = int(downscale_factor)
    n, c, h, w = x.shape
    y = x.reshape(n, c, h // b, b, w // b, b).transpose(0, 1, 3, 5, 2, 4)
    return y.reshape(n, c * b * b, h // b, w // b)


@kernel("space_to_batch")
def space_to_batch(ctx: Any, x: np.ndarray, block_shape: Any, paddings: Any) -> np.ndarray:
    """TF space_to_batch_nd on NCHW: new batch index = (oh * bw + ow) * n + b."""
    bh, bw = (int(v) for v in np.atleast_1d(block_shape))
    pads = np.asarray(paddings, dtype=np.int64).reshape(2, 2)
    xp = np.pad(x, [(0, 0), (0, 0), tuple(pads[0]), tuple(pads[1])])
    n, c, h, w = xp.shape
    y = xp.reshape(n, c, h // bh, bh, w // bw, bw).transpose(3, 5, 0, 1, 2, 4)
    return y.reshape(bh * bw * n, c, h // bh, w // bw)


@kernel("batch_to_space")
def batch_to_space(ctx: Any, x: np.ndarray, block_shape: Any, crops: Any) -> np.ndarray:
    bh, bw = (int(v) for v in np.atleast_1d(block_shape))
    crop = np.asarray(crops, dtype=np.int64).reshape(2, 2)
    nb, c, h, w = x.shape
    n = nb // (bh * bw)
    y = x.reshape(bh, bw, n, c, h, w).transpose(2, 3, 4, 0, 5, 1).reshape(n, c, h * bh, w * bw)
    return y[:, :, crop[0, 0]:h * bh - crop[0, 1], crop[1, 0]:w * bw - crop[1, 1]]


@kernel("sliding_windows")
def sliding_windows(ctx: Any, x: np.ndarray, axis: Any, size: Any, stride: Any = 1) -> np.ndarray:
    x = np.asarray(x)
    ax, size_, step = int(axis) % x.ndim, int(size), int(stride)
    count = (x.shape[ax] - size_) // step + 1
    windows = [np.take(x, np.arange(i * step, i * step + size_), axis=ax) for i in range(count)]
    return np.stack(windows, axis=ax)
