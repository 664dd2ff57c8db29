"""Drive the fuzz harnesses of harnesses.py.

    python bench/fuzz/run.py HARNESS [--runs N] [--seconds S]           # atheris when installed
    python bench/fuzz/run.py HARNESS --engine plain --seconds 5         # no atheris: random mutation
    python bench/fuzz/run.py HARNESS --collect                          # keep going, save each finding
    python bench/fuzz/run.py HARNESS --replay FILE [FILE ...]           # triage: outcome of each file
    python bench/fuzz/run.py all --runs 100000 --seconds 3600           # one harness after another

Seeds come from bench/out/fuzz/seeds/<harness> (bench/fuzz/seeds.py builds them) plus the saved
findings in tests/fuzz/corpus/<harness>; the growing corpus lives in bench/out/fuzz/corpus/.
A finding is an untyped exception (or an UnframeError with exit code 1), a crash of the fuzzing
process, a run over --timeout seconds (default 10) or RSS over --rss-mb (default 2048). Each
campaign appends one JSON line to bench/out/fuzz/results.jsonl: executions, exec/s, findings,
peak RSS. Run campaigns one at a time, under `nice -n 19` on a shared machine.

With atheris the campaign runs in a child process (libFuzzer calls exit() when it is done), its
statistics read from -print_final_stats; the coverage it follows is unframe's own code (and
onnx-ir's for the ONNX loader), instrumented at import.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import random
import re
import resource
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path[:0] = [str(ROOT), str(ROOT / "bench" / "fuzz")]
OUT = Path(os.environ.get("UNFRAME_FUZZ_OUT", ROOT / "bench" / "out" / "fuzz"))  # tests point it elsewhere
SAVED = ROOT / "tests" / "fuzz" / "corpus"


def _seed_dirs(name: str) -> list[Path]:
    return [d for d in (OUT / "seeds" / name, SAVED / name) if d.is_dir()]


def signature(exc: BaseException) -> str:
    """Type and innermost unframe frame (else the innermost frame): one per distinct bug."""
    frames = traceback.extract_tb(exc.__traceback__)
    ours = [f for f in frames if "/unframe/" in f.filename and "/bench/" not in f.filename]
    frame = (ours or frames or [None])[-1]
    where = f"{Path(frame.filename).name}:{frame.lineno}" if frame else "?"
    return f"{type(exc).__name__}@{where}"


class Collector:
    """--collect: every finding is saved once per signature and the campaign goes on."""

    def __init__(self, name: str) -> None:
        self.folder = OUT / "findings" / name
        self.folder.mkdir(parents=True, exist_ok=True)
        self.seen: dict[str, int] = {}

    def record(self, exc: BaseException, data: bytes) -> None:
        sig = signature(exc)
        self.seen[sig] = self.seen.get(sig, 0) + 1
        if self.seen[sig] == 1:
            digest = hashlib.sha1(data).hexdigest()
            (self.folder / f"{digest}").write_bytes(data)
            text = " ".join(str(exc).split())[:200]
            (self.folder / f"{digest}.txt").write_text(f"{sig}\n{text}\n{''.join(traceback.format_exception(exc))}")
            print(f"finding {sig}: {text} -> {self.folder / digest}", file=sys.stderr, flush=True)


def _test_one(harness: Any, collector: Collector | None) -> Any:
    from harnesses import one_input, stats

    last = [time.monotonic()]

    def test_one_input(data: bytes) -> None:
        try:
            one_input(harness, data)
        except Exception as exc:  # noqa: BLE001 - a finding
            if collector is None:
                raise
            collector.record(exc, data)
        if time.monotonic() - last[0] > 30:  # libFuzzer exits without Python's atexit: report as we go
            last[0] = time.monotonic()
            print("stats " + json.dumps(stats()), file=sys.stderr, flush=True)

    return test_one_input


# --------------------------------------------------------------------------- atheris -------
def atheris_child(args: argparse.Namespace) -> None:
    """In the campaign's child process: instrument, set up libFuzzer, fuzz (never returns)."""
    import atheris

    with atheris.instrument_imports(include=list(_harness(args.harness).instrument)):
        import harnesses
        from mutators import mutators_for

        _preload(args.harness)
    harness = harnesses.HARNESSES[args.harness]
    corpus = OUT / "corpus" / args.harness
    corpus.mkdir(parents=True, exist_ok=True)
    artifacts = OUT / "artifacts" / args.harness
    artifacts.mkdir(parents=True, exist_ok=True)
    argv = [sys.argv[0], f"-timeout={args.timeout}", f"-rss_limit_mb={args.rss_mb}", f"-max_len={harness.max_len}",
            "-print_final_stats=1", f"-artifact_prefix={artifacts}/", f"-seed={args.seed}", "-reload=0",
            "-len_control=0", str(corpus), *map(str, _seed_dirs(args.harness))]
    if args.runs:
        argv.insert(1, f"-runs={args.runs}")
    if args.seconds:
        argv.insert(1, f"-max_total_time={int(args.seconds)}")
    collector = Collector(args.harness) if args.collect else None
    warm_up(harness, args.harness)
    atheris.Setup(argv, _test_one(harness, collector), custom_mutator=mutators_for(harness.mutator))
    atheris.Fuzz()


def _preload(name: str) -> None:
    """Import, inside the instrumentation, the modules a harness reaches lazily."""
    import importlib

    modules = ["unframe.io", "unframe.limits", "unframe.api", "unframe.pipeline", "unframe.route",
               "unframe.validate.inputs", "unframe.validate.compare", "unframe.validate.onnxruntime",
               "unframe.version_converter", "unframe.cli.inspect", "unframe.zoo.manifest", "unframe.sandbox"]
    modules += {"coreml": ["unframe.converters.backends.coreml.translate", "unframe.converters.backends.coreml.backend"],
                "check": ["unframe.converters.backends.coreml.translate", "unframe.converters.backends.tensorrt.preflight"],
                "tensorrt": ["unframe.converters.backends.tensorrt.backend", "unframe.converters.backends.tensorrt.prepare"],
                "mil_eval": ["unframe.converters.backends.coreml.mil_eval"],
                "torch_pt2": ["unframe.converters.frontends._torch.sources"],
                "keras": ["unframe.converters.frontends._tf.native"],
                "tflite": ["unframe.converters.frontends._tf.native"],
                "skops": ["unframe.converters.frontends._sklearn.load"]}.get(name, [])
    for module in modules:
        try:
            importlib.import_module(module)
        except ImportError:
            pass


def warm_up(harness: Any, name: str) -> None:
    """Run the first seed once before the clock starts: first imports (TensorFlow, scikit-learn's
    estimator discovery, coremltools in a sandbox child) take longer than the hang threshold."""
    from harnesses import one_input

    for folder in _seed_dirs(name):
        for path in sorted(folder.iterdir())[:1]:
            try:
                one_input(harness, path.read_bytes())
            except Exception:  # noqa: BLE001 - a finding in a seed shows up again in the campaign
                pass
            return


def _harness(name: str) -> Any:
    import harnesses

    return harnesses.HARNESSES[name]


def run_atheris(args: argparse.Namespace) -> dict[str, Any]:
    cmd = [sys.executable, __file__, args.harness, "--child", f"--timeout={args.timeout}",
           f"--rss-mb={args.rss_mb}", f"--seed={args.seed}", f"--as-mb={args.as_mb}"]
    cmd += [f"--runs={args.runs}"] if args.runs else []
    cmd += [f"--seconds={args.seconds}"] if args.seconds else []
    cmd += ["--collect"] if args.collect else []
    log = OUT / "logs" / f"{args.harness}-{int(time.time())}.log"
    log.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    with log.open("wb") as fh:
        code = subprocess.call(cmd, stdout=fh, stderr=subprocess.STDOUT)
    text = log.read_text(errors="replace")
    stats = {k: int(v) for k, v in re.findall(r"stat::(\w+):\s*(\d+)", text)}
    crash = re.findall(r"(?:Test unit written to|artifact_prefix.*?)(\S+/(?:crash|timeout|oom|leak)-\w+)", text)
    findings = sorted(set(re.findall(r"^finding (\S+):", text, re.M)))
    seen = re.findall(r"^stats (\{.*\})$", text, re.M)
    return {"harness": args.harness, "engine": "atheris", "executions": stats.get("number_of_executed_units", 0),
            "exec_per_s": stats.get("average_exec_per_sec", 0), "peak_rss_mb": stats.get("peak_rss_mb", 0),
            "seconds": round(time.time() - started), "exit_code": code, "artifacts": crash,
            "collected": findings, "stats": json.loads(seen[-1]) if seen else {}, "log": str(log)}


# ----------------------------------------------------------------------------- plain -------
def run_plain(args: argparse.Namespace) -> dict[str, Any]:
    """Random structure-aware mutation of the seeds, no coverage feedback (no atheris needed)."""
    import faulthandler

    from harnesses import HARNESSES, one_input
    from mutators import mutators_for

    # A segfault, an abort or a hang of this process prints where, in the log. Through a copy of
    # stderr made now: unframe sends fd 2 to /dev/null while TensorFlow loads, and a hang there
    # once ended a campaign without a word.
    report = os.fdopen(os.dup(2), "w")
    faulthandler.enable(file=report)
    harness = HARNESSES[args.harness]
    mutate = mutators_for(harness.mutator)
    seeds = [p.read_bytes() for d in _seed_dirs(args.harness) for p in sorted(d.iterdir())
             if p.is_file() and not p.name.endswith(".txt")]
    if not (OUT / "seeds" / args.harness).is_dir():  # the saved findings alone are no seed set
        raise SystemExit(f"no seeds for {args.harness} in {OUT / 'seeds'}: run bench/fuzz/seeds.py "
                         f"{args.harness} (with the same UNFRAME_FUZZ_OUT)")
    rng = random.Random(args.seed)
    pool: list[bytes] = []
    collector = Collector(args.harness) if args.collect else None
    current = OUT / "artifacts" / args.harness / "current-input"
    current.parent.mkdir(parents=True, exist_ok=True)
    warm_up(harness, args.harness)
    print(f"a crash or a hang over {args.timeout} s ends the campaign; its input is then {current}",
          file=sys.stderr, flush=True)
    started, runs, untyped = time.time(), 0, 0
    while (not args.runs or runs < args.runs) and (not args.seconds or time.time() - started < args.seconds):
        base = rng.choice(pool) if pool and rng.random() < 0.5 else rng.choice(seeds)
        data = mutate(base, harness.max_len, rng.randrange(1 << 30))
        current.write_bytes(data)  # after a hang or crash, this is the input that did it
        faulthandler.dump_traceback_later(args.timeout, exit=True, file=report)
        try:
            one_input(harness, data)
        except Exception as exc:  # noqa: BLE001
            untyped += 1
            if collector is None:
                raise
            collector.record(exc, data)
        finally:
            faulthandler.cancel_dump_traceback_later()
        runs += 1
        if runs % 2000 == 0:  # a long campaign says how far it is
            print(f"progress {runs} executions, {runs / (time.time() - started):.1f}/s, {untyped} untyped, "
                  f"peak RSS {_rss_mb()} MB", file=sys.stderr, flush=True)
        pool.append(data) if len(pool) < 256 else pool.__setitem__(rng.randrange(256), data)
        if _rss_mb() > args.rss_mb:
            raise SystemExit(f"peak RSS {_rss_mb()} MB over {args.rss_mb} MB (input: {current})")
    elapsed = max(time.time() - started, 1e-9)
    return {"harness": args.harness, "engine": "plain", "executions": runs, "exec_per_s": round(runs / elapsed, 1),
            "peak_rss_mb": _rss_mb(), "seconds": round(elapsed), "untyped": untyped,
            "collected": sorted(collector.seen) if collector else [], "stats": _stats()}


def _stats() -> dict[str, Any]:
    from harnesses import stats

    return stats()


def _rss_mb() -> int:
    """This process's peak RSS: VmHWM, which starts afresh at exec. (ru_maxrss does not: Linux
    carries the forking parent's size across exec, so a campaign started from a 3 GB pytest
    worker read as 3 GB before its first input.)"""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) // 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024


def replay(args: argparse.Namespace) -> int:
    from harnesses import HARNESSES, one_input

    harness, bad = HARNESSES[args.harness], 0
    for name in args.replay:
        started = time.time()
        try:
            outcome = one_input(harness, Path(name).read_bytes())
        except Exception as exc:  # noqa: BLE001
            bad += 1
            outcome = f"FINDING {signature(exc)}: {' '.join(str(exc).split())[:300]}"
            if args.verbose:
                traceback.print_exc()
        print(f"{name}: {outcome} ({time.time() - started:.2f} s)")
    return 1 if bad else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("harness")
    parser.add_argument("--engine", choices=("atheris", "plain"))
    parser.add_argument("--runs", type=int, default=0)
    parser.add_argument("--seconds", type=float, default=0)
    parser.add_argument("--timeout", type=int, default=10)
    parser.add_argument("--rss-mb", type=int, default=2048)
    parser.add_argument("--as-mb", type=int, default=12288,
                        help="address-space limit of the fuzzing process (protects a shared machine)")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--collect", action="store_true")
    parser.add_argument("--replay", nargs="+")
    parser.add_argument("--verbose", "-v", action="store_true")
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    if args.as_mb:  # a runaway input must fail an allocation here, not take the machine's memory
        resource.setrlimit(resource.RLIMIT_AS, (args.as_mb << 20, args.as_mb << 20))
    if args.child:
        atheris_child(args)
        return 0
    if args.replay:
        return replay(args)
    import harnesses

    names = list(harnesses.HARNESSES) if args.harness == "all" else [args.harness]
    engine = args.engine or ("atheris" if _has_atheris() else "plain")
    for name in names:
        missing = harnesses.HARNESSES[name].available()
        if missing:
            print(json.dumps({"harness": name, "skipped": missing}))
            continue
        args.harness = name
        result = run_atheris(args) if engine == "atheris" else run_plain(args)
        result["when"] = time.strftime("%Y-%m-%d %H:%M")
        OUT.mkdir(parents=True, exist_ok=True)
        with (OUT / "results.jsonl").open("a") as fh:
            fh.write(json.dumps(result) + "\n")
        print(json.dumps(result))
    return 0


def _has_atheris() -> bool:
    import importlib.util

    return importlib.util.find_spec("atheris") is not None


if __name__ == "__main__":
    sys.exit(main())
