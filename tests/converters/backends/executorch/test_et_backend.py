"""The registered ExecuTorch backend: the ONNX route refused with the blocker naming the direct
route (exit 4, from `unframe check`, `unframe convert` and ``unframe.convert``), programs from
outside read safely (a garbage, truncated or forged .pte is a one-line error, never a crash of
this process), and `unframe inspect` showing a program's sidecar and provenance."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import onnx
import pytest
from click.testing import CliRunner
from et_helpers import convert, images, prepare, small_cnn
from onnx import TensorProto, helper

from unframe.cli.inspect import describe
from unframe.cli.main import cli
from unframe.converters.backends.executorch.runner import runner_for_file
from unframe.converters.registry import BACKENDS
from unframe.errors import InputError, UnsupportedError


@pytest.fixture(scope="module")
def onnx_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 4])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 4])
    model = helper.make_model(helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y]),
                              opset_imports=[helper.make_opsetid("", 18)])
    path = tmp_path_factory.mktemp("onnx") / "relu.onnx"
    onnx.save(model, path)
    return path


@pytest.fixture(scope="module")
def written(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A program converted and written as the pipeline would: stamped, then ``write``."""
    p = prepare(small_cnn(), images(1))
    folder = tmp_path_factory.mktemp("pte")
    artifact, _ = convert(p, folder / "work")
    backend = BACKENDS.get("executorch")
    backend.stamp(artifact, {"route": "torch -> executorch (direct)", "source_sha256": "cd" * 32})
    path = folder / "cnn.pte"
    backend.write(artifact, path)
    return path


def test_registered_with_its_extra() -> None:
    backend = BACKENDS.get("executorch")
    assert backend.extra == "executorch" and backend.suffixes == (".pte",)
    assert set(backend.option_names) == {"precision", "shapes", "static"}
    assert "executorch" in backend.versions()


def test_check_refuses_onnx_naming_the_direct_route(onnx_file: Path) -> None:
    result = CliRunner().invoke(cli, ["check", str(onnx_file), "--to", "executorch"])
    assert result.exit_code == 4, result.output
    assert "torch sources" in result.output and "Traceback" not in result.output


def test_convert_refuses_onnx_with_the_same_blocker(onnx_file: Path, tmp_path: Path) -> None:
    import unframe

    backend = BACKENDS.get("executorch")
    with pytest.raises(UnsupportedError) as err:
        unframe.convert(str(onnx_file), to="executorch", output=str(tmp_path / "m.pte"))
    assert err.value.exit_code == 4
    from unframe.converters.base import Target

    expected = backend.check(None, Target("executorch"))  # type: ignore[arg-type]
    assert [b.reason for b in err.value.blockers] == [b.reason for b in expected]
    assert not (tmp_path / "m.pte").exists()


def test_runner_reads_a_written_program(written: Path) -> None:
    runner = runner_for_file(written)  # header checked, loaded in a child first, then here
    assert [s.name for s in runner.input_specs()] == ["x"]
    out = runner.run({"x": images(2).numpy()})["output_0"]
    assert out.shape == (2, 5) and np.isfinite(out).all() and float(np.abs(out).max()) > 0.1


def test_runner_without_sidecar_uses_the_method_metadata(written: Path, tmp_path: Path) -> None:
    bare = tmp_path / "bare.pte"
    bare.write_bytes(written.read_bytes())
    runner = runner_for_file(bare)
    assert [s.name for s in runner.input_specs()] == ["input_0"]
    assert runner.run({"input_0": images(8).numpy()})["output_0"].shape == (8, 5)


@pytest.mark.parametrize("damage", ["garbage", "truncated", "forged_header"])
def test_damaged_program_is_a_one_line_error(written: Path, tmp_path: Path, damage: str) -> None:
    data = written.read_bytes()
    bad = tmp_path / "bad.pte"
    if damage == "garbage":  # what aborts ExecuTorch's loader (SIGABRT) when handed to it
        bad.write_bytes(os.urandom(len(data)))
    elif damage == "truncated":
        bad.write_bytes(data[: len(data) // 2])
    else:  # a valid header over random bytes: only the loader can tell, in a child process
        bad.write_bytes(data[:40] + os.urandom(len(data) - 40))
    with pytest.raises(InputError) as err:
        runner_for_file(bad)
    assert err.value.exit_code == 3 and "\n" not in str(err.value)
    result = CliRunner().invoke(cli, ["inspect", str(bad)])
    if damage != "forged_header":  # the header alone refuses these; the forged one has a header
        assert result.exit_code == 3 and "error:" in result.output and "Traceback" not in result.output


def test_inspect_shows_sidecar_and_provenance(written: Path) -> None:
    info = describe(str(written))
    assert info["kind"] == "pte" and info["sidecar_status"] == "ok" and info["sha256_match"] is True
    assert info["precision"] == "fp32" and info["delegation"]["backend"] == "XnnpackBackend"
    assert info["inputs"] == [{"name": "x", "shape": ["batch 1..8", 3, 16, 16], "dtype": "float"}]
    assert info["provenance"]["route"] == "torch -> executorch (direct)"
    result = CliRunner().invoke(cli, ["inspect", str(written)])
    assert result.exit_code == 0, result.output
    assert "XnnpackBackend" in result.output and "sha256 matches" in result.output


def test_inspect_notices_a_replaced_program(written: Path, tmp_path: Path) -> None:
    copy = tmp_path / "cnn.pte"
    data = bytearray(written.read_bytes())
    data[-1] ^= 0xFF  # one weight byte changed
    copy.write_bytes(bytes(data))
    side = json.loads(Path(str(written) + ".json").read_text())
    Path(str(copy) + ".json").write_text(json.dumps(side))
    assert describe(str(copy))["sha256_match"] is False
