"""Which c10d backend a backend's tensors use: the adapter's, a registered one, or gloo for cpu.

Resolution order: the adapter's ``prepare_c10d()`` hook (refaccel registers its own backend
there), then ``torch.distributed.Backend.default_device_backend_map`` for the device type (where
a PrivateUse1 package registers its backend), else the process cannot run the suite::

    prepare_c10d(get_adapter("cpu"))        # "gloo"
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from opmatrix.backend.base import Adapter

__all__ = ["NoC10dBackend", "prepare_c10d"]


class NoC10dBackend(RuntimeError):
    """The backend offers no c10d backend for its device type."""


def prepare_c10d(adapter: Adapter) -> str:
    """Register (if needed) and name the c10d backend for ``adapter``'s device tensors."""
    import torch.distributed as dist

    hook = getattr(adapter, "prepare_c10d", None)
    if callable(hook):
        return str(hook())
    device_type = adapter.device_type
    if device_type == "cpu":
        return "gloo"
    found = dist.Backend.default_device_backend_map.get(device_type)
    if found:
        return str(found)
    raise NoC10dBackend(
        f"no c10d backend is registered for device type {device_type!r}: register one with "
        "torch.distributed.Backend.register_backend(name, creator, devices=[...]) when the package is imported"
    )
