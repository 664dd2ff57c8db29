"""A user's training script: the reference zoo's Keras CNN (``unframe zoo build --only
keras_small_cnn_op11`` writes it as model.keras) trained for two epochs with KerasConvert
converting each epoch to ONNX in the background, then ``unframe.convert()`` at the end.

    python train_keras.py MODEL.keras OUT_DIR

Prints one JSON line like train_lightning.py; writes OUT_DIR/final.onnx and OUT_DIR/final_io.npz."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import keras  # noqa: E402
import numpy as np  # noqa: E402

import unframe  # noqa: E402
from unframe.callbacks.keras import KerasConvert  # noqa: E402


def main(source: Path, out: Path) -> None:
    keras.utils.set_random_seed(0)
    model = keras.saving.load_model(source)  # safe_mode: the zoo's CNN has no Lambda layer
    model.compile(optimizer="sgd", loss="sparse_categorical_crossentropy")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((32, 28, 28, 1)).astype(np.float32)
    y = rng.integers(0, 10, 32)
    convert = KerasConvert(out / "checkpoints", to="onnx")
    model.fit(x, y, epochs=2, batch_size=8, callbacks=[convert], verbose=0)
    sample = rng.standard_normal((4, 28, 28, 1)).astype(np.float32)
    result = unframe.convert(model, to="onnx", sample_inputs=sample, output=out / "final.onnx")
    np.savez(out / "final_io.npz", x=sample, y=np.asarray(model(sample, training=False)))
    print(json.dumps({
        "outcomes": [{"tag": o.tag, "ok": o.ok, "error": o.error,
                      "targets": {k: {"passed": t.passed, "path": str(t.path), "error": t.error}
                                  for k, t in o.targets.items()}} for o in convert.outcomes],
        "final_passed": bool(result.report),
        "final_stages": [s.summary() for s in result.report.stages],
    }))


if __name__ == "__main__":
    main(Path(sys.argv[1]), Path(sys.argv[2]))
