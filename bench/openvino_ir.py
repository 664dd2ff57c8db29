"""OpenVINO backend (issue 37): conversion time against OpenVINO's own converter, and the IR's
latency against onnxruntime on the same model.

1. Conversion time, a tiny CNN (Conv 3->8, ReLU, mean, Linear 8->4; torch, seeded) and
   torchvision's ResNet-18 (random weights), each side timed ``--reps`` times, alternating, median:
   - ONNX file -> IR: unframe's backend stage (``OpenVINOBackend.check`` + ``convert``: the ONNX
     file for OpenVINO, its ONNX frontend, the CPU plugin's query_model, save with fp16 weights)
     against ``openvino.convert_model(onnx) + openvino.save_model`` called directly; twice: as
     timed after the warm-up (the plugin's answers for these ops remembered, query_model not
     asked again), with them forgotten in memory but kept on disk (``unframe.cache``: a new
     process's first model), and forgotten altogether before each run (query_model asked);
   - the commands, a new process each: ``unframe convert x.onnx --to openvino --no-validate``
     against OpenVINO's own ``ovc x.onnx`` (with unframe's cache, and with it off);
   - torch -> IR through ONNX, the whole route without parity (``unframe.convert(...,
     validate=False)``) against ``torch.onnx.export(dynamo=True)`` + ``convert_model`` + ``save_model``;
   - direct torch route: ``direct.convert_from_torch`` (torch.export, OpenVINO's PyTorch frontend,
     query_model, save, read back) against ``torch.export.export`` + ``convert_model`` +
     ``save_model``.
2. Latency, batch 1, median of 30 runs after 5 warm-ups, every model of a built reference zoo
   (``unframe zoo build``) and torchvision's ResNet-18: its ONNX file in onnxruntime (CPU provider, default options) against
   the IR unframe writes from it (fp16 weights, the default) compiled on OpenVINO's CPU plugin
   twice: as a user gets it (``compile_model(ir, "CPU")``: bfloat16 inference on a CPU with
   AVX512-BF16, like this one) and as parity runs it (``INFERENCE_PRECISION_HINT f32``).

    PYTHONPATH=. .venv/bin/python bench/openvino_ir.py --zoo /tmp/ov37/zoo --out docs/benchmarks/openvino.md
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import numpy as np

LATENCY_RUNS = 30
WARMUP = 5


# ---------------------------------------------------------------------------- conversion time --
def tiny_cnn() -> tuple[Any, Any]:
    import torch

    torch.manual_seed(0)

    class Net(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.conv = torch.nn.Conv2d(3, 8, 3, padding=1)
            self.fc = torch.nn.Linear(8, 4)

        def forward(self, x: Any) -> Any:
            return self.fc(torch.relu(self.conv(x)).mean((2, 3)))

    return Net().eval(), torch.randn(2, 3, 16, 16)


def resnet18() -> tuple[Any, Any]:
    import sys

    import torch

    sys.path.insert(0, str(Path(__file__).resolve().parent))
    from benchlib import torchvision_shim

    torchvision_shim()
    import torchvision

    torch.manual_seed(0)
    return torchvision.models.resnet18().eval(), torch.randn(1, 3, 224, 224)


def conversion_times(reps: int) -> list[tuple[str, str, float, float]]:
    """(model, route, unframe's median seconds, the anchor's median seconds)."""
    out = []
    for label, build, n in (("tiny CNN", tiny_cnn, reps), ("torchvision ResNet-18", resnet18, max(3, reps // 2))):
        model, x = build()
        out += _model_times(label, model, x, n)
    return out


def _model_times(label: str, model: Any, x: Any, reps: int) -> list[tuple[str, str, float, float]]:
    import onnx_ir as ir
    import torch

    import unframe
    from unframe.converters.backends.openvino import importer
    from unframe.converters.backends.openvino.direct import convert_from_torch
    from unframe.converters.backends.openvino.runtime import import_openvino, quiet_openvino
    from unframe.converters.base import Target
    from unframe.converters.registry import BACKENDS

    ov = import_openvino()
    tmp = Path(tempfile.mkdtemp(prefix="bench-ov-"))
    os.environ["UNFRAME_CACHE_DIR"] = str(tmp / "cache")  # the answers kept across processes: the bench's own
    onnx_path = tmp / "model.onnx"
    dims = {"x": {0: torch.export.Dim("batch")}}
    with quiet_openvino():
        torch.onnx.export(model, (x,), str(onnx_path), dynamo=True, input_names=["x"], dynamic_shapes=dims,
                          opset_version=21)
    graph = ir.load(onnx_path)
    backend = BACKENDS.get("openvino")
    target = Target("openvino", 21, {})
    example = type("Example", (), {"args": (x,), "kwargs": {}, "names": ["x"],
                                   "dynamic": {"x": {0: "batch"}}, "example": None})()
    counter = iter(range(10**6))

    def ours_onnx() -> None:
        backend.check(graph, target)
        backend.convert(graph, target, tmp / f"u{next(counter)}")

    def ours_onnx_asked() -> None:
        importer.TAKEN.clear()  # the CPU plugin's answers forgotten: query_model asked
        os.environ["UNFRAME_CACHE_DIR"] = "off"
        try:
            ours_onnx()
        finally:
            os.environ["UNFRAME_CACHE_DIR"] = str(tmp / "cache")

    def ours_onnx_disk() -> None:
        importer.TAKEN.clear()  # as a new process starts: its answers read from unframe.cache's file
        importer._DISK.clear()
        ours_onnx()

    def anchor_onnx() -> None:
        with quiet_openvino():
            ov.save_model(ov.convert_model(str(onnx_path)), str(tmp / f"a{next(counter)}.xml"))

    def ours_pipeline() -> None:
        unframe.convert(model, to="openvino", sample_inputs=x, output=tmp / f"p{next(counter)}.xml",
                        validate=False)

    def anchor_pipeline() -> None:
        path = tmp / f"e{next(counter)}.onnx"
        with quiet_openvino():
            torch.onnx.export(model, (x,), str(path), dynamo=True, input_names=["x"], dynamic_shapes=dims)
            ov.save_model(ov.convert_model(str(path)), str(path.with_suffix(".xml")))

    def ours_torch() -> None:
        convert_from_torch(model, example, target, tmp / f"t{next(counter)}")

    # the example the direct route traces with: a batch of 1 repeated to 2 (torch.export fixes a
    # dim of size 1), so both IRs have a dynamic batch
    xa = torch.cat([x, x]) if x.shape[0] == 1 else x

    def anchor_torch() -> None:
        shapes = torch.export.ShapesCollection()
        shapes[xa] = {0: torch.export.Dim.AUTO}
        with quiet_openvino():
            ep = torch.export.export(model, (xa,), dynamic_shapes=shapes)
            ov.save_model(ov.convert_model(ep), str(tmp / f"b{next(counter)}.xml"))

    out = []
    for route, ours, anchor in (("ONNX file -> IR (backend stage: check + convert)", ours_onnx, anchor_onnx),
                                ("ONNX file -> IR, ops not seen before (query_model asked)", ours_onnx_asked,
                                 anchor_onnx),
                                ("ONNX file -> IR, a new process's first model (answers on disk)",
                                 ours_onnx_disk, anchor_onnx),
                                ("torch -> ONNX -> IR (whole route, no parity)", ours_pipeline, anchor_pipeline),
                                ("torch -> IR (direct route)", ours_torch, anchor_torch)):
        ours(), anchor()  # warm-up: imports, first plugin load
        a, b = [], []
        for _ in range(reps):
            a.append(_timed(ours))
            b.append(_timed(anchor))
        out.append((label, route, statistics.median(a), statistics.median(b)))
    out += [(label, *row) for row in _cli_times(onnx_path, tmp, max(5, reps // 2))]
    return out


def _cli_times(onnx_path: Path, tmp: Path, reps: int) -> list[tuple[str, float, float]]:
    """A user's command, a new process each run: ``unframe convert model.onnx --to openvino
    --no-validate`` against OpenVINO's own command, ``ovc model.onnx`` (fp16 weights, its
    default); twice: with the plugin's answers for these ops on disk (``unframe.cache``: the
    warm-up run wrote them) and with the cache off (``UNFRAME_CACHE_DIR=off``: the first model of
    its ops on a machine). Both commands may write their bytecode (a sandbox's
    ``PYTHONDONTWRITEBYTECODE`` would charge unframe's editable sources a compile every run, which
    no installed copy pays)."""
    import subprocess
    import sys

    bin_dir = Path(sys.executable).parent
    counter = iter(range(10**6))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}

    def ours(cache: str) -> Any:
        def run() -> None:
            subprocess.run([str(bin_dir / "unframe"), "convert", str(onnx_path), "--to", "openvino",
                            "-o", str(tmp / f"c{next(counter)}.xml"), "--no-validate"], check=True,
                           capture_output=True, env={**env, "UNFRAME_CACHE_DIR": cache})
        return run

    def anchor() -> None:
        subprocess.run([str(bin_dir / "ovc"), str(onnx_path), "--output_model", str(tmp / f"o{next(counter)}.xml")],
                       check=True, capture_output=True, env=env)

    out = []
    for route, mine in (("`unframe convert x.onnx --to openvino --no-validate` vs `ovc x.onnx` "
                         "(a new process each; answers on disk)", ours(str(tmp / "cache"))),
                        ("the same commands, unframe's cache off (query_model asked each run)", ours("off"))):
        mine(), anchor()
        a, b = [], []
        for _ in range(reps):
            a.append(_timed(mine))
            b.append(_timed(anchor))
        out.append((route, statistics.median(a), statistics.median(b)))
    return out


def _timed(fn: Any) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


# ------------------------------------------------------------------------------------ latency --
def zoo_latency(zoo: Path) -> list[dict[str, Any]]:
    import onnxruntime as rt

    import unframe
    from unframe.converters.backends.openvino.runtime import core, quiet_openvino

    rows = []
    for onnx_path in sorted(zoo.glob("*/*/model.onnx")):
        family, name = onnx_path.parent.parent.name, onnx_path.parent.name
        feeds = _batch1(onnx_path)
        with tempfile.TemporaryDirectory(prefix="bench-ov-") as tmp:
            xml = Path(tmp) / "model.xml"
            try:
                unframe.convert(str(onnx_path), to="openvino", output=xml, sample_inputs=feeds, locate=False)
            except Exception as exc:  # noqa: BLE001 - a row says so
                rows.append({"family": family, "model": name, "error": f"{type(exc).__name__}: {exc}"[:120]})
                continue
            session = rt.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
            ort_s = _latency(lambda s=session, f=feeds: s.run(None, f))
            row = {"family": family, "model": name, "onnxruntime": ort_s}
            for label, config in (("openvino", {}), ("openvino_f32", {"INFERENCE_PRECISION_HINT": "f32"})):
                with quiet_openvino():
                    compiled = core().compile_model(core().read_model(str(xml)), "CPU", config)
                request = compiled.create_infer_request()
                by_port = {p: feeds[next(n for n in p.get_names() if n in feeds)] for p in compiled.inputs}
                row[label] = _latency(lambda r=request, f=by_port: r.infer(f))
                if not config:
                    row["precision"] = compiled.get_property("INFERENCE_PRECISION_HINT").get_type_name()
            rows.append(row)
    return rows


def real_size_zoo() -> Path:
    """A folder laid out like the zoo with torchvision's ResNet-18 (random weights, exported by
    torch.onnx with a dynamic batch): a model of real size next to the zoo's tiny ones."""
    import torch

    from unframe.converters.backends.openvino.runtime import quiet_openvino

    model, x = resnet18()
    folder = Path(tempfile.mkdtemp(prefix="bench-ov-real-")) / "torchvision" / "resnet18"
    folder.mkdir(parents=True)
    with quiet_openvino():
        torch.onnx.export(model, (x,), str(folder / "model.onnx"), dynamo=True, input_names=["x"],
                          dynamic_shapes={"x": {0: torch.export.Dim("batch")}})
    np.savez(folder / "inputs.npz", x=x.numpy())
    return folder.parent.parent


def _batch1(onnx_path: Path) -> dict[str, np.ndarray]:
    """The zoo's saved inputs, cut to their first row where the input's batch dim is dynamic."""
    import onnx

    graph = onnx.load(str(onnx_path), load_external_data=False).graph
    dynamic = {i.name for i in graph.input
               if i.type.tensor_type.shape.dim and not i.type.tensor_type.shape.dim[0].HasField("dim_value")}
    with np.load(onnx_path.parent / "inputs.npz") as data:
        return {k: (data[k][:1] if k in dynamic and data[k].ndim else data[k]) for k in data.files}


def _latency(fn: Any) -> float:
    for _ in range(WARMUP):
        fn()
    return statistics.median(_timed(fn) for _ in range(LATENCY_RUNS))


# ------------------------------------------------------------------------------------- report --
def zoo_section(report: Path) -> list[str]:
    """The zoo upgrade's outcome (``unframe zoo upgrade ZOO --to openvino --opset 21 -o OUT -j 2``,
    its report.json): every model's status and backend parity."""
    import json

    data = json.loads(report.read_text())
    rows = data["rows"]
    ok = sum(r["status"] == "ok" for r in rows)
    lines = ["## Reference zoo on OpenVINO", "",
             f"`unframe zoo upgrade <zoo> --to openvino --opset 21 -j N` (issue 37's target: 100 %): "
             f"**{ok} of {len(rows)} ok**, "
             + ", ".join(f"{sum(r['status'] == s for r in rows)} {s}" for s in ("refused", "failed")) + ". "
             "Parity is the IR on OpenVINO's CPU plugin (f32 inference) against onnxruntime on the "
             "opset-21 graph, on the zoo's saved inputs; the default fp16 weights.", "",
             "| model | status | backend max abs err | output scale | weights | notes |",
             "|---|---|---|---|---|---|"]
    for r in rows:
        parity = r.get("parity") or {}
        weights, notes = _ir_record(report.parent / r["output"]) if r["status"] == "ok" else ("", [])
        lines.append(f"| {r['id']} | {r['status']} | {_num(parity.get('max_abs'))} | {_num(parity.get('scale'))} | "
                     f"{weights} | {'; '.join(notes) or r.get('reason', '')[:160]} |")
    return lines + [""]


def _ir_record(xml: Path) -> tuple[str, list[str]]:
    """The written IR's weight precision and unframe's notes about what it rewrote (its rt_info)."""
    import json

    from unframe.converters.backends.openvino.describe import flat_rt_info
    from unframe.converters.backends.openvino.runner import read_ir

    info = flat_rt_info(read_ir(xml))
    notes = [n for n in json.loads(info.get("unframe.backend_notes", "[]"))
             if "Loop state" in n or "weights kept" in n]
    return info.get("unframe.precision", "?"), [n.split(" (")[0] for n in notes]


def _num(value: Any) -> str:
    return f"{value:.3g}" if isinstance(value, float) else str(value or "")


def render(conv: list[tuple[str, str, float, float]], rows: list[dict[str, Any]], zoo: Path,
           zoo_report: Path | None = None) -> str:
    from unframe.distributions import dist_version

    lines = ["# OpenVINO IR: conversion time and latency", "",
             f"`bench/openvino_ir.py` on this machine ({platform.processor() or platform.machine()}, "
             f"2 vCPU shared with other jobs), openvino {dist_version('openvino')}, onnxruntime "
             f"{dist_version('onnxruntime')}, torch {dist_version('torch')}.", "",
             "## Conversion time (median, alternating runs)", "",
             "| model | route | unframe (s) | anchor (s) | ratio |", "|---|---|---|---|---|"]
    for model, route, ours, anchor in conv:
        lines.append(f"| {model} | {route} | {ours:.3f} | {anchor:.3f} | {ours / anchor:.2f}x |")
    lines += ["", "Anchors, the tools called directly: `openvino.convert_model(onnx)` + `openvino.save_model` "
              "(fp16 weights, its default) for the ONNX file; `torch.onnx.export(dynamo=True)` first for "
              "the whole route (unframe: `unframe.convert(module, to=\"openvino\", validate=False)`: its "
              "export, opset stage, pre-flight, conversion and write); `torch.export.export` + "
              "`convert_model` + `save_model` for the direct route. unframe's backend adds the ONNX "
              "file OpenVINO reads (the model is in memory: a user's external weights under 64 MB are "
              "copied for it), the CPU plugin's `query_model` (every blocker before anything is "
              "written: about as long as `convert_model` itself), asked only for a model with an op "
              "the plugin has not taken before in the process as it is there (second row: asked every "
              "time), a second capture of OpenVINO's logs (check and convert are two calls) and the "
              "IR read back once saved (the artifact's model is the IR written).", "",
             f"## Latency at batch 1, reference zoo (`{zoo.name}`), median of {LATENCY_RUNS} runs", "",
             "OpenVINO runs the IR unframe writes (fp16 weights); \"OpenVINO\" is `compile_model(ir, \"CPU\")` "
             "as a user gets it (inference precision in the last column: this CPU has AVX512-BF16), "
             "\"OpenVINO f32\" is the f32 inference parity uses. Ratios: onnxruntime's time over "
             "OpenVINO's (above 1: OpenVINO is faster).", "",
             "| family | model | onnxruntime (ms) | OpenVINO (ms) | OpenVINO f32 (ms) | ORT/OV | ORT/OV f32 | precision |",
             "|---|---|---|---|---|---|---|---|"]
    by_family: dict[str, list[tuple[float, float]]] = defaultdict(list)
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['family']} | {r['model']} | | | | | | failed: {r['error']} |")
            continue
        a, b, c = r["onnxruntime"], r["openvino"], r["openvino_f32"]
        by_family[r["family"]].append((a / b, a / c))
        lines.append(f"| {r['family']} | {r['model']} | {a * 1e3:.3f} | {b * 1e3:.3f} | {c * 1e3:.3f} | "
                     f"{a / b:.2f} | {a / c:.2f} | {r['precision']} |")
    lines += ["", "The zoo's models are tiny (microseconds in onnxruntime): OpenVINO's fixed cost per "
              "inference request (about 50 us here) dominates them, and its dynamic-shape path (every "
              "zoo model has a dynamic batch) costs more on graphs of many small ops (Keras "
              "MobileNetV3-small: 4.2 ms dynamic, 2.4 ms with `--static`; the SVC: 12 ms and 3.3 ms). "
              "At a real size (ResNet-18) the IR is the faster one.", "",
              "Per family (geometric mean of the ratios):", "",
              "| family | models | ORT/OV | ORT/OV f32 |", "|---|---|---|---|"]
    for family, ratios in sorted(by_family.items()):
        g1 = float(np.exp(np.mean([np.log(x) for x, _ in ratios])))
        g2 = float(np.exp(np.mean([np.log(y) for _, y in ratios])))
        lines.append(f"| {family} | {len(ratios)} | {g1:.2f} | {g2:.2f} |")
    if zoo_report is not None:
        lines += [""] + zoo_section(zoo_report)
    return "\n".join(lines) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--zoo", type=Path, required=True, help="a built reference zoo (unframe zoo build -o DIR)")
    ap.add_argument("--reps", type=int, default=9)
    ap.add_argument("--zoo-report", type=Path, help="report.json of a zoo upgrade --to openvino, to tabulate")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    conv = conversion_times(args.reps)
    rows = zoo_latency(args.zoo) + zoo_latency(real_size_zoo())
    text = render(conv, rows, args.zoo, args.zoo_report)
    print(text)
    if args.out:
        args.out.write_text(text)


if __name__ == "__main__":
    main()
