"""docs/cli.md and docs/support.md are generated from the commands and registries: they must not
drift from the code (regenerate with `python -m unframe.tools.gen_docs`)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_generated_docs_are_current() -> None:
    proc = subprocess.run([sys.executable, "-m", "unframe.tools.gen_docs", "--check"], cwd=ROOT,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stdout + proc.stderr[-2000:]


def test_support_doc_counts_come_from_the_registries() -> None:
    from unframe.converters.backends.coreml.ops import supported_ops
    from unframe.version_converter.registry import adapter_table

    text = (ROOT / "docs" / "support.md").read_text()
    assert f"{len(supported_ops())} ONNX ops (default domain) translate to MIL" in text
    assert f"the {len(adapter_table())} registered one-step adapters" in text


def test_cli_doc_usage_lines_name_each_command_once() -> None:
    from unframe.tools.gen_docs import cli_markdown

    text = cli_markdown()
    assert "unframe unframe" not in text
    assert "Usage: unframe check [OPTIONS] MODEL" in text
    assert "Usage: unframe zoo upgrade [OPTIONS]" in text
    assert "## `unframe zoo upgrade`" in text
