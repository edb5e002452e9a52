"""What the runner schedules (:class:`Task`) and the contract a task handler follows.

A *task* is the unit the runner isolates and journals: one OpInfo at one dtype (kind ``op``),
one runtime check (kind ``runtime``), ... The runner knows no kind: each suite gives it a
:class:`Handler` object per kind (``kind -> "module:attribute"``, imported in the workers, and in
the runner only to record a fault). ``handle`` runs a task inside a spawned worker and returns its
journal record. Before every risky *unit* (one sample x layout on the device) it calls
``progress(unit)``, so that a crash, a hang or a poisoned device is blamed on that unit::

    class OpHandler:
        def handle(self, ctx, task, progress, skip, skip_rest):
            cells = []
            for unit in units_of(task):
                fault = skip.get(unit) or skip_rest
                if fault is not None:                # faulted before: record, never re-run
                    cells.append(fault_cell(unit, fault))
                    continue
                progress(unit)                       # the runner's deadline restarts here
                cells.append(run_unit(ctx.adapter, unit))
            return TaskRecord(task=task.id, ..., cells=cells)

        def fault_record(self, task, skip):          # the task faulted with every unit skipped
            return TaskRecord(task=task.id, ..., outcome=skip.outcome)

A handler may also call ``ctx.checkpoint(unit, payload)`` after each unit it finishes and, on the
next attempt after a fault, restore the units in ``ctx.carried`` instead of running them again
(:mod:`.carry`); one that does not simply re-runs them.

``skip`` maps units that already crashed / hung / poisoned the worker in an earlier attempt to
their :class:`Skip`; ``skip_rest`` (after a task faulted too often) is the fault to record on
every unit not yet run. A handler that finds the device unusable raises :class:`WorkerPoisoned`
(``ctx.check_health(unit)`` does that after a fault); the worker is then replaced.
"""

from __future__ import annotations

import functools
import importlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol, cast

from pydantic import BaseModel, JsonValue

from opmatrix.schema import FaultOutcome

from .evidence import EngineOptions

if TYPE_CHECKING:
    from opmatrix.backend.base import Adapter

__all__ = [
    "Handler",
    "Skip",
    "Task",
    "WorkerContext",
    "WorkerPoisoned",
    "check_kinds",
    "resolve_handler",
    "warm_modules",
]


@dataclass(frozen=True)
class Task:
    """One schedulable probe task; ``payload`` is JSON (what its kind's handler reads) and part of its
    evidence key."""

    id: str
    kind: str
    payload: dict[str, JsonValue] = field(default_factory=dict)
    order: int = 0


@dataclass(frozen=True)
class Skip:
    """A fault the runner observed on a unit: record it, do not run the unit again."""

    outcome: FaultOutcome
    message: str
    signal: str | None = None
    #: set on a ``skip_rest`` the runner gives after too many faults: the units it covers never
    #: ran, and this says why (a handler that lists units lists them as not run with it)
    not_run: str | None = None
    #: how far the fault reached (a :class:`~opmatrix.schema.FaultScope` value) and the checks it
    #: rests on, when the worker that saw it could still look (:mod:`opmatrix.probes.runner.faultscope`)
    scope: str | None = None
    scope_evidence: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        try:
            object.__setattr__(self, "outcome", FaultOutcome(self.outcome))  # parsed once, here
        except ValueError:
            known = ", ".join(f.value for f in FaultOutcome)
            raise ValueError(f"Skip outcome {self.outcome!r}: expected one of {known}") from None

    @property
    def lines(self) -> list[str]:
        """The message's non-empty lines: the first says how it ended, a worker's last output follows."""
        return [line for line in self.message.splitlines() if line.strip()]

    @property
    def headline(self) -> str:
        """The message's first non-empty line, cut to 160 characters."""
        lines = self.lines
        return lines[0][:160] if lines else ""


class WorkerPoisoned(Exception):
    """Raised by a handler when the device is unusable after ``unit``: the worker is replaced."""

    def __init__(self, unit: str | None, message: str):
        super().__init__(f"device unusable after {unit}: {message}")
        self.unit = unit
        self.message = message


@dataclass
class WorkerContext:
    """What a handler gets from its worker: the set-up adapter, the worker slot, options, a cache."""

    adapter: Adapter
    index: int
    options: EngineOptions = field(default_factory=EngineOptions)
    #: what a handler keeps for the worker's next tasks, under a key of its own (it knows the type)
    cache: dict[str, object] = field(default_factory=dict)
    device: int | None = None
    #: every device of the run (``probe --devices``, resolved in this worker); () without --devices
    devices: tuple[int, ...] = ()
    backend: str | None = None  # the --backend spec the adapter was built from (for child processes)
    #: the current task's units that earlier attempts finished (unit -> the handler's checkpoint)
    carried: dict[str, bytes] = field(default_factory=dict)
    #: units that faulted a worker which had run other units first, run again now (unit -> what happened)
    retried: dict[str, str] = field(default_factory=dict)
    #: ``checkpoint(unit, payload)``: keep a finished unit should the worker die later in the task
    checkpoint: Callable[[str, bytes], None] | None = None

    def check_health(self, unit: str | None) -> None:
        """Raise :class:`WorkerPoisoned` blaming ``unit`` when the adapter's health check fails
        (having passed before: positive evidence only)."""
        problem = self.adapter.poisoned_after_fault()
        if problem is not None:
            raise WorkerPoisoned(unit, problem)


class Handler(Protocol):
    """A suite's task kind: how a worker runs one of its tasks, and the record of one that faulted."""

    def handle(
        self,
        ctx: WorkerContext,
        task: Task,
        progress: Callable[[str], None],
        skip: Mapping[str, Skip],
        skip_rest: Skip | None,
    ) -> BaseModel:
        """Run ``task`` in a worker; its journal record (see the module doc)."""
        ...

    def fault_record(self, task: Task, skip: Skip) -> BaseModel:
        """The record the runner writes itself when ``task`` faults even with every unit skipped."""
        ...

    #: a module a worker of this kind imports before its first task (the zygote preloads it), or None
    warm: str | None

    def unit_timeout(self, task: Task, unit: str, timeout: float) -> float:
        """Seconds ``unit`` of ``task`` may run without progress before it is called hung (``timeout``
        is ``--timeout``; a unit that compiles gets more, see ``plan.COMPILE_TIMEOUT_FACTOR``)."""
        ...


def check_kinds(tasks: Iterable[Task], handlers: Mapping[str, str]) -> None:
    """Refuse, naming it, a task kind that has no handler."""
    unknown = sorted({t.kind for t in tasks} - set(handlers))
    if unknown:
        raise ValueError(f"no handler for task kind {unknown[0]!r} (known: {', '.join(sorted(handlers)) or 'none'})")


def warm_modules(handlers: Mapping[str, str], kinds: Iterable[str]) -> tuple[str, ...]:
    """The modules workers of task ``kinds`` import before their first task (their handlers' ``warm``)."""
    found = (getattr(resolve_handler(handlers[k]), "warm", None) for k in kinds if k in handlers)
    return tuple(dict.fromkeys(w for w in found if w))


@functools.cache
def resolve_handler(target: str) -> Handler:
    """Import ``module:attribute``, a :class:`Handler` (once per process); the error names the target
    when it cannot."""
    module_name, sep, attr = target.partition(":")
    if not sep or not module_name or not attr:
        raise ValueError(f"handler {target!r}: expected module:attribute")
    module = importlib.import_module(module_name)
    handler = getattr(module, attr, None)
    if handler is None:
        raise ValueError(f"handler {target!r}: module {module_name!r} has no attribute {attr!r}")
    missing = [m for m in ("handle", "fault_record", "unit_timeout") if not callable(getattr(handler, m, None))]
    if missing:
        raise ValueError(f"handler {target!r}: {type(handler).__name__} has no {' or '.join(missing)} method")
    return cast(Handler, handler)
