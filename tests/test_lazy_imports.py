"""``import unframe`` and ``unframe --help`` never import a framework."""

from __future__ import annotations

import subprocess
import sys

HEAVY = ["torch", "tensorflow", "keras", "coremltools", "tensorrt", "tensorrt_rtx", "sklearn", "dask",
         "skl2onnx", "tf2onnx"]

PROBE = """
import sys
{stmt}
heavy = [m for m in {heavy!r} if m in sys.modules]
print(",".join(heavy))
"""


def _loaded(stmt: str) -> list[str]:
    code = PROBE.format(stmt=stmt, heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    return [m for m in out.strip().split(",") if m]


def test_import_unframe_is_light():
    assert _loaded("import unframe") == []


def test_help_is_light():
    stmt = ("from click.testing import CliRunner\nfrom unframe.cli.main import cli\n"
            "r = CliRunner().invoke(cli, ['--help'])\nassert r.exit_code == 0 and 'convert' in r.output")
    assert _loaded(stmt) == []


def test_registries_and_doctor_are_light():
    """Listing frontends and backends (doctor) must not import their frameworks either."""
    stmt = ("from click.testing import CliRunner\nfrom unframe.cli.main import cli\n"
            "r = CliRunner().invoke(cli, ['doctor', '--json'])\nassert r.exit_code == 0, r.output")
    assert _loaded(stmt) == []


def test_api_attribute_access_is_light():
    assert _loaded("import unframe\nunframe.convert\nunframe.check") == []
