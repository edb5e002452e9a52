"""A minimal user adapter, as the README's "Probe your own backend" section shows it.

    opmatrix probe --backend tests.example_adapter:HostAsDevice --ops add --out out/mine
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from opmatrix.backend import Adapter, FallbackSeen
from opmatrix.schema import FallbackState


class HostAsDevice(Adapter):
    """Probes the host CPU under its own name: the smallest complete adapter."""

    name = "host-as-device"
    device_type = "cpu"
    dispatch_key = "CPU"

    @contextlib.contextmanager
    def observe_fallback(self) -> Iterator[FallbackSeen]:
        yield FallbackSeen(FallbackState.not_observed, [], "the host cannot fall back to itself")

    def versions(self) -> dict[str, str | None]:
        return {"driver": "example-driver 1.0", "firmware": None, "isa": None, "stepping": None,
                "backend_version": "1.0"}
