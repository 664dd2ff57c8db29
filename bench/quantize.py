"""Quantized artifacts against the float ones (issue 38): size, batch-1 latency on this CPU
(median of 30 alternating runs after 2 warm-ups, each side in the same runtime: unframe.validate.latency), conversion time and the
accuracy guard's figures, per model, scheme and target.

Models: the CNN trained on scikit-learn's digits (tests/quantize/quant_models.py; calibrated on
320 training images, its test accuracy measured in the artifact's runtime when the target is
ONNX), torchvision's ResNet-18 and MobileNetV2 at 224x224 (random weights perturbed to give
outputs of order 1; calibrated on drawn inputs: their guard figures say the artifact follows the
float model, not that it classifies anything).

    PYTHONPATH=. .venv/bin/python bench/quantize.py [--targets onnx,openvino] [--schemes int8,w8]
        [--models digits,resnet18,mobilenet_v2] [--out docs/benchmarks/quantize.md]
"""

from __future__ import annotations

import argparse
import platform
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "quantize"))
sys.path.insert(0, str(Path(__file__).parent))

from benchlib import torchvision_shim  # noqa: E402


def digits() -> tuple[Any, Any, Any, Any]:
    from quant_models import digits_cnn

    t = digits_cnn()
    return t.model, t.train[:8], t.train[:320], t


def vision(name: str) -> tuple[Any, Any, Any, Any]:
    import torch

    torchvision_shim()
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    with torch.no_grad():
        for p in model.parameters():
            if p.dim() > 1:
                p.add_(torch.randn_like(p) * 0.1 * float(p.std()))
    x = torch.randn(1, 3, 224, 224).numpy()
    return model, x, None, None


MODELS = {"digits": digits, "resnet18": lambda: vision("resnet18"), "mobilenet_v2": lambda: vision("mobilenet_v2")}


def artifact_runner(result: Any) -> Any:
    """The artifact's runner as deployed (``AS_DEPLOYED``: onnxruntime at its default
    optimizations, the float graph as the int8 one), as the accuracy guard times them."""
    from unframe.converters.base import AS_DEPLOYED, Target

    branch = result.branch
    target = Target(branch.target.name, branch.target.opset, {**branch.target.options, AS_DEPLOYED: True})
    return branch.backend.runner(result.artifact, target)


def row(name: str, target: str, scheme: str, model: Any, sample: Any, calib: Any, trained: Any,
        folder: Path) -> dict[str, Any]:
    import torch

    import unframe
    from unframe.errors import UnframeError
    from unframe.route import get_backend

    suffix = get_backend(target).suffixes[0]
    x = torch.tensor(sample)
    started = time.perf_counter()
    flt = unframe.convert(model, to=target, sample_inputs=x, output=folder / f"{name}_float{suffix}", force=True)
    float_s = time.perf_counter() - started
    out: dict[str, Any] = {"model": name, "target": target, "scheme": scheme, "float_s": float_s}
    try:
        started = time.perf_counter()
        quant = unframe.convert(model, to=target, sample_inputs=x, quantize=scheme,
                                calibration=None if calib is None else [{"input": calib[i:i + len(sample)]}
                                                                        for i in range(0, len(calib), len(sample))],
                                output=folder / f"{name}_{scheme}{suffix}", force=True)
        out["quant_s"] = time.perf_counter() - started
        sets = None if calib is None else [{"input": calib[i:i + len(sample)]}
                                           for i in range(0, len(calib), len(sample))]
        try:
            out["anchor_s"], out["anchor"] = anchor_seconds(target, scheme, folder / f"{name}_float{suffix}",
                                                            sets, folder)
        except Exception as exc:  # noqa: BLE001 - the anchor failing is a figure
            out["anchor_s"], out["anchor"] = None, f"failed: {type(exc).__name__}: {str(exc)[:80]}"
    except UnframeError as exc:
        out["error"] = f"exit {exc.exit_code}: {exc.message[:120]}"
        return out
    check = quant.report.stages[-1]
    out.update(guard=check.status, top1=check.top1, cos=min(check.cosine.values()) if check.cosine else None,
               kept=len(check.kept_float), size=(check.size[1] / check.size[0]) if check.size else None)
    feed = {k: v for k, v in flt.flow.feeds[0].items()} if flt.flow is not None else None
    from unframe.converters.base import RunnerUnavailable

    try:
        f_run, q_run = artifact_runner(flt), artifact_runner(quant)
    except RunnerUnavailable as why:  # a TensorRT engine without a GPU: no latency here
        out["float_ms"] = out["quant_ms"] = None
        out["latency_note"] = str(why)
    else:
        from unframe.validate.latency import paired  # what the accuracy guard reports, given 30 runs

        timed = paired(f_run, q_run, feed, runs=30, budget_s=float("inf"))
        out["float_ms"], out["quant_ms"] = timed.before_ms, timed.after_ms
    if trained is not None and target == "onnx":
        from quant_models import onnx_accuracy

        out["float_acc"] = onnx_accuracy(folder / f"{name}_float{suffix}", trained)
        out["quant_acc"] = onnx_accuracy(folder / f"{name}_{scheme}{suffix}", trained)
    return out


# -- anchors: the vendor's quantizer called directly on the float artifact unframe wrote ---------
def anchor_seconds(target: str, scheme: str, float_path: Path, calib_sets: list[dict[str, Any]] | None,
                   folder: Path) -> tuple[float | None, str]:
    """Seconds of the vendor quantizer alone on the float artifact, the way its users call it
    (Olive/Optimum: onnxruntime's quantize_static/quantize_dynamic and MatMulNBitsQuantizer; NNCF's
    quantize/compress_weights; coremltools.optimize's linear_quantize_weights), and what it was;
    (None, why) where there is no such call."""
    started = time.perf_counter()
    if target == "onnx":
        what = _onnx_anchor(scheme, float_path, calib_sets, folder)
    elif target == "openvino":
        what = _openvino_anchor(scheme, float_path, calib_sets, folder)
    elif target == "coreml":
        what = _coreml_anchor(scheme, float_path, folder)
    else:
        return None, "no anchor here"
    if what is None:
        return None, "no anchor for this scheme"
    return time.perf_counter() - started, what


def _onnx_anchor(scheme: str, src: Path, sets: list[dict[str, Any]] | None, folder: Path) -> str | None:
    from onnxruntime.quantization import (
        CalibrationDataReader,
        QuantFormat,
        QuantType,
        quantize_dynamic,
        quantize_static,
    )

    dst = folder / f"anchor_{scheme}.onnx"
    if scheme == "int8":
        class Reader(CalibrationDataReader):
            def __init__(self) -> None:
                self.it = iter(sets or [])

            def get_next(self) -> Any:
                return next(self.it, None)

        quantize_static(str(src), str(dst), Reader(), quant_format=QuantFormat.QDQ, per_channel=True,
                        weight_type=QuantType.QInt8, activation_type=QuantType.QUInt8)
        return "onnxruntime quantize_static (QDQ, per channel)"
    if scheme == "int8-dynamic":
        quantize_dynamic(str(src), str(dst), per_channel=True, weight_type=QuantType.QInt8)
        return "onnxruntime quantize_dynamic"
    if scheme == "w4":
        import onnx
        from onnxruntime.quantization.matmul_nbits_quantizer import MatMulNBitsQuantizer

        quant = MatMulNBitsQuantizer(onnx.load(str(src)), block_size=32, is_symmetric=True)
        quant.process()
        quant.model.save_model_to_file(str(dst))
        return "onnxruntime MatMulNBitsQuantizer (int4, blocks of 32)"
    return None


def _openvino_anchor(scheme: str, src: Path, sets: list[dict[str, Any]] | None, folder: Path) -> str | None:
    import nncf
    import openvino as ov

    model = ov.Core().read_model(str(src))
    if scheme == "int8":
        data = nncf.Dataset(list(sets or []), lambda s: next(iter(s.values())))
        quantized = nncf.quantize(model, data, subset_size=len(sets or []))
        what = "NNCF quantize"
    elif scheme in ("w8", "w4"):
        mode = nncf.CompressWeightsMode.INT8_ASYM if scheme == "w8" else nncf.CompressWeightsMode.INT4_SYM
        quantized = nncf.compress_weights(model, mode=mode, **({} if scheme == "w8" else {"group_size": 32, "ratio": 1.0}))
        what = f"NNCF compress_weights ({mode.name})"
    else:
        return None
    ov.save_model(quantized, str(folder / f"anchor_{scheme}.xml"))
    return what


def _coreml_anchor(scheme: str, src: Path, folder: Path) -> str | None:
    import coremltools as ct
    import coremltools.optimize as cto

    if scheme not in ("w8", "w4"):
        return None
    model = ct.models.MLModel(str(src), skip_model_load=True)
    if scheme == "w8":
        op = cto.coreml.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int8", granularity="per_channel")
    else:
        op = cto.coreml.OpLinearQuantizerConfig(mode="linear_symmetric", dtype="int4", granularity="per_block",
                                                block_size=32)
    quantized = cto.coreml.linear_quantize_weights(model, cto.coreml.OptimizationConfig(global_config=op))
    quantized.save(str(folder / f"anchor_{scheme}.mlpackage"))
    return f"coremltools.optimize linear_quantize_weights ({scheme})"


def table(rows: list[dict[str, Any]]) -> str:
    def f(v: Any, fmt: str) -> str:
        return "-" if v is None else format(v, fmt)

    lines = ["| model | target | scheme | guard | top-1 | cosine | kept float | size | latency float -> quant (ms) | ratio | test acc float -> quant | convert s (float / quant) | vendor quantizer alone s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|---|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['model']} | {r['target']} | {r['scheme']} | {r['error']} |  |  |  |  |  |  |  |  |  |")
            continue
        ratio = r["quant_ms"] / r["float_ms"] if r.get("float_ms") else None
        acc = f"{r['float_acc']:.1%} -> {r['quant_acc']:.1%}" if "quant_acc" in r else "-"
        latency = (f"{r['float_ms']:.3f} -> {r['quant_ms']:.3f}" if r.get("float_ms") is not None
                   else "not run here (no GPU)")
        lines.append(f"| {r['model']} | {r['target']} | {r['scheme']} | {r['guard']} | {f(r['top1'], '.1%')} | "
                     f"{f(r['cos'], '.5f')} | {r['kept']} | {f(r['size'], '.2f')}x | {latency} | "
                     f"{f(ratio, '.2f')}x | {acc} | {r['float_s']:.1f} / {r['quant_s']:.1f} | "
                     f"{f(r.get('anchor_s'), '.1f')} ({r.get('anchor', '')}) |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--targets", default="onnx")
    ap.add_argument("--schemes", default="int8,int8-dynamic,w8,w4")
    ap.add_argument("--models", default=",".join(MODELS))
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    from unframe.converters.registry import BACKENDS

    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.models.split(","):
            model, sample, calib, trained = MODELS[name]()
            for target in args.targets.split(","):
                holds = BACKENDS.get(target).quantize_schemes
                for scheme in args.schemes.split(","):
                    if scheme not in holds:
                        continue
                    rows.append(row(name, target, scheme, model, sample, calib, trained, Path(tmp)))
                    print(rows[-1], flush=True)
    text = table(rows)
    print(text)
    if args.out:
        import onnxruntime

        head = (f"# Quantized artifacts against the float ones\n\n`bench/quantize.py` ({__doc__.splitlines()[0]}),"
                f" run on {time.strftime('%Y-%m-%d')} on a 2-core x86-64 CPU box without a GPU "
                f"({platform.processor() or platform.machine()}), onnxruntime {onnxruntime.__version__}, one "
                "thread pool per runtime at its defaults. Latency: batch 1 (the digits CNN at the samples' batch of 8), "
                "median of 30 after 2 warm-ups each (unframe.validate.latency.paired), float and quantized artifacts in the same runtime, their runs alternating.\n\n")
        args.out.write_text(head + text + "\n")


if __name__ == "__main__":
    main()
