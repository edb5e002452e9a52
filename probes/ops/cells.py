"""From sample results to cells: one cell per (overload, rank, layout, mode), with conditions.

When the samples of one cell took different paths, look for one argument feature that separates
them (``dim`` last vs first, a scalar vs a tensor operand, a flag) and record one result per
feature value, as the seed's ``aten.softmax.int`` entry does ("native for last-axis
contiguous, composite otherwise"). When no feature separates them the cell is ``mixed``, with
per-path counts and its worst path: never hidden.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from opmatrix.schema import (
    PROCESS_FAULTS,
    Accumulation,
    Autograd,
    CellRecord,
    CellResult,
    CellSource,
    DType,
    ErrorInfo,
    ExecPath,
    FallbackEvidence,
    FallbackState,
    Layout,
    Mode,
    Numerics,
    Outcome,
    ReferenceKind,
    Samples,
    Shapes,
)
from opmatrix.schema.conditions import ALWAYS_RECORDED, INPUT

__all__ = ["SampleResult", "cells_from_samples"]

#: argument features tried first when looking for a separating condition
_PREFERRED = ("dim", "axis", "dims")


@dataclass
class SampleResult:
    """What one sample did in one layout and mode."""

    op: str
    rank: int
    layout: Layout
    mode: Mode
    path: ExecPath
    outcome: Outcome
    features: dict[str, str] = field(default_factory=dict)
    components: list[str] = field(default_factory=list)
    fallback: FallbackState = FallbackState.unknown
    fallback_ops: list[str] = field(default_factory=list)
    fallback_source: str | None = None
    copies: int | None = None  # host<->device copies inside the call (profiler), when observed
    moved: int | None = None  # bytes those copies moved
    rtol: float | None = None
    atol: float | None = None
    max_abs: float | None = None
    max_rel: float | None = None
    reference: ReferenceKind = ReferenceKind.none
    error: ErrorInfo | None = None
    autograd: Autograd | None = None
    flaky: bool = False
    note: str | None = None
    #: the dtype the cell is filed under ("" : the task's); see :func:`opmatrix.probes.ops.units.dtype_of`
    dtype: str = ""
    #: how many output values differ from the reference (a ``wrong`` result), when counted
    mismatched: int | None = None
    #: the device refused the inputs while they were staged: the op never ran (nor will it compiled)
    unstaged: bool = False
    #: a compiled cell's shapes (static: ``dynamic=False``; dynamic: ``dynamic=True`` at two sizes)
    shapes: Shapes | None = None
    #: where the inputs came from when not OpInfo's own sample (a rank extension)
    source: CellSource | None = None
    #: the (op, dtype)'s accumulation mode and its evidence (:mod:`.accumulation`), on its eager cells
    accumulation: Accumulation | None = None
    accumulation_evidence: str | None = None

    def __post_init__(self) -> None:
        if self.mode is Mode.compile and self.shapes is None:  # every compile check but the dynamic one
            self.shapes = Shapes.static


def _separating_feature(samples: list[SampleResult]) -> str | None:
    names = set.intersection(*(set(s.features) for s in samples)) - ALWAYS_RECORDED - {INPUT}
    ordered = [n for n in _PREFERRED if n in names] + sorted(names - set(_PREFERRED))
    for name in ordered:
        by_label: dict[str, set[ExecPath]] = defaultdict(set)
        for s in samples:
            by_label[s.features[name]].add(s.path)
        if len(by_label) > 1 and all(len(paths) == 1 for paths in by_label.values()):
            return name
    return None


def _fault_split(samples: list[SampleResult]) -> str | None:
    """``input`` when the samples that faulted (crashed, hung ...) are exactly those with an empty
    input: the fault then gets its own ``input: empty`` group and the rest keep their results."""
    faulted = [s.outcome.fault in PROCESS_FAULTS for s in samples]
    if all(faulted) or not any(faulted):
        return None
    labels = [s.features.get(INPUT) for s in samples]
    if None in labels:
        return None
    bad = {label for label, f in zip(labels, faulted, strict=True) if f}
    good = {label for label, f in zip(labels, faulted, strict=True) if not f}
    return INPUT if bad == {"empty"} and good == {"nonempty"} else None


def _passes(s: SampleResult) -> bool:
    return s.outcome is Outcome.ok and s.path is not ExecPath.rejected


def _empty_split(samples: list[SampleResult]) -> str | None:
    """``input`` when only the samples with an empty input pass (ran and were right): support that
    holds for empty tensors alone (``softmax`` int16 on shape (5, 0, 0)) is conditional, and the
    ``input: nonempty`` group says what happens to real data."""
    labels = [s.features.get(INPUT) for s in samples]
    if None in labels or set(labels) != {"empty", "nonempty"}:
        return None
    passing = {label for label, s in zip(labels, samples, strict=True) if _passes(s)}
    failing = {label for label, s in zip(labels, samples, strict=True) if not _passes(s)}
    return INPUT if passing == {"empty"} and failing == {"nonempty"} else None


def _fallback(samples: list[SampleResult]) -> FallbackEvidence:
    states = {s.fallback for s in samples}
    if FallbackState.observed in states:
        state = FallbackState.observed
    elif states == {FallbackState.not_observed}:
        state = FallbackState.not_observed
    else:
        state = FallbackState.unknown
    ops = sorted({op for s in samples for op in s.fallback_ops})
    source = next((s.fallback_source for s in samples if s.fallback_source), None)
    copies = [s.copies for s in samples if s.copies is not None]
    moved = [s.moved for s in samples if s.moved is not None]
    return FallbackEvidence(state=state, ops=ops, source=source, copies_per_call=max(copies) if copies else None,
                            bytes_per_call=max(moved) if moved else None)


def _numerics(samples: list[SampleResult]) -> Numerics | None:
    measured = [s for s in samples if s.rtol is not None and s.atol is not None]
    if not measured:
        return None
    abs_errs = [s.max_abs for s in measured if s.max_abs is not None]
    rel_errs = [s.max_rel for s in measured if s.max_rel is not None]
    mismatched = [s.mismatched for s in measured if s.mismatched is not None]
    return Numerics(
        rtol=max(s.rtol for s in measured if s.rtol is not None),
        atol=max(s.atol for s in measured if s.atol is not None),
        max_abs_err=_round(max(abs_errs)) if abs_errs else None,
        max_rel_err=_round(max(rel_errs)) if rel_errs else None,
        mismatched=max(mismatched) if mismatched else None,
        reference=measured[0].reference,
        accumulation=measured[0].accumulation,
        accumulation_evidence=measured[0].accumulation_evidence,
    )


def _round(x: float) -> float:
    """Three significant digits: errors are evidence, not a source of diff noise."""
    return float(f"{x:.3g}") if x == x and x not in (float("inf"),) else x


def _autograd(samples: list[SampleResult]) -> Autograd | None:
    grads = [s.autograd for s in samples if s.autograd is not None]
    if not grads:
        return None
    errs = [g.max_abs_err for g in grads if g.max_abs_err is not None]
    return Autograd(
        path=max(g.path for g in grads),
        outcome=max(g.outcome for g in grads),
        max_abs_err=_round(max(errs)) if errs else None,
    )


def _result(samples: list[SampleResult], conditions: dict[str, str]) -> CellResult:
    paths = [s.path for s in samples]
    worst = max(paths)
    by_path: dict[ExecPath, int] = {}
    if len(set(paths)) > 1:
        for p in paths:
            by_path[p] = by_path.get(p, 0) + 1
    outcome = max(s.outcome for s in samples)
    # the error shown is one of a sample with the cell's outcome (a rejected sample's refusal
    # must not stand for another sample's error)
    errors = [s.error for s in sorted(samples, key=lambda s: s.outcome is not outcome) if s.error is not None]
    components = sorted({c for s in samples for c in s.components})
    notes = sorted({part for s in samples if s.note for part in s.note.split("; ")})
    return CellResult(
        path=worst,
        outcome=outcome,
        conditions=conditions,
        mixed=bool(by_path),
        flaky=any(s.flaky for s in samples),
        autograd=_autograd(samples),
        numerics=_numerics(samples),
        components=components,
        fallback=_fallback(samples),
        samples=Samples(
            probed=len(samples), passed=sum(s.outcome is Outcome.ok for s in samples), by_path=by_path
        ),
        error=errors[0] if errors else None,
        note="; ".join(notes) or None,
        shapes=samples[0].shapes,
        source=samples[0].source if len({s.source for s in samples}) == 1 else None,
    )


def cells_from_samples(samples: Iterable[SampleResult], dtype: str) -> list[CellRecord]:
    """Group sample results into cell records, splitting by a separating feature when one exists.

    A sample is filed under its own dtype (its first tensor's; ``dtype`` is the task's, for those
    that do not say)."""
    Key = tuple[str, str, int, Layout, Mode, str, tuple[tuple[str, str], ...]]
    groups: dict[Key, list[SampleResult]] = defaultdict(list)
    for s in samples:
        fixed = tuple(sorted((k, v) for k, v in s.features.items() if k in ALWAYS_RECORDED and v != "none"))
        shapes = s.shapes.value if s.shapes is not None else ""
        groups[(s.op, s.dtype or dtype, s.rank, s.layout, s.mode, shapes, fixed)].append(s)
    out: list[CellRecord] = []
    for (op, cell_dtype, rank, layout, mode, _shapes, fixed), group in sorted(
        groups.items(), key=lambda kv: (kv[0][0], kv[0][1], kv[0][2], kv[0][3].value, kv[0][4].value, kv[0][5], kv[0][6])
    ):
        feature = _separating_feature(group) if len({s.path for s in group}) > 1 else None
        feature = feature or _fault_split(group) or _empty_split(group)
        if feature is None:
            parts = [(dict(fixed), group)]
        else:
            by_label: dict[str, list[SampleResult]] = defaultdict(list)
            for s in group:
                by_label[s.features[feature]].append(s)
            parts = [({**dict(fixed), feature: label}, members) for label, members in sorted(by_label.items())]
        for conditions, members in parts:
            out.append(
                CellRecord(op=op, dtype=DType(cell_dtype), rank=rank, layout=layout, mode=mode,
                           result=_result(members, conditions))
            )
    return out
