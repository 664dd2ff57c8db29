"""Fourier transforms: DFT STFT, as MatMuls against constant cos/sin matrices.

A DFT of length n along one axis is linear in the signal; with the complex values as
(real, imaginary) pairs on the last axis::

    forward:  Re X = xr @ C + xi @ S      Im X = xi @ C - xr @ S      C[t, k] = cos(2 pi t k / n)
    inverse:  Re x = (Xr @ C - Xi @ S) / n  Im x = (Xi @ C + Xr @ S) / n  S[t, k] = sin(2 pi t k / n)

onesided keeps the first n // 2 + 1 bins (forward), or reads them as the half of a Hermitian
spectrum (inverse: a real signal, as numpy's irfft). The matrices are built in float64 at
conversion time, so n must be known then; the transform runs in float32 in a 16-bit program
(sums of n products: ``unframe.validate.rounding.FLOAT32_INSIDE``, applied by the graph walk). STFT frames the signal with one Gather (frame f, sample t at
f * step + t), weights it by the window, and transforms each frame the same way.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import cast, mb, norm_axis


def dft_matrices(n_in: int, n: int, bins: int, *, inverse: bool, hermitian: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """(C, S) [n_in, bins]: the cos/sin of 2 pi t k / n for t < n_in input samples (a signal
    shorter than n is zero-padded, so its missing rows are left out), k < bins. ``hermitian``:
    the inverse of a one-sided spectrum (bins = n // 2 + 1 inputs, n real outputs): each bin
    but 0 and n / 2 stands for itself and its conjugate mirror, so counts twice."""
    t = np.arange(n_in, dtype=np.float64)[:, None]
    k = np.arange(bins, dtype=np.float64)[None, :]
    angle = 2.0 * np.pi * np.mod(t * k, n) / n
    cos, sin = np.cos(angle), np.sin(angle)
    if inverse:
        cos, sin = cos / n, sin / n
    if hermitian:  # rows are spectrum bins here, columns output samples
        weight = np.full((n_in, 1), 2.0)
        weight[0] = 1.0
        if n % 2 == 0 and n // 2 < n_in:
            weight[n // 2] = 1.0
        cos, sin = cos * weight, sin * weight
    return cos.astype(np.float32), sin.astype(np.float32)


@translator("DFT")
def dft(ctx: TranslateContext) -> Any:
    m, x = mb(), ctx.x(0)
    rank = ctx.rank(0)
    given_axis = ctx.ints(2) if ctx.has(2) else [-2]
    axis = norm_axis(int(given_axis[0]), rank) if given_axis is not None else rank - 1
    if axis == rank - 1:
        raise ctx.err("DFT needs a constant axis other than the last (the real/imaginary one)")
    size, last = x.shape[axis], x.shape[-1]
    if not isinstance(size, (int, np.integer)) or last not in (1, 2):
        raise ctx.err("DFT needs a static signal length, and a last axis of 1 (real) or 2 (complex)")
    size = int(size)
    inverse, onesided = bool(int(ctx.attr("inverse", 0))), bool(int(ctx.attr("onesided", 0)))
    given = ctx.ints(1) if ctx.has(1) else None
    if ctx.has(1) and given is None:
        raise ctx.err("DFT's dft_length must be known at conversion time")
    hermitian = inverse and onesided  # a one-sided spectrum in, a real signal out
    n = int(given[0]) if given else (2 * (size - 1) if hermitian else size)
    keep = min(size, n // 2 + 1 if hermitian else n)  # input samples (bins) the transform reads
    real, imag = _parts(cast(x, "fp32"), int(last))
    real, imag = (_to_last(_fit(v, axis, size, keep), axis, rank - 1) for v in (real, imag))
    if hermitian:
        cos, sin = dft_matrices(keep, n, n, inverse=True, hermitian=True)
        signal = m.sub(x=_mm(real, cos), y=_mm(imag, sin))
        return m.expand_dims(x=_from_last(signal, axis, rank - 1), axes=[-1])
    cos, sin = dft_matrices(keep, n, n // 2 + 1 if onesided else n, inverse=inverse)
    if inverse:
        out_r, out_i = m.sub(x=_mm(real, cos), y=_mm(imag, sin)), m.add(x=_mm(imag, cos), y=_mm(real, sin))
    else:
        out_r, out_i = m.add(x=_mm(real, cos), y=_mm(imag, sin)), m.sub(x=_mm(imag, cos), y=_mm(real, sin))
    return _pair(_from_last(out_r, axis, rank - 1), _from_last(out_i, axis, rank - 1))


def _parts(x: Any, last: int) -> tuple[Any, Any]:
    """(real, imaginary) of x [..., 1 or 2], each without the last axis (zeros for a real x)."""
    m = mb()
    rank = len(x.shape)
    mask = [True] * (rank - 1) + [False]
    squeeze = [False] * (rank - 1) + [True]

    def part(k: int) -> Any:
        bounds = np.zeros((2, rank), np.int32)  # fresh arrays: the builder keeps what it is given
        bounds[:, -1] = (k, k + 1)
        return m.slice_by_index(x=x, begin=bounds[0], end=bounds[1], begin_mask=mask, end_mask=mask,
                                squeeze_mask=squeeze)

    real = part(0)
    return real, (part(1) if last == 2 else m.mul(x=real, y=np.float32(0.0)))


def _fit(v: Any, axis: int, size: int, n: int) -> Any:
    """The signal cut to n samples on ``axis`` (a longer one: zero-padding is the matrices'
    missing rows, see :func:`dft_matrices`)."""
    if n >= size:
        return v
    m = mb()
    rank = len(v.shape)
    begin, end = np.zeros(rank, np.int32), np.zeros(rank, np.int32)
    end[axis] = n
    mask = [i != axis for i in range(rank)]
    return m.slice_by_index(x=v, begin=begin, end=end, begin_mask=mask, end_mask=mask)


def _to_last(v: Any, axis: int, rank: int) -> Any:
    if axis == rank - 1:
        return v
    return mb().transpose(x=v, perm=[i for i in range(rank) if i != axis] + [axis])


def _from_last(v: Any, axis: int, rank: int) -> Any:
    if axis == rank - 1:
        return v
    perm = [i for i in range(rank) if i != axis] + [axis]
    return mb().transpose(x=v, perm=[perm.index(i) for i in range(rank)])


def _mm(v: Any, matrix: np.ndarray) -> Any:
    return mb().matmul(x=v, y=matrix)


def _pair(real: Any, imag: Any) -> Any:
    m = mb()
    return m.concat(values=[m.expand_dims(x=real, axes=[-1]), m.expand_dims(x=imag, axes=[-1])], axis=-1)


@translator("STFT")
def stft(ctx: TranslateContext) -> Any:
    """signal [B, L, 1 or 2] -> frames [B, F, n] (one Gather) -> * window -> DFT -> [B, F, bins, 2]."""
    m, x = mb(), ctx.x(0)
    length = x.shape[1]
    step = ctx.ints(1)
    window = ctx.x(2) if ctx.has(2) else None
    frame = ctx.ints(3) if ctx.has(3) else None
    if step is None or (ctx.has(3) and frame is None) or not isinstance(length, (int, np.integer)):
        raise ctx.err("STFT needs a static signal length and constant frame_step and frame_length")
    if frame is None:
        if window is None or not isinstance(window.shape[0], (int, np.integer)):
            raise ctx.err("STFT needs a frame_length or a window of static length")
        n = int(window.shape[0])
    else:
        n = int(frame[0])
    hop, total = int(step[0]), int(length)
    frames = (total - n) // hop + 1
    onesided = bool(int(ctx.attr("onesided", 1)))
    real, imag = _parts(cast(x, "fp32"), int(x.shape[-1]))
    at = (np.arange(frames)[:, None] * hop + np.arange(n)[None, :]).astype(np.int32)
    real, imag = (m.gather(x=v, indices=at, axis=1) for v in (real, imag))
    if window is not None:
        w = cast(window, "fp32")
        real, imag = m.mul(x=real, y=w), m.mul(x=imag, y=w)
    cos, sin = dft_matrices(n, n, n // 2 + 1 if onesided else n, inverse=False)
    return _pair(m.add(x=_mm(real, cos), y=_mm(imag, sin)), m.sub(x=_mm(imag, cos), y=_mm(real, sin)))
