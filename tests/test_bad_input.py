"""Every bad input gets a one-line error naming the problem, a nonzero exit, no traceback,
nothing written, and the input unchanged."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from onnx import TensorProto, helper, numpy_helper
from spine_utils import mlp_model, snapshot

from unframe.cli.main import cli


def _external_model(folder: Path, location: str) -> Path:
    """An MLP whose weight W lives in external data at ``location``."""
    model = mlp_model()
    w = next(t for t in model.graph.initializer if t.name == "W")
    w.data_location = TensorProto.EXTERNAL
    w.ClearField("raw_data")
    w.ClearField("float_data")
    for k, v in (("location", location), ("offset", "0"), ("length", "48")):
        e = w.external_data.add()
        e.key, e.value = k, v
    path = folder / "model.onnx"
    onnx.save(model, path)
    return path


def _external_pair(folder: Path, w_range: tuple[int, int], b_range: tuple[int, int]) -> Path:
    """An MLP whose W and b both live in data.bin, at the given (offset, length) ranges."""
    model = mlp_model()
    for t, (offset, length) in zip(model.graph.initializer, (w_range, b_range), strict=True):
        t.data_location = TensorProto.EXTERNAL
        t.ClearField("raw_data")
        t.ClearField("float_data")
        for k, v in (("location", "data.bin"), ("offset", str(offset)), ("length", str(length))):
            e = t.external_data.add()
            e.key, e.value = k, v
    (folder / "data.bin").write_bytes(bytes(128))
    path = folder / "model.onnx"
    onnx.save(model, path)
    return path


def _edit_external(path: Path, **entries: str) -> Path:
    """Replace W's external-data entries (a key given twice: a list)."""
    model = onnx.load(path, load_external_data=False)
    w = next(t for t in model.graph.initializer if t.name == "W")
    del w.external_data[:]
    for k, v in entries.items():
        for value in v if isinstance(v, list) else [v]:
            e = w.external_data.add()
            e.key, e.value = k, value
    onnx.save(model, path)
    return path


def _sparse_external(folder: Path) -> Path:
    model = mlp_model()
    values = numpy_helper.from_array(np.array([1.0], np.float32), "S")
    indices = numpy_helper.from_array(np.array([0], np.int64), "S_idx")
    sparse = helper.make_sparse_tensor(values, indices, [4, 3])
    sparse.values.data_location = TensorProto.EXTERNAL
    sparse.values.ClearField("raw_data")
    e = sparse.values.external_data.add()
    e.key, e.value = "location", "w.bin"
    model.graph.sparse_initializer.append(sparse)
    (folder / "w.bin").write_bytes(bytes(64))
    path = folder / "model.onnx"
    onnx.save(model, path)
    return path


def _cycle(folder: Path) -> Path:
    nodes = [helper.make_node("Relu", ["b"], ["a"], name="n1"), helper.make_node("Relu", ["a"], ["b"], name="n2"),
             helper.make_node("Identity", ["a"], ["y"], name="n3")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    p = folder / "cycle.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), p)
    return p


def _dangling(folder: Path) -> Path:
    nodes = [helper.make_node("Add", ["x", "ghost"], ["y"], name="adder")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    p = folder / "dangling.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13)]), p)
    return p


def _unknown_domain(folder: Path) -> Path:
    nodes = [helper.make_node("Frobnicate", ["x"], ["y"], domain="com.example.secret")]
    g = helper.make_graph(nodes, "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                          [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])])
    p = folder / "domain.onnx"
    onnx.save(helper.make_model(g, opset_imports=[helper.make_opsetid("", 13),
                                                  helper.make_opsetid("com.example.secret", 1)]), p)
    return p


def _future_opset(folder: Path) -> Path:
    m = mlp_model(opset=onnx.defs.onnx_opset_version() + 5)
    p = folder / "future.onnx"
    onnx.save(m, p)
    return p


def _make(kind: str, folder: Path) -> Path:
    if kind == "empty":
        p = folder / "empty.onnx"
        p.write_bytes(b"")
    elif kind == "random":
        p = folder / "random.onnx"
        p.write_bytes(np.random.default_rng(0).integers(0, 256, 4096, dtype=np.uint8).tobytes())
    elif kind == "truncated":
        data = mlp_model().SerializeToString()
        p = folder / "truncated.onnx"
        p.write_bytes(data[: len(data) * 2 // 3])
    elif kind == "directory":
        p = folder / "adir.onnx"
        p.mkdir()
    elif kind == "unknown_ext":
        p = folder / "model.xyz"
        p.write_bytes(mlp_model().SerializeToString())
    elif kind == "cycle":
        p = _cycle(folder)
    elif kind == "dangling":
        p = _dangling(folder)
    elif kind == "domain":
        p = _unknown_domain(folder)
    elif kind == "future_opset":
        p = _future_opset(folder)
    elif kind == "ext_dotdot":
        sub = folder / "m"
        sub.mkdir()
        (folder / "w.bin").write_bytes(np.zeros(12, np.float32).tobytes())
        p = _external_model(sub, "../w.bin")
    elif kind == "ext_absolute":
        (folder / "w.bin").write_bytes(np.zeros(12, np.float32).tobytes())
        p = _external_model(folder, str(folder / "w.bin"))
    elif kind == "ext_symlink":
        outside = folder / "outside"
        outside.mkdir()
        (outside / "w.bin").write_bytes(np.zeros(12, np.float32).tobytes())
        sub = folder / "m"
        sub.mkdir()
        os.symlink(outside / "w.bin", sub / "w.bin")
        p = _external_model(sub, "w.bin")
    elif kind == "ext_missing":
        p = _external_model(folder, "missing.bin")
    elif kind == "ext_parent_link":  # a folder on the way is a link out
        outside = folder / "outside"
        outside.mkdir()
        (outside / "w.bin").write_bytes(bytes(48))
        sub = folder / "m"
        sub.mkdir()
        os.symlink(outside, sub / "weights")
        p = _external_model(sub, "weights/w.bin")
    elif kind == "ext_inner_link":  # even a link that stays inside: it can change after the check
        (folder / "real.bin").write_bytes(bytes(48))
        os.symlink(folder / "real.bin", folder / "w.bin")
        p = _external_model(folder, "w.bin")
    elif kind == "ext_hardlink":
        outside = folder / "outside"
        outside.mkdir()
        (outside / "secret.bin").write_bytes(bytes(48))
        sub = folder / "m"
        sub.mkdir()
        os.link(outside / "secret.bin", sub / "w.bin")
        p = _external_model(sub, "w.bin")
    elif kind == "ext_fifo":  # reading it would block forever
        os.mkfifo(folder / "w.bin")
        p = _external_model(folder, "w.bin")
    elif kind == "ext_bad_offset":
        (folder / "w.bin").write_bytes(bytes(48))
        p = _edit_external(_external_model(folder, "w.bin"), location="w.bin", offset="x", length="48")
    elif kind == "ext_negative_offset":
        (folder / "w.bin").write_bytes(bytes(64))
        p = _edit_external(_external_model(folder, "w.bin"), location="w.bin", offset="-4", length="48")
    elif kind == "ext_twice":
        (folder / "w.bin").write_bytes(bytes(48))
        p = _edit_external(_external_model(folder, "w.bin"), location=["w.bin", "other.bin"])
    elif kind == "ext_nul":
        (folder / "w.bin").write_bytes(bytes(48))
        p = _edit_external(_external_model(folder, "w.bin"), location="w.bin\0.txt", length="48")
    elif kind == "ext_overlap":
        p = _external_pair(folder, (0, 48), (40, 12))
    elif kind == "ext_sparse":
        p = _sparse_external(folder)
    else:
        raise AssertionError(kind)
    return p


CASES = {
    # kind: (expected exit code, words the message must contain)
    "empty": (3, "empty"),
    "random": (3, "not a readable ONNX file"),
    "truncated": (3, "ONNX"),
    "directory": (3, "is a directory"),
    "unknown_ext": (3, "unknown model format"),
    "cycle": (3, "cycle"),
    "dangling": (3, "'ghost', which nothing produces"),
    "domain": (4, "unknown op domain"),
    "future_opset": (4, "newer than the installed onnx"),
    "ext_dotdot": (3, "outside the model's folder"),
    "ext_absolute": (3, "absolute path"),
    "ext_symlink": (3, "through a link: w.bin"),
    "ext_missing": (3, "missing"),
    "ext_parent_link": (3, "through a link: weights"),
    "ext_inner_link": (3, "through a link: w.bin"),
    "ext_hardlink": (3, "has 2 hard links"),
    "ext_fifo": (3, "which is not a regular file"),
    "ext_bad_offset": (3, "with a bad offset 'x'"),
    "ext_negative_offset": (3, "with a negative offset (-4)"),
    "ext_twice": (3, "with two 'location' entries"),
    "ext_nul": (3, "at a location unframe won't read"),
    "ext_overlap": (3, "tensors 'W' and 'b' claim overlapping bytes of data.bin"),
    "ext_sparse": (3, "keeps data in external data"),
}


@pytest.mark.parametrize("kind", sorted(CASES))
def test_bad_input_cli(kind: str, tmp_path: Path):
    src = _make(kind, tmp_path)
    out_dir = tmp_path / "out"
    out_dir.mkdir()
    before = snapshot(tmp_path)
    result = CliRunner().invoke(cli, ["convert", str(src), "--to", "onnx", "-o", str(out_dir / "o.onnx"),
                                      "--opset", "13"])
    code, words = CASES[kind]
    assert result.exit_code == code, result.output
    err = result.stderr.strip()
    assert err.startswith("error: ") and len(err.splitlines()) == 1, err
    assert words in err
    assert "Traceback" not in result.output
    assert snapshot(tmp_path) == before  # nothing written, input unchanged
    assert not list(out_dir.iterdir())


def test_debug_shows_traceback(tmp_path: Path):
    src = _make("random", tmp_path)
    result = CliRunner().invoke(cli, ["convert", str(src), "-o", str(tmp_path / "o.onnx"), "--debug"])
    assert result.exit_code == 3
    assert "Traceback" in result.stderr


def test_output_exists_needs_force(mlp_path: Path, tmp_path: Path):
    out = tmp_path / "exists.onnx"
    out.write_bytes(b"keep me")
    result = CliRunner().invoke(cli, ["convert", str(mlp_path), "-o", str(out)])
    assert result.exit_code == 7
    assert "already exists" in result.stderr and "--force" in result.stderr
    assert out.read_bytes() == b"keep me"
    result = CliRunner().invoke(cli, ["convert", str(mlp_path), "-o", str(out), "--force"])
    assert result.exit_code == 0, result.output
    assert onnx.load(out).graph.node[0].op_type == "MatMul"


def test_output_folder_missing(mlp_path: Path, tmp_path: Path):
    result = CliRunner().invoke(cli, ["convert", str(mlp_path), "-o", str(tmp_path / "nope" / "o.onnx")])
    assert result.exit_code == 2
    assert "does not exist" in result.stderr
    assert not (tmp_path / "nope").exists()


def test_output_equal_to_input_is_refused_even_with_force(mlp_path: Path):
    before = mlp_path.read_bytes()
    result = CliRunner().invoke(cli, ["convert", str(mlp_path), "-o", str(mlp_path), "--force"])
    assert result.exit_code == 2
    assert "is the input" in result.stderr
    assert mlp_path.read_bytes() == before


def test_wrong_output_suffix(mlp_path: Path, tmp_path: Path):
    result = CliRunner().invoke(cli, ["convert", str(mlp_path), "-o", str(tmp_path / "o.txt")])
    assert result.exit_code == 2
    assert "wrong suffix" in result.stderr


def test_no_output_writes_beside_the_source_never_over_it(mlp_path: Path):
    """Without -o the output goes beside the source with the target's suffix; an ONNX source's
    name gains the opset so that it can never name the input."""
    before = mlp_path.read_bytes()
    result = CliRunner().invoke(cli, ["convert", str(mlp_path), "--opset", "17"])
    assert result.exit_code == 0, result.output
    out = mlp_path.with_name("mlp.opset17.onnx")
    assert out.is_file() and mlp_path.read_bytes() == before
    assert {o.domain: o.version for o in onnx.load(out).opset_import}[""] == 17
    again = CliRunner().invoke(cli, ["convert", str(mlp_path), "--opset", "17"])
    assert again.exit_code == 7 and "already exists" in again.stderr


def test_wrong_framework_claim(mlp_path: Path, tmp_path: Path):
    """--from names a framework the file clearly isn't."""
    from unframe.converters.registry import FRONTENDS

    others = [n for n in FRONTENDS.keys() if n != "onnx"]
    if not others:
        pytest.skip("needs a second frontend registered")
    result = CliRunner().invoke(cli, ["convert", str(mlp_path), "--from", others[0], "-o", str(tmp_path / "o.onnx")])
    assert result.exit_code == 3
    assert "looks like a onnx model" in result.stderr


def test_unknown_target(mlp_path: Path, tmp_path: Path):
    result = CliRunner().invoke(cli, ["convert", str(mlp_path), "--to", "nonsense", "-o", str(tmp_path / "o.x")])
    assert result.exit_code == 2
    assert "unknown target 'nonsense'" in result.stderr


def test_external_data_model_converts_lazily(tmp_path: Path):
    """A valid external-data model converts; its weights stay where they are."""
    w = np.random.default_rng(0).standard_normal((4, 3)).astype(np.float32)
    (tmp_path / "w.bin").write_bytes(w.tobytes())
    src = _external_model(tmp_path, "w.bin")
    before = snapshot(tmp_path)
    out = tmp_path / "out"
    out.mkdir()
    result = CliRunner().invoke(cli, ["convert", str(src), "-o", str(out / "o.onnx")])
    assert result.exit_code == 0, result.output
    loaded = onnx.load(out / "o.onnx")
    got = numpy_helper.to_array(next(t for t in loaded.graph.initializer if t.name == "W"))
    np.testing.assert_array_equal(got, w)
    assert {k: v for k, v in snapshot(tmp_path).items() if not k.startswith("out/")} == before


def test_engine_file_as_input_is_refused(tmp_path: Path):
    """An engine is a build product: refused by content (TensorRT's magic bytes), whatever --from says."""
    from unframe.converters.backends.tensorrt.sidecar import is_engine_file

    eng = tmp_path / "model.bin"  # no engine suffix: detection is by content
    eng.write_bytes(b"ftrt" + bytes(60))
    if not is_engine_file(eng):
        pytest.skip("engine magic differs in this TensorRT flavour")
    before = snapshot(tmp_path)
    res = CliRunner().invoke(cli, ["convert", str(eng), "--from", "onnx", "-o", str(tmp_path / "o.onnx")])
    assert res.exit_code == 3 and "is a TensorRT engine" in res.stderr
    assert snapshot(tmp_path) == before


def test_engine_suffix_as_input_is_refused(tmp_path: Path):
    eng = tmp_path / "model.engine"
    eng.write_bytes(bytes(64))
    res = CliRunner().invoke(cli, ["convert", str(eng), "-o", str(tmp_path / "o.onnx")])
    assert res.exit_code == 3 and "is a TensorRT engine" in res.stderr
