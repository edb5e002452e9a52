"""Which device produced a cell, and cells that devices of one generation disagree on.

A node's devices of one generation should answer alike; when one gets a cell right and another
wrong (``probe --devices`` probes a wrong cell again on another device), the cell is
*device-dependent*: a bad chip is a finding, not noise::

    device_dependent:
    - {device: refaccel:0, uuid: RA-..., path: native, outcome: ok}
    - {device: refaccel:1, uuid: RA-..., path: native, outcome: wrong}
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from .base import Model, printable
from .enums import ExecPath, Outcome

__all__ = ["DEVICE_DEPENDENT", "DeviceName", "DeviceOutcome"]

#: a device as torch names it, e.g. ``refaccel:1`` or ``cuda:0``
DeviceName = Annotated[str, Field(min_length=1), AfterValidator(lambda v: printable(v, "device"))]

DEVICE_DEPENDENT = "devices of one generation disagreed on the cell (one right, one wrong): a bad chip is a finding"


class DeviceOutcome(Model):
    """How one device of a node ran a cell that devices of one generation disagree on."""

    device: DeviceName = Field(description="the device as torch names it, e.g. refaccel:1")
    uuid: str | None = Field(default=None, description="the device's stable identity (UUID or bus id)")
    path: ExecPath
    outcome: Outcome
