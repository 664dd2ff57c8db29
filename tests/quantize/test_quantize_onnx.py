"""--quantize on the ONNX route with onnxruntime's quantizers and unframe's weight-only pass, on
a CNN trained on scikit-learn's digits: each scheme keeps test accuracy within a point of the
float model and passes the accuracy guard on held-out inputs; a deliberately broken calibration
fails the guard (exit 5, nothing written); the sensitivity pass keeps the layers that cost the
most in float; a target that can't hold a scheme is an exit-4 refusal naming what it holds."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnx
import onnx_ir as ir
import pytest

import unframe
from unframe.errors import InputError, ParityError, UnsupportedError, UsageError

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("sklearn", reason="needs scikit-learn (its digits dataset)")

from quant_models import (  # noqa: E402
    broken_calibration_error,
    one_loud_channel,
    onnx_accuracy,
    row_sets,
    with_an_outlier_set,
)

UNFRAME = Path(sys.executable).with_name("unframe")


@pytest.mark.parametrize("scheme", ["int8", "int8-dynamic", "w8", "w4"])
def test_each_scheme_keeps_accuracy_and_passes_the_guard(tmp_path, trained, calibration, scheme) -> None:
    out = tmp_path / f"digits_{scheme}.onnx"
    result = unframe.convert(trained.model, to="onnx", sample_inputs=torch.tensor(trained.train[:8]),
                             quantize=scheme, calibration=calibration, output=out)
    check = result.report.stages[-1]
    assert check.stage == "accuracy" and check.status == "passed", check.summary()
    assert check.top1 is not None and check.top1 >= 0.98 and check.cases >= 1
    assert check.size is not None and check.size[1] <= (0.2 if scheme == "w4" else 0.3) * check.size[0]
    accuracy = onnx_accuracy(out, trained)
    assert accuracy >= trained.float_accuracy - 0.01, (scheme, accuracy, trained.float_accuracy)
    ops = {n.op_type for n in onnx.load(out).graph.node}
    assert ops & {"DequantizeLinear", "MatMulInteger", "ConvInteger", "DynamicQuantizeLinear"}, ops
    props = {p.key: p.value for p in onnx.load(out).metadata_props}
    assert props["unframe.quantize"] == scheme and scheme in props["unframe.notes"]
    # the scheme per layer is read from the written graph: every weighted node, by its name
    written = {n.name: n for n in onnx.load(out).graph.node}
    assert check.layers_source == "the quantized graph" and set(check.layers) <= set(written), check.layers
    held = {"int8": "int8 weights per channel, int8 activations", "w8": "int8 weights per channel, float activations",
            "w4": "int4 weights in blocks of 32, float activations",
            "int8-dynamic": "int8 weights, int8 activations quantized at run time"}[scheme]
    assert list(check.layers.values()).count(held) >= 2, check.layers
    # latency before and after, in onnxruntime, the float graph against the quantized one
    lat = check.latency
    assert lat is not None and lat.runtime.startswith("onnxruntime") and lat.runs >= 5, check.latency_note
    assert lat.before_ms > 0 and lat.after_ms > 0 and lat.batch == 8
    assert f"{lat.before_ms:.3g} -> {lat.after_ms:.3g} ms" in check.summary()


def test_broken_calibration_fails_the_guard(tmp_path, trained) -> None:
    """Calibrated on inputs a thousand times too large, the activation ranges leave the real
    inputs a handful of levels: the guard fails on held-out real inputs, nothing is written."""
    out = tmp_path / "broken.onnx"
    err = broken_calibration_error(trained, "onnx", out)
    check = err.report.stages[-1]
    assert check.stage == "accuracy" and check.status == "failed"
    # the sensitivity pass tried and the message says how far it went
    assert check.rounds > 1 and f"keeping {len(check.kept_float)} layer(s) in float" in err.message
    assert not out.exists()


def test_when_onnxruntimes_quantizer_fails_the_guard_nncfs_is_tried_before_any_layer_is_kept(tmp_path, trained) -> None:
    """One calibration set 50x too bright: onnxruntime's min/max ranges stretch to it and its
    artifact fails the guard; NNCF's quantizer (ranges averaged over the sets) makes a graph that
    passes with every layer int8, and the report says which quantizer made it and why the first
    failed. Without the fallback this conversion keeps layers in float or fails."""
    pytest.importorskip("nncf", reason="needs nncf (Intel's quantizer, the ONNX route's second)")
    out = tmp_path / "digits_outlier.onnx"
    result = unframe.convert(trained.model, to="onnx", sample_inputs=torch.tensor(trained.train[:8]),
                             quantize="int8", calibration=with_an_outlier_set(trained), output=out)
    check = result.report.stages[-1]
    assert check.status == "passed" and check.quantizer == "nncf" and not check.kept_float, check.summary()
    assert len(check.others) == 1 and check.others[0].startswith("its own quantizer: output_0:"), check.others
    assert check.details()["quantizers_failed"] == check.others
    assert onnx_accuracy(out, trained) >= trained.float_accuracy - 0.01
    ops = {n.op_type for n in onnx.load(str(out)).graph.node}
    assert {"QuantizeLinear", "DequantizeLinear"} <= ops
    assert any("NNCF" in n and "ONNX graph" in n for n in result.notes), result.notes
    table = subprocess.run([str(UNFRAME), "inspect", str(out)], capture_output=True, text=True, timeout=300)
    assert table.returncode == 0 and "quantized by" in table.stdout and "nncf" in table.stdout, table.stdout[-2000:]
    # every layer's weights and inputs int8 (the last one's read through the Flatten's Reshape)
    assert all("int8 weights per channel" in v and "float" not in v for v in check.layers.values()), check.layers


def test_sensitivity_pass_keeps_the_costly_layers_in_float(tmp_path, trained) -> None:
    model = one_loud_channel()  # one channel's activations 500x larger; the next conv reads it scaled back
    x = torch.tensor(model.test)
    with torch.no_grad():
        kept_accuracy = float((model.model(x).argmax(1).numpy() == model.test_labels).mean())
    assert abs(kept_accuracy - model.float_accuracy) < 1e-6  # the same function
    sets = row_sets(model)
    result = unframe.convert(model.model, to="onnx", sample_inputs=torch.tensor(model.train[:8]),
                             quantize="int8", calibration=sets, output=tmp_path / "kept.onnx")
    check = result.report.stages[-1]
    assert check.status == "passed" and check.kept_float and check.rounds > 1, check.summary()
    assert "kept in float" in check.summary()


def test_the_sensitivity_pass_ranks_on_calibration_sets_never_on_the_held_out_ones(tmp_path, monkeypatch) -> None:
    """The layers kept in float are chosen on calibration sets: ranked on the held-out sets the
    guard then judges, they would mend exactly those (a briefly trained MobileNetV3-Small passed
    on its 8 held-out sets with 3 layers ranked on them, and fell to cosine 0.977 on 24 more)."""
    from unframe.passes.quantize import sensitivity

    model = one_loud_channel()
    sets = row_sets(model)
    calibration, held_out = sets[:32], sets[32:]
    seen: list[np.ndarray] = []
    real = sensitivity.rank_layers

    def recording(graph, request, feeds, limit=16):
        seen.extend(np.asarray(f["input"]) for f in feeds)
        return real(graph, request, feeds, limit)

    monkeypatch.setattr(sensitivity, "rank_layers", recording)
    result = unframe.convert(model.model, to="onnx", sample_inputs=torch.tensor(model.train[:8]),
                             quantize="int8", calibration=sets, output=tmp_path / "kept.onnx")
    check = result.report.stages[-1]
    assert check.rounds > 1 and seen, check.summary()  # the pass ran
    assert all(any(np.array_equal(x, c["input"]) for c in calibration) for x in seen)
    assert not any(np.array_equal(x, h["input"]) for x in seen for h in held_out)
    assert len({x.tobytes() for x in seen}) > 1  # spread over the calibration, not one set


def test_a_sensitivity_pass_past_the_memory_budget_is_left_out_and_said(tmp_path, monkeypatch) -> None:
    """The same model, with a memory budget the sensitivity pass would exceed (its weights' many
    copies, measured past 16 GB on a 1.3 GB decoder that then got killed): the pass is left out,
    the guard's failure stands (exit 5, nothing written) and says why and what raises it."""
    from unframe.errors import ParityError
    from unframe.pipeline import quantize as quantize_stage

    model = one_loud_channel()
    monkeypatch.setattr(quantize_stage, "SENSITIVITY_COPIES", 10**9)
    sets = row_sets(model)
    with pytest.raises(ParityError) as caught:
        unframe.convert(model.model, to="onnx", sample_inputs=torch.tensor(model.train[:8]),
                        quantize="int8", calibration=sets, output=tmp_path / "kept.onnx")
    assert "sensitivity pass was left out" in caught.value.message and "--max-memory" in caught.value.message
    assert not (tmp_path / "kept.onnx").exists()


def test_a_target_that_cant_hold_the_scheme_refuses_it(tmp_path, trained) -> None:
    from unframe.converters.registry import BACKENDS

    holders = {n for n, be in BACKENDS.items() if "int8-dynamic" in be.quantize_schemes}
    other = next((n for n, be in BACKENDS.items() if n not in holders and be.available() and be.onnx_route), None)
    if other is None:
        pytest.skip("every installed backend holds int8-dynamic")
    src = tmp_path / "m.onnx"
    unframe.convert(trained.model, to="onnx", sample_inputs=torch.tensor(trained.train[:8]), output=src)
    checked = unframe.check(src, to=other, quantize="int8-dynamic")
    assert not checked and "int8-dynamic" in checked.blockers[0].reason
    with pytest.raises(UnsupportedError) as err:
        unframe.convert(src, to=other, quantize="int8-dynamic", output=tmp_path / f"m{BACKENDS.get(other).suffixes[0]}")
    assert err.value.exit_code == 4 and "holds" in err.value.hint


def test_bad_requests_are_usage_or_input_errors(tmp_path, trained) -> None:
    x = torch.tensor(trained.train[:8])
    with pytest.raises(UsageError, match="unknown scheme"):
        unframe.convert(trained.model, to="onnx", sample_inputs=x, quantize="int3", explain=True)
    with pytest.raises(UsageError, match="--calibration applies"):
        unframe.convert(trained.model, to="onnx", sample_inputs=x, calibration="c.npz", explain=True)
    with pytest.raises(UsageError, match="unknown measure"):
        unframe.convert(trained.model, to="onnx", sample_inputs=x, quantize="int8", accuracy="top5=0.9", explain=True)
    bad = tmp_path / "bad.npz"
    np.savez(bad, other=trained.train[:64])
    with pytest.raises(InputError, match="no array for input"):
        unframe.convert(trained.model, to="onnx", sample_inputs=x, quantize="int8", calibration=bad)
    bad.write_bytes(b"PK\x03\x04 truncated")
    with pytest.raises(InputError, match="not a readable .npz"):
        unframe.convert(trained.model, to="onnx", sample_inputs=x, quantize="int8", calibration=bad)


@pytest.mark.slow
def test_cli_quantizes_a_pt2_file(tmp_path, trained, calibration) -> None:
    src = tmp_path / "digits.pt2"
    batch = torch.export.Dim("batch", min=1, max=1024)
    torch.export.save(torch.export.export(trained.model, (torch.tensor(trained.train[:8]),),
                                          dynamic_shapes={"input": {0: batch}}), src)
    run = subprocess.run([str(UNFRAME), "convert", str(src), "--to", "onnx", "--quantize", "int8",
                          "--calibration", str(calibration), "-o", str(tmp_path / "q.onnx")],
                         capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-2000:]
    assert "accuracy (int8): passed" in run.stdout
    assert onnx_accuracy(tmp_path / "q.onnx", trained) >= trained.float_accuracy - 0.01
    # inspect reads the guard's record back from the file: figures, latency, scheme per layer
    shown = subprocess.run([str(UNFRAME), "inspect", "--json", str(tmp_path / "q.onnx")],
                           capture_output=True, text=True, timeout=300)
    assert shown.returncode == 0, shown.stderr[-2000:]
    acc = json.loads(shown.stdout)["parity"]["stages"][-1]["accuracy"]
    graph = {n.name for n in onnx.load(tmp_path / "q.onnx").graph.node if n.op_type in ("Conv", "Gemm", "MatMul")}
    assert set(acc["layers"]) == graph and all(v.startswith("int8 weights") for v in acc["layers"].values()), acc
    assert acc["latency"]["before_ms"] > 0 and acc["latency"]["runs"] >= 5 and acc["size"][1] < acc["size"][0]
    table = subprocess.run([str(UNFRAME), "inspect", str(tmp_path / "q.onnx")], capture_output=True, text=True,
                           timeout=300, env={**os.environ, "COLUMNS": "200"})
    assert "scheme per layer (the quantized graph)" in table.stdout and "latency float -> quantized" in table.stdout


@pytest.mark.slow
def test_w4_decoder_keeps_its_tokens_and_perplexity(tmp_path) -> None:
    """A character-level decoder trained on Python's own sources: w4 keeps at least 90% of 32
    greedy tokens and the held-out perplexity within 5%, judged by the decoder guard."""
    from quant_models import char_decoder

    decoder = char_decoder()
    sets = [{"input_ids": decoder.windows[i:i + 2]} for i in range(0, 60, 2)]
    result = unframe.convert(decoder.model, to="onnx", sample_inputs={"input_ids": torch.tensor(decoder.windows[:2])},
                             dynamic=[("input_ids", 1, "seq")], quantize="w4", calibration=sets,
                             output=tmp_path / "decoder.w4.onnx")
    check = result.report.stages[-1]
    assert check.status == "passed" and check.tokens is not None and check.perplexity is not None, check.summary()
    assert check.tokens >= 0.9 and check.perplexity[1] <= 1.05 * check.perplexity[0]
    assert check.perplexity[0] < 8.0  # it learnt the text (128 codes at random: 128)
    assert "int4" in " ".join(result.notes)
    with pytest.raises(ParityError, match="perplexity"):  # the guard can fail: a stricter bound
        unframe.convert(decoder.model, to="onnx", sample_inputs={"input_ids": torch.tensor(decoder.windows[:2])},
                        dynamic=[("input_ids", 1, "seq")], quantize="w4", calibration=sets,
                        accuracy="ppl=0.001", output=tmp_path / "strict.w4.onnx")


def test_int4_blocks_worked_a_few_at_a_time_are_the_same(monkeypatch) -> None:
    """The int4 blocks are quantized a chunk of rows at a time (a 1B model's embedding made ~10 GB
    of temporaries at once): chunks of 7 blocks give the very values and scales of one chunk, along
    either axis, a padded last block included."""
    import numpy as np

    from unframe.passes.quantize import onnx_quant

    w = np.random.default_rng(0).standard_normal((70, 45)).astype(np.float32) * 0.1
    w[3, 5] = 4.0  # an outlier: its block clips
    for axis in (0, 1):
        whole = onnx_quant._int4_blocks(w, axis)
        monkeypatch.setattr(onnx_quant, "ROWS_AT_ONCE", 7)
        parts = onnx_quant._int4_blocks(w, axis)
        monkeypatch.undo()
        assert np.array_equal(whole[0].astype(np.int8), parts[0].astype(np.int8))
        assert np.array_equal(whole[1], parts[1]) and whole[2] == parts[2]
        assert whole[0].shape == w.shape and whole[1].shape[axis] == -(-w.shape[axis] // 32)


def test_a_tied_embedding_and_its_transposed_head_are_quantized_once() -> None:
    """A language model whose output head is its embedding (tied weights: Llama-3.2-1B's 1 GB
    table): the export reads the one initializer through Gather and through Transpose -> MatMul,
    which the per-node pass can't see. w4 stores it once as int4 blocks along the hidden axis
    (w8: int8 rows), the logits follow the float model's (the quantized function is right), and the
    weights shrink accordingly. Control: before, the table stayed float32 (0.84x the float size on
    the one-layer Llama)."""
    import numpy as np
    import onnxruntime as ort

    torch.manual_seed(0)

    class Tied(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = torch.nn.Embedding(512, 64)
            self.mid = torch.nn.Linear(64, 64)
            self.head = torch.nn.Linear(64, 512, bias=False)
            self.head.weight = self.emb.weight

        def forward(self, input_ids):
            return {"logits": self.head(torch.tanh(self.mid(self.emb(input_ids))))}

    model, ids = Tied().eval(), torch.randint(0, 512, (2, 12), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        want = model(ids)["logits"].numpy()
    for scheme, bits in (("w4", 4), ("w8", 8)):
        result = unframe.convert(model, to="onnx", sample_inputs=ids, quantize=scheme, validate=False)
        graph = result.model.graph
        table = graph.initializers[f"head.weight_q{bits}"]
        assert table.const_value.dtype == (ir.DataType.INT4 if bits == 4 else ir.DataType.INT8)
        assert "head.weight" not in graph.initializers  # no float copy left
        readers = {u.node.op_type for dq in table.uses() for u in dq.node.outputs[0].uses()}
        assert readers == {"Gather", "Transpose"}, readers
        session = ort.InferenceSession(ir.to_proto(result.model).SerializeToString(), providers=["CPUExecutionProvider"])
        got = session.run(None, {graph.inputs[0].name: ids.numpy()})[0]
        cosine = float((got * want).sum() / np.linalg.norm(got) / np.linalg.norm(want))
        assert cosine > (0.97 if bits == 4 else 0.999), (scheme, cosine)  # random weights: int4 costs ~1 %
        assert any("embedding table" in n for n in result.notes), result.notes


def test_a_detector_level_left_without_candidates_runs_in_the_int8_graph(tmp_path) -> None:
    """torchvision's RetinaNet clips its boxes as ``stack(...).reshape(boxes.shape)``; with the
    shapes onnxruntime's quantizer inferred left in the int8 graph, onnxruntime's ReshapeFusion
    made that ``Reshape(x, [0, -1])``, which fails on a level that kept no candidate (every seeded
    RetinaNet input failed so). The int8 graph keeps only the float graph's shapes: it runs such
    an input in a default onnxruntime session, as the float graph does. Control: with the
    quantizer's shapes put back, the same session fails."""
    import onnxruntime as ort

    from unframe.passes.quantize import QuantRequest, scheme_of
    from unframe.passes.quantize.onnx_quant import quantize_onnx

    class TwoLevels(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            torch.manual_seed(0)
            self.body = torch.nn.Sequential(torch.nn.Conv2d(3, 8, 3, padding=1), torch.nn.ReLU(),
                                            torch.nn.Conv2d(8, 8, 3, padding=1), torch.nn.ReLU())
            self.box = torch.nn.Conv2d(8, 4, 1)

        def forward(self, x):
            f, score = self.body(x), x.mean(1, keepdim=True)  # a level keeps where its input is bright
            kept = []
            for level, s in ((f, score), (torch.nn.functional.max_pool2d(f, 2), torch.nn.functional.max_pool2d(score, 2))):
                keep = s.flatten() > 0.5
                k = self.box(level).permute(0, 2, 3, 1).reshape(-1, 4)[keep]
                boxes = torch.stack((k[:, 0::4], k[:, 1::4], k[:, 2::4] + 1, k[:, 3::4] + 1), dim=2).flatten(1)
                xs, ys = boxes[..., 0::2].clamp(0, 16), boxes[..., 1::2].clamp(0, 16)  # torchvision's clip_boxes_to_image
                kept.append(torch.stack((xs, ys), dim=boxes.dim()).reshape(boxes.shape))
            return torch.cat(kept)

    path = tmp_path / "float.onnx"
    x = torch.randn(1, 3, 16, 16)
    torch.onnx.export(TwoLevels().eval(), (x,), str(path), dynamo=False, input_names=["x"])
    float_graph = ir.load(path)
    rng = np.random.default_rng(0)
    sets = [{"x": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(8)]
    quantized, _ = quantize_onnx(float_graph, QuantRequest(scheme_of("int8"), sets, "drawn", True, ()))
    empty = {"x": np.zeros((1, 3, 16, 16), np.float32)}  # no candidate on either level

    def run(model: ir.Model, feed: dict) -> np.ndarray:
        data = ir.to_proto(model).SerializeToString()
        return ort.InferenceSession(data, providers=["CPUExecutionProvider"]).run(None, feed)[0]

    assert run(float_graph, empty).shape == (0, 4)
    assert run(quantized, empty).shape == (0, 4)
    busy, busy_float = run(quantized, sets[0]), run(float_graph, sets[0])  # both levels keep candidates
    assert busy.shape[1:] == (4,) and abs(len(busy) - len(busy_float)) <= 0.1 * len(busy_float) and len(busy_float)
    assert sum(n.op_type == "QuantizeLinear" for n in quantized.graph) > 0
    inferred = onnx.shape_inference.infer_shapes(ir.to_proto(quantized))  # the shapes a quantizer writes
    from onnxruntime.tools.symbolic_shape_infer import SymbolicShapeInference

    inferred = SymbolicShapeInference.infer_shapes(inferred, auto_merge=True)
    with pytest.raises(Exception, match="reshape"):
        ort.InferenceSession(inferred.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, empty)


def test_a_trained_detector_is_judged_by_its_detections(tmp_path, detector) -> None:
    """A detector's boxes, scores and labels are judged as detections (matched by label and IoU,
    score-weighted), not as score rows; int8 keeps the digits it finds; a broken calibration
    fails on its detections."""
    import onnxruntime as ort
    from quant_models import detector_int8, detector_recall, detector_sets, downstream

    d, float_recall = detector
    out = tmp_path / "detector_int8.onnx"
    result = detector_int8(d, "onnx", out)
    check = result.report.stages[-1]
    assert check.stage == "accuracy" and check.status == "passed", check.summary()
    (found,) = check.detections
    assert found.outputs.names == tuple(v.name for v in onnx.load(out).graph.output), found.outputs
    # two digits per canvas and two background cells at scores ~1e-6: the digits are matched, the
    # background's boxes may be any empty cell and weigh nothing
    assert found.agreement >= 0.9 and not found.tied and found.matched >= 0.5 * found.reference
    assert check.top1 is None and "found on both sides" in check.summary()
    session = ort.InferenceSession(str(out), providers=["CPUExecutionProvider"])
    recall = detector_recall(lambda c: session.run(None, {session.get_inputs()[0].name: c}), d)
    assert recall >= float_recall - 0.05, (recall, float_recall)
    # its post-processing (gathering the four best cells, decoding their boxes in pixels) stays
    # float: onnxruntime's quantizer would put Q/DQ pairs on its Mul and Add
    graph = ir.load(out).graph
    after = downstream(graph, "TopK")
    assert {"GatherND", "Mul", "Add"} <= {n.op_type for n in after}, sorted(n.op_type for n in after)
    assert not [n.name for n in after if n.op_type in ("QuantizeLinear", "DequantizeLinear")]
    assert any(n.op_type == "QuantizeLinear" for n in graph)  # the network itself is int8
    assert any("post-processing kept in float" in n and "TopK" in n for n in result.notes), result.notes

    sets = detector_sets(d)
    broken = [{"x": s["x"] * 1000.0} for s in sets[:32]] + sets[32:]
    with pytest.raises(ParityError) as err:
        detector_int8(d, "onnx", tmp_path / "broken.onnx", broken)
    assert err.value.exit_code == 5 and "found on both sides" in err.value.message, err.value.message
    assert not (tmp_path / "broken.onnx").exists()


def test_a_model_that_amplifies_int8_rounding_is_told_so(tmp_path) -> None:
    """A float model whose answer moves when its inputs are merely rounded to int8 steps (sin of 200
    times a layer's output, twice: whichever one layer is kept in float, the other's
    int8 input is amplified) can't be quantized to int8 by either quantizer: the guard's failure
    says so, after the other quantizer and the sensitivity pass tried. (With one such stage,
    NNCF's quantizer passes with the first layer kept in float: it leaves the Mul's input float.)"""

    class Amplifier(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.b, self.c = torch.nn.Linear(8, 32), torch.nn.Linear(32, 32), torch.nn.Linear(32, 6)

        def forward(self, x):
            return self.c(torch.sin(200.0 * self.b(torch.sin(200.0 * self.a(x)))))

    torch.manual_seed(0)
    rng = np.random.default_rng(0)
    sets = [{"x": rng.normal(size=(4, 8)).astype(np.float32)} for _ in range(20)]
    with pytest.raises(ParityError) as err:
        unframe.convert(Amplifier().eval(), to="onnx", sample_inputs=torch.tensor(sets[0]["x"]), quantize="int8",
                        calibration=sets, output=tmp_path / "amp.onnx")
    check = err.value.report.stages[-1]
    assert check.stage == "accuracy" and check.rounds > 1 and check.floor and check.floor in check.summary()
    if importlib.util.find_spec("nncf") is not None:  # the other quantizer was tried and failed too
        assert check.others and check.rounds >= 3, check.summary()
    assert "inputs merely rounded to int8 steps" in err.value.message
    assert not (tmp_path / "amp.onnx").exists()


def test_the_guard_judges_the_int8_graph_as_a_users_onnxruntime_session_runs_it(tmp_path, trained,
                                                                               monkeypatch) -> None:
    """The guard's cosine is the one a user's onnxruntime session (default options: the Q/DQ
    pairs fused into int8 kernels) gives on the held-out sets, against the float model; not the
    graph run as written, which computes in float between its quantize steps. With 8-bit weights
    on a CPU whose int8 kernels saturate them (no VNNI) the two differ, and the test tells them
    apart; elsewhere they may agree to the last digit."""
    import onnxruntime as ort

    from unframe import cpu
    from unframe.passes.quantize import onnx_quant

    monkeypatch.setattr(onnx_quant, "saturates_int8", lambda: False)  # 8-bit weights

    sets = [{"input": trained.train[i:i + 8]} for i in range(0, 320, 8)]
    held_out = sets[32:]
    out = tmp_path / "q.onnx"
    result = unframe.convert(trained.model, to="onnx", sample_inputs=torch.tensor(trained.train[:8]),
                             quantize="int8", calibration=sets, output=out)
    check = result.report.stages[-1]
    assert check.status == "passed" and check.cases == len(held_out), check.summary()

    def cosine(level) -> float:
        options = ort.SessionOptions()
        options.graph_optimization_level = level
        session = ort.InferenceSession(str(out), options, providers=["CPUExecutionProvider"])
        with torch.no_grad():
            ref = np.concatenate([trained.model(torch.tensor(s["input"])).numpy().ravel() for s in held_out])
        got = np.concatenate([session.run(None, s)[0].ravel() for s in held_out])
        a, b = ref.astype(np.float64), got.astype(np.float64)
        return float(a @ b / np.linalg.norm(a) / np.linalg.norm(b))

    users = cosine(ort.SessionOptions().graph_optimization_level)  # onnxruntime's default
    assert users == pytest.approx(cosine(ort.GraphOptimizationLevel.ORT_ENABLE_ALL), abs=1e-12)
    (judged,) = check.cosine.values()
    assert judged == pytest.approx(users, abs=1e-6), (check.cosine, users)
    if cpu.saturates_int8():
        assert cosine(ort.GraphOptimizationLevel.ORT_ENABLE_BASIC) != users  # as written: another figure


@pytest.mark.parametrize("saturates", [True, False])
def test_weights_are_held_to_7_bits_where_the_cpus_int8_kernels_saturate(tmp_path, trained, monkeypatch,
                                                                          saturates) -> None:
    """On an x86 CPU without VNNI (unframe.cpu.saturates_int8) onnxruntime's int8 kernels saturate
    8-bit weights: the int8 graph's weights are held to 7 bits there (reduce_range) and the notes
    say why; elsewhere they use the full 8 bits."""
    from unframe.passes.quantize import onnx_quant

    monkeypatch.setattr(onnx_quant, "saturates_int8", lambda: saturates)
    sets = [{"input": trained.train[i:i + 8]} for i in range(0, 320, 8)]
    out = tmp_path / "q.onnx"
    result = unframe.convert(trained.model, to="onnx", sample_inputs=torch.tensor(trained.train[:8]),
                             quantize="int8", calibration=sets, output=out)
    assert result.report.stages[-1].status == "passed"
    graph = onnx.load(out)
    weights = {i.name: onnx.numpy_helper.to_array(i) for i in graph.graph.initializer}
    quantized = [weights[n.input[0]] for n in graph.graph.node if n.op_type == "DequantizeLinear"
                 and n.input[0] in weights and weights[n.input[0]].dtype == np.int8 and weights[n.input[0]].size >= 64]
    assert quantized
    largest = max(int(np.abs(w.astype(np.int32)).max()) for w in quantized)
    assert (largest <= 64) if saturates else (largest == 127), largest
    noted = any("7 bits" in n for n in result.notes)
    assert noted == saturates, result.notes
