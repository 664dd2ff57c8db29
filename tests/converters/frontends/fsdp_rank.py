"""One rank of a two-process gloo run with an FSDP2-sharded (``fully_shard``) model, started by
test_torch_distributed.py with RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT set. It writes what
it saw to ``<out>/rank<N>.json``; the test reads and judges it.

    python fsdp_rank.py OUT_DIR
"""

from __future__ import annotations

import copy
import json
import sys
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

import unframe
from unframe.errors import UnframeError


def model_and_data() -> tuple[nn.Module, torch.Tensor, torch.Tensor]:
    """The same model and batch on every rank; weights and BatchNorm statistics perturbed so the
    outputs are of order 1."""
    torch.manual_seed(0)
    model = nn.Sequential(nn.Linear(8, 32), nn.BatchNorm1d(32), nn.ReLU(), nn.Dropout(0.2),
                          nn.Sequential(nn.Linear(32, 4)))
    with torch.no_grad():
        for p in model.parameters():
            p.add_(torch.randn_like(p) * 0.3)
        model[1].running_mean.uniform_(-0.5, 0.5)
        model[1].running_var.uniform_(0.5, 2.0)
    return model, torch.randn(16, 8), torch.randn(16, 4)


def local_state(model: nn.Module) -> dict[str, Any]:
    """This rank's shards bit for bit, and the training flags."""
    def bits(t: Any) -> str:
        t = t.to_local() if hasattr(t, "to_local") else t
        return t.detach().contiguous().reshape(-1).view(torch.uint8).numpy().tobytes().hex()

    return {"state": {k: bits(v) for k, v in model.state_dict(keep_vars=True).items()},
            "training": {n: m.training for n, m in model.named_modules()},
            "requires_grad": {n: p.requires_grad for n, p in model.named_parameters()}}


def train_step(model: nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor) -> float:
    torch.manual_seed(1)  # the same Dropout mask for the sharded model and its twin
    opt.zero_grad()
    loss = nn.functional.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    return float(loss.detach())


def main(out: Path) -> None:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model, x, y = model_and_data()
    twin = copy.deepcopy(model)  # unsharded, never converted
    with torch.no_grad():
        expected = twin.eval()(x).numpy()
    twin.train()
    mesh = init_device_mesh("cpu", (dist.get_world_size(),))
    fully_shard(model[4], mesh=mesh)
    fully_shard(model, mesh=mesh)
    report: dict[str, Any] = {"rank": rank}

    try:  # without gather=True: refused on rank 0, the others return at once
        plain = unframe.convert(model, to="onnx", sample_inputs=x, output=out / "refused.onnx")
        report["without_gather"] = {"type": type(plain).__name__, "truthy": bool(plain)}
    except UnframeError as exc:
        report["without_gather"] = {"exit_code": exc.exit_code, "message": str(exc)}

    before = local_state(model)
    result = unframe.convert(model, to="onnx", sample_inputs=x, gather=True,
                             output=out / "gathered.onnx")
    report["result"] = {"type": type(result).__name__, "truthy": bool(result),
                        "path": str(result.path) if result else None,
                        "parity": bool(result.report) if result else None}
    report["unchanged"] = local_state(model) == before
    if rank == 0:
        import onnxruntime as ort

        session = ort.InferenceSession(str(out / "gathered.onnx"))
        got = session.run(None, {session.get_inputs()[0].name: x.numpy()})[0]
        report["max_abs"] = float(abs(got - expected).max())
        report["scale"] = float(abs(expected).max())
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    opt_twin = torch.optim.SGD(twin.parameters(), lr=0.1)
    report["losses"] = [(train_step(model, opt, x, y), train_step(twin, opt_twin, x, y))
                        for _ in range(2)]
    dist.barrier()
    dist.destroy_process_group()
    (out / f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
