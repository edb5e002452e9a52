"""The opmatrix adapter of the reference accelerator (``--backend refaccel``).

Besides the generic signals, refaccel gives exact fallback evidence (its own per-op counter),
its device identity and versions, the dtypes its runtime claims, a poisoned-context check and
its ``torch.compile`` backend::

    adapter = get_adapter("refaccel", generation="g1")
    adapter.setup()                          # install g1 and initialise (raises on driver problems)
    with adapter.observe_fallback() as seen:
        torch.sort(torch.ones(3, device="refaccel"))
    seen.state, seen.ops                     # observed, ['aten::sort.values_stable']
"""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Iterator
from typing import Any

from opmatrix.schema import DeviceInfo, FallbackState

from ..base import Adapter, FallbackSeen
from ..initmodes import InitFailureMode

__all__ = ["RefaccelAdapter"]


class RefaccelAdapter(Adapter):
    """Adapter for ``refaccel`` (generations g1 and g2)."""

    name = "refaccel"
    device_type = "refaccel"
    dispatch_key = "PrivateUse1"
    verified = True
    def __init__(self, generation: str | None = None, device_index: int = 0):
        super().__init__(generation or os.environ.get("OPMATRIX_REFACCEL_GEN", "").strip() or "g2", device_index)

    def generations(self) -> list[str] | None:
        """g1 and g2 (the kernel table's generations)."""
        from .table import load_table

        return sorted(load_table()["generations"])

    def discovery(self) -> tuple[int | None, str | None]:
        """The configured device count (``OPMATRIX_REFACCEL_DEVICES``, else 2): configuration only.

        A driver that is missing or fails is not a reason to refuse: the runtime suite records it."""
        from . import runtime

        return runtime.configured_devices()[0], None

    def preflight(self) -> list[str]:
        """``OPMATRIX_REFACCEL_FAULT`` must name known modes and overloads that exist, and
        ``OPMATRIX_REFACCEL_DEVICES`` / ``OPMATRIX_REFACCEL_BAD_DEVICE`` be well formed. A run
        that injects ``poison-device`` gets a device-state folder of its own."""
        from . import runtime
        from .devicestate import STATE_ENV
        from .faults import BAD_ENV, _parse_bad, check_bad_device, check_slowdown, check_spec

        problems = check_spec(os.environ.get("OPMATRIX_REFACCEL_FAULT", ""))
        count, problem = runtime.configured_devices()
        problems += [problem] if problem else []
        problems += [p for p in [runtime.driver_problem()] if p]
        problems += check_slowdown(os.environ.get("OPMATRIX_REFACCEL_SLOWDOWN", ""))
        bad = os.environ.get(BAD_ENV, "")
        problems += check_bad_device(bad) or [
            f"{BAD_ENV}: device {index} in {bad.strip()!r} is not one of refaccel's {count} devices (0-{count - 1}); "
            "it would make no device wrong" for index in sorted(_parse_bad(bad)[0]) if index >= count]
        if "poison-device:" in os.environ.get("OPMATRIX_REFACCEL_FAULT", "") and not os.environ.get(STATE_ENV):
            # a device fault outlives its process: this run's marks live in a folder of its own,
            # which its workers inherit (never seen by another run on this machine)
            os.environ[STATE_ENV] = tempfile.mkdtemp(prefix="opmatrix-refaccel-state-")
        return problems

    def setup(self) -> None:
        """Install this generation and initialise the runtime (raises naming the cause)."""
        import torch

        from .install import install

        self.generation = install(self.generation)
        torch.refaccel.init()  # type: ignore[attr-defined]
        torch.refaccel.set_device(self.device_index)  # type: ignore[attr-defined]
        if self.device_index > 0:
            # torch 2.13's Python device guard reports no device count, so the autograd engine has a
            # worker thread for refaccel:0 only (a backward on refaccel:1 hits its INTERNAL ASSERT);
            # refaccel runs the other devices' backward passes on the calling thread instead
            torch.autograd.set_multithreading_enabled(False)

    def prepare_c10d(self) -> str:
        """Register refaccel's own c10d backend (host-staged over gloo) and return its name."""
        from .c10d import register_c10d

        return register_c10d()

    def c10d_host_bytes(self) -> int:
        """Bytes of device tensors the c10d backend has staged through host memory in this process."""
        from .c10d import c10d_staging_counts

        return c10d_staging_counts().get("bytes", 0)

    def register(self) -> None:
        """Install this generation without initialising the runtime (fork-safe discovery)."""
        from .install import install

        self.generation = install(self.generation)

    def available(self) -> tuple[bool, str]:
        """Whether the runtime can initialise here (driver present, compatible, device free)."""
        from . import runtime

        problem = runtime._init_failure()
        return (problem is None, problem or "")

    def select_device(self, index: int) -> None:
        """Probe ``refaccel:index``."""
        super().select_device(index)
        import torch

        if hasattr(torch, "refaccel"):
            torch.refaccel.set_device(index)

    def synchronize(self) -> None:
        """Wait for the device (raises when the context is poisoned)."""
        from . import streams

        streams.synchronize(self.device_index)

    def versions(self) -> dict[str, str | None]:
        """Driver / firmware / ISA / stepping / runtime versions."""
        from . import runtime

        _describe_generation(self.generation)
        return runtime.versions()

    def devices(self) -> list[DeviceInfo]:
        """Both devices with name, stable UUID, generation, capacity, ISA and firmware."""
        from . import runtime

        _describe_generation(self.generation)
        return [
            DeviceInfo(
                index=d.index,
                name=d.name,
                uuid=d.uuid,
                properties={"memory_bytes": d.memory_bytes, "generation": d.generation, "isa": d.isa,
                            "firmware": d.firmware},
            )
            for d in runtime.describe_devices()
        ]

    def claimed_dtypes(self) -> list[str] | None:
        """Dtypes the runtime claims device memory can hold."""
        from .table import dtype_name, storable_dtypes

        return [dtype_name(d) for d in storable_dtypes()]

    @contextlib.contextmanager
    def observe_fallback(self) -> Iterator[FallbackSeen]:
        """Diff refaccel's per-op host fallback counter around the block."""
        from . import fallback

        seen = FallbackSeen(FallbackState.not_observed, [], "refaccel fallback counter")
        before = fallback.fallback_counts()
        try:
            yield seen
        finally:
            after = fallback.fallback_counts()
            ops = sorted(op for op, n in after.items() if n > before.get(op, 0))
            if ops:
                seen.state = FallbackState.observed
                seen.ops = ops

    def health_check(self) -> str | None:
        """None when the device works; the poison reason or failure otherwise."""
        from . import runtime

        reason = runtime.poisoned()
        if reason is not None:
            return f"refaccel context poisoned: {reason}"
        return super().health_check()

    def init_failure_modes(self) -> tuple[InitFailureMode, ...]:
        """The four driver conditions ``OPMATRIX_REFACCEL_DRIVER`` simulates, with the words each
        message carries."""
        env = "OPMATRIX_REFACCEL_DRIVER"
        return (
            InitFailureMode("driver_mismatch", ((env, "incompatible"),), "unsupported_driver", ("driver", "older")),
            InitFailureMode("missing_driver", ((env, "missing"),), "missing_driver", ("driver", "not loaded")),
            InitFailureMode("device_busy", ((env, "busy"),), "device_busy", ("busy", "tenant")),
            InitFailureMode("device_reset", ((env, "reset"),), "device_reset", ("reset",)),
        )

    def reset_device(self, index: int) -> str | None:
        """Reset a device a ``poison-device`` fault left unavailable (:mod:`.devicestate`)."""
        from . import runtime

        return runtime.reset_device(index)

    def compile_backend(self) -> Any:
        """``"refaccel"`` (registered with torch._dynamo on first use)."""
        from .compile import register_compile_backend

        return register_compile_backend()


def _describe_generation(generation: str | None) -> None:
    """Before install, identity questions describe the adapter's generation (no registration)."""
    from . import runtime
    from .install import installed_generation

    if installed_generation() is None:
        runtime.set_generation(generation or "g2")
