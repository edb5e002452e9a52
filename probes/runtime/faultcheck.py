"""Fault records and compiled-code identity (docs/levels.md#runtime-checks-round-2).

``error_cause``: a runtime error provoked on purpose (an allocation far over capacity) must keep
what lies below the framework exception: the runtime's own status or code, or the lower error as
its cause (``raise ... from ...``), as :func:`opmatrix.probes.runner.faultscope.cause_chain` records it
in every fault record. ``compile_cache_identity``: a persistent compile cache must reuse code when
nothing it depends on changed and recompile when an input of its identity changed::

    check_compile_cache_identity(probe)
    # passed("same identity: cache hit, no recompilation; OPMATRIX_REFACCEL_FAST_MATH=1: identity ...")
"""

from __future__ import annotations

import os
import random
from typing import Any

from opmatrix.backend.base import bringup_check
from opmatrix.probes.runner.faultscope import cause_chain

from .context import Probe
from .spec import Verdict, failed, not_applicable, passed

__all__ = ["check_compile_cache_identity", "check_error_cause"]

#: bytes asked for to provoke a runtime error: more than any device holds
HUGE = 1 << 60


def check_error_cause(probe: Probe) -> Verdict:
    """An allocation over capacity raises an error whose chain keeps the runtime's status (a
    status / code attribute or a lower error as its cause), and the device still works."""
    import torch

    if probe.host:
        return not_applicable("the host: no device runtime or driver below the framework's exception")
    try:
        torch.empty(HUGE // 4, dtype=torch.float32, device=probe.device())
    except Exception as exc:  # noqa: BLE001 - the error is what the check reads
        chain = cause_chain(exc)
    else:
        return not_applicable(f"allocating {HUGE} bytes on {probe.device()} succeeded: no runtime error to provoke")
    after = bringup_check(probe.device())
    said = " <- ".join(chain)
    profiler = getattr(probe.module(), "profiler", None)
    trace = ("; profiler correlation: not checked (the backend's profiler module is not read yet)" if profiler
             else f"; profiler correlation: torch.{probe.device_type} offers no profiler of its own")
    if after is not None:
        return failed(f"allocating {HUGE} bytes raised {said}; afterwards the device failed: {after}")
    if len(chain) < 2 and "[status" not in said:
        return failed(f"allocating {HUGE} bytes raised only the top message: {said}",
                      "keep the driver's status code on the exception (a status attribute) or raise it from the lower error")
    return passed(f"allocating {HUGE} bytes raised {said}; the device still works{trace}")


def _compile_run(probe: Probe, fn: Any, x: Any) -> tuple[dict[str, int], Any]:
    """Compile ``fn`` afresh (dynamo reset), run it once; the cache stats' change and the result."""
    import torch
    import torch._dynamo

    stats = probe.module().compile_cache_stats  # type: ignore[union-attr]
    before = dict(stats())
    torch._dynamo.reset()
    out = torch.compile(fn, backend=probe.adapter.compile_backend())(x)
    probe.sync()
    after = dict(stats())
    return {k: after.get(k, 0) - before.get(k, 0) for k in ("hits", "misses")}, out.cpu()


def check_compile_cache_identity(probe: Probe) -> Verdict:
    """Same identity: the cached code runs (a hit, no recompilation); an identity input changed
    (the backend's code-generation option): recompiled; changed back: a hit, the first results."""
    import torch

    mod = probe.module()
    ident, stats = getattr(mod, "compile_cache_identity", None), getattr(mod, "compile_cache_stats", None)
    if probe.host or not callable(ident) or not callable(stats):
        return not_applicable(f"torch.{probe.device_type} exposes no persistent compile cache "
                              "(compile_cache_identity() and compile_cache_stats()): nothing to check")
    if probe.adapter.compile_backend() is None:
        return not_applicable(f"{probe.adapter.name} has no torch.compile backend")
    nonce = round(random.random(), 6)  # a graph no earlier run cached: its first compile must miss

    def fn(t: Any) -> Any:
        return t * 1.000123 + nonce

    x = torch.rand(4096).to(probe.device())
    first, want = _compile_run(probe, fn, x)
    again, same = _compile_run(probe, fn, x)
    if first["misses"] < 1 or again != {"hits": 1, "misses": 0} or not torch.equal(same, want):
        return failed(f"first compile {first}, same identity again {again} (want one hit, no miss), results "
                      f"{'equal' if torch.equal(same, want) else 'differ'}")
    option = getattr(mod, "COMPILE_OPTION_ENV", None)
    if not option:
        return passed(f"identity {sorted(ident())}: same identity reused the cached code (a hit, results equal); "
                      "the backend names no code-generation option to change")
    old, keys = os.environ.get(option), ident()
    os.environ[option] = "1"
    try:
        changed, moved = ident(), _compile_run(probe, fn, x)[0]
    finally:
        os.environ.pop(option) if old is None else os.environ.__setitem__(option, old)
    back, result = _compile_run(probe, fn, x)
    diff = sorted(k for k in keys if keys[k] != changed.get(k))
    if not diff or moved["misses"] != 1 or back != {"hits": 1, "misses": 0} or not torch.equal(result, want):
        return failed(f"{option}=1 changed identity keys {diff or 'none'}, compile {moved} (want a miss); "
                      f"restored: {back}, results {'equal' if torch.equal(result, want) else 'differ (stale code ran)'}")
    return passed(f"identity {sorted(keys)}: same identity reused the cached code (a hit, results equal); {option}=1 "
                  f"changed {diff} and recompiled; restored: a hit with the first results")
