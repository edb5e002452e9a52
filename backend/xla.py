"""The ``xla`` adapter: TPU, AWS Trainium/Inferentia (torch-neuronx) and CPU through torch_xla.

torch_xla registers the ``XLA`` dispatch key and executes lazily: an op records IR, and the graph
is compiled and run when a result is needed (``torch_xla.sync()`` or a host copy). Ops without a
lowering run through torch_xla's boxed CPU fallback, which counts every call in a per-op metrics
counter named after the ATen op (``aten::_unique2``), while lowered ops count as ``xla::...``.
Those counters, read before and after a call, are the fallback evidence::

    adapter = get_adapter("xla")             # PJRT_DEVICE=CPU on a machine without TPU
    adapter.setup()                          # imports torch_xla: inside a worker only
    x = torch.arange(6.0, device=adapter.device())
    with adapter.observe_fallback() as seen:
        torch.unique(x)
    seen.state, seen.ops                     # observed, ['aten::_unique2']

The counters are read after the pending graph has executed (the context synchronises on exit), so
the evidence covers both dispatch and execution. Nothing here imports torch_xla before
:meth:`XlaAdapter.setup`: the parent process of a probe run only plans and records.
"""

from __future__ import annotations

import contextlib
import importlib.util
import os
from collections.abc import Iterator
from importlib import metadata
from typing import Any

from opmatrix.schema import DeviceInfo, FallbackState

from .base import Adapter, FallbackSeen, Rejection, bringup_check

__all__ = ["FALLBACK_COUNTER_PREFIX", "HOST_SCALAR_READS", "XlaAdapter", "fallback_counts"]

#: torch_xla names the counter of a host-fallback call after the ATen op; lowered ops are ``xla::``
FALLBACK_COUNTER_PREFIX = "aten::"

#: host scalar reads that torch_xla serves through its fallback (``.item()`` inside an op): reading a
#: scalar to the host is a sync, not a compute fallback (docs/levels.md#execution-paths), so these counters are not evidence
HOST_SCALAR_READS = frozenset({"aten::_local_scalar_dense", "aten::item"})

#: XLA's status code for "no lowering for this input" (``UNIMPLEMENTED: ...``): a clean refusal
_XLA_REJECT_FRAGMENTS = ("unimplemented:",)


def fallback_counts() -> dict[str, int]:
    """Current values of torch_xla's per-op fallback counters (``aten::name`` -> calls)."""
    import torch_xla.debug.metrics as met

    return {
        name: int(met.counter_value(name) or 0)
        for name in met.counter_names()
        if name.startswith(FALLBACK_COUNTER_PREFIX)
    }


class XlaAdapter(Adapter):
    """Adapter for torch_xla devices; the device kind comes from PJRT (``PJRT_DEVICE``)."""

    name = "xla"
    device_type = "xla"
    dispatch_key = "XLA"
    verified = True  # on torch_xla's CPU device (PJRT_DEVICE=CPU); TPU and Neuron use the same API

    def __init__(self, generation: str | None = None, device_index: int = 0):
        super().__init__(generation, device_index)
        self._device: Any = None

    # -- lifecycle ---------------------------------------------------------------------------

    def available(self) -> tuple[bool, str]:
        """Whether torch_xla is installed beside this torch (no device is touched)."""
        if importlib.util.find_spec("torch_xla") is None:
            return False, (
                "torch_xla is not installed in this environment; install the torch_xla release matching torch "
                "(e.g. pip install torch==2.9.0 torch_xla==2.9.0) and set PJRT_DEVICE (TPU, CPU, NEURON, CUDA)"
            )
        return True, ""

    def setup(self) -> None:
        """Import torch_xla and bind the device (in each worker; never in the parent)."""
        ok, why = self.available()
        if not ok:
            raise RuntimeError(why)
        import torch_xla

        self._device = torch_xla.device(self.device_index)

    def select_device(self, index: int) -> None:
        """Probe the ``index``-th XLA device of this process."""
        super().select_device(index)
        self._device = None

    def device(self, index: int | None = None) -> Any:
        """The ``xla:N`` device (torch_xla's own mapping, so PJRT devices resolve correctly)."""
        if index is not None and index != self.device_index:
            import torch_xla

            return torch_xla.device(index)
        if self._device is None:
            import torch_xla

            self._device = torch_xla.device(self.device_index)
        return self._device

    def synchronize(self) -> None:
        """Run the pending lazy graph and wait for it (compile and runtime errors surface here)."""
        import torch_xla

        torch_xla.sync(wait=True)

    # -- identity ----------------------------------------------------------------------------

    def versions(self) -> dict[str, str | None]:
        """torch_xla and XLA revisions always; PJRT platform and device kind once set up."""
        backend = None
        with contextlib.suppress(metadata.PackageNotFoundError):
            backend = f"torch_xla {metadata.version('torch_xla')}"
        driver = isa = None
        if self._device is not None:
            import torch_xla
            import torch_xla.core.xla_model as xm

            gitrev = getattr(getattr(torch_xla, "version", None), "__xla_gitrev__", None)
            if backend and gitrev:
                backend += f" xla={gitrev[:12]}"
            # the PJRT plugin's platform version ("cpu" on the CPU client, the TPU runtime build on TPU)
            with contextlib.suppress(AttributeError, RuntimeError):
                driver = " ".join(str(torch_xla._XLAC._xla_get_platform_version()).split()) or None
            with contextlib.suppress(RuntimeError):
                isa = f"{xm.xla_device_hw(self._device)}:{xm.xla_device_kind(self._device)}"
        return {"driver": driver, "firmware": None, "isa": isa, "stepping": None, "backend_version": backend}

    def devices(self) -> list[DeviceInfo]:
        """The devices PJRT exposes to this process, with their runtime attributes."""
        import torch_xla
        import torch_xla.runtime as xr

        real = list(torch_xla.real_devices())
        attrs: list[dict[str, Any]] = []
        with contextlib.suppress(RuntimeError):
            attrs = list(xr.global_runtime_device_attributes())
        out = []
        for i, name in enumerate(real):
            props: dict[str, Any] = {"pjrt_device": os.environ.get("PJRT_DEVICE") or xr.device_type()}
            if i < len(attrs):
                props.update({k: v if isinstance(v, (str, int, float, bool)) else str(v) for k, v in attrs[i].items()})
            out.append(DeviceInfo(index=i, name=str(props.pop("name", name)), properties=props))
        return out

    def claimed_dtypes(self) -> list[str] | None:
        """torch_xla publishes no per-device dtype list; only bfloat16 support is queryable."""
        return None

    # -- observation -------------------------------------------------------------------------

    @contextlib.contextmanager
    def observe_fallback(self) -> Iterator[FallbackSeen]:
        """Fallback evidence from the ``aten::`` counters, read after the graph has executed."""
        seen = FallbackSeen(FallbackState.not_observed, [], "torch_xla aten:: fallback counters")
        before = fallback_counts()
        try:
            yield seen
            self.synchronize()
        finally:
            after = fallback_counts()
            grew = sorted(
                name for name, count in after.items() if count > before.get(name, 0) and name not in HOST_SCALAR_READS
            )
            if grew:
                seen.state, seen.ops = FallbackState.observed, grew

    def classify_exception(self, exc: BaseException) -> Rejection:
        """The generic rules, plus XLA's ``UNIMPLEMENTED`` status (no lowering for this input)."""
        verdict = super().classify_exception(exc)
        if verdict.outcome == "error" and isinstance(exc, RuntimeError):
            text = str(exc).lower()
            if "internal assert" not in text and any(f in text for f in _XLA_REJECT_FRAGMENTS):
                return Rejection("rejected", "XLA has no lowering for this input (UNIMPLEMENTED)")
        return verdict

    def health_check(self) -> str | None:
        """The bring-up check (allocate, copy in and out, compare bytes) on the XLA device.

        Only this check's own tensor is materialised (its copy back to the host), never a global
        sync: while the caller handles the exception of a graph that failed to lower, that graph's
        outputs are still alive in the traceback and a global sync would fail on them again,
        blaming a healthy device.
        """
        return bringup_check(self.device())

    def compile_backend(self) -> Any:
        """torch_xla's dynamo backend."""
        return "openxla"
