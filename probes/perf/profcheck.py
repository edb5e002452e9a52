"""Diagnostics check: does the profiler capture device activity for a workload on this backend?

    python -m opmatrix.probes.perf.profcheck cpu      # prints "ok: N events, aten::addmm ..." or exits 1

Runs one forward pass of the ``mlp`` workload on the adapter's device under ``torch.profiler`` and
requires the workload's matmul to appear among the captured events.
"""

from __future__ import annotations

import sys

__all__ = ["profiler_check"]


def profiler_check(backend: str) -> tuple[bool, str]:
    """(ok, detail): the profiler saw the workload's operators run."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    from opmatrix.backend import get_adapter

    from .measure import workload_step

    adapter = get_adapter(backend)
    adapter.setup()
    step, _ = workload_step(adapter, "mlp", "eager", torch.float32, 0)
    activities = [ProfilerActivity.CPU]
    if adapter.device_type == "cuda":
        activities.append(ProfilerActivity.CUDA)
    with profile(activities=activities) as prof:
        step()
        adapter.synchronize()
    names = {e.name for e in prof.events()}
    seen = sorted(n for n in names if n in ("aten::addmm", "aten::linear", "aten::mm"))
    detail = f"{len(prof.events())} events, {', '.join(seen) or 'no matmul event'}"
    return bool(seen), detail


if __name__ == "__main__":
    ok, detail = profiler_check(sys.argv[1])
    print(("ok: " if ok else "FAILED: ") + detail)
    sys.exit(0 if ok else 1)
