"""``install``: register refaccel with PyTorch as the PrivateUse1 backend (once per process).

Registration is cheap (no device initialisation, no ``torch._dynamo`` import): it renames
PrivateUse1 to ``refaccel``, registers the device module ``torch.refaccel``, the Python hooks and
device guard, the infrastructure kernels, the generation's native kernels from the kernel table,
the composite routes, the boxed host fallback, injected faults from the environment and the
serialization location tag. The runtime initialises lazily on the first device call.
"""

from __future__ import annotations

import os
import sys

import torch
from torch.utils.backend_registration import _setup_privateuseone_for_python_backend

from . import basics, composite, fallback, faults, kernels, memclass, printing, runtime, serialization
from .module import RefaccelModule
from .table import load_fallback_dtypes, load_fallback_ops, load_rules

__all__ = ["install", "installed_generation"]

_INSTALLED: dict[str, object] = {}


class _Hooks(torch._C._acc.PrivateUse1Hooks):
    """What PyTorch's C++ side asks a PrivateUse1 backend (availability, primary context)."""

    def is_available(self) -> bool:
        return runtime.device_count() > 0

    def has_primary_context(self, dev_id: int) -> bool:
        return runtime.is_initialized()

    def is_built(self) -> bool:
        return True


class _Guard(torch._C._acc.DeviceGuard):
    """The Python device guard (torch 2.13 implements only ``type_``; no streams)."""

    def type_(self) -> torch._C._autograd.DeviceType:  # type: ignore[override]
        return torch._C._autograd.DeviceType.PrivateUse1


def installed_generation() -> str | None:
    """The generation installed in this process, or None."""
    gen = _INSTALLED.get("generation")
    return gen if isinstance(gen, str) else None


def install(generation: str | None = None) -> str:
    """Register refaccel (``generation`` or ``$OPMATRIX_REFACCEL_GEN`` or ``g2``); returns it.

    Idempotent: a second call returns the installed generation; asking for a different one
    raises, because one process serves one generation (start a new process).
    """
    current = installed_generation()
    if current is not None:
        if generation is not None and generation != current:
            raise RuntimeError(
                f"refaccel {current} is already installed in this process; one process serves one generation "
                f"(start a new process for {generation})"
            )
        return current
    gen = generation or os.environ.get("OPMATRIX_REFACCEL_GEN", "").strip() or "g2"
    load_rules(gen)  # validates the table and the generation name before touching PyTorch
    existing = torch._C._get_privateuse1_backend_name()
    if existing not in ("privateuseone", "refaccel"):
        raise RuntimeError(
            f"cannot install refaccel: PrivateUse1 is already registered as {existing!r} in this process"
        )
    runtime.set_generation(gen)
    _setup_privateuseone_for_python_backend(
        "refaccel", backend_module=RefaccelModule(), hook=_Hooks(), device_guard=_Guard()
    )
    aten = torch.library.Library("aten", "IMPL")
    basics.register_basics(aten)
    memclass.register_pinned(aten)
    rules = kernels.register_kernels(aten, gen)
    composite.register_composites(aten, rules["aten::_softmax"].dtypes if "aten::_softmax" in rules else frozenset())
    fallback.configure(gen, load_fallback_ops(gen), load_fallback_dtypes(gen))
    printing.register()
    fallback_lib = torch.library.Library("_", "IMPL")
    fallback_lib.fallback(fallback.host_fallback, "PrivateUse1")
    serialization.register()
    faults.load_from_env()
    _INSTALLED.update(generation=gen, libs=(aten, fallback_lib))
    if "torch._dynamo" in sys.modules:
        from .compile import register_compile_backend

        register_compile_backend()
    return gen
