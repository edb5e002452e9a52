"""Which device produced a cell, and cells that devices of one generation disagree on.

A node's devices of one generation should answer alike; when one gets a cell right and another
wrong (``probe --devices`` probes a wrong cell again on another device), the cell is
*device-dependent*: a bad chip is a finding, not noise::

    device_dependent:
    - {device: refaccel:0, uuid: RA-..., path: native, outcome: ok}
    - {device: refaccel:1, uuid: RA-..., path: native, outcome: wrong}

A runtime check that exercises one device (allocation, copies, kernels, streams, memory) runs on
each device of a ``--devices`` run; the check lists how each device did (:class:`DeviceCheck`)
and its result is the worst of them::

    - name: kernel
      result: fail
      evidence: 'refaccel:1 (RA-...) fails: ...; refaccel:0 passes'
      devices:
      - {device: refaccel:0, uuid: RA-..., result: pass, evidence: ...}
      - {device: refaccel:1, uuid: RA-..., result: fail, evidence: ...}
"""

from __future__ import annotations

from typing import Annotated

from pydantic import AfterValidator, Field

from .base import Message, Model, printable
from .enums import CheckResult, ExecPath, Outcome

__all__ = ["DEVICE_DEPENDENT", "PER_DEVICE", "DeviceCheck", "DeviceName", "DeviceOutcome"]

#: a device as torch names it, e.g. ``refaccel:1`` or ``cuda:0``
DeviceName = Annotated[str, Field(min_length=1), AfterValidator(lambda v: printable(v, "device"))]

PER_DEVICE = "the check ran on each device of the run (probe --devices): how each did; the result is the worst"
DEVICE_DEPENDENT = "devices of one generation disagreed on the cell (one right, one wrong): a bad chip is a finding"


class DeviceOutcome(Model):
    """How one device of a node ran a cell that devices of one generation disagree on."""

    device: DeviceName = Field(description="the device as torch names it, e.g. refaccel:1")
    uuid: str | None = Field(default=None, description="the device's stable identity (UUID or bus id)")
    path: ExecPath
    outcome: Outcome


class DeviceCheck(Model):
    """How one device of the run did on a runtime check that runs on each device."""

    device: DeviceName = Field(description="the device as torch names it, e.g. refaccel:1")
    uuid: str | None = Field(default=None, description="the device's stable identity (UUID or bus id)")
    result: CheckResult
    evidence: Message = ""
