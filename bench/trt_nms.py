"""What the NonMaxSuppression rewrite for tensorrt-rtx (unframe/converters/backends/tensorrt/nms.py)
costs, measured where this machine can run it: onnxruntime on the CPU, the rewritten graph
against onnxruntime's own NonMaxSuppression kernel (the anchor), on detector-like boxes (clusters
of jittered boxes around objects, as a detector's candidates are). Also: the fixed point's
iterations (the Loop's trip count) and the memory its two N x N matrices take.

    .venv/bin/python bench/trt_nms.py [--sizes 100 1000 3000] [--repeat 5]

The TensorRT engine itself needs a GPU tensorrt-rtx runs on (not this machine); there the
matrices are a few batched GEMMs per iteration, which is the point of writing it so.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import onnx_ir as ir
from onnx import TensorProto, helper

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from unframe.converters.backends.tensorrt.nms import GreedyNmsPass  # noqa: E402


def model() -> ir.Model:
    node = helper.make_node("NonMaxSuppression", ["boxes", "scores", "max_out", "iou", "score"], ["sel"])
    inputs = [helper.make_tensor_value_info("boxes", TensorProto.FLOAT, [1, "N", 4]),
              helper.make_tensor_value_info("scores", TensorProto.FLOAT, [1, 1, "N"])]
    inits = [helper.make_tensor("max_out", TensorProto.INT64, [1], [1000]),
             helper.make_tensor("iou", TensorProto.FLOAT, [1], [0.5]),
             helper.make_tensor("score", TensorProto.FLOAT, [1], [0.05])]
    graph = helper.make_graph([node], "nms", inputs, [helper.make_tensor_value_info("sel", TensorProto.INT64, ["K", 3])],
                              inits)
    return ir.from_proto(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8))


def candidates(n: int, seed: int = 0) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    objects = max(1, n // 30)
    centre = rng.uniform(0, 600, (objects, 2))[rng.integers(0, objects, n)] + rng.normal(0, 8, (n, 2))
    size = rng.uniform(20, 120, (n, 2))
    boxes = np.concatenate([centre - size / 2, centre + size / 2], 1)[None].astype(np.float32)
    return {"boxes": boxes, "scores": rng.uniform(0, 1, (1, 1, n)).astype(np.float32)}


def iterations(feeds: dict[str, np.ndarray], iou: float = 0.5, score: float = 0.05) -> int:
    """The fixed point's iterations, in numpy (the Loop stops on the first that changes nothing)."""
    b, s = feeds["boxes"][0].astype(np.float64), feeds["scores"][0, 0]
    lo, hi = np.minimum(b[:, :2], b[:, 2:]), np.maximum(b[:, :2], b[:, 2:])
    inter = np.prod(np.clip(np.minimum(hi[:, None], hi[None]) - np.maximum(lo[:, None], lo[None]), 0, None), -1)
    area = np.prod(hi - lo, -1)
    over = inter / (area[:, None] + area[None] - inter) > iou
    n = len(s)
    ahead = (s[None, :] > s[:, None]) | ((s[None, :] == s[:, None]) & (np.arange(n)[None] < np.arange(n)[:, None]))
    blocks, valid = (over & ahead).astype(np.float64), (s > score).astype(np.float64)
    keep, count = valid, 0
    while True:
        count += 1
        new = valid * (blocks @ keep < 0.5)
        if np.array_equal(new, keep):
            return count
        keep = new


def timed(session, feeds: dict[str, np.ndarray], repeat: int) -> float:
    session.run(None, feeds)
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        session.run(None, feeds)
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def main() -> None:
    import onnxruntime as ort

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="*", default=[100, 1000, 3000])
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()
    native = model()
    rewritten = native.clone()
    GreedyNmsPass()(rewritten)
    options = ort.SessionOptions()
    options.intra_op_num_threads = 1
    sessions = [ort.InferenceSession(ir.to_proto(m).SerializeToString(), options) for m in (native, rewritten)]
    print("| candidates | selected | fixed-point iterations | onnxruntime NMS kernel | rewritten graph "
          "| ratio | matrices (2 x N x N float32) |")
    print("|---:|---:|---:|---:|---:|---:|---:|")
    for n in args.sizes:
        feeds = candidates(n)
        expected, got = (s.run(None, feeds)[0] for s in sessions)
        assert np.array_equal(expected, got), f"{n} candidates: the rewrite selected other boxes"
        kernel, graph = (timed(s, feeds, args.repeat) for s in sessions)
        print(f"| {n} | {len(expected)} | {iterations(feeds)} | {kernel * 1e3:.2f} ms | {graph * 1e3:.2f} ms "
              f"| {graph / kernel:.1f}x | {2 * n * n * 4 / 2**20:.1f} MiB |", flush=True)


if __name__ == "__main__":
    main()
