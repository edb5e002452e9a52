"""Built-in adapters for PyTorch's own device types: cpu, meta, cuda, mps, xpu, PrivateUse1.

``cpu`` is the reference itself (every call native, no fallback possible). ``meta`` computes
shapes only, so its numerics are not comparable. ``cuda`` was written against the documented
API; ``mps`` and ``xpu`` likewise, and are marked unverified until run on their hardware.
"""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Iterator
from typing import Any

from opmatrix.schema import DeviceInfo, FallbackState
from opmatrix.schema.userref import import_failure, import_user_module

from .base import Adapter, FallbackSeen
from .initmodes import InitFailureMode, modes_from_module

#: the ops a PrivateUse1 device cannot make a tensor without
_ALLOCATORS = ("aten::empty.memory_format", "aten::empty_strided")

__all__ = ["CpuAdapter", "CudaAdapter", "MetaAdapter", "MpsAdapter", "PrivateUse1Adapter", "XpuAdapter"]


class CpuAdapter(Adapter):
    """The host itself: kernels are native by definition and nothing can fall back."""

    name = "cpu"
    device_type = "cpu"
    dispatch_key = "CPU"
    is_host = True

    @contextlib.contextmanager
    def observe_fallback(self) -> Iterator[FallbackSeen]:
        yield FallbackSeen(FallbackState.not_observed, [], "cpu is the host")

    def discovery(self) -> tuple[int | None, str | None]:
        """One device: the host."""
        return 1, None

    def devices(self) -> list[DeviceInfo]:
        import platform

        import torch

        return [
            DeviceInfo(
                index=0,
                name=platform.processor() or platform.machine(),
                properties={"threads": torch.get_num_threads(), "capability": torch.backends.cpu.get_cpu_capability()},
            )
        ]

    def versions(self) -> dict[str, str | None]:
        import torch

        return {
            "driver": None,
            "firmware": None,
            "isa": torch.backends.cpu.get_cpu_capability(),
            "stepping": None,
            "backend_version": str(torch.__version__),
        }

    def compile_backend(self) -> Any:
        # inductor needs a C++ toolchain and minutes of warm-up per graph on 2 cores; aot_eager
        # exercises capture and decomposition, which is what the compile path classification needs
        return "aot_eager"


class MetaAdapter(Adapter):
    """Shape-only tensors: paths are observable, values are not (numerics are not compared)."""

    name = "meta"
    device_type = "meta"
    dispatch_key = "Meta"

    @contextlib.contextmanager
    def observe_fallback(self) -> Iterator[FallbackSeen]:
        yield FallbackSeen(FallbackState.not_observed, [], "meta has no host fallback")

    def health_check(self) -> str | None:
        import torch

        try:
            y = torch.empty(3, device="meta")  # no data to copy: allocation is the whole opset
            return None if y.shape == (3,) else "meta tensor lost its shape"
        except Exception as exc:  # noqa: BLE001
            return f"{type(exc).__name__}: {exc}"

    def compile_backend(self) -> Any:
        return None


class CudaAdapter(Adapter):
    """NVIDIA (and ROCm through the same API) devices."""

    name = "cuda"
    device_type = "cuda"
    dispatch_key = "CUDA"

    def available(self) -> tuple[bool, str]:
        import torch

        if not torch.backends.cuda.is_built():
            return False, "this torch build has no CUDA support (a CPU wheel); install a CUDA build of torch"
        try:
            count = torch.cuda.device_count()
        except RuntimeError as exc:
            return False, f"CUDA runtime error: {exc}"
        if count == 0:
            return False, "no CUDA device visible (check the driver with nvidia-smi and CUDA_VISIBLE_DEVICES)"
        return True, ""

    def discovery(self) -> tuple[int | None, str | None]:
        """The CUDA device count (NVML / the driver's count: no context is created), or why there is none."""
        import torch

        if not torch.backends.cuda.is_built():
            return 0, "--backend cuda: this torch build has no CUDA support (a CPU wheel); install a CUDA build of torch"
        ok, why = self.available()
        return (torch.cuda.device_count(), None) if ok else (0, f"--backend cuda: {why}")

    def setup(self) -> None:
        import torch

        ok, why = self.available()
        if not ok:
            raise RuntimeError(why)
        torch.cuda.set_device(self.device_index)

    def versions(self) -> dict[str, str | None]:
        import torch

        driver = None
        with contextlib.suppress(Exception):
            driver = str(torch._C._cuda_getDriverVersion())  # type: ignore[attr-defined]
        cap = None
        with contextlib.suppress(Exception):
            major, minor = torch.cuda.get_device_capability(self.device_index)
            cap = f"sm_{major}{minor}"
        return {
            "driver": driver,
            "firmware": None,
            "isa": cap,
            "stepping": None,
            "backend_version": torch.version.cuda or torch.version.hip,
        }

    def devices(self) -> list[DeviceInfo]:
        import torch

        out = []
        for i in range(torch.cuda.device_count()):
            p = torch.cuda.get_device_properties(i)
            out.append(
                DeviceInfo(
                    index=i,
                    name=p.name,
                    uuid=str(getattr(p, "uuid", "")) or None,
                    properties={"memory_bytes": int(p.total_memory), "capability": f"{p.major}.{p.minor}"},
                )
            )
        return out


class MpsAdapter(Adapter):
    """Apple GPUs; fallback evidence from the MPS CPU-fallback warning (unverified here)."""

    name = "mps"
    device_type = "mps"
    dispatch_key = "MPS"
    verified = False

    def device(self, index: int | None = None) -> Any:
        import torch

        return torch.device("mps")

    @contextlib.contextmanager
    def observe_fallback(self) -> Iterator[FallbackSeen]:
        # with PYTORCH_ENABLE_MPS_FALLBACK=1, PyTorch warns "The operator 'aten::x' is not
        # currently supported on the MPS backend and will fall back to run on the CPU"
        seen = FallbackSeen(FallbackState.not_observed, [], "MPS fallback warning")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            yield seen
        for w in caught:
            text = str(w.message)
            if "fall back to run on the CPU" in text:
                seen.state = FallbackState.observed
                op = text.split("'")[1] if "'" in text else text
                seen.ops.append(op)


class XpuAdapter(Adapter):
    """Intel GPUs through torch.xpu (unverified here)."""

    name = "xpu"
    device_type = "xpu"
    dispatch_key = "XPU"
    verified = False


class PrivateUse1Adapter(Adapter):
    """Any backend that registers the PrivateUse1 key on import (``privateuse1:package.module``).

    Only generic signals: registrations for the PrivateUse1 key, the observed call tree, and
    host copies inside a call. The device type is whatever name the module registered.
    """

    name = "privateuse1"
    dispatch_key = "PrivateUse1"
    verified = False

    def __init__(self, module: str, generation: str | None = None, device_index: int = 0):
        super().__init__(generation, device_index)
        self.module = module
        self.name = f"privateuse1:{module}"
        self.device_type = "privateuseone"

    def setup(self) -> None:
        """Import the module; a module that registered no usable device is refused here, in its own
        words (never a torch-internal error about ``torch.privateuseone`` further on)."""
        self._import()
        problem = self.registration_problem()
        if problem is not None:
            raise RuntimeError(problem)

    def _import(self) -> None:
        import torch

        import_user_module(self.module)
        self.device_type = torch._C._get_privateuse1_backend_name()

    def init_failure_modes(self) -> tuple[InitFailureMode, ...]:
        """The modes the module declares in ``OPMATRIX_INIT_FAILURE_MODES`` (:mod:`.initmodes`)."""
        import sys

        import_user_module(self.module)
        return modes_from_module(sys.modules[self.module])

    def preflight(self) -> list[str]:
        """The module imports and registers a PrivateUse1 device: a name and an allocator kernel."""
        try:
            self._import()
        except Exception as exc:  # noqa: BLE001 - whatever the import raised is the message
            return [f"--backend {self.name}: cannot import {self.module!r}: {import_failure(exc)}"]
        problem = self.registration_problem()
        return [f"--backend {self.name}: {problem}"] if problem else []

    def discovery(self) -> tuple[int | None, str | None]:
        """The count the device module reports once the module is imported (``preflight`` imports it;
        importing registers the device and must not initialise it), else unknown (None)."""
        count, source = self.device_count()
        return (None, None) if source.startswith("no ") else (count, None)

    def registration_problem(self) -> str | None:
        """What the imported module failed to register (None when the device is usable): a device
        name and the allocation kernels. A module found as a namespace package (a folder of that
        name without ``__init__.py``, typically the package's source checkout in the current
        directory) is named as the likely cause, since it hides the installed package."""
        import sys

        import torch

        missing = []
        if torch._C._get_privateuse1_backend_name() == "privateuseone":
            missing.append("a device name (torch.utils.rename_privateuse1_backend)")
        for op in _ALLOCATORS:
            if not torch._C._dispatch_has_kernel_for_dispatch_key(op, "PrivateUse1"):
                missing.append(f"a PrivateUse1 kernel for {op}")
        if not missing:
            return None
        module = sys.modules.get(self.module)
        where = ""
        if module is not None and getattr(module, "__file__", None) is None:
            paths = list(getattr(module, "__path__", []) or [])
            where = (f" ({self.module!r} was imported as a namespace package from {paths[0] if paths else '?'}: a "
                     "folder of that name without __init__.py, such as a source checkout in the current directory, "
                     "hides the installed package; run from another directory)")
        return (f"importing {self.module!r} registered no PrivateUse1 device{where}: it lacks {'; '.join(missing)}. "
                "On import the module must rename the PrivateUse1 backend, register its device module "
                "(torch._register_device_module) and PrivateUse1 kernels for empty.memory_format, empty_strided "
                "and copy_")

    def register(self) -> None:
        """Importing the module registers the device (its runtime should initialise lazily)."""
        self._import()

    def device_count(self) -> tuple[int, str]:
        """How many devices the backend has, and which API said so: ``torch.accelerator`` when
        this backend is the current accelerator, else the device module's ``device_count``."""
        import torch

        accel = getattr(torch, "accelerator", None)
        with contextlib.suppress(Exception):
            current = accel.current_accelerator() if accel is not None else None
            if current is not None and current.type == self.device_type:
                return int(accel.device_count()), "torch.accelerator.device_count()"  # type: ignore[union-attr]
        count = getattr(getattr(torch, self.device_type, None), "device_count", None)
        if callable(count):
            with contextlib.suppress(Exception):
                return int(count()), f"torch.{self.device_type}.device_count()"
        return 1, "no device count API: device 0 assumed"

    def devices(self) -> list[DeviceInfo]:
        """Every device the backend counts (index 0 alone only when it has no count to ask)."""
        n, source = self.device_count()
        return [DeviceInfo(index=i, name=f"{self.device_type}:{i}", properties={"counted_by": source})
                for i in range(max(n, 1) if source.startswith("no ") else n)]

    def compile_backend(self) -> Any:
        return "aot_eager"
