"""ExecuTorch's direct route against the compiler it wraps, and the .pte's latency against
onnxruntime on the same model.

* Conversion time (tiny CNN): unframe's ``convert_from_torch`` (torch.export with the bounded
  dynamic batch, XNNPACK partition, the delegation summary, the kernel check against the
  runtime's registry, the I/O record, the bytes written) against ExecuTorch's own compiler called
  directly on the same module and sample with the same dynamic batch (``torch.export.export`` ->
  ``to_edge_transform_and_lower(..., partitioner=[XnnpackPartitioner()])`` -> ``to_executorch()``
  -> ``.buffer``). Median of ``--repeats`` runs each, run alternately after one warm-up. The
  inputs are prepared as the torch frontend prepares them, before the timing.
* Latency at batch 1, median of 30 runs after 5 warm-ups, per model: the .pte on ExecuTorch's
  runtime through unframe's runner (named numpy feeds) and bare (``method.execute`` on a torch
  tensor), against onnxruntime (default CPU session) on torch.onnx's (dynamo) export of the same
  model at batch 1.

    PYTHONPATH=. .venv/bin/python bench/executorch_direct.py [--repeats 5] [--models cnn,resnet18,...]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "converters" / "backends" / "executorch"))
sys.path.insert(0, str(ROOT / "bench"))


from benchlib import latency_ms as latency  # noqa: E402
from benchlib import median_times  # noqa: E402


# ------------------------------------------------------------------------------------ models --
def tiny_cnn() -> tuple[str, Any, Any]:
    import torch

    class Tiny(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.fc(torch.relu(self.conv(x)).mean((2, 3)))

    torch.manual_seed(0)
    return "tiny CNN (Conv 3->8, ReLU, mean, Linear 8->4; 16x16)", Tiny().eval(), torch.randn(1, 3, 16, 16)


def torchvision_model(name: str) -> tuple[str, Any, Any]:
    import torch
    from benchlib import torchvision_shim

    torchvision_shim()
    import torchvision

    torch.manual_seed(0)
    model = getattr(torchvision.models, name)(weights=None).eval()
    return f"{name} (torchvision, random init; 224x224)", model, torch.randn(1, 3, 224, 224)


def bert_small() -> tuple[str, Any, Any]:
    import torch
    from benchlib import torchvision_shim

    torchvision_shim()
    import transformers

    config = transformers.BertConfig(vocab_size=1000, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                                     intermediate_size=512, max_position_embeddings=128)
    torch.manual_seed(0)
    model = transformers.BertModel(config).eval()
    ids = torch.randint(0, 1000, (1, 32), generator=torch.Generator().manual_seed(1))
    return "BERT-small (HF config: 4 layers, 128 hidden; seq 32)", model, {"input_ids": ids}


MODELS = {"cnn": tiny_cnn, "resnet18": lambda: torchvision_model("resnet18"),
          "mobilenet_v2": lambda: torchvision_model("mobilenet_v2"), "bert": bert_small}


# -------------------------------------------------------------------------- conversion time --
def conversion_case(repeats: int) -> dict[str, Any]:
    import torch
    from et_helpers import prepare
    from executorch.backends.xnnpack.partition.xnnpack_partitioner import XnnpackPartitioner
    from executorch.exir import to_edge_transform_and_lower

    from unframe.converters.backends.executorch.direct import convert_from_torch
    from unframe.converters.backends.executorch.runner import quiet
    from unframe.converters.base import Target

    label, model, sample = tiny_cnn()
    p = prepare(model, sample)  # the frontend's work (binding, naming, the batch probe): not timed
    target = Target("executorch")
    work = Path(tempfile.mkdtemp(prefix="et-bench-"))
    x = torch.randn(3, 3, 16, 16)  # the probe's batch, as unframe traces

    def ours() -> Any:
        return convert_from_torch(model, p.inputs, target, work, p.outputs)

    def anchor() -> bytes:
        with quiet():
            ep = torch.export.export(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=8)},))
            edge = to_edge_transform_and_lower(ep, partitioner=[XnnpackPartitioner()])
            return bytes(edge.to_executorch().buffer)

    ours_s, anchor_s = median_times(ours, anchor, repeats)
    return {"model": label, "ours": ours_s, "anchor": anchor_s}


# ------------------------------------------------------------------------------------ latency --
def latency_case(make: Any) -> dict[str, Any]:
    import torch
    from et_helpers import prepare

    from unframe.converters.backends.executorch.direct import convert_from_torch
    from unframe.converters.base import Target
    from unframe.route import get_backend

    label, model, sample = make()
    p = prepare(model, sample)
    target = Target("executorch")
    started = time.perf_counter()
    artifact = convert_from_torch(model, p.inputs, target, Path(tempfile.mkdtemp(prefix="et-bench-")), p.outputs)
    seconds = time.perf_counter() - started
    runner = get_backend("executorch").runner(artifact, target)
    feed = p.feeds[0]
    via_runner = latency(lambda: runner.run(feed))
    tensors = [torch.from_numpy(feed[n]) for n in p.inputs.names]
    bare = latency(lambda: runner._method.execute(tensors))
    ort_ms = onnx_latency(model, sample, feed)
    d = artifact.metadata["delegation"]
    return {"model": label, "convert_s": seconds, "runner": via_runner, "bare": bare, "ort": ort_ms,
            "xnnpack": f"{d['delegated_nodes']}/{d['delegated_nodes'] + d['portable_nodes']}",
            "pte_bytes": len(artifact.model)}


def onnx_latency(model: Any, sample: Any, feed: dict[str, np.ndarray]) -> float:
    """onnxruntime on torch.onnx's (dynamo) export of the same model, called directly."""
    import onnxruntime as ort
    import torch

    args, kwargs = ((), sample) if isinstance(sample, dict) else ((sample,), {})
    program = torch.onnx.export(model, args, kwargs=kwargs, dynamo=True, verbose=False)
    session = ort.InferenceSession(program.model_proto.SerializeToString(), providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    fed = dict(zip(names, feed.values(), strict=True))
    return latency(lambda: session.run(None, fed))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--models", default=",".join(MODELS))
    args = parser.parse_args()
    from unframe import quiet

    quiet.quiet_tensorflow_env()
    case = conversion_case(args.repeats)
    print("| model | unframe convert_from_torch (s) | ExecuTorch compiler direct (s) | ratio |")
    print("|---|---|---|---|")
    print(f"| {case['model']} | {case['ours']:.3f} | {case['anchor']:.3f} | {case['ours'] / case['anchor']:.2f} |",
          flush=True)
    print()
    print("| model | convert (s) | XNNPACK nodes | .pte bytes | .pte via runner p50 (ms) | .pte bare execute p50 (ms) "
          "| onnxruntime p50 (ms) | ExecuTorch / onnxruntime |")
    print("|---|---|---|---|---|---|---|---|")
    for name in args.models.split(","):
        r = latency_case(MODELS[name])
        print(f"| {r['model']} | {r['convert_s']:.1f} | {r['xnnpack']} | {r['pte_bytes']:,} | {r['runner']:.3f} | "
              f"{r['bare']:.3f} | {r['ort']:.3f} | {r['bare'] / r['ort']:.2f} |", flush=True)


if __name__ == "__main__":
    main()
