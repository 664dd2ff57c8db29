"""fp16 as a property of an ONNX graph: unframe's ``--precision fp16`` against onnxconverter-common's
``convert_float_to_float16(keep_io_types=True)``, the converter users reach for, on models of the
public-architecture zoo (built here with seeded, perturbed weights, exported to float32 ONNX by
unframe first).

For each model and each tool: the share of node outputs computed in fp16, the largest error
against the float32 graph relative to the output's scale (onnxruntime, the model's own sample
inputs), whether any output went non-finite, and the wall time of the conversion. unframe's time
includes its range analysis, the rounding planner and its parity check (the anchor checks
nothing); the ratio is unframe over the anchor.

    PYTHONPATH=. .venv/bin/python bench/precision.py [--only tv_efficientnet_b0 ...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import torchvision_shim  # noqa: E402

MODELS = ["tv_resnet18", "tv_mobilenet_v3_small", "tv_efficientnet_b0", "tv_inception_v3",
          "tv_deeplabv3_mobilenet_v3_large", "timm_mobilevit_xxs", "hf_bert", "hf_vit"]


def _feeds(model_path: Path, samples: object) -> dict[str, np.ndarray]:
    import onnx

    names = [i.name for i in onnx.load(str(model_path), load_external_data=False).graph.input]
    values = list(samples.values()) if isinstance(samples, dict) else list(samples)
    return {n: np.asarray(v.detach().numpy() if hasattr(v, "detach") else v) for n, v in zip(names, values,
                                                                                            strict=False)}


def _run(path: Path | bytes, feeds: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    import onnxruntime as ort

    sess = ort.InferenceSession(str(path) if isinstance(path, Path) else path, providers=["CPUExecutionProvider"])
    names = [o.name for o in sess.get_outputs()]
    return dict(zip(names, sess.run(None, feeds), strict=True))


def _error(ref: dict[str, np.ndarray], got: dict[str, np.ndarray]) -> tuple[float, bool]:
    worst, nonfinite = 0.0, False
    for name, a in ref.items():
        a, b = np.asarray(a, np.float64), np.asarray(got[name], np.float64)
        if a.dtype.kind != "f":
            continue
        finite = np.isfinite(a)
        nonfinite |= bool(np.any(finite & ~np.isfinite(b)))
        both = finite & np.isfinite(b)
        scale = float(np.abs(a[finite]).max()) if np.any(finite) else 0.0
        if np.any(both) and scale > 0:
            worst = max(worst, float(np.abs(a - b)[both].max()) / scale)
    return worst, nonfinite


def _fp16_share(proto: object) -> float:
    import onnx

    inferred = onnx.shape_inference.infer_shapes(proto)
    kinds = Counter(v.type.tensor_type.elem_type for v in inferred.graph.value_info)
    floats = kinds[onnx.TensorProto.FLOAT] + kinds[onnx.TensorProto.FLOAT16]
    return kinds[onnx.TensorProto.FLOAT16] / floats if floats else 0.0


def measure(name: str, folder: Path) -> dict[str, object]:
    import arch_models
    import onnx
    from onnxconverter_common import float16

    import unframe

    model, samples = arch_models.build_checked(name)
    src = folder / f"{name}.onnx"
    unframe.convert(model, to="onnx", sample_inputs=samples, output=str(src), force=True)
    feeds = _feeds(src, samples)
    ref = _run(src, feeds)

    started = time.perf_counter()
    ours = unframe.convert(str(src), to="onnx", precision="fp16", sample_inputs=feeds,
                           output=str(folder / f"{name}.fp16.onnx"), force=True)
    ours_s = time.perf_counter() - started
    kept = next((n.split(" node(s)")[0] for n in ours.flow.notes if "kept in float32" in n), "0")
    ours_proto = onnx.load(str(folder / f"{name}.fp16.onnx"))
    ours_err, ours_inf = _error(ref, _run(folder / f"{name}.fp16.onnx", feeds))

    started = time.perf_counter()
    anchor = float16.convert_float_to_float16(onnx.load(str(src)), keep_io_types=True)
    anchor_s = time.perf_counter() - started
    try:
        anchor_err, anchor_inf = _error(ref, _run(anchor.SerializeToString(), feeds))
    except Exception as exc:  # noqa: BLE001 - the anchor's graph onnxruntime refuses
        anchor_err, anchor_inf = float("nan"), f"onnxruntime refused it: {str(exc).splitlines()[0][:80]}"
    return {"model": name, "ours_share": _fp16_share(ours_proto), "ours_err": ours_err, "ours_inf": ours_inf,
            "kept": kept, "ours_s": ours_s, "anchor_share": _fp16_share(anchor), "anchor_err": anchor_err,
            "anchor_inf": anchor_inf, "anchor_s": anchor_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", nargs="*", default=MODELS)
    args = parser.parse_args()
    torchvision_shim()
    rows = []
    with tempfile.TemporaryDirectory(prefix="unframe-precision-") as tmp:
        for name in args.only:
            row = measure(name, Path(tmp))
            rows.append(row)
            print(row, flush=True)
    print()
    print("| model | fp16 share (unframe / anchor) | largest err / scale (unframe / anchor) | non-finite (unframe / anchor) "
          "| nodes the planner kept | time s (unframe incl. parity / anchor) | ratio |")
    print("|---|---|---|---|---:|---|---:|")
    for r in rows:
        print(f"| {r['model']} | {r['ours_share']:.0%} / {r['anchor_share']:.0%} | {r['ours_err']:.3g} / "
              f"{r['anchor_err']:.3g} | {r['ours_inf']} / {r['anchor_inf']} | {r['kept']} | {r['ours_s']:.2f} / "
              f"{r['anchor_s']:.2f} | {r['ours_s'] / max(r['anchor_s'], 1e-9):.1f}x |")


if __name__ == "__main__":
    main()
