"""Faults inside a task: what an exception means, and which units an earlier fault rules out.

The runner re-sends a task that crashed, hung or poisoned its worker, naming the unit that was
running (``skip``), and after too many faults ``skip_rest``. :class:`SkipPlan` turns that into
one decision per unit, erasing nothing:

- the faulted unit itself becomes a cell with the fault (its path is the kernel the dispatcher
  chose, never ``rejected``);
- the later layouts of a sample that faulted in eager are *not run* (the input is what kills the
  device); after a backward or compile fault, that mode is not run for the rest of the task;
- with ``skip_rest``, the units after the last faulted one are *not run*; the units before it
  finished in an earlier attempt and are restored from their checkpoints (the engine's
  ``_TaskRun``; :mod:`opmatrix.probes.runner.carry`), never run again.

A unit that is not run is not a cell: it is listed in ``TaskRecord.not_run`` with the reason.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Literal, TypeAlias, Union

from opmatrix.backend.base import Rejection, dtype_named
from opmatrix.probes.runner import Skip, WorkerPoisoned
from opmatrix.probes.runner.faultscope import ScopeFinding, after_error, after_restart, cause_chain
from opmatrix.schema import ErrorInfo, ExecPath, FaultScope, Mode, OpName, Outcome, UnitId

from .cells import SampleResult
from .classify import fault_path
from .state import EngineState
from .units import Unit

__all__ = ["Decision", "SkipPlan", "failed_call", "fault_from_exception", "fault_result", "scoped"]

#: what :meth:`SkipPlan.decide` says of a unit: run it, list it as not run, or record the fault it had
Decision: TypeAlias = Union[Literal["run", "not_run"], Skip]  # noqa: UP007 - a Literal in the union


def fault_from_exception(st: EngineState, unit_id: UnitId, exc: BaseException, dtypes: tuple[str, ...] = ()
                         ) -> Outcome | None:
    """None for a clean rejection: a message that names what is unsupported (the adapter's
    ``classify_exception``, or a message naming one of the unit's ``dtypes`` in any spelling:
    a vendor refuses a dtype in its own words), after which the device's health check still
    passes; otherwise ``oom`` or ``error``, or raise :class:`WorkerPoisoned` when the device
    check that passed before fails now (positive evidence only). A refusal that leaves the device
    unusable is no clean rejection."""
    verdict = st.adapter.classify_exception(exc)
    named = [d for d in dtypes if dtype_named(exc, d)] if verdict.outcome == "error" else []
    if named:
        verdict = Rejection("rejected", f"the message names the dtype {named[0]}")
    problem = None if st.adapter.is_host else st.adapter.poisoned_after_fault()
    if problem is not None:
        raise WorkerPoisoned(str(unit_id), f"device unusable after {type(exc).__name__}: {problem}")
    if verdict.outcome == "rejected":
        return None
    return Outcome.oom if verdict.outcome == "oom" else Outcome.error


def failed_call(st: EngineState, op: OpName, unit_id: UnitId, exc: BaseException, fell_back: bool,
                host_computes: Callable[[], bool], dtypes: tuple[str, ...] = (), read_to_host: bool = False
                ) -> tuple[ExecPath, Outcome, str | None]:
    """Path, outcome and note of a device call that raised, the same in eager and compiled mode.

    A clean refusal with nothing run on the host is ``rejected``. When the host ran (part of) the
    call first, which side raised decides: if the CPU computes this input (``host_computes``,
    asked only then), the host's side succeeded and the device's failed (torch_xla's
    ``to_sparse`` copies a sparse host result back to a device without sparse tensors): fallback
    with outcome error. If the CPU refuses it too, the host's own refusal came through the
    fallback: rejected. A clean refusal after copies to the host only (``read_to_host``: nothing
    came back, no counter saw a fallback) is a kernel that read an argument to check it: rejected.
    A fault keeps the fallback it showed, else the dispatcher's kernel."""
    fault = fault_from_exception(st, unit_id, exc, dtypes)
    if fault is None and fell_back and not read_to_host and host_computes():
        return ExecPath.fallback, Outcome.error, "ran on the host, then the device side failed (the CPU computes this sample)"
    if fault is None:
        return ExecPath.rejected, Outcome.ok, None
    if fell_back:
        return ExecPath.fallback, fault, None
    return fault_path(st, op), fault, None


def fault_result(st: EngineState, unit: Unit, mode: Mode, fault: Skip) -> SampleResult:
    """The cell of a unit the runner saw fault (crashed, hung, poisoned, oom), with the fault's
    scope: as the faulting worker found it, else as this fresh worker finds the device."""
    found = (ScopeFinding(FaultScope(fault.scope), fault.scope_evidence) if fault.scope
             else after_restart(st.adapter, None))
    return SampleResult(op=str(unit.overload), rank=unit.rank, layout=unit.layout, mode=mode, dtype=unit.dtype,
                        path=fault_path(st, unit.overload), outcome=Outcome(fault.outcome), features=unit.features,
                        error=ErrorInfo(type=fault.outcome, message=fault.message[:500], actionable=False,
                                        signal=fault.signal, fault_scope=found.scope,
                                        scope_evidence=list(found.evidence)))


def scoped(st: EngineState, error: ErrorInfo | None, exc: BaseException) -> ErrorInfo | None:
    """A faulted call's error with its scope (observed now, in this process) and cause chain."""
    if error is None:
        return None
    found = after_error(st.adapter)
    # validated, not model_copy'd: the chain is a backend's text (a lone surrogate, escapes) that
    # the record's Message type makes safe to write
    return ErrorInfo.model_validate({**error.model_dump(), "fault_scope": found.scope,
                                     "scope_evidence": list(found.evidence), "cause": cause_chain(exc)})


class SkipPlan:
    """Which units of a task run, fault, or are not run, from the runner's ``skip``/``skip_rest``.

    The runner names units as text (what :func:`.units.unit_id` printed to ``progress``); they are
    parsed here, once, into :class:`UnitId` (:meth:`from_runner`)."""

    def __init__(self, skip: Mapping[UnitId, Skip] | None, skip_rest: Skip | None):
        self.skip = dict(skip or {})
        self.rest = skip_rest
        self.pending = set(self.skip)  # faulted units not yet passed in this attempt
        self.faulted: dict[tuple[str, str], UnitId] = {}  # (sample index or "*", step) -> the unit that faulted
        #: units (and OpInfo's unyielded samples) that never ran -> why: ``TaskRecord.not_run``
        self.not_run: dict[str, str] = {}

    @classmethod
    def from_runner(cls, skip: Mapping[str, Skip] | None, skip_rest: Skip | None) -> SkipPlan:
        return cls({UnitId.parse(uid): fault for uid, fault in (skip or {}).items()}, skip_rest)

    def decide(self, uid: UnitId) -> Decision:
        """``"run"``, ``"not_run"`` (recorded here) or the unit's fault (a :class:`Skip`)."""
        self.pending.discard(uid)
        fault = self.skip.get(uid)
        # eager faults depend on the input (roll dies on empty inputs only): that sample; a
        # backward or compile fault is the op's: that step, for the rest of the task
        kind = (uid.sample if uid.step == "eager" else "*", uid.step)
        if fault is not None:
            self.faulted.setdefault(kind, uid)
            return fault
        first = self.faulted.get(kind)
        if first is not None:
            outcome = self.skip[first].outcome
            what = f"sample {uid.sample}" if kind[0] != "*" else f"the {uid.step} of this op"
            self.not_run[str(uid)] = f"not run: {what} {outcome} the worker in unit {first}"
            return "not_run"
        if self.rest is not None and not self.pending:
            self.not_run[str(uid)] = self.rest.not_run or f"not run: {self.rest.message}"
            return "not_run"
        return "run"
