"""The diff page's content: cells better, worse, new and removed since a baseline matrix.

A cell is (op, dtype, rank, layout, mode); its state is the worst (outcome, path) of the entries
covering it (conditional entries can cover one cell more than once). States order by outcome
first, then path, so ``wrong`` on a native kernel is worse than a correct host fallback. Rows group
cells of one op, dtype and mode with the same change, listing their ranks and layouts::

    >>> view = diff_view(old, new)                                   # doctest: +SKIP
    >>> [(r.op, r.dtype, r.before, r.after) for r in view.worse]     # doctest: +SKIP
    [('aten.add.Tensor', 'bfloat16', 'native', 'fallback')]

When ``opmatrix.matrix.diff.diff_matrices`` is available its cell changes are used; otherwise the
small cell comparison here stands in for it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from opmatrix.schema import ExecPath, Matrix, Outcome
from opmatrix.schema.enums import DTYPES

__all__ = ["DiffRow", "DiffView", "diff_view"]

#: (op, dtype, rank, layout, mode)
Cell = tuple[str, str, int, str, str]
#: (outcome rank, path rank): compared as a tuple, outcome first; larger is worse
State = tuple[int, int]


@dataclass(frozen=True)
class DiffRow:
    """Cells of one op and mode that changed the same way (dtypes joined when ranks and layouts agree)."""

    op: str
    dtype: str
    mode: str
    ranks: str
    layouts: str
    cells: int
    before: str
    after: str


@dataclass
class DiffView:
    """The four sections of the diff page."""

    better: list[DiffRow] = field(default_factory=list)
    worse: list[DiffRow] = field(default_factory=list)
    new: list[DiffRow] = field(default_factory=list)
    removed: list[DiffRow] = field(default_factory=list)

    def sections(self) -> Iterator[tuple[str, str, list[DiffRow]]]:
        """(id, heading, rows) per section, worst news first."""
        yield "worse", "Worse", self.worse
        yield "better", "Better", self.better
        yield "new", "New", self.new
        yield "removed", "Removed", self.removed


_OUTCOME_RANK = {o: i for i, o in enumerate(Outcome)}
_PATH_RANK = {p: i for i, p in enumerate(ExecPath)}


def _states(matrix: Matrix) -> dict[Cell, State]:
    """The worst (outcome rank, path rank) of every cell; keys are plain strings for speed."""
    out: dict[Cell, State] = {}
    for op, entries in matrix.operators.items():
        for entry in entries:
            state = (_OUTCOME_RANK[entry.outcome], _PATH_RANK[entry.path])
            layouts = [layout.value for layout in entry.layouts]
            mode = entry.mode.value
            for dtype in entry.dtypes:
                for rank in entry.ranks.ranks():
                    for layout in layouts:
                        key = (op, dtype.value, rank, layout, mode)
                        old = out.get(key)
                        if old is None or state > old:
                            out[key] = state
    return out


_OUTCOMES = list(Outcome)
_PATHS = list(ExecPath)


def _label(state: State | None) -> str:
    if state is None:
        return "not probed"
    outcome, path = _OUTCOMES[state[0]], _PATHS[state[1]]
    return path.value if outcome is Outcome.ok else f"{path.value} ({outcome.value})"


def _ranks(ranks: set[int]) -> str:
    ordered = sorted(ranks)
    spans: list[str] = []
    start = prev = ordered[0]
    for r in ordered[1:] + [None]:  # type: ignore[list-item]
        if r is not None and r == prev + 1:
            prev = r
            continue
        spans.append(str(start) if start == prev else f"{start}\u2013{prev}")
        if r is not None:
            start = prev = r
    return ", ".join(spans)


def _rows(changes: list[tuple[Cell, State | None, State | None]]) -> list[DiffRow]:
    # cells -> (op, dtype, mode, change) groups -> rows merging dtypes with the same ranks and layouts
    groups: dict[tuple[str, str, str, str, str], list[Cell]] = defaultdict(list)
    for cell, before, after in changes:
        op, dtype, _rank, _layout, mode = cell
        groups[(op, dtype, mode, _label(before), _label(after))].append(cell)
    merged: dict[tuple[str, str, str, str, str, str], list[str]] = defaultdict(list)
    sizes: dict[tuple[str, str, str, str, str, str], int] = defaultdict(int)
    for (op, dtype, mode, before, after), cells in groups.items():
        ranks = _ranks({c[2] for c in cells})
        layouts = ", ".join(sorted({c[3] for c in cells}))
        key = (op, mode, ranks, layouts, before, after)
        merged[key].append(dtype)
        sizes[key] += len(cells)
    order = {d: i for i, d in enumerate(DTYPES)}
    rows = [
        DiffRow(
            op=op,
            dtype=", ".join(sorted(dtypes, key=lambda d: order.get(d, len(order)))),
            mode=mode,
            ranks=ranks,
            layouts=layouts,
            cells=sizes[(op, mode, ranks, layouts, before, after)],
            before=before,
            after=after,
        )
        for (op, mode, ranks, layouts, before, after), dtypes in merged.items()
    ]
    rows.sort(key=lambda r: (r.op, r.mode, r.before, r.after, r.dtype, r.ranks))
    return rows


def diff_view(baseline: Matrix, current: Matrix) -> DiffView:
    """Cells better, worse, new and removed going from ``baseline`` to ``current``."""
    old, new = _states(baseline), _states(current)
    better, worse, added, removed = [], [], [], []
    for cell in old.keys() | new.keys():
        a, b = old.get(cell), new.get(cell)
        if a is None:
            added.append((cell, a, b))
        elif b is None:
            removed.append((cell, a, b))
        elif b < a:
            better.append((cell, a, b))
        elif b > a:
            worse.append((cell, a, b))
    return DiffView(better=_rows(better), worse=_rows(worse), new=_rows(added), removed=_rows(removed))
