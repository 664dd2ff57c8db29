"""Trained tiny models for the quantization tests (issue 38): built in seconds from data that
ships with scikit-learn, so accuracy figures mean something (random networks have logits too
close together for top-1 to say anything)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class Trained:
    model: Any
    train: np.ndarray
    test: np.ndarray
    test_labels: np.ndarray
    float_accuracy: float


def digits_cnn(seed: int = 0, epochs: int = 6) -> Trained:
    """A small CNN on scikit-learn's 8x8 digits (1,797 images): about 89-92% test accuracy."""
    import torch
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    x = (images / 16.0).astype(np.float32).reshape(-1, 1, 8, 8)
    torch.manual_seed(seed)
    model = torch.nn.Sequential(
        torch.nn.Conv2d(1, 16, 3, padding=1), torch.nn.ReLU(),
        torch.nn.Conv2d(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.Flatten(),
        torch.nn.Linear(32 * 64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    opt = torch.optim.Adam(model.parameters(), 1e-2)
    xt, yt = torch.tensor(x[:1400]), torch.tensor(labels[:1400])
    for _ in range(epochs):
        for i in range(0, 1400, 100):
            opt.zero_grad()
            torch.nn.functional.cross_entropy(model(xt[i:i + 100]), yt[i:i + 100]).backward()
            opt.step()
    model.eval()
    with torch.no_grad():
        acc = float((model(torch.tensor(x[1400:])).argmax(1).numpy() == labels[1400:]).mean())
    return Trained(model, x[:1400], x[1400:], labels[1400:], acc)


def one_loud_channel(seed: int = 1) -> Trained:
    """``digits_cnn`` with one channel of its first conv 500x larger and the next conv reading it
    scaled back: the same function, whose per-tensor activation ranges int8 can't hold (the
    guard fails; keeping the right layers in float mends it)."""
    import torch

    model = digits_cnn(seed=seed)
    with torch.no_grad():
        model.model[0].weight[0] *= 500.0
        model.model[0].bias[0] *= 500.0
        model.model[2].weight[:, 0] /= 500.0
    return model


def row_sets(trained: Trained, rows: int = 320, batch: int = 8) -> list[dict[str, Any]]:
    """The first ``rows`` training images as input sets of ``batch``."""
    return [{"input": trained.train[i:i + batch]} for i in range(0, rows, batch)]


def with_an_outlier_set(trained: Trained, scale: float = 50.0) -> list[dict[str, Any]]:
    """``row_sets`` with the fourth calibration set ``scale`` times too bright (one bad image batch
    among 32, as real calibration folders hold): onnxruntime's min/max ranges take its extremes
    and lose the real inputs' resolution, NNCF's ranges (averaged over the sets) barely move."""
    sets = row_sets(trained)
    sets[3] = {"input": sets[3]["input"] * scale}
    return sets


def onnx_accuracy(path: Any, trained: Trained) -> float:
    import onnxruntime as ort

    session = ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    scores = session.run(None, {session.get_inputs()[0].name: trained.test})[0]
    return float((scores.argmax(1) == trained.test_labels).mean())


@dataclass
class Decoder:
    model: Any
    windows: np.ndarray  # [N, T] int64 token ids of held-back text (prompts and calibration)


def char_decoder(seed: int = 0, steps: int = 200, width: int = 64) -> Decoder:
    """A character-level causal convolutional language model (embedding, three dilated causal
    Conv1d with residuals, a linear head over 128 ASCII codes), trained for a few seconds on the
    source of Python's own ``textwrap`` and ``json`` modules; ``input_ids`` in, ``{"logits"}`` out,
    any sequence length."""
    import json
    import textwrap

    import torch
    from torch import nn

    text = "".join(open(m.__file__, encoding="utf-8").read() for m in (textwrap, json.decoder))
    codes = np.frombuffer(text.encode("ascii", "replace"), dtype=np.uint8).astype(np.int64) % 128

    class CharConvLM(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.emb = nn.Embedding(128, width)
            self.convs = nn.ModuleList(nn.Conv1d(width, width, 4, dilation=2 ** i) for i in range(3))
            self.head = nn.Linear(width, 128)

        def forward(self, input_ids: torch.Tensor) -> dict[str, torch.Tensor]:
            h = self.emb(input_ids).transpose(1, 2)
            for conv in self.convs:
                left = (conv.kernel_size[0] - 1) * conv.dilation[0]
                h = h + torch.relu(conv(nn.functional.pad(h, (left, 0))))
            return {"logits": self.head(h.transpose(1, 2))}

    torch.manual_seed(seed)
    model = CharConvLM()
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    train, held = codes[: int(len(codes) * 0.9)], codes[int(len(codes) * 0.9):]
    rng = np.random.default_rng(seed)
    for _ in range(steps):
        starts = rng.integers(0, len(train) - 65, 16)
        batch = torch.tensor(np.stack([train[s:s + 65] for s in starts]))
        logits = model(batch[:, :-1])["logits"]
        loss = nn.functional.cross_entropy(logits.reshape(-1, 128), batch[:, 1:].reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
    model.eval()
    windows = np.stack([held[s:s + 48] for s in range(0, len(held) - 48, 48)])
    return Decoder(model, windows)


def broken_calibration_error(trained: Trained, to: str, out: Any, **options: Any) -> Any:
    """int8 to ``to`` with activation ranges calibrated on inputs a thousand times too large, the
    held-out sets real digits: the real inputs fall into a handful of levels and the guard must
    fail (exit 5); the ParityError, for the caller's own checks."""
    import pytest
    import torch

    import unframe
    from unframe.errors import ParityError

    sets = [{"input": trained.train[i:i + 8] * 1000.0} for i in range(0, 240, 8)]
    held = [{"input": trained.test[i:i + 8]} for i in range(0, 64, 8)]
    with pytest.raises(ParityError) as err:
        unframe.convert(trained.model, to=to, sample_inputs=torch.tensor(trained.train[:8]),
                        quantize="int8", calibration=sets + held, output=out, **options)
    assert err.value.exit_code == 5 and "accuracy guard" in err.value.message
    return err.value


@dataclass
class Detector:
    model: Any
    train: np.ndarray  # [n, 1, 32, 32] canvases
    test: np.ndarray
    test_cells: np.ndarray  # [n, 16]: 0 background, else the digit + 1, per 8x8 cell


def digits_detector(seed: int = 0, steps: int = 500) -> Detector:
    """A tiny single-shot detector trained on scikit-learn's digits: 32x32 canvases of 4x4 cells,
    two digits each in random cells; per cell a class (background or a digit) and a box. It
    answers like torchvision's detectors: ``boxes`` [4, 4] (xyxy, pixels), ``scores`` [4] in
    descending order, ``labels`` [4] (int64): its four best cells, a digit's box where it found
    one. One canvas per call (batch 1)."""
    import torch
    from sklearn.datasets import load_digits

    images, labels = load_digits(return_X_y=True)
    digits = (images / 16.0).astype(np.float32).reshape(-1, 8, 8)
    rng = np.random.default_rng(seed)

    def canvases(pool: np.ndarray, count: int) -> tuple[np.ndarray, np.ndarray]:
        x = np.zeros((count, 1, 32, 32), np.float32)
        cells = np.zeros((count, 16), np.int64)
        for k in range(count):
            for cell in rng.choice(16, 2, replace=False):
                i = int(rng.choice(pool))
                r, c = divmod(int(cell), 4)
                x[k, 0, 8 * r:8 * r + 8, 8 * c:8 * c + 8] = digits[i]
                cells[k, cell] = labels[i] + 1
        return x, cells

    grid = np.array([[8 * c, 8 * r, 8 * c + 8, 8 * r + 8] for r in range(4) for c in range(4)], np.float32)

    class TinyDetector(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            conv = torch.nn.Conv2d
            self.body = torch.nn.Sequential(
                conv(1, 16, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                conv(16, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2),
                conv(32, 32, 3, padding=1), torch.nn.ReLU(), torch.nn.MaxPool2d(2))
            self.cls = conv(32, 11, 1)
            self.box = conv(32, 4, 1)
            self.register_buffer("grid", torch.tensor(grid))

        def heads(self, x: Any) -> tuple[Any, Any]:
            f = self.body(x)
            return self.cls(f).flatten(2).transpose(1, 2), self.box(f).flatten(2).transpose(1, 2)

        def forward(self, x: Any) -> tuple[Any, Any, Any]:
            logits, offsets = self.heads(x)
            probs = torch.softmax(logits[0], -1)[:, 1:]
            score, label = probs.max(-1)
            top, idx = torch.topk(score, 4)
            boxes = self.grid[idx] + 8.0 * offsets[0][idx]
            return boxes, top, label[idx] + 1

    torch.manual_seed(seed)
    model = TinyDetector()
    pool = np.arange(1400)
    x, cells = canvases(pool, 2000)
    xt, ct = torch.tensor(x), torch.tensor(cells)
    opt = torch.optim.Adam(model.parameters(), 3e-3)
    for step in range(steps):
        i = (step * 64) % 1936
        opt.zero_grad()
        logits, offsets = model.heads(xt[i:i + 64])
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, 11), ct[i:i + 64].reshape(-1))
        (loss + (offsets ** 2).mean()).backward()
        opt.step()
    model.eval()
    test, test_cells = canvases(np.arange(1400, len(labels)), 64)
    return Detector(model, x[:320], test, test_cells)


def detector_recall(run: Any, detector: Detector) -> float:
    """The share of the test canvases' digits that ``run(canvas) -> (boxes, scores, labels)`` finds:
    a detection of the right digit, score > 0.5, whose box overlaps the digit's cell by IoU >= 0.5."""
    from unframe.validate.detections import box_iou

    found = total = 0
    for canvas, cells in zip(detector.test, detector.test_cells, strict=True):
        boxes, scores, labels = (np.asarray(v) for v in run(canvas[None]))
        for cell in np.flatnonzero(cells):
            r, c = divmod(int(cell), 4)
            truth = np.array([8 * c, 8 * r, 8 * c + 8, 8 * r + 8], np.float64)
            hit = (labels == cells[cell]) & (scores > 0.5) & (box_iou(truth, boxes.astype(np.float64)) >= 0.5)
            found += int(hit.any())
            total += 1
    return found / total


def detector_int8(detector: Detector, to: str, out: Any, sets: list[dict[str, np.ndarray]] | None = None) -> Any:
    """``detector`` converted to ``to`` at int8, calibrated on ``sets`` (default: 40 training
    canvases, one per set; the last eight held out for the guard); the conversion's result."""
    import torch

    import unframe

    sets = sets if sets is not None else detector_sets(detector)
    return unframe.convert(detector.model, to=to, sample_inputs=torch.tensor(detector.train[:1]),
                           quantize="int8", calibration=sets, output=out)


def downstream(graph: Any, op_type: str) -> list[Any]:
    """The nodes of an ``onnx_ir`` graph that the ``op_type`` nodes feed, directly or through others."""
    seen: dict[int, Any] = {}
    frontier = [u for n in graph if n.op_type == op_type for v in n.outputs for u, _ in v.uses()]
    while frontier:
        node = frontier.pop()
        if id(node) not in seen:
            seen[id(node)] = node
            frontier.extend(u for v in node.outputs for u, _ in v.uses())
    return list(seen.values())


def detector_sets(detector: Detector) -> list[dict[str, np.ndarray]]:
    return [{"x": detector.train[i:i + 1]} for i in range(40)]
