"""Kernels coremltools cannot fold, against independent references (torch.nn.functional, numpy loops).

Each test builds a one-op program whose inputs are placeholders, so the evaluator's kernel does
the work; ``OPS_TESTED`` lists the ops covered here (the coverage test reads it).
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np
import pytest
from mil_eval_helpers import build, mb, run

torch = pytest.importorskip("torch", reason="needs torch")
F = torch.nn.functional
FP32 = mb.TensorSpec(shape=(1,)).dtype  # the builder's fp32 type

OPS_TESTED: set[str] = set()
_SEEN: set[str] = set()  # op types evaluated by the running test


def covers(*ops: str) -> Any:
    """Declare the ops a test covers; the test fails unless each of their kernels really ran."""
    OPS_TESTED.update(ops)

    def wrap(fn: Any) -> Any:
        @functools.wraps(fn)
        def checked(*args: Any, **kwargs: Any) -> None:
            _SEEN.clear()
            fn(*args, **kwargs)
            assert set(ops) <= _SEEN, f"kernels not exercised: {sorted(set(ops) - _SEEN)}"

        return checked

    return wrap


def rand(seed: int, *shape: int) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def evaluate_one(op_type: str, body: Any, *arrays: np.ndarray, opset: int = 17) -> list[np.ndarray]:
    """Run ``body(*placeholders)`` with the arrays as inputs; check op_type's kernel ran."""
    prog = build(body, [(a.shape, _builtin(a)) for a in arrays], opset=opset)
    got, seen = run(prog, {f"x{i}": a for i, a in enumerate(arrays)})
    assert op_type in seen
    _SEEN.update(seen)
    return got


def _builtin(a: np.ndarray) -> Any:
    from coremltools.converters.mil.mil import types

    return types.numpy_type_to_builtin_type(a.dtype)


def t(a: np.ndarray) -> Any:
    return torch.from_numpy(np.ascontiguousarray(a))


CONV_CASES = [  # (x shape, weight shape, strides, dilations, groups, pad_type, pad)
    ((2, 4, 9, 8), (6, 2, 3, 3), [2, 1], [1, 2], 2, "custom", [1, 0, 2, 1]),
    ((1, 3, 7, 7), (4, 3, 3, 3), [2, 2], [1, 1], 1, "valid", None),
    ((1, 3, 7, 6), (4, 3, 3, 2), [2, 2], [1, 1], 1, "same", None),
    ((1, 3, 7, 6), (4, 3, 2, 2), [1, 1], [1, 1], 1, "same_lower", None),
    ((2, 4, 11), (4, 1, 3), [2], [2], 4, "custom", [2, 1]),
    ((1, 2, 4, 5, 6), (3, 2, 2, 3, 2), [1, 2, 1], [1, 1, 2], 1, "valid", None),
]


def _torch_same_pads(in_sizes: Any, kernel: Any, strides: Any, dilations: Any, lower: bool) -> list[int]:
    pads: list[int] = []
    for size, k, s, d in zip(reversed(in_sizes), reversed(kernel), reversed(strides), reversed(dilations), strict=True):
        total = max(0, (-(-size // s) - 1) * s + (k - 1) * d + 1 - size)
        small = total // 2
        pads += [total - small, small] if lower else [small, total - small]
    return pads  # torch F.pad order: last dim first


@covers("conv")
@pytest.mark.parametrize("case", range(len(CONV_CASES)))
def test_conv_matches_torch(case: int) -> None:
    xs, ws, strides, dilations, groups, pad_type, pad = CONV_CASES[case]
    x, w, b = rand(case, *xs), rand(case + 10, *ws), rand(case + 20, ws[0])
    kwargs: dict[str, Any] = {"strides": strides, "dilations": dilations, "groups": groups, "pad_type": pad_type}
    if pad is not None:
        kwargs["pad"] = pad
    (got,) = evaluate_one("conv", lambda v: mb.conv(x=v, weight=w, bias=b, **kwargs), x)
    nd = len(xs) - 2
    if pad_type == "custom":
        torch_pad = [p for i in reversed(range(nd)) for p in (pad[2 * i], pad[2 * i + 1])]
    elif pad_type == "valid":
        torch_pad = [0] * 2 * nd
    else:
        torch_pad = _torch_same_pads(xs[2:], ws[2:], strides, dilations, pad_type == "same_lower")
    conv = {1: F.conv1d, 2: F.conv2d, 3: F.conv3d}[nd]
    want = conv(F.pad(t(x), torch_pad), t(w), t(b), stride=strides, dilation=dilations, groups=groups)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-4, atol=1e-4)


@covers("conv_transpose")
@pytest.mark.parametrize("groups,strides,dilations,pad", [(1, [2, 2], [1, 1], [1, 1, 0, 1]), (2, [2, 3], [2, 1], [0, 0, 1, 2])])
def test_conv_transpose_matches_torch(groups: int, strides: list[int], dilations: list[int], pad: list[int]) -> None:
    x, w, b = rand(1, 2, 4, 5, 4), rand(2, 4, 6 // groups, 3, 3), rand(3, 6)
    (got,) = evaluate_one("conv_transpose", lambda v: mb.conv_transpose(
        x=v, weight=w, bias=b, strides=strides, dilations=dilations, groups=groups, pad_type="custom", pad=pad), x)
    full = F.conv_transpose2d(t(x), t(w), t(b), stride=strides, dilation=dilations, groups=groups).numpy()
    want = full[:, :, pad[0]:full.shape[2] - pad[1], pad[2]:full.shape[3] - pad[3]]
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@covers("max_pool", "avg_pool", "l2_pool")
def test_pools_match_torch() -> None:
    x = rand(4, 2, 3, 9, 8)
    common = {"kernel_sizes": [3, 2], "strides": [2, 2], "pad_type": "custom", "pad": [1, 1, 0, 1]}
    got_max, got_avg, got_avg_ex, got_l2 = evaluate_one("max_pool", lambda v: (
        mb.max_pool(x=v, **common), mb.avg_pool(x=v, **common),
        mb.avg_pool(x=v, exclude_padding_from_average=True, **common),
        mb.l2_pool(x=v, kernel_sizes=[3, 2], strides=[2, 2], pad_type="valid")), x)
    tx = t(x)
    np.testing.assert_allclose(got_max, F.max_pool2d(F.pad(tx, [0, 1, 1, 1], value=-np.inf), (3, 2), (2, 2)).numpy())
    # torch pads symmetrically only, so the asymmetric pad is applied by hand and counted as data
    padded = F.pad(tx, [0, 1, 1, 1])
    np.testing.assert_allclose(got_avg, F.avg_pool2d(padded, (3, 2), (2, 2)).numpy(), rtol=1e-5, atol=1e-6)
    ones = F.pad(torch.ones_like(tx), [0, 1, 1, 1])
    want_ex = (F.avg_pool2d(padded, (3, 2), (2, 2)) / F.avg_pool2d(ones, (3, 2), (2, 2))).numpy()
    np.testing.assert_allclose(got_avg_ex, want_ex, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(got_l2, F.lp_pool2d(tx, 2, (3, 2), (2, 2)).numpy(), rtol=1e-5, atol=1e-5)


@covers("max_pool", "avg_pool")
@pytest.mark.parametrize("exclude", [False, True])
def test_ceil_mode_pools_match_torch(exclude: bool) -> None:
    x = rand(5, 1, 2, 8, 7)
    common = {"kernel_sizes": [3, 3], "strides": [2, 2], "pad_type": "custom", "pad": [1, 1, 1, 1], "ceil_mode": True}
    got_max, got_avg = evaluate_one("avg_pool", lambda v: (
        mb.max_pool(x=v, **common), mb.avg_pool(x=v, exclude_padding_from_average=exclude, **common)), x)
    tx = t(x)
    np.testing.assert_allclose(got_max, F.max_pool2d(tx, 3, 2, padding=1, ceil_mode=True).numpy())
    want = F.avg_pool2d(tx, 3, 2, padding=1, ceil_mode=True, count_include_pad=not exclude)
    np.testing.assert_allclose(got_avg, want.numpy(), rtol=1e-5, atol=1e-6)


@covers("batch_norm", "instance_norm", "local_response_norm", "layer_norm")
def test_normalizations_match_torch() -> None:
    x = rand(5, 2, 4, 5, 6)
    mean, var, gamma, beta = rand(6, 4), np.abs(rand(7, 4)) + 0.5, rand(8, 4), rand(9, 4)
    got_bn, got_in, got_lrn, got_ln = evaluate_one("batch_norm", lambda v: (
        mb.batch_norm(x=v, mean=mean, variance=var, gamma=gamma, beta=beta, epsilon=np.float32(1e-3)),
        mb.instance_norm(x=v, gamma=gamma, beta=beta, epsilon=np.float32(1e-5)),
        mb.local_response_norm(x=v, size=3, alpha=np.float32(1e-2), beta=np.float32(0.75), k=np.float32(1.5)),
        mb.layer_norm(x=v, axes=[-2, -1], epsilon=np.float32(1e-5))), x)
    tx = t(x)
    np.testing.assert_allclose(got_bn, F.batch_norm(tx, t(mean), t(var), t(gamma), t(beta), eps=1e-3).numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_in, F.instance_norm(tx, weight=t(gamma), bias=t(beta), eps=1e-5).numpy(), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(got_lrn, F.local_response_norm(tx, 3, alpha=1e-2, beta=0.75, k=1.5).numpy(), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(got_ln, F.layer_norm(tx, (5, 6), eps=1e-5).numpy(), rtol=1e-4, atol=1e-4)


@covers("upsample_bilinear")
@pytest.mark.parametrize("opset", [15, 16])
def test_upsample_bilinear_half_pixel_by_opset(opset: int) -> None:
    """iOS15's align_corners=False is half-pixel; iOS16 spells it half_pixel_centers (default on)."""
    x = rand(10, 1, 2, 4, 5)
    (got,) = evaluate_one("upsample_bilinear", lambda v: mb.upsample_bilinear(
        x=v, scale_factor_height=2.0, scale_factor_width=3.0, align_corners=False), x, opset=opset)
    want = F.interpolate(t(x), scale_factor=(2, 3), mode="bilinear", align_corners=False)
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


@covers("upsample_nearest_neighbor", "upsample_bilinear", "resize_bilinear", "resize_nearest_neighbor", "resize")
def test_resizing_matches_torch() -> None:
    x = rand(11, 1, 2, 4, 5)
    outs = evaluate_one("upsample_bilinear", lambda v: (
        mb.upsample_nearest_neighbor(x=v, scale_factor_height=2, scale_factor_width=3),
        mb.upsample_bilinear(x=v, scale_factor_height=2.0, scale_factor_width=2.0, align_corners=True),
        mb.upsample_bilinear(x=v, scale_factor_height=2.0, scale_factor_width=3.0, align_corners=False),
        mb.resize_bilinear(x=v, target_size_height=7, target_size_width=3, sampling_mode="UNALIGN_CORNERS"),
        mb.resize_bilinear(x=v, target_size_height=7, target_size_width=9, sampling_mode="STRICT_ALIGN_CORNERS"),
        mb.resize_nearest_neighbor(x=v, target_size_height=8, target_size_width=10),
        mb.resize(x=v, shape=[6, 7], resized_dims=np.uint32(2), interpolation_mode="LINEAR", sampling_mode="UNALIGN_CORNERS"),
    ), x)
    tx = t(x)
    wants = [
        F.interpolate(tx, scale_factor=(2, 3), mode="nearest"),
        F.interpolate(tx, scale_factor=2, mode="bilinear", align_corners=True),
        F.interpolate(tx, scale_factor=(2, 3), mode="bilinear", align_corners=False),
        F.interpolate(tx, size=(7, 3), mode="bilinear", align_corners=False),
        F.interpolate(tx, size=(7, 9), mode="bilinear", align_corners=True),
        F.interpolate(tx, size=(8, 10), mode="nearest"),
        F.interpolate(tx, size=(6, 7), mode="bilinear", align_corners=False),
    ]
    for got, want in zip(outs, wants, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


@covers("silu", "pixel_shuffle", "pixel_unshuffle", "one_hot")
def test_torch_equivalents() -> None:
    x = rand(12, 1, 8, 3, 4)
    got_silu, got_ps, got_pu = evaluate_one("pixel_shuffle", lambda v: (
        mb.silu(x=v), mb.pixel_shuffle(x=v, upscale_factor=2),
        mb.pixel_unshuffle(x=mb.pixel_shuffle(x=v, upscale_factor=2), downscale_factor=np.uint32(2))), x)
    np.testing.assert_allclose(got_silu, F.silu(t(x)).numpy(), rtol=1e-5, atol=1e-6)
    np.testing.assert_array_equal(got_ps, F.pixel_shuffle(t(x), 2).numpy())
    np.testing.assert_array_equal(got_pu, x)
    idx = np.array([[0, 3], [2, 1]], np.int32)
    (got_oh,) = evaluate_one("one_hot", lambda v: mb.one_hot(indices=v, one_hot_vector_size=4, axis=1), idx)
    np.testing.assert_array_equal(got_oh, np.moveaxis(F.one_hot(t(idx).long(), 4).numpy(), -1, 1))


@covers("depth_to_space", "space_to_depth")
def test_depth_to_space_is_onnx_dcr() -> None:
    x = rand(13, 2, 12, 2, 3)
    got_d2s, got_round = evaluate_one("depth_to_space", lambda v: (
        mb.depth_to_space(x=v, block_size=2), mb.space_to_depth(x=mb.depth_to_space(x=v, block_size=2), block_size=2)), x)
    n, c, h, w = x.shape
    want = np.empty((n, c // 4, h * 2, w * 2), np.float32)
    for ch in range(c):  # ONNX DepthToSpace DCR: channel = (by * b + bx) * C_out + c
        block, c_out = divmod(ch, c // 4)
        by, bx = divmod(block, 2)
        want[:, c_out, by::2, bx::2] = x[:, ch]
    np.testing.assert_array_equal(got_d2s, want)
    np.testing.assert_array_equal(got_round, x)


@covers("space_to_batch", "batch_to_space")
def test_space_to_batch_matches_the_tf_definition() -> None:
    x = rand(14, 2, 1, 4, 6)
    got_s2b, got_round = evaluate_one("space_to_batch", lambda v: (
        mb.space_to_batch(x=v, block_shape=[2, 3], paddings=[[0, 0], [0, 0]]),
        mb.batch_to_space(x=mb.space_to_batch(x=v, block_shape=[2, 3], paddings=[[0, 0], [0, 0]]),
                          block_shape=[2, 3], crops=[[0, 0], [0, 0]])), x)
    for oy in range(2):
        for ox in range(3):
            for b in range(2):  # output batch (oy * 3 + ox) * n + b holds x[b, :, oy::2, ox::3]
                np.testing.assert_array_equal(got_s2b[(oy * 3 + ox) * 2 + b], x[b, :, oy::2, ox::3])
    np.testing.assert_array_equal(got_round, x)


@covers("reverse_sequence", "sliding_windows", "concat", "gather_nd", "scatter", "scatter_nd", "einsum")
def test_indexing_ops_against_loops() -> None:
    x = rand(15, 3, 5, 2)
    lengths = np.array([2, 5, 0], np.int32)
    got_rs, got_sw, got_cat = evaluate_one("reverse_sequence", lambda v: (
        mb.reverse_sequence(x=v, lengths=lengths, seq_axis=1, batch_axis=0),
        mb.sliding_windows(x=v, axis=1, size=3, stride=2),
        mb.concat(values=(v, mb.mul(x=v, y=np.float32(2.0))), axis=1, interleave=True)), x)
    for b, n in enumerate(lengths):
        np.testing.assert_array_equal(got_rs[b], np.concatenate([x[b, :n][::-1], x[b, n:]]))
    np.testing.assert_array_equal(got_sw, np.stack([x[:, 0:3], x[:, 2:5]], axis=1))
    np.testing.assert_array_equal(got_cat[:, 0::2], x)  # the spec: output[..., 0::2, ...] = values[0]
    np.testing.assert_array_equal(got_cat[:, 1::2], x * 2)

    data = rand(16, 4, 5, 6)
    idx = np.array([[3, 1], [0, 4], [3, 1]], np.int32)
    updates = rand(17, 3, 6)
    got_gnd, got_snd, got_sc = evaluate_one("scatter_nd", lambda v: (
        mb.gather_nd(x=v, indices=idx),
        mb.scatter_nd(data=v, indices=idx, updates=updates, mode="add"),
        mb.scatter(data=v, indices=np.array([2, 0, 2], np.int32), updates=data[:3] * 0 + 1.0, axis=0, mode="mul")), data)
    np.testing.assert_array_equal(got_gnd, np.stack([data[i, j] for i, j in idx]))
    want_snd = data.copy()
    for (i, j), u in zip(idx, updates, strict=True):
        want_snd[i, j] += u  # repeated indices accumulate
    np.testing.assert_allclose(got_snd, want_snd, rtol=1e-6)
    np.testing.assert_array_equal(got_sc, data)  # multiplying by ones changes nothing
    a, b = rand(18, 2, 3, 4, 5), rand(19, 2, 5, 4, 6)
    (got_es,) = evaluate_one("einsum", lambda u, w: mb.einsum(values=(u, w), equation="abcd,adce->abce"), a, b)
    np.testing.assert_allclose(got_es, torch.einsum("abcd,adce->abce", t(a), t(b)).numpy(), rtol=1e-5, atol=1e-5)


def _torch_rnn_weights(module: Any) -> dict[str, np.ndarray]:
    return {name: p.detach().numpy() for name, p in module.named_parameters()}


@covers("lstm")
@pytest.mark.parametrize("direction", ["forward", "bidirectional"])
def test_lstm_matches_torch(direction: str) -> None:
    torch.manual_seed(0)
    bidir = direction == "bidirectional"
    lstm = torch.nn.LSTM(4, 3, bidirectional=bidir)
    p = _torch_rnn_weights(lstm)

    def reorder(w: np.ndarray) -> np.ndarray:  # torch i,f,g,o -> MIL i,f,o,g
        i, f, g, o = np.split(w, 4)
        return np.concatenate([i, f, o, g])

    x, h0, c0 = rand(20, 5, 2, 4), rand(21, 2 if not bidir else 2, 6 if bidir else 3), rand(22, 2, 6 if bidir else 3)
    kwargs: dict[str, Any] = {
        "weight_ih": reorder(p["weight_ih_l0"]), "weight_hh": reorder(p["weight_hh_l0"]),
        "bias": reorder(p["bias_ih_l0"] + p["bias_hh_l0"]), "direction": direction, "output_sequence": True,
    }
    if bidir:
        kwargs.update(weight_ih_back=reorder(p["weight_ih_l0_reverse"]), weight_hh_back=reorder(p["weight_hh_l0_reverse"]),
                      bias_back=reorder(p["bias_ih_l0_reverse"] + p["bias_hh_l0_reverse"]))
    out, h, c = evaluate_one("lstm", lambda v, hv, cv: mb.lstm(x=v, initial_h=hv, initial_c=cv, **kwargs), x, h0, c0)
    d = 2 if bidir else 1
    th0 = t(h0).reshape(2, d, 3).permute(1, 0, 2).contiguous()
    tc0 = t(c0).reshape(2, d, 3).permute(1, 0, 2).contiguous()
    with torch.no_grad():
        want, (hn, cn) = lstm(t(x), (th0, tc0))
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, hn.permute(1, 0, 2).reshape(2, -1).numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(c, cn.permute(1, 0, 2).reshape(2, -1).numpy(), rtol=1e-5, atol=1e-5)


@covers("gru")
def test_gru_reset_after_matches_torch() -> None:
    torch.manual_seed(1)
    gru = torch.nn.GRU(4, 3)
    p = _torch_rnn_weights(gru)

    def reorder(w: np.ndarray) -> np.ndarray:  # torch r,z,n -> MIL r,o(n),z
        r, z, n = np.split(w, 3)
        return np.concatenate([r, n, z])

    x, h0 = rand(23, 5, 2, 4), rand(24, 2, 3)
    out, h = evaluate_one("gru", lambda v, hv: mb.gru(
        x=v, initial_h=hv, weight_ih=reorder(p["weight_ih_l0"]), weight_hh=reorder(p["weight_hh_l0"]),
        input_bias=reorder(p["bias_ih_l0"]), bias=reorder(p["bias_hh_l0"]), reset_after=True,
        output_sequence=True), x, h0, opset=18)
    with torch.no_grad():
        want, hn = gru(t(x), t(h0)[None])
    np.testing.assert_allclose(out, want.numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, hn[0].numpy(), rtol=1e-5, atol=1e-5)


@covers("rnn")
def test_rnn_matches_torch() -> None:
    torch.manual_seed(2)
    cell = torch.nn.RNN(4, 3)
    p = _torch_rnn_weights(cell)
    x, h0 = rand(25, 5, 2, 4), rand(26, 2, 3)
    out, h = evaluate_one("rnn", lambda v, hv: mb.rnn(
        x=v, initial_h=hv, weight_ih=p["weight_ih_l0"], weight_hh=p["weight_hh_l0"],
        bias=p["bias_ih_l0"] + p["bias_hh_l0"], output_sequence=False), x, h0)
    with torch.no_grad():
        want, hn = cell(t(x), t(h0)[None])
    np.testing.assert_allclose(out, want[-1:].numpy(), rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(h, hn[0].numpy(), rtol=1e-5, atol=1e-5)


@covers("scaled_dot_product_attention")
def test_sdpa_matches_torch() -> None:
    q, k, v = rand(27, 2, 3, 5, 4), rand(28, 2, 3, 6, 4), rand(29, 2, 3, 6, 7)
    mask = np.random.default_rng(30).random((5, 6)) > 0.3
    mask[:, 0] = True
    (got,) = evaluate_one("scaled_dot_product_attention", lambda a, b, c: mb.scaled_dot_product_attention(
        query=a, key=b, value=c, attn_mask=mask), q, k, v, opset=18)
    want = F.scaled_dot_product_attention(t(q), t(k), t(v), attn_mask=t(mask))
    np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


@covers("fill_like", "reshape_like", "slice_update")
def test_shape_driven_ops_against_numpy() -> None:
    x, ref, upd = rand(31, 2, 3, 4), rand(32, 6, 1, 4), rand(33, 2, 2)
    got_fill, got_reshape, got_update = evaluate_one("slice_update", lambda v, r, u: (
        mb.fill_like(ref_tensor=r, value=np.float32(2.5)),
        mb.reshape_like(x=v, ref_tensors=(r, v), begins=(0, 2), ends=(1, 3), end_masks=(False, True)),
        mb.slice_update(x=v, update=u, begin=[1, 0, 1], end=[2, 3, 4], stride=[1, 2, 2],
                        squeeze_mask=[True, False, False])), x, ref, upd, opset=18)
    np.testing.assert_array_equal(got_fill, np.full(ref.shape, 2.5, np.float32))
    np.testing.assert_array_equal(got_reshape, x.reshape(6, 4))
    want = x.copy()
    want[1, 0:3:2, 1:4:2] = upd
    np.testing.assert_array_equal(got_update, want)


@covers("resample")
@pytest.mark.parametrize("align_corners", [False, True])
def test_resample_matches_grid_sample(align_corners: bool) -> None:
    x = rand(34, 2, 3, 5, 6)
    grid = np.random.default_rng(35).uniform(-1.3, 1.3, (2, 4, 7, 2)).astype(np.float32)
    outs = evaluate_one("resample", lambda v, g: tuple(
        mb.resample(x=v, coordinates=g, sampling_mode=sampling, padding_mode=padding, padding_value=np.float32(0.0),
                    coordinates_mode="normalized_minus_one_to_one", align_corners=align_corners)
        for sampling, padding in (("bilinear", "constant"), ("bilinear", "border"), ("nearest", "border"))), x, grid)
    wants = [F.grid_sample(t(x), t(grid), mode=mode, padding_mode=padding, align_corners=align_corners)
             for mode, padding in (("bilinear", "zeros"), ("bilinear", "border"), ("nearest", "border"))]
    for got, want in zip(outs, wants, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-5, atol=1e-5)


@covers("random_uniform", "random_normal")
def test_random_draws_have_the_asked_shape_distribution_and_seed() -> None:
    """Core ML's generator is not numpy's: what the kernels promise is the shape, the dtype, the
    distribution, and that a seed (>= 0) repeats its draw."""
    shape = np.array([50, 80], np.int32)

    def body(v: Any) -> Any:
        return (mb.random_uniform(shape=shape, low=np.float32(-1.0), high=np.float32(4.0), seed=7),
                mb.random_normal(shape=shape, mean=np.float32(2.0), stddev=np.float32(0.5), seed=7),
                mb.random_uniform(shape=shape, low=np.float32(-1.0), high=np.float32(4.0), seed=7), v)

    uniform, normal, again, _ = evaluate_one("random_uniform", body, rand(1, 2))
    assert uniform.shape == normal.shape == (50, 80) and uniform.dtype == np.float32
    assert uniform.min() >= -1.0 and uniform.max() < 4.0 and abs(uniform.mean() - 1.5) < 0.1
    assert abs(normal.mean() - 2.0) < 0.05 and abs(normal.std() - 0.5) < 0.05
    np.testing.assert_array_equal(again, uniform)
