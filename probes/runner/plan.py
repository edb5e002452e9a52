"""What a run plans and reports: fault budgets, restart caps, the run summary, a job's state.

    fault_budget(40)          # 7: three faults, plus one per ten units the task has run
    default_max_restarts(2, 100)
"""

from __future__ import annotations

import dataclasses
import signal
import threading
import time
from collections.abc import Iterable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import BaseModel

from opmatrix.schema import ExitCode, FaultOutcome, TaskRecord

from .task import Skip, Task, resolve_handler

__all__ = ["COMPILE_TIMEOUT_FACTOR", "MAX_NODE_LOSSES", "MAX_STARTUP_FAILURES", "MAX_TASK_FAULTS", "Aborted", "Job", "RunSummary",
           "confirmed", "default_max_restarts", "fault_budget", "ordered", "retry_in_fresh_worker",
           "sigterm_as_interrupt", "unit_timeout", "worker_target"]

#: faults any task may cause before its remaining units are listed as not run
MAX_TASK_FAULTS = 3
#: one more fault allowed per this many units the task has run (a task of 100 units with 8
#: bad inputs still records the other 92)
UNITS_PER_EXTRA_FAULT = 10


def fault_budget(units: int) -> int:
    """Faults a task may cause before its remaining units are not run: grows with its units."""
    return MAX_TASK_FAULTS + units // UNITS_PER_EXTRA_FAULT


#: a unit that compiles (an op's compile check, a workload's compiled step) gets this many times
#: ``--timeout`` before it is called hung: inductor compiling a model on a loaded 2-core machine
#: took over 60 s here, and a slow compile is not a hang
COMPILE_TIMEOUT_FACTOR = 5




def unit_timeout(handlers: Mapping[str, str], job: Job | None, unit: str | None, timeout: float) -> float:
    """Seconds ``unit`` may run without progress before it is called hung: its task kind's handler
    says (a unit that compiles gets more); ``timeout`` without a unit."""
    if job is None or unit is None:
        return timeout
    return resolve_handler(handlers[job.task.kind]).unit_timeout(job.task, unit, timeout)


#: consecutive workers that die before becoming ready before the run gives up
MAX_STARTUP_FAILURES = 3
#: workers lost with their node (a Ray node leaving the cluster) before such losses count as crashes
MAX_NODE_LOSSES = 8


def worker_target(workers: int, work: int, *, one_first: bool, available: int | None) -> int:
    """How many workers to keep: no more than ``work`` (tasks pending or running) can use; one
    while ``one_first`` (a re-run may need no probing at all: the first worker's key says; with
    ``--devices all`` the first worker counts the devices); none past the devices ``available``
    now (a Ray node that left the cluster took its devices with it)."""
    target = min(workers, work, 1 if one_first else workers)
    return target if available is None else min(target, available)


def default_max_restarts(workers: int, tasks: int) -> int:
    """Worker replacements allowed: ``max(10, 2 * workers) + tasks // 4``.

    A backend where a quarter of the tasks crash once still completes; one where every task
    crashes (three restarts per task) is stopped after about a twelfth of its tasks.
    """
    return max(10, 2 * workers) + tasks // 4


@dataclass
class RunSummary:
    """What a run did; ``faults``/``paths`` count cells over every record in the journal.

    ``recorded = resumed + reused + probed``; ``startup_seconds`` is how long the first worker
    took to import torch and set the backend up (None when none became ready).
    """

    planned: int
    recorded: int = 0
    probed: int = 0
    reused: int = 0
    resumed: int = 0
    restarts: int = 0
    retried: int = 0  # units retried in a fresh worker after a crash (each one a restart)
    faults: dict[str, int] = field(default_factory=dict)
    paths: dict[str, int] = field(default_factory=dict)
    #: one command per faulted task that probes it again (set with the matrix's fault count)
    reproduce: list[str] = field(default_factory=list)
    aborted: bool = False
    interrupted: bool = False
    #: the machine stopped the run (a full disk, the OOM killer): the cause; the journal is kept for --resume
    infrastructure: str = ""
    message: str = ""
    seconds: float = 0.0
    startup_seconds: float | None = None
    journal: Path | None = None

    @property
    def faulted(self) -> int:
        """Cells (or cell-less tasks) that ended in a fault."""
        return sum(self.faults.values())

    @property
    def exit_code(self) -> ExitCode:
        """INTERRUPTED; USAGE when the machine stopped the run (a full disk); FAILED when aborted
        (restart cap / workers cannot start); else OK."""
        if self.interrupted:
            return ExitCode.INTERRUPTED
        return ExitCode.USAGE if self.infrastructure else ExitCode.FAILED if self.aborted else ExitCode.OK


@dataclass
class Job:
    """A planned task with what earlier attempts learned about it."""

    task: Task
    key: str = ""
    skip: dict[str, Skip] = field(default_factory=dict)
    skip_rest: Skip | None = None
    faults: int = 0
    attempts: int = 0
    started: float = 0.0
    units: int = 0  # units the task has run (carried ones included): the fault budget grows with it
    seq0: int = 0  # the worker board's sequence number when this attempt started
    done: dict[str, bytes] = field(default_factory=dict)  # units earlier attempts finished (:mod:`.carry`)
    retried: dict[str, str] = field(default_factory=dict)  # units run again in a fresh worker after a fault
    fresh: bool = False  # the next attempt must start in a worker that has run nothing yet
    worker_units: int = 0  # units the worker had announced when it faulted (this one included)
    device: str | None = None  # the device of the worker that ran (or runs) its current attempt
    device_uuid: str | None = None
    node: str = ""  # where that device is (a Ray node id; "" on this host)
    host: str = ""  # the host name of that worker's machine
    first: TaskRecord | None = None  # --devices: the first device's record, while another device cross-checks
    avoid: str | None = None  # the device a cross-check must not run on

    def stamp(self, record: BaseModel, worker: int | None) -> BaseModel:
        """A task record with what the runner knows of its attempts: how many, the last worker and
        the machine it ran on (host name; Ray node id), beside the device."""
        if not isinstance(record, TaskRecord):
            return record
        seconds = record.seconds
        if not record.seconds or self.attempts > 1:
            # a task that faulted ran over several workers: its time is all of them (the
            # handler knows only its last attempt), which is what scheduling needs next time
            seconds = round(time.monotonic() - self.started, 3)
        return record.model_copy(update={"attempts": max(self.attempts, 1), "worker": worker, "seconds": seconds,
                                         "host": self.host or None, "node": self.node or None})


#: faults worth a second try in a fresh worker: the process died, which accumulated state (a JIT
#: out of code memory, a leak, a corrupted allocator) can cause as well as the input. A hang is
#: not retried (it would cost another full timeout), nor a poisoned device (positive evidence).
RETRY_OUTCOMES = frozenset({FaultOutcome.crashed, FaultOutcome.oom})
#: a worker that had announced more units than one unit's eager, backward and compile steps had
#: run other units first: its fault may be theirs
FRESH_UNITS = 3


def retry_in_fresh_worker(job: Job, unit: str | None, skip: Skip) -> bool:
    """Whether ``unit``'s fault is retried once in a fresh worker (and mark it so).

    The second fault of the same unit is the confirmation (recorded as usual, "the second time");
    a unit that passes there is recorded with a note saying what happened the first time. The
    fresh worker runs before it only the task's units that were not yet checkpointed (the op
    engine loses at most 8 units or 0.25 s of work); a handler that does not checkpoint re-runs
    all its earlier units there. A fault in a worker that had run nothing else is the input's:
    never retried."""
    if unit is None or skip.outcome not in RETRY_OUTCOMES or unit in job.retried or unit in job.skip:
        return False
    if job.worker_units <= FRESH_UNITS:
        return False
    first = skip.headline.split("; ")[0]
    how = f"{skip.outcome}{f' ({skip.signal})' if skip.signal else ''}"
    job.retried[unit] = f"{how} a worker that had run {job.worker_units - 1} units before it ({first})"
    job.fresh = True
    return True


def confirmed(job: Job, unit: str | None, skip: Skip) -> Skip:
    """The fault of a unit that already faulted once before its retry: said to be the second."""
    if unit is None or unit not in job.retried or unit in job.skip:
        return skip
    head, _, rest = skip.message.partition("\n")  # the note after the first line: a clipped message keeps it
    note = f"(the second time: it had first {job.retried[unit]}, then again in a fresh worker)"
    return dataclasses.replace(skip, message=f"{head}\n{note}\n{rest}".rstrip("\n"))


class Aborted(Exception):
    """Stop the run: the restart cap is reached or workers cannot start."""


@contextmanager
def sigterm_as_interrupt() -> Iterator[None]:
    """Treat SIGTERM like Ctrl-C so a terminated run also leaves a consistent journal."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return

    def raise_interrupt(signum: int, frame: object) -> None:
        raise KeyboardInterrupt

    old = signal.signal(signal.SIGTERM, raise_interrupt)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, old)


def ordered(tasks: Iterable[Task]) -> list[Task]:
    tasks = sorted(tasks, key=lambda t: (t.order, t.id))
    seen: set[str] = set()
    for t in tasks:
        if t.id in seen:
            raise ValueError(f"task id {t.id!r} is planned twice; task ids must be unique")
        seen.add(t.id)
    return tasks
