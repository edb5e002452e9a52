"""The ``torch.compile`` backend ``"refaccel"``: decompose with a table, run on native kernels.

Dynamo captures the graph; aot_autograd lowers it to ATen with ``core_aten_decompositions()``
(so e.g. ``aten.addcmul``, which has no eager kernel, becomes native ``mul`` and ``add``); the
lowered graph then runs on the device with host fallback disabled, so a compiled graph uses native
kernels only and an op that would need the host is rejected. This is the ``decomposed`` path::

    >>> from opmatrix.backend.refaccel import install
    >>> _ = install()
    >>> register_compile_backend()
    'refaccel'
    >>> x = torch.ones(3, device="refaccel")
    >>> torch.compile(torch.addcmul, backend="refaccel")(x, x, x).cpu()   # eager: rejected
    tensor([2., 2., 2.])

Registration imports ``torch._dynamo`` (about a second), so ``install`` does it only when dynamo
is already loaded; the adapter's ``compile_backend()`` and ``register_compile_backend()`` do it
on demand.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from . import compile_cache, fallback


def _round(out: Any) -> Any:
    """Fast math: floating results rounded to bfloat16 precision, in place on the device."""
    for t in out if isinstance(out, (list, tuple)) else [out]:
        if isinstance(t, torch.Tensor) and t.is_floating_point() and t.dtype != torch.bfloat16:
            t.copy_(t.to(torch.bfloat16).to(t.dtype))
    return out

__all__ = ["refaccel_compiler", "register_compile_backend", "decompositions"]

_DONE: list[bool] = []


def decompositions() -> dict[Any, Callable[..., Any]]:
    """The decomposition table the backend applies (PyTorch's core ATen set)."""
    from torch._decomp import core_aten_decompositions

    return dict(core_aten_decompositions())


def _native_only(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    from torch._functorch.aot_autograd import make_boxed_func

    # what runs follows the code the cache gives back (a stale entry would show in the results)
    rounded = compile_cache.fast_math(compile_cache.load_or_store(gm.code))

    def run(*args: Any) -> Any:
        with fallback.no_host_fallback():
            out = gm(*args)
        return _round(out) if rounded else out

    return make_boxed_func(run)


def refaccel_compiler(gm: torch.fx.GraphModule, example_inputs: list[Any]) -> Callable[..., Any]:
    """Dynamo backend: aot_autograd with the decomposition table, native kernels only."""
    from torch._dynamo.backends.common import aot_autograd

    backend = aot_autograd(fw_compiler=_native_only, bw_compiler=_native_only, decompositions=decompositions())
    return backend(gm, example_inputs)


def register_compile_backend() -> str:
    """Register ``refaccel`` with torch._dynamo (idempotent); returns the backend name."""
    if not _DONE:
        from torch._dynamo.backends.registry import _BACKENDS, register_backend

        if "refaccel" not in _BACKENDS:
            register_backend(refaccel_compiler, name="refaccel")
        # refaccel's kernels are Python called by the dispatcher: after a graph break (e.g. nn.GRU) the
        # eager remainder calls them, and dynamo must not try to compile the runtime's own frames
        from torch._dynamo import trace_rules

        trace_rules.add(__name__.rpartition(".")[0])
        _DONE.append(True)
    return "refaccel"
