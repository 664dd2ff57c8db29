"""torchvision's MaxViT to CoreML (issue 36): its window and grid partitions view the feature map
as rank 6 with perms that keep no two axes together, and its attention is a rank-5 einsum whose
broadcast product was rank 6: 39 rank blockers on a two-stage MaxViT (exit 4). Now folded to rank
5 (coreml/rank.py) and contracted as batched MatMuls; converted from torch through the pipeline,
with parity at fp16 on a dynamic batch."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import unframe

pytestmark = pytest.mark.usefixtures("coreml")
torch = pytest.importorskip("torch", reason="needs torch")
maxvit = pytest.importorskip("torchvision.models.maxvit", reason="needs torchvision")


def test_a_small_maxvit_converts_with_parity(tmp_path: Path):
    torch.manual_seed(0)
    model = maxvit.MaxVit(input_size=(64, 64), stem_channels=16, partition_size=4, block_channels=[16, 32],
                          block_layers=[1, 1], head_dim=8, stochastic_depth_prob=0.0, num_classes=10).eval()
    with torch.no_grad():  # random-init logits are ~0.07: scale the head so they are of order one
        model.classifier[-1].weight.mul_(80.0)
    x = torch.randn(1, 3, 64, 64)
    assert 0.5 < float(model(x).abs().max()) < 50
    result = unframe.convert(model, to="coreml", sample_inputs=(x,), output=str(tmp_path / "maxvit.mlpackage"))
    assert any("rank-6 chain(s) folded" in note for note in result.notes)
    stage = next(s for s in result.report.stages if s.stage == "backend")
    out = stage.outputs[0]
    assert stage.status == "passed" and out.scale > 0.5 and out.max_abs < 0.05 * out.scale
    assert np.isfinite(out.max_abs)
