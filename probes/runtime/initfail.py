"""Initialisation failures, told apart by cause (docs/levels.md#runtime-bring-up-order: "distinct causes").

Missing firmware, an unsupported driver, a partition owned by another tenant and a device in
reset need different people; "no accelerator available" sends them all to the wrong team. The
cause is read from the error text with the table below (data, not branches); how to provoke each
failure is the backend's to declare (:mod:`opmatrix.backend.initmodes`)::

    >>> classify_init_failure("refaccel driver 0.9.0 is older than the minimum 2.0.0").cause
    'unsupported_driver'
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["CAUSES", "InitCause", "classify_init_failure"]


@dataclass(frozen=True)
class InitCause:
    """One distinct reason initialisation fails, how to recognise it, and what to do."""

    cause: str
    title: str
    pattern: str
    advice: str


#: ordered: the first matching cause names the failure (more specific patterns first)
CAUSES: tuple[InitCause, ...] = (
    InitCause(
        "device_reset", "device in reset",
        r"\breset(ting)?\b|recover(ing|y) in progress",
        "wait for the device reset to finish (or reset it with the vendor tool), then retry",
    ),
    InitCause(
        "device_busy", "device busy / owned by another tenant",
        r"\bbusy\b|in use|another (process|tenant)|owned by|exclusive|already (claimed|open)",
        "another process or tenant holds the device: find it (vendor tool / lsof on the device node) "
        "or select a free device",
    ),
    InitCause(
        "unsupported_driver", "unsupported driver version",
        r"(driver|firmware|runtime)[^.;]*\bversion\b|\bversion\b[^.;]*(driver|firmware)|incompatible|too old|"
        r"older than|newer than|(minimum|required|requires)[^.;]*\d+\.\d+",
        "install a driver version this backend release supports (see its compatibility table)",
    ),
    InitCause(
        "missing_driver", "driver or firmware missing",
        r"(driver|firmware|kernel module)[^.;]*(not (found|loaded|installed)|missing)|no such file|"
        r"cannot open|lib\w+\.so",
        "install the driver / firmware package and check that the kernel module is loaded",
    ),
    InitCause(
        "not_built", "this torch build lacks the backend",
        r"not (built|compiled) with|build has no \w+ support|cpu wheel",
        "install a torch build with this backend compiled in",
    ),
    InitCause(
        "no_device", "no device visible",
        r"no ([\w-]+ )?devices?\b|device count is 0|visible_devices",
        "no device is visible to this process: check the hardware, the container's device mapping and "
        "*_VISIBLE_DEVICES",
    ),
)

_UNNAMED = InitCause(
    "unnamed", "cause not named", r"$^",
    "the error does not say why initialisation failed: ask the backend vendor to name the cause "
    "(driver version, device busy, reset, missing firmware)",
)


def classify_init_failure(message: str) -> InitCause:
    """The cause an initialisation error names (``unnamed`` when it names none)."""
    text = message.lower()
    for cause in CAUSES:
        if re.search(cause.pattern, text):
            return cause
    return _UNNAMED
