"""Rank-side training checks: DDP parity and ``torch.distributed.checkpoint`` round trip / resume.

DDP: every rank trains the same small MLP on its half of a batch; afterwards the parameters
must be identical on every rank and equal (within tolerance) to one process training on the
whole batch. Checkpoint: a sharded state dict saved with ``torch.distributed.checkpoint`` loads
back bit for bit, and training resumed from it continues exactly as uninterrupted training.
"""

from __future__ import annotations

import tempfile
from typing import TYPE_CHECKING, Any

from .collectives import Ctx

if TYPE_CHECKING:
    import torch
    from torch.distributed.tensor import DTensor

__all__ = ["check_checkpoint", "check_ddp"]

_BATCH, _IN, _HIDDEN, _OUT, _LR = 8, 8, 16, 4, 0.1


def _model(device: torch.device | str) -> torch.nn.Module:
    import torch

    torch.manual_seed(0)
    return torch.nn.Sequential(
        torch.nn.Linear(_IN, _HIDDEN), torch.nn.ReLU(), torch.nn.Linear(_HIDDEN, _OUT)
    ).to(device)


def _data() -> tuple[torch.Tensor, torch.Tensor]:
    import torch

    g = torch.Generator().manual_seed(1)
    return torch.randn(_BATCH, _IN, generator=g), torch.randn(_BATCH, _OUT, generator=g)


def _train(model: torch.nn.Module, opt: torch.optim.Optimizer, x: torch.Tensor, y: torch.Tensor, steps: int) -> None:

    for _ in range(steps):
        opt.zero_grad()
        diff = model(x) - y
        ((diff * diff).sum() / diff.numel()).backward()  # MSE from elementwise ops every backend has
        opt.step()


def _flat(model: torch.nn.Module) -> torch.Tensor:
    import torch

    return torch.cat([p.detach().cpu().reshape(-1) for p in model.parameters()])


def _my_half(ctx: Ctx, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    per = _BATCH // ctx.world_size
    sl = slice(ctx.rank * per, (ctx.rank + 1) * per)
    return x[sl].to(ctx.device), y[sl].to(ctx.device)


def check_ddp(ctx: Ctx, case: dict[str, Any], steps: int = 3) -> dict[str, Any]:
    """Train with DDP for ``steps`` steps; compare across ranks and with single-process training."""
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP

    x, y = _data()
    ddp = DDP(_model(ctx.device))
    _train(ddp, torch.optim.SGD(ddp.parameters(), lr=_LR), *_my_half(ctx, x, y), steps)
    mine = _flat(ddp.module)
    gathered = [torch.empty_like(mine) for _ in range(ctx.world_size)]
    dist.all_gather(gathered, mine.to(ctx.device))
    across = all(torch.equal(g.cpu(), mine) for g in gathered)
    single = _model("cpu")
    _train(single, torch.optim.SGD(single.parameters(), lr=_LR), x, y, steps)
    err = float((mine - _flat(single)).abs().max())
    evidence = {"steps": steps, "max_abs_err_vs_single": err, "equal_across_ranks": across,
                "params": int(mine.numel())}
    if across and err <= 1e-5:
        return {"outcome": "ok", "evidence": evidence}
    why = "parameters differ across ranks" if not across else f"parameters differ from single-process by {err:.2e}"
    return {"outcome": "wrong", "evidence": evidence, "error": f"DDP on rank {ctx.rank}: {why}"}


def _sharded(ctx: Ctx, full: torch.Tensor) -> DTensor:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import DTensor, Shard

    mesh = init_device_mesh(ctx.device.type, (ctx.world_size,))
    local = full.chunk(ctx.world_size)[ctx.rank].to(ctx.device)  # each rank holds only its shard
    return DTensor.from_local(local, mesh, [Shard(0)], run_check=False)


def _local(t: torch.Tensor) -> torch.Tensor:
    from torch.distributed.tensor import DTensor

    return t.to_local() if isinstance(t, DTensor) else t


def _round_trip(ctx: Ctx, where: str) -> tuple[bool, str]:
    import torch
    import torch.distributed.checkpoint as dcp

    full = torch.arange(_BATCH * _IN, dtype=torch.float32).reshape(_BATCH, _IN)
    saved: dict[str, torch.Tensor] = {"w": _sharded(ctx, full), "step": torch.tensor(7)}
    dcp.save(saved, checkpoint_id=where)
    loaded = {"w": _sharded(ctx, torch.zeros_like(full)), "step": torch.tensor(0)}
    dcp.load(loaded, checkpoint_id=where)
    same = torch.equal(_local(loaded["w"]).cpu(), _local(saved["w"]).cpu()) and int(loaded["step"]) == 7
    return same, type(saved["w"]).__name__


def _resume(ctx: Ctx, where: str, steps: int = 2) -> bool:
    import torch
    import torch.distributed.checkpoint as dcp
    from torch.nn.parallel import DistributedDataParallel as DDP

    x, y = _my_half(ctx, *_data())
    ddp = DDP(_model(ctx.device))
    opt = torch.optim.SGD(ddp.parameters(), lr=_LR, momentum=0.9)
    _train(ddp, opt, x, y, steps)
    dcp.save({"model": ddp.module.state_dict(), "optim": opt.state_dict()}, checkpoint_id=where)
    _train(ddp, opt, x, y, steps)
    uninterrupted = _flat(ddp.module)

    ddp2 = DDP(_model(ctx.device))
    opt2 = torch.optim.SGD(ddp2.parameters(), lr=_LR, momentum=0.9)
    _train(ddp2, opt2, x, y, 1)  # creates the optimizer state that the load fills in
    state = {"model": ddp2.module.state_dict(), "optim": opt2.state_dict()}
    dcp.load(state, checkpoint_id=where)
    ddp2.module.load_state_dict(state["model"])
    opt2.load_state_dict(state["optim"])
    _train(ddp2, opt2, x, y, steps)
    return bool(torch.equal(uninterrupted, _flat(ddp2.module)))


def check_checkpoint(ctx: Ctx, case: dict[str, Any]) -> dict[str, Any]:
    """Sharded save/load round trip, then resume-from-checkpoint equals uninterrupted training."""
    import torch.distributed as dist

    root = [case.get("dir") or tempfile.mkdtemp(prefix="opm-dcp-")]
    dist.broadcast_object_list(root, src=0)  # one directory for every rank
    same, kind = _round_trip(ctx, f"{root[0]}/sharded")
    resumed = _resume(ctx, f"{root[0]}/resume")
    evidence = {"round_trip": same, "resume_identical": resumed, "tensor_type": kind}
    if same and resumed:
        return {"outcome": "ok", "evidence": evidence}
    what = "sharded state dict did not round-trip" if not same else "resumed training diverged"
    return {"outcome": "wrong", "evidence": evidence, "error": f"checkpoint on rank {ctx.rank}: {what}"}
