"""lstm, gru, rnn (iOS15 recurrent.py; iOS17 widens dtypes; iOS18 gru adds reset_after/input_bias).

x is [seq, batch, input]. Outputs: the hidden states ([seq, b, D*H], or [1, b, D*H] for the last
step only), then the final hidden state [b, D*H] (and for lstm the final cell state).
Gate orders follow the spec: lstm [input, forget, output, cell], gru [reset, new, update].
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from unframe.converters.backends.coreml.mil_eval.registry import kernel

Act = Callable[[np.ndarray], np.ndarray]


def _activation(name: str, dtype: np.dtype) -> Act:
    one = np.asarray(1, dtype)
    table: dict[str, Act] = {
        "sigmoid": lambda v: one / (one + np.exp(-v)),
        "tanh": np.tanh,
        "relu": lambda v: np.maximum(v, np.asarray(0, dtype)),
        "linear": lambda v: v,
        # Core ML's hard sigmoid defaults (alpha=0.2, beta=0.5)
        "sigmoid_hard": lambda v: np.clip(np.asarray(0.2, dtype) * v + np.asarray(0.5, dtype), 0, 1).astype(dtype),
        "scaled_tanh": np.tanh,
    }
    try:
        return table[str(name).lower()]
    except KeyError:
        raise ValueError(f"unknown recurrent activation {name!r}") from None


def _steps(seq: int, reverse: bool) -> range:
    return range(seq - 1, -1, -1) if reverse else range(seq)


def _finish(outputs: list[np.ndarray], reverse: bool, output_sequence: bool) -> np.ndarray:
    """Hidden states in time order [s, b, H], or the final step [1, b, H]."""
    if not output_sequence:
        return outputs[-1][None]
    ordered = outputs[::-1] if reverse else outputs
    return np.stack(ordered)


def _lstm_direction(x: np.ndarray, h: np.ndarray, c: np.ndarray, w_ih: np.ndarray, w_hh: np.ndarray,
                    bias: np.ndarray, peephole: np.ndarray, acts: tuple[Act, Act, Act],
                    clip: Any, reverse: bool) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    rec_act, cell_act, out_act = acts
    hidden = h.shape[-1]
    p_i, p_f, p_o = peephole[:hidden], peephole[hidden:2 * hidden], peephole[2 * hidden:]
    outs = []
    for t in _steps(x.shape[0], reverse):
        gates = x[t] @ w_ih.T + h @ w_hh.T + bias
        i, f, o, z = (gates[:, k * hidden:(k + 1) * hidden] for k in range(4))
        i = rec_act(i + p_i * c)
        f = rec_act(f + p_f * c)
        z = cell_act(z)
        c = f * c + i * z
        if clip is not None:
            c = np.clip(c, -clip, clip).astype(c.dtype)
        o = rec_act(o + p_o * c)
        h = o * out_act(c)
        outs.append(h)
    return outs, h, c


@kernel("lstm")
def lstm(ctx: Any, x: np.ndarray, initial_h: np.ndarray, initial_c: np.ndarray, weight_ih: np.ndarray,
         weight_hh: np.ndarray, bias: Any = None, peephole: Any = None, weight_ih_back: Any = None,
         weight_hh_back: Any = None, bias_back: Any = None, peephole_back: Any = None,
         direction: str = "forward", output_sequence: Any = False, recurrent_activation: str = "sigmoid",
         cell_activation: str = "tanh", activation: str = "tanh", clip: Any = None) -> tuple:
    dt = x.dtype
    hidden = weight_hh.shape[-1]
    acts = (_activation(recurrent_activation, dt), _activation(cell_activation, dt), _activation(activation, dt))
    clip_ = None if clip is None else np.asarray(clip, dt)

    def run(w_ih: Any, w_hh: Any, b: Any, p: Any, h0: np.ndarray, c0: np.ndarray, reverse: bool) -> tuple:
        b_ = np.zeros(4 * hidden, dt) if b is None else np.asarray(b, dt)
        p_ = np.zeros(3 * hidden, dt) if p is None else np.asarray(p, dt)
        return _lstm_direction(x, h0, c0, np.asarray(w_ih, dt), np.asarray(w_hh, dt), b_, p_, acts, clip_, reverse)

    seq_out = bool(output_sequence)
    if str(direction) != "bidirectional":
        reverse = str(direction) == "reverse"
        outs, h, c = run(weight_ih, weight_hh, bias, peephole, initial_h, initial_c, reverse)
        return _finish(outs, reverse, seq_out), h, c
    fw = run(weight_ih, weight_hh, bias, peephole, initial_h[:, :hidden], initial_c[:, :hidden], False)
    bw = run(weight_ih_back, weight_hh_back, bias_back, peephole_back,
             initial_h[:, hidden:], initial_c[:, hidden:], True)
    if seq_out:
        out = np.concatenate([_finish(fw[0], False, True), _finish(bw[0], True, True)], axis=-1)
    else:
        # the last step of each direction: forward at t=s-1, backward at t=0
        out = np.concatenate([fw[0][-1], bw[0][-1]], axis=-1)[None]
    return out, np.concatenate([fw[1], bw[1]], -1), np.concatenate([fw[2], bw[2]], -1)


@kernel("gru")
def gru(ctx: Any, x: np.ndarray, initial_h: np.ndarray, weight_ih: np.ndarray, weight_hh: np.ndarray,
        bias: Any = None, direction: str = "forward", output_sequence: Any = False,
        recurrent_activation: str = "sigmoid", activation: str = "tanh", reset_after: Any = False,
        input_bias: Any = None) -> tuple:
    dt = x.dtype
    hidden = weight_hh.shape[-1]
    rec_act, act = _activation(recurrent_activation, dt), _activation(activation, dt)
    w_ih, w_hh = np.asarray(weight_ih, dt), np.asarray(weight_hh, dt)
    b_h = np.zeros(3 * hidden, dt) if bias is None else np.asarray(bias, dt)
    b_i = np.zeros(3 * hidden, dt) if input_bias is None else np.asarray(input_bias, dt)
    split = lambda v: (v[..., :hidden], v[..., hidden:2 * hidden], v[..., 2 * hidden:])  # noqa: E731
    w_hr, w_ho, w_hz = split(w_hh.T)
    reverse = str(direction) == "reverse"
    h = initial_h
    outs = []
    for t in _steps(x.shape[0], reverse):
        xr, xo, xz = split(x[t] @ w_ih.T + b_i)
        br, bo, bz = split(b_h)
        r = rec_act(xr + h @ w_hr + br)
        z = rec_act(xz + h @ w_hz + bz)
        if bool(reset_after):
            o = act(xo + r * (h @ w_ho + bo))
        else:
            o = act(xo + (r * h) @ w_ho + bo)
        h = (np.asarray(1, dt) - z) * o + z * h
        outs.append(h)
    return _finish(outs, reverse, bool(output_sequence)), h


@kernel("rnn")
def rnn(ctx: Any, x: np.ndarray, initial_h: np.ndarray, weight_ih: np.ndarray, weight_hh: np.ndarray,
        bias: Any = None, direction: str = "forward", output_sequence: Any = False,
        activation: str = "tanh") -> tuple:
    dt = x.dtype
    act = _activation(activation, dt)
    b = np.zeros(weight_hh.shape[0], dt) if bias is None else np.asarray(bias, dt)
    reverse = str(direction) == "reverse"
    h = initial_h
    outs = []
    for t in _steps(x.shape[0], reverse):
        h = act(x[t] @ np.asarray(weight_ih, dt).T + h @ np.asarray(weight_hh, dt).T + b)
        outs.append(h)
    return _finish(outs, reverse, bool(output_sequence)), h
