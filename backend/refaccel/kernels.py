"""Native kernels from the kernel table, and the one place a call's path is decided.

For every overload the table lists for the installed generation, a PrivateUse1 kernel is
registered. A call inside the kernel's constraints computes on host memory (``hostexec``);
outside them it is composed from other native kernels (``otherwise: compose``), sent to the host
fallback when the generation allows it for that op, or rejected with a message naming op,
dtype, layout, rank and device. Ops without a kernel reach the boxed fallback
(``fallback.py``), which applies the same policy::

    >>> from opmatrix.backend.refaccel import install
    >>> _ = install()
    >>> x = torch.ones(2, 3, device="refaccel")
    >>> (x + x).cpu()                                # native aten::add.Tensor
    tensor([[2., 2., 2.],
            [2., 2., 2.]])
    >>> torch.ones(2, dtype=torch.int8, device="refaccel").exp()   # rejected: dtype int8
    Traceback (most recent call last):
    ...
    opmatrix.backend.refaccel.errors.RefaccelUnsupportedError: refaccel: aten::exp does not support dtype int8 ...
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from opmatrix.schema.names import OpName

from . import composite, fallback, faults, hostexec, runtime
from .accumulate import summing_in
from .errors import unsupported_call
from .table import Rule, dtype_name, load_rules

__all__ = ["register_kernels", "violation"]

_STATE = runtime._STATE


#: violations a composite route may serve (a different dtype is never composed)
_COMPOSABLE = ("layout", "arg", "rank")


def violation(
    rule: Rule, tensors: list[torch.Tensor], args: tuple[Any, ...], dim_pos: int | None
) -> tuple[str, str] | None:
    """None when the call is inside ``rule``; else (kind, what is outside it) for the message."""
    dtypes = rule.dtypes
    rank = 0
    for t in tensors:
        if t.dtype not in dtypes:
            return "dtype", f"dtype {dtype_name(t.dtype)}"
        rank = max(rank, t.dim())
    if not rule.rank_min <= rank <= rule.rank_max:
        return "rank", f"rank {rank}"
    if rule.contiguous_only and not all(t.is_contiguous() for t in tensors):
        return "layout", "non-contiguous layout"
    if rule.last_dim_only and dim_pos is not None and dim_pos < len(args) and tensors:
        dim = args[dim_pos]
        ndim = tensors[0].dim()
        if ndim and dim % ndim != ndim - 1:
            return "arg", f"dim={dim} (not the last axis)"
    return None


def _make_kernel(op: torch._ops.OpOverload, rule: Rule, generation: str) -> Callable[..., Any]:
    info = hostexec.op_info(op)
    name, base = info.name, info.base
    dim_pos, defect = info.dim_pos, rule.defect
    compute = summing_in(rule.accumulate_low, op)
    compose = rule.otherwise == "compose"
    implicit = _is_implicit(op)
    run = hostexec.run
    device_tensors = hostexec.device_tensors

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if not _STATE.ready:
            runtime.check_tensors(device_tensors(args, kwargs))
        if faults.ACTIVE:
            faults.trigger(name, base)
        tensors = device_tensors(args, kwargs)
        why = violation(rule, tensors, args, dim_pos)
        if why is None:
            if faults.SLOW:
                return faults.slowed(name, base, lambda: run(op, args, kwargs, defect=defect, compute=compute))
            if faults.BAD:
                return faults.miscompute(name, base, run(op, args, kwargs, defect=defect, compute=compute))
            return run(op, args, kwargs, defect=defect, compute=compute)
        if compose and why[0] in _COMPOSABLE:
            if implicit:  # run PyTorch's own composite on the device's other kernels
                return op.decompose(*args, **kwargs)
            if composite.can_compose(base):
                return composite.compose(base, args, kwargs)
        if fallback.allowed(base, tensors):
            return fallback.run_counted(op, args, kwargs)
        raise unsupported_call(name, why[1], tensors, rule.describe())

    kernel.__name__ = f"refaccel_{name.replace('::', '_').replace('.', '_')}"
    return kernel


def _resolve(name: str) -> torch._ops.OpOverload:
    """The overload a kernel table names (``aten::random_.from``; ``aten::mm``: the default one)."""
    op = OpName.parse(name)
    return getattr(getattr(getattr(torch.ops, op.namespace), op.name), op.overload)


def _is_implicit(op: torch._ops.OpOverload) -> bool:
    return torch._C._dispatch_has_kernel_for_dispatch_key(op.name(), "CompositeImplicitAutograd")


def _autograd_kernel(op: torch._ops.OpOverload) -> Callable[..., Any]:
    """For a CompositeImplicitAutograd op with a native kernel: keep autograd working.

    A backend kernel for such an op displaces its composite from the autograd key too, so this
    kernel differentiates through the composite (full dispatch of its components) when a grad is
    needed, and otherwise calls the native kernel below autograd.
    """

    def kernel(*args: Any, **kwargs: Any) -> Any:
        if torch.is_grad_enabled() and any(t.requires_grad for t in hostexec.device_tensors(args, kwargs)):
            return op.decompose(*args, **kwargs)
        with torch._C._AutoDispatchBelowAutograd():
            return op(*args, **kwargs)

    return kernel


def register_kernels(lib: torch.library.Library, generation: str) -> dict[str, Rule]:
    """Register ``generation``'s native kernels on ``lib``; returns the rules registered."""
    rules = load_rules(generation)
    for name, rule in rules.items():
        op = _resolve(name)
        short = name.removeprefix("aten::")
        lib.impl(short, _make_kernel(op, rule, generation), "PrivateUse1")
        if _is_implicit(op):
            lib.impl(short, _autograd_kernel(op), "AutogradPrivateUse1")
    return rules
