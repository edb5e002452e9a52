"""Composite routes: ops computed as a sequence of other native kernels on the device.

``aten.softmax.int`` is CompositeImplicitAutograd: PyTorch runs it as ``aten._softmax``. The
``_softmax`` kernel is native only for the last axis of contiguous input; for any other axis or
layout the call is composed from native ``amax``, ``sub``, ``exp``, ``sum`` and ``div`` kernels.
The composition happens at two levels so that every observer sees the components:

* ``softmax.int`` / ``log_softmax.int`` carry an ``AutogradPrivateUse1`` kernel (as XLA does for
  composite ops) that routes non-native cases through the component ops with full dispatch, so a
  ``TorchDispatchMode`` and autograd see ``amax, sub, exp, sum, div``;
* the ``_softmax`` kernel itself composes when called directly outside its constraints (visible
  in the profiler as children of ``aten::_softmax``).

    >>> from opmatrix.backend.refaccel import install
    >>> _ = install()
    >>> x = torch.zeros(2, 4, device="refaccel")
    >>> torch.softmax(x, -1).cpu()    # native _softmax
    tensor([[0.2500, 0.2500, 0.2500, 0.2500],
            [0.2500, 0.2500, 0.2500, 0.2500]])
    >>> torch.softmax(x, 0).cpu()     # composite: amax, sub, exp, sum, div
    tensor([[0.5000, 0.5000, 0.5000, 0.5000],
            [0.5000, 0.5000, 0.5000, 0.5000]])
"""

from __future__ import annotations

from typing import Any

import torch

from . import runtime

__all__ = ["can_compose", "compose", "register_composites"]

_aten = torch.ops.aten


def _softmax_parts(x: torch.Tensor, dim: int, log: bool) -> torch.Tensor:
    shift = _aten.sub.Tensor(x, _aten.amax.default(x, [dim], True))
    exp = _aten.exp.default(shift)
    total = _aten.sum.dim_IntList(exp, [dim], True)
    if log:
        return _aten.sub.Tensor(shift, _aten.log.default(total))
    return _aten.div.Tensor(exp, total)


def _kernel_softmax(x: torch.Tensor, dim: int, half_to_float: bool, log: bool) -> torch.Tensor:
    if half_to_float:
        x = x.to(torch.float32)
    return _softmax_parts(x, dim, log)


_COMPOSERS = {
    "aten::_softmax": lambda a, k: _kernel_softmax(a[0], a[1], a[2], False),
    "aten::_log_softmax": lambda a, k: _kernel_softmax(a[0], a[1], a[2], True),
}


def can_compose(base: str) -> bool:
    """Whether a composite route exists for operator ``base`` (functional overloads only)."""
    return base in _COMPOSERS


def compose(base: str, args: tuple[Any, ...], kwargs: dict[str, Any]) -> Any:
    """Run ``base`` as its composite route (called from inside the native kernel)."""
    if kwargs:  # out= overloads: compute, then let the caller's out tensor receive the result
        out = kwargs["out"]
        result = _COMPOSERS[base](args, {})
        out.resize_(result.shape)
        out.copy_(result)
        return out
    return _COMPOSERS[base](args, kwargs)


def _native_softmax_applies(x: torch.Tensor, dim: int) -> bool:
    ndim = x.dim()
    return x.is_contiguous() and (ndim == 0 or dim % ndim == ndim - 1)


_NATIVE_DTYPES: set[torch.dtype] = set()


def _softmax_int(x: torch.Tensor, dim: int, dtype: torch.dtype | None = None, log: bool = False) -> torch.Tensor:
    if dtype is not None:
        x = x.to(dtype)
    # other dtypes: let the _softmax kernel reject the call in its own name
    if _native_softmax_applies(x, dim) or x.dtype not in _NATIVE_DTYPES:
        fn = _aten._log_softmax.default if log else _aten._softmax.default
        return fn(x, dim, False)
    if not runtime._STATE.ready:
        runtime.ensure_ready()
    return _softmax_parts(x, dim, log)


def register_composites(lib: torch.library.Library, softmax_dtypes: frozenset[torch.dtype]) -> None:
    """Register the AutogradPrivateUse1 routes of softmax.int and log_softmax.int."""
    _NATIVE_DTYPES.clear()
    _NATIVE_DTYPES.update(softmax_dtypes)
    lib.impl("softmax.int", lambda x, dim, dtype=None: _softmax_int(x, dim, dtype, False), "AutogradPrivateUse1")
    lib.impl("log_softmax.int", lambda x, dim, dtype=None: _softmax_int(x, dim, dtype, True), "AutogradPrivateUse1")
