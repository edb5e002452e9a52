"""Contract-level entries: exact boxes grouped the way a support contract reads.

Compression (:mod:`.compress`) covers the cells of each distinct result with boxes (dtypes x rank
range x layouts). A contract reads per operator and path, not per box: "native for dim=last on
contiguous input, composite otherwise; fp32, bf16, fp16". So boxes of one operator that agree on
mode, path, outcome, mixed, component ops and fallback evidence become one entry; the
boxes stay inside it as ``parts`` (each with its own dtypes, ranks, layouts, conditions, numerics,
samples, autograd, error), so expanding an entry gives back exactly the boxes, and the cells::

    >>> [len(group_entries(boxes)) for boxes in (softmax_boxes,)]  # names entries it does not build: not run  # doctest: +SKIP
    [5]      # eager native, eager composite, eager rejected, compile native, compile rejected

The entry's own fields say what holds for all its parts: dtypes (union), ranks (hull), layouts
(union), conditions (those every part has), samples (summed), numerics per dtype
(``numerics_by_dtype``: loosest tolerance, largest errors), autograd (the worst part), the error of
its first part that has one. A group of one box stays a plain entry.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Sequence

from opmatrix.schema import DType, Entry, EntryPart, ExecPath, Numerics, RankRange, Samples

from .rollup import _autograd as worst_autograd
from .rollup import _join_notes, _max_opt, accumulation_of, union_devices

__all__ = ["group_entries", "group_key"]


def group_key(entry: Entry) -> Hashable:
    """What boxes of one contract-level entry share (everything else lives in the parts)."""
    fb = entry.fallback
    return (
        entry.mode,
        entry.shapes,
        entry.path,
        entry.outcome,
        entry.mixed,
        tuple(entry.components),
        (fb.state, tuple(fb.ops), fb.source),
        tuple((d.device, d.uuid, d.path, d.outcome) for d in entry.device_dependent),
    )


def _part(box: Entry) -> EntryPart:
    return EntryPart(
        dtypes=box.dtypes, ranks=box.ranks, layouts=box.layouts, conditions=box.conditions, flaky=box.flaky,
        autograd=box.autograd, numerics=box.numerics, samples=box.samples, error=box.error, note=box.note,
        source=box.source,
    )


def _samples(parts: Sequence[EntryPart]) -> Samples:
    by_path: dict[ExecPath, int] = {}
    for p in parts:
        for path, count in p.samples.by_path.items():
            by_path[path] = by_path.get(path, 0) + count
    return Samples(
        probed=sum(p.samples.probed for p in parts),
        passed=sum(p.samples.passed for p in parts),
        by_path=dict(sorted(by_path.items(), key=lambda kv: kv[0].rank)),
    )


def _numerics_by_dtype(parts: Sequence[EntryPart]) -> dict[DType, Numerics]:
    found: dict[DType, list[Numerics]] = defaultdict(list)
    for p in parts:
        if p.numerics is not None:
            for d in p.dtypes:
                found[d].append(p.numerics)
    out: dict[DType, Numerics] = {}
    for d in sorted(found, key=lambda x: x.value):
        items = found[d]
        out[d] = Numerics(
            atol=max(n.atol for n in items),
            rtol=max(n.rtol for n in items),
            max_abs_err=_max_opt(n.max_abs_err for n in items),
            max_rel_err=_max_opt(n.max_rel_err for n in items),
            mismatched=_max_opt(n.mismatched for n in items),
            reference=items[0].reference,
            accumulation=accumulation_of(items)[0],
            accumulation_evidence=accumulation_of(items)[1],
        )
    return out


def _common_conditions(parts: Sequence[EntryPart]) -> dict[str, str]:
    first = parts[0].conditions
    return {k: v for k, v in sorted(first.items()) if all(p.conditions.get(k) == v for p in parts)}


def _merge(boxes: Sequence[Entry]) -> Entry:
    """One contract-level entry for boxes with equal :func:`group_key` (two or more)."""
    parts = [_part(b) for b in boxes]
    by_dtype = _numerics_by_dtype(parts)
    tolerances = {(n.atol, n.rtol, n.reference) for n in by_dtype.values()}
    head = boxes[0]
    return Entry(
        path=head.path,
        outcome=head.outcome,
        conditions=_common_conditions(parts),
        mixed=head.mixed,
        flaky=any(p.flaky for p in parts),
        autograd=worst_autograd([p.autograd for p in parts if p.autograd is not None]),
        numerics=next(iter(by_dtype.values())) if len(by_dtype) == 1 and len(tolerances) == 1 else None,
        components=head.components,
        fallback=head.fallback,
        samples=_samples(parts),
        error=next((p.error for p in parts if p.error is not None), None),
        note=_join_notes(p.note for p in parts),
        dtypes=sorted({d for p in parts for d in p.dtypes}, key=lambda d: d.value),
        ranks=RankRange(min=min(p.ranks.min for p in parts), max=max(p.ranks.max for p in parts)),
        layouts=[lay for lay in type(head.layouts[0]) if any(lay in p.layouts for p in parts)],
        mode=head.mode,
        shapes=head.shapes,
        numerics_by_dtype=by_dtype if len(by_dtype) > 1 else {},
        parts=parts,
        devices=union_devices(boxes),
        device_dependent=head.device_dependent,
    )


def group_entries(boxes: Sequence[Entry]) -> list[Entry]:
    """Contract-level entries for one operator's sorted box entries (order of first appearance)."""
    groups: dict[Hashable, list[Entry]] = {}
    for box in boxes:
        if box.parts:
            raise ValueError("group_entries takes box entries; expand contract-level entries with Entry.boxes()")
        groups.setdefault(group_key(box), []).append(box)
    return [members[0] if len(members) == 1 else _merge(members) for members in groups.values()]
