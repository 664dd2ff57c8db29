"""The public-architecture set's vision models at int8 on ONNX and OpenVINO (issue 38): does the
accuracy guard pass, with how many layers kept in float, at what size?

    .venv/bin/python bench/quantize_archs.py [--targets onnx,openvino] [--scheme int8] [--only NAME ...]
        [--family F ...] [--journal bench/out/quantize_archs.jsonl] [--out docs/benchmarks/quantize_archs.md]

Each vision model of model_zoo/build/arch_models.py (image inputs: torchvision, timm, Hugging Face
vision, keras.applications, the subclassed Keras CNN; the ``--heavy`` siblings left out), in a
child process of its own: built (seeded, outputs of order 1), then one
``unframe.convert(model, to=["onnx", "openvino"], quantize="int8", sample_inputs=samples)``: one
export, a quantized branch per target, each judged by the accuracy guard (top-1 agreement >= 98 %
for classifier-like outputs, cosine >= 0.99 for every float output, on the held-out fifth of the
calibration sets) in the artifact's own runtime, with the sensitivity pass keeping the costliest
layers in float where it fails. No ``--calibration`` is given: unframe draws its calibration sets
as parity draws feeds and says so; the guard then proves that the quantized artifact follows the
float model on such inputs, not that it classifies images (the weights are random).

A target either passes (its guard figures, layers kept in float, size against the float
weights) or fails with unframe's exit code and message.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
import architectures as arch_bench  # noqa: E402

VISION = ("torchvision-classification", "torchvision-segmentation", "torchvision-detection",
          "torchvision-optical-flow", "timm-classification", "hf-vision", "keras-applications",
          "keras-subclassed")


SUFFIX = {"onnx": ".onnx", "openvino": ".xml", "coreml": ".mlpackage", "litert": ".tflite",
          "executorch": ".pte", "tensorrt": ".engine"}


def is_vision(arch: Any, name: str) -> bool:
    if arch.family == "keras-subclassed":
        return "cnn" in name
    return arch.family in VISION


def settle_batch_norms(model: Any, samples: Any, framework: str, seed: int = 1) -> int:
    """Each batch norm's statistics measured on 64 drawn inputs of the samples' shape (normal, as
    unframe draws them), as a trained network's match its activations; the number of layers
    set. A seeded network keeps the initial statistics (mean 0, variance 1) whatever its
    activations are: MobileNetV3, EfficientNet and RegNetY then amplify an input change as small
    as an int8 step (cosine 0.76-0.93 with the input merely rounded), which no trained one does
    (0.998 once settled)."""
    import numpy as np

    first = samples[0] if isinstance(samples, (tuple, list)) else samples
    while isinstance(first, (tuple, list)):
        first = first[0]
    shape = (8, *tuple(np.asarray(first.numpy() if hasattr(first, "numpy") else first).shape[1:]))
    rng = np.random.default_rng(seed)
    batches = [rng.standard_normal(shape).astype(np.float32) for _ in range(8)]
    if framework == "torch":
        import torch

        norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
        model.eval()  # only the batch norms learn their statistics (a detector in training mode wants targets)
        for m in norms:
            m.reset_running_stats()
            m.momentum = None  # a running average over the batches
            m.train()
        with torch.no_grad():
            for x in batches:
                model(torch.from_numpy(x))
        model.eval()
        return len(norms)
    import keras

    norms = [layer for layer in model._flatten_layers() if isinstance(layer, keras.layers.BatchNormalization)]
    for layer in norms:
        layer.momentum = 0.0  # the statistics of the one batch below
    if norms:
        model(np.concatenate(batches), training=True)
    return len(norms)


TRAINABLE = ("torchvision-classification", "timm-classification", "torchvision-segmentation")
TRAIN_STEPS = 150
CALIBRATION_SETS = 40  # as many as unframe draws without --calibration: 32 calibrate, 8 judge


def digits_images(size: int, channels: int = 3) -> tuple[Any, Any, Any]:
    """scikit-learn's digits (1797 8x8 images, 10 classes) upscaled to ``size`` x ``size``
    (bilinear), in [0, 1] like the zoo's sample images, the same on every channel; and their labels
    and per-pixel masks (0 background, else 1 + digit % 4 where the stroke is brighter than 0.35)."""
    import numpy as np
    import torch
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    small = torch.tensor((images / 16.0).astype(np.float32)).reshape(-1, 1, 8, 8)
    big = torch.nn.functional.interpolate(small, size=(size, size), mode="bilinear", align_corners=False)
    big = big.clamp(0, 1).repeat(1, channels, 1, 1)
    label = torch.tensor(labels)
    mask = torch.where(big[:, 0] > 0.35, 1 + (label % 4).view(-1, 1, 1), torch.zeros((), dtype=torch.long))
    return big, label, mask


def train_on_digits(model: Any, samples: Any, family: str, steps: int = TRAIN_STEPS, seed: int = 0
                    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """Train the seeded model briefly on ``digits_images`` at its samples' size (``steps`` of Adam,
    batches of 32 from the first 1400 digits, a little noise added; per-pixel masks for a
    segmentation model's ``out``; then its batch norms' statistics measured on those 1400), as
    users' models are trained; what it scores on the 397 it
    never saw, and ``CALIBRATION_SETS`` calibration sets of the samples' batch drawn from those
    unseen digits (the guard judges the last fifth)."""
    import inspect

    import torch

    first = samples[0]
    batch, channels, size = first.shape[0], first.shape[1], first.shape[-1]
    images, labels, masks = digits_images(size, channels)
    segmentation = family == "torchvision-segmentation"
    gen = torch.Generator().manual_seed(seed)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.is_floating_point()], lr=1e-3)
    started = time.perf_counter()
    model.train()
    for _ in range(steps):
        pick = torch.randint(0, 1400, (32,), generator=gen)
        x = (images[pick] + 0.05 * torch.randn(images[pick].shape, generator=gen)).clamp(0, 1)
        out = model(x)
        logits = out["out"] if isinstance(out, dict) else out
        loss = torch.nn.functional.cross_entropy(logits, masks[pick] if segmentation else labels[pick])
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
    # the batch norms' statistics measured anew on the trained weights (the seeded build left them
    # a cumulative average, which would mix in every step's weights)
    norms = [m for m in model.modules() if isinstance(m, torch.nn.modules.batchnorm._BatchNorm)]
    model.eval()
    for m in norms:
        m.reset_running_stats()
        m.momentum = None
        m.train()
    with torch.no_grad():
        for i in range(0, 1400, 100):
            model(images[i:i + 100])
    model.eval()
    with torch.no_grad():
        out = model(images[1400:])
        logits = out["out"] if isinstance(out, dict) else out
        truth = masks[1400:] if segmentation else labels[1400:]
        accuracy = float((logits.argmax(1) == truth).float().mean())
    arg = next(iter(inspect.signature(model.forward).parameters))
    sets = [{arg: images[1400 + batch * i:1400 + batch * (i + 1)].numpy()} for i in range(CALIBRATION_SETS)]
    return ({"steps": steps, "seconds": round(time.perf_counter() - started, 1), "loss": round(float(loss.detach()), 4),
             "pixel accuracy" if segmentation else "accuracy": round(accuracy, 4)}, sets)


def run_model(name: str, targets: list[str], scheme: str, settle: bool = False, trained: bool = False
              ) -> dict[str, Any]:
    import unframe
    from unframe.api import PartialFailure
    from unframe.errors import UnframeError

    archs = arch_bench._archs()
    arch = archs.ARCHS[name]
    record: dict[str, Any] = {"name": name, "family": arch.family, "framework": arch.framework,
                              "scheme": scheme, "targets": {}}
    model, samples = archs.build_checked(name)
    if settle:
        record["settled_batch_norms"] = settle_batch_norms(model, samples, arch.framework)
    calibration: dict[str, Any] = {}
    if trained:
        if arch.family not in TRAINABLE:
            raise SystemExit(f"--trained covers {', '.join(TRAINABLE)}, not {arch.family}")
        record["trained"], calibration["calibration"] = train_on_digits(model, samples, arch.family)
    folder = Path(tempfile.mkdtemp(prefix="quant-archs-"))
    started = time.perf_counter()
    try:
        # one target writes a file, several a folder of them
        output = folder if len(targets) > 1 else folder / f"model{SUFFIX.get(targets[0], '')}"
        multi = unframe.convert(model, to=targets if len(targets) > 1 else targets[0], sample_inputs=samples,
                                quantize=scheme, locate=False, output=output, **calibration, **arch.options)
        if len(targets) == 1:  # one result, as several give them
            multi = type("One", (), {"results": {targets[0]: multi}, "errors": {}})()
    except PartialFailure as exc:
        multi = exc.result
    except UnframeError as exc:  # before the fork: every target alike
        record["seconds"] = time.perf_counter() - started
        for t in targets:
            record["targets"][t] = {"ok": False, "exit": exc.exit_code, "message": " ".join(str(exc).split())[:600]}
        return record
    record["seconds"] = time.perf_counter() - started
    for t in targets:
        if t in multi.results:
            guard = multi.results[t].report.stages[-1]
            record["targets"][t] = {
                "ok": bool(guard), "exit": 0, "guard": guard.status,
                "top1": getattr(guard, "top1", None),
                "cos": min(guard.cosine.values()) if getattr(guard, "cosine", None) else None,
                "kept": list(getattr(guard, "kept_float", []) or []),
                "det": [d.agreement for d in getattr(guard, "detections", [])],
                "tied_rows": getattr(guard, "tied_rows", 0),
                "quantizer": getattr(guard, "quantizer", ""),
                "weak": list(guard.weak),
                "size": (guard.size[1] / guard.size[0]) if getattr(guard, "size", None) else None,
                "notes": [n for n in multi.results[t].notes if "quantiz" in n or "float" in n][:4]}
        else:
            err = multi.errors[t]
            record["targets"][t] = {"ok": False, "exit": err.exit_code, "message": " ".join(str(err).split())[:600]}
    return record


def run_child(name: str, targets: list[str], scheme: str, timeout: float, settle: bool = False,
              trained: bool = False) -> dict[str, Any]:
    return arch_bench.run_child(name, timeout, script=Path(__file__),
                                extra=["--targets", ",".join(targets), "--scheme", scheme]
                                + (["--settle-bn"] if settle else []) + (["--trained"] if trained else []))


def at_floor(entry: dict[str, Any]) -> bool:
    """A failure whose float model fails the guard on int8-rounded inputs (validate.accuracy.input_floor)."""
    message = entry.get("message", "")  # cut at 300 characters before 2026-11-30: the floor's clause may be cut
    return not entry.get("ok", True) and ("merely rounded to int8 steps" in message
                                          or "the float model itself fails" in message)


def report(records: list[dict[str, Any]], targets: list[str], header: str) -> str:
    lines = [header, "", "| family | models | " + " | ".join(targets) + " |", "|---|---:|" + "---|" * len(targets)]
    by_family: dict[str, list[dict[str, Any]]] = defaultdict(list)
    for r in records:
        by_family[r.get("family", "?")].append(r)
    totals = {t: [0, 0, 0] for t in targets}
    for family in sorted(by_family):
        rows = by_family[family]
        cells = []
        for t in targets:
            ok = sum(1 for r in rows if r.get("targets", {}).get(t, {}).get("ok"))
            weak = sum(1 for r in rows if r.get("targets", {}).get(t, {}).get("ok")
                       and r.get("targets", {}).get(t, {}).get("weak"))
            floor = sum(1 for r in rows if at_floor(r.get("targets", {}).get(t, {})))
            notes = [f"{weak} weak"] * bool(weak) + [f"{floor} at the floor"] * bool(floor)
            cells.append(f"{ok}/{len(rows)}" + (f" ({', '.join(notes)})" if notes else ""))
            totals[t][0] += ok
            totals[t][1] += len(rows)
            totals[t][2] += floor
        lines.append(f"| {family} | {len(rows)} | " + " | ".join(cells) + " |")
    lines.append(f"| **all** | {len(records)} | " + " | ".join(
        f"**{ok}/{n} ({100 * ok / max(n, 1):.0f} %)**" for ok, n, _ in totals.values()) + " |")
    lines.append("| **all but the floor** | | " + " | ".join(
        f"**{ok}/{n - fl} ({100 * ok / max(n - fl, 1):.0f} %)**" for ok, n, fl in totals.values()) + " |")
    lines.append("")
    lines.append("A weak pass: the guard passed, but says what it could not judge (a detector whose kept "
                 "scores all tie within one int8 step: judged by its score levels only). At the floor: "
                 "the float model itself fails the guard with its inputs merely rounded to int8 steps "
                 "(it amplifies changes that small, and int8 makes them at every activation).")
    lines += ["", "| model | family | " + " | ".join(f"{t}: guard (top-1, cos, det), kept, size" for t in targets) + " | s |",
              "|---|---|" + "---|" * len(targets) + "---:|"]
    for r in sorted(records, key=lambda r: (r.get("family", ""), r["name"])):
        cells = []
        for t in targets:
            e = r.get("targets", {}).get(t)
            if e is None:
                cells.append(r.get("error", "")[:80])
            elif e["ok"]:
                top1 = f"{e['top1']:.0%}" if e.get("top1") is not None else "-"
                cos = f"{e['cos']:.4f}" if e.get("cos") is not None else "-"
                size = f"{e['size']:.2f}x" if e.get("size") else "-"
                det = ", ".join(f"{d:.0%}" for d in e.get("det") or []) or "-"
                ties = f" ({e['tied_rows']} rows tied)" if e.get("tied_rows") else ""
                weak = " WEAK" if e.get("weak") else ""
                by = f", by {e['quantizer']}" if e.get("quantizer") else ""
                cells.append(f"passed{weak} ({top1}{ties}, {cos}, {det}), {len(e['kept'])} kept, {size}{by}")
            else:
                cells.append(f"exit {e['exit']}: {e.get('message', '')[:110]}")
        lines.append(f"| {r['name']} | {r.get('family', '?')} | " + " | ".join(cells) + f" | {r.get('wall_s', 0):.0f} |")
    return "\n".join(lines) + "\n"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--targets", default="onnx,openvino")
    parser.add_argument("--scheme", default="int8")
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--family", nargs="*", default=[])
    parser.add_argument("--timeout", type=float, default=1800.0)
    parser.add_argument("--journal", type=Path, default=ROOT / "bench" / "out" / "quantize_archs.jsonl")
    parser.add_argument("--rerun", action="store_true")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--report-only", action="store_true")
    parser.add_argument("--settle-bn", action="store_true",
                        help="measure each batch norm's statistics on drawn inputs first (settle_batch_norms)")
    parser.add_argument("--trained", action="store_true",
                        help=f"train each model {TRAIN_STEPS} steps on scikit-learn's digits first and calibrate "
                             "on digits it never saw (train_on_digits; the torch classifiers and segmenters)")
    args = parser.parse_args()
    targets = args.targets.split(",")
    if args.worker:
        print(json.dumps(run_model(args.worker, targets, args.scheme, args.settle_bn, args.trained)))
        return
    archs = arch_bench._archs()
    names = [n for n, a in archs.ARCHS.items() if is_vision(a, n) and not a.heavy
             and (not args.only or n in args.only) and (not args.family or a.family in args.family)
             and (not args.trained or a.family in TRAINABLE)]
    families = {n: archs.ARCHS[n].family for n in names}
    args.journal.parent.mkdir(parents=True, exist_ok=True)
    done = {} if not args.journal.is_file() else {
        r["name"]: r for r in map(json.loads, args.journal.read_text().splitlines()) if r}
    if not args.report_only:
        for name in arch_bench.interleave(names, families):
            if name in done and not args.rerun:
                continue
            record = run_child(name, targets, args.scheme, args.timeout, args.settle_bn, args.trained)
            record.setdefault("family", families[name])
            done[name] = record
            with args.journal.open("a") as f:
                f.write(json.dumps(record) + "\n")
            status = record.get("error") or ", ".join(
                f"{t}: {'ok' if e['ok'] else 'exit ' + str(e['exit'])}" for t, e in record["targets"].items())
            print(f"{name}: {status} ({record.get('wall_s', 0):.0f} s)", flush=True)
    records = [done[n] for n in names if n in done]
    load = os.getloadavg()
    header = (f"Written {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())} on {platform.node()} "
              f"({os.cpu_count()} CPUs, load {load[0]:.1f}); --quantize {args.scheme}; {len(records)} models"
              + ("; batch norms settled on drawn inputs first" if args.settle_bn else "")
              + (f"; each model trained {TRAIN_STEPS} steps on scikit-learn's digits, calibrated on unseen digits"
                 if args.trained else "") + ".")
    text = report(records, targets, header)
    if args.out:
        args.out.write_text(text)
    print(text)


if __name__ == "__main__":
    main()
