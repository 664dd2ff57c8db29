"""Speed and memory of the opset version converter vs onnx.version_converter.

Speed: real architectures with their weights (a ResNet-like CNN and a transformer encoder from
torch, exported with the TorchScript exporter at opset 11 and 14; a scikit-learn pipeline through skl2onnx),
converted up to the newest opset and down to 11/13: median wall time of the conversion call on a model
already in memory (unframe: onnx_ir.Model, onnx: ModelProto), and of load + convert + save.

Zoo (``--zoo``): every model of the reference zoo (torch, Keras and scikit-learn architectures,
``model_zoo/manifest.toml``) built into a temp dir, converted up to the newest opset and down to
opset 9 by both converters: median CPU time of the conversion call (from a ModelProto for both).

Memory: a synthetic opset-10 model with 2.5 GB of external data (written to a temp dir) converted to
the newest opset in a fresh process; peak RSS of load + convert + save (weights stay in place).

    python bench/opset_speed.py [--write docs/benchmarks/version_converter.md] [--skip-memory] [--zoo]
"""

from __future__ import annotations

import argparse
import datetime
import resource
import subprocess
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))
import benchlib  # noqa: E402


def _resnet_like() -> Any:
    import torch
    from torch import nn

    class Block(nn.Module):
        def __init__(self, c: int) -> None:
            super().__init__()
            self.c1, self.b1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
            self.c2, self.b2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

        def forward(self, x: Any) -> Any:
            return torch.relu(x + self.b2(self.c2(torch.relu(self.b1(self.c1(x))))))

    layers: list[Any] = [nn.Conv2d(3, 64, 7, stride=2, padding=3), nn.BatchNorm2d(64), nn.ReLU(), nn.MaxPool2d(3, 2, 1)]
    for c_in, c in ((64, 64), (64, 128), (128, 256), (256, 512)):
        if c != c_in:
            layers += [nn.Conv2d(c_in, c, 1, stride=2)]
        layers += [Block(c), Block(c)]
    layers += [nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(512, 1000), nn.Softmax(dim=1)]
    return nn.Sequential(*layers).eval(), (torch.randn(1, 3, 224, 224),)


def _transformer() -> Any:
    import torch
    from torch import nn

    class Encoder(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed = nn.Embedding(8000, 256)
            layer = nn.TransformerEncoderLayer(256, 8, 1024, batch_first=True, dropout=0.0)
            self.encoder = nn.TransformerEncoder(layer, 6, enable_nested_tensor=False)
            self.head = nn.Linear(256, 2)

        def forward(self, ids: Any) -> Any:
            h = self.encoder(self.embed(ids))
            return torch.log_softmax(self.head(h.mean(dim=1)), dim=-1)

    return Encoder().eval(), (torch.randint(0, 8000, (2, 32)),)


def build_models(folder: Path) -> dict[str, Path]:
    import torch

    torch.manual_seed(0)
    out: dict[str, Path] = {}
    for name, make, version in (("resnet18-like (torch, opset 11)", _resnet_like, 11),
                                ("transformer encoder (torch, opset 14)", _transformer, 14)):
        module, args = make()
        path = folder / f"{name.split()[0]}.onnx"
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            torch.onnx.export(module, args, str(path), opset_version=version, dynamo=False)
        out[name] = path
    try:
        out["sklearn pipeline (skl2onnx, opset 13)"] = _sklearn(folder)
    except Exception as exc:  # skl2onnx missing or failing: the torch models still measure the point
        print(f"skipping sklearn model: {exc}")
    return out


def _sklearn(folder: Path) -> Path:
    from skl2onnx import to_onnx
    from sklearn.neural_network import MLPClassifier
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler

    rng = np.random.default_rng(0)
    x = rng.standard_normal((400, 32)).astype(np.float32)
    y = (x[:, 0] + x[:, 1] > 0).astype(np.int64)
    pipe = make_pipeline(StandardScaler(), MLPClassifier((256, 256), max_iter=30, random_state=0)).fit(x, y)
    onx = to_onnx(pipe, x[:1], target_opset={"": 13, "ai.onnx.ml": 1}, options={"zipmap": False})
    path = folder / "sklearn.onnx"
    path.write_bytes(onx.SerializeToString())
    return path



def time_pair(path: Path, target: int, repeat: int, cpu_only: bool = False) -> dict[str, Any]:
    import onnx
    import onnx.version_converter
    import onnx_ir as ir

    from unframe.version_converter import convert_opset

    proto = onnx.load(path)
    row: dict[str, Any] = {"target": target, "nodes": len(proto.graph.node),
                           "weights_mb": sum(t.ByteSize() for t in proto.graph.initializer) / 1e6}

    def unframe_convert() -> None:
        convert_opset(ir.from_proto(proto), target)

    def onnx_convert() -> None:
        onnx.version_converter.convert_version(proto, target)

    def unframe_e2e() -> None:
        model = ir.load(path)
        convert_opset(model, target)
        ir.save(model, path.with_suffix(".unframe.onnx"))

    def onnx_e2e() -> None:
        model = onnx.load(path)
        onnx.save(onnx.version_converter.convert_version(model, target), path.with_suffix(".onnxvc.onnx"))

    # from_proto is part of the unframe figure: the onnx converter works on a proto directly
    for key, fn in (("unframe_s", unframe_convert), ("onnx_s", onnx_convert),
                    ("unframe_e2e_s", unframe_e2e), ("onnx_e2e_s", onnx_e2e),
                    ("unframe_cpu_s", unframe_convert), ("onnx_cpu_s", onnx_convert)):
        if cpu_only and not key.endswith("cpu_s"):
            continue
        timer = benchlib.median_cpu_time if key.endswith("cpu_s") else benchlib.median_time
        try:
            row[key] = timer(fn, repeat)
        except Exception as exc:
            row[key] = None
            row[key + "_error"] = f"{type(exc).__name__}: {str(exc)[:120]}"
    return row


def _cell(row: dict[str, Any], key: str) -> str:
    if isinstance(row.get(key), float):
        return f"{row[key]:.4f}"
    return f"error ({row.get(key + '_error', '')[:50]})"


def zoo_table(repeat: int, newest: int) -> str:
    """Both converters over the built reference zoo, up to ``newest`` and down to 9: CPU time."""
    import math

    import onnx

    from unframe.zoo.build import build_zoo, default_manifest

    lines = ["| zoo model | nodes | source | target | unframe cpu s | onnx cpu s | speed-up |",
             "|---|---|---|---|---|---|---|"]
    ratios: list[float] = []
    with tempfile.TemporaryDirectory() as tmp, warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for outcome in build_zoo(default_manifest(), out_dir=Path(tmp)):
            if outcome.status not in ("built", "already built") or not outcome.path.exists():
                lines.append(f"| {outcome.name} | - | - | - | not built: {outcome.reason[:60]} | - | - |")
                continue
            proto = onnx.load(outcome.path)
            source = next(o.version for o in proto.opset_import if o.domain in ("", "ai.onnx"))
            for target in sorted({newest, 9} - {source}):
                row = time_pair(outcome.path, target, repeat, cpu_only=True)
                u, o = row["unframe_cpu_s"], row["onnx_cpu_s"]
                if u and o:
                    ratios.append(o / u)
                lines.append(f"| {outcome.name} | {row['nodes']} | {source} | {target} | "
                             f"{_cell(row, 'unframe_cpu_s')} | {_cell(row, 'onnx_cpu_s')} | "
                             f"{f'{o / u:.1f}x' if u and o else '-'} |")
                print(lines[-1], flush=True)
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        lines.append(f"\nBoth converted {len(ratios)} (model, target) pairs: unframe faster on "
                     f"{sum(r > 1 for r in ratios)}, geometric-mean speed-up {geo:.1f}x "
                     f"(min {min(ratios):.1f}x, max {max(ratios):.1f}x).")
    return "\n".join(lines) + "\n"


# -- memory ---------------------------------------------------------------------------------------
def write_big_model(folder: Path, gigabytes: float = 2.5) -> Path:
    """An opset-10 chain of MatMul/Add/Softmax/ReduceSum/Clip whose weights (2.5 GB) are external."""
    import onnx
    from onnx import TensorProto, helper

    n_weights = 10
    per = int(gigabytes * 1e9 / n_weights)
    dim = int((per / 4) ** 0.5)
    row = np.full((dim,), 0.001, dtype=np.float32).tobytes()
    nbytes = dim * dim * 4
    inits, nodes = [], []
    data = folder / "weights.bin"
    offset = 0
    with data.open("wb") as f:
        for i in range(n_weights):
            for _ in range(dim):  # row by row: the generator itself stays small
                f.write(row)
            t = TensorProto(name=f"W{i}", data_type=TensorProto.FLOAT, dims=[dim, dim],
                            data_location=TensorProto.EXTERNAL)
            for k, v in (("location", data.name), ("offset", str(offset)), ("length", str(nbytes))):
                entry = t.external_data.add()
                entry.key, entry.value = k, v
            offset += nbytes
            inits.append(t)
    prev = "x"
    for i in range(n_weights):
        nodes += [helper.make_node("MatMul", [prev, f"W{i}"], [f"m{i}"]),
                  helper.make_node("Clip", [f"m{i}"], [f"c{i}"], min=-1.0, max=1.0),
                  helper.make_node("Softmax", [f"c{i}"], [f"s{i}"], axis=1)]
        prev = f"s{i}"
    nodes.append(helper.make_node("ReduceSum", [prev], ["y"], axes=[1], keepdims=0))
    graph = helper.make_graph(nodes, "big", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, dim])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 10)])
    model.ir_version = 5
    path = folder / "big.onnx"
    onnx.save(model, path)
    return path


def _measure_child(which: str, path: str, target: int) -> None:
    """Runs in a fresh process; prints peak RSS (MB) and seconds."""
    t = time.perf_counter()
    if which == "unframe":
        import onnx_ir as ir

        from unframe.version_converter import convert_opset

        model = ir.load(path)
        convert_opset(model, target)
        ir.save(model, str(Path(path).with_name("big.unframe.onnx")))
    else:
        import onnx
        import onnx.version_converter

        model = onnx.load(path, load_external_data=False)
        onnx.save(onnx.version_converter.convert_version(model, target), str(Path(path).with_name("big.onnxvc.onnx")))
    # VmHWM, not ru_maxrss: the latter survives exec and would report the parent's peak
    status = Path("/proc/self/status").read_text().split("\n")
    peak = next((int(line.split()[1]) / 1024 for line in status if line.startswith("VmHWM")),
                resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024)
    print(f"{peak:.0f} {time.perf_counter() - t:.2f}")


def measure_memory(target: int) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        path = write_big_model(Path(tmp))
        size = (Path(tmp) / "weights.bin").stat().st_size
        out: dict[str, Any] = {"external_gb": size / 1e9}
        for which in ("unframe", "onnx"):
            proc = subprocess.run([sys.executable, __file__, "--child", which, str(path), str(target)],
                                  capture_output=True, text=True)
            if proc.returncode != 0:
                out[which] = f"error: {proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else proc.returncode}"
                continue
            peak, seconds = proc.stdout.split()[-2:]
            out[which] = {"peak_rss_mb": float(peak), "seconds": float(seconds)}
        saved = Path(tmp) / "big.unframe.onnx"
        out["unframe_output_kb"] = saved.stat().st_size / 1e3 if saved.exists() else None
        out["weights_untouched"] = (Path(tmp) / "weights.bin").stat().st_size == size
        return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--skip-memory", action="store_true")
    parser.add_argument("--memory-only", action="store_true")
    parser.add_argument("--write", type=Path)
    parser.add_argument("--zoo", action="store_true", help="also time both converters over the reference zoo")
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        _measure_child(args.child[0], args.child[1], int(args.child[2]))
        return
    import onnx

    from unframe.opset import newest_opset

    newest = newest_opset()
    lines = ["| model | nodes | weights MB | target | unframe s | onnx s | speed-up | unframe cpu s | onnx cpu s | "
             "cpu speed-up | unframe load+convert+save s | onnx load+convert+save s |",
             "|---|---|---|---|---|---|---|---|---|---|---|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        models = {} if args.memory_only else build_models(Path(tmp))
        for name, path in models.items():
            source = next(o.version for o in onnx.load(path, load_external_data=False).opset_import if o.domain in ("", "ai.onnx"))
            for target in sorted({newest, 17, 9 if source > 9 else 13} - {source}):
                row = time_pair(path, target, args.repeat)
                u, o = row["unframe_s"], row["onnx_s"]
                ratio = f"{o / u:.1f}x" if u and o else "-"
                fmt = lambda v: f"{v:.3f}" if isinstance(v, float) else "error"  # noqa: E731
                uc, oc = row["unframe_cpu_s"], row["onnx_cpu_s"]
                line = (f"| {name} | {row['nodes']} | {row['weights_mb']:.0f} | {source}->{target} | {fmt(u)} | "
                        f"{fmt(o)}{' (' + row['onnx_s_error'][:60] + ')' if o is None else ''} | {ratio} | "
                        f"{fmt(uc)} | {fmt(oc)} | {f'{oc / uc:.1f}x' if uc and oc else '-'} | "
                        f"{fmt(row['unframe_e2e_s'])} | {fmt(row['onnx_e2e_s'])} |")
                if u is None:
                    line += f" unframe: {row.get('unframe_s_error')}"
                lines.append(line)
                print(line, flush=True)
    text = "" if args.memory_only else "\n".join(lines) + "\n"
    if args.zoo and not args.memory_only:
        text += "\n" + zoo_table(args.repeat, newest)
    if not args.skip_memory:
        mem = measure_memory(newest)
        print(mem)
        text += (f"\nMemory: synthetic opset-10 model with {mem['external_gb']:.2f} GB of external data converted "
                 f"to opset {newest} in a fresh process (load + convert + save; weights stay in place): "
                 f"unframe peak RSS {mem['unframe']['peak_rss_mb'] if isinstance(mem['unframe'], dict) else mem['unframe']} MB "
                 f"({mem['unframe']['seconds'] if isinstance(mem['unframe'], dict) else '-'} s), "
                 f"onnx.version_converter (external data not loaded) "
                 f"{mem['onnx']['peak_rss_mb'] if isinstance(mem['onnx'], dict) else mem['onnx']} MB; "
                 f"saved unframe model {mem['unframe_output_kb']} kB, external file unchanged: "
                 f"{mem['weights_untouched']}.\n")
    if args.write:
        import onnxruntime  # noqa: F401
        from opset_nodes import write_section

        header = (f"## Speed and memory ({datetime.date.today()}, onnx {onnx.__version__}, median of "
                  f"{args.repeat}; `python bench/opset_speed.py`)\n\n")
        write_section(args.write, "memory" if args.memory_only else "speed", header + text)


if __name__ == "__main__":
    main()
