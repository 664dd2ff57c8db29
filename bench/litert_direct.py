"""LiteRT's direct routes against the converters they wrap, and the .tflite's latency against
onnxruntime on the same model.

* Conversion time: unframe's ``convert_from_torch`` against ``litert_torch.convert`` called
  directly (same module, same sample, same dynamic batch), and ``convert_from_tf`` against
  ``tf.lite.TFLiteConverter.from_keras_model(model).convert()``. unframe's time includes its eager
  run (output names), the flatbuffer repack with its metadata and signature names. Each is the
  median of ``--repeats`` runs after one warm-up (the first conversion pays imports and tracing
  caches).
* Latency at batch 1, median of 30 runs after 5 warm-ups: the .tflite on ai-edge-litert's
  interpreter (XNNPACK, default threads) through unframe's runner, against onnxruntime (default
  session options) on unframe's ONNX export of the same model.

    PYTHONPATH=. .venv/bin/python bench/litert_direct.py [--repeats 5]
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests" / "converters" / "backends" / "litert"))


from benchlib import latency_ms as latency  # noqa: E402
from benchlib import median_times  # noqa: E402


def torch_case(repeats: int) -> dict[str, Any]:
    import litert_torch
    import torch
    from litert_models import torch_cnn, torch_inputs

    from unframe.converters.backends.litert import from_torch
    from unframe.converters.base import Target

    model = torch_cnn()
    x = torch.randn(2, 3, 16, 16)
    inputs = torch_inputs(model, (x,))
    target = Target("litert", None, {})

    def ours() -> Any:
        from_torch._DONE.clear()  # no cached conversion: each run converts
        return from_torch.convert_from_torch(model, inputs, target, Path("."))

    def anchor() -> Any:
        with from_torch.common.quiet():
            return litert_torch.convert(model, (x,), dynamic_shapes=({0: torch.export.Dim("batch")},)).model_content()

    artifact = ours()
    return {"model": "tiny CNN (torch: Conv 3->8, ReLU, mean, Linear 8->4; 16x16)",
            **dict(zip(("ours", "anchor"), median_times(ours, anchor, repeats), strict=True)),
            "anchor_name": "litert_torch.convert", "artifact": artifact,
            "feed": {"x": np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)},
            "onnx_source": (model, (x,))}


def keras_case(repeats: int) -> dict[str, Any]:
    import keras
    import tensorflow as tf
    from litert_models import tf_inputs

    from unframe.converters.backends.litert import from_tf
    from unframe.converters.base import Target

    keras.utils.set_random_seed(0)
    inp = keras.Input((16, 16, 3), name="image")
    h = keras.layers.Conv2D(8, 3, padding="same", activation="relu")(inp)
    out = keras.layers.Dense(4)(keras.layers.GlobalAveragePooling2D()(h))
    model = keras.Model(inp, out)
    native, specs = tf_inputs(model)
    target = Target("litert", None, {})

    def ours() -> Any:
        from_tf._DONE.clear()
        return from_tf.convert_from_tf(native, specs, target, Path("."))

    def anchor() -> Any:
        with from_tf.common.quiet():
            return tf.lite.TFLiteConverter.from_keras_model(model).convert()

    artifact = ours()
    return {"model": "tiny CNN (Keras: Conv2D 8, GAP, Dense 4; 16x16x3)",
            **dict(zip(("ours", "anchor"), median_times(ours, anchor, repeats), strict=True)),
            "anchor_name": "TFLiteConverter.from_keras_model", "artifact": artifact,
            "feed": {"image": np.random.default_rng(0).standard_normal((1, 16, 16, 3)).astype(np.float32)},
            "onnx_source": (model, None)}


def onnx_latency(source: tuple[Any, Any], feed: dict[str, np.ndarray]) -> float:
    """onnxruntime on the model exported by the exporter unframe wraps (torch.onnx dynamo,
    tf2onnx from_keras), called directly: the latency doesn't depend on unframe's pipeline."""
    import onnxruntime as ort

    model, sample = source
    if sample is not None:
        import torch

        program = torch.onnx.export(model, tuple(t[:1] for t in sample), dynamo=True, verbose=False)  # batch 1
        data = program.model_proto.SerializeToString()
    else:
        import tensorflow as tf
        import tf2onnx

        specs = [tf.TensorSpec((None, *t.shape[1:]), t.dtype, name=t.name) for t in model.inputs]
        data = tf2onnx.convert.from_keras(model, input_signature=specs, opset=18)[0].SerializeToString()
    session = ort.InferenceSession(data, providers=["CPUExecutionProvider"])
    names = [i.name for i in session.get_inputs()]
    fed = dict(zip(names, feed.values(), strict=True))
    return latency(lambda: session.run(None, fed))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from unframe.converters.base import Target
    from unframe.route import get_backend

    backend = get_backend("litert")
    print("| model | unframe (s) | anchor | anchor (s) | ratio | .tflite via runner p50 (ms) | "
          ".tflite bare invoke p50 (ms) | onnxruntime p50 (ms) |")
    print("|---|---|---|---|---|---|---|---|")
    for case in (torch_case(args.repeats), keras_case(args.repeats)):
        runner = backend.runner(case["artifact"], Target("litert"))
        feed = case["feed"]
        lite = latency(lambda runner=runner, feed=feed: runner.run(feed))
        bare = bare_latency(case["artifact"].model, feed)
        ort_ms = onnx_latency(case["onnx_source"], feed)
        print(f"| {case['model']} | {case['ours']:.3f} | {case['anchor_name']} | {case['anchor']:.3f} | "
              f"{case['ours'] / case['anchor']:.2f} | {lite:.3f} | {bare:.3f} | {ort_ms:.3f} |", flush=True)


def bare_latency(content: bytes, feed: dict[str, np.ndarray]) -> float:
    """The interpreter alone (set_tensor, invoke, get_tensor): what the runner's own work adds to."""
    from ai_edge_litert.interpreter import Interpreter

    it = Interpreter(model_content=content)
    it.allocate_tensors()
    index = it.get_input_details()[0]["index"]
    out = it.get_output_details()[0]["index"]
    value = next(iter(feed.values()))
    if tuple(it.get_input_details()[0]["shape"]) != value.shape:
        it.resize_tensor_input(index, list(value.shape), strict=False)
        it.allocate_tensors()

    def run() -> None:
        it.set_tensor(index, value)
        it.invoke()
        it.get_tensor(out)

    return latency(run)


if __name__ == "__main__":
    main()
