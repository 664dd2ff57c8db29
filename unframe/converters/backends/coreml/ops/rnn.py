"""Recurrent layers: LSTM, GRU and RNN, forward, reverse and bidirectional, layout 0 and 1.

Each direction is unrolled over the (static) sequence length with MIL matmuls and activations,
following the ONNX equations exactly (clip, peepholes, input_forget, linear_before_reset,
custom activations, per-batch sequence_lens for the forward direction):

    X [T, B, I] -> XW = X @ W^T + Wb (all steps at once) -> per step t:
        gates = XW[t] + H @ R^T + Rb -> activations -> H, C  -> stack -> Y [T, D, B, H]
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import onnx_ir as ir

from unframe.converters.backends.coreml.context import TranslateContext
from unframe.converters.backends.coreml.ops import translator
from unframe.converters.backends.coreml.ops._util import cast, mb, scalar

_PARAMETRIC = {"LeakyRelu", "ThresholdedRelu", "ScaledTanh", "HardSigmoid", "Elu", "Softplus", "Affine"}
_DEFAULT_PARAMS = {"LeakyRelu": (0.01, None), "ThresholdedRelu": (1.0, None), "ScaledTanh": (1.0, 1.0),
                   "HardSigmoid": (0.2, 0.5), "Elu": (1.0, None), "Affine": (1.0, 0.0), "Softplus": (None, None)}
_KNOWN = {"Sigmoid", "Tanh", "Relu", "Softsign", *_PARAMETRIC}


def _rnn_check(node: ir.Node) -> list[str]:
    out = []
    acts = node.attributes.get("activations")
    for a in (acts.value if acts is not None else []):
        name = a.decode() if isinstance(a, bytes) else a
        if name not in _KNOWN:
            out.append(f"activation {name!r} is not supported in recurrent layers")
    x = node.inputs[0]
    layout = node.attributes.get("layout")
    t_axis = 1 if layout is not None and int(layout.value) == 1 else 0
    if x is not None and x.shape is not None and len(x.shape) == 3 and not isinstance(x.shape[t_axis], int):
        out.append("the sequence length must be static (CoreML translation unrolls the recurrence): "
                   "convert with --static (static=True) to fix it at the samples' length")
    return out


def _activation(name: str, alpha: float | None, beta: float | None) -> Callable[[Any], Any]:
    m = mb()
    table: dict[str, Callable[[Any], Any]] = {
        "Sigmoid": lambda v: m.sigmoid(x=v),
        "Tanh": lambda v: m.tanh(x=v),
        "Relu": lambda v: m.relu(x=v),
        "Softsign": lambda v: m.softsign(x=v),
        "Softplus": lambda v: m.softplus(x=v),
        "LeakyRelu": lambda v: m.leaky_relu(x=v, alpha=alpha),
        "ThresholdedRelu": lambda v: m.select(cond=m.greater(x=v, y=scalar(alpha, v)), a=v, b=scalar(0, v)),
        "ScaledTanh": lambda v: m.mul(x=m.tanh(x=m.mul(x=v, y=scalar(beta, v))), y=scalar(alpha, v)),
        "HardSigmoid": lambda v: m.sigmoid_hard(x=v, alpha=alpha, beta=beta),
        "Elu": lambda v: m.elu(x=v, alpha=alpha),
        "Affine": lambda v: m.add(x=m.mul(x=v, y=scalar(alpha, v)), y=scalar(beta, v)),
    }
    return table[name]


def _activations(ctx: TranslateContext, defaults: list[str], directions: int) -> list[list[Callable[[Any], Any]]]:
    names = ctx.attr("activations") or defaults * directions
    alphas = list(ctx.attr("activation_alpha") or [])
    betas = list(ctx.attr("activation_beta") or [])
    fns = []
    for name in names:
        alpha = beta = None
        if name in _PARAMETRIC:
            d_alpha, d_beta = _DEFAULT_PARAMS[name]
            alpha = float(alphas.pop(0)) if alphas else d_alpha
            if d_beta is not None:
                beta = float(betas.pop(0)) if betas else d_beta
        fns.append(_activation(name, alpha, beta))
    per = len(defaults)
    return [fns[d * per:(d + 1) * per] for d in range(directions)]


class _Cell:
    """The shared unrolling machinery; subclasses give the step equations."""

    gates = 1
    defaults = ["Tanh"]

    def __init__(self, ctx: TranslateContext) -> None:
        self.ctx = ctx
        self.m = mb()
        self.hidden = int(ctx.attr("hidden_size"))
        self.layout = int(ctx.attr("layout", 0))
        self.direction = ctx.attr("direction", "forward")
        self.dirs = 2 if self.direction == "bidirectional" else 1
        self.clip = ctx.attr("clip")
        self.acts = _activations(ctx, self.defaults, self.dirs)
        x = ctx.x(0)
        self.x = self.m.transpose(x=x, perm=[1, 0, 2]) if self.layout else x
        steps = self.x.shape[0]
        if not isinstance(steps, (int, np.integer)):
            raise ctx.err("the sequence length must be static")
        self.steps = int(steps)

    # -- helpers -----------------------------------------------------------------------------
    def per_dir(self, i: int, d: int) -> Any:
        """Input i's slice for direction d (W, R, B, initial states, P all lead with D)."""
        v = self.ctx.const(i)
        if v is not None:
            return v[d]
        return self.m.squeeze(x=self.m.slice_by_index(
            x=self.ctx.x(i), begin=np.array([d, 0, 0][: len(self.ctx.x(i).shape)], dtype=np.int32),
            end=np.array([d + 1, 0, 0][: len(self.ctx.x(i).shape)], dtype=np.int32),
            end_mask=[False] + [True] * (len(self.ctx.x(i).shape) - 1)), axes=[0])

    def state(self, i: int, d: int) -> Any:
        if self.ctx.has(i):
            init = self.ctx.x(i)
            if self.layout:
                init = self.m.transpose(x=init, perm=[1, 0, 2])
            return self.m.squeeze(x=self.m.slice_by_index(
                x=init, begin=np.array([d, 0, 0], dtype=np.int32), end=np.array([d + 1, 0, 0], dtype=np.int32),
                end_mask=[False, True, True]), axes=[0])
        batch = self.x.shape[1]
        if isinstance(batch, (int, np.integer)):
            return np.zeros((int(batch), self.hidden), dtype=np.float32 if str(self.x.dtype) != "fp16" else np.float16)
        # dynamic batch: zeros shaped like X[0] @ zeros[I, H]
        first = self.m.squeeze(x=self.m.slice_by_index(x=self.x, begin=np.array([0, 0, 0], dtype=np.int32),
                                                     end=np.array([1, 0, 0], dtype=np.int32),
                                                     end_mask=[False, True, True]), axes=[0])
        return self.m.matmul(x=first, y=np.zeros((int(self.x.shape[2]), self.hidden), dtype=np.float32))

    def clipped(self, v: Any) -> Any:
        if self.clip is None:
            return v
        c = float(self.clip)
        return self.m.clip(x=v, alpha=scalar(-c, v), beta=scalar(c, v))

    def split(self, v: Any, n: int) -> list[Any]:
        return list(self.m.split(x=v, num_splits=n, axis=-1))

    def projected_inputs(self, d: int) -> list[Any]:
        """X @ W^T + Wb for every step, as a list of [B, G*H] tensors."""
        w = self.per_dir(1, d)
        xw = self.m.matmul(x=self.x, y=w, transpose_y=True)
        if self.ctx.has(3):
            b = self.per_dir(3, d)
            wb = b[: self.gates * self.hidden] if isinstance(b, np.ndarray) else self.m.slice_by_index(
                x=b, begin=np.array([0], dtype=np.int32), end=np.array([self.gates * self.hidden], dtype=np.int32))
            xw = self.m.add(x=xw, y=wb)
        if self.steps == 1:
            return [self.m.squeeze(x=xw, axes=[0])]
        return [self.m.squeeze(x=s, axes=[0]) for s in self.m.split(x=xw, num_splits=self.steps, axis=0)]

    def recurrent_bias(self, d: int) -> Any:
        if not self.ctx.has(3):
            return None
        b = self.per_dir(3, d)
        gh = self.gates * self.hidden
        if isinstance(b, np.ndarray):
            return b[gh:]
        return self.m.slice_by_index(x=b, begin=np.array([gh], dtype=np.int32), end=np.array([2 * gh], dtype=np.int32))

    def seq_mask(self, t: int) -> Any:
        """[B, 1] bool: step t is inside each sequence (None when every sequence is full)."""
        if not self.ctx.has(4):
            return None
        lens = self.ctx.const(4)
        if lens is not None and np.all(np.asarray(lens) >= self.steps):
            return None
        length = cast(self.ctx.x(4), "int32")
        return self.m.expand_dims(x=self.m.less(x=np.int32(t), y=length), axes=[1])

    # -- the unrolled loop -------------------------------------------------------------------
    def run(self) -> tuple[Any, ...]:
        ys, finals, extras = [], [], []
        for d in range(self.dirs):
            reverse = self.direction == "reverse" or d == 1
            if reverse and self.ctx.has(4) and self.seq_mask(0) is not None:
                raise self.ctx.err("sequence_lens shorter than the sequence need the forward direction")
            outs, last, extra = self.direction_run(d, reverse)
            ys.append(self.m.stack(values=outs, axis=0))
            finals.append(last)
            extras.append(extra)
        y = self.m.stack(values=ys, axis=1)  # [T, D, B, H]
        y_h = self.m.stack(values=finals, axis=0)
        y_c = self.m.stack(values=extras, axis=0) if extras[0] is not None else None
        if self.layout:
            y = self.m.transpose(x=y, perm=[2, 0, 1, 3])
            y_h = self.m.transpose(x=y_h, perm=[1, 0, 2])
            y_c = self.m.transpose(x=y_c, perm=[1, 0, 2]) if y_c is not None else None
        return (y, y_h, y_c) if y_c is not None else (y, y_h)

    def direction_run(self, d: int, reverse: bool) -> tuple[list[Any], Any, Any]:
        xw = self.projected_inputs(d)
        r = self.per_dir(2, d)
        rb = self.recurrent_bias(d)
        h = self.state(5, d)
        c = self.initial_cell(d)
        order = range(self.steps - 1, -1, -1) if reverse else range(self.steps)
        outs: list[Any] = [None] * self.steps
        for t in order:
            h_new, c_new = self.step(d, xw[t], h, c, r, rb)
            mask = self.seq_mask(t)
            if mask is not None:
                zero = self.m.mul(x=h_new, y=scalar(0, h_new))
                outs[t] = self.m.select(cond=mask, a=h_new, b=zero)
                h_new = self.m.select(cond=mask, a=h_new, b=h)
                if c_new is not None:
                    c_new = self.m.select(cond=mask, a=c_new, b=c)
            else:
                outs[t] = h_new
            h, c = h_new, c_new
        return outs, h, c

    def initial_cell(self, d: int) -> Any:
        return None

    def step(self, d: int, xw: Any, h: Any, c: Any, r: Any, rb: Any) -> tuple[Any, Any]:
        raise NotImplementedError

    def recurrent(self, h: Any, r: Any, rb: Any) -> Any:
        hr = self.m.matmul(x=h, y=r, transpose_y=True)
        return self.m.add(x=hr, y=rb) if rb is not None else hr


class _RNN(_Cell):
    gates = 1
    defaults = ["Tanh"]

    def step(self, d: int, xw: Any, h: Any, c: Any, r: Any, rb: Any) -> tuple[Any, Any]:
        pre = self.clipped(self.m.add(x=xw, y=self.recurrent(h, r, rb)))
        return self.acts[d][0](pre), None


class _GRU(_Cell):
    gates = 3
    defaults = ["Sigmoid", "Tanh"]

    def step(self, d: int, xw: Any, h: Any, c: Any, r: Any, rb: Any) -> tuple[Any, Any]:
        m, f, g = self.m, self.acts[d][0], self.acts[d][1]
        xz, xr, xh = self.split(xw, 3)
        rz, rr, rh = (_rows(r, k, self.hidden) for k in range(3))
        bz, br, bh = (_rows(rb, k, self.hidden) if rb is not None else None for k in range(3))
        z = f(self.clipped(_add(m, m.add(x=xz, y=m.matmul(x=h, y=rz, transpose_y=True)), bz)))
        rt = f(self.clipped(_add(m, m.add(x=xr, y=m.matmul(x=h, y=rr, transpose_y=True)), br)))
        if int(self.ctx.attr("linear_before_reset", 0)):
            hidden = m.mul(x=rt, y=_add(m, m.matmul(x=h, y=rh, transpose_y=True), bh))
        else:
            hidden = _add(m, m.matmul(x=m.mul(x=rt, y=h), y=rh, transpose_y=True), bh)
        hh = g(self.clipped(m.add(x=xh, y=hidden)))
        one_minus = m.sub(x=scalar(1, z), y=z)
        return m.add(x=m.mul(x=one_minus, y=hh), y=m.mul(x=z, y=h)), None


class _LSTM(_Cell):
    gates = 4
    defaults = ["Sigmoid", "Tanh", "Tanh"]

    def initial_cell(self, d: int) -> Any:
        return self.state(6, d)

    def step(self, d: int, xw: Any, h: Any, c: Any, r: Any, rb: Any) -> tuple[Any, Any]:
        m, f, g, hact = self.m, *self.acts[d]
        pre = self.split(m.add(x=xw, y=self.recurrent(h, r, rb)), 4)  # i, o, f, c
        peep = self.per_dir(7, d) if self.ctx.has(7) else None
        pi, po, pf = ((_slice1(m, peep, k, self.hidden)) for k in range(3)) if peep is not None else (None,) * 3
        i = f(self.clipped(_add(m, pre[0], _mul(m, pi, c))))
        if int(self.ctx.attr("input_forget", 0)):
            fg = m.sub(x=scalar(1, i), y=i)
        else:
            fg = f(self.clipped(_add(m, pre[2], _mul(m, pf, c))))
        cand = g(self.clipped(pre[3]))
        c_new = m.add(x=m.mul(x=fg, y=c), y=m.mul(x=i, y=cand))
        o = f(self.clipped(_add(m, pre[1], _mul(m, po, c_new))))
        return m.mul(x=o, y=hact(c_new)), c_new


def _rows(r: Any, k: int, hidden: int) -> Any:
    if isinstance(r, np.ndarray):
        return r[k * hidden:(k + 1) * hidden]
    return mb().slice_by_index(x=r, begin=np.array([k * hidden] + [0] * (len(r.shape) - 1), dtype=np.int32),
                               end=np.array([(k + 1) * hidden] + [0] * (len(r.shape) - 1), dtype=np.int32),
                               end_mask=[False] + [True] * (len(r.shape) - 1))


def _slice1(m: Any, v: Any, k: int, hidden: int) -> Any:
    return _rows(v, k, hidden)


def _add(m: Any, a: Any, b: Any) -> Any:
    return a if b is None else m.add(x=a, y=b)


def _mul(m: Any, a: Any, b: Any) -> Any:
    return None if a is None else m.mul(x=a, y=b)


@translator("RNN", check=_rnn_check)
def rnn(ctx: TranslateContext) -> Any:
    return _RNN(ctx).run()


@translator("GRU", check=_rnn_check)
def gru(ctx: TranslateContext) -> Any:
    return _GRU(ctx).run()


@translator("LSTM", check=_rnn_check)
def lstm(ctx: TranslateContext) -> Any:
    return _LSTM(ctx).run()
