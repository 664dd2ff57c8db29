"""conv and conv_transpose, 1-D to 3-D, with groups, dilations and every pad_type (iOS15/iOS17 conv.py).

conv: x [n, C_in, *D], weight [C_out, C_in/groups, *K] -> [n, C_out, *D_out]
conv_transpose: x [n, C_in, *D], weight [C_in, C_out/groups, *K] -> [n, C_out, *D_out]
"""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from unframe.converters.backends.coreml.mil_eval.kernels._util import LETTERS, acc_dtype, ints, spatial_pads
from unframe.converters.backends.coreml.mil_eval.registry import kernel


def conv_nd(x: np.ndarray, weight: np.ndarray, strides: list[int], dilations: list[int],
            pads: list[tuple[int, int]], groups: int) -> np.ndarray:
    """Grouped N-d cross-correlation through strided windows and one einsum."""
    nd = weight.ndim - 2
    n, c_in = x.shape[:2]
    c_out, kernel_shape = weight.shape[0], weight.shape[2:]
    xp = np.pad(x, [(0, 0), (0, 0)] + list(pads))
    spans = [(k - 1) * d + 1 for k, d in zip(kernel_shape, dilations, strict=False)]
    win = sliding_window_view(xp, spans, axis=tuple(range(2, 2 + nd)))
    win = win[(slice(None), slice(None)) + tuple(slice(None, None, s) for s in strides)
              + tuple(slice(None, None, d) for d in dilations)]
    out_sizes = win.shape[2:2 + nd]
    win = win.reshape((n, groups, c_in // groups) + out_sizes + tuple(kernel_shape))
    w = weight.reshape((groups, c_out // groups, c_in // groups) + tuple(kernel_shape))
    sp, kk = LETTERS[:nd], LETTERS[nd:2 * nd]
    out = np.einsum(f"NGC{sp}{kk},GOC{kk}->NGO{sp}", win, w, optimize=True)
    return out.reshape((n, c_out) + out_sizes)


@kernel("conv")
def conv(ctx: Any, x: np.ndarray, weight: np.ndarray, bias: Any = None, strides: Any = None,
         pad_type: str = "valid", pad: Any = None, dilations: Any = None, groups: Any = 1) -> np.ndarray:
    acc = acc_dtype(x, weight)
    x, weight = np.asarray(x, acc), np.asarray(weight, acc)
    nd = weight.ndim - 2
    strides_, dilations_ = ints(strides, nd, 1), ints(dilations, nd, 1)
    pads = spatial_pads(str(pad_type), x.shape[2:], weight.shape[2:], strides_, dilations_, pad)
    out = conv_nd(x, weight, strides_, dilations_, pads, int(groups))
    if bias is not None:
        out = out + np.asarray(bias, acc).reshape((1, -1) + (1,) * nd)
    return out


@kernel("conv_transpose")
def conv_transpose(ctx: Any, x: np.ndarray, weight: np.ndarray, bias: Any = None, pad: Any = None,
                   output_shape: Any = None, pad_type: str = "valid", strides: Any = None,
                   dilations: Any = None, groups: Any = 1) -> np.ndarray:
    acc = acc_dtype(x, weight)
    x, weight = np.asarray(x, acc), np.asarray(weight, acc)
    nd = weight.ndim - 2
    strides_, dilations_ = ints(strides, nd, 1), ints(dilations, nd, 1)
    full = _scatter_transpose(x, weight, strides_, dilations_, int(groups))
    out = _crop_transpose(full, x.shape[2:], str(pad_type), pad, output_shape, strides_)
    if bias is not None:
        out = out + np.asarray(bias, acc).reshape((1, -1) + (1,) * nd)
    return out


def _scatter_transpose(x: np.ndarray, weight: np.ndarray, strides: list[int],
                       dilations: list[int], groups: int) -> np.ndarray:
    """The un-padded transposed conv: every input pixel scatters weight * value into the output."""
    nd = weight.ndim - 2
    n, c_in = x.shape[:2]
    kernel_shape = weight.shape[2:]
    c_out_g = weight.shape[1]
    sp = LETTERS[:nd]
    xg = x.reshape((n, groups, c_in // groups) + x.shape[2:])
    wg = weight.reshape((groups, c_in // groups, c_out_g) + tuple(kernel_shape))
    full_sizes = [(i - 1) * s + (k - 1) * d + 1
                  for i, s, k, d in zip(x.shape[2:], strides, kernel_shape, dilations, strict=False)]
    out = np.zeros((n, groups, c_out_g) + tuple(full_sizes), dtype=x.dtype)
    for offset in itertools.product(*[range(k) for k in kernel_shape]):
        w_k = wg[(slice(None),) * 3 + offset]
        contrib = np.einsum(f"NGC{sp},GCO->NGO{sp}", xg, w_k, optimize=True)
        target = tuple(slice(o * d, o * d + (i - 1) * s + 1, s)
                       for o, d, i, s in zip(offset, dilations, x.shape[2:], strides, strict=False))
        out[(slice(None),) * 3 + target] += contrib
    return out.reshape((n, groups * c_out_g) + tuple(full_sizes))


def _crop_transpose(full: np.ndarray, in_sizes: tuple[int, ...], pad_type: str, pad: Any,
                    output_shape: Any, strides: list[int]) -> np.ndarray:
    nd = len(in_sizes)
    full_sizes = full.shape[2:]
    if output_shape is not None:
        targets = [int(v) for v in np.atleast_1d(output_shape)][-nd:]
    elif pad_type == "same":
        targets = [i * s for i, s in zip(in_sizes, strides, strict=False)]
    else:
        custom = ints(pad, 2 * nd, 0) if pad_type == "custom" else [0] * (2 * nd)
        targets = [f - custom[2 * i] - custom[2 * i + 1] for i, f in enumerate(full_sizes)]
    if pad_type == "custom":
        starts = ints(pad, 2 * nd, 0)[0::2]
    elif pad_type == "same":
        starts = [max(0, f - t) // 2 for f, t in zip(full_sizes, targets, strict=False)]
    else:
        starts = [0] * nd
    # an output larger than the scattered one (output_padding) is zero-filled at the end
    grow = [max(0, s + t - f) for s, t, f in zip(starts, targets, full_sizes, strict=False)]
    full = np.pad(full, [(0, 0), (0, 0)] + [(0, g) for g in grow])
    return full[(slice(None), slice(None)) + tuple(slice(s, s + t) for s, t in zip(starts, targets, strict=False))]
