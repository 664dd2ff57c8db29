"""The ONNX route to OpenVINO IR, end to end through ``unframe.convert`` and the CLI, with the IR
run by OpenVINO's CPU plugin against onnxruntime on the source graph."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from ov_models import (
    cnn_onnx,
    constant_types,
    input_shapes,
    lrn_onnx,
    openvino_or_skip,
    ort,
    passthrough_loop_onnx,
    refused_onnx,
)

import unframe
from unframe.converters.backends.openvino.runner import OpenVINORunner
from unframe.errors import InputError, UnsupportedError

pytestmark = pytest.mark.filterwarnings("ignore::DeprecationWarning")


@pytest.fixture(autouse=True)
def _openvino():
    openvino_or_skip()


def _feed(batch: int, seed: int = 5) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).standard_normal((batch, 3, 16, 16)).astype(np.float32)}


def _scale(y: np.ndarray) -> float:
    return float(np.abs(y).max())


def test_fp32_ir_matches_onnxruntime_and_runs_other_batches(tmp_path):
    src = cnn_onnx(tmp_path / "m.onnx")
    res = unframe.convert(str(src), to="openvino", output=tmp_path / "m.xml", precision="fp32")
    assert [p.name for p in res.written] == ["m.xml", "m.bin"]
    assert res.report  # every stage's parity passed
    assert {constant_types(tmp_path / "m.xml")[n] for n in ("w", "fc")} == {"f32"}
    assert "f16" not in constant_types(tmp_path / "m.xml").values()
    # the symbolic batch is a dynamic dim of the IR: any batch runs
    assert input_shapes(tmp_path / "m.xml") == {"x": "[?,3,16,16]"}
    runner = OpenVINORunner(tmp_path / "m.xml")
    assert runner.name.endswith("CPU (f32)")
    for batch in (1, 5):
        ref = ort(src, _feed(batch))["y"]
        out = runner.run(_feed(batch))["y"]
        assert out.shape == (batch, 4) and _scale(ref) > 0.3
        np.testing.assert_allclose(out, ref, atol=1e-5 * _scale(ref), rtol=1e-5)


def test_default_is_fp16_weights_held_to_the_output_scale(tmp_path):
    src = cnn_onnx(tmp_path / "m.onnx")
    res = unframe.convert(str(src), to="openvino", output=tmp_path / "m16.xml")
    unframe.convert(str(src), to="openvino", output=tmp_path / "m32.xml", precision="fp32")
    types16 = constant_types(tmp_path / "m16.xml")
    assert {types16[n] for n in ("w_compressed", "fc_compressed")} == {"f16"}
    assert (tmp_path / "m16.bin").stat().st_size < 0.6 * (tmp_path / "m32.bin").stat().st_size
    stage = next(s for s in res.report.stages if s.stage == "backend")
    assert stage.status == "passed"
    ref = ort(src, _feed(3))["y"]
    out = OpenVINORunner(tmp_path / "m16.xml").run(_feed(3))["y"]
    err = float(np.abs(out - ref).max())
    # fp16 weights: really rounded (not the fp32 numbers), yet within 1 % of the output's scale
    assert 0 < err < 1e-2 * _scale(ref)
    assert res.provenance["parity"] and json.loads(res.provenance["parity"])["passed"]


def test_dim_bounds_and_static_shapes(tmp_path):
    src = cnn_onnx(tmp_path / "m.onnx")
    unframe.convert(str(src), to="openvino", output=tmp_path / "b.xml", dims=[("batch", 1, 8)])
    assert input_shapes(tmp_path / "b.xml") == {"x": "[1..8,3,16,16]"}
    unframe.convert(str(src), to="openvino", output=tmp_path / "s.xml", static=True,
                    sample_inputs=_feed(2))
    assert input_shapes(tmp_path / "s.xml") == {"x": "[2,3,16,16]"}
    with pytest.raises(UnsupportedError) as err:
        unframe.convert(str(src), to="openvino", output=tmp_path / "n.xml", dims=[("nope", 1, 8)])
    assert "names no dynamic dim" in str(err.value.blockers[0])


def test_check_and_convert_agree_on_a_refusal(tmp_path):
    src = refused_onnx(tmp_path / "r.onnx")
    check = unframe.check(str(src), to="openvino")
    assert not check
    assert sorted((b.op, b.node) for b in check.blockers) == [("Bernoulli", "draw_1"), ("Bernoulli", "draw_2")]
    with pytest.raises(UnsupportedError) as err:
        unframe.convert(str(src), to="openvino", output=tmp_path / "r.xml")
    assert sorted((b.op, b.node) for b in err.value.blockers) == sorted((b.op, b.node) for b in check.blockers)
    assert not list(tmp_path.glob("r.xml*")) and not (tmp_path / "r.bin").exists()
    ok = unframe.check(str(cnn_onnx(tmp_path / "m.onnx")), to="openvino")
    assert ok and not ok.blockers


def test_the_cpu_plugins_refusal_is_found_after_it_took_the_same_op_type(tmp_path):
    """The CPU plugin's answers are remembered per op signature (``importer.TAKEN``), not per op
    type: after LRN at rank 4 converted, LRN at rank 6 (which the plugin refuses) still gets its
    blocker, from check and convert alike, and nothing is written."""
    taken = lrn_onnx(tmp_path / "lrn4.onnx", rank=4)
    assert unframe.check(str(taken), to="openvino")
    unframe.convert(str(taken), to="openvino", output=tmp_path / "lrn4.xml",
                    sample_inputs={"x": np.ones((1, 4, 2, 2), np.float32)})
    src = lrn_onnx(tmp_path / "lrn6.onnx", rank=6)
    check = unframe.check(str(src), to="openvino")
    assert not check
    assert [(b.op, b.domain) for b in check.blockers] == [("LRN", "openvino")]
    assert "CPU plugin does not support" in check.blockers[0].reason
    with pytest.raises(UnsupportedError) as err:
        unframe.convert(str(src), to="openvino", output=tmp_path / "lrn6.xml")
    assert [(b.op, b.node) for b in err.value.blockers] == [(b.op, b.node) for b in check.blockers]
    assert not list(tmp_path.glob("lrn6.xml*")) and not (tmp_path / "lrn6.bin").exists()


def test_the_cpu_plugin_is_asked_once_for_ops_it_took(tmp_path, monkeypatch):
    """query_model runs once for a model of new ops: not again for its convert, nor for the same
    model loaded again, nor at fp32 weights; a model with one op it has not seen is asked."""
    from unframe.converters.backends.openvino import importer

    monkeypatch.setenv("UNFRAME_CACHE_DIR", str(tmp_path / "cache"))
    _new_process(importer, monkeypatch)
    asked = _count_queries(importer, monkeypatch)
    src = cnn_onnx(tmp_path / "m.onnx")
    assert unframe.check(str(src), to="openvino")
    unframe.convert(str(src), to="openvino", output=tmp_path / "a.xml", sample_inputs=_feed(2))
    unframe.convert(str(src), to="openvino", output=tmp_path / "b.xml", sample_inputs=_feed(2), precision="fp32")
    assert len(asked) == 1
    unframe.convert(str(cnn_onnx(tmp_path / "m8.onnx", batch=8)), to="openvino", output=tmp_path / "c.xml",
                    sample_inputs=_feed(8))
    assert len(asked) == 2  # a static batch: other shapes, asked


def _count_queries(importer, monkeypatch) -> list[int]:
    """The CPU plugin's query_model wrapped to count its calls (each a model's op count): the
    real plugin answers."""
    asked: list[int] = []
    real = importer.core()

    class Counting:
        def query_model(self, model, device):
            asked.append(len(model.get_ordered_ops()))
            return real.query_model(model, device)

    monkeypatch.setattr(importer, "core", Counting)
    return asked


def _new_process(importer, monkeypatch) -> None:
    """What a new process starts with: nothing remembered in memory, the disk not read yet."""
    monkeypatch.setattr(importer, "TAKEN", set())
    monkeypatch.setattr(importer, "_DISK", {})


def test_the_cpu_plugins_answers_are_kept_on_disk_for_the_next_process(tmp_path, monkeypatch):
    """The ops the CPU plugin took are kept on disk (``unframe.cache``) per openvino version and
    CPU: the next process does not ask again for a model of those ops, still asks for a model with
    one it has not seen, still finds LRN at rank 6 refused after rank 4 was taken, ignores lines
    that are not digests and files of another version; ``UNFRAME_CACHE_DIR=off`` keeps nothing."""
    from unframe.converters.backends.openvino import importer

    cache = tmp_path / "cache"
    monkeypatch.setenv("UNFRAME_CACHE_DIR", str(cache))
    asked = _count_queries(importer, monkeypatch)
    _new_process(importer, monkeypatch)
    src = cnn_onnx(tmp_path / "m.onnx")
    assert unframe.check(str(src), to="openvino")
    assert len(asked) == 1
    files = list(cache.glob("openvino-*-taken.txt"))
    assert len(files) == 1
    kept = files[0].read_text().split()
    assert kept and len(kept) == len(set(kept))
    # another openvino's answers are not read; a bad line is skipped
    (cache / files[0].name.replace("openvino-", "openvino-0.0.0-")).write_text("\n".join(kept))
    files[0].write_text("not a digest\n" + "\n".join(kept) + "\n")

    _new_process(importer, monkeypatch)
    got = unframe.convert(str(src), to="openvino", output=tmp_path / "a.xml", sample_inputs=_feed(2))
    assert got.report and len(asked) == 1  # answered from the disk
    lrn4, lrn6 = lrn_onnx(tmp_path / "lrn4.onnx", rank=4), lrn_onnx(tmp_path / "lrn6.onnx", rank=6)
    assert unframe.check(str(lrn4), to="openvino")
    assert len(asked) == 2  # new ops: asked

    _new_process(importer, monkeypatch)
    assert unframe.check(str(lrn4), to="openvino") and len(asked) == 2
    refused = unframe.check(str(lrn6), to="openvino")
    assert not refused and [b.op for b in refused.blockers] == ["LRN"] and len(asked) == 3

    monkeypatch.setenv("UNFRAME_CACHE_DIR", "off")
    _new_process(importer, monkeypatch)
    assert unframe.check(str(src), to="openvino") and len(asked) == 4


def test_cli_convert_check_inspect_and_exit_codes(tmp_path):
    src = cnn_onnx(tmp_path / "m.onnx")
    run = [sys.executable, "-m", "unframe.cli.main"]
    done = subprocess.run([*run, "convert", str(src), "--to", "openvino", "-o", str(tmp_path / "m.xml")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "parity backend: passed" in done.stdout + done.stderr
    info = subprocess.run([*run, "inspect", str(tmp_path / "m.xml"), "--json"], capture_output=True, text=True)
    assert info.returncode == 0, info.stderr
    described = json.loads(info.stdout)
    assert described["kind"] == "openvino" and described["inputs"][0]["shape"] == ["?", 3, 16, 16]
    assert described["provenance"]["source_sha256"] and described["parity"]["passed"]
    assert described["provenance"]["precision"] == "fp16"
    refused = refused_onnx(tmp_path / "r.onnx")
    check = subprocess.run([*run, "check", str(refused), "--to", "openvino"], capture_output=True, text=True)
    assert check.returncode == 4 and "Bernoulli" in check.stdout + check.stderr
    conv = subprocess.run([*run, "convert", str(refused), "--to", "openvino", "-o", str(tmp_path / "r.xml")],
                          capture_output=True, text=True)
    assert conv.returncode == 4 and "Traceback" not in conv.stderr


@pytest.mark.parametrize("damage", ["garbage", "truncated", "no_bin"])
def test_corrupt_ir_is_a_one_line_input_error(tmp_path, damage):
    src = cnn_onnx(tmp_path / "m.onnx")
    unframe.convert(str(src), to="openvino", output=tmp_path / "m.xml")
    xml = tmp_path / "m.xml"
    if damage == "garbage":
        xml.write_bytes(b"\x00\x01 not an IR")
    elif damage == "truncated":
        xml.write_bytes(xml.read_bytes()[:2000])
    else:
        (tmp_path / "m.bin").unlink()
    with pytest.raises(InputError) as err:
        OpenVINORunner(xml).run(_feed(1))
    assert "\n" not in str(err.value)
    done = subprocess.run([sys.executable, "-m", "unframe.cli.main", "inspect", str(xml)],
                          capture_output=True, text=True)
    assert done.returncode == 3, done.stderr
    assert "Traceback" not in done.stderr and len(done.stderr.strip().splitlines()) == 1


def test_marked_nodes_keep_every_weight_fp32(tmp_path):
    """After an fp16 parity failure the route marks nodes to keep in float32 and converts again;
    its planner emulates 16-bit compute, not fp16 weights, so the retry keeps every weight fp32
    (an IR the float32 graph's numbers hold), and says so."""
    import onnx_ir as ir

    from unframe.converters.base import Target
    from unframe.converters.registry import BACKENDS
    from unframe.passes import KEEP_FP32

    model = ir.load(cnn_onnx(tmp_path / "m.onnx"))
    backend = BACKENDS.get("openvino")
    plain = backend.convert(model, Target("openvino", 21, {}), tmp_path / "plain")
    assert {constant_types(plain.path)[n] for n in ("w_compressed", "fc_compressed")} == {"f16"}
    next(n for n in model.graph if n.name == "fc").metadata_props[KEEP_FP32] = "1"
    artifact = backend.convert(model, Target("openvino", 21, {}), tmp_path / "work")
    assert {constant_types(artifact.path)[n] for n in ("w", "fc")} == {"f32"}
    assert "f16" not in constant_types(artifact.path).values()
    assert artifact.metadata["unframe.precision"] == "fp32"
    assert any("weights kept in fp32" in n for n in artifact.notes)
    feeds = _feed(2)
    out = backend.runner(artifact, Target("openvino", 21, {})).run(feeds)["y"]
    ref = ort(tmp_path / "m.onnx", feeds)["y"]
    np.testing.assert_allclose(out, ref, atol=1e-5 * _scale(ref), rtol=1e-5)


def test_a_loop_passing_a_state_through_converts(tmp_path):
    """OpenVINO's ONNX frontend refuses a Loop whose body hands a state back unchanged (tf2onnx's
    Keras RNNs); the backend reads that state from the outer scope instead, exactly."""
    ov = openvino_or_skip()
    src = passthrough_loop_onnx(tmp_path / "loop.onnx")
    with pytest.raises(Exception, match="canonical inputs size"):  # OpenVINO alone: refused
        ov.convert_model(str(src))
    assert unframe.check(str(src), to="openvino")
    res = unframe.convert(str(src), to="openvino", output=tmp_path / "loop.xml", precision="fp32")
    assert any("Loop state" in n for n in res.artifact.notes)
    feeds = {"x": np.random.default_rng(2).standard_normal((2, 3)).astype(np.float32)}
    ref = ort(src, feeds)
    out = OpenVINORunner(tmp_path / "loop.xml", json.loads(res.artifact.metadata["unframe.io"])["outputs"]).run(feeds)
    assert set(out) == {"z", "ys", "w_out"}
    for name in ref:
        np.testing.assert_allclose(out[name], ref[name], atol=1e-6, rtol=1e-6)


def test_telemetry_is_never_sent_and_the_users_import_still_works(tmp_path):
    """A conversion in a fresh process with its own HOME: OpenVINO's telemetry (on by default,
    writing ~/intel and posting events) stays off, and ``import openvino_telemetry`` still works
    for the user afterwards."""
    src = cnn_onnx(tmp_path / "m.onnx")
    home = tmp_path / "home"
    home.mkdir()
    code = ("import unframe, sys\n"
            f"unframe.convert({str(src)!r}, to='openvino', output={str(tmp_path / 'm.xml')!r})\n"
            "import openvino.tools.ovc.telemetry_utils as tu, openvino.tools.ovc.convert_impl as ci\n"
            "assert tu.tm.__name__.endswith('telemetry_stub') and ci.tm.__name__.endswith('telemetry_stub')\n"
            "import openvino_telemetry\n"
            "print('ok', openvino_telemetry.__name__)\n")
    env = {k: v for k, v in __import__("os").environ.items() if k not in ("CI", "HOME")}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          env={**env, "HOME": str(home)})
    assert done.returncode == 0, done.stderr
    assert "ok openvino_telemetry" in done.stdout
    assert not (home / "intel").exists()


def test_all_targets_include_openvino(tmp_path):
    from unframe.converters.registry import BACKENDS
    from unframe.route import parse_targets

    assert "openvino" in parse_targets("all")
    assert BACKENDS.get("openvino").available()


def test_bad_precision_is_a_usage_error(tmp_path):
    from unframe.errors import UsageError

    src = cnn_onnx(tmp_path / "m.onnx")
    with pytest.raises(UsageError):
        unframe.convert(str(src), to="openvino", output=tmp_path / "m.xml", precision="bf16")
    assert not (tmp_path / "m.xml").exists()


def test_locator_names_the_first_node_where_the_ir_departs(tmp_path) -> None:
    """The locator at the backend stage: OpenVINO fuses across values, so the backend's probe
    rebuilds the IR with the values it asks for as outputs. fp16 weights move the first Conv's
    output: with a tolerance no 16-bit weight meets, parity fails and the locator names it."""
    openvino_or_skip()
    from unframe.errors import ParityError

    src = cnn_onnx(tmp_path / "cnn.onnx", seed=3)
    with pytest.raises(ParityError) as err:
        unframe.convert(src, to="openvino", output=tmp_path / "cnn.xml", atol=1e-9, rtol=1e-6, precision="fp16")
    found = err.value.divergence
    assert found is not None and found.status == "found", found
    assert found.node == "conv", found
    assert not (tmp_path / "cnn.xml").exists()
