"""TensorRT engines on a GPU: built and run with parity, for a small CNN and every torch
architecture of the public set (model_zoo/build/arch_models.py).

    python bench/trt_gpu.py [--only NAME ...] [--family F ...] [--precision fp32 fp16] [--jobs N]
        [--timeout S] [--journal bench/out/trt_gpu.jsonl] [--probe-only]

Needs a CUDA device and TensorRT (NVIDIA's ``tensorrt`` or ``tensorrt-rtx``); nothing here runs in
``make test``. It starts with a probe: the device, the module, and a small CNN converted through
unframe (parity: the engine against onnxruntime). When that engine does not load, the probe builds
the same network once per compute capability the module offers and says which of those engines
this GPU runs, so a refusal names the real gap.

Then each model, in a child process: built and perturbed by ``arch_models``, converted with
``unframe.convert(model, to=["onnx", "tensorrt"], precision=P)`` (the TensorRT stage's parity is
the engine on the GPU against onnxruntime on the exported graph, both fed the model's samples),
then timed: the engine through unframe's runner (host arrays in and out, copies included; median
of 50 runs after 5 warm-ups) against onnxruntime's CPU session on the same feeds. Each record is
appended to ``--journal`` as it finishes; the table is printed at the end.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(Path(__file__).parent))
import architectures  # noqa: E402

PRECISIONS = ("fp32", "fp16")


# -- the probe -------------------------------------------------------------------------------------

def probe() -> bool:
    """Device, module, and a small CNN through unframe; on failure, which compute capability's
    engines load here. True when the CNN's engine ran with parity."""
    import numpy as np
    import onnx
    from onnx import TensorProto, helper, numpy_helper

    import unframe
    from unframe.converters.backends.tensorrt import trtmodule
    from unframe.errors import UnframeError

    device, trt = trtmodule.cuda_device(), trtmodule.load_or_none()
    print(f"device: {device}")
    print(f"module: {getattr(trt, '__name__', None)} {getattr(trt, '__version__', '')}")
    if isinstance(device, str) or trt is None:
        return False
    rng = np.random.default_rng(0)
    inits = [numpy_helper.from_array(a.astype(np.float32), n) for n, a in [
        ("w", rng.standard_normal((8, 3, 3, 3)) * 0.3), ("b", rng.standard_normal(8) * 0.1),
        ("wf", rng.standard_normal((8, 5)) * 0.5)]]
    graph = helper.make_graph([
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1]),
        helper.make_node("Relu", ["c"], ["r"]),
        helper.make_node("GlobalAveragePool", ["r"], ["g"]),
        helper.make_node("Flatten", ["g"], ["f"]),
        helper.make_node("MatMul", ["f", "wf"], ["y"])], "cnn",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3, 16, 16])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 5])], inits)
    proto = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=9)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "cnn.onnx"
        onnx.save(proto, path)
        ok = True
        for precision in PRECISIONS:
            try:
                result = unframe.convert(path, to="tensorrt", output=Path(tmp) / f"cnn-{precision}.engine",
                                         precision=precision, locate=False)
                last = result.report.stages[-1]
                print(f"cnn {precision}: {last.status}, max abs {last.max_abs}, of scale {last.rel_to_scale}; "
                      f"stages {[s.status for s in result.report.stages]}")
                ok = ok and last.status == "passed"
            except UnframeError as exc:
                print(f"cnn {precision}: exit {exc.exit_code}: {exc}")
                ok = False
        if not ok:
            _capabilities(trt, path)
    return ok


def _capabilities(trt: Any, path: Path) -> None:
    """Build the network once per compute capability and try to load each engine here."""
    from unframe.converters.backends.tensorrt import trtmodule

    kinds = [k for k in ("CURRENT", "SM75", "SM80", "SM86", "SM89", "SM120")
             if hasattr(getattr(trt, "ComputeCapability", None), k)]
    for kind in kinds or ["default"]:
        logger = trtmodule.CollectingLogger(trt)
        builder = trt.Builder(logger)
        network = builder.create_network(0)
        parser = trt.OnnxParser(network, logger)
        if not parser.parse(path.read_bytes()):
            print(f"  {kind}: the parser refused the CNN")
            return
        config = builder.create_builder_config()
        profile = builder.create_optimization_profile()
        profile.set_shape("x", (1, 3, 16, 16), (2, 3, 16, 16), (8, 3, 16, 16))
        config.add_optimization_profile(profile)
        if kind != "default":
            config.num_compute_capabilities = 1
            config.set_compute_capability(getattr(trt.ComputeCapability, kind), 0)
        serialized = builder.build_serialized_network(network, config)
        if serialized is None:
            print(f"  {kind}: build failed: {'; '.join(logger.errors()[:2])[:300]}")
            continue
        data = bytes(serialized)
        runtime = trt.Runtime(logger)
        engine = runtime.deserialize_cuda_engine(data)
        loaded = engine is not None and engine.create_execution_context() is not None
        print(f"  {kind}: built {len(data)} bytes; "
              + ("loads and makes a context here" if loaded else
                 f"does not load here: {'; '.join(logger.errors()[-2:])[:300]}"))


# -- one model -------------------------------------------------------------------------------------

def run_model(name: str, folder: Path, precisions: list[str]) -> dict[str, Any]:
    import unframe
    from unframe.api import PartialFailure
    from unframe.errors import UnframeError

    archs = architectures._archs()
    arch = archs.ARCHS[name]
    record: dict[str, Any] = {"name": name, "family": arch.family, "framework": arch.framework, "routes": {}}
    model, samples = archs.build_checked(name)
    for precision in precisions:
        out = folder / precision
        try:
            multi = unframe.convert(model, to=["onnx", "tensorrt"], sample_inputs=samples, output=out,
                                    locate=False, precision=precision, **arch.options)
        except PartialFailure as exc:
            multi = exc.result
        except UnframeError as exc:
            record["routes"][precision] = architectures._failure(exc.exit_code, exc)
            continue
        except Exception as exc:  # noqa: BLE001 - a bug: counted as exit 1
            record["routes"][precision] = architectures._failure(1, exc)
            continue
        if "tensorrt" not in multi.results:
            err = multi.errors["tensorrt"]
            record["routes"][precision] = architectures._failure(err.exit_code, err)
            continue
        entry = architectures._success(multi.results["tensorrt"])
        onnx_path = next(p for p in multi.results["onnx"].written if p.suffix == ".onnx")
        engine = next(p for p in multi.results["tensorrt"].written if p.suffix in (".engine", ".plan"))
        feeds = archs._feeds(samples, [v.name for v in multi.results["onnx"].model.graph.inputs])
        try:
            entry.update(_latency(engine, onnx_path, feeds))
        except Exception as exc:  # noqa: BLE001 - the conversion's figures still count
            entry["latency_error"] = f"{type(exc).__name__}: {str(exc)[:200]}"
        record["routes"][precision] = entry
    return record


def _latency(engine: Path, onnx_path: Path, feeds: dict[str, Any], reps: int = 50) -> dict[str, Any]:
    import onnxruntime as ort

    from unframe.converters.backends.tensorrt.runner import TensorRTRunner

    def median(fn: Any) -> float:
        for _ in range(5):
            fn()
        times = []
        for _ in range(reps):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return sorted(times)[len(times) // 2]

    runner = TensorRTRunner(engine.read_bytes())
    try:
        trt_s = median(lambda: runner.run(feeds))
    finally:
        runner.close()
    session = ort.InferenceSession(str(onnx_path), providers=["CPUExecutionProvider"])
    ort_s = median(lambda: session.run(None, feeds))
    return {"engine_ms": trt_s * 1e3, "ort_cpu_ms": ort_s * 1e3, "engine_bytes": engine.stat().st_size}


# -- the driver ------------------------------------------------------------------------------------

def table(records: list[dict[str, Any]], precisions: list[str]) -> str:
    lines = ["| model | family | " + " | ".join(f"{p}: result | {p}: err / scale | {p}: engine ms (ORT CPU ms)"
                                              for p in precisions) + " |",
             "|---|---|" + "---|---:|---:|" * len(precisions)]
    totals = {p: [0, 0] for p in precisions}
    for r in records:
        cells = []
        for p in precisions:
            e = r.get("routes", {}).get(p)
            totals[p][1] += 1
            if e is None:
                cells += [r.get("error", "-")[:80], "-", "-"]
            elif not e["ok"]:
                ops = f" [{', '.join(e['blocker_ops'])}]" if e.get("blocker_ops") else ""
                cells += [f"exit {e['exit']}{ops}", "-", "-"]
            else:
                totals[p][0] += e["parity"] == "passed"
                rel = f"{e['rel']:.2g}" if e.get("rel") is not None else "-"
                cells += [e["parity"], rel, f"{e['engine_ms']:.2f} ({e['ort_cpu_ms']:.2f})"]
        lines.append(f"| {r['name']} | {r.get('family', '?')} | " + " | ".join(cells) + " |")
    lines.append("| **all** | | " + " | ".join(f"**{ok}/{n}** | | " for ok, n in totals.values()) + "|")
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    parser.add_argument("--only", nargs="*", default=[])
    parser.add_argument("--family", nargs="*", default=[])
    parser.add_argument("--precision", nargs="*", default=list(PRECISIONS), choices=PRECISIONS)
    parser.add_argument("--timeout", type=float, default=300.0, help="seconds per model")
    parser.add_argument("--jobs", type=int, default=1, help="models at once (a child process each)")
    parser.add_argument("--journal", type=Path, default=ROOT / "bench" / "out" / "trt_gpu.jsonl")
    parser.add_argument("--probe-only", action="store_true")
    parser.add_argument("--no-probe", action="store_true")
    args = parser.parse_args()
    if args.worker:
        with tempfile.TemporaryDirectory() as tmp, contextlib.redirect_stdout(sys.stderr):
            record = run_model(args.worker, Path(tmp), args.precision)
        print(json.dumps(record, default=str), flush=True)
        return
    if not args.no_probe:
        ok = probe()
        if args.probe_only:
            return
        if not ok:
            print("the probe's engine did not run with parity: no models run", flush=True)
            return
    archs = architectures._archs()
    names = [n for n, a in archs.ARCHS.items() if a.framework == "torch" and not a.heavy
             and (not args.only or n in args.only) and (not args.family or a.family in args.family)]
    names = architectures.interleave(names, {n: a.family for n, a in archs.ARCHS.items()})
    args.journal.parent.mkdir(parents=True, exist_ok=True)
    done = architectures.read_journal(args.journal)
    extra = ["--precision", *args.precision]
    with ThreadPoolExecutor(max_workers=args.jobs) as pool:
        futures = [pool.submit(architectures.run_child, n, args.timeout, Path(__file__), extra)
                   for n in names if n not in done]
        for future in as_completed(futures):
            record = future.result()
            done[record["name"]] = record
            with args.journal.open("a") as f:
                f.write(json.dumps(record, default=str) + "\n")
            summary = {p: (e["parity"] if e["ok"] else f"exit {e['exit']}") for p, e in record.get("routes", {}).items()}
            print(f"{record['name']}: {record.get('error') or summary} ({record.get('wall_s', 0):.0f} s)", flush=True)
    print(table([done[n] for n in archs.ARCHS if n in done], args.precision))


if __name__ == "__main__":
    main()
