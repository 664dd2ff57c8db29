"""What every part of the TF frontend shares: quieting TensorFlow, dtype names, the telling line
of TensorFlow's errors, and the TFLite interpreter (opened by ``native`` and, in a child, by
``probes``). Nothing here imports the loaders, so the loaders, the GraphDef reader and the probes
in a child can all import it.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from unframe.errors import InputError
from unframe.validate.runner import TensorSpec


def quiet_tensorflow() -> None:
    """TF logs C++ info lines to stderr on import; the CLI output should stay readable."""
    from unframe.quiet import quiet_tensorflow_env

    quiet_tensorflow_env()


def tflite_signature(interpreter: Any) -> tuple[list[TensorSpec], list[str], dict[str, str]]:
    """(inputs, output names, tensor name -> signature key) of an interpreter."""
    sigs = interpreter.get_signature_list()
    names: dict[str, str] = {}
    if len(sigs) == 1:
        runner = interpreter.get_signature_runner(next(iter(sigs)))
        for kind_details in (runner.get_input_details(), runner.get_output_details()):
            for key, det in kind_details.items():
                names[det["name"]] = key
    inputs = []
    for det in interpreter.get_input_details():
        shape = tuple(None if d < 0 else int(d) for d in det["shape_signature"])
        inputs.append(TensorSpec(names.get(det["name"], det["name"]), shape,
                                 numpy_name(det["dtype"])))
    outputs = [names.get(det["name"], det["name"]) for det in interpreter.get_output_details()]
    return inputs, outputs, names


def make_interpreter(path: Path) -> Any:
    import warnings

    import tensorflow as tf

    try:
        with warnings.catch_warnings():  # tf.lite.Interpreter warns it moved to ai_edge_litert
            warnings.simplefilter("ignore")
            interpreter = tf.lite.Interpreter(model_path=str(path))
        interpreter.allocate_tensors()
    except Exception as exc:
        raise InputError(f"{path}: not a readable TFLite model ({error_line(exc)})",
                         "check the file is complete; re-convert it") from exc
    return interpreter


def numpy_name(dtype: Any) -> str:
    import numpy as np

    name = getattr(dtype, "name", None)
    if isinstance(name, str) and not isinstance(dtype, type):
        return {"string": "str"}.get(name, name)
    return np.dtype(dtype).name


def error_line(exc: BaseException) -> str:
    """The telling line of an exception: TF's traced errors start with "in user code:" and a
    stack, and put the reason last."""
    lines = [ln.strip() for ln in str(exc).strip().splitlines() if ln.strip()]
    if not lines:
        return type(exc).__name__
    if lines[0].startswith("in user code") or lines[0].startswith("File "):
        lines = [ln for ln in lines if not ln.startswith(("File ", "in user code", "return "))]
        return lines[-1][:300] if lines else type(exc).__name__
    return lines[0][:300]


def telling_line(exc: BaseException) -> str:
    """TensorFlow's telling line for an error raised while tracing: the reason (its last line)
    and the last frame "in user code" (``at file.py:12 in f: v = tf.Variable(1.0)``)."""
    reason = error_line(exc)
    if not reason.startswith(type(exc).__name__):
        reason = f"{type(exc).__name__}: {reason}"
    lines = [ln.strip() for ln in str(exc).splitlines() if ln.strip()]
    frames = [i for i, ln in enumerate(lines) if ln.startswith("File ")]
    if not frames:
        return reason
    i = frames[-1]
    match = re.match(r'File "([^"]+)", line (\d+), in (\S+)', lines[i])
    where = f"{Path(match.group(1)).name}:{match.group(2)} in {match.group(3)}" if match else lines[i]
    code = lines[i + 1] if i + 1 < len(lines) and not lines[i + 1].startswith(("File ", type(exc).__name__)) else ""
    return f"{reason} (in user code at {where}{': ' + code[:120] if code else ''})"
