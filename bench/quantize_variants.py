"""How much of an int8 failure is the quantizer's settings and how much int8 itself (issue 38)?

    PYTHONPATH=. .venv/bin/python bench/quantize_variants.py tv_mobilenet_v3_small [--steps 150]

One torch model of the public-architecture set, trained on scikit-learn's digits exactly as
``bench/quantize_archs.py --trained`` trains it (``train_on_digits``), exported to float ONNX by
``unframe.convert``, then quantized by onnxruntime's static quantizer in several settings and
judged on **all 397 digits it never saw** (the accuracy guard judges 16 rows: one row is 6.25
points there), against the float graph in onnxruntime: top-1 agreement, cosine of the logits,
accuracy against the digits' labels, latency of one batch (median of 30, after 3 warm-ups).

Settings (the first is what unframe does on this CPU): 7-bit weights (``reduce_range``, as on a
CPU without VNNI), only the weighted ops quantized, percentile calibration, 8-bit weights run in
onnxruntime's fused int8 kernels (which saturate on AVX2 without VNNI) and run as written (Q/DQ
computed in float: what int8 rounding alone costs), uint8 weights (U8U8: onnxruntime's kernels
that don't saturate), and OpenVINO running the 7-bit Q/DQ graph.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).parent))
import architectures as arch_bench  # noqa: E402
import quantize_archs as qa  # noqa: E402

CALIBRATE = 32  # sets of the samples' batch, as unframe calibrates on 32 of its 40


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--steps", type=int, default=qa.TRAIN_STEPS)
    args = parser.parse_args()

    import numpy as np
    import onnxruntime as ort
    from onnxruntime.quantization import (
        CalibrationDataReader,
        CalibrationMethod,
        QuantFormat,
        QuantType,
        quantize_static,
    )

    import unframe

    archs = arch_bench._archs()
    arch = archs.ARCHS[args.name]
    model, samples = archs.build_checked(args.name)
    trained, sets = qa.train_on_digits(model, samples, arch.family, steps=args.steps)
    print(f"{args.name}: trained {trained}", flush=True)
    folder = Path(tempfile.mkdtemp(prefix="quant-variants-"))
    src = folder / "float.onnx"
    unframe.convert(model, to="onnx", sample_inputs=samples, output=src, locate=False, **arch.options)
    first = samples[0]
    batch, channels, size = first.shape[0], first.shape[1], first.shape[-1]
    images, labels, _ = qa.digits_images(size, channels)
    name = ort.InferenceSession(str(src), providers=["CPUExecutionProvider"]).get_inputs()[0].name
    feeds = [{name: images[1400 + batch * i:1400 + batch * (i + 1)].numpy()} for i in range(397 // batch)]
    truth = labels[1400:1400 + batch * len(feeds)].numpy()
    calibration = [{name: next(iter(s.values()))} for s in sets[:CALIBRATE]]  # the bench's calibration sets

    def session(path: Path, fused: bool = True) -> Any:
        options = ort.SessionOptions()
        if not fused:
            options.graph_optimization_level = ort.GraphOptimizationLevel.ORT_DISABLE_ALL
        return ort.InferenceSession(str(path), options, providers=["CPUExecutionProvider"])

    def outputs(run: Any) -> np.ndarray:
        return np.concatenate([np.asarray(run(f)) for f in feeds])

    def latency(run: Any) -> float:
        for _ in range(3):
            run(feeds[0])
        times = []
        for _ in range(30):
            started = time.perf_counter()
            run(feeds[0])
            times.append(time.perf_counter() - started)
        return statistics.median(times) * 1000

    float_session = session(src)
    ref = outputs(lambda f: float_session.run(None, f)[0])
    rows = [("float graph", ref, latency(lambda f: float_session.run(None, f)[0]))]

    class Sets(CalibrationDataReader):
        def __init__(self) -> None:
            self._sets = iter(calibration)

        def get_next(self) -> dict[str, Any] | None:
            return next(self._sets, None)

    def quantized(label: str, fused: bool = True, **options: Any) -> Path:
        path = folder / f"{len(rows)}.onnx"
        settings = dict(quant_format=QuantFormat.QDQ, per_channel=True, weight_type=QuantType.QInt8,
                        activation_type=QuantType.QUInt8, reduce_range=True)
        quantize_static(str(src), str(path), Sets(), **{**settings, **options})
        s = session(path, fused)
        rows.append((label, outputs(lambda f: s.run(None, f)[0]), latency(lambda f: s.run(None, f)[0])))
        return path

    seven = quantized("7-bit weights (unframe's onnxruntime route here)")
    quantized("7-bit, only Conv/Gemm/MatMul quantized", op_types_to_quantize=["Conv", "Gemm", "MatMul"])
    quantized("7-bit, percentile calibration", calibrate_method=CalibrationMethod.Percentile)
    quantized("8-bit weights, fused int8 kernels", reduce_range=False)
    quantized("8-bit weights, run as written (no fusion)", fused=False, reduce_range=False)
    quantized("uint8 weights (U8U8), fused", reduce_range=False, weight_type=QuantType.QUInt8,
              extra_options={"WeightSymmetric": False})
    try:
        import openvino as ov

        compiled = ov.Core().compile_model(str(seven), "CPU")
        rows.append(("OpenVINO running the 7-bit Q/DQ graph", outputs(lambda f: compiled(f)[0]),
                     latency(lambda f: compiled(f)[0])))
    except ImportError:
        pass

    print(f"\n{len(ref)} unseen digits ({len(feeds)} batches of {batch}); float accuracy "
          f"{float(np.mean(ref.argmax(1) == truth)):.1%}\n")
    print("| setting | top-1 agreement | cosine | accuracy (labels) | ms per batch |")
    print("|---|---:|---:|---:|---:|")
    for label, got, ms in rows:
        a, b = ref.reshape(len(ref), -1).astype(np.float64), got.reshape(len(got), -1).astype(np.float64)
        cosine = float((a * b).sum() / np.linalg.norm(a) / np.linalg.norm(b))
        print(f"| {label} | {float(np.mean(ref.argmax(1) == got.argmax(1))):.1%} | {cosine:.4f} | "
              f"{float(np.mean(got.argmax(1) == truth)):.1%} | {ms:.2f} |")


if __name__ == "__main__":
    main()
