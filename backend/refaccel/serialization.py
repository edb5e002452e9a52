"""``torch.save`` / ``torch.load`` of refaccel tensors through a registered location tag.

Saving needs nothing special (PyTorch copies each device storage to the host through
``_copy_from``). Loading restores a storage tagged ``refaccel:N`` by allocating device memory from
refaccel's allocator and copying the bytes in; it works with ``weights_only=True`` and with
``map_location`` (``"cpu"``, ``"refaccel:1"``)::

    >>> import io; from opmatrix.backend.refaccel import install
    >>> _ = install()
    >>> x = torch.ones(2, device="refaccel")
    >>> buf = io.BytesIO(); torch.save(x, buf); _ = buf.seek(0)
    >>> torch.load(buf, weights_only=True).device
    device(type='refaccel', index=0)
"""

from __future__ import annotations

from typing import Any

import torch

from . import memory

__all__ = ["register"]

_REGISTERED: list[bool] = []


def _tag(obj: Any) -> str | None:
    device = getattr(obj, "device", None)
    if device is not None and device.type == "refaccel":
        return f"refaccel:{device.index or 0}"
    return None


def _restore(obj: Any, location: str) -> Any:
    if not location.startswith("refaccel"):
        return None
    index = torch.device(location).index or 0
    nbytes = obj.nbytes()
    device_tensor = memory.allocate(nbytes, torch.uint8, index)
    storage = device_tensor.untyped_storage()
    if nbytes:
        memory.host_bytes(storage).copy_(torch.empty(0, dtype=torch.uint8).set_(obj.cpu()))
    return storage


def register() -> None:
    """Register the tagger / deserializer pair (once per process)."""
    if not _REGISTERED:
        torch.serialization.register_package(1, _tag, _restore)
        _REGISTERED.append(True)
