"""Journal records: what the runner appends, one JSON line per finished probe task.

A *task* is the unit the runner schedules and isolates: one source entry (an OpInfo) at one
dtype. Running it yields *cells*: one per (overload, rank, layout, mode, conditions) with a
:class:`~opmatrix.schema.matrix.CellResult`. A task that faulted still yields a record, with the
fault on the cells (or on the task when no cell could be named)::

    {"kind": "task", "task": "softmax|float32", "source": "softmax", "dtype": "float32", ...}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator

from .base import Message, Model
from .enums import DType, Layout, Mode, Outcome
from .matrix import CellResult, ErrorInfo, Evidence, Runtime, RuntimeCheck, operator_name

__all__ = ["CellRecord", "DeviceCells", "TaskRecord", "RuntimeRecord", "JournalHeader", "RunIdentity"]


class CellRecord(Model):
    """One probed cell: its key and its result."""

    op: str
    dtype: DType
    rank: int = Field(ge=0)
    layout: Layout
    mode: Mode = Mode.eager
    result: CellResult

    @field_validator("op")
    @classmethod
    def _op_name(cls, name: str) -> str:
        return operator_name(name)


class DeviceCells(Model):
    """The cells another device produced for the same task (``probe --devices`` cross-check)."""

    device: str = Field(min_length=1, description="as torch names it, e.g. refaccel:0")
    uuid: str | None = None
    cells: list[CellRecord] = Field(default_factory=list)


class TaskRecord(Model):
    """The journal line for one finished task (``source`` entry x ``dtype``)."""

    kind: Literal["task"] = "task"
    task: str = Field(description="stable task id: source|dtype")
    source: str
    dtype: DType
    outcome: Outcome = Field(description="ok when the task ran to the end; else the fault")
    cells: list[CellRecord] = Field(default_factory=list)
    error: ErrorInfo | None = None
    evidence_key: str = ""
    attempts: int = Field(default=1, ge=1)
    seconds: float = Field(default=0.0, ge=0)
    worker: int | None = None
    device: str | None = Field(default=None, description="the device that ran the task, as torch names it (--devices)")
    device_uuid: str | None = Field(default=None, description="that device's stable identity")
    host: str | None = Field(default=None, description="the host name of the machine whose worker ran the task")
    node: str | None = Field(default=None, description="the Ray node id of that machine (--executor ray)")
    cross_checks: list[DeviceCells] = Field(
        default_factory=list, description="a wrong cell probed again on another device of the node"
    )
    skipped: Message | None = Field(default=None, description="why nothing was probed (e.g. no samples)")
    ranks_skipped: Message | None = Field(
        default=None, description="probe --ranks: why the task's samples were not extended to the declared ranks"
    )
    not_run: dict[str, Message] = Field(
        default_factory=dict,
        description="units (sample/layout/mode) that never ran, with the reason; never cells, never counted as probed",
    )


class RuntimeRecord(Model):
    """The journal line for one runtime check (levels 0-1)."""

    kind: Literal["runtime"] = "runtime"
    task: str
    check: RuntimeCheck
    evidence_key: str = ""
    runtime: Runtime | None = Field(
        default=None, description="devices, claimed dtypes, capabilities or API coverage this check found"
    )


class RunIdentity(Model):
    """What defines a run: ``--resume`` continues a journal only under the same identity.

    Options that only change how fast a run goes (workers, threads, timeout) are not part of it.
    """

    backend: str
    generation: str | None = None
    adapter: str = Field(description="the adapter class, module.qualname")
    ops: list[str] = Field(default_factory=list, description="selected source entries (OpInfo full names)")
    dtypes: list[str] = Field(default_factory=list)
    layouts: list[str] | None = Field(default=None, description="None: every layout")
    runtime: Literal["on", "off", "only"] = "on"
    options: dict[str, str | int | float | bool | None] = Field(default_factory=dict)
    shard: str | None = None
    op_source_hash: str = ""

    def differences(self, other: RunIdentity) -> list[str]:
        """What differs from ``other`` (the journal's), one readable item per field."""
        out = []
        for name in type(self).model_fields:
            mine, theirs = getattr(self, name), getattr(other, name)
            if mine == theirs:
                continue
            if isinstance(mine, list) and isinstance(theirs, list):
                added, gone = sorted(set(mine) - set(theirs)), sorted(set(theirs) - set(mine))
                parts = [f"{len(theirs)} in the journal, {len(mine)} now"]
                if added:
                    parts.append(f"new: {', '.join(added[:3])}{' ...' if len(added) > 3 else ''}")
                if gone:
                    parts.append(f"not selected now: {', '.join(gone[:3])}{' ...' if len(gone) > 3 else ''}")
                out.append(f"{name} ({'; '.join(parts)})")
            else:
                out.append(f"{name} ({theirs!r} in the journal, {mine!r} now)")
        return out


class JournalHeader(Model):
    """First line of a journal: what run it belongs to."""

    kind: Literal["header"] = "header"
    backend: str
    generation: str | None = None
    planned: int = Field(ge=0)
    command: str = ""
    evidence_key: str = ""
    started: str | None = None
    device_type: str | None = Field(default=None, description="torch device type (BackendId.device_type)")
    dispatch_key: str | None = Field(default=None, description="dispatcher key (BackendId.dispatch_key)")
    evidence: Evidence | None = Field(default=None, description="the run's evidence block, for opmatrix merge")
    runtime: Runtime | None = Field(default=None, description="devices and claimed capabilities, for opmatrix merge")
    run: RunIdentity | None = Field(default=None, description="what defines the run; --resume must match it")
