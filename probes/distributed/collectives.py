"""Rank-side collective checks: run one collective on the device, compare exactly to the host.

Every rank holds ``(rank + 1) * [1, 2, ..., n]`` (small integers, exact in every dtype probed),
runs the collective, and compares its result bit for bit with the same computation done on the
host in float64 / int64 and cast back::

    result = check_collective(ctx, {"collective": "all_reduce", "op": "sum", "dtype": "float32",
                                    "async_op": True})
    result["outcome"], result["evidence"]["async_progress"]     # "ok", True
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch.distributed import Work

__all__ = ["Ctx", "check_collective"]

_N = 8  # elements per rank (divisible by every world size probed)


@dataclass
class Ctx:
    """What a case needs to know about its rank process."""

    rank: int
    world_size: int
    device: torch.device
    c10d: str


def _inputs(ctx: Ctx, dtype: torch.dtype) -> list[torch.Tensor]:
    import torch

    base = torch.arange(1, _N + 1, dtype=torch.float64)
    return [((r + 1) * base).to(dtype) for r in range(ctx.world_size)]


def _wait(work: Work | None, async_op: bool, evidence: dict[str, Any]) -> None:
    """Wait for ``work``; for async calls first do unrelated host work and see if it completes meanwhile."""
    if not async_op:
        return
    if work is None:
        raise RuntimeError("an async_op=True collective returned no Work handle")
    import torch

    a = torch.ones(64, 64)
    started = time.perf_counter()
    done = False
    while time.perf_counter() - started < 1.0:
        a = (a @ a).clamp_(max=1.0)  # the caller's "other work"
        if work.is_completed():
            done = True
            break
    evidence["async_progress"] = done
    work.wait()


def _expected(ctx: Ctx, name: str, op: str | None, xs: list[torch.Tensor]) -> torch.Tensor:
    import torch

    total = torch.stack([x.double() for x in xs])
    reduced = {"sum": total.sum(0), "max": total.max(0).values, "avg": total.mean(0)}.get(op or "")
    chunk = _N // ctx.world_size
    if reduced is None and name in ("all_reduce", "reduce_scatter"):
        raise ValueError(f"{name} needs a reduce op (sum, max or avg), got {op!r}")
    match name:
        case "all_reduce" if reduced is not None:
            return reduced
        case "broadcast":
            return xs[0].double()
        case "all_gather":
            return torch.cat([x.double() for x in xs])
        case "reduce_scatter" if reduced is not None:
            return reduced[ctx.rank * chunk:(ctx.rank + 1) * chunk]
        case "all_to_all":
            return torch.cat([x.double()[ctx.rank * chunk:(ctx.rank + 1) * chunk] for x in xs])
        case "send_recv":
            return xs[(ctx.rank - 1) % ctx.world_size].double()
    raise ValueError(f"unknown collective {name!r}")


def _run(ctx: Ctx, name: str, op: str | None, mine: torch.Tensor, async_op: bool, evidence: dict[str, Any]) -> torch.Tensor:
    import torch
    import torch.distributed as dist

    reduce_op = {"sum": dist.ReduceOp.SUM, "max": dist.ReduceOp.MAX, "avg": dist.ReduceOp.AVG, None: None}[op]
    ws, chunk = ctx.world_size, _N // ctx.world_size
    if name == "all_reduce":
        out = mine.clone()
        _wait(dist.all_reduce(out, op=reduce_op, async_op=async_op), async_op, evidence)
    elif name == "broadcast":
        out = mine.clone()
        _wait(dist.broadcast(out, src=0, async_op=async_op), async_op, evidence)
    elif name == "all_gather":
        parts = [torch.empty_like(mine) for _ in range(ws)]
        _wait(dist.all_gather(parts, mine, async_op=async_op), async_op, evidence)
        out = torch.cat([p.cpu() for p in parts])
    elif name == "reduce_scatter":
        out = torch.empty(chunk, dtype=mine.dtype, device=mine.device)
        _wait(dist.reduce_scatter(out, list(mine.chunk(ws)), op=reduce_op, async_op=async_op), async_op, evidence)
    elif name == "all_to_all":
        out = torch.empty_like(mine)
        _wait(dist.all_to_all_single(out, mine, async_op=async_op), async_op, evidence)
    elif name == "send_recv":  # a ring: send to the next rank, receive from the previous one
        out = torch.empty_like(mine)
        nxt, prv = (ctx.rank + 1) % ws, (ctx.rank - 1) % ws
        if async_op:
            recv: Work | None = dist.irecv(out, src=prv)
            send: Work | None = dist.isend(mine, dst=nxt)
            _wait(recv, True, evidence)
            if send is None:
                raise RuntimeError("isend returned no Work handle")
            send.wait()
        elif ctx.rank % 2 == 0:  # even ranks send first, odd ranks receive first: no cycle of blocked sends
            dist.send(mine, dst=nxt)
            dist.recv(out, src=prv)
        else:
            dist.recv(out, src=prv)
            dist.send(mine, dst=nxt)
    else:
        raise ValueError(f"unknown collective {name!r}")
    return out


def check_collective(ctx: Ctx, case: dict[str, Any]) -> dict[str, Any]:
    """Run ``case``'s collective on this rank; ``{"outcome": ok|wrong, "evidence": ..., "error": ...}``."""
    import torch
    import torch.distributed as dist

    name, op, async_op = case["collective"], case.get("op"), bool(case.get("async_op"))
    evidence: dict[str, Any] = {}
    if name == "barrier":
        work: Work | None = dist.barrier(async_op=async_op)
        _wait(work, async_op, evidence)
        return {"outcome": "ok", "evidence": evidence}
    dtype = getattr(torch, case["dtype"])
    xs = _inputs(ctx, dtype)
    got = _run(ctx, name, op, xs[ctx.rank].to(ctx.device), async_op, evidence).cpu()
    want = _expected(ctx, name, op, xs)
    if op == "avg" and not dtype.is_floating_point:
        want = torch.div(want, 1, rounding_mode="trunc")
    want = want.to(dtype)
    if got.dtype == want.dtype and got.shape == want.shape and torch.equal(got, want):
        return {"outcome": "ok", "evidence": evidence}
    evidence["got"] = str(got.tolist())[:200]
    evidence["want"] = str(want.tolist())[:200]
    return {"outcome": "wrong", "evidence": evidence,
            "error": f"{name} {op or ''} {case['dtype']} on rank {ctx.rank}: result differs from the host computation"}
