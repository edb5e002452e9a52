"""Level 1 memory: the caching allocator's statistics move as documented, ``empty_cache`` returns
cached blocks, and exceeding capacity raises ``torch.OutOfMemoryError`` with the device still
usable afterwards (an OOM is not "unsupported" and must not poison the context)::

    allocated 0 -> 4194304 -> 0 B; reserved 4194304 >= allocated; peak 4194304, reset -> 0
"""

from __future__ import annotations

import gc
from collections.abc import Callable
from typing import Any

from .apis import NOT_SERVED
from .context import Probe
from .spec import Verdict, failed, not_applicable, passed, unknown

__all__ = ["check_empty_cache", "check_memory_stats", "check_oom"]

MiB = 1 << 20
_HOST = "host memory is not managed by a device caching allocator"


def _stats(probe: Probe) -> tuple[dict[str, Callable[..., Any]], str] | Verdict:
    if probe.host:
        return not_applicable(_HOST)
    names = ("memory_allocated", "memory_reserved", "max_memory_allocated", "reset_peak_memory_stats", "empty_cache")
    found, vias = {}, set()
    missing = []
    for name in names:
        hit = probe.api(name)
        if hit is None:
            missing.append(name)
        else:
            found[name], via = hit
            vias.add(via.rsplit(".", 1)[0])
    if missing:
        return unknown(f"not served by torch.accelerator nor torch.{probe.device_type}: {', '.join(missing)}",
                       "serve the memory statistics (a C++ device allocator serves torch.accelerator.memory_*)")
    return found, " + ".join(sorted(vias))


def check_memory_stats(probe: Probe) -> Verdict:
    """allocated / reserved / peak move as documented; reset_peak_memory_stats resets the peak."""
    import torch

    found = _stats(probe)
    if isinstance(found, Verdict):
        return found
    api, via = found
    gc.collect()  # garbage of earlier checks is not this check's business
    probe.sync()
    base = int(api["memory_allocated"]())
    x = torch.empty(4 * MiB, dtype=torch.uint8, device=probe.device())
    probe.sync()
    held, reserved, peak = int(api["memory_allocated"]()), int(api["memory_reserved"]()), int(api["max_memory_allocated"]())
    del x
    probe.sync()
    after = int(api["memory_allocated"]())
    api["reset_peak_memory_stats"]()
    peak_reset = int(api["max_memory_allocated"]())
    problems = [p for p in (_computed_released(probe, api["memory_allocated"]),) if p]
    if held - base < 4 * MiB:
        problems.append(f"allocated grew by {held - base} B for a 4 MiB tensor")
    if reserved < held:
        problems.append(f"reserved {reserved} < allocated {held}")
    if peak < held:
        problems.append(f"peak {peak} < allocated {held}")
    if after != base:
        problems.append(f"allocated {after} B after freeing, {base} B before")
    if peak_reset != after:
        problems.append(f"peak {peak_reset} after reset_peak_memory_stats, allocated {after}")
    evidence = (f"allocated {base} -> {held} -> {after} B; reserved {reserved}; peak {peak}, after reset "
                f"{peak_reset}")
    return failed(f"{'; '.join(problems)} ({evidence})", via=via) if problems else passed(evidence, via=via)


def _computed_released(probe: Probe, allocated: Callable[[], Any]) -> str | None:
    """None when the result of a computation is freed as soon as its last reference goes.

    A backend whose op results sit in reference cycles frees them only when Python's cyclic
    collector runs: ``del y`` then releases nothing, and a training loop runs out of memory.
    """
    import torch

    x = torch.ones(MiB // 4, device=probe.device())
    probe.sync()
    before = int(allocated())
    y = x * 2 + 1
    probe.sync()
    del y
    probe.sync()
    left = int(allocated()) - before
    if left <= 0:
        return None
    gc.collect()
    after_gc = int(allocated()) - before
    cycle = " until gc.collect() (op results are held in reference cycles)" if after_gc <= 0 else ""
    return f"{left} B of a computed tensor stay allocated after del{cycle}"


def check_empty_cache(probe: Probe) -> Verdict:
    """After freeing a block, empty_cache releases it: reserved drops back to what is allocated."""
    import torch

    found = _stats(probe)
    if isinstance(found, Verdict):
        return found
    api, via = found
    x = torch.empty(8 * MiB, dtype=torch.uint8, device=probe.device())
    probe.sync()
    cached_before = int(api["memory_reserved"]())
    del x
    probe.sync()
    cached = int(api["memory_reserved"]())
    api["empty_cache"]()
    released = int(api["memory_reserved"]())
    allocated = int(api["memory_allocated"]())
    if released >= cached and cached > allocated:
        return failed(f"empty_cache left reserved at {released} B (allocated {allocated} B)", via=via)
    if released > allocated + 8 * MiB:
        return failed(f"reserved {released} B after empty_cache, allocated {allocated} B", via=via)
    return passed(f"reserved {cached_before} B with 8 MiB held, {cached} B cached after free, "
                  f"{released} B after empty_cache (allocated {allocated} B)", via=via)


def _capacity(probe: Probe) -> tuple[int | None, str]:
    hit = probe.api("get_memory_info")
    if hit is not None:
        try:
            _free, total = hit[0]()
            return int(total), hit[1]
        except (*NOT_SERVED, ValueError) as exc:
            del exc
    for dev in probe.adapter.devices():
        if dev.index == probe.index and isinstance(dev.properties.get("memory_bytes"), int):
            return int(dev.properties["memory_bytes"]), "device properties"  # type: ignore[arg-type]
    return None, "unknown capacity"


def check_oom(probe: Probe) -> Verdict:
    """Asking for more than the capacity raises torch.OutOfMemoryError and the device stays usable."""
    import torch

    if probe.host:
        return not_applicable(f"{_HOST}; exhausting it would take the machine down, not the device")
    capacity, source = _capacity(probe)
    request = capacity + 64 * MiB if capacity else 1 << 50
    allocated = probe.api("memory_allocated")
    gc.collect()
    before = int(allocated[0]()) if allocated else None
    try:
        big = torch.empty(request, dtype=torch.uint8, device=probe.device())
        probe.sync()
    except torch.OutOfMemoryError as exc:
        message = " ".join(str(exc).split())[:160]
    except NOT_SERVED as exc:
        return failed(f"{request} B ({source} {capacity}) raised {type(exc).__name__}, not torch.OutOfMemoryError: "
                      f"{' '.join(str(exc).split())[:200]}", "raise torch.OutOfMemoryError when capacity is exceeded")
    else:
        del big
        return failed(f"allocating {request} B succeeded ({source}: {capacity})",
                      "refuse allocations above capacity with torch.OutOfMemoryError")
    gc.collect()
    after = int(allocated[0]()) if allocated else None
    if before is not None and after != before:
        return failed(f"OOM raised, but allocated changed {before} -> {after} B (leaked a partial allocation)")
    problem = probe.adapter.health_check()
    if problem is not None:
        return failed(f"OOM raised, but the device is unusable afterwards: {problem}")
    return passed(f"{request} B over capacity ({source}: {capacity}) raised torch.OutOfMemoryError "
                  f"({message}); device usable afterwards")
