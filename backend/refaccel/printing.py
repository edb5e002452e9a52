"""Printing refaccel tensors: format a host copy, as PyTorch itself does for XLA and lazy tensors.

``Tensor.__repr__`` computes on the tensor's device (``isfinite``, ``masked_select``, a float64
upcast) before formatting; a young accelerator has no kernels for most of that, and PyTorch copies
tensors of device types it knows to be like that (``xla``, ``lazy``, ``ipu``, ``mtia``) to the CPU
first. ``register`` extends that rule to ``refaccel``, so printing never counts as a fallback nor
fails on an unsupported op::

    >>> from opmatrix.backend.refaccel import install
    >>> _ = install()
    >>> torch.ones(2, device="refaccel:1")
    tensor([1., 1.], device='refaccel:1')
"""

from __future__ import annotations

from typing import Any

import torch
import torch._tensor_str

__all__ = ["register"]

_ORIGINAL: list[Any] = []


def _str(self: torch.Tensor, *, tensor_contents: Any = None) -> str:
    original = _ORIGINAL[0]
    if self.device.type != "refaccel" or tensor_contents is not None:
        return original(self, tensor_contents=tensor_contents)
    with torch.no_grad():
        text: str = original(self.detach().cpu())
    suffix = f", device='{self.device}'"
    if self.grad_fn is not None:
        suffix += f", grad_fn=<{type(self.grad_fn).__name__}>"
    elif self.requires_grad:
        suffix += ", requires_grad=True"
    return text[:-1] + suffix + ")"


def register() -> None:
    """Route printing of refaccel tensors through a host copy (once per process)."""
    if not _ORIGINAL:
        _ORIGINAL.append(torch._tensor_str._str)
        torch._tensor_str._str = _str  # type: ignore[assignment]
