"""``unframe zoo``: build the reference model zoo, and upgrade a folder or manifest of models to
an opset (or through any route with --from/--to), in parallel, resumably, locally or on Dask."""

from __future__ import annotations

from pathlib import Path

import click

from unframe.cli.main import debug_option, handle_errors, json_option
from unframe.errors import ConversionError

ConversionErrorCode = ConversionError.exit_code


@click.group()
def zoo() -> None:
    """Build the model zoo and batch-upgrade folders of models."""


@zoo.command()
@click.option("--manifest", type=click.Path(path_type=Path), help="Manifest to build (default: model_zoo/manifest.toml).")
@click.option("--only", multiple=True, metavar="NAME", help="Build only this model (repeatable).")
@click.option("-o", "--output", "out_dir", type=click.Path(path_type=Path),
              help="Build under this folder instead of the manifest's root.")
@click.option("--force", is_flag=True, help="Rebuild models that are already built.")
@click.option("--heavy", is_flag=True, help="Also build the entries marked heavy (large or slow to build).")
@debug_option
@handle_errors
def build(manifest: Path | None, only: tuple[str, ...], out_dir: Path | None, force: bool, heavy: bool,
          debug: bool) -> None:
    """Build the zoo's reference models locally with seeded random weights (no downloads).

    Each model gets inputs.npz and its framework's outputs.npz beside it. A framework that is
    not installed is skipped, saying so.
    """
    from rich.console import Console

    from unframe.errors import ConversionError
    from unframe.zoo.build import FAILED, build_zoo, default_manifest

    console = Console(highlight=False)
    path = manifest or default_manifest()
    outcomes = build_zoo(path, out_dir=out_dir, only=only, force=force, heavy=heavy, console=console)
    counts = {s: sum(o.status == s for o in outcomes) for s in ("built", "already built", "skipped", FAILED)}
    console.print(", ".join(f"{n} {s}" for s, n in counts.items()))
    if counts[FAILED]:
        raise ConversionError(f"{counts[FAILED]} of {len(outcomes)} zoo models failed to build",
                              "see the lines above; rerun with --only NAME --debug")


@zoo.command()
@click.argument("src", metavar="SRC_DIR_OR_MANIFEST", type=click.Path(path_type=Path))
@click.option("--opset", type=int, required=True, help="Target ONNX opset.")
@click.option("-o", "--output", "out_dir", type=click.Path(path_type=Path), required=True,
              help="Output folder (mirrors the source tree; must not be inside it).")
@click.option("-j", "--jobs", "workers", type=int, default=1, show_default=True, help="Models converted at once.")
@click.option("--executor", type=click.Choice(["local", "dask"]), default="local", show_default=True,
              help="Local process pool, or a dask.distributed cluster.")
@click.option("--scheduler", metavar="ADDRESS", help="Dask scheduler (tcp://host:8786); default: a LocalCluster.")
@click.option("--resume", is_flag=True, help="Continue a killed run: skip done models, redo half-done ones.")
@click.option("--report", type=click.Path(path_type=Path), help="Also write a report page (.html or .md).")
@click.option("--timeout", type=float, default=600.0, show_default=True, help="Seconds per model before it is killed.")
@click.option("--from", "from_", metavar="F", help="Source format (a frontend: torch, tf, sklearn); default: ONNX files.")
@click.option("--to", "to", metavar="T[,T...]",
              help="Targets (onnx, coreml, tensorrt, a comma list, or all); several write a folder per "
                   "model. Default: onnx.")
@click.option("--force", is_flag=True, help="Start over, replacing existing outputs and journal.")
@click.option("--no-progress", is_flag=True, help="No progress bar.")
@json_option
@debug_option
@handle_errors
def upgrade(src: Path, opset: int, out_dir: Path, workers: int, executor: str, scheduler: str | None,
            resume: bool, report: Path | None, timeout: float, from_: str | None, to: str | None,
            force: bool, no_progress: bool, as_json: bool, debug: bool) -> None:
    """Upgrade every model in SRC_DIR_OR_MANIFEST to --opset under OUT_DIR.

    Each model runs in its own process and is checked against the original with onnxruntime on
    its saved inputs (inputs.npz beside it) or generated ones. Exit code 0 when no model failed
    (refused models are reported, not errors), 9 when any model failed.
    """
    import sys

    from rich.console import Console

    from unframe.zoo.report import print_table
    from unframe.zoo.runner import UpgradeOptions, upgrade_zoo

    if resume and force:
        from unframe.errors import UsageError

        raise UsageError("--resume and --force contradict each other", "pass one of them")
    opts = UpgradeOptions(opset=opset, out_dir=out_dir, workers=workers, executor=executor,
                          scheduler=scheduler, resume=resume, report=report,
                          timeout=timeout if timeout > 0 else None, source_format=from_, target=to,
                          force=force, progress=not (no_progress or as_json), debug=debug)
    result = upgrade_zoo(src, opts)
    if as_json:
        import json

        click.echo(json.dumps({**result.report, "written": [str(p) for p in result.written]},
                              indent=2, default=str))
        sys.exit(0 if result.ok else ConversionErrorCode)
    console = Console(highlight=False, width=max(Console().width, 160))
    print_table(result.report, console)
    if debug:
        for row in result.report["rows"]:
            if row.get("traceback"):
                click.echo(f"\n{row['id']}:\n{row['traceback']}", err=True)
    for path in result.written:
        console.print(f"wrote {path}")
    if not result.ok:
        sys.exit(ConversionErrorCode)
