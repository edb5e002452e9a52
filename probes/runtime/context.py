"""The :class:`Probe` every in-worker check receives: the adapter, its device, the dtypes to test.

The dtypes are the ones the runtime claims (``get_device_capability()["supported_dtypes"]``
through the best path it serves, or the adapter's own claim); a backend that claims nothing is
tested on opmatrix's default dtypes and the evidence says so::

    probe = Probe.from_adapter(adapter, spec="refaccel", generation="g2")
    probe.dtypes            # [torch.float32, torch.bfloat16, ...]
    probe.api("memory_allocated")   # (callable, "torch.refaccel.memory_allocated") or None
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import ModuleType
from typing import TYPE_CHECKING, Any

from opmatrix.backend.base import Adapter
from opmatrix.schema import ApiCoverage
from opmatrix.schema.enums import DEFAULT_DTYPES, DTYPES

if TYPE_CHECKING:
    import torch

__all__ = ["NO_VALUE_DEVICES", "HOST_DEVICES", "Probe", "sample", "same_values"]

#: device types whose tensors carry no data (shape-only): value checks do not apply
NO_VALUE_DEVICES = frozenset({"meta"})
#: device types that are the host itself: no driver, streams, device allocator or fork hazard
HOST_DEVICES = frozenset({"cpu", "meta"})


@dataclass
class Probe:
    """An initialised backend as the checks see it."""

    adapter: Adapter
    spec: str
    generation: str | None = None
    _claim: tuple[list[str] | None, str | None] | None = field(default=None, repr=False)
    _apis: dict[str, tuple[ApiCoverage, Callable[..., Any] | None, str | None]] | None = field(
        default=None, repr=False
    )

    @classmethod
    def from_adapter(cls, adapter: Adapter, spec: str, generation: str | None = None) -> Probe:
        """A probe over an adapter whose ``setup()`` already ran in this process (nothing is queried yet)."""
        return cls(adapter=adapter, spec=spec, generation=generation)

    @property
    def claimed(self) -> list[str] | None:
        """Dtype names the runtime claims (None: it claims nothing), read on first use."""
        if self._claim is None:
            self._claim = self._read_claim()
        return self._claim[0]

    @property
    def claim_via(self) -> str | None:
        """Where the claim came from."""
        if self._claim is None:
            self._claim = self._read_claim()
        return self._claim[1]

    # -- device ------------------------------------------------------------------------------

    @property
    def device_type(self) -> str:
        return self.adapter.device_type

    @property
    def index(self) -> int:
        return self.adapter.device_index

    @property
    def values(self) -> bool:
        """Whether device tensors hold values the checks can read back."""
        return self.device_type not in NO_VALUE_DEVICES

    @property
    def host(self) -> bool:
        """Whether the device is the host itself (cpu, meta)."""
        return self.device_type in HOST_DEVICES

    def device(self, index: int | None = None) -> torch.device:
        """The ``torch.device`` to test (the adapter's selected one by default)."""
        return self.adapter.device(index)

    def module(self) -> ModuleType | None:
        """``torch.<device_type>`` (the backend's own module) or None."""
        import torch

        return getattr(torch, self.device_type, None)

    def sync(self) -> None:
        """Wait for the device through the adapter."""
        self.adapter.synchronize()

    # -- dtypes ------------------------------------------------------------------------------

    @property
    def dtype_names(self) -> list[str]:
        """Claimed dtypes known to opmatrix, or the default dtypes when nothing is claimed."""
        if self.claimed is None:
            return list(DEFAULT_DTYPES)
        return [d for d in DTYPES if d in self.claimed]

    @property
    def dtypes(self) -> list[torch.dtype]:
        """``dtype_names`` as ``torch.dtype`` objects (names this torch lacks are dropped)."""
        import torch

        return [getattr(torch, n) for n in self.dtype_names if hasattr(torch, n)]

    def dtype_scope(self) -> str:
        """How the evidence should name the dtype set."""
        if self.claimed is None:
            return f"{len(self.dtype_names)} default dtypes (the runtime claims none)"
        return f"{len(self.dtype_names)} claimed dtypes"

    def _read_claim(self) -> tuple[list[str] | None, str | None]:
        claimed = self.adapter.claimed_dtypes()
        if claimed is not None:
            return sorted(claimed), f"{type(self.adapter).__name__}.claimed_dtypes"
        hit = self.api("get_device_capability")
        if hit is None:
            return None, None
        fn, via = hit
        try:
            caps = fn()
        except (RuntimeError, TypeError, ValueError, NotImplementedError) as exc:
            return None, f"{via} failed: {exc}"
        if isinstance(caps, Mapping) and "supported_dtypes" in caps:
            return sorted(str(d).removeprefix("torch.") for d in caps["supported_dtypes"]), via
        return None, None

    # -- API paths ---------------------------------------------------------------------------

    def coverage(self) -> list[ApiCoverage]:
        """How each device-generic API reaches this backend (computed once per process)."""
        return [cov for cov, _, _ in self._api_table().values()]

    def api(self, name: str) -> tuple[Callable[..., Any], str] | None:
        """The best path serving capability ``name`` (generic first, then the own module)."""
        _, fn, via = self._api_table().get(name, (None, None, None))
        if fn is None or via is None:
            return None
        return fn, via

    def _api_table(self) -> dict[str, tuple[ApiCoverage, Callable[..., Any] | None, str | None]]:
        if self._apis is None:
            from .apis import survey

            self._apis = survey(self)
        return self._apis


def sample(dtype: torch.dtype, shape: tuple[int, ...] = (2, 3, 4)) -> torch.Tensor:
    """A host tensor of ``dtype`` whose values every dtype represents exactly (0..6, distinct)."""
    import torch

    n = 1
    for s in shape:
        n *= s
    base = torch.arange(n, dtype=torch.float32).remainder(7)
    if dtype is torch.bool:
        return base.remainder(2).bool().reshape(shape)
    if dtype.is_complex:
        return torch.complex(base, -base).to(dtype).reshape(shape)
    return base.to(dtype).reshape(shape)


def same_values(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Exact equality of two host tensors of any dtype (compared in 64-bit after conversion)."""
    import torch

    if a.shape != b.shape or a.dtype != b.dtype:
        return False
    wide = torch.complex128 if a.dtype.is_complex else torch.float64
    return bool(torch.equal(a.to(wide), b.to(wide)))
