"""Journal records: what the runner appends, one JSON line per finished probe task.

A *task* is the unit the runner schedules and isolates: one source entry (an OpInfo) at one
dtype. Running it yields *cells*: one per (overload, rank, layout, mode, conditions) with a
:class:`~opmatrix.schema.matrix.CellResult`. A task that faulted still yields a record, with the
fault on the cells (or on the task when no cell could be named)::

    {"kind": "task", "task": "softmax|float32", "source": "softmax", "dtype": "float32", ...}
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from .base import Model
from .enums import DType, Layout, Mode, Outcome
from .matrix import CellResult, ErrorInfo, Evidence, Runtime, RuntimeCheck

__all__ = ["CellRecord", "TaskRecord", "RuntimeRecord", "JournalHeader"]


class CellRecord(Model):
    """One probed cell: its key and its result."""

    op: str
    dtype: DType
    rank: int = Field(ge=0)
    layout: Layout
    mode: Mode = Mode.eager
    result: CellResult


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
    skipped: str | None = Field(default=None, description="why nothing was probed (e.g. no samples)")
    not_run: dict[str, str] = Field(
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
