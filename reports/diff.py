"""The diff page's content: cells better, worse, new and removed since a baseline (and drifted numerics).

The comparison is ``opmatrix.matrix.diff.diff_matrices`` (the same one ``opmatrix diff`` prints);
this module only arranges its compact rows into the page's sections::

    >>> view = diff_view(old, new)  # needs two matrices: not run  # doctest: +SKIP
    >>> [(r.op, r.dtypes, r.before, r.after) for r in view.worse]  # needs two matrices: not run  # doctest: +SKIP
    [('aten.add.Tensor', 'bfloat16', 'native', 'fallback')]
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass, field

from opmatrix.matrix.diff import diff_matrices
from opmatrix.schema import Matrix, describe

__all__ = ["DiffRow", "DiffView", "diff_view"]

#: (section id, heading), worst news first
SECTIONS: tuple[tuple[str, str], ...] = (
    ("worse", "Worse"),
    ("better", "Better"),
    ("new", "New"),
    ("removed", "Removed"),
    ("not_probed", "Not probed in the current matrix"),
    ("numerics", "Numerics drifted"),
)


@dataclass(frozen=True)
class DiffRow:
    """Cells of one op and mode that changed the same way: dtypes x ranks x layouts."""

    op: str
    dtypes: str
    mode: str
    ranks: str
    layouts: str
    conditions: str
    cells: int
    before: str
    after: str


@dataclass
class DiffView:
    """The sections of the diff page, and the two sides' labels."""

    a: str
    b: str
    rows: dict[str, list[DiffRow]] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    def sections(self) -> Iterator[tuple[str, str, list[DiffRow]]]:
        """(id, heading, rows) per section, worst news first."""
        for key, heading in SECTIONS:
            yield key, heading, self.rows.get(key, [])

    def __getattr__(self, name: str) -> list[DiffRow]:
        if name in dict(SECTIONS):
            return self.rows.get(name, [])
        raise AttributeError(name)


def _side(label: str) -> str:
    return "not probed" if label == "-" else label


def diff_view(baseline: Matrix, current: Matrix) -> DiffView:
    """Cells better, worse, new, removed and numerics drifted from ``baseline`` to ``current``."""
    diff = diff_matrices(baseline, current)
    rows: dict[str, list[DiffRow]] = defaultdict(list)
    for r in diff.rows():
        lo, hi = r.ranks
        rows[r.kind].append(
            DiffRow(
                op=r.op,
                dtypes=", ".join(r.dtypes),
                mode=r.mode,
                ranks=str(lo) if lo == hi else f"{lo}\u2013{hi}",
                layouts=", ".join(r.layouts),
                conditions=describe(r.conditions) if r.conditions else "",
                cells=len(r.dtypes) * (hi - lo + 1) * len(r.layouts),
                before=_side(r.before),
                after=_side(r.after),
            )
        )
    for section in rows.values():
        section.sort(key=lambda r: (r.op, r.mode, r.conditions, r.before, r.after, r.dtypes, r.ranks))
    return DiffView(a=diff.a, b=diff.b, rows=dict(rows), counts=diff.counts())
