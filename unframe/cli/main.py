"""The ``unframe`` command line. Heavy imports happen inside commands so ``--help`` is instant.

Every user error prints one line (``error: ...``) and exits with the error's code (README lists
them); ``--debug`` adds the traceback.
"""

from __future__ import annotations

import functools
import importlib
import json
import sys
from collections.abc import Callable
from typing import Any

import click

LAZY_COMMANDS = {
    "zoo": ("unframe.cli.zoo:zoo", "Build the model zoo and batch-upgrade folders of models."),
}


class LazyGroup(click.Group):
    """Subcommands defined in other modules, imported only when used."""

    def parse_args(self, ctx: click.Context, args: list[str]) -> list[str]:
        ctx.meta["unframe.json"] = "--json" in args  # a usage error prints JSON too
        return super().parse_args(ctx, args)

    def invoke(self, ctx: click.Context) -> Any:
        try:
            return super().invoke(ctx)
        except click.ClickException as exc:  # bad option or argument, found by click
            if ctx.meta.get("unframe.json"):
                _echo_json_error("usage", exc.exit_code, exc.format_message(), "see --help")
            raise

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted([*super().list_commands(ctx), *LAZY_COMMANDS])

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in LAZY_COMMANDS:
            mod, _, attr = LAZY_COMMANDS[name][0].partition(":")
            try:
                return getattr(importlib.import_module(mod), attr)
            except ImportError as exc:
                msg = str(exc)

                @click.command(name=name, help=LAZY_COMMANDS[name][1])
                def unavailable() -> None:
                    _fail_line(f"the {name} command is unavailable here: {msg}", 8)

                return unavailable
        return super().get_command(ctx, name)

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        rows = []
        for name in self.list_commands(ctx):
            if name in LAZY_COMMANDS:
                rows.append((name, LAZY_COMMANDS[name][1]))
            else:
                cmd = super().get_command(ctx, name)
                if cmd is not None and not cmd.hidden:
                    rows.append((name, cmd.get_short_help_str(limit=80)))
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


@click.group(cls=LazyGroup, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="unframe", prog_name="unframe")
def cli() -> None:
    """unframe: convert trained models between frameworks and runtimes through ONNX,
    checking each stage's numbers against the stage before it."""


def _echo_json_error(kind: str, code: int, message: str, hint: str) -> None:
    """The JSON error object every failure prints on stdout under --json."""
    click.echo(json.dumps({"error": kind, "exit_code": code, "message": message, "hint": hint},
                          indent=2))


def _fail_line(message: str, code: int) -> None:
    click.echo(f"error: {message}", err=True)
    sys.exit(code)


MAX_LISTED_BLOCKERS = 25
MAX_MESSAGE = 180  # characters of an error's message on the terminal; --debug/--json give all
MAX_HINT = 120


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[: limit - 1].rstrip() + "…"


def error_line(exc: Any) -> str:
    """``message (hint)`` kept to about two terminal lines: a tool's long message is cut (the
    full text is under --debug and --json) and the hint, which says what to do, is kept."""
    message = getattr(exc, "message", str(exc))
    hint = _cut(getattr(exc, "hint", ""), MAX_HINT)
    if len(message) > MAX_MESSAGE:
        message = _cut(message, MAX_MESSAGE)
        hint = f"{hint}; " if hint else ""
        hint += "--debug shows the whole message"
    return f"{message} ({hint})" if hint else message


def handle_errors(fn: Callable[..., Any]) -> Callable[..., Any]:
    """One-line errors with their exit codes; tracebacks only with --debug."""

    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        debug = bool(kwargs.get("debug"))
        as_json = bool(kwargs.get("as_json"))
        from unframe import quiet
        from unframe.errors import UnframeError

        quiet.set_debug(debug)
        try:
            return fn(*args, **kwargs)
        except UnframeError as exc:
            if debug:
                _print_traceback(exc)
            if as_json:
                click.echo(json.dumps(exc.to_dict(), indent=2, default=str))
            click.echo(f"error: {exc if debug else error_line(exc)}", err=True)
            divergence = getattr(exc, "divergence", None)
            if divergence is not None and not as_json:
                for line in divergence.lines():
                    click.echo(f"  {line}", err=True)
            blockers = getattr(exc, "blockers", None) or []
            if blockers and not as_json:
                shown = blockers if debug else blockers[:MAX_LISTED_BLOCKERS]
                for b in shown:
                    click.echo(f"  - {b}", err=True)
                if len(shown) < len(blockers):
                    click.echo(f"  ... and {len(blockers) - len(shown)} more "
                               "(--json or --debug lists every one)", err=True)
            sys.exit(exc.exit_code)
        except KeyboardInterrupt:
            if as_json:
                _echo_json_error("interrupted", 130, "interrupted; nothing was written", "")
            click.echo("error: interrupted; nothing was written", err=True)
            sys.exit(130)
        except click.exceptions.Exit:
            raise
        except Exception as exc:  # a bug or an unexpected tool failure: still one line
            if debug:
                _print_traceback(exc)
            text = " ".join(str(exc).split())
            if as_json:
                _echo_json_error("internal", 1, f"unexpected {type(exc).__name__}: {text}",
                                 "nothing was written; rerun with --debug and report it")
            text = (text if debug else _cut(text, MAX_MESSAGE)) or type(exc).__name__
            click.echo(f"error: unexpected {type(exc).__name__}: {text} "
                       "(nothing was written; rerun with --debug and report it)", err=True)
            sys.exit(1)

    return wrapper


def _print_traceback(exc: BaseException) -> None:
    """The traceback, then those of the sandboxed child processes behind it."""
    import traceback

    from unframe.sandbox import child_tracebacks

    traceback.print_exception(exc)
    for text in child_tracebacks(exc):
        click.echo(f"in the sandboxed child process:\n{text}", err=True)


debug_option = click.option("--debug", is_flag=True, help="Show tracebacks.")


def limit_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    """--max-memory and --parity-timeout: the resource limits of unframe.limits."""
    fn = click.option("--parity-timeout", metavar="SECONDS", type=float,
                      help="Stop a parity check that runs longer (default 900).")(fn)
    return click.option("--max-memory", metavar="SIZE",
                        help="Memory parity may use for inputs and weights, e.g. 4GiB "
                             "(default: half of the memory available).")(fn)
json_option = click.option("--json", "as_json", is_flag=True, help="Machine-readable output on stdout.")


def _console() -> Any:
    from rich.console import Console

    # soft wrap: lines (routes, parity figures, paths) are never broken mid-phrase in logs
    return Console(stderr=False, highlight=False, soft_wrap=True)


# --------------------------------------------------------------------------------- convert --
# What a conversion reads, shared by `convert` and `debug` (which runs the same route).
CONVERSION_OPTIONS = [
    click.argument("src"),
    click.option("--from", "from_", metavar="F", help="Source framework: onnx, torch, tf, sklearn (default: detect)."),
    click.option("--to", "to", default="onnx", show_default=True, metavar="T[,T...]",
                 help="Targets: onnx, coreml, tensorrt, openvino, litert (tflite), executorch, a comma list, or all (every backend usable here with a route from the source)."),
    click.option("--via", type=click.Choice(["onnx", "direct"]),
                 help="Route: through ONNX (the hub route), or the target's converter on the source "
                      "model itself (direct: litert and executorch always; openvino on request)."),
    click.option("--opset", type=int, help="ONNX opset of the output (ONNX target)."),
    click.option("--ml-opset", type=int, help="ai.onnx.ml opset of the output (default: the source's)."),
    click.option("--strict-parity", is_flag=True, help="Fail a parity stage whose reference is degenerate (near zero, constant, non-finite)."),
    click.option("--debug-dir", type=click.Path(), help="Where the locator writes its repro and plot (default: beside the output)."),
    click.option("--atol", multiple=True, metavar="X|NAME=X", help="Absolute tolerance, for all outputs or one."),
    click.option("--rtol", multiple=True, metavar="X|NAME=X", help="Relative tolerance, for all outputs or one."),
    click.option("--trust", is_flag=True, help="Allow loading that runs code from the model file (pickle, Lambda)."),
    click.option("--sample-inputs", type=click.Path(), help="An .npz of sample inputs by input name."),
    click.option("--inputs", metavar="NAME:SHAPE:DTYPE,...", help="Input specs, e.g. x:1x3x224x224:float32."),
    click.option("--static", is_flag=True, help="Freeze every dimension to the sample shapes."),
    click.option("--dynamic", multiple=True, metavar="NAME:AXIS[:DIM]", help="Make another axis dynamic (torch)."),
    click.option("--exporter", type=click.Choice(["dynamo", "torchscript"]), help="torch: force an exporter."),
    click.option("--kv-cache", is_flag=True, default=None, help="torch: export a Hugging Face decoder with its KV cache (past_key_values in, present out)."),
    click.option("--model", "model_factory", metavar="MODULE:FACTORY", help="torch: builds the model for a state dict (--trust)."),
    click.option("--signature", help="tf: SavedModel signature (default serving_default)."),
    click.option("--nchw-inputs", is_flag=True, default=None, help="tf: transpose NHWC image inputs to NCHW at the graph edge."),
    click.option("--custom-objects", type=click.Path(), help="tf: a .py module defining custom Keras classes (needs --trust)."),
    click.option("--outputs", metavar="T[,T...]", help="tf: a frozen graph's output tensors, e.g. y:0 (default: every tensor no node consumes)."),
    click.option("--zipmap", is_flag=True, default=None, help="sklearn: keep ZipMap on classifier probabilities."),
    click.option("--ml-to-tensor", is_flag=True, default=None,
                 help="Rewrite ai.onnx.ml ops into standard ONNX ops (automatic for coreml and tensorrt)."),
    click.option("--tree-strategy", type=click.Choice(["auto", "gemm", "perfect", "traversal"]),
                 help="ml_to_tensor: how trees are compiled (default auto: by depth, as hummingbird)."),
    click.option("--float-precision", type=click.Choice(["auto", "float", "double"]), help="sklearn: float32 or double route."),
    click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]), help="Compute or weight precision of onnx/coreml/tensorrt/executorch (16-bit: checked against float32, sensitive nodes kept in float32); openvino/litert: weights stored in fp16 (fp32 keeps them)."),
    click.option("--quantize", type=click.Choice(["int8", "int8-dynamic", "w8", "w4"]),
                 help="Quantize: int8 (weights and activations, calibrated), int8-dynamic, w8 or w4 (weight-only); "
                      "checked by the accuracy guard on held-out inputs."),
    click.option("--calibration", type=click.Path(), metavar="PATH",
                 help="--quantize: an .npz of many input sets (x[i] is set i, or rows of a dataset), or a folder of .npz sets."),
    click.option("--accuracy", metavar="top1=X,cos=Y",
                 help="--quantize: what the guard requires of the quantized artifact (default top1=0.98,cos=0.99; "
                      "det=0.9 for detectors; tokens=0.9,ppl=0.05 for decoders)."),
    click.option("--target", "deploy_target", metavar="iOS16|iOS17|...", help="coreml: minimum deployment target."),
    click.option("--dim", "dims", multiple=True, metavar="NAME:MIN:MAX", help="coreml: range of a dynamic dim."),
    click.option("--enumerated", multiple=True, metavar="NAME:SHAPE,SHAPE",
                 help="coreml: the only shapes an input takes, e.g. x:1x3x224x224,1x3x320x320."),
    click.option("--image-input", help="coreml: treat this input as an image."),
    click.option("--scale", type=float, help="coreml: image scale."),
    click.option("--bias", help="coreml: image bias, comma-separated per channel."),
    click.option("--color-layout", type=click.Choice(["RGB", "BGR", "G"]), help="coreml: image color layout."),
    click.option("--class-labels", help="coreml: file with one class label per line."),
    click.option("--stateful", is_flag=True, default=None,
                 help="coreml: keep a --kv-cache decoder's cache in Core ML states (iOS18)."),
    click.option("--max-context", type=click.IntRange(1), metavar="N",
                 help="coreml --stateful: tokens the cache states hold (default 2048)."),
    click.option("--shapes", multiple=True, metavar="NAME:MIN:OPT:MAX", help="tensorrt: profile shapes, e.g. x:1x3x64x64:4x3x64x64:8x3x64x64."),
    click.option("--workspace", metavar="SIZE", help="tensorrt: workspace limit, e.g. 4GiB."),
    click.option("--timing-cache", type=click.Path(), help="tensorrt: timing cache to load and save."),
    click.option("--version-compatible", is_flag=True, default=None, help="tensorrt: version-compatible engine."),
    click.option("--hardware-compatibility", metavar="LEVEL", help="tensorrt: e.g. ampere+."),
    click.option("--builder-optimization-level", type=click.IntRange(0, 5), help="tensorrt: 0 (fast build) to 5."),
]


def conversion_options(fn: Callable[..., Any]) -> Callable[..., Any]:
    for option in reversed(CONVERSION_OPTIONS):
        fn = option(fn)
    return fn


def _conversion_call(common: dict[str, Any]) -> dict[str, Any]:
    """The keyword arguments of ``api.convert`` from the shared options' values."""
    from unframe.cli import options as opt

    stage = {k: common.pop(k) for k in list(common) if k not in _CORE_OPTIONS}
    return dict(
        from_=common["from_"], to=common["to"], opset=common["opset"], ml_opset=common["ml_opset"],
        strict_parity=common["strict_parity"], debug_dir=common["debug_dir"],
        atol=opt.tolerance(common["atol"], "--atol"), rtol=opt.tolerance(common["rtol"], "--rtol"),
        trust=common["trust"], sample_inputs=common["sample_inputs"], inputs=common["inputs"],
        static=common["static"], dynamic=[opt.dynamic_axis(d) for d in common["dynamic"]],
        **opt.stage_options(stage))


_CORE_OPTIONS = {"from_", "to", "opset", "ml_opset", "strict_parity", "debug_dir", "atol", "rtol",
                 "trust", "sample_inputs", "inputs", "static", "dynamic"}


@cli.command()
@conversion_options
@click.option("-o", "--output", type=click.Path(),
              help="Output path (.onnx, .mlpackage, .engine); a folder for several targets. "
                   "Default: beside SRC with the target's suffix.")
@click.option("--explain", is_flag=True, help="Print the planned route and exit without converting.")
@click.option("--no-validate", is_flag=True, help="Skip the parity checks (not recommended).")
@click.option("--no-locate", is_flag=True, help="On a parity failure, skip finding the first diverging node.")
@click.option("--force", is_flag=True, help="Replace an existing output.")
@limit_options
@json_option
@debug_option
@handle_errors
def convert(src: str, output: str | None, explain: bool, no_validate: bool, no_locate: bool,
            force: bool, as_json: bool, debug: bool, **common: Any) -> None:
    """Convert SRC (a model file, SavedModel folder, or module:factory with --trust) to --to."""
    from unframe import api
    from unframe.cli.progress import observer_for
    from unframe.route import BESIDE_SOURCE

    observer = observer_for(as_json)
    try:
        result = api.convert(src, output=output if output is not None else BESIDE_SOURCE,
                             explain=explain, validate=not no_validate, locate=not no_locate,
                             force=force, observer=observer, **_conversion_call(common))
    except api.PartialFailure as failure:  # the others were written: show them, then the error
        _print_result(failure.result, as_json, explain=False)
        raise
    finally:
        getattr(observer, "close", lambda: None)()
    _print_result(result, as_json, explain)


@cli.command(name="debug")
@conversion_options
@click.option("--seconds", type=float, default=120.0, show_default=True, help="The locator's time cap per stage.")
@json_option
@debug_option
@handle_errors
def debug_cmd(src: str, seconds: float, as_json: bool, debug: bool, **common: Any) -> None:
    """Run SRC's route to --to without writing any artifact, and at every stage that fails, find
    the first diverging node: source location, error plot and a <= 5-node repro in --debug-dir."""
    from unframe import api
    from unframe.cli.progress import observer_for

    call = _conversion_call(common)
    if call["debug_dir"] is None:
        from pathlib import Path

        call["debug_dir"] = str(Path(f"{Path(src).name}.unframe-debug"))
    observer = observer_for(as_json)
    try:
        result = api.convert(src, output=None, locate=seconds, observer=observer, **call)
    except api.PartialFailure as failure:
        _print_result(failure.result, as_json, explain=False)
        raise
    finally:
        getattr(observer, "close", lambda: None)()
    _print_result(result, as_json)
    if not as_json:
        click.echo("every stage agreed: nothing to locate (tighten --atol/--rtol to look closer)")


def _print_result(result: Any, as_json: bool, explain: bool = False) -> None:
    if as_json:
        data = result.route.to_dict() if explain else result.to_dict()
        click.echo(json.dumps(data, indent=2, default=str))
        return
    con = _console()
    con.print(result.route.describe(), markup=False)
    if explain:
        return
    singles = result.results.values() if hasattr(result, "results") else [result]
    for r in singles:
        _print_one(con, r, several=hasattr(result, "results"))


def _print_one(con: Any, result: Any, several: bool) -> None:
    if several:
        con.print(f"{result.target}:", markup=False)
    for n in result.notes:
        con.print(f"note: {n}", markup=False)
    if result.report.stages:
        for s in result.report.stages:
            style = {"passed": "green", "failed": "red", "skipped": "yellow"}[s.status]
            con.print(f"[{style}]parity[/] " + escape(s.summary()), highlight=False)
            con.print(f"       {s.reference}  vs  {s.candidate}", markup=False)
    elif any(st.kind == "parity" for st in result.route.stages):
        con.print("parity: no stage changed the graph, so there was nothing to compare")
    else:
        con.print("parity: not validated (--no-validate)")
    for p in result.written:
        con.print(f"wrote {p}", markup=False)


def escape(text: str) -> str:
    from rich.markup import escape as _escape

    return _escape(text)


# ----------------------------------------------------------------------------------- opset --
@cli.command()
@click.argument("model", type=click.Path())
@click.option("--to", "to_opset", type=int, required=True, help="Target opset.")
@click.option("--ml-opset", type=int, help="Target ai.onnx.ml opset (default: the source's).")
@click.option("-o", "--output", type=click.Path(), required=True, help="Output .onnx path.")
@click.option("--no-validate", is_flag=True, help="Skip the onnxruntime parity check.")
@click.option("--strict-parity", is_flag=True, help="Fail when the original's outputs are degenerate (near zero, constant, non-finite).")
@click.option("--no-locate", is_flag=True, help="On a parity failure, skip finding the first diverging node.")
@click.option("--debug-dir", type=click.Path(), help="Where the locator writes its repro and plot (default: beside the output).")
@click.option("--force", is_flag=True, help="Replace an existing output.")
@click.option("--sample-inputs", type=click.Path(), help="An .npz of sample inputs by input name.")
@click.option("--atol", multiple=True, metavar="X|NAME=X")
@click.option("--rtol", multiple=True, metavar="X|NAME=X")
@limit_options
@json_option
@debug_option
@handle_errors
def opset(model: str, to_opset: int, ml_opset: int | None, output: str, no_validate: bool,
          strict_parity: bool, no_locate: bool, debug_dir: str | None, force: bool,
          sample_inputs: str | None, atol: tuple[str, ...], rtol: tuple[str, ...],
          max_memory: str | None, parity_timeout: float | None, as_json: bool, debug: bool) -> None:
    """Move an ONNX MODEL to another opset (up or down), checked against the original."""
    from unframe import api
    from unframe.cli import options as opt

    limits = opt.stage_options({"max_memory": max_memory, "parity_timeout": parity_timeout})
    result = api.convert_opset(model, to_opset, output=output, validate=not no_validate, force=force,
                               ml_opset=ml_opset, strict_parity=strict_parity, locate=not no_locate,
                               debug_dir=debug_dir, sample_inputs=sample_inputs,
                               atol=opt.tolerance(atol, "--atol"),
                               rtol=opt.tolerance(rtol, "--rtol"), **limits)
    _print_result(result, as_json)


# ----------------------------------------------------------------------------------- check --
@cli.command()
@click.argument("model")
@click.option("--from", "from_", metavar="F")
@click.option("--to", "to", default="onnx", show_default=True, metavar="T[,T...]",
              help="Targets: onnx, coreml, tensorrt, openvino, litert, executorch, a comma list, or all.")
@click.option("--via", type=click.Choice(["onnx", "direct"]), help="Route: through ONNX, or the target's converter on the source model.")
@click.option("--quantize", type=click.Choice(["int8", "int8-dynamic", "w8", "w4"]), help="Whether each target holds this scheme.")
@click.option("--sample-inputs", type=click.Path(), help="An .npz of sample inputs by input name (a direct route runs the source).")
@click.option("--opset", type=int)
@click.option("--target", "deploy_target", metavar="iOS16|iOS17|...", help="coreml: minimum deployment target.")
@click.option("--precision", type=click.Choice(["fp32", "fp16", "bf16"]))
@click.option("--custom-objects", type=click.Path(), help="tf: a .py module defining custom Keras classes (needs --trust).")
@click.option("--stateful", is_flag=True, default=None, help="coreml: a --kv-cache decoder's cache in Core ML states (iOS18).")
@click.option("--max-context", type=click.IntRange(1), metavar="N", help="coreml --stateful: tokens the states hold.")
@click.option("--trust", is_flag=True)
@json_option
@debug_option
@handle_errors
def check(model: str, from_: str | None, to: str, via: str | None, quantize: str | None, sample_inputs: str | None,
          opset: int | None, deploy_target: str | None, precision: str | None, custom_objects: str | None,
          stateful: bool | None, max_context: int | None, trust: bool, as_json: bool, debug: bool) -> None:
    """Pre-flight: every reason each target can't take MODEL, listed at once, without converting."""
    from unframe import api

    opts = {k: v for k, v in {"target": deploy_target, "precision": precision,
                              "custom_objects": custom_objects, "stateful": stateful,
                              "max_context": max_context, "via": via, "quantize": quantize}.items() if v}
    result = api.check(model, from_=from_, to=to, opset=opset, trust=trust, sample_inputs=sample_inputs, **opts)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2))
        sys.exit(0 if result else 4)
    con = _console()
    per_target = result.results if hasattr(result, "results") else {result.target: result}
    if len(per_target) > 1:
        _check_table(con, per_target)
    for note in result.route.notes:
        con.print(f"note: {note}", markup=False, soft_wrap=True)
    for name, r in per_target.items():
        if r:
            con.print(f"ok: {name} can take {model}", markup=False, soft_wrap=True)
        else:
            con.print(f"{len(r.blockers)} blocker(s) for {name}:", markup=False)
            for b in r.blockers:
                con.print(f"  - {b}", markup=False)
        for note in r.notes:
            con.print(note, markup=False, soft_wrap=True)
    sys.exit(0 if result else 4)


def _check_table(con: Any, per_target: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title="pre-flight per target")
    for column in ("target", "verdict", "blockers", "first blocker"):
        table.add_column(column)
    for name, r in per_target.items():
        table.add_row(name, "ok" if r else "blocked", str(len(r.blockers)),
                      escape(str(r.blockers[0])) if r.blockers else "-")
    con.print(table)


# --------------------------------------------------------------------------------- compare --
@cli.command(name="compare")
@click.argument("a", type=click.Path())
@click.argument("b", type=click.Path())
@click.option("--intermediates", is_flag=True, help="Find the first node where A and B part (repro and plot).")
@click.option("--sample-inputs", type=click.Path(), help="An .npz of inputs by input name (default: drawn from A's inputs).")
@click.option("--atol", multiple=True, metavar="X|NAME=X")
@click.option("--rtol", multiple=True, metavar="X|NAME=X")
@click.option("--debug-dir", type=click.Path(), help="Where the repro and plot go (default: a new temporary folder).")
@click.option("--seconds", type=float, default=120.0, show_default=True, help="The locator's time cap.")
@json_option
@debug_option
@handle_errors
def compare_cmd(a: str, b: str, intermediates: bool, sample_inputs: str | None, atol: tuple[str, ...],
                rtol: tuple[str, ...], debug_dir: str | None, seconds: float, as_json: bool,
                debug: bool) -> None:
    """Run artifacts A and B (.onnx, .mlpackage, .engine on a GPU) on the same inputs and check
    every output; exit 5 when they differ."""
    from unframe import api
    from unframe.cli import options as opt

    result = api.compare(a, b, sample_inputs=sample_inputs, atol=opt.tolerance(atol, "--atol"),
                         rtol=opt.tolerance(rtol, "--rtol"), intermediates=intermediates,
                         debug_dir=debug_dir, seconds=seconds)
    if as_json:
        click.echo(json.dumps(result.to_dict(), indent=2, default=str))
    else:
        _console().print(str(result), markup=False)
    sys.exit(0 if result else 5)


# --------------------------------------------------------------------------------- inspect --
@cli.command()
@click.argument("model", type=click.Path())
@json_option
@debug_option
@handle_errors
def inspect(model: str, as_json: bool, debug: bool) -> None:
    """Show what is in MODEL (.onnx, .mlpackage, .mlmodel, .engine/.plan): inputs/outputs, ops,
    versions, sizes and unframe's provenance, without running it."""
    from unframe.cli.inspect import describe, render

    info = describe(model)
    if as_json:
        click.echo(json.dumps(info, indent=2, default=str))
    else:
        render(info, _console())


# ---------------------------------------------------------------------------------- doctor --
@cli.command()
@json_option
@debug_option
@handle_errors
def doctor(as_json: bool, debug: bool) -> None:
    """Which frontends and backends are usable here, their versions, and what to install."""
    from unframe.cli.doctor import gather, render

    info = gather()
    if as_json:
        click.echo(json.dumps(info, indent=2))
    else:
        render(info, _console())


def main() -> None:
    from unframe.deferred import defer

    # onnx-ir imports sympy at start-up and a conversion seldom needs it (0.5-0.8 s)
    defer("onnx_ir._symbolic_shapes")
    defer("sympy")
    cli(prog_name="unframe")


if __name__ == "__main__":
    main()
