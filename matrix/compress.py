"""Compression: probed cells with identical results become entries (dtypes x rank range x layouts).

Cells of one operator and mode are grouped by their :func:`~opmatrix.matrix.rollup.result_key`
(everything but max errors and sample counts). Each group's cells are then covered *exactly* by
boxes, greedily and deterministically:

1. per (dtype, layout), the probed ranks are cut into maximal contiguous runs;
2. (dtype, run) pairs that share their layout set merge into one layout set;
3. (run, layout set) pairs that share it merge their dtypes.

The same is tried with layouts before ranks, and the plan with fewer boxes wins (ties: ranks
first). Every box holds only probed cells, so expanding the entries gives back exactly the
probed cells, e.g. ``softmax`` float32 + bfloat16 at ranks 2..5, contiguous, ``dim: last`` ->
one entry. Within a box the results are aggregated (max errors, summed samples).

:func:`compress_cells` then groups each operator's boxes into contract-level entries
(:mod:`.grouping`: one per mode, path and outcome, the boxes kept as exact ``parts``).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Hashable, Iterable, Mapping
from dataclasses import dataclass

from opmatrix.schema import CellResult, DType, Entry, Layout, Mode, RankRange

from .grouping import group_entries
from .rollup import aggregate, result_key

__all__ = ["Box", "GridPoint", "compress_cells", "compress_op", "cover", "entry_sort_key"]

#: one cell within an operator, mode and condition group: (dtype, rank, layout), a point of the grid a
#: Box covers (the cell key across operators is :class:`opmatrix.schema.CellKey`)
GridPoint = tuple[DType, int, Layout]

_LAYOUT_ORDER = {layout: i for i, layout in enumerate(Layout)}


@dataclass(frozen=True)
class Box:
    """dtypes x ranks min..max x layouts, each axis sorted (dtypes by name, layouts as declared)."""

    dtypes: tuple[DType, ...]
    rmin: int
    rmax: int
    layouts: tuple[Layout, ...]

    def cells(self) -> Iterable[GridPoint]:
        """Every cell in the box."""
        for d in self.dtypes:
            for r in range(self.rmin, self.rmax + 1):
                for lay in self.layouts:
                    yield d, r, lay


def rank_runs(ranks: Iterable[int]) -> list[tuple[int, int]]:
    """Consecutive runs of ranks: [1, 2, 3, 5] -> [(1, 3), (5, 5)]."""
    out: list[tuple[int, int]] = []
    for r in sorted(set(ranks)):
        if out and out[-1][1] == r - 1:
            out[-1] = (out[-1][0], r)
        else:
            out.append((r, r))
    return out


def _dtypes(values: Iterable[DType]) -> tuple[DType, ...]:
    return tuple(sorted(set(values), key=lambda d: d.value))


def _layouts(values: Iterable[Layout]) -> tuple[Layout, ...]:
    return tuple(sorted(set(values), key=_LAYOUT_ORDER.__getitem__))


def _ranks_first(cells: set[GridPoint]) -> list[Box]:
    ranks: dict[tuple[DType, Layout], list[int]] = defaultdict(list)
    for d, r, lay in cells:
        ranks[d, lay].append(r)
    layouts: dict[tuple[DType, int, int], list[Layout]] = defaultdict(list)
    for (d, lay), rs in ranks.items():
        for lo, hi in rank_runs(rs):
            layouts[d, lo, hi].append(lay)
    dtypes: dict[tuple[int, int, tuple[Layout, ...]], list[DType]] = defaultdict(list)
    for (d, lo, hi), lays in layouts.items():
        dtypes[lo, hi, _layouts(lays)].append(d)
    return [Box(_dtypes(ds), lo, hi, lays) for (lo, hi, lays), ds in dtypes.items()]


def _layouts_first(cells: set[GridPoint]) -> list[Box]:
    lays: dict[tuple[DType, int], list[Layout]] = defaultdict(list)
    for d, r, lay in cells:
        lays[d, r].append(lay)
    ranks: dict[tuple[DType, tuple[Layout, ...]], list[int]] = defaultdict(list)
    for (d, r), found in lays.items():
        ranks[d, _layouts(found)].append(r)
    dtypes: dict[tuple[int, int, tuple[Layout, ...]], list[DType]] = defaultdict(list)
    for (d, ls), rs in ranks.items():
        for lo, hi in rank_runs(rs):
            dtypes[lo, hi, ls].append(d)
    return [Box(_dtypes(ds), lo, hi, ls) for (lo, hi, ls), ds in dtypes.items()]


def _box_order(box: Box) -> tuple[object, ...]:
    return (box.dtypes[0].value, box.rmin, box.rmax, [_LAYOUT_ORDER[x] for x in box.layouts], box.dtypes)


def cover(cells: Iterable[GridPoint]) -> list[Box]:
    """Disjoint boxes that together hold exactly ``cells``; deterministic, close to minimal."""
    unique = set(cells)
    if not unique:
        return []
    plan = min((_ranks_first(unique), _layouts_first(unique)), key=len)
    return sorted(plan, key=_box_order)


def entry_sort_key(entry: Entry) -> tuple[object, ...]:
    """Entries of one operator: by mode, path, outcome, conditions, then what they cover."""
    return (
        list(Mode).index(entry.mode),
        entry.path.rank,
        entry.outcome.rank,
        sorted(entry.conditions.items()),
        [d.value for d in entry.dtypes],
        entry.ranks.min,
        entry.ranks.max,
        [_LAYOUT_ORDER[x] for x in entry.layouts],
        entry.model_dump_json(),
    )


def compress_op(cells: Mapping[tuple[Mode, GridPoint, tuple[tuple[str, str], ...]], CellResult]) -> list[Entry]:
    """Entries for one operator's cells, keyed (mode, (dtype, rank, layout), conditions)."""
    groups: dict[tuple[Mode, Hashable], dict[GridPoint, CellResult]] = defaultdict(dict)
    for (mode, cell, _conditions), result in cells.items():
        # conditions are part of the result key, so groups never mix condition groups
        groups[mode, result_key(result)][cell] = result
    entries: list[Entry] = []
    for (mode, _key), members in groups.items():
        for box in cover(members):
            merged = aggregate([members[c] for c in box.cells()])
            entries.append(
                Entry(
                    **dict(merged),
                    dtypes=list(box.dtypes),
                    ranks=RankRange(min=box.rmin, max=box.rmax),
                    layouts=list(box.layouts),
                    mode=mode,
                )
            )
    entries.sort(key=entry_sort_key)
    return entries


def compress_cells(
    cells: Mapping[tuple[str, Mode, GridPoint, tuple[tuple[str, str], ...]], CellResult],
    *,
    contract: bool = True,
) -> dict[str, list[Entry]]:
    """Operator name -> sorted entries, for cells keyed (op, mode, (dtype, rank, layout), conditions).

    ``contract`` (the default) groups each operator's boxes into contract-level entries
    (:mod:`.grouping`); ``contract=False`` gives the exact boxes themselves (what
    :meth:`~opmatrix.schema.Matrix.boxes` gives back from the contract-level entries).
    """
    by_op: dict[str, dict[tuple[Mode, GridPoint, tuple[tuple[str, str], ...]], CellResult]] = defaultdict(dict)
    for (op, mode, cell, conditions), result in cells.items():
        by_op[op][mode, cell, conditions] = result
    boxes = {op: compress_op(by_op[op]) for op in sorted(by_op)}
    return {op: group_entries(entries) for op, entries in boxes.items()} if contract else boxes
