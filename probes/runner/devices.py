"""The devices of a run: ``probe --devices``, or an executor that places each worker on one.

Each worker resolves its own device (the parent never touches the device runtime: the fork rules
of docs/levels.md) and says which it is in its Ready message; every task record then names the
device that ran it, as torch names it, with its stable identity. A task with a ``wrong`` cell on
one device of several is run again on another device before it is journaled, and the record
keeps both (``cross_checks``): the matrix marks a cell that one device gets right and another
wrong as *device-dependent* (a bad chip is a finding, not noise)::

    devices = RunDevices([0, 1], capacity=None, grow=False)
    devices.check(job, record)    # None: requeued on another device; else the record to journal
"""

from __future__ import annotations

from pydantic import BaseModel

from opmatrix.schema import DeviceCells, Outcome, TaskRecord

from .evidence import WorkerIdentity
from .executor import Worker
from .plan import Job

__all__ = ["RunDevices"]


class RunDevices:
    """What a run knows about its devices, and the cross-check rule."""

    def __init__(self, devices: list[int] | str | None, *, capacity: int | None, grow: bool):
        #: "all" or "0,1,3" for the workers to resolve; None without --devices
        self.plan = devices if isinstance(devices, str) else ",".join(map(str, devices)) if devices else None
        self.count: int | None = len(devices) if isinstance(devices, list) and devices else capacity
        self.grow = grow  # --devices all without --workers: as many workers as the first worker finds
        #: records name their device: --devices, or an executor that places each worker on one device
        self.track = self.plan is not None or capacity is not None

    @property
    def waiting(self) -> bool:
        """--devices all before any worker said how many devices there are."""
        return self.plan is not None and self.count is None

    def ready(self, handle: Worker, identity: WorkerIdentity) -> int | None:
        """A worker is ready: note its device; the number of workers the run wants, when it now knows."""
        handle.device, handle.device_uuid = identity.device, identity.device_uuid
        handle.host = identity.host or ""
        count = identity.device_count
        if self.plan is None or count is None or self.count is not None:
            return None
        self.count = count
        return count if self.grow else None

    def check(self, job: Job, record: BaseModel, workers: int) -> BaseModel | None:
        """The record to journal, with its device; None when the task must first run on another device."""
        if not self.track or not isinstance(record, TaskRecord) or job.device is None:
            return record
        if job.first is not None:  # the cross-check's record: the first device's, with these cells
            other = DeviceCells(device=job.device, uuid=job.device_uuid, cells=record.cells)
            return job.first.model_copy(update={"cross_checks": [*job.first.cross_checks, other]})
        placed = record.model_copy(update={"device": job.device, "device_uuid": job.device_uuid})
        wrong = any(c.result.outcome is Outcome.wrong for c in placed.cells)
        if not wrong or (self.count or 0) < 2 or workers < 2:
            return placed
        job.first, job.avoid = placed.model_copy(update={"attempts": max(job.attempts, 1)}), f"{job.device}@{job.node}"
        # the other device starts the task afresh: nothing of the first device's attempts carries over
        job.skip, job.skip_rest, job.done, job.retried, job.faults, job.units = {}, None, {}, {}, 0, 0
        return None

    @staticmethod
    def fits(job: Job, handle: Worker) -> bool:
        """Whether ``handle`` may run ``job`` (a cross-check needs another device)."""
        return job.avoid is None or (handle.device is not None and f"{handle.device}@{handle.node}" != job.avoid)
