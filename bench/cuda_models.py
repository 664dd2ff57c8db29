"""Models that live on a CUDA GPU, converted the way a training script does it:
``unframe.convert(model_on_cuda, to=..., sample_inputs=tensors_on_cuda)``.

    python bench/cuda_models.py [--only NAME ...] [--targets onnx coreml] [--journal FILE]

Needs a CUDA device; nothing here runs in ``make test`` (tests/converters/frontends/
test_torch_live.py covers on the CPU what can be). For each model of the public-architecture set
named in MODELS (model_zoo/build/arch_models.py: seeded, perturbed, outputs of order one), plus an
LSTM (cuDNN's RNN) and an MLP under ``set_float32_matmul_precision("high")``:

- the model and its samples are moved to the GPU and converted; each stage's parity (the model on
  the GPU against onnxruntime on the CPU, then the MIL evaluator for CoreML) is reported with its
  largest error, the output's scale and the allowed error;
- TF32's own effect: the model's outputs on the GPU with the script's settings (cuDNN convolutions
  use TF32 by default on Ampere and later) against full float32, in the same units: how far a
  reference computed with TF32 would have been from the graph;
- what must not change: the model's device, its train/eval flag, every parameter and buffer
  bit for bit, the CUDA RNG state and the script's float32 settings.

Then a Lightning fit on the GPU with ``LightningConvert`` converting at every epoch's end (its
worker converts CPU snapshots), against the same fit without the callback: the outcomes, and
whether the trained weights are bit for bit the same (deterministic algorithms on).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import sys
import tempfile
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT), str(ROOT / "model_zoo" / "build")]
os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")  # deterministic cuBLAS, for the fit

MODELS = ["tv_resnet18", "tv_mobilenet_v3_small", "tv_convnext_tiny", "timm_efficientnet_b0",
          "tv_deeplabv3_mobilenet_v3_large", "hf_bert", "hf_llama", "hf_vit", "lstm", "mlp_high"]


# -- models ------------------------------------------------------------------------------------

def _own(name: str) -> tuple[Any, Any]:
    import torch
    from torch import nn

    torch.manual_seed(4)
    if name == "lstm":
        class Tagger(nn.Module):
            def __init__(self) -> None:
                super().__init__()
                self.lstm = nn.LSTM(16, 48, num_layers=2, batch_first=True)
                self.head = nn.Linear(48, 5)

            def forward(self, x: torch.Tensor) -> torch.Tensor:
                return self.head(self.lstm(x)[0]) * 4

        return Tagger().eval(), torch.randn(2, 20, 16)
    mlp = nn.Sequential(nn.Linear(256, 512), nn.GELU(), nn.Linear(512, 512), nn.GELU(), nn.Linear(512, 10))
    return mlp.eval(), torch.randn(8, 256) * 2


def build(name: str) -> tuple[Any, Any]:
    if name in ("lstm", "mlp_high"):
        return _own(name)
    import arch_models

    return arch_models.build_checked(name)


def to_device(tree: Any, device: str) -> Any:
    import torch
    import torch.utils._pytree as pytree

    return pytree.tree_map(lambda x: x.to(device) if isinstance(x, torch.Tensor) else x, tree)


def call(model: Any, samples: Any) -> list[Any]:
    import torch
    import torch.utils._pytree as pytree

    with torch.no_grad():
        if isinstance(samples, dict):
            out = model(**samples)
        elif isinstance(samples, (tuple, list)):
            out = model(*samples)
        else:
            out = model(samples)
    return [t.float().cpu() for t in pytree.tree_leaves(out) if isinstance(t, torch.Tensor) and t.is_floating_point()]


def fingerprint(model: Any) -> str:
    h = hashlib.sha256()
    for name, t in [*model.named_parameters(), *model.named_buffers()]:
        h.update(name.encode())
        h.update(str(t.device).encode())
        h.update(t.detach().cpu().contiguous().view(-1).view(dtype=__import__("torch").uint8).numpy().tobytes())
    return h.hexdigest()


def settings() -> tuple[Any, ...]:
    from unframe.converters.frontends._torch.preserve import Float32Settings

    found = Float32Settings.capture()
    return tuple(sorted(found.strings.items())) + tuple(v for _, v in found.legacy)


# -- one model ---------------------------------------------------------------------------------

def one(name: str, targets: list[str], folder: Path, device: str = "cuda") -> dict[str, Any]:
    import torch

    import unframe
    from unframe.api import PartialFailure
    from unframe.converters.frontends._torch.preserve import full_float32

    record: dict[str, Any] = {"model": name}
    model, samples = build(name)
    if name == "mlp_high":
        torch.set_float32_matmul_precision("high")  # what training scripts set for speed
    try:
        model, samples = model.to(device), to_device(samples, device)
        script = call(model, samples)  # TF32 where the script allows it
        with full_float32():
            full = call(model, samples)
        scale = max(float(t.abs().max()) for t in full)
        record["scale"] = scale
        record["tf32_effect"] = max(float((a - b).abs().max()) for a, b in zip(script, full, strict=True))
        before = (fingerprint(model), model.training, torch.cuda.get_rng_state_all(), settings())
        start = time.perf_counter()
        try:
            result = unframe.convert(model, to=targets if len(targets) > 1 else targets[0], sample_inputs=samples,
                                     output=folder / name if len(targets) > 1 else None)
        except PartialFailure as exc:  # a target refused (exit 4 with blockers): the others stand
            result = exc.result
            record["refused"] = {t: f"exit {e.exit_code}: {e.message[:200]}" for t, e in result.errors.items()}
        record["seconds"] = round(time.perf_counter() - start, 2)
        results = result.results if len(targets) > 1 else {targets[0]: result}
        record["stages"] = {}
        for target, res in results.items():
            for stage in res.report.stages:
                worst = max(stage.outputs, key=lambda o: (o.max_abs or 0) / max(o.atol + o.rtol * o.scale, 1e-30),
                            default=None)
                record["stages"][f"{target}:{stage.stage}"] = {
                    "status": stage.status, "candidate": stage.candidate,
                    "max_abs": None if worst is None else worst.max_abs,
                    "allowed": None if worst is None else worst.atol + worst.rtol * worst.scale}
        record["notes"] = sorted({n for r in results.values() for n in r.notes if "float32" in n or "CUDA" in n})
        after = (fingerprint(model), model.training, torch.cuda.get_rng_state_all(), settings())
        record["unchanged"] = {
            "device": next(model.parameters()).device.type == device,
            "weights": before[0] == after[0], "train flag": before[1] == after[1],
            "cuda rng": all(bool((a == b).all()) for a, b in zip(before[2], after[2], strict=True)),
            "float32 settings": before[3] == after[3]}
        record["passed"] = all(s["status"] == "passed" for s in record["stages"].values()) and "refused" not in record
    finally:
        if name == "mlp_high":
            torch.set_float32_matmul_precision("highest")
    return record


# -- Lightning on the GPU ---------------------------------------------------------------------

def lightning_fit(folder: Path, accelerator: str = "gpu") -> dict[str, Any]:
    import lightning.pytorch as L
    import torch
    from bench_models import ConvClassifier

    from unframe.callbacks.lightning import LightningConvert

    def fit(with_callback: bool) -> tuple[Any, list[Any], float]:
        L.seed_everything(0, workers=True)
        data = torch.utils.data.TensorDataset(torch.randn(512, 3, 32, 32), torch.randint(0, 4, (512,)))
        net = ConvClassifier()
        convert = LightningConvert(["onnx", "coreml"] if _has("coremltools") else "onnx") if with_callback else None
        trainer = L.Trainer(max_epochs=3, accelerator=accelerator, devices=1, deterministic=True,
                            default_root_dir=folder / ("with" if with_callback else "without"),
                            callbacks=[convert] if convert else [], logger=False, enable_checkpointing=False,
                            enable_progress_bar=False, enable_model_summary=False)
        start = time.perf_counter()
        trainer.fit(net, torch.utils.data.DataLoader(data, batch_size=64))
        return net, (convert.outcomes if convert else []), time.perf_counter() - start

    plain, _, plain_s = fit(False)
    watched, outcomes, watched_s = fit(True)
    return {"fit_seconds": [round(plain_s, 2), round(watched_s, 2)],
            "weights_same": fingerprint(plain) == fingerprint(watched),
            "device": next(watched.parameters()).device.type,
            "outcomes": [{"tag": o.tag, "ok": o.ok, "error": o.error,
                          "targets": {t: {"passed": v.passed, "max_abs": v.max_abs, "error": v.error[:200]}
                                      for t, v in o.targets.items()}} for o in outcomes]}


def _has(module: str) -> bool:
    import importlib.util

    return importlib.util.find_spec(module) is not None


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--targets", nargs="*")
    parser.add_argument("--journal", type=Path)
    parser.add_argument("--no-fit", action="store_true")
    parser.add_argument("--device", default="cuda", help="cpu: try the script itself on a machine without a GPU")
    parser.add_argument("--script-precision", action="store_true",
                        help="the before picture: unframe runs the model with the script's float32 settings")
    args = parser.parse_args()
    import logging

    logging.basicConfig(level=logging.WARNING, format="%(name)s: %(message)s")  # the callback's outcomes
    if args.device == "cpu":  # the pinned CPU torch needs the shim for torchvision (bench/benchlib.py)
        from benchlib import torchvision_shim

        torchvision_shim()
    import torch

    if args.script_precision:
        from unframe.converters.frontends._torch.preserve import Float32Settings

        Float32Settings.full = lambda self: None  # type: ignore[method-assign]
    if args.device == "cuda" and not torch.cuda.is_available():
        print("no CUDA device: nothing to measure here (this bench is for a machine with a GPU)")
        return 2
    targets = args.targets or (["onnx", "coreml"] if _has("coremltools") else ["onnx"])
    if args.device == "cuda":
        print(f"device: {torch.cuda.get_device_name()} "
              f"(compute {'.'.join(map(str, torch.cuda.get_device_capability()))})", flush=True)
    print(f"torch {torch.__version__}, targets {targets}", flush=True)
    records = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in args.only or MODELS:
            try:
                record = one(name, targets, Path(tmp), args.device)
            except Exception as exc:  # noqa: BLE001 - a bench reports and goes on
                record = {"model": name, "error": f"{type(exc).__name__}: {exc}"[:600],
                          "trace": traceback.format_exc()[-1500:]}
            records.append(record)
            print(json.dumps(record, default=str), flush=True)
            if args.journal:
                with args.journal.open("a") as f:
                    f.write(json.dumps(record, default=str) + "\n")
        if not args.no_fit:
            try:
                fit = lightning_fit(Path(tmp), "gpu" if args.device == "cuda" else "cpu")
            except Exception as exc:  # noqa: BLE001
                fit = {"error": f"{type(exc).__name__}: {exc}"[:600], "trace": traceback.format_exc()[-1500:]}
            print(json.dumps({"lightning": fit}, default=str), flush=True)
            if args.journal:
                with args.journal.open("a") as f:
                    f.write(json.dumps({"lightning": fit}, default=str) + "\n")
    print("\nmodel | passed | stages (largest error / allowed) | TF32 effect / scale | unchanged | s")
    for r in records:
        if "error" in r:
            print(f"{r['model']} | ERROR | {r['error'][:160]}")
            continue
        stages = ", ".join(f"{k} {v['status']} {v['max_abs'] or 0:.2g}/{v['allowed'] or 0:.2g}"
                           for k, v in r["stages"].items())
        bad = [k for k, v in r["unchanged"].items() if not v]
        print(f"{r['model']} | {r['passed']} | {stages} | {r['tf32_effect']:.2g} / {r['scale']:.3g} | "
              f"{'all' if not bad else 'CHANGED: ' + ', '.join(bad)} | {r['seconds']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
