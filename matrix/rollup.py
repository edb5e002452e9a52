"""Roll-up: several results for one cell become one honest result.

The same cell key (op, dtype, rank, layout, mode, conditions) is often probed more than once: the
OpInfos ``add`` and ``__radd__`` both call ``aten.add.Tensor``. The rules, in order of precedence::

    >>> rollup([native_ok, composite_wrong]).path, _.outcome  # names cells it does not build: not run  # doctest: +SKIP
    (ExecPath.composite, Outcome.wrong)

- a composite whose component op fell back to the host *is* ``fallback`` (the component is kept
  in ``components`` and ``fallback.ops``) -- applied to every input by :func:`normalise`;
- the worst path wins (:class:`ExecPath` is ordered best to worst);
- the worst outcome wins: ``wrong`` outranks ``ok``, faults (error/oom/hung/crashed/poisoned)
  are kept, never rounded away;
- samples are summed (partial support stays visible as passed / probed); per-path counts merge;
- max errors take the max, tolerances the loosest that was applied;
- component ops and host-fallback ops are unioned; fallback state: observed > unknown >
  not_observed;
- ``mixed`` when the inputs took different paths (or any input was mixed); ``flaky`` is OR-ed;
- the devices that produced the inputs are unioned, and so are device disagreements.

The result never depends on the order of its inputs.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Sequence
from typing import TypeVar

from opmatrix.schema import (
    Accumulation,
    Autograd,
    CellResult,
    DeviceOutcome,
    ErrorInfo,
    ExecPath,
    FallbackEvidence,
    FallbackState,
    Numerics,
    ReferenceKind,
    Samples,
)

__all__ = ["RESULT_KEY_FIELDS", "aggregate", "normalise", "result_key", "rollup", "union_devices"]

_FALLBACK_RANK = {FallbackState.not_observed: 0, FallbackState.unknown: 1, FallbackState.observed: 2}
_REFERENCE_PREFERENCE = (ReferenceKind.cpu_upcast, ReferenceKind.cpu_same_dtype, ReferenceKind.none)

#: CellResult fields that :func:`result_key` covers (a test pins this to ``CellResult.model_fields``
#: so that a new schema field cannot be silently merged away by compression).
RESULT_KEY_FIELDS = frozenset(
    {
        "path", "outcome", "conditions", "mixed", "flaky", "autograd", "numerics", "components",
        "fallback", "samples", "error", "note", "devices", "device_dependent", "shapes", "source",
    }
)


def normalise(result: CellResult) -> CellResult:
    """Apply "a composite whose component fell back is fallback" to one result."""
    if result.path is ExecPath.composite and result.fallback.state is FallbackState.observed:
        note = result.note
        if not result.fallback.ops:
            note = _join_notes([note, "a component op fell back to the host (which one was not recorded)"])
        return result.model_copy(update={"path": ExecPath.fallback, "note": note})
    return result


def result_key(result: CellResult) -> Hashable:
    """Everything of a result except max errors, sample counts and which devices produced it:
    equal keys compress together (the entry lists the union of its devices)."""
    num = result.numerics
    ag = result.autograd
    fb = result.fallback
    err = result.error
    return (
        result.path,
        result.outcome,
        tuple(sorted(result.conditions.items())),
        result.mixed,
        result.flaky,
        None if ag is None else (ag.path, ag.outcome),
        None if num is None else (num.atol, num.rtol, num.reference, num.accumulation, num.accumulation_evidence),
        tuple(result.components),
        (fb.state, tuple(fb.ops), fb.source),
        None if err is None else (err.type, err.message, err.actionable, err.signal),
        result.note,
        tuple((d.device, d.uuid, d.path, d.outcome) for d in result.device_dependent),
        result.shapes,
        result.source,
    )


def union_devices(items: Iterable[CellResult]) -> list[str]:
    """The devices that produced ``items``, sorted by name then index (refaccel:2 before refaccel:10)."""
    return sorted({d for r in items for d in r.devices}, key=_device_order)


def _device_order(name: str) -> tuple[str, int, str]:
    kind, _, index = name.rpartition(":")
    return (kind, int(index), name) if index.isdigit() else (name, -1, name)


def _device_dependent(items: Sequence[CellResult]) -> list[DeviceOutcome]:
    found = {(d.device, d.uuid, d.path, d.outcome): d for r in items for d in r.device_dependent}
    return [found[k] for k in sorted(found, key=lambda k: (_device_order(k[0]), k[1] or "", k[2].rank, k[3].rank))]


_N = TypeVar("_N", int, float)


def _max_opt(values: Iterable[_N | None]) -> _N | None:
    present = [v for v in values if v is not None]
    return max(present) if present else None


def _union(lists: Iterable[Sequence[str]]) -> list[str]:
    """The lists' common order when they agree, else their sorted union (order-independent)."""
    distinct = {tuple(items) for items in lists}
    if len(distinct) == 1:
        return list(next(iter(distinct)))
    return sorted({item for items in distinct for item in items})


def _join_notes(notes: Iterable[str | None]) -> str | None:
    """The distinct parts of the notes (a note is parts joined by "; ": one that repeats another's
    part says it once)."""
    parts = dict.fromkeys(part for n in sorted({n for n in notes if n}) for part in n.split("; "))
    return "; ".join(parts) or None


def _numerics(items: Sequence[Numerics]) -> Numerics | None:
    if not items:
        return None
    refs = {n.reference for n in items}
    return Numerics(
        atol=max(n.atol for n in items),
        rtol=max(n.rtol for n in items),
        max_abs_err=_max_opt(n.max_abs_err for n in items),
        max_rel_err=_max_opt(n.max_rel_err for n in items),
        mismatched=_max_opt(n.mismatched for n in items),
        reference=next(r for r in _REFERENCE_PREFERENCE if r in refs),
        accumulation=accumulation_of(items)[0],
        accumulation_evidence=accumulation_of(items)[1],
    )


def accumulation_of(items: Sequence[Numerics]) -> tuple[Accumulation | None, str | None]:
    """The accumulation mode several numerics agree on, with its evidence; ``unknown`` (saying
    so) when they differ."""
    found = {(n.accumulation, n.accumulation_evidence) for n in items if n.accumulation is not None}
    if not found:
        return None, None
    modes = {mode for mode, _ in found if mode is not None}
    if len(modes) == 1:
        return modes.pop(), _join_notes(e for _, e in found)
    return Accumulation.unknown, f"measurements disagree: {', '.join(sorted(m.value for m in modes))}"


def _autograd(items: Sequence[Autograd]) -> Autograd | None:
    if not items:
        return None
    return Autograd(
        path=max(a.path for a in items),
        outcome=max(a.outcome for a in items),
        max_abs_err=_max_opt(a.max_abs_err for a in items),
    )


def _fallback(items: Sequence[FallbackEvidence]) -> FallbackEvidence:
    state = max((f.state for f in items), key=_FALLBACK_RANK.__getitem__)
    sources = sorted({f.source for f in items if f.source})
    return FallbackEvidence(state=state, ops=_union(f.ops for f in items), source="; ".join(sources) or None,
                            **_transfers(items))


def _transfers(items: Sequence[FallbackEvidence]) -> dict[str, int | None]:
    """The most copies and bytes per call over ``items`` (like max errors: not part of the key)."""
    copies = [f.copies_per_call for f in items if f.copies_per_call is not None]
    moved = [f.bytes_per_call for f in items if f.bytes_per_call is not None]
    return {"copies_per_call": max(copies) if copies else None, "bytes_per_call": max(moved) if moved else None}


def _samples(items: Sequence[CellResult], mixed: bool) -> Samples:
    by_path: dict[ExecPath, int] = {}
    if mixed or any(r.samples.by_path for r in items):
        for r in items:
            counts = r.samples.by_path or {r.path: r.samples.probed}
            for path, count in counts.items():
                by_path[path] = by_path.get(path, 0) + count
    return Samples(
        probed=sum(r.samples.probed for r in items),
        passed=sum(r.samples.passed for r in items),
        by_path=dict(sorted(by_path.items(), key=lambda kv: kv[0].rank)),
    )


def _error(items: Sequence[CellResult]) -> ErrorInfo | None:
    # the error that goes with the worst result is the one worth reading; ties broken by content
    ranked = sorted(
        (r for r in items if r.error is not None),
        key=lambda r: (-r.outcome.rank, -r.path.rank, r.error.model_dump_json() if r.error else ""),
    )
    return ranked[0].error if ranked else None


def rollup(results: Iterable[CellResult]) -> CellResult:
    """One result for several results of the same cell key (rules in the module docstring)."""
    items = [normalise(r) for r in results]
    if not items:
        raise ValueError("rollup needs at least one result")
    if len(items) == 1:
        return items[0]
    conditions = {tuple(sorted(r.conditions.items())) for r in items}
    if len(conditions) != 1:
        raise ValueError(f"rollup of results with different conditions: {sorted(conditions)}")
    paths = {r.path for r in items}
    mixed = len(paths) > 1 or any(r.mixed for r in items)
    return CellResult(
        path=max(paths),
        outcome=max(r.outcome for r in items),
        conditions=items[0].conditions,
        mixed=mixed,
        flaky=any(r.flaky for r in items),
        autograd=_autograd([r.autograd for r in items if r.autograd is not None]),
        numerics=_numerics([r.numerics for r in items if r.numerics is not None]),
        components=_union(r.components for r in items),
        fallback=_fallback([r.fallback for r in items]),
        samples=_samples(items, mixed),
        error=_error(items),
        note=_join_notes(r.note for r in items),
        devices=union_devices(items),
        device_dependent=_device_dependent(items),
        shapes=items[0].shapes,
        # an OpInfo sample's result at this cell makes it OpInfo's, whatever an extension added
        source=items[0].source if len({r.source for r in items}) == 1 else None,
    )


def aggregate(results: Sequence[CellResult]) -> CellResult:
    """Merge results with equal :func:`result_key` (compression): max errors, summed samples."""
    first = results[0]
    if len(results) == 1:
        return first
    update: dict[str, object] = {"samples": _samples(results, first.mixed)}
    if any(r.devices for r in results):
        update["devices"] = union_devices(results)
    if first.numerics is not None:
        nums = [r.numerics for r in results if r.numerics is not None]
        update["numerics"] = first.numerics.model_copy(
            update={
                "max_abs_err": _max_opt(n.max_abs_err for n in nums),
                "max_rel_err": _max_opt(n.max_rel_err for n in nums),
                "mismatched": _max_opt(n.mismatched for n in nums),
            }
        )
    if first.fallback.copies_per_call is not None or any(r.fallback.copies_per_call for r in results):
        update["fallback"] = first.fallback.model_copy(update=_transfers([r.fallback for r in results]))
    if first.autograd is not None:
        grads = [r.autograd for r in results if r.autograd is not None]
        update["autograd"] = first.autograd.model_copy(
            update={"max_abs_err": _max_opt(a.max_abs_err for a in grads)}
        )
    return first.model_copy(update=update)
