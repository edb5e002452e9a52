"""The boxed host fallback: ops without a native kernel run on the host, when policy allows.

Registered with ``torch.library.Library("_", "IMPL").fallback(fn, "PrivateUse1")``, so PyTorch's
dispatcher sends every PrivateUse1 call without a kernel here. The generation's table lists the
operators (``aten::sort``, any overload) allowed to run on the host; they are copied to host
views, computed by the CPU kernel, copied back (respecting ``out=`` and in-place arguments) and
counted per overload. Everything else is rejected. Inside a ``refaccel`` compiled graph no host
fallback is allowed (``no_host_fallback``)::

    >>> from opmatrix.backend.refaccel import install
    >>> _ = install()
    >>> x = torch.tensor([3.0, 1.0, 2.0], device="refaccel")
    >>> reset_fallback_counts(); _ = torch.sort(x); fallback_counts()
    {'aten::sort.values_stable': 1}
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Iterator
from typing import Any

import torch

from . import faults, hostexec, runtime
from .errors import no_kernel

__all__ = ["allowed", "fallback_counts", "reset_fallback_counts", "host_fallback", "no_host_fallback", "run_counted"]

_COUNTS: dict[str, int] = {}
_ALLOWED: set[str] = set()
_DTYPES: set[torch.dtype] = set()
_GENERATION = ["g2"]
_LOCAL = threading.local()
_STATE = runtime._STATE


def configure(generation: str, allowed_ops: frozenset[str], dtypes: frozenset[torch.dtype]) -> None:
    """Set the generation's fallback policy (called by ``install``)."""
    _GENERATION[0] = generation
    _ALLOWED.clear()
    _ALLOWED.update(allowed_ops)
    _DTYPES.clear()
    _DTYPES.update(dtypes)


def allowed(base: str, tensors: list[torch.Tensor]) -> bool:
    """Whether operator ``base`` (``aten::sort``) may run on the host here, for these tensors."""
    if getattr(_LOCAL, "in_graph", False):
        return False
    if base not in _ALLOWED and base.rstrip("_") not in _ALLOWED:
        return False
    return all(t.dtype in _DTYPES for t in tensors)


def fallback_counts() -> dict[str, int]:
    """Host fallback executions per overload since the last reset (a copy)."""
    return dict(_COUNTS)


def reset_fallback_counts() -> None:
    """Forget the counts (probes reset before and read after each call)."""
    _COUNTS.clear()


@contextlib.contextmanager
def no_host_fallback() -> Iterator[None]:
    """Within the block, ops without a native kernel are rejected (compiled graphs)."""
    before = getattr(_LOCAL, "in_graph", False)
    _LOCAL.in_graph = True
    try:
        yield
    finally:
        _LOCAL.in_graph = before


def run_counted(op: torch._ops.OpOverload, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``op`` on the host and count it as a fallback."""
    name = hostexec.op_info(op).name
    _COUNTS[name] = _COUNTS.get(name, 0) + 1
    return hostexec.run(op, args, kwargs)


def host_fallback(op: torch._ops.OpOverload, *args: Any, **kwargs: Any) -> Any:
    """The boxed PrivateUse1 fallback: host execution when allowed, else a clean rejection."""
    if not _STATE.ready:
        runtime.check_tensors(hostexec.device_tensors(args, kwargs))
    info = hostexec.op_info(op)
    if faults.ACTIVE:
        faults.trigger(info.name, info.base)
    tensors = hostexec.device_tensors(args, kwargs)
    if allowed(info.base, tensors):
        return run_counted(op, args, kwargs)
    raise no_kernel(info.name, tensors, _GENERATION[0], _why_not(info.base, tensors))


def _why_not(base: str, tensors: list[torch.Tensor]) -> str:
    if getattr(_LOCAL, "in_graph", False):
        return "host fallback is not available inside compiled graphs"
    if base in _ALLOWED or base.rstrip("_") in _ALLOWED:
        bad = sorted({str(t.dtype).removeprefix("torch.") for t in tensors if t.dtype not in _DTYPES})
        return f"the host fallback does not serve dtype {', '.join(bad)}"
    return (
        "host fallback is not allowed for this op; try torch.compile(backend='refaccel'), which decomposes "
        "some ops into native kernels"
    )
