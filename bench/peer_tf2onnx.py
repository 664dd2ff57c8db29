"""tf2onnx's own test suite rerouted through ``unframe.convert(..., to="onnx")``.

tf2onnx's wheel installs its test suite as the top-level package ``tests`` in site-packages
(``test_backend.py``, ``test_cond.py``, ``test_loops.py``, ``test_string_ops.py`` and
``keras2onnx_unit_tests/``). Each case is run by pytest as the suite runs it (tf2onnx's own path:
the anchor, the test's own outcome), and the same model is also handed to unframe the way a user
would hand it over, with default options:

* backend/cond/loops/string cases (``Tf2OnnxBackendTestBase.run_test_case`` hooked): the test's
  function as ``tf.function(func)`` with the test's feed as positional sample inputs; a case the
  suite builds in a TF1 session (``as_session=True``) is a frozen GraphDef, so it goes to unframe as
  the ``.pb`` file the suite freezes, with its output names (``outputs=[...]``); when that graph
  holds lookup tables, whose contents a frozen graph drops (the anchor reads them from the live
  session), as the TF1 SavedModel of the same session (tables filled from its assets);
* Keras unit tests (``run_onnx_runtime`` hooked, the model from the hooked ``convert_keras``): the
  Keras model with the test's data as sample inputs.

unframe's ONNX runs on onnxruntime with the test's own feed and is compared with the TensorFlow
results the test computed, at the test's own tolerances (``assert_results_equal`` / the Keras
tests' ``np.allclose``). Each case is counted as: ``passed``; ``refused`` (an ``UnframeError``, by
exit code); ``untyped`` (any other exception); ``wrong`` (unframe returned a result, so its parity
passed, but its numbers differ from TensorFlow beyond the suite's tolerance); ``weak`` (numbers
differ, but unframe said its parity proved nothing: a random or stateful reference); ``stateful``
(a stateful RNN: the test computed ``expected`` before ``predict`` advanced the model's state, so
the case is checked against the model's own output from the state it was converted in);
``crash`` (the process died). A test that calls ``run_test_case`` several times counts once, with
its worst outcome. A test that expects tf2onnx to raise (``assertRaises``) and passes counts a
typed refusal from unframe as agreeing. A case TensorFlow itself can't run is not counted.

The one tf2onnx option mapped to unframe's: the Keras tests' ``channel_first_inputs`` (their data is
channels-first for those inputs) is unframe's ``nchw_inputs``. Other tf2onnx-only options the suite
passes (``process_args``: ``extra_opset``, ``use_default``...) are not: default options.

Options that change nothing of the outcome, only its cost: the suite's TFLite and tfjs legs are off
(``TF2ONNX_SKIP_TFLITE_TESTS``/``TF2ONNX_SKIP_TFJS_TESTS``: they test tf2onnx's other frontends), and
unframe's divergence locator is off (``locate=False``: it only explains a parity failure).

Each suite file runs in its own child process; a child that dies is restarted past the case it was
in (recorded as ``crash``). Needs ``parameterized`` (and optionally ``timeout-decorator``), which the
suite imports; onnx >= 1.19 dropped ``onnx.mapping``, which tf2onnx's keras2onnx API imports, so a
small stand-in is registered before the Keras tests load.

    python bench/peer_tf2onnx.py [--suite backend,cond,loops,strings,keras] [--every N]
        [--out /tmp/peer.json] [-k EXPR]

``PYTHONPATH=/path/to/other/checkout`` measures another unframe (the "before" column).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
import traceback
import zlib
from collections import Counter
from pathlib import Path
from typing import Any

SUITES = {
    "backend": "test_backend.py",
    "cond": "test_cond.py",
    "loops": "test_loops.py",
    "strings": "test_string_ops.py",
    "keras": "keras2onnx_unit_tests",
}
ORDER = {"tf_failed": -1, "passed": 0, "stateful": 1, "refused": 2, "weak": 3, "wrong": 4, "untyped": 5,
         "crash": 6}


def suite_dir() -> Path:
    """site-packages/tests of the tf2onnx wheel, found by path: the project's own ``tests``
    package would shadow an import by name."""
    import sysconfig

    return Path(sysconfig.get_paths()["purelib"]) / "tests"


# ----------------------------------------------------------------------------- in the child ----
class Recorder:
    """Collects, per pytest item, unframe's outcome on each hooked call and the anchor's."""

    def __init__(self, log: Path, every: int) -> None:
        self.log = log
        self.every = every
        self.current: str | None = None
        self.calls: list[dict[str, Any]] = []
        self.tmp = Path(tempfile.mkdtemp(prefix="peer-tf2onnx-"))

    def write(self, row: dict[str, Any]) -> None:
        with self.log.open("a") as f:
            f.write(json.dumps(row) + "\n")

    # pytest hooks
    def pytest_collection_modifyitems(self, session: Any, config: Any, items: list[Any]) -> None:
        if self.every > 1:  # by a hash of the name: the same sample after a restart's deselection
            items[:] = [it for it in items if zlib.crc32(it.nodeid.encode()) % self.every == 0]
        install_hooks(self)

    def pytest_runtest_logstart(self, nodeid: str, location: Any) -> None:
        self.current = nodeid
        self.calls = []
        self.write({"event": "start", "case": nodeid})

    def pytest_runtest_logreport(self, report: Any) -> None:
        if report.when == "call" or (report.when == "setup" and report.outcome != "passed"):
            self._anchor = "skipped" if report.skipped else report.outcome
            self._anchor_reason = _short(str(report.longrepr)) if report.failed else ""

    def pytest_runtest_logfinish(self, nodeid: str, location: Any) -> None:
        anchor = getattr(self, "_anchor", "skipped")
        for call in self.calls:  # the test passed although tf2onnx raised: it expected a refusal,
            if anchor == "passed" and call.get("anchor_raised") and call["status"] == "refused":
                call["status"] = "passed"  # and a typed refusal from unframe agrees with it
                call["detail"] = "refused as the test expects: " + call.get("detail", "")
        row: dict[str, Any] = {"event": "end", "case": nodeid, "anchor": anchor,
                               "anchor_reason": getattr(self, "_anchor_reason", "")}
        if self.calls:
            worst = max(self.calls, key=lambda c: ORDER[c["status"]])
            row.update({"unframe": worst["status"], "detail": worst.get("detail", ""),
                        "exit": worst.get("exit"), "route": worst.get("route", ""),
                        "calls": len(self.calls)})
        self.write(row)
        self._anchor, self._anchor_reason = "skipped", ""


def _short(text: str, n: int = 300) -> str:
    lines = [ln.strip() for ln in text.strip().splitlines() if ln.strip()]
    picked = next((ln for ln in reversed(lines) if ln.startswith("E ")), lines[-1] if lines else "")
    return picked[:n]


def install_hooks(rec: Recorder) -> None:
    """Wrap the suite's entry points (modules already imported by collection)."""
    import inspect

    base = sys.modules.get("backend_test_base")
    if base is not None and not getattr(base.Tf2OnnxBackendTestBase, "_unframe_hooked", False):
        cls = base.Tf2OnnxBackendTestBase
        original = cls.run_test_case
        params = list(inspect.signature(original).parameters)[5:]  # after output_names_with_port

        def run_test_case(self: Any, func: Any, feed_dict: dict[str, Any], input_names: Any,
                          output_names: list[str], *args: Any, **kwargs: Any) -> Any:
            bound = {**dict(zip(params, args, strict=False)), **kwargs}
            call = unframe_backend_case(rec, self, func, feed_dict, output_names, bound)
            rec.calls.append(call)
            try:
                return original(self, func, feed_dict, input_names, output_names, *args, **kwargs)
            except Exception:
                call["anchor_raised"] = True  # the test may expect it (assertRaises)
                raise

        cls.run_test_case = run_test_case
        cls._unframe_hooked = True
    utils = sys.modules.get("test_utils")
    if utils is not None and not getattr(utils, "_unframe_hooked", False):
        _hook_keras(rec, utils)


def _hook_keras(rec: Recorder, utils: Any) -> None:
    convert = utils.convert_keras
    run_ort = utils.run_onnx_runtime
    state: dict[str, Any] = {}

    def convert_keras(model: Any, *args: Any, **kwargs: Any) -> Any:
        import onnx

        state["model"] = model
        state["nchw"] = kwargs.get("channel_first_inputs")
        try:
            return convert(model, *args, **kwargs)
        except Exception as exc:  # noqa: BLE001 - the anchor's failure is raised once unframe had its turn
            state["anchor_error"] = exc
            return onnx.ModelProto()

    def run_onnx_runtime(case_name: str, onnx_model: Any, data: Any, expected: Any, model_files: Any,
                         rtol: float = 1.e-3, atol: float = 1.e-6, **kwargs: Any) -> Any:
        model = state.pop("model", None)
        if model is not None and expected is not None:
            rec.calls.append(unframe_keras_case(model, data, expected, rtol, atol, state.pop("nchw", None)))
        failed = state.pop("anchor_error", None)
        if failed is not None:
            raise failed
        return run_ort(case_name, onnx_model, data, expected, model_files, rtol=rtol, atol=atol, **kwargs)

    utils.convert_keras = convert_keras
    utils.run_onnx_runtime = run_onnx_runtime
    for mod in list(sys.modules.values()):  # the conftest's runner fixture holds its own reference
        if getattr(mod, "run_onnx_runtime", None) is run_ort and mod is not utils:
            mod.run_onnx_runtime = run_onnx_runtime
    utils._unframe_hooked = True


def _convert(source: Any, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
    """(result or None, outcome) of unframe.convert with default options."""
    import unframe
    from unframe.errors import UnframeError

    try:
        result = unframe.convert(source, to="onnx", locate=False, **kwargs)
    except UnframeError as exc:
        return None, {"status": "refused", "exit": exc.exit_code, "detail": str(exc)[:600]}
    except BaseException as exc:  # noqa: BLE001 - what escapes untyped is what is counted
        if isinstance(exc, KeyboardInterrupt):
            raise
        tb = traceback.extract_tb(exc.__traceback__)
        where = f" at {Path(tb[-1].filename).name}:{tb[-1].lineno}" if tb else ""
        return None, {"status": "untyped",
                      "detail": f"{type(exc).__name__}: {str(exc).strip().splitlines()[0][:240] if str(exc).strip() else ''}{where}"}
    route = getattr(result.export, "route", "") if result.export is not None else ""
    weak = [w for stage in result.report.stages for w in stage.weak]
    return result, {"status": "passed", "route": route, "weak": "; ".join(weak)[:300]}


def _differs(outcome: dict[str, Any], exc: BaseException) -> dict[str, Any]:
    """Numbers that differ from TensorFlow's: ``wrong`` when unframe's parity passed, ``weak``
    when it said its reference proved nothing (a stateful or random model; --strict-parity fails
    those)."""
    status = "weak" if outcome.get("weak") else "wrong"
    return {"status": status, "route": outcome.get("route", ""),
            "detail": f"{type(exc).__name__}: {_short(str(exc), 240)}" + (f" [weak: {outcome['weak']}]" if outcome.get("weak") else "")}


def _run_onnx(result: Any, feeds: dict[str, Any]) -> list[Any]:
    """The graph on the test's feed, each numeric array in the dtype the graph declares (as
    TensorFlow casts a feed into its Placeholder, and unframe its samples)."""
    import numpy as np
    import onnx_ir as ir
    import onnxruntime as ort

    for value in result.model.graph.inputs:
        array = feeds.get(value.name)
        if isinstance(array, np.ndarray) and array.dtype.kind in "biuf" and value.dtype is not None:
            try:
                feeds[value.name] = array.astype(value.dtype.numpy(), copy=False)
            except (TypeError, ValueError):  # a type numpy can't name: fed as it is
                pass
    proto = ir.serde.serialize_model(result.model)
    session = ort.InferenceSession(proto.SerializeToString(), providers=["CPUExecutionProvider"])
    return session.run(None, feeds)


def _positional(result: Any, values: list[Any]) -> dict[str, Any]:
    graph = result.model.graph
    names = [v.name for v in graph.inputs if v.name not in graph.initializers]
    return dict(zip(names, values, strict=False))


def unframe_backend_case(rec: Recorder, test: Any, func: Any, feed_dict: dict[str, Any],
                         output_names: list[str], bound: dict[str, Any]) -> dict[str, Any]:
    import tensorflow as tf

    opts = {k: bound.get(k, d) for k, d in (("rtol", 1e-07), ("atol", 1e-5), ("mtol", None),
                                            ("check_value", True), ("check_shape", True),
                                            ("check_dtype", True), ("as_session", False),
                                            ("premade_placeholders", False), ("large_model", False))}
    try:
        expected, graph_def, _ = test.freeze_and_run_tf(func, feed_dict, output_names, opts["as_session"],
                                                        opts["premade_placeholders"], opts["large_model"])
    except Exception as exc:  # noqa: BLE001 - TF itself can't run it: not a case for either tool
        return {"status": "tf_failed", "detail": f"TF: {type(exc).__name__}"}
    finally:
        from tf2onnx.tf_loader import tf_reset_default_graph

        tf_reset_default_graph()
    values = list(feed_dict.values())
    if opts["as_session"]:
        samples = {k.split(":")[0]: v for k, v in feed_dict.items()}
        if any(n.op in ("HashTableV2", "MutableHashTableV2") for n in graph_def.node):
            # a frozen graph holds no table contents (the freeze drops the initializer): the TF1
            # file that does is a SavedModel with the table's vocabulary among its assets
            path = tf1_saved_model(rec.tmp / f"{abs(hash(rec.current))}", func, feed_dict,
                                   output_names, opts["premade_placeholders"])
            result, outcome = _convert(path, sample_inputs=samples)
        else:
            path = rec.tmp / f"{abs(hash(rec.current))}.pb"
            path.write_bytes(graph_def.SerializeToString())
            result, outcome = _convert(path, sample_inputs=samples, outputs=list(output_names))
        feeds = None
    else:
        source = tf.function(func)
        result, outcome = _convert(source, sample_inputs=tuple(values))
        feeds = values
    if result is None:
        return outcome
    try:
        if feeds is None:
            graph = result.model.graph
            by_node = {k.split(":")[0]: v for k, v in feed_dict.items()}
            feed = {v.name: by_node[v.name.split(":")[0]] for v in graph.inputs
                    if v.name not in graph.initializers}
        else:
            feed = _positional(result, feeds)
        actual = _run_onnx(result, feed)
        if len(actual) != len(expected):
            raise AssertionError(f"{len(actual)} outputs, TF has {len(expected)}")
        test.assert_results_equal(expected, actual, opts["rtol"], opts["atol"], opts["mtol"],
                                  opts["check_value"], opts["check_shape"], opts["check_dtype"])
    except Exception as exc:  # noqa: BLE001
        return _differs(outcome, exc)
    return outcome


def tf1_saved_model(path: Path, func: Any, feed_dict: dict[str, Any], output_names: list[str],
                    premade: bool) -> Path:
    """The case's TF1 graph saved as a TF1 SavedModel (``tf.compat.v1.saved_model.Builder``, as an
    Estimator exports one): the placeholders the suite would make, the tables filled by its main op
    from the vocabulary it copies into ``assets/``; the signature's keys are the node names."""
    import tensorflow as tf

    tf1 = tf.compat.v1
    with tf.Graph().as_default() as graph, tf1.Session(graph=graph) as sess:
        placeholders = [] if premade else [
            tf1.placeholder(tf.as_dtype(v.dtype), v.shape, name=k.split(":")[0]) for k, v in feed_dict.items()]
        func(*placeholders)
        sess.run(tf1.global_variables_initializer())
        sess.run(tf1.tables_initializer())
        info = tf1.saved_model.utils.build_tensor_info
        signature = tf1.saved_model.signature_def_utils.build_signature_def(
            inputs={k.split(":")[0]: info(graph.get_tensor_by_name(k)) for k in feed_dict},
            outputs={o.split(":")[0]: info(graph.get_tensor_by_name(o)) for o in output_names},
            method_name=tf1.saved_model.signature_constants.PREDICT_METHOD_NAME)
        builder = tf1.saved_model.Builder(str(path))
        builder.add_meta_graph_and_variables(sess, ["serve"], signature_def_map={"serving_default": signature},
                                             main_op=tf1.tables_initializer(),
                                             assets_collection=tf1.get_collection(tf1.GraphKeys.ASSET_FILEPATHS))
        builder.save()
    return path


def unframe_keras_case(model: Any, data: Any, expected: Any, rtol: float, atol: float,
                       nchw: list[str] | None = None) -> dict[str, Any]:
    """``nchw``: the test's ``channel_first_inputs`` (its data is channels-first for them), given
    to unframe as its equivalent option ``nchw_inputs``."""
    import numpy as np

    samples = data
    if nchw:  # unframe takes samples as the model does (channels-last); its graph takes the test's
        names = [str(t.name).split(":")[0] for t in model.inputs]
        listed = data if isinstance(data, list) else [data]
        samples = [np.moveaxis(x, 1, -1) if n in nchw else x for n, x in zip(names, listed, strict=False)]
    result, outcome = _convert(model, sample_inputs=samples, **({"nchw_inputs": list(nchw)} if nchw else {}))
    if result is None:
        return outcome
    try:
        if isinstance(data, dict):
            feed = dict(data)
        else:
            feed = _positional(result, data if isinstance(data, list) else [data])
        actual = _run_onnx(result, feed)
        want = list(expected) if isinstance(expected, (list, tuple)) else [expected]
        if len(actual) < len(want):
            raise AssertionError(f"{len(actual)} outputs, Keras has {len(want)}")
        bad = [i for i in range(len(want)) if not np.allclose(want[i], actual[i], rtol=rtol, atol=atol)]
        if bad and _stateful(model):
            return _stateful_case(model, samples, actual, rtol, atol, outcome)
        if bad:
            i = bad[0]
            diff = float(np.max(np.abs(np.asarray(want[i], np.float64) - np.asarray(actual[i], np.float64))))
            raise AssertionError(f"output {i} differs by {diff:.3g} (rtol {rtol}, atol {atol})")
    except Exception as exc:  # noqa: BLE001
        return _differs(outcome, exc)
    return outcome


def _stateful(model: Any) -> bool:
    return any(getattr(layer, "stateful", False) for layer in model._flatten_layers(include_self=False))


def _stateful_case(model: Any, samples: Any, actual: list[Any], rtol: float, atol: float,
                   outcome: dict[str, Any]) -> dict[str, Any]:
    """A stateful RNN: the test computed its ``expected`` before ``predict`` advanced the model's
    state, and unframe converts the model in the state it is handed. Checked instead against the
    model's own next output from that state (the state put back after)."""
    import keras
    import numpy as np

    saved = [(v, np.array(v.numpy(), copy=True)) for layer in model._flatten_layers(include_self=False)
             if getattr(layer, "stateful", False) for v in getattr(layer, "states", None) or ()
             if hasattr(v, "assign")]  # Keras 3 keeps an RNN's states untracked, in layer.states
    try:
        want = [np.asarray(v) for v in keras.tree.flatten(model(samples, training=False))]
    finally:
        for variable, value in saved:
            variable.assign(value)
    same = len(want) <= len(actual) and all(np.allclose(w, a, rtol=rtol, atol=atol) for w, a in zip(want, actual,
                                                                                                     strict=False))
    return {"status": "stateful" if same else "wrong", "route": outcome.get("route", ""),
            "detail": "stateful RNN: matches the model's own output from the state it was converted in"
            if same else "stateful RNN: differs from the model's own output from the state it was converted in"}


def _onnx_mapping_standin() -> None:
    """``onnx.mapping`` (removed in onnx 1.19) for tf2onnx's keras2onnx API import."""
    import types

    import onnx
    from onnx import helper

    if hasattr(onnx, "mapping"):
        return
    table = {}
    for code in onnx.TensorProto.DataType.values():
        try:
            table[code] = helper.tensor_dtype_to_np_dtype(code)
        except Exception:  # noqa: BLE001 - UNDEFINED and types numpy has no name for
            pass
    mod = types.ModuleType("onnx.mapping")
    mod.TENSOR_TYPE_TO_NP_TYPE = table
    onnx.mapping = mod
    sys.modules["onnx.mapping"] = mod


def child(target: str, log: Path, every: int, deselect: list[str], keyword: str | None) -> int:
    import pytest

    os.environ.setdefault("TF2ONNX_SKIP_TFLITE_TESTS", "TRUE")
    os.environ.setdefault("TF2ONNX_SKIP_TFJS_TESTS", "TRUE")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    _onnx_mapping_standin()
    root = suite_dir()
    ini = Path(tempfile.mkdtemp(prefix="peer-ini-")) / "pytest.ini"
    ini.write_text("[pytest]\n")
    args = ["-c", str(ini), "--rootdir", str(root), "-p", "no:cacheprovider", "-q",
            "--no-header", "-p", "no:randomly", str(root / target)]
    for d in deselect:
        args += ["--deselect", d]
    if keyword:
        args += ["-k", keyword]
    return pytest.main(args, plugins=[Recorder(log, every)])


# ----------------------------------------------------------------------------- the driver -----
def run_suite(name: str, every: int, keyword: str | None, logdir: Path) -> list[dict[str, Any]]:
    log = logdir / f"{name}.jsonl"
    log.unlink(missing_ok=True)
    done: dict[str, dict[str, Any]] = {}
    crashed: list[str] = []
    while True:
        cmd = [sys.executable, __file__, "--child", SUITES[name], "--log", str(log), "--every", str(every)]
        for d in list(done) + crashed:
            cmd += ["--deselect", d]
        if keyword:
            cmd += ["-k", keyword]
        proc = subprocess.run(cmd, cwd=str(suite_dir()), stdout=subprocess.DEVNULL,
                              stderr=(logdir / f"{name}.stderr").open("a"))
        started = None
        for line in log.read_text().splitlines() if log.exists() else []:
            row = json.loads(line)
            if row["event"] == "start":
                started = row["case"]
            elif row["event"] == "end":
                done[row["case"]] = row
                started = None if started == row["case"] else started
        if proc.returncode in (0, 1, 5) or started is None or started in crashed:
            break
        crashed.append(started)  # the child died inside this case: skip it and go on
        done[started] = {"case": started, "anchor": "crash", "unframe": "crash",
                         "detail": f"process died (exit {proc.returncode})"}
    return list(done.values())


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    # a case is one TensorFlow runs (the suite's own freeze-and-run) and the suite doesn't skip
    cases = [r for r in rows if r.get("unframe") not in (None, "tf_failed") and r.get("anchor") != "skipped"]
    anchor_ok = [r for r in cases if r["anchor"] == "passed"]
    count = Counter(r["unframe"] for r in anchor_ok)
    exits = Counter(str(r.get("exit")) for r in anchor_ok if r["unframe"] == "refused")
    all_count = Counter(r["unframe"] for r in cases)
    return {"cases": len(cases), "tf2onnx_passed": len(anchor_ok),
            "unframe_on_tf2onnx_passed": dict(count), "refused_by_exit": dict(exits),
            "unframe_on_all": dict(all_count),
            "rate": round(100 * count.get("passed", 0) / max(1, len(anchor_ok)), 1)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--suite", default=",".join(SUITES))
    ap.add_argument("--every", type=int, default=1, help="run every Nth case (deterministic sample)")
    ap.add_argument("-k", dest="keyword")
    ap.add_argument("--out", default="/tmp/peer_tf2onnx.json")
    ap.add_argument("--child")
    ap.add_argument("--log")
    ap.add_argument("--deselect", action="append", default=[])
    args = ap.parse_args()
    if args.child:
        sys.argv = sys.argv[:1]  # the suite's common.py parses the command line on import
        sys.exit(child(args.child, Path(args.log), args.every, args.deselect, args.keyword))
    import unframe

    logdir = Path(args.out).with_suffix(".logs")
    logdir.mkdir(parents=True, exist_ok=True)
    report: dict[str, Any] = {"unframe": str(Path(unframe.__file__).parent), "every": args.every,
                              "suites": {}}
    for name in args.suite.split(","):
        t0 = time.time()
        rows = run_suite(name, args.every, args.keyword, logdir)
        summary = summarize(rows)
        summary["seconds"] = round(time.time() - t0)
        report["suites"][name] = {"summary": summary, "rows": rows}
        print(name, json.dumps(summary), flush=True)
        Path(args.out).write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
