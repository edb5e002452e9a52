"""One rank process of a distributed batch: ``python -m opmatrix.probes.distributed.rank SPEC RANK``.

The spec (JSON, written by :mod:`.launch`) names the backend, the c10d backend, the store port
on 127.0.0.1 and the cases. For each case this rank joins a fresh process group (its own prefix
in the batch's store, its own timeout), runs the case, leaves the group, and appends two lines
to its progress file (``start`` before, ``result`` after, flushed), so the launcher can blame a
case that crashed or hung and lose nothing else.
"""

from __future__ import annotations

import datetime as dt
import json
import os
import sys
import time
import traceback
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    import torch
    from torch.distributed import Store

    from opmatrix.backend.base import Adapter

    from .collectives import Ctx

__all__ = ["main"]

#: Error texts that mean the c10d backend refused an operation cleanly (data, not branches).
UNSUPPORTED_MARKERS = ("not supported", "unsupported", "cannot use reduceop", "not implemented", "does not support",
                       "can't be cast to the desired output type")


def _emit(path: Path, record: dict[str, Any]) -> None:
    with path.open("a") as f:
        f.write(json.dumps(record) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _setup(spec: dict[str, Any]) -> tuple[Adapter, str]:
    import torch

    from opmatrix.backend import get_adapter

    from .c10d import prepare_c10d

    torch.set_num_threads(1)
    adapter = get_adapter(spec["backend"], generation=spec.get("generation"))
    adapter.setup()
    return adapter, prepare_c10d(adapter)


def _run_case(ctx: Ctx, case: dict[str, Any], store: Store, timeout: float) -> dict[str, Any]:
    import torch.distributed as dist

    from .collectives import check_collective
    from .failure import run_failure
    from .topology import check_topology
    from .training import check_checkpoint, check_ddp

    try:
        dist.init_process_group(ctx.c10d, store=store, rank=ctx.rank, world_size=ctx.world_size,
                                timeout=dt.timedelta(seconds=timeout))
        if case["kind"] != "failure":
            dist.barrier()  # every rank connected before any may leave (a fast refusal must not cut a slow connect)
        match case["kind"]:
            case "collective":
                return check_collective(ctx, case)
            case "topology":
                return check_topology(ctx, case)
            case "ddp":
                return check_ddp(ctx, case)
            case "checkpoint":
                return check_checkpoint(ctx, case)
            case "failure":
                return run_failure(ctx, case, store, lambda t: _solo_all_reduce(ctx, store, t))
        raise ValueError(f"unknown case kind {case['kind']!r}")
    finally:
        if case["kind"] != "failure" and dist.is_initialized():  # a broken group's teardown can block
            dist.destroy_process_group()
        # group names count up per process; a rank whose init failed must not count differently from the
        # others, or every later case waits on keys its peers never write
        dist.distributed_c10d._world.group_count = 0


def _solo_all_reduce(ctx: Ctx, store: Store, tensor: torch.Tensor) -> None:
    """A new process group of this rank alone (after a failure): does communication still work?"""
    import torch.distributed as dist

    group = dist.new_group([ctx.rank], timeout=dt.timedelta(seconds=5))
    dist.all_reduce(tensor, group=group)


def _exit_with_parent() -> None:
    """Leave when the launcher dies (ranks run in their own session, so no signal reaches them)."""
    import threading

    parent = os.getppid()

    def watch() -> None:
        while os.getppid() == parent:
            time.sleep(1.0)
        os._exit(3)

    threading.Thread(target=watch, daemon=True, name="opmatrix-parent-watch").start()


def _host_bytes(adapter: Adapter) -> int:
    counter = getattr(adapter, "c10d_host_bytes", None)
    return int(counter()) if callable(counter) else 0


def _classify(exc: BaseException) -> str:
    text = str(exc).lower()
    return "unsupported" if any(m in text for m in UNSUPPORTED_MARKERS) else "error"


def main(argv: list[str]) -> int:
    """Run every case of the spec file ``argv[0]`` as rank ``argv[1]``."""
    _exit_with_parent()
    spec = json.loads(Path(argv[0]).read_text())
    rank = int(argv[1])
    progress = Path(spec["work"]) / f"rank{rank}.jsonl"
    os.environ["LOCAL_RANK"] = str(rank)  # one host: the local rank is the rank
    adapter, c10d = _setup(spec)
    import torch.distributed as dist

    from .collectives import Ctx

    base = dist.TCPStore("127.0.0.1", spec["port"], is_master=False,
                         timeout=dt.timedelta(seconds=float(spec.get("rendezvous_s", 60.0))))
    ctx = Ctx(rank=rank, world_size=spec["world_size"], device=adapter.device(), c10d=c10d)
    for case in spec["cases"]:
        _emit(progress, {"case": case["id"], "event": "start", "t": time.time()})
        store = dist.PrefixStore(f"{case['id']}/", base)
        started, staged_before = time.perf_counter(), _host_bytes(adapter)
        try:
            result = _run_case(ctx, case, store, float(case.get("timeout", spec["pg_timeout"])))
        except Exception as exc:  # noqa: BLE001 - recorded per case; the next case still runs
            tb = traceback.format_exc(limit=3)
            result = {"outcome": _classify(exc), "error": f"{type(exc).__name__}: {exc}"[:600],
                      "evidence": {"traceback_tail": tb[-300:]}}
        staged = _host_bytes(adapter) - staged_before
        if staged:  # the c10d backend moved device tensors through host memory: a host fallback
            result.setdefault("evidence", {})["host_staged_bytes"] = staged
        result.update(case=case["id"], event="result", rank=rank, seconds=round(time.perf_counter() - started, 4),
                      c10d=c10d, staged=staged > 0)
        _emit(progress, result)
        if case["kind"] == "failure":
            os._exit(0)  # the broken group cannot be torn down cleanly
    os._exit(0)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
