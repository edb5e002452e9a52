"""Rank-side topology check: what ``torch.distributed`` reports on each rank, agreed by all.

Every rank reports its rank, world size, local rank and device; the reports are exchanged and
must name ranks 0..N-1 once each, one world size, and a device on every rank.
"""

from __future__ import annotations

import os
from typing import Any, cast

from .collectives import Ctx

__all__ = ["check_topology"]


def check_topology(ctx: Ctx, case: dict[str, Any]) -> dict[str, Any]:
    """Exchange each rank's view; ``ok`` when the views are complete and consistent."""
    import torch.distributed as dist

    mine = {"rank": dist.get_rank(), "world_size": dist.get_world_size(),
            "local_rank": int(os.environ.get("LOCAL_RANK", "-1")), "device": str(ctx.device),
            "backend": str(dist.get_backend())}
    gathered: list[object] = [None] * ctx.world_size
    dist.all_gather_object(gathered, mine)
    views = cast(list[dict[str, Any]], gathered)  # each rank's ``mine``
    ranks = sorted(v["rank"] for v in views)
    consistent = ranks == list(range(ctx.world_size)) and {v["world_size"] for v in views} == {ctx.world_size}
    evidence = {"ranks": ",".join(str(v["rank"]) for v in views),
                "local_ranks": ",".join(str(v["local_rank"]) for v in views),
                "devices": ",".join(v["device"] for v in views),
                "world_size": mine["world_size"], "reported_backend": mine["backend"]}
    if consistent and mine["rank"] == ctx.rank:
        return {"outcome": "ok", "evidence": evidence}
    return {"outcome": "wrong", "evidence": evidence,
            "error": f"topology on rank {ctx.rank}: ranks {ranks} or world sizes disagree with {ctx.world_size}"}
