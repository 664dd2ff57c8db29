"""Torch sources: files detected by content (not suffix), trust for anything that runs code,
module:factory references, custom pytree output classes."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path
from typing import Any

import numpy as np
import pytest

torch = pytest.importorskip("torch", reason="needs torch")
pytest.importorskip("onnxscript", reason="needs onnxscript (torch.onnx dynamo exporter)")

import torch_models as tm  # noqa: E402

from unframe.converters.base import ConvertOptions, InputSpec  # noqa: E402
from unframe.converters.registry import FRONTENDS  # noqa: E402
from unframe.errors import InputError, MissingExtraError, TrustRequiredError, UsageError  # noqa: E402
from unframe.validate.onnxruntime import OnnxRuntimeRunner  # noqa: E402

HERE = Path(__file__).parent
FACTORY = "torch_models:make_two_inputs"


@pytest.fixture
def fe() -> Any:
    return FRONTENDS.get("torch")


def pair(batch: int = 2) -> tuple[Any, Any]:
    gen = torch.Generator().manual_seed(11)
    return torch.randn(batch, 4, generator=gen), torch.randn(batch, 3, generator=gen)


def load(fe: Any, source: Any, **kw: Any) -> Any:
    opts = ConvertOptions(trust=kw.pop("trust", False), options=kw)
    return fe.load(source, opts)


def check_parity(fe: Any, native: Any, samples: Any = None, **options: Any) -> Any:
    result = fe.to_onnx(native, InputSpec(samples=samples), ConvertOptions(options=options))
    ref, ort = fe.runner(native, result), OnnxRuntimeRunner(result.model)
    for feed in result.feeds:
        expected, got = ref.run(feed), ort.run(feed)
        for name in expected:
            np.testing.assert_allclose(got[name], expected[name], atol=1e-5, rtol=1e-5)
    return result


# ---------------------------------------------------------------------------- by content --
def test_pt2_file_exports_with_its_saved_inputs(fe: Any, tmp_path: Path) -> None:
    model = tm.make_two_inputs()
    path = tmp_path / "m.pt2"
    torch.export.save(torch.export.export(model, pair()), path)
    native = load(fe, path)
    assert isinstance(native, torch.export.ExportedProgram)
    result = check_parity(fe, native)
    assert result.route == "dynamo"


def test_torchscript_file_exports(fe: Any, tmp_path: Path) -> None:
    path = tmp_path / "ts.pt"
    torch.jit.save(torch.jit.trace(tm.make_two_inputs(), pair()), path)
    native = load(fe, path)
    assert isinstance(native, torch.jit.ScriptModule)
    result = check_parity(fe, native, pair())
    assert result.route == "torchscript"
    assert any("TorchScript source" in note for note in result.notes)


def test_torchscript_named_pt2_is_routed_by_content(fe: Any, tmp_path: Path) -> None:
    path = tmp_path / "actually_torchscript.pt2"
    torch.jit.save(torch.jit.trace(tm.make_two_inputs(), pair()), path)
    native = load(fe, path)
    assert isinstance(native, torch.jit.ScriptModule)
    result = check_parity(fe, native, pair(), exporter="torchscript")
    assert any("TorchScript archive despite its .pt2 suffix" in n for n in result.notes)


def test_exported_program_named_pt_is_routed_by_content(fe: Any, tmp_path: Path) -> None:
    path = tmp_path / "actually_pt2.pt"
    torch.export.save(torch.export.export(tm.make_two_inputs(), pair()), path)
    native = load(fe, path)
    assert isinstance(native, torch.export.ExportedProgram)


# --------------------------------------------------------------------------------- trust --
def test_state_dict_needs_trust_then_loads_through_the_factory(fe: Any, tmp_path: Path,
                                                               monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    path = tmp_path / "weights.pth"
    torch.save(tm.make_two_inputs().state_dict(), path)
    with pytest.raises(TrustRequiredError, match="state dict.*--trust"):
        load(fe, path, model_factory=FACTORY)
    with pytest.raises(UsageError, match="--model module:factory"):
        load(fe, path, trust=True)
    native = load(fe, path, trust=True, model_factory=FACTORY)
    expected = tm.make_two_inputs()(*pair())
    torch.testing.assert_close(native(*pair()), expected)


def test_state_dict_that_does_not_fit_the_factory(fe: Any, tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    path = tmp_path / "cnn.pth"
    torch.save(tm.make_cnn().state_dict(), path)
    with pytest.raises(InputError, match="doesn't fit torch_models:make_two_inputs"):
        load(fe, path, trust=True, model_factory=FACTORY)


def test_full_pickle_refused_without_trust(fe: Any, tmp_path: Path,
                                           monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    path = tmp_path / "whole.pt"
    torch.save(tm.make_two_inputs(), path)
    with pytest.raises(TrustRequiredError) as info:
        load(fe, path)
    assert "arbitrary code" in str(info.value) and "--trust" in str(info.value)
    assert "\n" not in str(info.value)
    native = load(fe, path, trust=True)
    torch.testing.assert_close(native(*pair()), tm.make_two_inputs()(*pair()))


def test_factory_reference_needs_trust(fe: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.syspath_prepend(str(HERE))
    assert fe.accepts_path(Path(FACTORY))
    with pytest.raises(TrustRequiredError, match="runs your Python code"):
        load(fe, FACTORY)
    native = load(fe, FACTORY, trust=True)
    assert isinstance(native, tm.TwoInputs)
    with pytest.raises(UsageError, match="has no 'nope'"):
        load(fe, "torch_models:nope", trust=True)
    with pytest.raises(UsageError, match="can't be imported"):
        load(fe, "no_such_module_xyz:make", trust=True)


# ------------------------------------------------------------------------------ bad files --
def test_not_a_torch_file(fe: Any, tmp_path: Path) -> None:
    text = tmp_path / "notes.pt"
    text.write_text("hello, not a model\n")
    with pytest.raises(InputError, match="not a torch archive"):
        load(fe, text)
    other_zip = tmp_path / "data.pt2"
    with zipfile.ZipFile(other_zip, "w") as archive:
        archive.writestr("readme.txt", "hi")
    with pytest.raises(InputError, match="not a torch one"):
        load(fe, other_zip)
    with pytest.raises(InputError, match="no such file"):
        load(fe, tmp_path / "missing.pt2")


def test_pickle_of_something_else(fe: Any, tmp_path: Path) -> None:
    path = tmp_path / "list.pt"
    torch.save([1, 2, 3], path)
    with pytest.raises(InputError, match="not a model or state dict"):
        load(fe, path, trust=True)


# ------------------------------------------------------------------- custom pytree classes --
@pytest.fixture(scope="module")
def bert_pt2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("transformers", reason="needs transformers")
    model = tm.tiny_bert()
    ids = torch.randint(0, 64, (2, 6), generator=torch.Generator().manual_seed(5))
    path = tmp_path_factory.mktemp("bert") / "bert.pt2"
    torch.export.save(torch.export.export(model, (ids,)), path)
    return path


def test_model_output_class_is_imported_for_the_user(bert_pt2: Path) -> None:
    path = bert_pt2
    script = (
        "import sys\n"
        "from pathlib import Path\n"
        "from unframe.converters.base import ConvertOptions\n"
        "from unframe.converters.registry import FRONTENDS\n"
        "assert 'transformers' not in sys.modules\n"
        f"ep = FRONTENDS.get('torch').load(Path({str(path)!r}), ConvertOptions())\n"
        "args, kwargs = ep.example_inputs\n"
        "print(type(ep.module()(*args, **kwargs)).__name__)\n"
    )
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120,
                         env={**os.environ, "PYTHONPATH": os.getcwd()})
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.strip().splitlines()[-1] == "BaseModelOutputWithPoolingAndCrossAttentions"


def test_model_output_class_from_a_missing_package(fe: Any, bert_pt2: Path, tmp_path: Path) -> None:
    path = bert_pt2
    renamed = tmp_path / "renamed.pt2"
    with zipfile.ZipFile(path) as src, zipfile.ZipFile(renamed, "w") as dst:
        for info in src.infolist():
            data = src.read(info)
            if info.filename.endswith(".json"):
                data = data.replace(b"transformers.modeling_outputs", b"absent_pkg_q.modeling_outputs")
            dst.writestr(info, data)
    with pytest.raises(MissingExtraError) as info:
        load(fe, renamed)
    assert "absent_pkg_q" in str(info.value) and "pip install absent_pkg_q" in str(info.value)
    assert info.value.exit_code == 8


def test_legacy_non_zip_torch_save_is_a_pickle(fe: Any, tmp_path: Path) -> None:
    path = tmp_path / "legacy.pth"
    torch.save(tm.make_two_inputs().state_dict(), path, _use_new_zipfile_serialization=False)
    assert not zipfile.is_zipfile(path)
    with pytest.raises(TrustRequiredError, match="state dict"):
        load(fe, path)


def test_names_of_nested_inputs_and_outputs() -> None:
    from unframe.converters.frontends._torch.inputs import leaf_names, output_names

    t = torch.ones(1)
    assert leaf_names((t, {"a": t, "b": [t, t]}), {}, ["x", "extra"]) == \
        ["x", "extra_a", "extra_b_0", "extra_b_1"]
    assert leaf_names(({"image": t, "mask": t},), {}, ["batch"]) == ["image", "mask"]
    assert leaf_names((), {"y": t, "x": t}, ["x", "y"]) == ["y", "x"]
    assert output_names((t, t)) == ["output_0", "output_1"]
    assert output_names({"logits": t, "aux": (t, t), "none": None}) == ["logits", "aux_0", "aux_1"]
    assert output_names(t) == ["output_0"]
