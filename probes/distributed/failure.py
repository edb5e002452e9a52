"""Rank-side failure cases: a rank killed mid-collective, a rank that never joins a collective.

The survivor (rank 0) times the error it gets, says whether the text names the missing rank,
and then finds the poison scope: does the same process group work again (``operation``), does a
new one work (``communicator``), do device operations still work (else ``device``), or nothing
(``job``)::

    rank 1: barrier, sleep 0.3 s, SIGKILL itself
    rank 0: barrier, all_reduce -> RuntimeError after 0.4 s "Connection closed by peer ..."
            -> same group fails, a new group works -> poison scope "communicator"
"""

from __future__ import annotations

import datetime as dt
import os
import re
import signal
import time
from typing import TYPE_CHECKING, Any

from .collectives import Ctx

if TYPE_CHECKING:
    from collections.abc import Callable

    import torch
    from torch.distributed import Store

__all__ = ["run_failure"]

_KILL_DELAY = 0.3


def _poison_scope(ctx: Ctx, new_group: Callable[[torch.Tensor], None]) -> tuple[str, dict[str, Any]]:
    """Which scope the failure poisoned, probed from the narrowest up."""
    import torch
    import torch.distributed as dist

    probe: dict[str, Any] = {}
    try:
        dist.all_reduce(torch.ones(2, device=ctx.device))
        return "operation", {"same_group_reusable": True}
    except Exception as exc:  # noqa: BLE001 - any failure here is the evidence sought
        probe["same_group_error"] = f"{type(exc).__name__}: {exc}"[:200]
    try:
        t = torch.ones(2, device=ctx.device)
        new_group(t)
        probe["new_group_reusable"] = bool(t.cpu().eq(1).all())
    except Exception as exc:  # noqa: BLE001
        probe["new_group_error"] = f"{type(exc).__name__}: {exc}"[:200]
    try:
        device_ok = bool(((torch.ones(4, device=ctx.device) * 2).cpu() == 2).all())
    except Exception as exc:  # noqa: BLE001
        probe["device_error"] = f"{type(exc).__name__}: {exc}"[:200]
        device_ok = False
    probe["device_reusable"] = device_ok
    if probe.get("new_group_reusable"):
        return "communicator", probe
    return ("device" if not device_ok else "job"), probe


def _names_rank(text: str, rank: int) -> bool:
    return bool(re.search(rf"\brank[ =:]*{rank}\b", text, re.IGNORECASE))


def run_failure(ctx: Ctx, case: dict[str, Any], store: Store, new_group: Callable[[torch.Tensor], None]) -> dict[str, Any]:
    """Run the failure ``case`` on this rank (rank 1 is the one that fails)."""
    import torch
    import torch.distributed as dist

    kind, timeout = case["failure"], float(case["timeout"])
    if ctx.rank != 0:
        if kind == "rank_killed":
            dist.barrier()
            time.sleep(_KILL_DELAY)  # rank 0 is inside the all_reduce by now
            os.kill(os.getpid(), signal.SIGKILL)
        # joins the group, never the collective; waits past the case deadline so that the launcher's
        # deadline (which kills the ranks and says so) always ends a hang, never this wait's own timeout
        store.wait(["survivor_done"], dt.timedelta(seconds=2 * case["deadline"] + 10))
        return {"outcome": "ok", "evidence": {"role": "stayed out of the collective"}}
    if kind == "rank_killed":
        dist.barrier()
    started = time.perf_counter()
    try:
        dist.all_reduce(torch.ones(4, device=ctx.device))
    except Exception as exc:  # noqa: BLE001 - the error is what the case measures
        elapsed = time.perf_counter() - started
        text = f"{type(exc).__name__}: {exc}"
    else:
        store.set("survivor_done", "1")
        return {"outcome": "wrong", "error": f"{kind}: the collective completed without the missing rank 1"}
    store.set("survivor_done", "1")
    scope, probe = _poison_scope(ctx, new_group)
    within = elapsed <= timeout + _KILL_DELAY + 2.0
    what = "rank 1 killed (SIGKILL) mid all_reduce" if kind == "rank_killed" else "rank 1 never joined the all_reduce"
    evidence = {"failed_rank": 1, "names_missing_rank": _names_rank(text, 1), "within_timeout": within,
                "timeout_error": "timeout" in text.lower() or "timed out" in text.lower(), **probe}
    message = f"{what}: survivor rank 0 got {text[:300]} after {elapsed:.2f} s (timeout {timeout:g} s)"
    return {"outcome": "ok" if within else "hung", "error": message, "detect_seconds": round(elapsed, 3),
            "timeout_seconds": timeout, "poison_scope": scope, "evidence": evidence}
