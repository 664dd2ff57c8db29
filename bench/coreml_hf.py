"""Hugging Face text models to CoreML: what the dtype legalization pass and the dry translation
cost, against coremltools' own converter (its passes and the ML Program writer) on the same program.

    .venv/bin/python bench/coreml_hf.py [--reps 3] [--out docs/benchmarks/coreml_hf.md]

Per model (BERT, DistilBERT, Llama, Qwen2, T5 from their config classes, seeded; ONNX exported
once, not timed), median CPU time of:
- ``legalize_s``: the pass alone on a copy of the graph;
- ``check_s``: ``unframe.check(onnx, to="coreml")``: load, static checks, legalization and the MIL
  program built dry (nothing written);
- ``convert_s``: ``unframe.convert(onnx, to="coreml", validate=False)``: the same translation
  (once: the backend stage's check and its convert share it) plus coremltools and the write;
- ``ct_s``, the anchor: ``ct.convert`` of an already translated program plus ``save``.

``ratio = convert_s / ct_s`` is the whole conversion against coremltools' share of it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
from benchlib import median_cpu_time  # noqa: E402

VOCAB, SEQ = 1000, 64


def models() -> dict[str, Any]:
    import transformers as T

    common = dict(vocab_size=VOCAB, hidden_size=128, num_hidden_layers=4, num_attention_heads=4,
                  intermediate_size=256, max_position_embeddings=128)
    return {
        "bert": lambda: T.BertModel(T.BertConfig(**common)),
        "distilbert": lambda: T.DistilBertModel(T.DistilBertConfig(
            vocab_size=VOCAB, dim=128, n_layers=4, n_heads=4, hidden_dim=256, max_position_embeddings=128)),
        "llama": lambda: T.LlamaForCausalLM(T.LlamaConfig(**common, num_key_value_heads=2, use_cache=False)),
        "qwen2": lambda: T.Qwen2ForCausalLM(T.Qwen2Config(**common, num_key_value_heads=2, use_cache=False)),
        "t5": lambda: T.T5Model(T.T5Config(vocab_size=VOCAB, d_model=128, d_kv=32, d_ff=256, num_layers=4,
                                           num_heads=4, use_cache=False)),
    }


def export(name: str, build: Any, folder: Path) -> Path:
    import torch

    import unframe

    torch.manual_seed(0)
    model = build().eval()
    samples = {"input_ids": torch.randint(0, VOCAB, (1, SEQ)),
               "attention_mask": torch.ones(1, SEQ, dtype=torch.long)}
    if name == "t5":
        samples["decoder_input_ids"] = torch.randint(0, VOCAB, (1, SEQ // 2))
    path = folder / f"{name}.onnx"
    unframe.convert(model, to="onnx", sample_inputs=samples, output=path, validate=False, opset=21)
    return path


def measure(path: Path, reps: int, folder: Path) -> dict[str, Any]:
    import onnx_ir as ir

    import unframe
    from unframe.converters.backends.coreml.backend import _build
    from unframe.converters.backends.coreml.legalize import legalize
    from unframe.converters.backends.coreml.translate import translate
    from unframe.converters.base import Target

    model = ir.load(path)
    target = Target("coreml", options={"precision": "fp16"})
    moved = len(legalize(model.clone(), 16).moved)
    legalize_s = median_cpu_time(lambda: legalize(model.clone(), 16), reps)
    check_s = median_cpu_time(lambda: unframe.check(path, to="coreml"), reps)

    def convert() -> None:
        unframe.convert(path, to="coreml", validate=False, output=folder / "m.mlpackage", force=True)

    convert_s = median_cpu_time(convert, reps)

    def coremltools_only() -> Any:
        translation = translate(model, 16, target.options)
        t0 = time.process_time()
        with contextlib.redirect_stderr(io.StringIO()):
            mlmodel = _build(translation, target)
            mlmodel.save(str(folder / "ct.mlpackage"))
        return time.process_time() - t0

    coremltools_only()  # warm-up
    ct_runs = sorted(coremltools_only() for _ in range(reps))
    ct_s = ct_runs[len(ct_runs) // 2]
    return {"nodes": len(list(model.graph)), "casts_for": moved, "legalize_s": legalize_s,
            "check_s": check_s, "convert_s": convert_s, "ct_s": ct_s, "ratio": convert_s / ct_s}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        for name, build in models().items():
            path = export(name, build, folder)
            row = {"model": name, **measure(path, args.reps, folder)}
            rows.append(row)
            print(row, flush=True)
    header = "| model | ONNX nodes | nodes legalized | legalize_s | check_s | convert_s | ct_s | ratio |"
    lines = [header, "|---|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        lines.append(f"| {r['model']} | {r['nodes']} | {r['casts_for']} | {r['legalize_s']:.3f} | "
                     f"{r['check_s']:.2f} | {r['convert_s']:.2f} | {r['ct_s']:.2f} | {r['ratio']:.2f} |")
    print("\n".join(lines))
    if args.out is not None:
        args.out.write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
