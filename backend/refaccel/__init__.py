"""refaccel: the reference accelerator, a real PrivateUse1 backend written in Python.

It behaves like a young accelerator: native kernels for part of ATen (``kernels.yaml``), composite
routes, a compiler decomposition path, a counted host fallback and clean rejections, plus a
runtime with two devices, a capacity-limited caching allocator, streams, events, generators,
fork rules and fault injection::

    >>> import torch, opmatrix.backend.refaccel as refaccel
    >>> refaccel.install()                      # or install("g1"); also $OPMATRIX_REFACCEL_GEN
    'g2'
    >>> x = torch.ones(2, 2).to("refaccel")
    >>> (x @ x).cpu()
    tensor([[2., 2.],
            [2., 2.]])

This package only registers; the logic lives in its modules (see README "The reference
accelerator").
"""

import torch as _torch

if not hasattr(_torch._C, "_acc"):  # the Python PrivateUse1 backend API refaccel is built on
    raise ImportError(
        f"refaccel needs torch's Python PrivateUse1 backend API (torch._C._acc), which torch {_torch.__version__} "
        "lacks; use a newer torch (the main environment has 2.13)"
    )

from .fallback import fallback_counts, reset_fallback_counts  # noqa: E402
from .faults import clear_faults, inject_fault  # noqa: E402
from .install import install, installed_generation  # noqa: E402

__all__ = [
    "clear_faults",
    "fallback_counts",
    "inject_fault",
    "install",
    "installed_generation",
    "register_compile_backend",
    "reset_fallback_counts",
]


def register_compile_backend() -> str:
    """Register the ``torch.compile`` backend ``"refaccel"`` (imports torch._dynamo); returns its name."""
    from .compile import register_compile_backend as _register

    return _register()
