"""Shape inference without reading weights (unframe/version_converter/types.py)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import onnx
import onnx.parser
import onnx_ir as ir

from unframe.version_converter.types import declares_huge_tensor


def _mul_against(width: int) -> onnx.ModelProto:
    """What the Core ML and TensorRT paths make of a fuzzed RMSNormalization (its function body):
    axes computed from X's shape, then the last Mul broadcasts against the weight as declared."""
    return onnx.parser.parse_model(f"""<ir_version: 10, opset_import: ["" : 21]>
        g (float[3,4] X, float[{width}] W) => (float Y) {{
          s = Shape(X)
          r = Size(s)
          a = Constant<value = int64 {{1}}>()
          axes = Range(a, r, a)
          m = ReduceMean(X, axes)
          d = Div(X, m)
          Y = Mul(d, W)
        }}""")


def test_a_declared_2_to_the_40_dim_is_huge_and_a_real_one_is_not(tmp_path: Path):
    assert declares_huge_tensor(ir.from_proto(_mul_against(2**40)))
    assert not declares_huge_tensor(ir.from_proto(_mul_against(4)))


def test_inference_of_an_astronomical_broadcast_ends_within_bounded_memory(tmp_path: Path):
    """With onnx's data propagation this took 56 s and all the memory there was before a
    bad_alloc (found by the check campaign); under a 4 GiB address-space limit it must end, with
    the Shape output still inferred."""
    path = tmp_path / "m.onnx"
    onnx.save(_mul_against(2**40), path)
    script = textwrap.dedent(f"""
        import resource, onnx
        resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))
        from unframe.version_converter.types import infer_shapes
        out = infer_shapes(onnx.load({str(path)!r}), check_type=False, strict_mode=False)
        shape = [v for v in out.graph.value_info if v.name == "s"][0].type.tensor_type.shape
        print("s", [d.dim_value for d in shape.dim])
    """)
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "s [2]" in done.stdout
