"""The messages between the runner (parent) and a worker, one frozen dataclass per kind.

Both sides import this module; a message crosses the pipe pickled, and the receiver matches on
its class, never on a position in a tuple::

    conn.send(RunTask(task, skip, skip_rest))          # parent -> worker
    conn.send(Done(task.id, record.model_dump_json()))  # worker -> parent

Worker -> parent: :class:`Ready` or :class:`SetupFailed` once, then per task one of
:class:`Done`, :class:`Fault` (the worker exits after it) or :class:`Poisoned` (the device is
unusable: the worker exits, the unit is blamed). Parent -> worker: :class:`RunTask`, :class:`Stop`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opmatrix.schema import FaultOutcome

from .evidence import WorkerIdentity
from .task import Skip, Task

__all__ = ["Done", "Fault", "FromWorker", "Poisoned", "Ready", "RunTask", "SetupFailed", "Stop", "ToWorker"]


@dataclass(frozen=True)
class RunTask:
    """Run ``task``; ``skip`` names units an earlier attempt blamed, ``skip_rest`` the fault that
    rules out every later unit, ``done`` the units earlier attempts finished (their checkpoints,
    :mod:`.carry`), ``retried`` the units that faulted a worker which had run others before and
    run again now, first in a fresh worker (unit -> what happened the first time)."""

    task: Task
    skip: dict[str, Skip] = field(default_factory=dict)
    skip_rest: Skip | None = None
    done: dict[str, bytes] = field(default_factory=dict)
    retried: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class Stop:
    """Exit now (no teardown): the parent holds every record."""


@dataclass(frozen=True)
class Ready:
    """The worker set its backend up; ``identity`` is the torch build and backend it saw."""

    slot: int
    identity: WorkerIdentity


@dataclass(frozen=True)
class SetupFailed:
    """The backend could not be set up in this worker (the traceback's tail)."""

    slot: int
    trace: str


@dataclass(frozen=True)
class Done:
    """A task finished; ``record`` is its journal record as JSON."""

    task_id: str
    record: str


@dataclass(frozen=True)
class Fault:
    """A handler raised (``outcome`` error or oom) while ``unit`` ran; the worker exits."""

    task_id: str
    unit: str | None
    outcome: FaultOutcome
    message: str


@dataclass(frozen=True)
class Poisoned:
    """The device is unusable after ``unit`` (positive evidence in ``message``); the worker exits."""

    task_id: str
    unit: str | None
    message: str
    #: the fault's scope and the checks it rests on (:mod:`opmatrix.probes.runner.faultscope`)
    scope: str | None = None
    scope_evidence: tuple[str, ...] = ()

    def skip(self) -> Skip:
        """The fault as the runner hands it to the task's next attempt."""
        return Skip(FaultOutcome.poisoned, self.message, scope=self.scope, scope_evidence=self.scope_evidence)


ToWorker = RunTask | Stop
FromWorker = Ready | SetupFailed | Done | Fault | Poisoned
