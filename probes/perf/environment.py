"""Where a measurement ran: hardware identity, power mode, driver, firmware and framework versions."""

from __future__ import annotations

import os
import platform
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from opmatrix.schema.version import __version__

if TYPE_CHECKING:
    from opmatrix.backend.base import Adapter

__all__ = ["environment_fields", "power_mode"]

#: CPU frequency governor, the host's power mode where the kernel exposes it
_GOVERNOR = Path("/sys/devices/system/cpu/cpu0/cpufreq/scaling_governor")


def power_mode(adapter: Adapter) -> str:
    """The power mode the runtime reports, or ``unknown``.

    An adapter may provide ``power_mode()``; for host-executed backends the CPU governor is the
    power mode. Nothing is guessed: without a source the answer is ``unknown``.
    """
    query = getattr(adapter, "power_mode", None)
    if callable(query):
        value = query()
        if value:
            return str(value)
    if adapter.device_type == "cpu" and _GOVERNOR.exists():
        return f"cpu governor {_GOVERNOR.read_text().strip()}"
    return "unknown"


def host_cpu() -> str:
    """The CPU model from /proc/cpuinfo (else what platform knows): a line of a benchmark row, a field of a record."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment_fields(adapter: Adapter) -> dict[str, Any]:
    """The record fields that identify hardware and software (call after ``adapter.setup()``)."""
    import torch

    versions = adapter.versions()
    devices = adapter.devices()
    framework = {"python": platform.python_version(), "torch": str(torch.__version__),
                 "opmatrix": __version__}
    if versions.get("backend_version"):
        framework["backend"] = str(versions["backend_version"])
    return {
        "hardware": {
            "device_type": adapter.device_type,
            "device_name": devices[0].name if devices else "unknown",
            "device_count": len(devices),
            "host_cpu": host_cpu(),
            "host_cores": os.cpu_count() or 1,
            "machine": f"{platform.system()} {platform.machine()} ({sys.platform})",
        },
        "power_mode": power_mode(adapter),
        "driver": str(versions.get("driver") or "unknown"),
        "firmware": str(versions.get("firmware") or "unknown"),
        "framework": framework,
    }
