"""Judge one contract requirement against a matrix: runtime checks and operator requirements.

An operator requirement names the cells it claims (ops x dtypes x ranks x layouts in one mode)
and how good each must be. Every claimed cell is judged; the first reason it fails is kept::

    - ops: [aten.mm.*]            -> aten.mm.default bfloat16 rank 2 contiguous eager:
      dtypes: [bfloat16]             path rejected is worse than composite (RuntimeError: ...)
      worst_path: composite

A cell fails when it was never probed, when its outcome is wrong or a fault (unless
``min_pass_ratio`` accepts its samples, or a contract tolerance accepts its error), when its path
is worse than ``worst_path``, when host fallback was observed and the policy forbids it, when it
is flaky and the contract blocks flaky cells, or when required autograd / compile cells are missing
or fail. A cell with conditional groups fails when any judged group fails (the worst group
decides) unless the requirement's ``conditions`` narrow the groups.
"""

from __future__ import annotations

import fnmatch
from collections.abc import Iterable
from dataclasses import dataclass

from opmatrix.schema import (
    Accumulation,
    CellResult,
    CheckResult,
    Contract,
    DType,
    ExecPath,
    FallbackPolicy,
    FlakyPolicy,
    Layout,
    Mode,
    OperatorRequirement,
    Outcome,
    Runtime,
    RuntimeCheck,
    ToleranceOverride,
)
from opmatrix.schema.gate import CellRef, CellStatus, RequirementResult, Status

from .cells import CellIndex, CellKey, uses_fallback
from .opsets import resolve_ops
from .waivers import WaiverBook

#: the dtypes whose accumulation mode a contract may require
LOW_PRECISION = frozenset({"bfloat16", "float16"})

__all__ = ["Judge", "claimed_keys", "evaluate_check", "evaluate_operators", "tolerance_for"]


def tolerance_for(tolerances: Iterable[ToleranceOverride], op: str, dtype: DType) -> ToleranceOverride | None:
    """The first contract tolerance override covering (op, dtype); ``op`` is an fnmatch pattern."""
    for tol in tolerances:
        if fnmatch.fnmatchcase(op, tol.op) and (not tol.dtypes or dtype in tol.dtypes):
            return tol
    return None


def _short_error(result: CellResult) -> str:
    if result.error is None:
        return ""
    message = result.error.message.strip().splitlines()[0] if result.error.message.strip() else ""
    if len(message) > 120:
        message = message[:117] + "..."
    text = f"{result.error.type}: {message}" if message else result.error.type
    if result.error.signal:
        text += f" (signal {result.error.signal})"
    return f" ({text})"


@dataclass(frozen=True)
class Judge:
    """How strict one requirement is: the settings that decide whether a cell result passes."""

    worst_path: ExecPath
    fallback: FallbackPolicy
    flaky: FlakyPolicy
    min_pass_ratio: float
    autograd: bool
    tolerances: tuple[ToleranceOverride, ...] = ()
    accumulation: Accumulation | None = None

    @classmethod
    def of(cls, req: OperatorRequirement, contract: Contract) -> Judge:
        """The judge for ``req`` under ``contract``'s defaults."""
        return cls(
            worst_path=req.worst_path,
            fallback=req.fallback or contract.fallback,
            flaky=contract.flaky,
            min_pass_ratio=req.min_pass_ratio,
            autograd=req.autograd,
            tolerances=tuple(contract.tolerances),
            accumulation=req.accumulation,
        )

    def _outcome_accepted(self, key: CellKey, result: CellResult) -> bool:
        if result.outcome is Outcome.ok:
            return True
        samples = result.samples
        if self.min_pass_ratio < 1 and samples.probed and samples.passed / samples.probed >= self.min_pass_ratio:
            return True
        tol = tolerance_for(self.tolerances, key.op, key.dtype)
        num = result.numerics
        if result.outcome is Outcome.wrong and tol is not None and num is not None:
            return (num.max_abs_err is not None and num.max_abs_err <= tol.atol) or (
                num.max_rel_err is not None and num.max_rel_err <= tol.rtol
            )
        return False

    def failure(self, key: CellKey, result: CellResult) -> str | None:
        """Why ``result`` fails this judge, or None when it passes."""
        if not self._outcome_accepted(key, result):
            detail = _short_error(result)
            num = result.numerics
            if result.outcome is Outcome.wrong and num is not None and num.max_abs_err is not None:
                detail = f" (max_abs_err {num.max_abs_err:g} > atol {num.atol:g})"
            samples = result.samples
            return f"outcome {result.outcome} on {samples.probed - samples.passed}/{samples.probed} samples{detail}"
        if result.path > self.worst_path:
            return f"path {result.path} is worse than {self.worst_path}{_short_error(result)}"
        if self.fallback is FallbackPolicy.forbidden and uses_fallback(result):
            ops = f" ({', '.join(result.fallback.ops)})" if result.fallback.ops else ""
            return f"host fallback observed{ops}; the contract forbids fallback"
        if self.flaky is FlakyPolicy.block and result.flaky:
            return "flaky: repeated probes disagreed (contract flaky policy: block)"
        if self.autograd and key.mode is Mode.eager:
            grad = result.autograd
            if grad is None:
                return "autograd required but backward was not probed"
            if grad.outcome is not Outcome.ok:
                return f"backward outcome {grad.outcome}"
            if grad.path > self.worst_path:
                return f"backward path {grad.path} is worse than {self.worst_path}"
        return self._accumulation(key, result)

    def _accumulation(self, key: CellKey, result: CellResult) -> str | None:
        """A required accumulation mode, on the low-precision cells that ran (a refusal computes nothing)."""
        want = self.accumulation
        if want is None or key.mode is not Mode.eager or key.dtype.value not in LOW_PRECISION or (
                result.path is ExecPath.rejected):
            return None
        num = result.numerics
        if num is None or num.accumulation is None:
            return f"accumulation {want} required but not measured for this cell"
        if num.accumulation is not want:
            return f"accumulation {num.accumulation} ({num.accumulation_evidence}); the contract requires {want}"
        return None


def _cell_ref(key: CellKey, result: CellResult, reason: str | None) -> CellRef:
    return CellRef(
        op=key.op,
        dtype=key.dtype,
        rank=key.rank,
        layout=key.layout,
        mode=key.mode,
        conditions=dict(result.conditions),
        path=result.path,
        outcome=result.outcome,
        status=CellStatus.failed if reason else CellStatus.passed,
        reason=reason or f"{result.path}, {result.outcome}",
    )


def judge_cell(index: CellIndex, key: CellKey, judge: Judge, conditions: dict[str, str], dynamic: bool = False) -> CellRef:
    """Judge one required cell: its worst (failing) group decides; unprobed cells fail."""
    groups = index.groups(key, conditions, dynamic)
    if not groups:
        what = f" with conditions {conditions}" if conditions and index.groups(key) else ""
        return CellRef(
            op=key.op, dtype=key.dtype, rank=key.rank, layout=key.layout, mode=key.mode,
            status=CellStatus.failed, reason=f"not probed{what}", missing=True,
        )
    said = "dynamic shapes: " if dynamic else ""
    for group in reversed(groups):  # worst first
        reason = judge.failure(key, group)
        if reason:
            return _cell_ref(key, group, said + reason)
    ref = _cell_ref(key, groups[-1], None)
    return ref.model_copy(update={"reason": said + ref.reason}) if dynamic else ref


def _not_probed(op: str, dtype: DType | None, layout: Layout | None, mode: Mode, why: str) -> CellRef:
    return CellRef(op=op, dtype=dtype, layout=layout, mode=mode, status=CellStatus.failed, reason=why, missing=True)


def required_cells(req: OperatorRequirement, index: CellIndex) -> tuple[list[CellKey], list[CellRef]]:
    """The cell keys ``req`` claims, and the claims without any probed rank (as failing refs)."""
    selection = resolve_ops(req.ops, index.ops)
    keys: list[CellKey] = []
    missing = [_not_probed(p, None, None, req.mode, "pattern matched no probed operator") for p in selection.unmatched]
    for op in selection.ops:
        for dtype in req.dtypes:
            for layout in req.layouts:
                ranks = list(req.ranks.ranks()) if req.ranks else index.ranks(op, dtype, layout, req.mode)
                if not ranks:
                    missing.append(_not_probed(op, dtype, layout, req.mode, "not probed"))
                keys.extend(CellKey(op, dtype, rank, layout, req.mode) for rank in ranks)
    return keys, missing


def _compile_cells(req: OperatorRequirement, index: CellIndex, judge: Judge) -> list[CellRef]:
    """``compile: true``: each (op, dtype) needs compile-mode cells in the claimed ranks / layouts, all ok."""
    compile_judge = Judge(
        worst_path=max(judge.worst_path, ExecPath.decomposed),
        fallback=judge.fallback,
        flaky=judge.flaky,
        min_pass_ratio=judge.min_pass_ratio,
        autograd=False,
        tolerances=judge.tolerances,
    )
    out: list[CellRef] = []
    for op in resolve_ops(req.ops, index.ops).ops:
        for dtype in req.dtypes:
            keys = [
                CellKey(op, dtype, rank, layout, Mode.compile)
                for layout in req.layouts
                for rank in index.ranks(op, dtype, layout, Mode.compile)
                if req.ranks is None or rank in req.ranks
            ]
            if not keys:
                out.append(_not_probed(op, dtype, None, Mode.compile, "compile required but no compile-mode cell was probed"))
            out.extend(judge_cell(index, key, compile_judge, req.conditions) for key in keys)
            if req.dynamic_shapes:
                out += _dynamic_cells(req, index, compile_judge, op, dtype)
    return out


def _dynamic_cells(req: OperatorRequirement, index: CellIndex, judge: Judge, op: str, dtype: DType) -> list[CellRef]:
    """``dynamic_shapes: true``: the (op, dtype)'s dynamic-shape compiled cells (any rank: probed on one
    sample) must exist in the claimed layouts and pass."""
    keys = [k for layout in req.layouts for k in index.dynamic_keys(op, dtype, layout)]
    if not keys:
        return [_not_probed(op, dtype, None, Mode.compile, "dynamic-shape compile required but no dynamic-shape "
                            "compiled cell was probed (one per op at float32; --compile all: every dtype)")]
    return [judge_cell(index, key, judge, req.conditions, dynamic=True) for key in keys]


def claimed_keys(req: OperatorRequirement, index: CellIndex) -> set[CellKey]:
    """Every probed cell key ``req`` claims (eager and, when compile is required, compile cells)."""
    keys, _ = required_cells(req, index)
    claimed = {k for k in keys if k in index}
    if req.compile:
        for op in resolve_ops(req.ops, index.ops).ops:
            for dtype in req.dtypes:
                for layout in req.layouts:
                    claimed.update(
                        CellKey(op, dtype, rank, layout, Mode.compile)
                        for rank in index.ranks(op, dtype, layout, Mode.compile)
                        if req.ranks is None or rank in req.ranks
                    )
    return claimed


def _status_of(cells: list[CellRef]) -> Status:
    if any(c.status is CellStatus.failed for c in cells):
        return Status.failed
    if any(c.status is CellStatus.waived for c in cells):
        return Status.waived
    return Status.passed


def requirement_title(req: OperatorRequirement) -> str:
    """A readable one-line description of an operator requirement."""
    ranks = f" ranks {req.ranks.min}-{req.ranks.max}" if req.ranks else ""
    extras = [f"worst path {req.worst_path}"]
    if req.autograd:
        extras.append("autograd")
    if req.compile:
        extras.append("compile, dynamic shapes" if req.dynamic_shapes else "compile")
    if req.accumulation is not None:
        extras.append(f"accumulation {req.accumulation}")
    if req.conditions:
        extras.append(", ".join(f"{k}={v}" for k, v in sorted(req.conditions.items())))
    return (
        f"{', '.join(req.ops)} [{', '.join(map(str, req.dtypes))}]{ranks} "
        f"{'/'.join(map(str, req.layouts))} {req.mode} ({'; '.join(extras)})"
    )


def evaluate_operators(
    req: OperatorRequirement, *, rid: str, level: int, blocking: bool, contract: Contract, index: CellIndex, book: WaiverBook
) -> RequirementResult:
    """Judge every cell an operator requirement claims."""
    judge = Judge.of(req, contract)
    keys, missing = required_cells(req, index)
    cells = [judge_cell(index, key, judge, req.conditions) for key in keys] + missing
    if req.compile and req.mode is Mode.eager:
        cells += _compile_cells(req, index, judge)
    cells = sorted((book.apply(c) for c in cells), key=lambda c: (c.status is CellStatus.passed, c.label()))
    title = requirement_title(req)
    if not cells:
        return RequirementResult(
            id=rid, level=level, kind="operators", title=title, status=Status.unknown, blocking=blocking,
            message="the requirement selects no cells (empty layouts?)",
        )
    status = _status_of(cells)
    failed = sum(c.status is CellStatus.failed for c in cells)
    waived = sum(c.status is CellStatus.waived for c in cells)
    not_probed = sum(c.status is CellStatus.failed and not c.probed for c in cells)
    message = f"{len(cells) - failed - waived}/{len(cells)} cells pass"
    if failed:
        message += f", {failed} fail" + (f" ({not_probed} not probed)" if not_probed else "")
    if waived:
        message += f", {waived} waived"
    return RequirementResult(
        id=rid, level=level, kind="operators", title=title, status=status, blocking=blocking, message=message,
        cells=cells, checked=len(cells), failed=failed, waived=waived, not_probed=not_probed,
    )


def _checks_named(runtime: Runtime, name: str, level: int) -> list[tuple[str, CheckResult | None, str]]:
    """(name, result, evidence) for a check name or a pattern over the checks of ``level``; a check
    that ran on each device of the run gives one entry per device (``kernel@refaccel:1``): a bad
    device is a finding of its own, named with its identity, never averaged into the others."""
    from .opsets import is_pattern

    if is_pattern(name):
        hits = [c for c in runtime.checks if c.level == level and fnmatch.fnmatchcase(c.name, name)]
        return [e for c in sorted(hits, key=lambda c: c.name) for e in _per_device(c)]
    check = runtime.check(name)
    return _per_device(check) if check else [(name, None, "")]


def _per_device(check: RuntimeCheck) -> list[tuple[str, CheckResult | None, str]]:
    if not check.devices:
        return [(check.name, check.result, check.advice or check.evidence)]
    return [(f"{check.name}@{d.device}", d.result,
             f"{d.evidence}{f' [{d.uuid}]' if d.uuid else ''}" + (f"; {check.advice}" if check.advice else ""))
            for d in check.devices]


def evaluate_check(
    name: str, *, rid: str, level: int, blocking: bool, runtime: Runtime, book: WaiverBook
) -> RequirementResult:
    """Judge a runtime check by name, or every check of the level a pattern (``*``) selects."""
    found = _checks_named(runtime, name, level)
    title = f"runtime check {name}"
    if not found:
        return RequirementResult(
            id=rid, level=level, kind="check", title=title, status=Status.unknown, blocking=blocking,
            message=f"no level-{level} runtime check matches {name!r} in the matrix (probe without --no-runtime)",
        )
    cells: list[CellRef] = []
    unknown: list[str] = []
    for check_name, result, evidence in found:
        op = f"check:{check_name}"
        if result in (CheckResult.passed, CheckResult.not_applicable):
            cells.append(CellRef(op=op, reason=str(result)))
        elif result is CheckResult.failed:
            cells.append(book.apply(CellRef(op=op, status=CellStatus.failed, reason=f"failed: {evidence}".rstrip(": "))))
        else:
            why = "did not run (absent from the matrix's runtime section)" if result is None else f"unknown: {evidence}"
            unknown.append(f"{check_name} {why}".rstrip(": "))
            cells.append(book.apply(CellRef(op=op, status=CellStatus.failed, reason=why.rstrip(": "), missing=True)))
    status = _status_of(cells)
    failed = [c for c in cells if c.status is CellStatus.failed]
    if failed and len(unknown) == len(failed):
        status = Status.unknown
    if status is Status.passed:
        message = ", ".join(f"{c.op[len('check:'):]}: {c.reason}" for c in cells)
    else:
        message = "; ".join(c.line() for c in cells if c.status is not CellStatus.passed)
    return RequirementResult(
        id=rid, level=level, kind="check", title=title, status=status, blocking=blocking, message=message,
        cells=cells, checked=len(cells), failed=len(failed), waived=sum(c.status is CellStatus.waived for c in cells),
    )
