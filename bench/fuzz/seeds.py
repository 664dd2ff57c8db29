"""Seed corpora for the fuzz harnesses, built locally (no downloads) from the test models, onnx's
node test cases and the model zoo (`unframe zoo build -o bench/out/zoo` first, to include it).

    python bench/fuzz/seeds.py [HARNESS ...]     # writes bench/out/fuzz/seeds/<harness>/

Seeds are generated, never committed; the findings the campaigns turn up are (tests/fuzz/corpus).
"""

from __future__ import annotations

import hashlib
import io
import os
import random
import sys
import tempfile
import zipfile
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
OUT = Path(os.environ.get("UNFRAME_FUZZ_OUT", ROOT / "bench" / "out" / "fuzz")) / "seeds"  # tests point it elsewhere
ZOO = (ROOT / "bench" / "out" / "zoo", ROOT / "model_zoo" / "built")
sys.path[:0] = [str(ROOT), str(ROOT / "tests"), str(ROOT / "tests" / "converters" / "backends" / "tensorrt")]


def _write(harness: str, items: list[bytes]) -> int:
    folder = OUT / harness
    folder.mkdir(parents=True, exist_ok=True)
    for data in items:
        (folder / hashlib.sha1(data).hexdigest()).write_bytes(data)
    return len(items)


# ----------------------------------------------------------------------------------- ONNX -----
def onnx_models(limit: int = 400) -> list[bytes]:
    """The spine's MLP (inline and with external data in the workspace's w.bin), a CNN, a model
    with a local function, onnx's node test cases (a seeded sample) and the zoo's models."""
    import onnx_ir as ir
    from spine_utils import mlp_model
    from trt_models import cnn_model

    models = [mlp_model(), mlp_model(opset=17), ir.to_proto(cnn_model(batch=1)), _external_mlp(),
              _function_mlp()]
    cases = _node_cases()
    random.Random(0).shuffle(cases)
    models += cases[: max(0, limit - len(models) - 30)]
    out = [m.SerializeToString() for m in models]
    for root in ZOO:
        for path in sorted(root.rglob("model.onnx")):
            if path.stat().st_size < 1 << 20:
                out.append(path.read_bytes())
    return out


def _external_mlp() -> object:
    """The MLP with W in the workspace's w.bin (offset 0, 48 bytes)."""
    import onnx
    from spine_utils import mlp_model

    model = mlp_model()
    w = next(t for t in model.graph.initializer if t.name == "W")
    w.data_location = onnx.TensorProto.EXTERNAL
    w.ClearField("raw_data")
    w.ClearField("float_data")
    for k, v in (("location", "w.bin"), ("offset", "0"), ("length", "48")):
        e = w.external_data.add()
        e.key, e.value = k, v
    return model


def _function_mlp() -> object:
    """The MLP whose Relu is a call of a model-local function."""
    from onnx import helper
    from spine_utils import mlp_model

    model = mlp_model()
    relu = next(n for n in model.graph.node if n.op_type == "Relu")
    fn = helper.make_function("local", "act", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])],
                              [helper.make_opsetid("", 13)])
    model.functions.append(fn)
    relu.op_type, relu.domain = "act", "local"
    model.opset_import.append(helper.make_opsetid("local", 1))
    return model


def _node_cases() -> list[object]:
    from onnx.backend.test.case.node import collect_testcases

    out = []
    for case in collect_testcases(None):
        model = getattr(case, "model", None)
        if model is not None and model.ByteSize() < 64 << 10:
            out.append(model)
    return out


def detection_onnx() -> list[bytes]:
    """NonMaxSuppression alone (dynamic box count) and inside torchvision's empty-boxes If: what
    the TensorRT preparation rewrites (guards.py, nms.py)."""
    import onnx_ir as ir
    from test_trt_nms import guarded_nms_model, nms_model

    return [ir.to_proto(m).SerializeToString() for m in (guarded_nms_model(), nms_model(0, 3), nms_model(1, 2))]


def small_onnx(n: int) -> list[bytes]:
    models = onnx_models()
    return sorted(models, key=len)[:n] + models[:5]


# -------------------------------------------------------------------------------- Core ML -----
def mlpackages() -> list[bytes]:
    """Zipped .mlpackage folders unframe writes for the MLP and the CNN."""
    import onnx_ir as ir
    from spine_utils import mlp_model
    from trt_models import cnn_model

    import unframe

    out = []
    for model in (ir.from_proto(mlp_model()), cnn_model(batch=1)):
        with tempfile.TemporaryDirectory() as tmp:
            pkg = Path(tmp) / "m.mlpackage"
            unframe.convert(model, to="coreml", output=pkg)
            out.append(zip_folder(pkg))
    return out


def zip_folder(folder: Path) -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as zf:
        for path in sorted(folder.rglob("*")):
            if path.is_file():
                zf.write(path, path.relative_to(folder).as_posix())
    return buf.getvalue()


def engines() -> list[bytes]:
    """An engine and its sidecar for the MLP (built on the CPU with tensorrt-rtx)."""
    from spine_utils import mlp_model

    import unframe

    with tempfile.TemporaryDirectory() as tmp:
        src = Path(tmp) / "mlp.onnx"
        src.write_bytes(mlp_model(batch=1).SerializeToString())
        out = Path(tmp) / "mlp.engine"
        unframe.convert(str(src), to="tensorrt", output=out, builder_optimization_level=0)
        return [out.read_bytes() + b"\n--sidecar--\n" + out.with_name("mlp.engine.json").read_bytes()]


# ------------------------------------------------------------------------------- frameworks ---
def pt2_files() -> list[bytes]:
    import torch

    torch.manual_seed(0)
    mlp = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    cnn = torch.nn.Sequential(torch.nn.Conv2d(3, 4, 3), torch.nn.ReLU(), torch.nn.AdaptiveAvgPool2d(1),
                              torch.nn.Flatten())
    out = []
    for model, x in ((mlp, torch.randn(2, 4)), (cnn, torch.randn(1, 3, 8, 8))):
        with tempfile.TemporaryDirectory() as tmp:
            path = Path(tmp) / "m.pt2"
            torch.export.save(torch.export.export(model.eval(), (x,)), str(path))
            out.append(path.read_bytes())
    return out


def keras_files() -> list[bytes]:
    import keras

    out = [bytes([0]) + p.read_bytes() for root in ZOO for p in sorted(root.rglob("model.keras"))
           if p.stat().st_size < 2 << 20]
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    with tempfile.TemporaryDirectory() as tmp:
        for tag, name in ((0, "m.keras"), (1, "m.h5")):
            path = Path(tmp) / name
            model.save(path)
            out.append(bytes([tag]) + path.read_bytes())
    return out


def tflite_files() -> list[bytes]:
    import keras
    import tensorflow as tf

    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(8, activation="relu"), keras.layers.Dense(3)])
    return [tf.lite.TFLiteConverter.from_keras_model(model).convert()]


def skops_files() -> list[bytes]:
    import numpy as np
    import skops.io as sio
    from sklearn.linear_model import LogisticRegression
    from sklearn.pipeline import make_pipeline
    from sklearn.preprocessing import StandardScaler
    from sklearn.tree import DecisionTreeClassifier

    rng = np.random.default_rng(0)
    x, y = rng.standard_normal((40, 4)), rng.integers(0, 2, 40)
    return [sio.dumps(m.fit(x, y)) for m in (LogisticRegression(), make_pipeline(StandardScaler(), LogisticRegression()),
                                            DecisionTreeClassifier(max_depth=3))]


def manifests() -> list[bytes]:
    tiny = b'root = "."\n[[model]]\nname = "w"\npath = "w.bin"\nopset = 13\n'
    return [(ROOT / "model_zoo" / "manifest.toml").read_bytes(), tiny]


# ------------------------------------------------------------------------------------ main ----
SEEDS: dict[str, Callable[[], list[bytes]]] = {
    "onnx_load": onnx_models,
    "check": lambda: small_onnx(120) + detection_onnx(),
    "opset": lambda: [bytes([21 - 7]) + m for m in onnx_models()] + [bytes([9 - 7]) + m for m in small_onnx(40)],
    "coreml": lambda: small_onnx(80),
    "tensorrt": lambda: small_onnx(30) + detection_onnx(),
    "inspect": lambda: [bytes([0]) + m for m in small_onnx(20)] + [bytes([1]) + p for p in mlpackages()]
                       + [bytes([2]) + e for e in engines()],
    "mil_eval": mlpackages,
    "torch_pt2": pt2_files,
    "keras": keras_files,
    "tflite": tflite_files,
    "skops": skops_files,
    "zoo_manifest": manifests,
}


def build(names: list[str]) -> Iterator[tuple[str, int]]:
    for name in names:
        yield name, _write(name, SEEDS[name]())


if __name__ == "__main__":
    wanted = sys.argv[1:] or list(SEEDS)
    for harness, count in build(wanted):
        print(f"{harness}: {count} seeds in {OUT / harness}")
