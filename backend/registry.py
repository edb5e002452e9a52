"""Find an adapter by name: built-ins, ``package.module:attr`` plugins, ``privateuse1:module``.

    >>> get_adapter("cpu").dispatch_key
    'CPU'
    >>> get_adapter("privateuse1:my_vendor.torch_backend").dispatch_key  # needs a vendor's module: not run  # doctest: +SKIP
    'PrivateUse1'
"""

from __future__ import annotations

import difflib
from collections.abc import Callable

from opmatrix.schema.userref import import_failure, import_user_module

from .base import Adapter
from .builtin import CpuAdapter, CudaAdapter, MetaAdapter, MpsAdapter, PrivateUse1Adapter, XpuAdapter

__all__ = ["BUILTIN", "UnknownBackend", "get_adapter", "backend_names"]


class UnknownBackend(ValueError):
    """The ``--backend`` value names no adapter; the message says what would work."""


def _refaccel(generation: str | None, device_index: int) -> Adapter:
    try:
        from .refaccel.adapter import RefaccelAdapter
    except ImportError as exc:  # an older torch in the supported window (see refaccel/__init__)
        raise UnknownBackend(f"--backend refaccel is not available here: {exc}") from None

    return RefaccelAdapter(generation, device_index)


def _xla(generation: str | None, device_index: int) -> Adapter:
    from .xla import XlaAdapter

    return XlaAdapter(generation, device_index)


BUILTIN: dict[str, Callable[[str | None, int], Adapter]] = {
    "cpu": CpuAdapter,
    "meta": MetaAdapter,
    "cuda": CudaAdapter,
    "mps": MpsAdapter,
    "xpu": XpuAdapter,
    "refaccel": _refaccel,
    "xla": _xla,
}


def backend_names() -> list[str]:
    """Built-in backend names."""
    return sorted(BUILTIN)


def get_adapter(spec: str, generation: str | None = None, device_index: int = 0) -> Adapter:
    """The adapter for ``spec``: a built-in name, ``package.module:attr`` or ``privateuse1:module``."""
    spec = spec.strip()
    if spec in BUILTIN:
        return BUILTIN[spec](generation, device_index)
    if spec.startswith("privateuse1:"):
        module = spec.split(":", 1)[1]
        if not module or not all(part.isidentifier() for part in module.split(".")):
            raise UnknownBackend(f"--backend {spec!r}: expected privateuse1:package.module")
        return PrivateUse1Adapter(module, generation, device_index)
    if ":" in spec:
        module_name, _, attr = spec.partition(":")
        import torch  # noqa: F401 - first: many backend packages refuse to be imported before torch

        try:
            plugin = import_user_module(module_name)
        except Exception as exc:  # noqa: BLE001 - the real import failure, whatever it is, is the message
            raise UnknownBackend(f"--backend {spec!r}: cannot import {module_name!r}: {import_failure(exc)}") from exc
        try:
            factory = getattr(plugin, attr)
        except AttributeError:
            raise UnknownBackend(f"--backend {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
        adapter = factory(generation, device_index) if isinstance(factory, type) or callable(factory) else factory
        if not isinstance(adapter, Adapter):
            raise UnknownBackend(
                f"--backend {spec!r}: {attr} gave a {type(adapter).__name__}, expected an opmatrix.backend.Adapter"
            )
        return adapter
    close = difflib.get_close_matches(spec, list(BUILTIN), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    raise UnknownBackend(
        f"unknown backend {spec!r}{hint} (built-in: {', '.join(backend_names())}; "
        "or package.module:attr naming an Adapter, or privateuse1:package.module)"
    )
